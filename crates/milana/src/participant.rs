//! A shard primary: the participant of MILANA's two-phase commit.
//!
//! It holds, per key, the committed versions (oldest first) and three
//! timestamps of MILANA §4.1: `latest_read` (the highest read timestamp
//! served), `prepared` (the transaction validated on the key and not yet
//! decided) and `latest_committed` (the newest committed version). It is
//! written without I/O: each call returns the log record the caller must
//! make durable before it answers (before a yes vote, above all).
//!
//! Invariants:
//! - a key has at most one undecided prepared transaction; it blocks every
//!   other validation that touches the key until it is decided;
//! - a committed version is never below a read served on its key, nor
//!   below a version already committed there (so serving a read at `t`
//!   fixes the key's history up to `t`); a prepared read extends the
//!   key's latest read to the reader's commit timestamp;
//! - a transaction asked about by a termination query and unknown here is
//!   aborted here first, so a late prepare of it votes no;
//! - after a recovery, no key's latest read is assumed lower than the
//!   highest read lease logged.

use std::collections::{BTreeMap, BTreeSet};

use foldhash::HashMap;

pub use mutations::Mutations;

use crate::log::{Prepare, Record};
use crate::types::{CommitTs, HeldKey, Key, ShardId, Timestamp, TxnId, TxnStatus, Value};
use crate::versions::{Gone, MapVersions, Versions, in_range};

#[derive(Debug, Clone, Default)]
struct KeyState {
    latest_read: Timestamp,
    /// The undecided transaction validated on this key, and the version it
    /// writes here if it writes.
    prepared: Option<(TxnId, Option<CommitTs>)>,
}

/// A transaction as this shard knows it; a decided one carries its
/// commit timestamp, by which it is forgotten ([`Participant::forget`]).
#[derive(Debug, Clone)]
enum Entry {
    Prepared(Prepare),
    Committed(Timestamp),
    Aborted(Timestamp),
}

/// A read's answer: the newest committed version at or below the read
/// timestamp, and whether a prepared write at or below it could still
/// commit (MILANA §4.3: a read-only transaction that saw one fails local
/// validation).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReadReply {
    /// The version read.
    pub version: CommitTs,
    /// Its value (`None`: no value).
    pub value: Option<Value>,
    /// A prepared write at or below the read timestamp exists.
    pub prepared_below: bool,
}

/// A scan's answer: the rows with a value at the scan's timestamp, and
/// whether a prepared write at or below it lies in the range (then no
/// transaction that scanned it can commit: that write may still commit
/// below what the scan saw).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ScanReply {
    /// `(key, version, value)`, in key order.
    pub rows: Vec<(Key, CommitTs, Value)>,
    /// A prepared write at or below the scan's timestamp is in the range.
    pub prepared_below: bool,
}

/// A scanned range's read mark: no write into `[start, end)` may commit
/// at or below `latest_read` (MILANA's latest read, for a range).
#[derive(Debug, Clone)]
struct RangeMark {
    start: Key,
    end: Key,
    latest_read: Timestamp,
}

/// A vote on a prepare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vote {
    /// Validated (and, once its record is durable, prepared).
    Yes,
    /// Refused; why.
    No(&'static str),
}

/// What [`Participant::recover`] rebuilt.
#[derive(Debug)]
pub struct Recovered<V: Versions = MapVersions> {
    /// The primary, ready to serve (the keys of `ask` stay blocked).
    pub participant: Participant<V>,
    /// Records to log: the commits recovery decided by itself.
    pub logged: Vec<Record>,
    /// Prepared multi-shard transactions and their participants: ask the
    /// others, then [`Participant::decide`].
    pub ask: Vec<(TxnId, Vec<ShardId>)>,
}

