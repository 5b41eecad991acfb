//! A client of sharded transactions: the coordinator of its own
//! transactions over the network (MILANA §4.2-4.3).
//!
//! A transaction begins at a timestamp of the client's hybrid clock and
//! reads every key at it from the key's shard primary; writes are
//! buffered. At commit:
//! - read-only: it commits locally, with no round trip, if no key it read
//!   had a prepared write at or below its timestamp (else it aborts, and
//!   may be run again);
//! - read-write: the commit version is ⟨clock, client id⟩; each
//!   participant gets its prepare, in parallel. One participant: its yes
//!   is the commit (the fast path). Several: all yes is the commit, and
//!   the client tells them (a participant that misses the decision asks
//!   the others after its termination timeout); any no is an abort.
//!
//! A prepare whose vote does not come back is sent again (a participant
//! answers a repeated prepare as the first time); after three tries the
//! client reports the outcome unknown: the participants settle it by
//! cooperative termination, and the transaction must not be reported
//! committed or aborted. The shard map is cached and reloaded from the
//! store when a shard says a key is not its own or cannot be reached.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tonic::Code;
use tonic::transport::Channel;

use super::convert::{prepare_to, read_from, txn_to};
use super::proto::{self, shard_client::ShardClient};
use crate::clock::HybridClock;
use crate::coordinator::ClientTxn;
use crate::shard_map::{MapStore, ShardMap};
use crate::types::{ClientId, CommitTs, ShardId, Timestamp, TxnId, Value};

/// Why a transaction did not commit, or might not have.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TxnError {
    /// It aborted (a conflict, or local validation failed): nothing of it
    /// committed; run it again.
    #[error("aborted: {0}")]
    Aborted(String),
    /// A shard could not be reached before anything was prepared: nothing
    /// of it committed; run it again later.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// Votes did not come back: it may commit or abort (the participants
    /// decide by cooperative termination). Do not report it either way.
    #[error("the outcome is unknown: {0}")]
    Unknown(String),
    /// The shard map could not be loaded.
    #[error("the shard map: {0}")]
    Map(String),
}

impl TxnError {
    /// True when nothing of the transaction committed and running it again
    /// may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, TxnError::Aborted(_) | TxnError::Unavailable(_))
    }
}

/// How a client runs.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Its id: not used by two clients at once (it names their
    /// transactions and orders versions). A client that restarts may take
    /// its id again: its transaction numbers start from the clock.
    pub id: ClientId,
    /// Its clock's skew (µs, either way): simulated clock error.
    pub skew: i64,
    /// How long to wait for one answer from a shard.
    pub rpc_timeout: Duration,
    /// Commit read-only transactions locally (MILANA §4.3); off, they are
    /// validated by their shards like any other (a prepare each), for
    /// measuring what local validation saves.
    pub local_validation: bool,
}

impl ClientOptions {
    /// Client `id`, no skew, 2 s per answer.
    pub fn new(id: ClientId) -> ClientOptions {
        ClientOptions { id, skew: 0, rpc_timeout: Duration::from_secs(2), local_validation: true }
    }
}

struct Inner {
    opts: ClientOptions,
    maps: Arc<MapStore>,
    map: RwLock<Arc<ShardMap>>,
    conns: Mutex<HashMap<ShardId, ShardClient<Channel>>>,
    clock: Mutex<HybridClock>,
    seq: AtomicU64,
    /// The transactions under way: (begin, seq).
    active: Mutex<std::collections::BTreeSet<(Timestamp, u64)>>,
}

/// A client (see the module's comment). Cheap to clone.
#[derive(Clone)]
pub struct ShardedClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ShardedClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedClient").field("id", &self.inner.opts.id).finish()
    }
}

