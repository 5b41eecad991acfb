//! Record-level vs transaction-level dependency tracking (paper §4.3,
//! Fig. 5; invariant 2), with a store whose groups we hold back.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Gate, Recorder};
use milliscale::options::LOG_STREAMS_PER_GROUP;
use milliscale::{CommitAck, Database, Options, Table, Tracking};
use objstore::ObjectStore;

fn acked_within(ack: &CommitAck, d: Duration) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if ack.is_acknowledged() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    ack.is_acknowledged()
}

/// `groups` groups, each its own stream, so that the gate holds one group.
fn open(store: Arc<dyn ObjectStore>, tracking: Tracking, groups: usize) -> Database {
    Database::open(
        Options::new()
            .add_store_handle(store)
            .workers(groups)
            .log_group_size(1)
            .log_streams(LOG_STREAMS_PER_GROUP)
            .flush_timeout(Duration::from_millis(2))
            .tracking(tracking),
    )
    .expect("open")
}

fn put(db: &Database, t: &Table, k: &[u8]) -> CommitAck {
    let mut tx = db.begin().expect("begin");
    tx.put(t, k, b"v").expect("put");
    tx.commit().expect("commit")
}

/// Fig. 5: T2 (group 1) does not depend on T1 (group 0, not yet durable).
/// Record tracking acknowledges T2 as soon as its own part is durable;
/// transaction tracking holds it back behind T1 (a false dependency). A
/// transaction that read T1's write waits for T1 under both.
fn fig5(tracking: Tracking) -> (bool, bool) {
    let gate = Gate::new(Recorder::memory());
    let db = open(gate.clone(), tracking, 2);
    let _open = gate.open_on_drop();
    let t = db.create_table("t").expect("table");
    gate.close(0);
    let t1 = put(&db, &t, b"x"); // the main thread is worker 0: group 0
    assert_eq!(t1.csn(), Some(1));
    let (t2_acked, t3_acked) = std::thread::scope(|s| {
        s.spawn(|| {
            // Worker 1: group 1, whose writes go through.
            let t2 = put(&db, &t, b"y");
            assert_eq!((t2.csn(), t2.dsn()), (Some(2), 0));
            let mut tx = db.begin().expect("begin");
            assert_eq!(tx.get(&t, b"x").expect("get"), Some(b"v".to_vec()));
            tx.put(&t, b"z", b"v").expect("put");
            let t3 = tx.commit().expect("commit");
            assert_eq!(t3.dsn(), 1, "T3 read T1's version");
            let t2_acked = acked_within(&t2, Duration::from_millis(500));
            let t3_acked = acked_within(&t3, Duration::from_millis(100));
            assert!(!t1.is_acknowledged(), "T1's part is held at the gate");
            gate.open(0);
            assert!(acked_within(&t1, Duration::from_secs(10)));
            assert!(acked_within(&t2, Duration::from_secs(10)));
            assert!(acked_within(&t3, Duration::from_secs(10)));
            (t2_acked, t3_acked)
        })
        .join()
        .expect("worker")
    });
    (t2_acked, t3_acked)
}

#[test]
fn record_tracking_commits_what_txn_tracking_holds_back() {
    let (t2, t3) = fig5(Tracking::Record);
    assert!(t2, "record tracking: T2 depends on nothing pending and is durable");
    assert!(!t3, "record tracking: T3 read T1's pre-committed write and must wait");
    let (t2, t3) = fig5(Tracking::Txn);
    assert!(!t2, "transaction tracking: T2 waits for T1, serialized before it");
    assert!(!t3);
}

