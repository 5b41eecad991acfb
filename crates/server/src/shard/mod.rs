//! A cluster's shard: `milliscale serve --cluster` (design record 0008).
//!
//! The server's database holds the shard's rows and its transaction
//! records ([`tables`]); MILANA's participant (`milliscale_milana`) decides
//! every call under one lock, and each decision's record is one engine
//! transaction, pre-committed under the lock (so the engine's order is the
//! protocol's) and awaited outside it before the answer leaves.
//!
//! Invariants, beyond the participant's own:
//! - a yes vote, a termination answer and a served read leave only after
//!   the engine transactions that justify them are durable (the prepare,
//!   the abort of an unknown transaction, the read lease);
//! - a single-shard transaction is validated, prepared and committed in
//!   one engine transaction: its version rows and its outcome row;
//! - a multi-shard transaction prepared here and undecided past the
//!   termination timeout is decided by asking the other participants
//!   (cooperative termination); at start-up, the prepared ones found in
//!   the tables are asked about at once;
//! - a decided transaction is forgotten only below the lowest of the
//!   clients' low-water marks and every shard's oldest undecided
//!   timestamp (asked with `ShardInfo`; an unreachable shard stops it);
//! - a key the current shard map does not give this shard is refused
//!   (FAILED_PRECONDITION, kind `wrong_shard`);
//! - a read or scan that meets a prepared write below its timestamp waits
//!   for its decision (up to the termination timeout) and reads again.

mod catalog;
mod execute;
pub mod feed;
mod handover;
mod incoming;
mod moves;
pub mod past;
mod peers;
mod reads;
pub mod rebalance;
pub mod standby;
mod start;
pub mod tables;
mod together;

use std::collections::{BTreeMap, BTreeSet};

use foldhash::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use milliscale_milana::engine_versions::EngineVersions;
use milliscale_milana::fresh::Fresh;
use milliscale_milana::log::{Prepare, Record};
use milliscale_milana::participant::{Participant, Vote};
use milliscale_milana::shard_map::{MapStore, ShardMap};
use milliscale_milana::types::{
    ClientId, CommitTs, Key, ShardId, Timestamp, TxnId, TxnStatus, cluster_key,
};
use milliscale_proto::v1 as proto;
use parking_lot::{Mutex, MutexGuard, RwLock};
use proto::milliscale_client::MilliscaleClient;
use tokio::sync::watch;
use tonic::Status;
use tonic::transport::Channel;

use crate::errors::{engine, refuse};
use tables::Tables;

/// How a server runs as a shard.
#[derive(Clone)]
pub struct ShardOptions {
    /// The shard it is, in the map.
    pub shard: ShardId,
    /// The map's store URL (`s3://...`, `file:///...`, `memory://` in tests).
    pub map: String,
    /// The prefix of the map's objects there.
    pub map_prefix: String,
    /// How far past a read a new read lease reaches (µs). A recovered
    /// shard refuses writes below its last lease, so a longer span means
    /// fewer lease writes and more aborts right after a restart.
    pub lease_span: Timestamp,
    /// How long a multi-shard transaction may stay prepared here before
    /// this shard asks the other participants.
    pub termination_timeout: Duration,
    /// How long to wait for another shard's answer.
    pub peer_timeout: Duration,
    /// How often to collect old versions and forget old decisions.
    pub collect_every: Duration,
    /// A client silent for this long no longer holds the watermark back.
    pub client_silence: Duration,
    /// With nothing to forget, the forget bound is still written this
    /// often while it rises (a change feed's resolved timestamp moves by
    /// it, design record 0014; one log write each); `None`: only with
    /// decisions forgotten.
    pub resolved_every: Option<Duration>,
    /// A range frozen here for a move whose mover has been silent this
    /// long is moved no more: the move is aborted ([`moves`]).
    pub move_timeout: Duration,
    /// How often the rebalancer looks (when the map switches it on and
    /// this shard holds the map's lease).
    pub rebalance_every: Duration,
    /// The bearer token for calls to the other shards.
    pub peer_token: Option<String>,
    /// The certificate authority the other shards' TLS certificates are
    /// signed by (PEM); none: plaintext.
    pub peer_tls_ca: Option<Vec<u8>>,
    /// Serve reads only: a prepare or batch that writes, a table created
    /// or dropped, and a range moved here are refused (a cluster restored
    /// at a point of its past, to be looked at: `serve --cluster
    /// --read-only`). The shard still writes its own records (read
    /// leases, the decisions of read-only transactions).
    pub read_only: bool,
}