fn physical_now() -> Timestamp {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as Timestamp)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl ShardedClient {
    /// A client of the shards `maps` describes (it loads the map now).
    pub async fn connect(
        opts: ClientOptions,
        maps: Arc<MapStore>,
    ) -> Result<ShardedClient, TxnError> {
        let map = load(&maps).await?;
        let inner = Inner {
            clock: Mutex::new(HybridClock::new(opts.skew)),
            opts,
            maps,
            map: RwLock::new(Arc::new(map)),
            conns: Mutex::new(HashMap::new()),
            // A transaction is named ⟨client id, seq⟩, and a primary
            // answers a name it knows as it did before: a client that
            // restarts under the same id must not reuse a number, so they
            // start from the clock (µs), past any of its last run's.
            seq: AtomicU64::new(physical_now()),
            active: Mutex::new(std::collections::BTreeSet::new()),
        };
        Ok(ShardedClient { inner: Arc::new(inner) })
    }

    /// The map in use.
    pub fn map(&self) -> Arc<ShardMap> {
        Arc::clone(&self.inner.map.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Begin a transaction now.
    pub fn begin(&self) -> Txn {
        let seq = self.inner.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let id = TxnId { client: self.inner.opts.id, seq };
        let begin = lock(&self.inner.clock).now(physical_now());
        lock(&self.inner.active).insert((begin, seq));
        Txn { client: self.clone(), txn: ClientTxn::new(id, begin) }
    }

    /// No transaction of this client will read below this: its oldest
    /// under way, or its clock if none is.
    fn low_water(&self) -> Timestamp {
        let oldest = lock(&self.inner.active).first().map(|(ts, _)| *ts);
        oldest.unwrap_or_else(|| lock(&self.inner.clock).last())
    }

    /// Reload the map if the store has a newer one.
    async fn refresh(&self) -> Result<(), TxnError> {
        let m = load(&self.inner.maps).await?;
        let mut map = self.inner.map.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if m.version > map.version {
            *map = Arc::new(m);
            lock(&self.inner.conns).clear();
        }
        Ok(())
    }

    fn shard(&self, s: ShardId) -> Result<ShardClient<Channel>, TxnError> {
        let mut conns = lock(&self.inner.conns);
        if let Some(c) = conns.get(&s) {
            return Ok(c.clone());
        }
        let map = self.map();
        let info = map.shards.get(&s).ok_or_else(|| TxnError::Map(format!("no shard {s}")))?;
        let channel = Channel::from_shared(format!("http://{}", info.addr))
            .map_err(|e| TxnError::Map(format!("shard {s}'s address {}: {e}", info.addr)))?
            .connect_timeout(self.inner.opts.rpc_timeout)
            .connect_lazy();
        let c = ShardClient::new(channel);
        conns.insert(s, c.clone());
        Ok(c)
    }

    /// Read `key` at `at`, reloading the map and trying again (up to 4
    /// times) when the shard refuses the key or cannot be reached.
    async fn read(&self, key: &[u8], at: Timestamp) -> Result<proto::ReadResponse, TxnError> {
        let mut last = String::new();
        for attempt in 0..4u32 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(20 << attempt)).await;
                self.refresh().await?;
            }
            let s = self.map().shard_of(key);
            let mut c = self.shard(s)?;
            let req = proto::ReadRequest {
                key: key.to_vec(),
                at,
                client: self.inner.opts.id,
                low_water: self.low_water(),
            };
            match tokio::time::timeout(self.inner.opts.rpc_timeout, c.read(req)).await {
                Ok(Ok(r)) => return Ok(r.into_inner()),
                Ok(Err(st)) if st.code() == Code::Aborted => {
                    // Below the shard's collection watermark: begin again
                    // above it.
                    let floor = st.metadata().get("milana-floor");
                    if let Some(f) = floor.and_then(|f| f.to_str().ok()?.parse().ok()) {
                        lock(&self.inner.clock).observe(f);
                    }
                    return Err(TxnError::Aborted(st.message().into()));
                }
                Ok(Err(st)) if st.code() == Code::InvalidArgument => {
                    return Err(TxnError::Aborted(st.message().into()));
                }
                Ok(Err(st)) => last = format!("shard {s}: {}", st.message()),
                Err(_) => last = format!("shard {s}: no answer within the timeout"),
            }
            lock(&self.inner.conns).remove(&s);
        }
        Err(TxnError::Unavailable(last))
    }

    /// Send `p` to shard `s` until it votes (up to three times): its vote,
    /// `None` if none came.
    async fn prepare(&self, s: ShardId, p: proto::PrepareRequest) -> Option<Result<(), String>> {
        for _ in 0..3 {
            let Ok(mut c) = self.shard(s) else { return None };
            match tokio::time::timeout(self.inner.opts.rpc_timeout, c.prepare(p.clone())).await {
                Ok(Ok(v)) => {
                    let v = v.into_inner();
                    return Some(if v.yes { Ok(()) } else { Err(v.why) });
                }
                Ok(Err(st)) if st.code() == Code::FailedPrecondition => {
                    // Not its key any more: it prepared nothing.
                    return Some(Err(st.message().into()));
                }
                _ => {
                    lock(&self.inner.conns).remove(&s);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let _ = self.refresh().await;
                }
            }
        }
        None
    }

    /// Tell every participant the decision, in the background (best
    /// effort: a participant that misses it asks the others after its
    /// termination timeout).
    fn decide(&self, txn: TxnId, ts: Timestamp, shards: &[ShardId], commit: bool) {
        for &s in shards {
            let Ok(mut c) = self.shard(s) else { continue };
            let d = proto::DecideRequest { txn: Some(txn_to(txn)), commit, ts };
            let wait = self.inner.opts.rpc_timeout;
            tokio::spawn(async move {
                let _ = tokio::time::timeout(wait, c.decide(d)).await;
            });
        }
    }
}