/// A shard primary's transaction state, over its committed versions (a
/// map by default; [`crate::engine_versions::EngineVersions`] keeps them in the
/// engine).
#[derive(Debug, Clone)]
pub struct Participant<V: Versions = MapVersions> {
    id: ShardId,
    /// `latestRead` and `prepared`, per key that has either (hashed: every
    /// read marks one).
    keys: HashMap<HeldKey, KeyState>,
    /// The keys whose `prepared` is set, in order, for the ranges scanned.
    prepared_keys: BTreeSet<Key>,
    /// The ranges scanned, with their latest reads (collected as the keys'
    /// marks are).
    ranges: Vec<RangeMark>,
    versions: V,
    txns: BTreeMap<TxnId, Entry>,
    /// Every key's latest read is at least this (set by a recovery from
    /// the lease; raised by a collection to the marks it dropped).
    read_floor: Timestamp,
    /// Reads below this are covered by a durable lease record.
    lease: Timestamp,
    /// How far past a read a new lease reaches.
    lease_span: Timestamp,
    /// The highest watermark collected below: a read below it may miss
    /// the version it needs and is refused.
    collected: Timestamp,
    /// Decided transactions with a timestamp below this were forgotten:
    /// a prepare below it is refused (it may be a late copy of one).
    forgotten: Timestamp,
    /// Transactions prepared here and decided, whose decision's record
    /// is not yet known durable ([`Participant::decision_durable`]): a
    /// crash would leave them prepared again, so they hold the forget
    /// bound down as a prepare does.
    deciding: BTreeMap<TxnId, Timestamp>,
    mutations: Mutations,
}

impl Participant {
    /// An empty shard, its versions in a map.
    pub fn new(id: ShardId, lease_span: Timestamp, mutations: Mutations) -> Participant {
        Participant::with_versions(id, lease_span, mutations, MapVersions::default())
    }

    /// Rebuild a primary whose versions are in a map from its log
    /// ([`Participant::recover_with`]).
    pub fn recover(
        id: ShardId,
        lease_span: Timestamp,
        mutations: Mutations,
        log: &[Record],
    ) -> Recovered {
        Participant::recover_with(id, lease_span, mutations, log, MapVersions::default())
    }
}

impl<V: Versions> Participant<V> {
    /// A shard over `versions`: empty, or (for [`crate::engine_versions::EngineVersions`])
    /// already holding what the log's commits installed, since installing
    /// a version again there rewrites the same row. A [`MapVersions`] must
    /// start empty: it keeps every install.
    pub fn with_versions(
        id: ShardId,
        lease_span: Timestamp,
        mutations: Mutations,
        versions: V,
    ) -> Participant<V> {
        Participant {
            id,
            keys: HashMap::default(),
            prepared_keys: BTreeSet::new(),
            ranges: Vec::new(),
            versions,
            txns: BTreeMap::new(),
            read_floor: 0,
            lease: 0,
            lease_span: lease_span.max(1),
            collected: 0,
            forgotten: 0,
            deciding: BTreeMap::new(),
            mutations,
        }
    }

    /// This shard.
    pub fn id(&self) -> ShardId {
        self.id
    }

    /// The mutations it runs with.
    pub fn mutations(&self) -> Mutations {
        self.mutations
    }

    /// The lease record to make durable before serving a read at `at`, if
    /// the current lease does not cover it.
    pub fn lease_needed(&self, at: Timestamp) -> Option<Record> {
        (at >= self.lease).then(|| Record::ReadLease(at + self.lease_span))
    }

    /// Versions below this may have been collected: a read must be at or
    /// above it ([`Participant::collect`] keeps, for each key, the newest
    /// version at or below the watermark, and everything above).
    pub fn collected(&self) -> Timestamp {
        self.collected
    }

    /// How many committed versions it holds.
    pub fn versions(&self) -> usize {
        self.versions.count()
    }

    /// Reads below this are covered by a durable lease.
    pub fn lease(&self) -> Timestamp {
        self.lease
    }

    /// A lease record became durable.
    pub fn lease_durable(&mut self, until: Timestamp) {
        self.lease = self.lease.max(until);
    }

    /// Read `key` at `at` (a transaction's begin timestamp). The caller
    /// has made the lease cover `at` first ([`Participant::lease_needed`]).
    /// [`Gone`]: the version at `at` is no longer held (the read mark stays,
    /// which only makes validation more conservative).
    pub fn read(&mut self, key: &[u8], at: Timestamp) -> Result<ReadReply, Gone> {
        let prepared_below = self.mark(key, at);
        let (version, value) = self.versions.read_at(key, at)?;
        Ok(ReadReply { version, value, prepared_below })
    }

