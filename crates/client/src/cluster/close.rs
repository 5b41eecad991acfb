//! A cluster client that closes tells its shards (`ShardLeave`).

use milliscale_milana::types::ShardId;

use super::{Cluster, lock};
use crate::proto;

impl Cluster {
    /// Tell every shard in the map that this client has left
    /// (`ShardLeave`), so that its low-water mark stops holding back the
    /// watermark below which the shards collect old versions and forget
    /// decided transactions. A client that just stops is held for the
    /// shards' client silence (10 s by default) after its last request,
    /// and with it every version replaced and every decision taken
    /// meanwhile, by any client.
    ///
    /// Call it last: a later call from this client (or a clone of it)
    /// counts as a new client's. Nothing is sent while a transaction of
    /// this client is under way (on a clone); returns whether it was sent.
    /// Best effort: a shard that does not answer within the call timeout
    /// forgets the client after its silence.
    pub async fn close(&self) -> bool {
        if !lock(&self.inner.active).is_empty() {
            return false;
        }
        let shards: Vec<ShardId> = self.map().shards.keys().copied().collect();
        let mut calls = tokio::task::JoinSet::new();
        for c in shards.into_iter().filter_map(|s| self.shard(s).ok()) {
            let (client, timeout) = (self.inner.id, self.inner.builder.rpc_timeout);
            calls.spawn(async move {
                let mut stub = c.stub();
                let leave = stub.shard_leave(c.req(proto::ShardLeaveRequest { client }));
                let _ = tokio::time::timeout(timeout, leave).await;
            });
        }
        while calls.join_next().await.is_some() {}
        true
    }
}
