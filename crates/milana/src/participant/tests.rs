//! The participant's rules, case by case, over the map and the engine.

use super::*;
#[cfg(feature = "engine")]
use crate::engine_versions::EngineVersions;
use crate::tables::{ShardTables, TxnRow};

const T1: TxnId = TxnId { client: 1, seq: 1 };
const T2: TxnId = TxnId { client: 2, seq: 1 };

fn v(ts: Timestamp, client: u32) -> CommitTs {
    CommitTs { ts, client }
}

fn prep(txn: TxnId, version: CommitTs, reads: &[(&str, CommitTs)], writes: &[&str]) -> Prepare {
    Prepare {
        txn,
        version,
        reads: reads.iter().map(|(k, v)| (key(k), *v)).collect(),
        ranges: Vec::new(),
        writes: writes.iter().map(|k| (key(k), Some(b"x".to_vec()))).collect(),
        participants: vec![0, 1],
    }
}

/// Key `k` of table `t`, as a cluster key (the engine's rows are by table).
fn key(k: &str) -> Key {
    crate::types::cluster_key("t", k.as_bytes())
}

fn serve<V: Versions>(p: &mut Participant<V>, k: &str, at: Timestamp) -> ReadReply {
    if let Some(Record::ReadLease(until)) = p.lease_needed(at) {
        p.lease_durable(until);
    }
    p.read(&key(k), at).expect("held")
}

/// The same rules over the engine's rows as over the map.
#[cfg(feature = "engine")]
fn engine_participant() -> Participant<EngineVersions> {
    let db =
        milliscale::Database::open(milliscale::Options::new().store("memory://")).expect("open");
    let versions = EngineVersions::open(std::sync::Arc::new(db));
    Participant::with_versions(0, 1_000, Mutations::default(), versions)
}

#[test]
fn algorithm_1_refuses_each_conflict_it_names() {
    algorithm_1(Participant::new(0, 1_000, Mutations::default()));
    #[cfg(feature = "engine")]
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
    #[cfg(feature = "engine")]
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
    let left: Vec<Timestamp> = p.committed()[&key("k")].iter().map(|(v, _)| v.ts).collect();
    assert_eq!(left, [20, 30, 40]);
    assert_eq!(serve(&mut p, "k", 25).version, v(20, 1), "a reader at the watermark still reads");
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
    assert_eq!(p.forget(100, false), None, "nothing below 10 to forget");
    p.decision_durable(T1);
    p.decision_durable(T2);
    assert_eq!(p.oldest_undecided(), Some(30), "t3 is still prepared");
    // Asked to forget below 100, it stops at its own prepare.
    assert_eq!(p.forget(100, false), Some(Record::Forget { below: 30, txns: vec![T1, T2] }));
    assert_eq!((p.known(T1), p.known(t3)), (None, Some(TxnStatus::Prepared)));
    assert_eq!(p.forgotten(), 30);
    // A late copy of a prepare below the bound is refused (T2 was
    // aborted: it must not commit now).
    assert!(matches!(p.prepare(prep(T2, v(20, 2), &[], &["b"])).0, Vote::No(_)));
    assert_eq!(p.forget(30, false), None, "the bound only rises");
    // Nothing left to forget: it rises alone only when asked, and never
    // past t3's prepare.
    assert_eq!(p.forget(100, false), None);
    assert_eq!(p.forget(100, true), None, "t3 holds it at 30");
    p.decide(t3, true, 30);
    p.decision_durable(t3);
    // (T2's late copy was refused as an abort, remembered again.)
    assert_eq!(p.forget(40, true), Some(Record::Forget { below: 40, txns: vec![T2, t3] }));
    assert_eq!(p.forget(50, false), None);
    assert_eq!(p.forget(50, true), Some(Record::Forget { below: 50, txns: vec![] }));
    assert_eq!(p.forgotten(), 50);
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
    assert_eq!(p.committed()[&key("b")], vec![(v(20, 2), Some(b"x".to_vec()))]);
    let t4 = TxnId { client: 4, seq: 1 };
    assert!(matches!(p.prepare(prep(t4, v(40, 4), &[], &["d"])).0, Vote::No(_)), "lease");
    // The deliberate bug: the decided rows are dropped at the restart.
    let bug = Mutations { restart_forgets_decided: true, ..Mutations::default() };
    let Recovered { participant: mut p, .. } = Participant::restart(0, 100, bug, tables);
    assert_eq!(p.status(T2, 20).0, TxnStatus::Aborted, "the bug answers aborted");
}

