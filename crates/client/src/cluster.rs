//! A cluster of `milliscale serve --cluster` shards, as one database: the
//! client coordinates each of its transactions (MILANA's client-coordinated
//! optimistic concurrency control with two-phase commit; design record
//! 0008), with the protocol core of `milliscale-milana`.
//!
//! A transaction begins at a timestamp of the client's hybrid clock and
//! reads every key at it from the key's shard; writes are buffered. At
//! commit:
//! - read-only: it commits at the client, with no round trip, if no key it
//!   read had a prepared write at or below its timestamp (else it aborts,
//!   retryable);
//! - read-write: the commit version is ⟨clock, client id⟩; each
//!   participant gets its prepare, in parallel. One participant: its yes
//!   is the commit (the single-shard fast path). Several: all yes is the
//!   commit, and the client tells them (a participant that misses the
//!   decision asks the others after its termination timeout); any no is
//!   an abort.
//!
//! Isolation is SERIALIZABLE (MILANA's: transactions run as if serially in
//! the order of their versions).
//!
//! A prepare whose vote does not come back is sent again (a shard answers
//! a repeated prepare as the first time); after three tries the outcome is
//! unknown (kind `unknown`, not retryable): the shards settle it by
//! cooperative termination. The shard map comes from the shards
//! (`ShardMap`) and is asked for again when a shard says a key is not its
//! own.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use milliscale_milana::clock::HybridClock;
use milliscale_milana::coordinator::ClientTxn;
use milliscale_milana::participant::ReadReply;
use milliscale_milana::shard_map::{ShardInfo, ShardMap};
use milliscale_milana::types::{
    ClientId, CommitTs, Key, ShardId, Timestamp, TxnId, split_cluster_key,
};

use crate::{Client, ClientBuilder, Error, KeyRange, Result, proto};

/// How long a call made to every shard (create, drop and list tables)
/// asks again a shard it cannot reach: long enough for a standby to take
/// over from its primary and publish the map that names it.
pub const EVERY_SHARD_RETRY: Duration = Duration::from_secs(5);

/// Whether a shard's answer says it could not be reached.
fn unreachable<T>(r: &Result<T>) -> bool {
    r.as_ref().is_err_and(|e| e.code() == tonic::Code::Unavailable)
}

mod close;
mod conns;
mod execute;
mod status;
mod transaction;
pub use status::ShardStatus;
pub use transaction::ClusterTransaction;

/// How to reach a cluster; see [`Cluster::builder`].
#[derive(Clone, Debug)]
pub struct ClusterBuilder {
    client: ClientBuilder,
    id: Option<ClientId>,
    skew: i64,
    rpc_timeout: Duration,
    move_wait: Duration,
    local_validation: bool,
    idle_leave: Option<Duration>,
}

/// A little over the least time between two reads of the map by a shard
/// asked for a newer one (`Shard::map`'s 50 ms).
const SHARD_MAP_REREAD: Duration = Duration::from_millis(60);

impl ClusterBuilder {
    /// The bearer token for every shard.
    pub fn token(mut self, token: impl Into<String>) -> ClusterBuilder {
        self.client = self.client.token(token);
        self
    }

    /// Speak TLS to every shard, trusting this certificate authority (PEM).
    pub fn tls(mut self, ca_pem: Vec<u8>) -> ClusterBuilder {
        self.client = self.client.tls(ca_pem);
        self
    }

    /// The name on the shards' certificates (default: each address's host).
    pub fn tls_domain(mut self, domain: impl Into<String>) -> ClusterBuilder {
        self.client = self.client.tls_domain(domain);
        self
    }

    /// This client's id: it names its transactions and orders the
    /// versions they write, so two clients running at once must not share
    /// one. Default: a random one (a collision among 10,000 clients has a
    /// chance of about 1%, and costs conflicts, not correctness: versions
    /// still differ by their timestamps).
    pub fn client_id(mut self, id: u32) -> ClusterBuilder {
        self.id = Some(id);
        self
    }