/// The refusal of a write by a read-only shard.
pub(crate) fn read_only_refusal() -> Status {
    Status::failed_precondition(
        "this shard serves reads only (serve --cluster --read-only): a cluster at a point of \
         its past is looked at, not written; restore it without --read-only to write",
    )
}

impl std::fmt::Debug for ShardOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardOptions")
            .field("shard", &self.shard)
            .field("map", &self.map)
            .field("map_prefix", &self.map_prefix)
            .finish_non_exhaustive()
    }
}

impl ShardOptions {
    /// Shard `shard` of the map at `map`: a 500 ms lease span, a 1 s
    /// termination timeout, a 10 s move timeout.
    pub fn new(shard: ShardId, map: impl Into<String>) -> ShardOptions {
        ShardOptions {
            shard,
            map: map.into(),
            map_prefix: String::new(),
            lease_span: 500_000,
            termination_timeout: Duration::from_secs(1),
            peer_timeout: Duration::from_millis(500),
            collect_every: Duration::from_millis(100),
            client_silence: Duration::from_secs(10),
            resolved_every: Some(Duration::from_secs(1)),
            move_timeout: Duration::from_secs(10),
            rebalance_every: Duration::from_secs(1),
            peer_token: None,
            peer_tls_ca: None,
            read_only: false,
        }
    }
}

struct State {
    p: Participant<EngineVersions>,
    /// When each multi-shard transaction was prepared here (absent: ask
    /// at the next round; it was found at start-up).
    prepared_at: HashMap<TxnId, Instant>,
    /// A lease renewal is on its way to the engine.
    renewing: bool,
    /// Each client's low-water mark, and when it was heard.
    clients: HashMap<ClientId, (Timestamp, Instant)>,
    /// The CSN of the last record written: an answer that repeats an
    /// earlier one waits until it is durable.
    last_csn: u64,
    /// Tables being dropped: out of `names`, their engine tables not yet
    /// dropped. A create of one waits (it is refused, retryably).
    dropping: BTreeSet<String>,
    /// The version rows held ([`Tables::count_versions`]; below 0 only then).
    versions: i64,
    /// Versions the single-shard fast path installed before the write
    /// that commits them is durable, by its CSN: a read that returns one
    /// answers once that write is durable.
    fresh: Fresh,
    /// The ranges frozen here for a move ([`moves`]).
    frozen: Vec<moves::Frozen>,
    /// Ranges copied while served, before their freeze, by when their
    /// mover last asked for a page ([`handover`]).
    copies: BTreeMap<(Key, Key), Instant>,
    /// Ranges copied here for moves not known to have happened
    /// ([`incoming`]).
    incoming: Vec<incoming::Incoming>,
    /// The requests served on each range's keys since the start, by the
    /// range's first key (for the rebalancer's load; [`State::count`]).
    requests: BTreeMap<Key, u64>,
    /// When the forget bound was last written.
    forget_written: Instant,
}

impl State {
    /// Count a request on each of `keys` (a key read or written, or a
    /// scan's first key) against the range of `map` holding it, while
    /// the map has the rebalancer look at load (else nothing is counted).
    fn count<'k>(&mut self, map: &ShardMap, keys: impl IntoIterator<Item = &'k [u8]>) {
        if map.split_load.is_none() {
            return;
        }
        for k in keys {
            let start = &map.ranges[map.range_of(k)].0;
            match self.requests.get_mut(start) {
                Some(n) => *n += 1,
                None => {
                    self.requests.insert(start.clone(), 1);
                }
            }
        }
    }
}

