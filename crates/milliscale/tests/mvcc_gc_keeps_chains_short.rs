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