    /// Shift this client's clock by `us` microseconds: a simulated clock
    /// error, for measuring what the clocks' uncertainty ε costs (MILANA
    /// §6). Leave it at 0 in real use.
    pub fn clock_skew_us(mut self, us: i64) -> ClusterBuilder {
        self.skew = us;
        self
    }

    /// How long to wait for one answer from a shard (default 2 s).
    pub fn rpc_timeout(mut self, d: Duration) -> ClusterBuilder {
        self.rpc_timeout = d;
        self
    }

    /// How long a call refused because its range is moving waits for the
    /// map version that the move publishes, reading the map again with a
    /// doubling pause (default 15 s, past a shard's 10 s timeout for a
    /// move whose mover stopped). The wait is not counted as a retry;
    /// past it, the refusal is returned (retryable).
    pub fn move_wait(mut self, d: Duration) -> ClusterBuilder {
        self.move_wait = d;
        self
    }

    /// Commit read-only transactions at the client (MILANA §4.3; the
    /// default); off, each is validated by its shards with a prepare, for
    /// measuring what local validation saves.
    pub fn local_validation(mut self, on: bool) -> ClusterBuilder {
        self.local_validation = on;
        self
    }

    /// Send each shard's calls as messages on one stream per shard (the
    /// default), or off, each as a unary call: for measuring what the
    /// stream saves.
    pub fn streamed_calls(mut self, on: bool) -> ClusterBuilder {
        self.client = self.client.streamed_shard_calls(on);
        self
    }

    /// With no transaction under way and no request for this long, tell
    /// the shards this client left (`ShardLeave`, as [`Cluster::close`]),
    /// so that its last mark does not hold their watermark (old versions,
    /// forgotten decisions, a change feed's resolved timestamp) for the
    /// shards' client silence; its next read marks it again. Off by
    /// default: a transaction begun while the leave is on its way can lose
    /// its marks, on which a read-only transaction's consistency rests.
    pub fn idle_leave(mut self, idle: Option<Duration>) -> ClusterBuilder {
        self.idle_leave = idle;
        self
    }

    /// Ask the shard at the builder's address for the map, and connect.
    pub async fn connect(self) -> Result<Cluster> {
        let first = self.client.clone().streamed_batches(false).connect().await?;
        let map = fetch_map(&first, 0).await?;
        Ok(self.assemble(first, map))
    }

    /// The cluster opened through `first`, under `map`.
    fn assemble(self, first: Client, map: ShardMap) -> Cluster {
        let id = self.id.unwrap_or_else(|| rand::random_range(1..=u32::MAX));
        let inner = Inner {
            clock: Mutex::new(HybridClock::new(self.skew)),
            id,
            builder: self.clone(),
            map_version: AtomicU64::new(map.version),
            map: RwLock::new(Arc::new(map)),
            conns: Mutex::new(HashMap::new()),
            // A transaction is named ⟨client id, seq⟩ and a shard answers a
            // name it knows as it did before: a client that restarts under
            // the same id must not reuse a number, so they start from the
            // clock (µs), past any of its last run's.
            seq: AtomicU64::new(physical_now()),
            active: Mutex::new(BTreeSet::new()),
            marked: AtomicU64::new(physical_now()),
            left: std::sync::atomic::AtomicBool::new(false),
            first,
        };
        let inner = Arc::new(inner);
        if let (Some(idle), Ok(rt)) = (self.idle_leave, tokio::runtime::Handle::try_current()) {
            rt.spawn(close::leave_while_idle(Arc::downgrade(&inner), idle));
        }
        Cluster { inner }
    }
}

/// The map shard `c` serves under; it reads the map's store first if its
/// copy is older than version `at_least`.
async fn fetch_map(c: &Client, at_least: u64) -> Result<ShardMap> {
    let m = c.stub().shard_map(c.req(proto::ShardMapRequest { at_least })).await?.into_inner();
    let map = ShardMap {
        version: m.version,
        ranges: m.ranges.into_iter().map(|r| (r.start.to_vec(), r.shard)).collect(),
        shards: m
            .shards
            .into_iter()
            .map(|s| (s.shard, ShardInfo { addr: s.addr, log: String::new() }))
            .collect(),
        rebalance: None,
        split_load: None,
    };
    map.check().map_err(|e| Error::local(format!("the cluster's map: {e}")))?;
    Ok(map)
}