#[test]
fn a_scanned_range_refuses_phantoms_below_it_and_changes_after_it() {
    let mut p = Participant::new(0, 1_000, Mutations::default());
    let commit = |p: &mut Participant, t: TxnId, ts: Timestamp, key: &str| {
        let mut w = prep(t, v(ts, t.client), &[], &[key]);
        w.participants = vec![0];
        assert_eq!(p.prepare(w).0, Vote::Yes);
        p.decide(t, true, ts);
    };
    commit(&mut p, TxnId { client: 1, seq: 1 }, 10, "a1");
    if let Some(Record::ReadLease(until)) = p.lease_needed(100) {
        p.lease_durable(until);
    }
    let r = p.scan(&key("a"), &key("b"), 100, 0).expect("held");
    assert_eq!(r.rows, vec![(key("a1"), v(10, 1), b"x".to_vec())]);
    assert!(!r.prepared_below);
    // A new key in the range at or below the scan: a phantom, refused.
    let phantom = prep(TxnId { client: 2, seq: 1 }, v(90, 2), &[], &["a5"]);
    assert!(matches!(p.prepare(phantom).0, Vote::No(_)));
    // Outside the range, the same timestamp is fine.
    commit(&mut p, TxnId { client: 3, seq: 1 }, 90, "b5");
    // A write into the range above the scan commits; then a transaction
    // that scanned at 100 cannot commit at 200 (the range changed).
    commit(&mut p, TxnId { client: 4, seq: 1 }, 150, "a7");
    let mut stale = prep(TxnId { client: 5, seq: 1 }, v(200, 5), &[], &["c"]);
    stale.ranges = vec![(key("a"), key("b"), 100)];
    assert!(matches!(p.prepare(stale.clone()).0, Vote::No(_)));
    // The bug: without the range check it commits.
    let mut q =
        Participant::new(0, 1_000, Mutations { skip_range_check: true, ..Mutations::default() });
    commit(&mut q, TxnId { client: 4, seq: 1 }, 150, "a7");
    assert_eq!(q.prepare(stale).0, Vote::Yes);
    // A prepared write in the range below the scan: reported.
    let t6 = TxnId { client: 6, seq: 1 };
    assert_eq!(p.prepare(prep(t6, v(160, 6), &[], &["a8"])).0, Vote::Yes);
    if let Some(Record::ReadLease(until)) = p.lease_needed(170) {
        p.lease_durable(until);
    }
    assert!(p.scan(&key("a"), &key("b"), 170, 0).expect("held").prepared_below);
    assert!(!p.scan(&key("a"), &key("b"), 155, 0).expect("held").prepared_below);
}

/// A read's version without its value: known from the engine's memo of
/// newest versions, else `None` (the caller reads the row); the mark is
/// made either way, and the value is read later from the rows.
#[cfg(feature = "engine")]
#[test]
fn a_read_version_marks_the_key_and_names_the_version_only_when_known() {
    let mut p = engine_participant();
    let rows = p.versions_mut().rows();
    if let Some(Record::ReadLease(until)) = p.lease_needed(600) {
        p.lease_durable(until);
    }
    // Not known yet: no version, but marked (a write below 100 is refused).
    assert_eq!(p.read_version(&key("k"), 100), (None, false));
    assert!(matches!(p.prepare(prep(T1, v(90, 1), &[], &["k"])).0, Vote::No(_)));
    // A full read learns the key has no version: known at any time now.
    assert_eq!(serve(&mut p, "k", 100).version, CommitTs::INITIAL);
    assert_eq!(p.read_version(&key("k"), 50), (Some(CommitTs::INITIAL), false));
    assert_eq!(rows.value(&key("k"), CommitTs::INITIAL), Some(None));
    // Committed at 200 (installed through the participant, as the shard's).
    assert_eq!(p.prepare(prep(T2, v(200, 2), &[], &["k"])).0, Vote::Yes);
    let below = p.read_version(&key("k"), 300);
    assert_eq!(below, (Some(CommitTs::INITIAL), true), "a prepared write below 300: wait");
    p.decide(T2, true, 200);
    assert_eq!(p.read_version(&key("k"), 300), (Some(v(200, 2)), false));
    assert_eq!(rows.value(&key("k"), v(200, 2)), Some(Some(b"x".to_vec())));
    // Below the newest version: not known without reading rows.
    assert_eq!(p.read_version(&key("k"), 150), (None, false));
    assert_eq!(rows.value(&key("k"), v(150, 9)), None, "no such row");
    // The map's versions never know one; the mark is made all the same.
    let mut m = Participant::new(0, 1_000, Mutations::default());
    if let Some(Record::ReadLease(until)) = m.lease_needed(600) {
        m.lease_durable(until);
    }
    assert_eq!(m.read_version(&key("k"), 100), (None, false));
    assert!(matches!(m.prepare(prep(T1, v(90, 1), &[], &["k"])).0, Vote::No(_)));
}

