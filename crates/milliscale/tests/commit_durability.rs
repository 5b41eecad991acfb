//! Acknowledged means durable on a quorum (invariant 2 and 5),
//! under injected latency, ambiguous appends, 503s, 500s and a store that
//! goes down; and a log that cannot reach a quorum poisons the database
//! instead of acknowledging.

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::Recorder;
use milliscale::{CommitAck, Database, DeliberateBug, Error, Options, Quorum};
use objstore::sim::{Faults, SimStore};
use parking_lot::Mutex;

fn faulty(rec: &Arc<Recorder>, seed: u64) -> Arc<SimStore> {
    let faults = Faults { seed, throttle: 0.05, error: 0.03, ambiguous: 0.08, stalls: false };
    Arc::new(SimStore::new(rec.clone(), "gp3", faults).expect("sim"))
}

/// On how many recorders `csn` landed.
fn copies(recs: &[Arc<Recorder>], csn: u64) -> usize {
    recs.iter().filter(|r| r.has(csn)).count()
}

/// Workers commit random writes to 3 faulty stores; one of them goes down
/// for good mid-run. Each time a worker sees an ack resolve, the CSN and
/// every CSN up to its DSN must already be on `need` stores, and so must
/// the commit that wrote the value the transaction read (each value names
/// its writer; a writer's CSN is known once its commit returns, so a read
/// of a commit still returning is not checked). With `bug`, the engine
/// runs with that deliberate bug.
fn run(quorum: Quorum, seed: u64, bug: Option<DeliberateBug>) -> (u64, Option<Error>) {
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    let recs: Vec<Arc<Recorder>> = (0..3).map(|_| Recorder::memory()).collect();
    let sims: Vec<Arc<SimStore>> =
        recs.iter().enumerate().map(|(i, r)| faulty(r, seed * 7 + i as u64)).collect();
    let mut opts = Options::new()
        .workers(4)
        .log_group_size(2)
        .log_buffer_bytes(8192)
        .flush_timeout(Duration::from_millis(2))
        .store_deadline(Duration::from_millis(400))
        .quorum(quorum);
    for s in &sims {
        opts = opts.add_store_handle(s.clone());
    }
    if let Some(bug) = bug {
        opts = with_bug(opts, bug);
    }
    let db = Database::open(opts).expect("open");
    let t = db.create_table("t").expect("table");
    let need = quorum.needed(3);
    let checked = AtomicU64::new(0);
    let down = AtomicBool::new(false);
    // Each committed value's writer (worker, sequence) and its CSN.
    let writers: Mutex<HashMap<[u8; 16], u64>> = Mutex::new(HashMap::new());
    let poisoned = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4u64)
            .map(|w| {
                let (db, t, recs, checked, down, sims, writers) =
                    (&db, &t, &recs, &checked, &down, &sims, &writers);
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(seed * 13 + w);
                    // An ack, with the value its transaction read.
                    let mut pending: Vec<(CommitAck, Option<Vec<u8>>)> = Vec::new();
                    let check = |csn: Option<u64>, dsn: u64, read: &Option<Vec<u8>>| {
                        for c in csn.into_iter().chain(1..=dsn) {
                            let n = copies(recs, c);
                            assert!(n >= need, "ack of {csn:?}: CSN {c} is on {n} stores");
                        }
                        let from = read.as_deref().and_then(|v| <[u8; 16]>::try_from(v).ok());
                        if let Some(c) = from.and_then(|v| writers.lock().get(&v).copied()) {
                            let n = copies(recs, c);
                            assert!(
                                n >= need,
                                "ack of {csn:?}: CSN {c}, read by it, is on {n} stores"
                            );
                        }
                        checked.fetch_add(1, Ordering::Relaxed);
                    };
                    let mut error = None;
                    for i in 0..400u64 {
                        if w == 0 && i == 100 {
                            sims[2].set_unavailable_for(Duration::from_secs(3600));
                            down.store(true, Ordering::Relaxed);
                        }
                        let mut tx = db.begin().expect("begin");
                        let k = [rng.random_range(0..32u8)];
                        let read = tx.get(t, &k).ok().flatten();
                        let mut value = [0u8; 16];
                        value[..8].copy_from_slice(&w.to_le_bytes());
                        value[8..].copy_from_slice(&i.to_le_bytes());
                        if tx.put(t, &[rng.random_range(0..32u8)], &value).is_err() {
                            continue;
                        }
                        match tx.commit() {
                            Ok(a) => {
                                if let Some(csn) = a.csn() {
                                    writers.lock().insert(value, csn);
                                }
                                pending.push((a, read));
                            }
                            Err(Error::Conflict(_)) => {}
                            Err(e) => {
                                error = Some(e);
                                break;
                            }
                        }
                        pending.retain(|(a, read)| {
                            !a.is_acknowledged() || {
                                check(a.csn(), a.dsn(), read);
                                false
                            }
                        });
                    }
                    for (a, read) in pending {
                        let (csn, dsn) = (a.csn(), a.dsn());
                        match a.wait() {
                            Ok(_) => check(csn, dsn, &read),
                            Err(e) => assert!(db.poisoned().is_some(), "ack failed: {e}"),
                        }
                    }
                    error
                })
            })
            .collect();
        workers
            .into_iter()
            .filter_map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .next()
    });
    assert!(down.load(Ordering::Relaxed));
    if quorum == Quorum::Majority {
        // Its writers give up at the store deadline (400 ms) and report it.
        let end = std::time::Instant::now() + Duration::from_secs(10);
        let stores = loop {
            let stores = db.log_metrics().expect("a log").stores;
            if stores[2].dropped > 0 || std::time::Instant::now() > end {
                break stores;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(stores[2].dropped > 0, "the store that went down is reported");
        assert!(stores[2].last_error.as_deref().is_some_and(|e| e.contains("unavailable")));
        assert!(stores[..2].iter().all(|s| s.dropped == 0), "the others are healthy");
    }
    (checked.load(Ordering::Relaxed), poisoned.or(db.poisoned()))
}

#[cfg(feature = "deliberate-bugs")]
fn with_bug(o: Options, bug: DeliberateBug) -> Options {
    o.deliberate_bug(bug)
}

#[cfg(not(feature = "deliberate-bugs"))]
fn with_bug(_: Options, bug: DeliberateBug) -> Options {
    panic!("{bug:?} needs the deliberate-bugs feature")
}

/// The first of `seeds` on which `bug` breaks the oracle of [`run`], and
/// what the oracle said.
#[cfg(feature = "deliberate-bugs")]
fn caught(bug: DeliberateBug, seeds: std::ops::Range<u64>) -> Option<(u64, String)> {
    seeds.into_iter().find_map(|seed| {
        let r = std::panic::catch_unwind(|| run(Quorum::Majority, seed, Some(bug)));
        r.err().map(|e| (seed, common::panic_text(&e)))
    })
}

/// An acknowledgment once one store holds the part: caught within 3 seeds.
#[test]
#[cfg(feature = "deliberate-bugs")]
fn acknowledging_before_the_quorum_is_caught() {
    let (seed, why) = caught(DeliberateBug::AckBeforeQuorum, 0..3).expect("caught");
    eprintln!("caught at seed {seed}: {why}");
}

/// A commit dependency not tracked for a version another transaction
/// committed: caught within 3 seeds.
#[test]
#[cfg(feature = "deliberate-bugs")]
fn an_untracked_dependency_is_caught() {
    let (seed, why) = caught(DeliberateBug::UntrackedDependency, 0..3).expect("caught");
    eprintln!("caught at seed {seed}: {why}");
}

#[test]
fn majority_acknowledges_only_quorum_durable_commits_with_one_store_down() {
    for seed in 0..3 {
        let (checked, poisoned) = run(Quorum::Majority, seed, None);
        assert!(poisoned.is_none(), "one store down must not stop a majority: {poisoned:?}");
        assert!(checked > 1000, "only {checked} acks were checked");
    }
}

#[test]
fn all_quorum_with_a_store_down_poisons_instead_of_acknowledging() {
    let (_, poisoned) = run(Quorum::All, 9, None);
    assert!(
        matches!(poisoned, Some(Error::StoreUnavailable(_))),
        "quorum all with a store down must poison, got {poisoned:?}"
    );
}

#[test]
fn an_unavailable_store_poisons_the_database() {
    let sim = Arc::new(SimStore::new(Recorder::memory(), "io2", Faults::default()).expect("sim"));
    let db = Database::open(
        Options::new()
            .add_store_handle(sim.clone())
            .flush_timeout(Duration::from_millis(1))
            .store_deadline(Duration::from_millis(200)),
    )
    .expect("open");
    let t = db.create_table("t").expect("table");
    let mut tx = db.begin().expect("begin");
    tx.put(&t, b"a", b"1").expect("put");
    tx.commit_and_wait().expect("durable before the outage");
    sim.set_unavailable_for(Duration::from_secs(3600));
    let mut tx = db.begin().expect("begin");
    tx.put(&t, b"b", b"2").expect("put");
    let ack = tx.commit().expect("pre-commit");
    assert!(matches!(ack.wait(), Err(Error::StoreUnavailable(_))), "no ack without durability");
    assert!(matches!(db.poisoned(), Some(Error::StoreUnavailable(_))));
    let mut tx = db.begin().expect("begin");
    tx.put(&t, b"c", b"3").expect("put");
    assert!(matches!(tx.commit().map(|_| ()), Err(Error::StoreUnavailable(_))));
}

/// A store that is slower than the others does not hold commits back under
/// a majority, and it catches up: at close it holds every part too.
#[test]
fn a_slow_store_catches_up() {
    let recs: Vec<Arc<Recorder>> = (0..3).map(|_| Recorder::memory()).collect();
    let slow = common::Gate::new(recs[2].clone());
    for g in 0..2 {
        slow.set_delay(g, Duration::from_millis(15));
    }
    let db = Database::open(
        Options::new()
            .add_store_handle(recs[0].clone())
            .add_store_handle(recs[1].clone())
            .add_store_handle(slow.clone())
            .workers(4)
            .log_group_size(2)
            .flush_timeout(Duration::from_millis(1)),
    )
    .expect("open");
    let t = db.create_table("t").expect("table");
    for i in 0..200u32 {
        let mut tx = db.begin().expect("begin");
        tx.put(&t, &i.to_be_bytes(), b"v").expect("put");
        tx.commit_and_wait().expect("commit");
    }
    // Had the slow store held commits back, it would hold them all by now.
    let (fast, lagging) = (recs[0].landed().len(), recs[2].landed().len());
    assert!(lagging < fast, "the slow store ({lagging} CSNs) is behind the quorum ({fast})");
    let next = db.stats().next_csn;
    db.close().expect("close");
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r.landed(), (1..next).collect(), "store {i} holds every CSN");
    }
    assert!(db.log_metrics().expect("a log").stores.iter().all(|s| s.dropped == 0));
}