struct Inner {
    id: ClientId,
    builder: ClusterBuilder,
    /// The connection the cluster was opened through.
    first: Client,
    map: RwLock<Arc<ShardMap>>,
    /// `map`'s version, read without its lock (by [`Cluster::shard`]).
    map_version: AtomicU64,
    /// A connection to each shard, with the map version whose address it
    /// was made from. Never locked together with `map` (see
    /// [`Cluster::shard`]).
    conns: Mutex<HashMap<ShardId, (u64, Client)>>,
    clock: Mutex<HybridClock>,
    seq: AtomicU64,
    /// The transactions under way: (begin, seq).
    active: Mutex<BTreeSet<(Timestamp, u64)>>,
    /// When this client last sent its low-water mark (µs since the epoch),
    /// and whether it has told its shards it left since.
    marked: AtomicU64,
    left: std::sync::atomic::AtomicBool,
}

/// A cluster (see the module's comment). Cheap to clone: clones share
/// the connections, the clock and the map.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("client_id", &self.inner.id).finish_non_exhaustive()
    }
}

fn physical_now() -> Timestamp {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as Timestamp)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn ts_to(v: CommitTs) -> proto::CommitTs {
    proto::CommitTs { ts: v.ts, client: v.client }
}

fn table_key(k: &[u8]) -> proto::TableKey {
    let (table, key) = split_cluster_key(k).expect("a cluster key made by this client");
    proto::TableKey { table: table.into(), key: key.to_vec().into() }
}

impl Cluster {
    /// A builder for a cluster reached through the shard at `addr`
    /// (`host:port`, or an `http://` or `https://` URL).
    pub fn builder(addr: impl Into<String>) -> ClusterBuilder {
        ClusterBuilder {
            client: Client::builder(addr),
            id: None,
            skew: 0,
            rpc_timeout: Duration::from_secs(2),
            move_wait: Duration::from_secs(15),
            local_validation: true,
            idle_leave: None,
        }
    }

    /// Connect through the shard at `addr`, without a token or TLS.
    pub async fn connect(addr: impl Into<String>) -> Result<Cluster> {
        Cluster::builder(addr).connect().await
    }

    /// This client's id.
    pub fn client_id(&self) -> u32 {
        self.inner.id
    }

