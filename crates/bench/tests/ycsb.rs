//! Tests of the YCSB driver (`src/ycsb.rs`): every workload, open loop,
//! and the async API's tasks.

use std::time::Duration;

use milliscale::Database;
use milliscale::Isolation;
use milliscale_bench::harness::Pacing;
use milliscale_bench::keys::KeyDist;
use milliscale_bench::report::Report;
use milliscale_bench::variant::LogSettings;
use milliscale_bench::ycsb::*;
use milliscale_bench::ycsb_workload::one_txn;
use rand::SeedableRng;
use rand::rngs::SmallRng;

fn cfg(workload: Workload, dist: KeyDist) -> YcsbConfig {
    YcsbConfig {
        records: 2_000,
        threads: 2,
        duration: Duration::from_millis(300),
        warmup: Duration::from_millis(50),
        workload,
        dist,
        ops_per_txn: 10,
        log: LogSettings { stores: vec!["none".into()], ..LogSettings::default() },
        variant: "none".into(),
        isolation: Isolation::Snapshot,
        engine: Engine::Milliscale,
        seed: 7,
        pacing: Pacing::Closed,
        progress: false,
        replica: None,
        feeds: 0,
        feeds_pin: false,
        tasks: None,
    }
}

#[test]
fn every_workload_commits_and_reports() {
    for w in [Workload::A, Workload::B, Workload::C, Workload::U] {
        let r = run(&cfg(w, KeyDist::Zipfian { theta: 0.99 })).expect("run");
        assert!(r.committed > 0, "{w:?} committed nothing");
        assert_eq!(r.operations, r.committed * 10);
        let rmw = r.by_kind["read-modify-write"].committed;
        match w {
            Workload::C => assert_eq!(rmw, 0),
            Workload::U => assert_eq!(r.by_kind["read-only"].committed, 0),
            _ => assert!(rmw > 0),
        }
        assert!(r.txn_latency.count == r.committed);
        let row = r.csv_row();
        assert_eq!(row.split(',').count(), Report::CSV_HEADER.split(',').count());
        let json: serde_json::Value = serde_json::from_str(&r.to_json()).expect("valid json");
        assert_eq!(json["committed"].as_u64(), Some(r.committed));
    }
}

/// Open loop: about the offered rate is committed, and every committed
/// transaction's latency runs to its acknowledgment (it includes the
/// log's flush, so it cannot be microseconds).
#[test]
fn open_loop_commits_at_the_rate_and_waits_for_acks() {
    let mut c = cfg(Workload::U, KeyDist::Uniform);
    c.log = LogSettings { stores: vec!["memory://".into()], ..LogSettings::default() };
    c.duration = Duration::from_secs(1);
    c.pacing = Pacing::Open { rate: 400.0 };
    let r = run(&c).expect("run");
    assert!((250.0..550.0).contains(&r.txn_per_s), "{} txn/s", r.txn_per_s);
    assert_eq!(r.txn_latency.count, r.committed, "every commit's ack was seen");
    // The log flushes every 10 ms (or when full): an ack takes at least
    // part of that, so a p50 under 100 µs would mean pre-commit was timed.
    assert!(r.txn_latency.p50_us > 100.0, "{:?}", r.txn_latency);
    assert!(r.notes.iter().any(|n| n.contains("arrival to acknowledgment")));
}

#[test]
fn raw_index_runs_only_lookups() {
    let mut c = cfg(Workload::C, KeyDist::Uniform);
    c.engine = Engine::RawIndex;
    assert!(run(&c).expect("run").committed > 0);
    c.workload = Workload::A;
    assert!(run(&c).is_err());
}

#[test]
fn bad_configs_are_refused() {
    let mut c = cfg(Workload::A, KeyDist::Uniform);
    c.threads = 0;
    assert!(run(&c).is_err());
    let mut c = cfg(Workload::A, KeyDist::Uniform);
    c.records = 0;
    assert!(run(&c).is_err());
    let mut c = cfg(Workload::A, KeyDist::Uniform);
    c.log.stores = vec!["ftp://nowhere".into()];
    assert!(run(&c).is_err());
}

#[test]
fn rmw_updates_change_exactly_one_field() {
    let db = Database::open(milliscale::Options::new()).expect("open");
    let t = db.create_table("usertable").expect("table");
    let c = cfg(Workload::U, KeyDist::Uniform);
    let mut c1 = c.clone();
    c1.records = 10;
    load(&db, &t, &c1).expect("load");
    let mut rng = SmallRng::seed_from_u64(3);
    one_txn(&db, &t, &c1, true, &[4], &mut rng).expect("txn");
    let after = db.begin().expect("begin").get(&t, &key_bytes(4)).expect("get").expect("exists");
    let before = initial_record(4);
    let changed = (0..FIELDS)
        .filter(|f| {
            after[f * FIELD_BYTES..(f + 1) * FIELD_BYTES]
                != before[f * FIELD_BYTES..(f + 1) * FIELD_BYTES]
        })
        .count();
    assert!(changed <= 1);
    assert_eq!(after[..8], before[..8], "field 0 (the key) is never rewritten");
}

/// The async API's tasks: awaiting every commit (window 1) and holding
/// acks (a larger window) both commit, every measured transaction counts,
/// and commit latency comes from the committer as for threads.
#[test]
fn tasks_commit_through_the_async_api() {
    for window in [1, 16] {
        let mut c = cfg(Workload::A, KeyDist::Uniform);
        c.log = LogSettings { stores: vec!["memory://".into()], ..LogSettings::default() };
        c.tasks = Some(milliscale_bench::ycsb::Tasks { tasks: 50, window });
        let r = run(&c).expect("run");
        assert!(r.by_kind["read-modify-write"].committed > 0, "window {window}: {r:?}");
        assert_eq!(r.txn_latency.count, r.committed, "window {window}");
        assert!(r.commit_latency.count > 0, "window {window}: the committer measured commits");
        assert_eq!(
            r.config.get("tasks").map(String::as_str),
            Some(&*format!("50 (ack window {window})"))
        );
    }
}