/// An idle database makes no requests: the default policy (target) sends
/// nothing when the buffers are empty, with two lanes. A
/// request budget holds for the whole database: 40 single-row commits from
/// 4 threads, each group its own stream (so that each commit needs its own
/// append), against a budget of 20 appends a second take about 2 s, and the
/// store sees at most the budget (plus its 100 ms burst).
#[test]
fn an_idle_database_makes_no_requests_and_a_budget_holds() {
    use objstore::ObjectStore;
    let sim = Arc::new(SimStore::from_url("sim://nvme?seed=3").expect("sim"));
    let db = Database::open(
        Options::new().add_store_handle(sim.clone()).workers(4).log_group_size(1).log_lanes(2),
    )
    .expect("open");
    let t = db.create_table("t").expect("table");
    for i in 0..20u32 {
        let mut tx = db.begin().expect("begin");
        tx.put(&t, &i.to_be_bytes(), b"v").expect("put");
        tx.commit_and_wait().expect("commit");
    }
    let requests = || sim.accounting().expect("sim counts").put_class;
    let before = requests();
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(requests(), before, "no requests while idle");
    drop(db);

    let sim = Arc::new(SimStore::from_url("sim://nvme?seed=4").expect("sim"));
    let db = Database::open(
        Options::new()
            .add_store_handle(sim.clone())
            .workers(4)
            .log_group_size(1)
            .log_streams(milliscale::options::LOG_STREAMS_PER_GROUP)
            .max_appends_per_s(Some(20)),
    )
    .expect("open");
    let t = db.create_table("t").expect("table");
    let appends = || sim.accounting().expect("sim counts").requests["append"];
    let before = appends();
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for w in 0..4u32 {
            let (db, t) = (&db, &t);
            s.spawn(move || {
                for i in 0..10u32 {
                    let mut tx = db.begin().expect("begin");
                    tx.put(t, &(w * 100 + i).to_be_bytes(), b"v").expect("put");
                    tx.commit_and_wait().expect("commit");
                }
            });
        }
    });
    let took = started.elapsed().as_secs_f64();
    let sent = appends() - before;
    assert!(sent as f64 <= 20.0 * took + 2.0 + 1.0, "{sent} appends in {took:.2} s");
    assert!(took > 1.0, "40 commits that each wait need about 2 s at 20 parts/s: {took:.2} s");
}