    /// The shard map in use: its version, and `(first key, shard)` per
    /// range (a key of a table is the table's name, a 0x00 byte, then the
    /// key).
    pub fn map(&self) -> Arc<ShardMap> {
        Arc::clone(&self.inner.map.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Ask the shards for the map again; keep it if it is newer.
    pub async fn refresh(&self) -> Result<()> {
        let mut last = None;
        let shards: Vec<ShardId> = self.map().shards.keys().copied().collect();
        let mut candidates = vec![self.inner.first.clone()];
        for s in shards {
            if let Ok(c) = self.shard(s) {
                candidates.push(c);
            }
        }
        // Each in turn until one has a newer map: a shard reads the map
        // again only now and then, and one that has not yet may answer
        // with the map the client has.
        let current = self.map().version;
        let mut answered = false;
        for c in candidates {
            match fetch_map(&c, current + 1).await {
                Ok(m) => {
                    answered = true;
                    let newer = m.version > current;
                    self.adopt_map(m);
                    if newer {
                        return Ok(());
                    }
                }
                Err(e) => last = Some(e),
            }
        }
        if answered {
            return Ok(());
        }
        Err(last.unwrap_or_else(|| Error::local("no shard to ask for the map".into())))
    }

    /// Read the map again after the wrong-shard answer `e`. A shard that
    /// named a version older than the client's is behind: the reload asks
    /// every shard for a newer map, which has one behind read the map
    /// again, but a shard reads it at most every 50 ms, so the reload
    /// waits past that first.
    pub(crate) async fn reload_after(&self, e: &Error) -> Result<()> {
        if e.map_version() > 0 && e.map_version() < self.map().version {
            tokio::time::sleep(SHARD_MAP_REREAD).await;
        }
        self.refresh().await
    }

    /// After a wrong-shard answer naming a map version newer than the
    /// client's (a range frozen for a move names the version the move
    /// publishes): read the map again, with a doubling pause (2 ms to
    /// 100 ms), until it is that version or later or the move wait is
    /// over. Whether the client's map is that new now.
    pub(crate) async fn await_map(&self, e: &Error) -> bool {
        let want = e.map_version();
        if e.kind() != "wrong_shard" || want <= self.map().version {
            return false;
        }
        let deadline = std::time::Instant::now() + self.inner.builder.move_wait;
        let mut pause = Duration::from_millis(2);
        loop {
            let _ = self.refresh().await;
            if self.map().version >= want {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// A shard that cannot be reached (a primary failing over to its
    /// standby, which publishes a new map) is asked again after the map
    /// is read again, for up to [`EVERY_SHARD_RETRY`]; `f` must be safe to
    /// repeat. A shard that owns no range (one that joined and awaits a
    /// range, or is being removed) is asked once, and its answer is
    /// dropped if it failed: it holds no rows, and a range moved to it
    /// brings its tables (design record 0009).
    async fn every_shard<T, F, Fut>(&self, f: F) -> Vec<(ShardId, Result<T>)>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let deadline = std::time::Instant::now() + EVERY_SHARD_RETRY;
        let mut out: BTreeMap<ShardId, Result<T>> = BTreeMap::new();
        let mut tried = BTreeSet::new();
        loop {
            let map = self.map();
            for s in map.shards.keys().copied() {
                let owns = map.owns_any(s);
                if out.get(&s).is_some_and(|r| !unreachable(r)) || (!owns && tried.contains(&s)) {
                    continue;
                }
                tried.insert(s);
                let r = match self.shard(s) {
                    Ok(c) => f(c).await,
                    Err(e) => Err(e),
                };
                if owns || r.is_ok() {
                    out.insert(s, r);
                }
            }
            if !out.values().any(unreachable) || std::time::Instant::now() >= deadline {
                return out.into_iter().collect();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            let _ = self.refresh().await;
        }
    }

    /// Create a table on every shard (its keys may live on any). Fails
    /// with ALREADY_EXISTS only if every shard had it; a shard that failed
    /// is named in the error, and the call may be made again.
    pub async fn create_table(&self, name: &str) -> Result<()> {
        let answers = self.every_shard(|c| async move { c.create_table(name).await }).await;
        let existed = answers
            .iter()
            .filter(|(_, r)| r.as_ref().is_err_and(|e| e.code() == tonic::Code::AlreadyExists))
            .count();
        if existed == answers.len()
            && let Some((_, Err(e))) = answers.first()
        {
            return Err(e.clone());
        }
        for (s, r) in answers {
            match r {
                Err(e) if e.code() != tonic::Code::AlreadyExists => {
                    return Err(e.context(&format!("creating table {name:?} on shard {s}")));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Drop a table and its rows on every shard. Not while transactions
    /// on it run: one that prepared before the drop may still commit rows
    /// the drop missed.
    pub async fn drop_table(&self, name: &str) -> Result<()> {
        let answers = self.every_shard(|c| async move { c.drop_table(name).await }).await;
        let missing = answers
            .iter()
            .filter(|(_, r)| r.as_ref().is_err_and(|e| e.code() == tonic::Code::NotFound))
            .count();
        if missing == answers.len()
            && let Some((_, Err(e))) = answers.first()
        {
            return Err(e.clone());
        }
        for (s, r) in answers {
            match r {
                Err(e) if e.code() != tonic::Code::NotFound => {
                    return Err(e.context(&format!("dropping table {name:?} on shard {s}")));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The tables' names (those every shard that owns a range knows),
    /// sorted.
    pub async fn list_tables(&self) -> Result<Vec<String>> {
        let mut common: Option<BTreeSet<String>> = None;
        let answers = self.every_shard(|c| async move { c.list_tables().await }).await;
        let map = self.map();
        for (_, r) in answers.into_iter().filter(|(s, _)| map.owns_any(*s)) {
            let names: BTreeSet<String> = r?.into_iter().collect();
            common = Some(match common {
                None => names,
                Some(c) => c.intersection(&names).cloned().collect(),
            });
        }
        Ok(common.unwrap_or_default().into_iter().collect())
    }

    /// Begin a transaction now.
    pub fn begin(&self) -> ClusterTransaction {
        let seq = self.inner.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let id = TxnId { client: self.inner.id, seq };
        let begin = lock(&self.inner.clock).now(physical_now());
        lock(&self.inner.active).insert((begin, seq));
        ClusterTransaction::new(self.clone(), ClientTxn::new(id, begin))
    }

    /// Read one key (a read-only transaction of its own).
    pub async fn get(&self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        crate::retry(8, || async {
            let mut tx = self.begin();
            let v = tx.get(table, key).await?;
            tx.commit().await?;
            Ok(v)
        })
        .await
    }

    /// The rows of `table` in `range` (a read-only transaction of its own,
    /// run again on a conflict).
    pub async fn scan(&self, table: &str, range: KeyRange) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        crate::retry(8, || async {
            let mut tx = self.begin();
            let rows = tx.scan(table, range.clone()).await?;
            tx.commit().await?;
            Ok(rows)
        })
        .await
    }

    /// Write one key (a transaction of its own); durable on return.
    /// Returns the commit timestamp.
    pub async fn put(&self, table: &str, key: &[u8], value: &[u8]) -> Result<u64> {
        crate::retry(8, || async {
            let mut tx = self.begin();
            tx.put(table, key, value)?;
            let ts = tx.commit().await?;
            Ok(ts.expect("a transaction that wrote has a commit timestamp"))
        })
        .await
    }

    /// Delete one key (a transaction of its own); whether it held a value.
    pub async fn delete(&self, table: &str, key: &[u8]) -> Result<bool> {
        crate::retry(8, || async {
            let mut tx = self.begin();
            let existed = tx.delete(table, key).await?;
            tx.commit().await?;
            Ok(existed)
        })
        .await
    }

    /// The connection the cluster was opened through.
    pub(crate) fn first_client(&self) -> &Client {
        &self.inner.first
    }

    /// No transaction of this client will read below this: its oldest
    /// under way, or its clock if none is.
    fn low_water(&self) -> Timestamp {
        self.inner.marked.store(physical_now(), Ordering::Relaxed);
        self.inner.left.store(false, Ordering::Relaxed);
        let oldest = lock(&self.inner.active).first().map(|(ts, _)| *ts);
        oldest.unwrap_or_else(|| lock(&self.inner.clock).last())
    }

    /// Read `keys` (all of one shard) at `at`.
    async fn read(&self, s: ShardId, keys: &[Key], at: Timestamp) -> Result<Vec<ReadReply>> {
        let c = self.shard(s)?;
        let req = proto::ShardReadRequest {
            keys: keys.iter().map(|k| table_key(k)).collect(),
            at,
            client: self.inner.id,
            low_water: self.low_water(),
        };
        let call = c.shard_read(req);
        let r = match tokio::time::timeout(self.inner.builder.rpc_timeout, call).await {
            Ok(r) => r,
            Err(_) => {
                lock(&self.inner.conns).remove(&s);
                return Err(Error::unavailable(format!("shard {s}: no answer within the timeout")));
            }
        };
        let r = r.map_err(|st| self.read_error(s, st))?;
        Ok(r.results
            .into_iter()
            .map(|r| ReadReply {
                version: r
                    .version
                    .map_or(CommitTs::INITIAL, |v| CommitTs { ts: v.ts, client: v.client }),
                value: r.value.map(|v| v.to_vec()),
                prepared_below: r.prepared_below,
            })
            .collect())
    }

    /// Scan `[start, end)` of shard `s` at `at`.
    async fn scan_shard(
        &self,
        s: ShardId,
        start: &[u8],
        end: &[u8],
        limit: u64,
        at: Timestamp,
    ) -> Result<proto::ShardScanResponse> {
        let c = self.shard(s)?;
        let req = proto::ShardScanRequest {
            start: start.to_vec().into(),
            end: end.to_vec().into(),
            limit,
            at,
            client: self.inner.id,
            low_water: self.low_water(),
        };
        let call = c.shard_scan(req);
        match tokio::time::timeout(self.inner.builder.rpc_timeout, call).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(st)) => Err(self.read_error(s, st)),
            Err(_) => {
                lock(&self.inner.conns).remove(&s);
                Err(Error::unavailable(format!("shard {s}: no answer within the timeout")))
            }
        }
    }

    /// What a read or scan does after `e`: `Ok` to try again (the shard
    /// said the key is not its own, or its range is moving: the map is
    /// reloaded, waiting for the version the shard named, or up to 3
    /// times per read), or the error to return (a shard that did not answer:
    /// the map is reloaded for the transaction's next run).
    pub(crate) async fn after_read_error(&self, e: Error, tries: &mut u32) -> Result<()> {
        if self.await_map(&e).await {
            return Ok(());
        }
        if e.kind() == "wrong_shard" && *tries < 3 {
            *tries += 1;
            return self.reload_after(&e).await;
        }
        if e.kind() == "unavailable" {
            let _ = self.refresh().await;
        }
        Err(e)
    }

    /// A read's or scan's failure: below the shard's collection watermark,
    /// the clock moves past the floor (the next begin is above it); a
    /// transport failure (the shard gone or moving, a standby promoting)
    /// is retryable, since nothing was written, and drops the connection.
    fn read_error(&self, s: ShardId, st: tonic::Status) -> Error {
        if let Some(floor) = st.metadata().get("milliscale-floor")
            && let Some(f) = floor.to_str().ok().and_then(|f| f.parse().ok())
        {
            lock(&self.inner.clock).observe(f);
        }
        let e = Error::from(st);
        if e.kind() == "transport" {
            lock(&self.inner.conns).remove(&s);
            return Error::unavailable(format!("shard {s}: {}", e.message()));
        }
        e
    }

    /// Send a prepare to shard `s` until it votes (up to three times):
    /// `Some(Ok)` yes, `Some(Err)` no or refused, `None` no answer.
    async fn prepare(&self, s: ShardId, p: proto::ShardPrepareRequest) -> Option<Result<()>> {
        for attempt in 0..3 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let Ok(c) = self.shard(s) else { return None };
            let call = c.shard_prepare(p.clone());
            match tokio::time::timeout(self.inner.builder.rpc_timeout, call).await {
                Ok(Ok(v)) => {
                    if !v.yes && v.floor > 0 {
                        lock(&self.inner.clock).observe(v.floor);
                    }
                    return Some(if v.yes {
                        Ok(())
                    } else {
                        Err(Error::conflict(format!("shard {s} voted no: {}", v.why)))
                    });
                }
                // Refused before anything was prepared (not its key, an
                // unknown table, a bad request): nothing of it commits.
                Ok(Err(st))
                    if matches!(
                        st.code(),
                        tonic::Code::FailedPrecondition
                            | tonic::Code::NotFound
                            | tonic::Code::InvalidArgument
                            | tonic::Code::PermissionDenied
                            | tonic::Code::Unauthenticated
                            // Over a message limit: refused unread.
                            | tonic::Code::OutOfRange
                    ) =>
                {
                    return Some(Err(Error::from(st)));
                }
                _ => {
                    lock(&self.inner.conns).remove(&s);
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
            let Ok(c) = self.shard(s) else { continue };
            let d = proto::ShardDecideRequest {
                txn: Some(proto::ClusterTxnId { client: txn.client, seq: txn.seq }),
                commit,
                ts,
            };
            let wait = self.inner.builder.rpc_timeout;
            tokio::spawn(async move {
                let _ = tokio::time::timeout(wait, c.shard_decide(d)).await;
            });
        }
    }
}