/// Many random interleavings: 4 workers in 2 or 4 groups, in one stream
/// or one stream per group, of `lanes` lanes, on 16 hot keys, while a
/// chaos thread holds chains back and slows them at random (so a group's
/// parts land out of order). The moment a worker sees an ack resolve, the
/// recorder (which saw every part land) must hold the transaction's own
/// CSN and every CSN up to its DSN; and everything below the published
/// gCSN must have landed.
fn random_interleavings(tracking: Tracking, seed: u64, groups: usize, lanes: u32, shared: bool) {
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    let rec = Recorder::memory();
    let gate = Gate::new(rec.clone());
    let db = Database::open(
        Options::new()
            .add_store_handle(gate.clone())
            .workers(4)
            .log_group_size(4 / groups)
            .log_streams(if shared { 1 } else { LOG_STREAMS_PER_GROUP })
            .log_lanes(lanes as usize)
            .log_buffer_bytes(4096)
            .flush_timeout(Duration::from_millis(1))
            .tracking(tracking),
    )
    .expect("open");
    let _open = gate.open_on_drop();
    let t = db.create_table("t").expect("table");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let checked = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut rng = SmallRng::seed_from_u64(seed);
            // Chains are named after their stream's first group.
            let chains = if shared { 1 } else { groups as u32 };
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let g = rng.random_range(0..chains);
                let l = rng.random_range(0..lanes);
                let d = Duration::from_micros(rng.random_range(0..3000));
                match rng.random_range(0..6) {
                    0 => gate.close(g),
                    1 => gate.open(g),
                    2 => gate.set_delay(g, d),
                    3 => gate.close_lane(g, l),
                    4 => gate.open_lane(g, l),
                    _ => gate.set_lane_delay(g, l, d),
                }
                std::thread::sleep(Duration::from_micros(rng.random_range(200..3000)));
            }
            gate.open_all();
        });
        let workers: Vec<_> = (0..4u64)
            .map(|w| {
                let (db, t, rec, checked) = (&db, &t, &rec, &checked);
                let stop = &stop;
                s.spawn(move || {
                    // A failed check must end the chaos too, or the gates
                    // stay closed and the test hangs instead of failing.
                    let _stop = StopOnPanic(stop);
                    let mut rng = SmallRng::seed_from_u64(seed * 31 + w);
                    let mut pending: Vec<CommitAck> = Vec::new();
                    let check = |a: &CommitAck| {
                        let landed = rec.landed();
                        if let Some(csn) = a.csn() {
                            assert!(landed.contains(&csn), "acked CSN {csn} is not durable");
                        }
                        for c in 1..=a.dsn() {
                            assert!(
                                landed.contains(&c),
                                "ack of {:?} with DSN {} but CSN {c} is not durable",
                                a.csn(),
                                a.dsn()
                            );
                        }
                        checked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    };
                    for _ in 0..250 {
                        let mut tx = db.begin().expect("begin");
                        let mut conflict = false;
                        for _ in 0..rng.random_range(1..4) {
                            let k = [rng.random_range(0..16u8)];
                            let r = if rng.random_bool(0.5) {
                                tx.get(t, &k).map(|_| ())
                            } else {
                                tx.put(t, &k, &rng.random::<[u8; 8]>())
                            };
                            if r.is_err() {
                                conflict = true;
                                break;
                            }
                        }
                        if !conflict && let Ok(ack) = tx.commit() {
                            pending.push(ack);
                        }
                        pending.retain(|a| {
                            if a.is_acknowledged() {
                                check(a);
                                false
                            } else {
                                true
                            }
                        });
                    }
                    pending
                })
            })
            .collect();
        let mut left = Vec::new();
        for w in workers {
            left.extend(w.join().expect("worker"));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for a in left {
            assert!(acked_within(&a, Duration::from_secs(20)), "every commit is acknowledged");
        }
    });
    let gcsn = db.durable_csn();
    let landed = rec.landed();
    assert!((1..gcsn).all(|c| landed.contains(&c)), "every CSN below gCSN {gcsn} landed");
    assert!(checked.load(std::sync::atomic::Ordering::Relaxed) > 0);
}

struct StopOnPanic<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

#[test]
fn record_tracking_never_acknowledges_before_dependencies_are_durable() {
    for seed in 0..16 {
        let groups = if seed % 2 == 0 { 4 } else { 2 };
        let shared = seed % 4 >= 2;
        random_interleavings(Tracking::Record, seed, groups, 1 + (seed / 4 % 3) as u32, shared);
    }
}

#[test]
fn txn_tracking_never_acknowledges_before_dependencies_are_durable() {
    for seed in 100..108 {
        random_interleavings(Tracking::Txn, seed, 4, 1 + (seed % 2) as u32, seed % 4 >= 2);
    }
}