/// A running shard (see the module's comment).
pub struct Shard {
    opts: ShardOptions,
    tables: Tables,
    maps: Arc<MapStore>,
    map: RwLock<ShardMap>,
    /// When the map was last read from the store.
    map_read: Mutex<Instant>,
    state: Mutex<State>,
    /// The cluster tables this shard knows: read without the state's
    /// lock, changed only under it (a create or a drop).
    names: RwLock<BTreeSet<String>>,
    /// The durable read lease, for reads waiting on a renewal.
    lease: watch::Sender<Timestamp>,
    /// The engine's durable CSN as last seen by a write's ack, for the
    /// answers waiting on a write (`barrier`).
    durable: watch::Sender<u64>,
    /// Woken by each decision, for reads waiting on a prepared write.
    decided: tokio::sync::Notify,
    /// A client of each other shard, with the map version whose address
    /// it was made from ([`Shard::peer`]).
    peers: Mutex<HashMap<ShardId, (u64, MilliscaleClient<Channel>)>>,
    stop: watch::Sender<bool>,
    started: Recovery,
    /// The rebalancer's last round found nothing to do.
    rebalanced: std::sync::atomic::AtomicBool,
    /// One-shot batches that reached their commit in a group ([`together`]).
    together: std::sync::atomic::AtomicU64,
}

/// What a shard's start found in its tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// Transactions in the transaction table.
    pub remembered: usize,
    /// Lone (single-shard) prepares it committed by itself.
    pub committed: usize,
    /// Multi-shard prepares left undecided: asked about at once.
    pub asked: usize,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard").field("shard", &self.opts.shard).finish_non_exhaustive()
    }
}

