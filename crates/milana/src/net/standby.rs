//! A shard's hot standby: a read replica of the shard's log database
//! that watches the primary and, once the primary stops answering, takes
//! over.
//!
//! Taking over: promote the replica (the engine fences the old primary
//! through the database's manifest, so a primary that was only slow can
//! no longer make anything durable, and so can no longer answer), read
//! the log's records for the participant's recovery, and publish the next
//! shard map with this standby's address, so that clients and the other
//! primaries find it. The map is published with a conditional write; a
//! publisher that loses the race reads the newest map and tries again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use milliscale::{Options, Replica};
use tonic::transport::Channel;

use super::proto::{self, shard_client::ShardClient};
use crate::log::Record;
use crate::shard_log::ShardLog;
use crate::shard_map::{MapError, MapStore};
use crate::types::ShardId;

/// How the standby watches its primary.
#[derive(Debug, Clone)]
pub struct Watch {
    /// Ask the primary this often.
    pub every: Duration,
    /// Take over after this many answers missed in a row.
    pub misses: u32,
    /// How long one answer may take before it counts as missed.
    pub patience: Duration,
}

impl Default for Watch {
    /// Every 100 ms; take over after 5 misses of 250 ms each (a busy
    /// primary is not a dead one: a takeover fences it).
    fn default() -> Watch {
        Watch { every: Duration::from_millis(100), misses: 5, patience: Duration::from_millis(250) }
    }
}

/// Follow shard `shard`'s log (on `log`) until its primary (at the
/// address the newest map gives) stops answering, then take over: the
/// log, open as its writer, and its records. `listen` is the address the
/// standby will serve on; it is published in the next map.
pub async fn stand_by(
    shard: ShardId,
    log: Options,
    maps: Arc<MapStore>,
    listen: SocketAddr,
    watch: Watch,
) -> Result<(ShardLog, Vec<Record>), String> {
    let replica = follow(log).await?;
    let primary = super::latest_map(&maps).await?.shards.get(&shard).map(|i| i.addr.clone());
    let primary = primary.ok_or_else(|| format!("the map has no shard {shard}"))?;
    let channel = Channel::from_shared(format!("http://{primary}"))
        .map_err(|e| format!("the primary's address {primary}: {e}"))?
        .connect_timeout(watch.patience)
        .connect_lazy();
    let mut client = ShardClient::new(channel);
    let mut missed = 0;
    while missed < watch.misses {
        tokio::time::sleep(watch.every).await;
        let asked = client.info(proto::InfoRequest {});
        match tokio::time::timeout(watch.patience, asked).await {
            Ok(Ok(_)) => missed = 0,
            _ => missed += 1,
        }
    }
    let opened = tokio::task::spawn_blocking(move || {
        let db = replica.promote().map_err(|e| format!("promoting: {e}"))?;
        ShardLog::from_database(db).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())??;
    publish_address(&maps, shard, listen).await?;
    Ok(opened)
}

/// Open the replica, trying again for a few seconds: a standby started
/// while its primary takes a checkpoint or a new epoch may read the
/// database mid-change.
async fn follow(log: Options) -> Result<Replica, String> {
    let mut last = String::new();
    for _ in 0..30 {
        let o = log.clone();
        match tokio::task::spawn_blocking(move || Replica::open(o)).await {
            Ok(Ok(r)) => return Ok(r),
            Ok(Err(e)) => last = e.to_string(),
            Err(e) => return Err(e.to_string()),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("following the shard's log: {last}"))
}

/// Publish the next map with `shard` at `addr`, retrying a lost race.
async fn publish_address(
    maps: &Arc<MapStore>,
    shard: ShardId,
    addr: SocketAddr,
) -> Result<(), String> {
    for _ in 0..10 {
        let mut next = super::latest_map(maps).await?;
        let info =
            next.shards.get_mut(&shard).ok_or_else(|| format!("the map has no shard {shard}"))?;
        info.addr = addr.to_string();
        next.version += 1;
        let m = Arc::clone(maps);
        match tokio::task::spawn_blocking(move || m.publish(&next))
            .await
            .map_err(|e| e.to_string())?
        {
            Ok(()) => return Ok(()),
            Err(MapError::Lost(_) | MapError::NotNext { .. }) => continue,
            Err(e) => return Err(e.to_string()),
        }
    }
    Err("lost the race to publish the shard map ten times".into())
}