    /// [`Participant::read`] without the value: its version if known without
    /// a row ([`Versions::version_at`]), and if a prepared write is at or
    /// below `at`. The value may be read later, outside what orders this with
    /// prepares: once marked, no version at or below `at` can be installed.
    pub fn read_version(&mut self, key: &[u8], at: Timestamp) -> (Option<CommitTs>, bool) {
        self.read_version_with(key, at, |v, key, at| v.version_at(key, at))
    }

    /// [`Participant::read_version`], asking the versions with `known`
    /// (which answers as [`Versions::version_at`] does, with whatever else
    /// the caller wants from the same lookup) once the key is marked.
    pub fn read_version_with<R>(
        &mut self,
        key: &[u8],
        at: Timestamp,
        known: impl FnOnce(&V, &[u8], Timestamp) -> Option<R>,
    ) -> (Option<R>, bool) {
        let prepared_below = self.mark(key, at);
        (known(&self.versions, key, at), prepared_below)
    }

    /// Raise `key`'s read mark to `at`: is a prepared write at or below it?
    fn mark(&mut self, key: &[u8], at: Timestamp) -> bool {
        debug_assert!(at < self.lease, "a read outside the lease");
        // `get_mut` first: most keys read have one, and `entry` copies keys.
        let k = match self.keys.get_mut(key) {
            Some(k) => k,
            None => self.keys.entry(HeldKey::from_slice(key)).or_default(),
        };
        k.latest_read = k.latest_read.max(at);
        matches!(k.prepared, Some((_, Some(v))) if v.ts <= at)
    }

    /// Scan `[start, end)` (an empty `end`: no end) at `at`, at most
    /// `limit` rows (0: all). The range's read mark rises to `at`, so no
    /// write into it (a key scanned, or a new one: a phantom) can commit
    /// at or below `at`. The caller has made the lease cover `at`.
    pub fn scan(
        &mut self,
        start: &[u8],
        end: &[u8],
        at: Timestamp,
        limit: usize,
    ) -> Result<ScanReply, Gone> {
        debug_assert!(at < self.lease, "a scan outside the lease");
        match self.ranges.iter_mut().find(|r| r.start == start && r.end == end) {
            Some(r) => r.latest_read = r.latest_read.max(at),
            None => self.ranges.push(RangeMark {
                start: start.to_vec(),
                end: end.to_vec(),
                latest_read: at,
            }),
        }
        let prepared_below =
            self.prepared_keys.range(start.to_vec()..).take_while(|k| in_range(k, start, end)).any(
                |k| matches!(self.keys[k.as_slice()].prepared, Some((_, Some(v))) if v.ts <= at),
            );
        Ok(ScanReply { rows: self.versions.scan_at(start, end, at, limit)?, prepared_below })
    }

    /// The highest read mark of a range holding `key`.
    fn range_read(&self, key: &[u8]) -> Timestamp {
        let marks = self.ranges.iter().filter(|r| in_range(key, &r.start, &r.end));
        marks.map(|r| r.latest_read).max().unwrap_or(0)
    }

    /// MILANA's Algorithm 1: may `p` commit here, given the versions it
    /// read on this shard (`p.reads`)? On yes the keys are marked
    /// prepared. Either vote comes with the record that must be durable
    /// before it is sent (none when `p` was seen before: then the vote
    /// repeats the first, once the log so far is durable).
    pub fn prepare(&mut self, p: Prepare) -> (Vote, Option<Record>) {
        match self.txns.get(&p.txn) {
            Some(Entry::Prepared(_) | Entry::Committed(_)) => return (Vote::Yes, None),
            Some(Entry::Aborted(_)) => return (Vote::No("aborted here before"), None),
            None => {}
        }
        if let Err(why) = self.validate(&p) {
            // A no is final: logged, so that a crash cannot turn a
            // repeated prepare of it into a yes.
            self.txns.insert(p.txn, Entry::Aborted(p.version.ts));
            return (Vote::No(why), Some(Record::Abort(p.txn, p.version.ts)));
        }
        self.mark_prepared(&p);
        if self.mutations.install_before_decision {
            self.versions.install(p.version, &p.writes);
        }
        (Vote::Yes, Some(Record::Prepare(p)))
    }

