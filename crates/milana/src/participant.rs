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

use std::collections::BTreeMap;

use crate::log::{Prepare, Record};
use crate::tables::{ShardTables, TxnRow};
use crate::types::{CommitTs, Key, ShardId, Timestamp, TxnId, TxnStatus, Value};
use crate::versions::{MapVersions, Versions};

/// Deliberate protocol bugs, for showing that the simulation catches them.
/// All off in real use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mutations {
    /// Validate writes without Algorithm 1's latest-read check (line 13)
    /// and without the floor a recovery sets.
    pub skip_latest_read_check: bool,
    /// Vote yes before the prepare record is durable (the caller's
    /// business: it answers at once instead of waiting for the log).
    pub vote_before_durable: bool,
    /// At recovery, commit a prepared multi-shard transaction without
    /// asking the other participants.
    pub commit_prepared_without_asking: bool,
    /// At recovery, ignore the read leases logged: start every key's
    /// latest read at zero (MILANA §4.5's pitfall, left open).
    pub forget_read_floor: bool,
    /// At a restart, keep only the prepared rows of the transaction table
    /// and drop the decided ones (a plausible saving: "only prepares need
    /// recovering"); a participant still asking about a transaction
    /// decided here then hears "aborted".
    pub restart_forgets_decided: bool,
    /// Forget decided transactions below the client watermark alone,
    /// without the shards' oldest undecided prepares (the caller's
    /// business: the simulation computes the bound). A participant whose
    /// decision was lost then asks about a transaction no one remembers.
    pub forget_below_watermark_only: bool,
}

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
/// map by default; [`crate::versions::EngineVersions`] keeps them in the
/// engine).
#[derive(Debug, Clone)]
pub struct Participant<V: Versions = MapVersions> {
    id: ShardId,
    /// `latestRead` and `prepared`, per key that has either.
    keys: BTreeMap<Key, KeyState>,
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
    /// A shard over `versions`: empty, or (for [`crate::versions::EngineVersions`])
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
            keys: BTreeMap::new(),
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
    pub fn read(&mut self, key: &[u8], at: Timestamp) -> ReadReply {
        debug_assert!(at < self.lease, "a read outside the lease");
        let k = self.keys.entry(key.to_vec()).or_default();
        k.latest_read = k.latest_read.max(at);
        let (version, value) = self.versions.read_at(key, at);
        let prepared_below = matches!(k.prepared, Some((_, Some(v))) if v.ts <= at);
        ReadReply { version, value, prepared_below }
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
        (Vote::Yes, Some(Record::Prepare(p)))
    }

