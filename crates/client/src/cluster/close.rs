//! A cluster client that closes tells its shards (`ShardLeave`).

use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;

use milliscale_milana::types::ShardId;

use super::{Cluster, Inner, lock, physical_now};
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
        self.leave().await;
        true
    }

    /// `ShardLeave` to every shard in the map.
    async fn leave(&self) {
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
    }
}

/// While the client lives: once it has had no transaction under way and
/// sent no mark for `idle`, tell its shards it left, once until its next
/// mark. (A transaction that begins while the leave is on its way may
/// have its mark dropped with it: so this is off by default, see
/// `ClusterBuilder::idle_leave`.)
pub(super) async fn leave_while_idle(inner: Weak<Inner>, idle: Duration) {
    loop {
        tokio::time::sleep(idle / 2).await;
        let Some(inner) = inner.upgrade() else { return };
        let quiet = physical_now().saturating_sub(inner.marked.load(Ordering::Relaxed));
        if quiet >= idle.as_micros() as u64
            && lock(&inner.active).is_empty()
            && !inner.left.swap(true, Ordering::Relaxed)
        {
            Cluster { inner }.leave().await;
        }
    }
}

/// A client dropped without [`Cluster::close`] (its last clone gone, no
/// transaction under way then) leaves its shards from a task of its own,
/// if a runtime is there to run it; else they forget it after their
/// client silence.
impl Drop for Inner {
    fn drop(&mut self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        if self.left.load(Ordering::Relaxed) {
            return;
        }
        let conns: Vec<_> = lock(&self.conns).values().map(|(_, c)| c.clone()).collect();
        let (client, timeout) = (self.id, self.builder.rpc_timeout);
        rt.spawn(async move {
            for c in conns {
                let mut stub = c.stub();
                let leave = stub.shard_leave(c.req(proto::ShardLeaveRequest { client }));
                let _ = tokio::time::timeout(timeout, leave).await;
            }
        });
    }
}