    /// The lowest commit timestamp at which `p`'s writes would not be
    /// refused for their timestamp alone: past every read served on the
    /// keys it writes (and the ranges holding them), the read floor, the
    /// collected versions and the forget bound. A client told this after a no moves its clock past it,
    /// so that a clock behind the others costs one abort, not a run of
    /// them.
    pub fn clock_floor(&self, p: &Prepare) -> Timestamp {
        let reads = p.writes.iter().map(|(k, _)| {
            self.keys.get(k.as_slice()).map_or(0, |s| s.latest_read).max(self.range_read(k))
        });
        reads.fold(self.read_floor.max(self.collected).max(self.forgotten), Timestamp::max)
    }

    /// Algorithm 1, line by line, plus the recovery floor.
    fn validate(&self, p: &Prepare) -> Result<(), &'static str> {
        if p.version.ts < self.forgotten {
            return Err("the commit timestamp is below the forget bound (a late copy?)");
        }
        let state = |key: &Key| self.keys.get(key.as_slice());
        for (key, version) in &p.reads {
            let k = state(key);
            if k.is_some_and(|k| k.prepared.is_some()) {
                return Err("a key read is prepared by another transaction");
            }
            if self.versions.latest(key) != *version {
                return Err("a key read has a newer committed version");
            }
        }
        if !self.mutations.skip_range_check {
            for (start, end, at) in &p.ranges {
                let mut keys = self.prepared_keys.range(start.clone()..);
                if keys.next().is_some_and(|k| in_range(k, start, end)) {
                    return Err("a range scanned holds a key prepared by another transaction");
                }
                if self.versions.changed_after(start, end, *at) {
                    return Err("a range scanned has a newer committed version");
                }
            }
        }
        for (key, _) in &p.writes {
            let k = state(key);
            if k.is_some_and(|k| k.prepared.is_some()) {
                return Err("a key written is prepared by another transaction");
            }
            if !self.mutations.skip_latest_read_check {
                let latest_read =
                    k.map_or(0, |k| k.latest_read).max(self.read_floor).max(self.range_read(key));
                if latest_read >= p.version.ts {
                    return Err("a key written was read at or after the commit timestamp");
                }
            }
            if self.versions.latest(key) >= p.version {
                return Err("a key written has a committed version at or after this one");
            }
        }
        Ok(())
    }

    /// The decision for `txn` arrived (from its coordinator, a termination
    /// query, or a recovery); `ts` is its commit timestamp (the one its
    /// prepare carries). Returns the record to log, if any.
    pub fn decide(&mut self, txn: TxnId, commit: bool, ts: Timestamp) -> Option<Record> {
        match self.txns.get(&txn) {
            Some(Entry::Committed(_) | Entry::Aborted(_)) => None,
            Some(Entry::Prepared(_)) => {
                let Some(Entry::Prepared(p)) = self.txns.remove(&txn) else { unreachable!() };
                self.release(&p, commit);
                let ts = p.version.ts;
                self.deciding.insert(txn, ts);
                Some(if commit {
                    self.txns.insert(txn, Entry::Committed(ts));
                    Record::Commit(txn)
                } else {
                    self.txns.insert(txn, Entry::Aborted(ts));
                    Record::Abort(txn, ts)
                })
            }
            None if !commit => {
                self.txns.insert(txn, Entry::Aborted(ts));
                Some(Record::Abort(txn, ts))
            }
            // A commit of a transaction never prepared here: only a broken
            // protocol (a yes vote that was not durable) sends it. There
            // is nothing to apply; the oracle finds the writes missing.
            None => None,
        }
    }

    /// Unmark `p`'s keys; apply its writes if it commits.
    fn release(&mut self, p: &Prepare, commit: bool) {
        let keys = p.reads.iter().map(|(k, _)| k).chain(p.writes.iter().map(|(k, _)| k));
        for key in keys {
            if let Some(k) = self.keys.get_mut(key.as_slice())
                && matches!(k.prepared, Some((t, _)) if t == p.txn)
            {
                k.prepared = None;
                self.prepared_keys.remove(key);
            }
        }
        if commit && !self.mutations.install_before_decision {
            self.versions.install(p.version, &p.writes);
        }
    }

    /// What this shard knows of `txn`, for a termination query. Unknown
    /// here means aborted here, from now on (the returned record logs
    /// it). The answer may be sent only once the log so far is durable:
    /// a prepare or a no it reports may still be in flight to the log,
    /// and a crash would take it back.
    ///
    /// `ts` is the transaction's commit timestamp, which the asker knows
    /// from its prepare: an abort filed here carries it, so that it is
    /// forgotten in its turn.
    pub fn status(&mut self, txn: TxnId, ts: Timestamp) -> (TxnStatus, Option<Record>) {
        match self.txns.get(&txn) {
            Some(Entry::Prepared(_)) => (TxnStatus::Prepared, None),
            Some(Entry::Committed(_)) => (TxnStatus::Committed, None),
            Some(Entry::Aborted(_)) => (TxnStatus::Aborted, None),
            None => (TxnStatus::Aborted, self.decide(txn, false, ts)),
        }
    }

    /// The commit timestamp of the oldest transaction prepared here
    /// whose decision is not durable here (undecided, or decided with the
    /// record still on its way to the log): what this shard publishes for
    /// the forget bound. A decision that a crash can take back counts: a
    /// restart finds the transaction prepared and asks about it.
    pub fn oldest_undecided(&self) -> Option<Timestamp> {
        let prepared = self.txns.values().filter_map(|e| match e {
            Entry::Prepared(p) => Some(p.version.ts),
            _ => None,
        });
        prepared.chain(self.deciding.values().copied()).min()
    }

    /// The record of `txn`'s decision is durable (the caller's log says
    /// so; see [`Participant::oldest_undecided`]).
    pub fn decision_durable(&mut self, txn: TxnId) {
        self.deciding.remove(&txn);
    }

    /// Forget the decided transactions with a timestamp below `bound`:
    /// the caller passes the minimum of the client watermark and every
    /// shard's [`Participant::oldest_prepared`] (design record 0008), below
    /// which no participant can still ask about a decision and no client
    /// sends a new prepare. From now on a prepare below the bound is
    /// refused. Returns the record to log (the rows to delete and the
    /// bound), if any transaction was forgotten, or with `idle` if only the
    /// bound rises (a change feed's resolved timestamp, design record 0014).
    pub fn forget(&mut self, bound: Timestamp, idle: bool) -> Option<Record> {
        // Never past a prepare of this shard's own, whatever the caller says.
        let bound = self.oldest_undecided().map_or(bound, |t| t.min(bound));
        if bound <= self.forgotten {
            return None;
        }
        let mut txns = Vec::new();
        self.txns.retain(|t, e| {
            let keep = match e {
                Entry::Prepared(_) => true,
                Entry::Committed(ts) | Entry::Aborted(ts) => *ts >= bound,
            };
            if !keep {
                txns.push(*t);
            }
            keep
        });
        // Nothing forgotten, nothing to refuse later: the bound stays,
        // unless asked to rise alone.
        if txns.is_empty() && !idle {
            return None;
        }
        self.forgotten = bound;
        Some(Record::Forget { below: bound, txns })
    }

    /// Decided transactions with a timestamp below this were forgotten.
    pub fn forgotten(&self) -> Timestamp {
        self.forgotten
    }

    /// How many transactions it remembers (prepared or decided).
    pub fn remembered(&self) -> usize {
        self.txns.len()
    }

    /// The prepared transactions, with their participants.
    /// Whether a prepared, undecided transaction writes a key of `table`
    /// (a drop of the table waits for its decision: a commit decided
    /// after the drop would write the dropped table's rows again).
    pub fn prepared_writes_to(&self, table: &str) -> bool {
        self.txns.values().any(|e| match e {
            Entry::Prepared(p) => p
                .writes
                .iter()
                .any(|(k, _)| crate::types::split_cluster_key(k).is_some_and(|(t, _)| t == table)),
            _ => false,
        })
    }

    pub fn prepared(&self) -> Vec<(TxnId, Vec<ShardId>)> {
        self.txns
            .iter()
            .filter_map(|(t, e)| match e {
                Entry::Prepared(p) => Some((*t, p.participants.clone())),
                _ => None,
            })
            .collect()
    }

    /// The commit timestamp of `txn`, if it is decided here (and not
    /// forgotten).
    pub fn decided_ts(&self, txn: TxnId) -> Option<Timestamp> {
        match self.txns.get(&txn) {
            Some(Entry::Committed(ts) | Entry::Aborted(ts)) => Some(*ts),
            _ => None,
        }
    }

    /// The committed versions, for a caller that writes what they staged
    /// ([`crate::engine_versions::EngineVersions::take_staged`]).
    pub fn versions_mut(&mut self) -> &mut V {
        &mut self.versions
    }

    /// The commit timestamp of `txn`, if it is prepared here.
    pub fn prepared_ts(&self, txn: TxnId) -> Option<Timestamp> {
        match self.txns.get(&txn) {
            Some(Entry::Prepared(p)) => Some(p.version.ts),
            _ => None,
        }
    }

    /// A transaction's status here, if known (for the oracle).
    pub fn known(&self, txn: TxnId) -> Option<TxnStatus> {
        self.txns.get(&txn).map(|e| match e {
            Entry::Prepared(_) => TxnStatus::Prepared,
            Entry::Committed(_) => TxnStatus::Committed,
            Entry::Aborted(_) => TxnStatus::Aborted,
        })
    }

    /// Every key's committed versions, oldest first (for the oracle).
    pub fn committed(&self) -> BTreeMap<Key, Vec<(CommitTs, Option<Value>)>> {
        self.versions.all()
    }

    /// Drop versions no reader can need: below `watermark` (no active or
    /// future transaction of any client begins below it, MILANA §4.4) only
    /// the newest version of each key is kept. How many were dropped.
    ///
    /// The per-key read marks at or below the watermark go too (keys with
    /// a prepare keep theirs), and the read floor rises to the highest mark
    /// dropped. The floor refuses every write a dropped mark would have
    /// refused, and more only at or below the watermark, where no
    /// transaction commits: so the marks a shard keeps are bounded by the
    /// keys read above the watermark, not by every key ever read.
    pub fn collect(&mut self, watermark: Timestamp) -> usize {
        self.collect_marks(watermark);
        self.versions.collect(watermark)
    }

    /// [`Participant::collect`] but the versions: reads below `watermark`
    /// are refused from now on, and the read marks at or below it go. The
    /// caller then drops the versions (the server's shard does it outside
    /// its lock, with `VersionRows::collect`).
    pub fn collect_marks(&mut self, watermark: Timestamp) {
        self.collected = self.collected.max(watermark);
        let mut floor = self.read_floor;
        self.keys.retain(|_, k| {
            let keep = k.prepared.is_some() || k.latest_read > watermark;
            if !keep {
                floor = floor.max(k.latest_read);
            }
            keep
        });
        self.ranges.retain(|r| {
            let keep = r.latest_read > watermark;
            if !keep {
                floor = floor.max(r.latest_read);
            }
            keep
        });
        self.read_floor = floor;
    }

    /// How many keys carry a read mark or a prepare, and ranges a read
    /// mark.
    pub fn read_marks(&self) -> usize {
        self.keys.len() + self.ranges.len()
    }

    /// Mark `prep`'s keys prepared and file it as prepared.
    fn mark_prepared(&mut self, prep: &Prepare) {
        for (key, _) in &prep.reads {
            let k = self.keys.entry(HeldKey::from_slice(key)).or_default();
            // The reads take effect at the commit timestamp: no write may
            // commit below it on a key this transaction read.
            k.prepared = Some((prep.txn, None));
            k.latest_read = k.latest_read.max(prep.version.ts);
            self.prepared_keys.insert(key.clone());
        }
        for (key, _) in &prep.writes {
            self.keys.entry(HeldKey::from_slice(key)).or_default().prepared =
                Some((prep.txn, Some(prep.version)));
            self.prepared_keys.insert(key.clone());
        }
        // A scan takes effect at the commit timestamp too: no write into
        // its range may commit below it.
        self.mark_ranges(&prep.ranges, prep.version.ts);
        self.txns.insert(prep.txn, Entry::Prepared(prep.clone()));
    }

    /// Raise the read marks of `ranges` (a prepare's scans) to `ts`.
    fn mark_ranges(&mut self, ranges: &[(Key, Key, Timestamp)], ts: Timestamp) {
        for (start, end, _) in ranges {
            match self.ranges.iter_mut().find(|r| &r.start == start && &r.end == end) {
                Some(r) => r.latest_read = r.latest_read.max(ts),
                None => self.ranges.push(RangeMark {
                    start: start.clone(),
                    end: end.clone(),
                    latest_read: ts,
                }),
            }
        }
    }
}

mod lone;
mod moves;
mod mutations;
mod restart;
#[cfg(test)]
mod tests;