    /// Algorithm 1, line by line, plus the recovery floor.
    fn validate(&self, p: &Prepare) -> Result<(), &'static str> {
        if p.version.ts < self.forgotten {
            return Err("the commit timestamp is below the forget bound (a late copy?)");
        }
        let state = |key: &Key| self.keys.get(key);
        for (key, version) in &p.reads {
            let k = state(key);
            if k.is_some_and(|k| k.prepared.is_some()) {
                return Err("a key read is prepared by another transaction");
            }
            if self.versions.latest(key) != *version {
                return Err("a key read has a newer committed version");
            }
        }
        for (key, _) in &p.writes {
            let k = state(key);
            if k.is_some_and(|k| k.prepared.is_some()) {
                return Err("a key written is prepared by another transaction");
            }
            if !self.mutations.skip_latest_read_check {
                let latest_read = k.map_or(0, |k| k.latest_read).max(self.read_floor);
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
            if let Some(k) = self.keys.get_mut(key)
                && matches!(k.prepared, Some((t, _)) if t == p.txn)
            {
                k.prepared = None;
            }
        }
        if commit {
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
    /// bound), if any transaction was forgotten.
    pub fn forget(&mut self, bound: Timestamp) -> Option<Record> {
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
        // Nothing forgotten, nothing to refuse later: the bound stays.
        if txns.is_empty() {
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
    pub fn prepared(&self) -> Vec<(TxnId, Vec<ShardId>)> {
        self.txns
            .iter()
            .filter_map(|(t, e)| match e {
                Entry::Prepared(p) => Some((*t, p.participants.clone())),
                _ => None,
            })
            .collect()
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
        self.collected = self.collected.max(watermark);
        let mut floor = self.read_floor;
        self.keys.retain(|_, k| {
            let keep = k.prepared.is_some() || k.latest_read > watermark;
            if !keep {
                floor = floor.max(k.latest_read);
            }
            keep
        });
        self.read_floor = floor;
        self.versions.collect(watermark)
    }

    /// How many keys carry a read mark or a prepare.
    pub fn read_marks(&self) -> usize {
        self.keys.len()
    }

    /// Rebuild a primary from its durable log: the tables the log leaves
    /// ([`ShardTables::from_log`]), then [`Participant::restart`].
    pub fn recover_with(
        id: ShardId,
        lease_span: Timestamp,
        mutations: Mutations,
        log: &[Record],
        versions: V,
    ) -> Recovered<V> {
        let tables = ShardTables::from_log(versions, log);
        Participant::restart(id, lease_span, mutations, tables)
    }

    /// Rebuild a primary from its durable tables (MILANA's Algorithm 2,
    /// the merge, over one shard's state): the versions are the tables';
    /// a decided transaction is remembered as decided; a prepared one is
    /// marked on its keys again, without validating again. Then a
    /// prepared transaction with no other participant is committed (its
    /// coordinator decided on this one vote), and the prepared
    /// multi-shard ones are returned, to be decided by asking the other
    /// participants ([`Participant::decide`] each answer). Every key's
    /// latest read starts at the lease, and prepares below the forget
    /// bound stay refused.
    pub fn restart(
        id: ShardId,
        lease_span: Timestamp,
        mutations: Mutations,
        tables: ShardTables<V>,
    ) -> Recovered<V> {
        let ShardTables { versions, txns, lease, forgotten } = tables;
        let mut p = Participant::with_versions(id, lease_span, mutations, versions);
        for (txn, row) in txns {
            match row {
                TxnRow::Prepared(prep) => p.mark_prepared(&prep),
                _ if mutations.restart_forgets_decided => {}
                TxnRow::Committed(ts) => {
                    p.txns.insert(txn, Entry::Committed(ts));
                }
                TxnRow::Aborted(ts) => {
                    p.txns.insert(txn, Entry::Aborted(ts));
                }
            }
        }
        p.forgotten = forgotten;
        if !mutations.forget_read_floor {
            p.read_floor = lease;
            p.lease = lease;
        }
        let mut logged = Vec::new();
        let mut ask = Vec::new();
        for (txn, participants) in p.prepared() {
            if participants.len() <= 1 || mutations.commit_prepared_without_asking {
                logged.extend(p.decide(txn, true, 0));
            } else {
                ask.push((txn, participants));
            }
        }
        Recovered { participant: p, logged, ask }
    }

    /// Mark `prep`'s keys prepared and file it as prepared.
    fn mark_prepared(&mut self, prep: &Prepare) {
        for (key, _) in &prep.reads {
            let k = self.keys.entry(key.clone()).or_default();
            // The reads take effect at the commit timestamp: no write may
            // commit below it on a key this transaction read.
            k.prepared = Some((prep.txn, None));
            k.latest_read = k.latest_read.max(prep.version.ts);
        }
        for (key, _) in &prep.writes {
            self.keys.entry(key.clone()).or_default().prepared =
                Some((prep.txn, Some(prep.version)));
        }
        self.txns.insert(prep.txn, Entry::Prepared(prep.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::versions::EngineVersions;

    const T1: TxnId = TxnId { client: 1, seq: 1 };
    const T2: TxnId = TxnId { client: 2, seq: 1 };

    fn v(ts: Timestamp, client: u32) -> CommitTs {
        CommitTs { ts, client }
    }

    fn prep(txn: TxnId, version: CommitTs, reads: &[(&str, CommitTs)], writes: &[&str]) -> Prepare {
        Prepare {
            txn,
            version,
            reads: reads.iter().map(|(k, v)| (k.as_bytes().to_vec(), *v)).collect(),
            writes: writes.iter().map(|k| (k.as_bytes().to_vec(), Some(b"x".to_vec()))).collect(),
            participants: vec![0, 1],
        }
    }

    fn serve<V: Versions>(p: &mut Participant<V>, key: &str, at: Timestamp) -> ReadReply {
        if let Some(Record::ReadLease(until)) = p.lease_needed(at) {
            p.lease_durable(until);
        }
        p.read(key.as_bytes(), at)
    }

    /// The same rules over the engine's rows as over the map.
    fn engine_participant() -> Participant<EngineVersions> {
        let db = milliscale::Database::open(milliscale::Options::new().store("memory://"))
            .expect("open");
        let versions = EngineVersions::open(std::sync::Arc::new(db), "versions").expect("table");
        Participant::with_versions(0, 1_000, Mutations::default(), versions)
    }

    #[test]
    fn algorithm_1_refuses_each_conflict_it_names() {
        algorithm_1(Participant::new(0, 1_000, Mutations::default()));
        algorithm_1(engine_participant());
    }

    fn algorithm_1<V: Versions>(mut p: Participant<V>) {
        // A write below a served read (line 13).
        assert_eq!(serve(&mut p, "k", 100).version, CommitTs::INITIAL);
        let (vote, rec) = p.prepare(prep(T1, v(90, 1), &[], &["k"]));
        assert!(matches!(vote, Vote::No(_)) && rec == Some(Record::Abort(T1, 90)));
        // A prepared key blocks reads and writes of it (lines 3 and 11).
        assert_eq!(p.prepare(prep(T2, v(200, 2), &[], &["k"])).0, Vote::Yes);
        assert!(serve(&mut p, "k", 300).prepared_below, "a reader at 300 sees the prepared write");
        assert!(!serve(&mut p, "k", 150).prepared_below, "one at 150 does not");
        let t3 = TxnId { client: 3, seq: 1 };
        assert!(matches!(
            p.prepare(prep(t3, v(400, 3), &[("k", CommitTs::INITIAL)], &[])).0,
            Vote::No(_)
        ));
        // Committed: a read of the old version fails (line 5), a write at
        // or below the committed version fails (line 15).
        assert_eq!(p.decide(T2, true, 200), Some(Record::Commit(T2)));
        let t4 = TxnId { client: 4, seq: 1 };
        assert!(matches!(
            p.prepare(prep(t4, v(500, 4), &[("k", CommitTs::INITIAL)], &[])).0,
            Vote::No(_)
        ));
        let t5 = TxnId { client: 5, seq: 1 };
        assert_eq!(p.prepare(prep(t5, v(500, 5), &[("k", v(200, 2))], &["k"])).0, Vote::Yes);
        // The same prepare again: the same vote, nothing more to log.
        assert_eq!(p.prepare(prep(t5, v(500, 5), &[("k", v(200, 2))], &["k"])), (Vote::Yes, None));
        assert_eq!(p.prepare(prep(T1, v(90, 1), &[], &["k"])).0, Vote::No("aborted here before"));
    }

    #[test]
    fn a_query_about_an_unknown_transaction_aborts_it_here() {
        let mut p = Participant::new(0, 1_000, Mutations::default());
        assert_eq!(p.status(T1, 10), (TxnStatus::Aborted, Some(Record::Abort(T1, 10))));
        assert!(matches!(p.prepare(prep(T1, v(10, 1), &[], &["k"])).0, Vote::No(_)));
    }

    #[test]
    fn recovery_commits_single_shard_prepares_asks_about_the_rest_and_keeps_the_lease_floor() {
        let mut single = prep(T1, v(10, 1), &[], &["a"]);
        single.participants = vec![0];
        let multi = prep(T2, v(20, 2), &[], &["b"]);
        let log = vec![Record::ReadLease(1_000), Record::Prepare(single), Record::Prepare(multi)];
        let Recovered { participant: mut p, logged, ask } =
            Participant::recover(0, 100, Mutations::default(), &log);
        assert_eq!(logged, vec![Record::Commit(T1)]);
        assert_eq!(ask, vec![(T2, vec![0, 1])]);
        assert_eq!(p.known(T2), Some(TxnStatus::Prepared));
        // No write at or below the lease logged before the crash: a read
        // up to it may have been served.
        let t3 = TxnId { client: 3, seq: 1 };
        assert!(matches!(p.prepare(prep(t3, v(900, 3), &[], &["c"])).0, Vote::No(_)));
        let t4 = TxnId { client: 4, seq: 1 };
        assert_eq!(p.prepare(prep(t4, v(1_001, 4), &[], &["c"])).0, Vote::Yes);
        // A read needs a new lease past the old one.
        assert!(p.lease_needed(1_000).is_some());
        let Recovered { logged, ask, .. } = Participant::recover(
            0,
            100,
            Mutations { commit_prepared_without_asking: true, ..Mutations::default() },
            &log,
        );
        assert!(ask.is_empty() && logged.contains(&Record::Commit(T2)), "the bug commits it");
    }

    #[test]
    fn collection_keeps_the_newest_version_at_or_below_the_watermark() {
        collection(Participant::new(0, 1_000, Mutations::default()));
        collection(engine_participant());
    }

    fn collection<V: Versions>(mut p: Participant<V>) {
        for (i, ts) in [10, 20, 30, 40].into_iter().enumerate() {
            let t = TxnId { client: 1, seq: i as u64 };
            let mut w = prep(t, v(ts, 1), &[], &["k"]);
            w.participants = vec![0];
            assert_eq!(p.prepare(w).0, Vote::Yes);
            p.decide(t, true, ts);
        }
        serve(&mut p, "r", 22);
        serve(&mut p, "s", 27);
        assert_eq!(p.read_marks(), 3, "k (written), r and s");
        assert_eq!(p.collect(25), 1);
        assert_eq!(p.read_marks(), 1, "only the read of s at 27 is above the watermark");
        // The floor refuses what the dropped mark did: a write on `r` at 22.
        let t = TxnId { client: 9, seq: 1 };
        assert!(matches!(p.prepare(prep(t, v(22, 9), &[], &["r"])).0, Vote::No(_)));
        p.decide(t, false, 22);
        let left: Vec<Timestamp> =
            p.committed()[&b"k".to_vec()].iter().map(|(v, _)| v.ts).collect();
        assert_eq!(left, [20, 30, 40]);
        assert_eq!(
            serve(&mut p, "k", 25).version,
            v(20, 1),
            "a reader at the watermark still reads"
        );
    }

    #[test]
    fn forgetting_keeps_undecided_and_undurable_decisions_and_refuses_late_prepares() {
        let mut p = Participant::new(0, 1_000, Mutations::default());
        let t3 = TxnId { client: 3, seq: 1 };
        assert_eq!(p.prepare(prep(T1, v(10, 1), &[], &["a"])).0, Vote::Yes);
        assert_eq!(p.prepare(prep(T2, v(20, 2), &[], &["b"])).0, Vote::Yes);
        assert_eq!(p.prepare(prep(t3, v(30, 3), &[], &["c"])).0, Vote::Yes);
        p.decide(T1, true, 10);
        p.decide(T2, false, 20);
        assert_eq!(p.oldest_undecided(), Some(10), "T1's commit is not durable yet");
        assert_eq!(p.forget(100), None, "nothing below 10 to forget");
        p.decision_durable(T1);
        p.decision_durable(T2);
        assert_eq!(p.oldest_undecided(), Some(30), "t3 is still prepared");
        // Asked to forget below 100, it stops at its own prepare.
        assert_eq!(p.forget(100), Some(Record::Forget { below: 30, txns: vec![T1, T2] }));
        assert_eq!((p.known(T1), p.known(t3)), (None, Some(TxnStatus::Prepared)));
        assert_eq!(p.forgotten(), 30);
        // A late copy of a prepare below the bound is refused (T2 was
        // aborted: it must not commit now).
        assert!(matches!(p.prepare(prep(T2, v(20, 2), &[], &["b"])).0, Vote::No(_)));
        assert_eq!(p.forget(30), None, "the bound only rises");
    }

    #[test]
    fn a_restart_from_the_tables_remembers_decisions_the_forget_bound_and_the_lease() {
        let mut single = prep(T1, v(10, 1), &[], &["a"]);
        single.participants = vec![0];
        let t3 = TxnId { client: 3, seq: 1 };
        let log = vec![
            Record::ReadLease(50),
            Record::Prepare(single),
            Record::Prepare(prep(T2, v(20, 2), &[], &["b"])),
            Record::Commit(T2),
            Record::Abort(t3, 5),
            Record::Forget { below: 6, txns: vec![t3] },
        ];
        let tables = ShardTables::from_log(MapVersions::default(), &log);
        assert_eq!(tables.txns.get(&T2), Some(&TxnRow::Committed(20)));
        assert_eq!(tables.txns.get(&t3), None, "forgotten");
        let Recovered { participant: mut p, logged, ask } =
            Participant::restart(0, 100, Mutations::default(), tables.clone());
        assert_eq!((logged, ask), (vec![Record::Commit(T1)], vec![]), "the lone prepare commits");
        assert_eq!(p.status(T2, 20), (TxnStatus::Committed, None), "a decision is remembered");
        assert_eq!(p.forgotten(), 6);
        assert_eq!(p.committed()[&b"b".to_vec()], vec![(v(20, 2), Some(b"x".to_vec()))]);
        let t4 = TxnId { client: 4, seq: 1 };
        assert!(matches!(p.prepare(prep(t4, v(40, 4), &[], &["d"])).0, Vote::No(_)), "lease");
        // The deliberate bug: the decided rows are dropped at the restart.
        let bug = Mutations { restart_forgets_decided: true, ..Mutations::default() };
        let Recovered { participant: mut p, .. } = Participant::restart(0, 100, bug, tables);
        assert_eq!(p.status(T2, 20).0, TxnStatus::Aborted, "the bug answers aborted");
    }
}
