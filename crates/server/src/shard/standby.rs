//! A shard's hot standby (`milliscale serve --cluster --standby`): a read
//! replica of the shard's database that watches the shard and, once it
//! stops answering, takes over.
//!
//! Taking over: promote the replica (the engine fences the old writer
//! through the database's manifest, so a writer that was only slow can no
//! longer make anything durable, and so can no longer answer), then
//! publish the next shard map with this standby's address, so that
//! clients and the other shards find it. The caller then starts the
//! server over the promoted database: the shard's start is its recovery
//! (the transaction table's prepares asked about, the lease kept). The
//! map is published with a conditional write; a publisher that loses the
//! race reads the newest map and tries again.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use milliscale::{AsyncDatabase, Options, Replica};
use milliscale_milana::shard_map::{MapError, MapStore};
use milliscale_proto::v1 as proto;
use proto::milliscale_client::MilliscaleClient;
use tonic::transport::Channel;

use super::{ShardOptions, latest_map};

/// How the standby watches its shard.
#[derive(Debug, Clone)]
pub struct Watch {
    /// Ask the shard this often.
    pub every: Duration,
    /// Take over after this many answers missed in a row.
    pub misses: u32,
    /// How long one answer may take before it counts as missed.
    pub patience: Duration,
}

impl Default for Watch {
    /// Every 100 ms; take over after 5 misses of 250 ms each (a busy
    /// shard is not a dead one: a takeover fences it).
    fn default() -> Watch {
        Watch { every: Duration::from_millis(100), misses: 5, patience: Duration::from_millis(250) }
    }
}

/// Follow the shard's database (on `data`) until the shard (at the address
/// the newest map gives) stops answering, then take over: the database,
/// promoted to its writer. `listen` is the address the standby will serve
/// on; it is published in the next map.
pub async fn stand_by(
    opts: &ShardOptions,
    data: Options,
    listen: SocketAddr,
    watch: Watch,
) -> Result<AsyncDatabase, String> {
    let store = milliscale::store::open(&opts.map)
        .map_err(|e| format!("the shard map's store {}: {e}", opts.map))?;
    let maps = Arc::new(MapStore::new(store, &opts.map_prefix));
    let replica = follow(data).await?;
    let map = latest_map(&maps).await?;
    let primary = map.shards.get(&opts.shard).map(|i| i.addr.clone());
    let primary = primary.ok_or_else(|| format!("the map has no shard {}", opts.shard))?;
    let scheme = if opts.peer_tls_ca.is_some() { "https" } else { "http" };
    let mut endpoint = Channel::from_shared(format!("{scheme}://{primary}"))
        .map_err(|e| format!("the shard's address {primary}: {e}"))?
        .connect_timeout(watch.patience);
    if let Some(ca) = &opts.peer_tls_ca {
        let tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(ca));
        endpoint = endpoint.tls_config(tls).map_err(|e| format!("TLS: {e}"))?;
    }
    let mut client = MilliscaleClient::new(endpoint.connect_lazy());
    let mut missed = 0;
    while missed < watch.misses {
        tokio::time::sleep(watch.every).await;
        let report = proto::StandbyReport {
            addr: listen.to_string(),
            applied_token: replica.metrics().applied_csn,
        };
        let mut req =
            tonic::Request::new(proto::ShardInfoRequest { standby: Some(report), loads: false });
        if let Some(t) = &opts.peer_token
            && let Ok(v) = format!("Bearer {t}").parse()
        {
            req.metadata_mut().insert("authorization", v);
        }
        match tokio::time::timeout(watch.patience, client.shard_info(req)).await {
            // Any answer, even a refusal, is a live shard.
            Ok(Ok(_)) => missed = 0,
            Ok(Err(s)) if s.code() != tonic::Code::Unavailable => missed = 0,
            _ => missed += 1,
        }
    }
    let db = tokio::task::spawn_blocking(move || replica.promote())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("promoting: {e}"))?;
    publish_address(&maps, opts.shard, listen).await?;
    Ok(AsyncDatabase::from(Arc::new(db)))
}

/// A standby not heard from for this long is no longer listed.
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// A shard's standbys as they last checked on it (each check carries a
/// [`proto::StandbyReport`]), for `cluster status`.
#[derive(Debug, Default)]
pub struct Standbys(Mutex<BTreeMap<String, (u64, Instant)>>);

impl Standbys {
    /// A standby checked on the shard now.
    pub fn checked(&self, r: &proto::StandbyReport) {
        let mut m = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        m.insert(r.addr.clone(), (r.applied_token, Instant::now()));
        m.retain(|_, (_, seen)| seen.elapsed() < FORGET_AFTER);
    }

    /// Each standby heard from in the last ten minutes, against the
    /// shard's `durable` token.
    pub fn health(&self, durable: u64) -> Vec<proto::StandbyHealth> {
        let m = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        m.iter()
            .filter(|(_, (_, seen))| seen.elapsed() < FORGET_AFTER)
            .map(|(addr, (applied, seen))| proto::StandbyHealth {
                addr: addr.clone(),
                applied_token: *applied,
                behind: durable.saturating_sub(*applied),
                last_seen_ms: seen.elapsed().as_millis() as u64,
            })
            .collect()
    }
}

/// Open the replica, trying again for a few seconds: a standby started
/// while its shard takes a checkpoint or a new epoch may read the
/// database mid-change.
async fn follow(data: Options) -> Result<Replica, String> {
    let mut last = String::new();
    for _ in 0..30 {
        let o = data.clone();
        match tokio::task::spawn_blocking(move || Replica::open(o)).await {
            Ok(Ok(r)) => return Ok(r),
            Ok(Err(e)) => last = e.to_string(),
            Err(e) => return Err(e.to_string()),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("following the shard's database: {last}"))
}

/// Publish the next map with `shard` at `addr`, retrying a lost race.
pub async fn publish_address(
    maps: &Arc<MapStore>,
    shard: u32,
    addr: SocketAddr,
) -> Result<(), String> {
    for _ in 0..10 {
        let mut next = latest_map(maps).await?;
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