/// A read-only transaction that saw pre-committed data waits for it (its
/// DSN); one at the durable snapshot sees only durable data and never
/// waits, and garbage collection keeps what it needs.
#[test]
fn read_only_transactions_wait_for_what_they_saw_unless_at_the_durable_snapshot() {
    use milliscale::TxnOptions;
    let gate = Gate::new(Recorder::memory());
    let db = open(gate.clone(), Tracking::Record, 1);
    let _open = gate.open_on_drop();
    let t = db.create_table("t").expect("table");
    let mut tx = db.begin().expect("begin");
    tx.put(&t, b"x", b"durable").expect("put");
    tx.commit_and_wait().expect("durable");
    gate.close(0);
    // Many pre-committed, not durable overwrites: each trims the chain.
    let mut last = None;
    for i in 0..100 {
        let mut tx = db.begin().expect("begin");
        tx.put(&t, b"x", format!("pending {i}").as_bytes()).expect("put");
        last = Some(tx.commit().expect("pre-commit"));
    }
    let last = last.expect("commits");
    let mut r = db.begin().expect("begin");
    assert_eq!(r.get(&t, b"x").expect("get"), Some(b"pending 99".to_vec()));
    let r = r.commit().expect("read-only commit");
    assert_eq!((r.csn(), r.dsn()), (None, last.csn().expect("csn")));
    let mut d = db.begin_with(TxnOptions::durable_snapshot()).expect("begin");
    assert_eq!(d.get(&t, b"x").expect("get"), Some(b"durable".to_vec()), "only durable data");
    assert!(d.put(&t, b"y", b"v").is_err(), "a durable-snapshot transaction is read-only");
    let d = d.commit().expect("commit");
    assert!(d.is_acknowledged(), "the durable snapshot never waits");
    assert!(!acked_within(&r, Duration::from_millis(100)), "R saw pending data");
    gate.open(0);
    assert!(acked_within(&r, Duration::from_secs(10)));
    assert!(acked_within(&last, Duration::from_secs(10)));
    let mut d = db.begin_with(TxnOptions::durable_snapshot()).expect("begin");
    assert_eq!(d.get(&t, b"x").expect("get"), Some(b"pending 99".to_vec()));
}

/// A durable-snapshot reader begun after a commit was acknowledged sees
/// that commit, whenever the consistent cut can include it: always with
/// one log group, and with transaction-level tracking (an ack there means
/// CSN < gCSN). The ack and gCSN are published by different threads (the
/// flusher and the committer), so this runs many commits back to back,
/// polling each ack as a client would, to give the gap between them a
/// chance to show.
fn durable_snapshots_see_acknowledged_commits(tracking: Tracking, groups: usize) {
    use milliscale::TxnOptions;
    let db = open(Recorder::memory(), tracking, groups);
    let t = db.create_table("t").expect("table");
    std::thread::scope(|s| {
        for w in 0..groups {
            let (db, t) = (&db, &t);
            s.spawn(move || {
                for i in 0..300u32 {
                    let key = format!("{w}/{i}");
                    let mut tx = db.begin().expect("begin");
                    tx.put(t, key.as_bytes(), b"v").expect("put");
                    let ack = tx.commit().expect("pre-commit");
                    while !ack.is_acknowledged() {
                        std::hint::spin_loop();
                    }
                    let mut d = db.begin_with(TxnOptions::durable_snapshot()).expect("begin");
                    assert_eq!(
                        d.get(t, key.as_bytes()).expect("get"),
                        Some(b"v".to_vec()),
                        "{key}: acknowledged, but not in a durable snapshot begun after the ack \
                         ({tracking:?}, {groups} groups)"
                    );
                }
            });
        }
    });
}

#[test]
fn durable_snapshots_see_acknowledged_commits_with_one_group() {
    durable_snapshots_see_acknowledged_commits(Tracking::Record, 1);
    durable_snapshots_see_acknowledged_commits(Tracking::Txn, 1);
}

#[test]
fn durable_snapshots_see_acknowledged_commits_with_txn_tracking() {
    durable_snapshots_see_acknowledged_commits(Tracking::Txn, 3);
}

/// `CommitAck::wait_until`: gives up at its deadline while the commit's
/// part is held back, leaving the ack usable, and returns as soon as the
/// part lands (well before a distant deadline).
#[test]
fn wait_until_returns_at_the_deadline_or_at_the_ack() {
    let gate = Gate::new(Recorder::memory());
    let db = open(gate.clone(), Tracking::Record, 1);
    let _open = gate.open_on_drop();
    let t = db.create_table("t").expect("table");
    gate.close(0);
    let ack = put(&db, &t, b"x");
    let t0 = Instant::now();
    assert!(ack.wait_until(t0 + Duration::from_millis(50)).is_none(), "held at the gate");
    assert!(t0.elapsed() >= Duration::from_millis(50), "it waited until the deadline");
    assert!(!ack.is_acknowledged());
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(30));
            gate.open(0);
        });
        let t1 = Instant::now();
        let r =
            ack.wait_until(t1 + Duration::from_secs(30)).expect("acknowledged before the deadline");
        assert_eq!(r.expect("no failure").csn, ack.csn());
        assert!(t1.elapsed() < Duration::from_secs(10), "returned at the ack: {:?}", t1.elapsed());
    });
    assert!(ack.is_acknowledged());
}