/// A version replaced before a restart is gone after it (design record
/// 0008: the replaced versions are held in memory): a read that needs it
/// is told so, with the oldest version held, and a read at or above that
/// one is served. Before the restart the same read finds the version.
#[test]
fn a_read_of_a_version_replaced_before_a_restart_is_told_it_is_gone() {
    let map = Participant::new(0, 1_000, Mutations::default());
    gone_after_restart(map, |p| p.versions_mut().clone());
    #[cfg(feature = "engine")]
    {
        let p = engine_participant();
        gone_after_restart(p, |p| EngineVersions::open(p.versions_mut().database()));
    }
}

fn gone_after_restart<V: Versions>(
    mut p: Participant<V>,
    reopen: impl Fn(&mut Participant<V>) -> V,
) {
    for (i, ts) in [100, 200].into_iter().enumerate() {
        let t = TxnId { client: 1, seq: i as u64 };
        let mut w = prep(t, v(ts, 1), &[], &["k"]);
        w.participants = vec![0];
        assert_eq!(p.prepare(w).0, Vote::Yes);
        p.decide(t, true, ts);
    }
    assert_eq!(serve(&mut p, "k", 150).version, v(100, 1));
    assert_eq!(serve(&mut p, "k", 50).version, CommitTs::INITIAL, "before its first version");
    let tables = crate::tables::ShardTables::new(reopen(&mut p));
    let mut p = Participant::restart(0, 1_000, Mutations::default(), tables).participant;
    if let Some(Record::ReadLease(until)) = p.lease_needed(300) {
        p.lease_durable(until);
    }
    assert_eq!(p.read(&key("k"), 150).map(|r| r.version), Err(Gone { oldest: 200 }));
    assert_eq!(p.read(&key("k"), 50).map(|r| r.version), Err(Gone { oldest: 200 }));
    assert_eq!(p.read(&key("k"), 250).map(|r| r.version), Ok(v(200, 1)));
    assert_eq!(p.read(&key("new"), 50).map(|r| r.version), Ok(CommitTs::INITIAL), "never written");
}

#[test]
fn a_lone_participant_commits_at_once_and_its_reads_hold_at_its_commit() {
    lone(Participant::new(0, 1_000, Mutations::default()));
    #[cfg(feature = "engine")]
    lone(engine_participant());
}

fn lone<V: Versions>(mut p: Participant<V>) {
    let alone = |mut q: Prepare| {
        q.participants = vec![0];
        q
    };
    // T1 read "r" at 100 and writes "w" at 150: committed, never prepared.
    assert_eq!(serve(&mut p, "r", 100).version, CommitTs::INITIAL);
    let q = alone(prep(T1, v(150, 1), &[("r", CommitTs::INITIAL)], &["w"]));
    let (vote, records) = p.commit_alone(q.clone());
    assert_eq!(vote, Vote::Yes);
    assert_eq!(records, vec![Record::Prepare(q.clone()), Record::Commit(T1)]);
    assert_eq!(p.known(T1), Some(TxnStatus::Committed));
    assert!(p.prepared().is_empty() && p.oldest_undecided().is_none());
    assert_eq!(serve(&mut p, "w", 200).version, v(150, 1));
    // Its read of "r" holds at its commit timestamp: no write below it.
    let (vote, _) = p.commit_alone(alone(prep(T2, v(120, 2), &[], &["r"])));
    assert!(matches!(vote, Vote::No(_)));
    // Asked again: the first vote, nothing new to log.
    assert_eq!(p.commit_alone(q), (Vote::Yes, Vec::new()));
    // A refusal is logged and final.
    let late =
        alone(prep(TxnId { client: 3, seq: 1 }, v(300, 3), &[("w", CommitTs::INITIAL)], &[]));
    let (vote, records) = p.commit_alone(late.clone());
    assert!(matches!(vote, Vote::No(_)));
    assert_eq!(records, vec![Record::Abort(late.txn, 300)]);
    assert_eq!(p.commit_alone(late).1, Vec::new());
}