async fn load(maps: &Arc<MapStore>) -> Result<ShardMap, TxnError> {
    super::latest_map(maps).await.map_err(TxnError::Map)
}

/// A transaction at its client.
#[derive(Debug)]
pub struct Txn {
    client: ShardedClient,
    txn: ClientTxn,
}

impl Drop for Txn {
    fn drop(&mut self) {
        lock(&self.client.inner.active).remove(&(self.txn.begin, self.txn.id.seq));
    }
}

impl Txn {
    /// The transaction's id.
    pub fn id(&self) -> TxnId {
        self.txn.id
    }

    /// Its begin timestamp.
    pub fn begin(&self) -> Timestamp {
        self.txn.begin
    }

    /// Read `key` (its own write if it wrote it).
    pub async fn get(&mut self, key: &[u8]) -> Result<Option<Value>, TxnError> {
        if let Some(v) = self.txn.writes.get(key) {
            return Ok(v.clone());
        }
        if let Some(r) = self.txn.reads.get(key) {
            return Ok(r.value.clone());
        }
        let r = read_from(self.client.read(key, self.txn.begin).await?);
        lock(&self.client.inner.clock).observe(r.version.ts);
        let value = r.value.clone();
        self.txn.reads.insert(key.to_vec(), r);
        Ok(value)
    }

    /// Write `value` under `key` (at commit).
    pub fn put(&mut self, key: &[u8], value: &[u8]) {
        self.txn.writes.insert(key.to_vec(), Some(value.to_vec()));
    }

    /// Delete `key` (at commit).
    pub fn delete(&mut self, key: &[u8]) {
        self.txn.writes.insert(key.to_vec(), None);
    }

    /// The shards the transaction has touched so far (its participants
    /// if it commits now), under the current map.
    pub fn shards(&self) -> Vec<ShardId> {
        let map = self.client.map();
        let mut s: Vec<ShardId> =
            self.txn.reads.keys().chain(self.txn.writes.keys()).map(|k| map.shard_of(k)).collect();
        s.sort_unstable();
        s.dedup();
        s
    }

    /// Commit (see the module's comment): `Ok` once committed.
    pub async fn commit(self) -> Result<(), TxnError> {
        // Still under way (its low-water mark held) until it returns.
        let (client, txn) = (self.client.clone(), self.txn.clone());
        let _under_way = self;
        if txn.read_only() && (client.inner.opts.local_validation || txn.reads.is_empty()) {
            return if txn.locally_valid() {
                Ok(())
            } else {
                Err(TxnError::Aborted("a key read had a prepared write below the read time".into()))
            };
        }
        let version = CommitTs {
            ts: lock(&client.inner.clock).now(physical_now()),
            client: client.inner.opts.id,
        };
        let map = client.map();
        let prepares: BTreeMap<ShardId, _> = txn.prepares(version, |k| map.shard_of(k));
        let shards: Vec<ShardId> = prepares.keys().copied().collect();
        let votes = prepares.into_iter().map(|(s, p)| {
            let client = client.clone();
            tokio::spawn(async move { client.prepare(s, prepare_to(&p)).await })
        });
        let mut missing = 0;
        let mut no = None;
        for v in votes.collect::<Vec<_>>() {
            match v.await.unwrap_or(None) {
                Some(Ok(())) => {}
                Some(Err(why)) => no = no.or(Some(why)),
                None => missing += 1,
            }
        }
        if let Some(why) = no {
            client.decide(txn.id, version.ts, &shards, false);
            if why.starts_with("wrong shard") {
                let _ = client.refresh().await;
            }
            return Err(TxnError::Aborted(why));
        }
        if missing > 0 {
            return Err(TxnError::Unknown(format!(
                "{missing} of {} participants did not vote",
                shards.len()
            )));
        }
        if shards.len() > 1 {
            client.decide(txn.id, version.ts, &shards, true);
        }
        Ok(())
    }
}
