//! Version garbage collection: an update-only loop keeps chains short, and a
//! running snapshot keeps exactly what it can still see.

use milliscale::{Database, Options, TxnOptions};

#[test]
fn updates_are_reclaimed_and_old_snapshots_stay_readable() {
    let db = Database::open(Options::new()).expect("open");
    let t = db.create_table("t").expect("table");
    let put = |v: u64| {
        let mut tx = db.begin().expect("begin");
        tx.put(&t, b"hot", &v.to_le_bytes()).expect("put");
        tx.commit_and_wait().expect("commit");
    };
    put(0);
    let mut old = db.begin_with(TxnOptions::read_only()).expect("begin");
    const N: u64 = 20_000;
    for v in 1..=N {
        put(v);
    }
    let held = db.stats().versions_retired;
    assert!(held < 100, "the old snapshot pins the chain below it: {held} retired");
    assert_eq!(old.get(&t, b"hot").expect("get"), Some(0u64.to_le_bytes().to_vec()));
    old.commit_and_wait().expect("commit");
    for v in N + 1..=2 * N {
        put(v);
    }
    let retired = db.stats().versions_retired;
    assert!(retired >= 2 * N - 100, "only {retired} of {} old versions reclaimed", 2 * N);
    let mut tx = db.begin().expect("begin");
    assert_eq!(tx.get(&t, b"hot").expect("get"), Some((2 * N).to_le_bytes().to_vec()));
}

/// A record written once keeps the version it replaced only until the
/// horizon passes the write, not until its next write: after every row
/// of a table is updated once, and later commits move the horizon on, the
/// versions the updates replaced are retired (else each row ever updated
/// holds two versions, and memory grows with the rows touched). With the
/// log too, where the horizon trails the durable commits.
#[test]
fn a_version_replaced_once_is_retired_without_another_write_of_its_row() {
    let memory: std::sync::Arc<dyn objstore::ObjectStore> =
        std::sync::Arc::new(objstore::MemoryStore::new());
    for options in [Options::new(), Options::new().add_store_handle(memory)] {
        let db = Database::open(options).expect("open");
        let t = db.create_table("t").expect("table");
        const ROWS: u32 = 2_000;
        let mut tx = db.begin().expect("begin");
        for r in 0..ROWS {
            tx.put(&t, &r.to_be_bytes(), b"loaded").expect("put");
        }
        tx.commit_and_wait().expect("commit");
        for r in 0..ROWS {
            let mut tx = db.begin().expect("begin");
            tx.put(&t, &r.to_be_bytes(), b"updated").expect("put");
            tx.commit_and_wait().expect("commit");
        }
        // Commits elsewhere (a table of their own), which move the
        // horizon on: the updates' 2,000 replaced versions go, and at most
        // 199 of their own.
        let other = db.create_table("other").expect("table");
        for v in 0..200u32 {
            let mut tx = db.begin().expect("begin");
            tx.put(&other, b"k", &v.to_le_bytes()).expect("put");
            tx.commit_and_wait().expect("commit");
        }
        let retired = db.stats().versions_retired;
        assert!(retired >= u64::from(ROWS), "{retired} versions retired, {ROWS} replaced");
        let mut tx = db.begin().expect("begin");
        assert_eq!(tx.get(&t, &7u32.to_be_bytes()).expect("get"), Some(b"updated".to_vec()));
    }
}

/// The same on a replica: a version its apply replaced goes once the
/// readers' horizon passes the replacement, not at the record's next
/// apply.
#[test]
fn a_replica_retires_a_version_replaced_once() {
    use milliscale::{Replica, ReplicaOptions};
    use std::time::{Duration, Instant};
    let store: std::sync::Arc<dyn objstore::ObjectStore> =
        std::sync::Arc::new(objstore::MemoryStore::new());
    let db = Database::open(Options::new().add_store_handle(std::sync::Arc::clone(&store)))
        .expect("open");
    let t = db.create_table("t").expect("table");
    const ROWS: u32 = 2_000;
    let write = |keys: std::ops::Range<u32>, value: &[u8]| {
        let mut tx = db.begin().expect("begin");
        for r in keys {
            tx.put(&t, &r.to_be_bytes(), value).expect("put");
        }
        tx.commit_and_wait().expect("commit");
    };
    write(0..ROWS, b"loaded");
    let fast = ReplicaOptions {
        poll_min: Duration::from_millis(1),
        poll_max: Duration::from_millis(20),
        ..ReplicaOptions::default()
    };
    let replica =
        Replica::open_with(Options::new().add_store_handle(store), fast).expect("replica");
    // Each row updated once, ten to a transaction.
    for r in (0..ROWS).step_by(10) {
        write(r..r + 10, b"updated");
    }
    // Writes elsewhere move the replica on: at most 100 replaced of their own.
    let started = Instant::now();
    let mut extra = 0u32;
    let retired = loop {
        write(ROWS + extra % 10..ROWS + extra % 10 + 1, b"other");
        extra += 1;
        let m = replica.metrics();
        if m.versions_retired >= u64::from(ROWS) || extra >= 100 {
            break m.versions_retired;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        retired >= u64::from(ROWS),
        "{retired} versions retired on the replica, {ROWS} replaced, after {:?}",
        started.elapsed()
    );
    let rt = replica.open_table("t").expect("table");
    let token = db.durable_csn() - 1;
    let mut tx = replica.begin_at(token, Duration::from_secs(10)).expect("caught up");
    assert_eq!(tx.get(&rt, &7u32.to_be_bytes()).expect("get"), Some(b"updated".to_vec()));
}
