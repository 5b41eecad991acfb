//! A shard's start: the map read, the participant rebuilt from the
//! shard's tables (MILANA's recovery over one shard), the lone prepares
//! committed, the frozen and adopted ranges loaded, and the wait until
//! the clock has passed the read floor before anything is served.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use milliscale::AsyncDatabase;
use milliscale_milana::fresh::Fresh;
use milliscale_milana::log::Record;
use milliscale_milana::participant::{Mutations, Participant, Recovered};
use milliscale_milana::shard_map::MapStore;
use milliscale_milana::types::Timestamp;
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

use super::tables::Tables;
use super::{Recovery, Shard, ShardOptions, State, handover, latest_map, moves, peers, rebalance};

impl Shard {
    /// Become shard `opts.shard` over `db`: read the map, rebuild the
    /// participant from the tables, commit the lone prepares it finds, and
    /// start asking about the others and collecting in the background.
    pub async fn start(db: AsyncDatabase, opts: ShardOptions) -> Result<Arc<Shard>, String> {
        let store = milliscale::store::open(&opts.map)
            .map_err(|e| format!("the shard map's store {}: {e}", opts.map))?;
        let maps = Arc::new(MapStore::new(store, &opts.map_prefix));
        let map = latest_map(&maps).await.map_err(|e| format!("the shard map: {e}"))?;
        if !map.shards.contains_key(&opts.shard) {
            return Err(format!(
                "the shard map (version {}) does not name shard {}",
                map.version, opts.shard
            ));
        }
        let (tables, durable) =
            Tables::load(db).await.map_err(|e| format!("the shard's tables: {e}"))?;
        let remembered = durable.txns.len();
        let Recovered { participant: mut p, logged, ask } =
            Participant::restart(opts.shard, opts.lease_span, Mutations::default(), durable);
        if !logged.is_empty() {
            let (ack, _) = tables.write(&mut p, &logged).map_err(|e| e.to_string())?;
            ack.await.map_err(|e| format!("committing the lone prepares: {e}"))?;
            for r in &logged {
                if let Record::Commit(t) = r {
                    p.decision_durable(*t);
                }
            }
        }
        let names = tables.names().map_err(|e| e.to_string())?.into_iter().collect();
        let frozen = moves::load(&tables).map_err(|e| format!("the frozen ranges: {e}"))?;
        let adopted = handover::load_adopted(&tables).map_err(|e| format!("adopted: {e}"))?;
        let incoming = super::incoming::load(&tables).map_err(|e| format!("incoming: {e}"))?;
        let mut floor = p.lease();
        for (start, end, adopted) in adopted {
            p.raise_read_floor(&start, &end, adopted);
            floor = floor.max(adopted);
        }
        wait_past(floor).await;
        let lease = p.lease();
        let state = State {
            p,
            prepared_at: HashMap::default(),
            renewing: false,
            clients: HashMap::default(),
            last_csn: 0,
            dropping: BTreeSet::new(),
            versions: 0,
            fresh: Fresh::default(),
            frozen,
            copies: Default::default(),
            incoming,
            requests: Default::default(),
            forget_written: Instant::now(),
        };
        let (stop, _) = watch::channel(false);
        let shard = Arc::new(Shard {
            started: Recovery { remembered, committed: logged.len(), asked: ask.len() },
            opts,
            tables,
            maps,
            map: RwLock::new(map),
            map_read: Mutex::new(Instant::now()),
            state: Mutex::new(state),
            names: RwLock::new(names),
            lease: watch::Sender::new(lease),
            durable: watch::Sender::new(0),
            decided: tokio::sync::Notify::new(),
            peers: Mutex::new(HashMap::default()),
            stop,
            rebalanced: std::sync::atomic::AtomicBool::new(false),
            together: std::sync::atomic::AtomicU64::new(0),
        });
        Tables::count_versions(&shard); // before anything can write
        tokio::spawn(peers::background(Arc::clone(&shard), shard.stop.subscribe()));
        tokio::spawn(rebalance::background(Arc::clone(&shard), shard.stop.subscribe()));
        shard.join_in_background();
        Ok(shard)
    }
}

/// Wait until the physical clock has passed `floor` (at most 5 s):
/// MILANA §4.5's rule for a recovered primary, which serves only once
/// its clock is past its last read lease. Writes at or below the lease
/// are refused, and a client told to move its clock up to it would stamp
/// its commits ahead of real time, where other clients' reads, at their
/// own clocks, would miss them for as long (an acknowledged write not
/// seen by a transaction that began after it).
async fn wait_past(floor: Timestamp) {
    let now = super::now_us();
    if floor > now {
        let wait = Duration::from_micros(floor - now);
        if wait > Duration::from_secs(5) {
            tracing::warn!(?wait, "the read floor is far ahead of this clock; serving in 5 s");
        }
        tokio::time::sleep(wait.min(Duration::from_secs(5))).await;
    }
}