/// The newest shard map, read on a blocking thread (the store's calls
/// block).
async fn latest_map(maps: &Arc<MapStore>) -> Result<ShardMap, String> {
    let maps = Arc::clone(maps);
    match tokio::task::spawn_blocking(move || maps.latest()).await {
        Ok(Ok(Some(m))) => Ok(m),
        Ok(Ok(None)) => Err("no version of the shard map is published".into()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

fn unavailable(e: &milliscale::Error) -> Status {
    engine(e)
}

impl Shard {
    /// Stop the background work (the server stops serving the calls).
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }

    /// What the start found.
    pub fn recovery(&self) -> Recovery {
        self.started
    }

    /// The store of the cluster's map.
    pub(crate) fn map_store(&self) -> Arc<MapStore> {
        Arc::clone(&self.maps)
    }

    /// This shard's id.
    pub fn id(&self) -> ShardId {
        self.opts.shard
    }

    /// The participant's lock. A caller that finds it taken spins a few
    /// µs before it sleeps: the lock is held for a few µs at a time, and a
    /// sleep and its wake-up cost more than that (measured at 256
    /// sessions: the lock's sleeps and wake-ups took 6.2 µs per one-shot
    /// transaction, 4.9 with the spin; BENCHMARKS.md).
    fn lock(&self) -> MutexGuard<'_, State> {
        const SPINS: usize = 300;
        for _ in 0..SPINS {
            if !self.state.is_locked()
                && let Some(st) = self.state.try_lock()
            {
                return st;
            }
            std::hint::spin_loop();
        }
        self.state.lock()
    }

    /// Write `records` under the lock held in `st`; the ack to await.
    fn write(&self, st: &mut State, records: &[Record]) -> Result<milliscale::CommitAck, Status> {
        let (ack, rows) = self.tables.write(&mut st.p, records).map_err(|e| unavailable(&e))?;
        st.versions += rows as i64;
        if let Some(csn) = ack.csn() {
            st.last_csn = st.last_csn.max(csn);
            st.fresh.wrote(records, csn);
        }
        st.fresh.durable_below(self.tables.db.durable_csn());
        Ok(ack)
    }

    /// Wait until every record written so far (up to `csn`) is durable:
    /// woken as writes' acks come in (`note_durable`), and every few ms in
    /// any case (a write whose call went away is awaited by no one).
    async fn barrier(&self, csn: u64) -> Result<(), Status> {
        let mut durable = self.durable.subscribe();
        loop {
            if self.tables.db.durable_csn() > csn {
                return Ok(());
            }
            if let Some(e) = self.tables.db.blocking().poisoned() {
                return Err(engine(&e));
            }
            let woken = durable.wait_for(|d| *d > csn);
            let _ = tokio::time::timeout(Duration::from_millis(5), woken).await;
        }
    }

    /// A write's ack came in: publish the durable CSN if it moved.
    fn note_durable(&self) {
        let d = self.tables.db.durable_csn();
        self.durable.send_if_modified(|v| {
            let moved = d > *v;
            if moved {
                *v = d;
            }
            moved
        });
    }

    fn key_of(&self, k: Option<proto::TableKey>) -> Result<Key, Status> {
        let k = k.ok_or_else(|| refuse::invalid("a shard call without its key"))?;
        if !self.names.read().contains(&k.table) {
            return Err(engine(&milliscale::Error::TableNotFound(k.table)));
        }
        self.key_in(&self.map.read(), &k.table, &k.key)
    }

    /// [`Shard::key_of`] once the table is known to exist: the key within
    /// the limit and this shard's under `map` (the current map, read by the
    /// caller), in the cluster's key space.
    fn key_in(&self, map: &ShardMap, table: &str, key: &[u8]) -> Result<Key, Status> {
        if key.len() > milliscale_milana::versions::table_key_bytes_max(table) {
            return Err(refuse::invalid(format!(
                "a key of {} bytes is over a cluster's limit for table {table:?}",
                key.len(),
            )));
        }
        let key = cluster_key(table, key);
        self.own_in(map, &key)?;
        Ok(key)
    }

    /// Validate and prepare (MILANA's Algorithm 1); with one participant,
    /// commit in the same engine transaction.
    pub async fn prepare(
        self: &Arc<Self>,
        req: proto::ShardPrepareRequest,
    ) -> Result<proto::ShardPrepareResponse, Status> {
        if self.opts.read_only && !req.writes.is_empty() {
            return Err(read_only_refusal());
        }
        let voted = 'voted: {
            let mut st = self.lock();
            let txn = txn_from(req.txn)?;
            let ts = req.version.as_ref().map_or(0, |v| v.ts);
            // A prepare asked again is answered as the first time, by its
            // name alone, even if its range has moved or is frozen since:
            // refused, its coordinator would abort a transaction prepared
            // (or committed by termination) here.
            let known = st.p.known(txn).is_some();
            // Its keys checked under the lock: a drop of their table (under it
            // too) comes wholly before or after.
            let p = match known {
                true => Ok(Prepare {
                    txn,
                    version: CommitTs::INITIAL,
                    reads: Vec::new(),
                    ranges: Vec::new(),
                    writes: Vec::new(),
                    participants: req.participants,
                }),
                false => self.prepare_from(req),
            };
            let p = p.and_then(|p| {
                let keys = p.reads.iter().map(|(k, _)| k).chain(p.writes.iter().map(|(k, _)| k));
                let ranges = p.ranges.iter().map(|(a, b, _)| (a.as_slice(), b.as_slice()));
                let map = self.map.read();
                self.refuse_moved(&st, &map, keys.clone().map(Vec::as_slice), ranges)?;
                st.count(&map, keys.map(Vec::as_slice));
                Ok(p)
            });
            let p = match p {
                Ok(p) => p,
                Err(e) => {
                    // Refused as a wrong shard (its range moved, or is
                    // moving): a durable no, as a vote's, since its
                    // coordinator aborts on it; a copy of this prepare
                    // arriving late, once the range is served here again,
                    // is refused as well.
                    let no = (crate::errors::kind_of(&e) == Some("wrong_shard"))
                        .then(|| st.p.decide(txn, false, ts))
                        .flatten();
                    let Some(r) = no else { return Err(e) };
                    let no = Wait::Ack(self.write(&mut st, &[r])?, Some(txn));
                    break 'voted Err((e, no));
                }
            };
            let floor = st.p.clock_floor(&p);
            let (vote, records) = if p.participants.len() == 1 {
                st.p.commit_alone(p)
            } else {
                let (vote, rec) = st.p.prepare(p);
                (vote, rec.into_iter().collect())
            };
            if let [Record::Prepare(_)] = &records[..] {
                st.prepared_at.insert(txn, Instant::now());
            }
            let wait = if records.is_empty() {
                // Asked again: answer as the first time, once what is
                // written so far (the first vote's records) is durable.
                Wait::Barrier(st.last_csn)
            } else {
                Wait::Ack(self.write(&mut st, &records)?, None)
            };
            Ok((vote, wait, floor))
        };
        let (vote, wait, floor) = match voted {
            Ok(v) => v,
            Err((refusal, no)) => {
                self.wait(no).await?;
                return Err(refusal);
            }
        };
        self.wait(wait).await?;
        Ok(match vote {
            Vote::Yes => proto::ShardPrepareResponse { yes: true, why: String::new(), floor: 0 },
            Vote::No(why) => proto::ShardPrepareResponse { yes: false, why: why.into(), floor },
        })
    }

    /// Wait for what an answer needs. A decision's durability is noted
    /// by a task of its own, which finishes even if the call's client goes
    /// away (a handler is dropped with its call): a decision never noted
    /// durable would hold the forget bound down for good.
    async fn wait(self: &Arc<Self>, w: Wait) -> Result<(), Status> {
        match w {
            Wait::Barrier(csn) => self.barrier(csn).await,
            Wait::Ack(ack, None) => {
                ack.await.map_err(|e| engine(&e))?;
                self.note_durable();
                Ok(())
            }
            Wait::Ack(ack, Some(t)) => {
                let me = Arc::clone(self);
                let noted = tokio::spawn(async move {
                    let r = ack.await;
                    if r.is_ok() {
                        me.note_durable();
                        me.lock().p.decision_durable(t);
                    }
                    r
                });
                match noted.await {
                    Ok(r) => r.map(|_| ()).map_err(|e| engine(&e)),
                    Err(e) => Err(Status::internal(format!("a decision's task failed: {e}"))),
                }
            }
        }
    }

    fn prepare_from(&self, p: proto::ShardPrepareRequest) -> Result<Prepare, Status> {
        let version = p.version.ok_or_else(|| refuse::invalid("a prepare without a version"))?;
        let mut participants = p.participants;
        participants.sort_unstable();
        participants.dedup();
        if !participants.contains(&self.opts.shard) {
            return Err(refuse::invalid("a prepare whose participants leave this shard out"));
        }
        let mut reads = Vec::with_capacity(p.reads.len());
        for r in p.reads {
            reads.push((self.key_of(r.key)?, ts_from(r.version)));
        }
        let mut ranges = Vec::with_capacity(p.ranges.len());
        for r in p.ranges {
            let (start, end) = (r.start.to_vec(), r.end.to_vec());
            self.own_range(&start, &end)?;
            ranges.push((start, end, r.at));
        }
        let mut writes = Vec::with_capacity(p.writes.len());
        for w in p.writes {
            if w.value.as_ref().is_some_and(|v| v.len() > milliscale::limits::VALUE_BYTES_MAX - 1) {
                return Err(refuse::invalid("a value over the cluster's limit"));
            }
            writes.push((self.key_of(w.key)?, w.value.map(|v| v.to_vec())));
        }
        Ok(Prepare {
            txn: txn_from(p.txn)?,
            version: CommitTs { ts: version.ts, client: version.client },
            reads,
            ranges,
            writes,
            participants,
        })
    }

    /// The coordinator's decision (or a termination round's).
    pub async fn decide(
        self: &Arc<Self>,
        txn: TxnId,
        commit: bool,
        ts: Timestamp,
    ) -> Result<(), Status> {
        let wait = {
            let mut st = self.lock();
            st.prepared_at.remove(&txn);
            let decided = st.p.decide(txn, commit, ts);
            self.decided.notify_waiters();
            match decided {
                Some(r) => Wait::Ack(self.write(&mut st, &[r])?, Some(txn)),
                None => return Ok(()),
            }
        };
        self.wait(wait).await
    }

    /// What this shard knows of `txn` (cooperative termination).
    pub async fn query(self: &Arc<Self>, txn: TxnId, ts: Timestamp) -> Result<TxnStatus, Status> {
        let (status, wait) = {
            let mut st = self.lock();
            let (status, rec) = st.p.status(txn, ts);
            // An unknown transaction's abort, or a decision it learnt.
            self.decided.notify_waiters();
            let wait = match rec {
                Some(r) => Wait::Ack(self.write(&mut st, &[r])?, None),
                None => Wait::Barrier(st.last_csn),
            };
            (status, wait)
        };
        self.wait(wait).await?;
        Ok(status)
    }

    /// The shard's state.
    pub fn info(&self) -> proto::ShardInfoResponse {
        let map_version = self.map.read().version;
        let st = self.lock();
        proto::ShardInfoResponse {
            shard: self.opts.shard,
            map_version,
            prepared: st.p.prepared().len() as u64,
            oldest_undecided: st.p.oldest_undecided(),
            remembered: st.p.remembered() as u64,
            versions: st.versions.max(0) as u64,
            moving: st.frozen.iter().map(moves::Frozen::in_flight).collect(),
            batches_together: self.together.load(std::sync::atomic::Ordering::Relaxed),
            ..Default::default() // standbys and streams_opened: the service's to fill
        }
    }

    /// The shard map it serves under, reloaded from the store first if
    /// it was last read over half a second ago (a client asks after a
    /// shard stopped answering: a standby may have published its address),
    /// or over 50 ms ago and is older than version `at_least` (a client
    /// was told the map moved).
    pub async fn map(&self, at_least: u64) -> proto::ShardMapResponse {
        let read = self.map_read.lock().elapsed();
        let behind = at_least > self.map.read().version && read > Duration::from_millis(50);
        if behind || read > Duration::from_millis(500) {
            self.refresh_map().await;
        }
        let map = self.map.read();
        proto::ShardMapResponse {
            version: map.version,
            ranges: map
                .ranges
                .iter()
                .map(|(start, shard)| proto::MapRange {
                    start: start.clone().into(),
                    shard: *shard,
                })
                .collect(),
            shards: map
                .shards
                .iter()
                .map(|(s, info)| proto::MapShard { shard: *s, addr: info.addr.clone() })
                .collect(),
        }
    }
}