/// Adaptive flushing paces a stream by its store's latency: appends that
/// take 20 ms with a pace of 2 go out about one every 10 ms, two in flight
/// on separate lanes, however fast commits arrive; without a pace, eight
/// free lanes flush as often as `flush_min_interval` lets them (about 400
/// a second here). Commits are pipelined from 2 threads for 1 s.
#[test]
fn a_paced_stream_appends_at_its_pace_whatever_the_load() {
    use common::{Gate, WriteCounter};
    let run = |pace: Option<f64>| {
        let gate = Gate::new(Arc::new(objstore::MemoryStore::new()));
        gate.set_delay(0, Duration::from_millis(20));
        let counter = WriteCounter::new(gate.clone());
        let db = Database::open(
            Options::new()
                .add_store_handle(counter.clone())
                .workers(2)
                .log_lanes(8)
                .flush_policy(milliscale::FlushPolicy::Adaptive)
                .flush_pace(pace),
        )
        .expect("open");
        let t = db.create_table("t").expect("table");
        let started = std::time::Instant::now();
        let end = started + Duration::from_secs(1);
        std::thread::scope(|s| {
            for w in 0..2u32 {
                let (db, t) = (&db, &t);
                s.spawn(move || {
                    let mut acks = Vec::new();
                    let mut i = 0u32;
                    while std::time::Instant::now() < end {
                        let mut tx = db.begin().expect("begin");
                        tx.put(t, &((w << 24) | (i % 1000)).to_be_bytes(), b"v").expect("put");
                        acks.push(tx.commit().expect("commit"));
                        i += 1;
                        if i.is_multiple_of(64) {
                            std::thread::sleep(Duration::from_micros(200));
                        }
                    }
                    for a in acks {
                        a.wait().expect("acknowledged");
                    }
                });
            }
        });
        let took = started.elapsed().as_secs_f64();
        db.close().expect("close");
        let writes = counter.writes.lock();
        let appends: usize = writes.values().map(Vec::len).sum();
        let lanes = writes.keys().filter(|k| k.starts_with("log/")).count();
        (appends as f64 / took, lanes)
    };
    let (paced, paced_lanes) = run(Some(2.0));
    // 100 a second at the pace, plus the first 16 appends (measured before
    // the pace is known) at the 1 ms floor, and the close's last flush.
    assert!((50.0..=140.0).contains(&paced), "paced: {paced:.0} appends/s");
    assert!(paced_lanes >= 2, "a 20 ms append every 10 ms needs two lanes: {paced_lanes}");
    let (free, _) = run(None);
    eprintln!("paced {paced:.0}/s on {paced_lanes} lanes, unpaced {free:.0}/s");
    assert!(free >= 2.0 * paced, "unpaced: {free:.0} appends/s against {paced:.0} paced");
}