/// What an answer waits for.
enum Wait {
    /// Everything written up to this CSN.
    Barrier(u64),
    /// This write; and, if it decided a transaction prepared here, which.
    Ack(milliscale::CommitAck, Option<TxnId>),
}

pub(crate) fn txn_to(t: TxnId) -> proto::ClusterTxnId {
    proto::ClusterTxnId { client: t.client, seq: t.seq }
}

pub(crate) fn txn_from(t: Option<proto::ClusterTxnId>) -> Result<TxnId, Status> {
    let t = t.ok_or_else(|| refuse::invalid("a shard call without its transaction"))?;
    Ok(TxnId { client: t.client, seq: t.seq })
}

fn ts_to(v: CommitTs) -> proto::CommitTs {
    proto::CommitTs { ts: v.ts, client: v.client }
}

fn ts_from(v: Option<proto::CommitTs>) -> CommitTs {
    v.map_or(CommitTs::INITIAL, |v| CommitTs { ts: v.ts, client: v.client })
}

pub(crate) fn status_to(s: TxnStatus) -> proto::ClusterTxnStatus {
    match s {
        TxnStatus::Prepared => proto::ClusterTxnStatus::Prepared,
        TxnStatus::Committed => proto::ClusterTxnStatus::Committed,
        TxnStatus::Aborted => proto::ClusterTxnStatus::Aborted,
    }
}

pub(crate) fn status_from(s: i32) -> Option<TxnStatus> {
    match proto::ClusterTxnStatus::try_from(s) {
        Ok(proto::ClusterTxnStatus::Prepared) => Some(TxnStatus::Prepared),
        Ok(proto::ClusterTxnStatus::Committed) => Some(TxnStatus::Committed),
        Ok(proto::ClusterTxnStatus::Aborted) => Some(TxnStatus::Aborted),
        _ => None,
    }
}

/// The physical clock, in microseconds since the Unix epoch.
fn now_us() -> Timestamp {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as Timestamp)
}
