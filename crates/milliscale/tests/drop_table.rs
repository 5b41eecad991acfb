//! `Database::drop_table`: a dropped table is gone for every handle, its
//! name is free for a new table with a new id, and it stays gone through
//! recovery (its records in the log and its rows in an earlier checkpoint
//! are skipped), through a crash right after the drop returned (a second
//! writer takes over from what is on the store), and on a read replica.
//! A drop the store refuses changes nothing.

use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common;

use common::switch::Switch;
use milliscale::{Database, Direction, Error, Options, Replica, ReplicaOptions, Table};
use objstore::{MemoryStore, ObjectStore};

fn options(store: &Arc<dyn ObjectStore>) -> Options {
    Options::new()
        .add_store_handle(Arc::clone(store))
        .workers(2)
        .segment_parts_max(8)
        .checkpoint_log_bytes(0)
        .store_deadline(Duration::from_secs(2))
}

fn rows(db: &Database, t: &Table) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut tx = db.begin().expect("begin");
    tx.scan(t, Bound::Unbounded, Bound::Unbounded, Direction::Forward, usize::MAX).expect("scan")
}

fn fill(db: &Database, t: &Table, prefix: &str, n: u32) {
    for i in 0..n {
        let mut tx = db.begin().expect("begin");
        tx.put(t, format!("{prefix}{i:04}").as_bytes(), prefix.as_bytes()).expect("put");
        tx.commit_and_wait().expect("commit");
    }
}

fn is_table_not_found<T: std::fmt::Debug>(r: milliscale::Result<T>) -> bool {
    matches!(r, Err(Error::TableNotFound(ref n)) if n == "a")
}

#[test]
fn a_dropped_table_is_gone_for_every_handle_and_its_name_is_free() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let db = Database::open(options(&store)).expect("open");
    let a = db.create_table("a").expect("a");
    let b = db.create_table("b").expect("b");
    fill(&db, &a, "old", 20);
    fill(&db, &b, "b", 5);

    db.drop_table("a").expect("drop");
    assert_eq!(db.table_names(), ["b"]);
    assert!(matches!(db.open_table("a"), Err(Error::TableNotFound(_))));
    assert!(matches!(db.drop_table("a"), Err(Error::TableNotFound(_))), "dropped twice");
    assert_eq!(db.stats().tables, 1);
    // The old handle: reads, writes and scans all fail, naming the table.
    let mut tx = db.begin().expect("begin");
    assert!(is_table_not_found(tx.get(&a, b"old0000")));
    assert!(is_table_not_found(tx.put(&a, b"k", b"v")));
    assert!(is_table_not_found(tx.scan(
        &a,
        Bound::Unbounded,
        Bound::Unbounded,
        Direction::Forward,
        10
    )));
    assert!(tx.prefix(&a, b"", Direction::Forward).next().is_some_and(is_table_not_found));
    drop(tx);
    assert!(is_table_not_found(db.get(&a, b"old0000")));

    // The name is free; the new table has a new id and none of the old rows.
    let a2 = db.create_table("a").expect("a again");
    assert_ne!(a2.id(), a.id());
    assert!(rows(&db, &a2).is_empty());
    fill(&db, &a2, "new", 3);
    assert_eq!(db.table_names(), ["b", "a"]);
    db.close().expect("close");

    // Recovery replays the log, which still holds the old table's records:
    // they are skipped, and the new table's are applied to it.
    let db = Database::open(options(&store)).expect("recover");
    let applied = db.recovery_report().expect("report").records_applied;
    assert_eq!(applied, 5 + 3, "the 20 records of the dropped table are not applied");
    assert_eq!(db.table_names(), ["b", "a"]);
    let a3 = db.open_table("a").expect("the new a");
    assert_eq!(a3.id(), a2.id());
    let got = rows(&db, &a3);
    assert_eq!(got.len(), 3, "only the new table's rows: {got:?}");
    assert!(got.iter().all(|(k, _)| k.starts_with(b"new")));
    assert_eq!(rows(&db, &db.open_table("b").expect("b")).len(), 5);
    db.close().expect("close");
}

#[test]
fn a_checkpoint_taken_before_the_drop_does_not_bring_the_table_back() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let db = Database::open(options(&store)).expect("open");
    let a = db.create_table("a").expect("a");
    let keep = db.create_table("keep").expect("keep");
    fill(&db, &a, "old", 10);
    fill(&db, &keep, "k", 4);
    db.checkpoint().expect("checkpoint with a in it");
    db.drop_table("a").expect("drop");
    let a2 = db.create_table("a").expect("a again");
    fill(&db, &a2, "new", 2);
    db.close().expect("close");

    let db = Database::open(options(&store)).expect("recover from the checkpoint and the log");
    // The checkpoint holds the old a's 10 rows and keep's 4; only keep's
    // are loaded.
    assert_eq!(db.recovery_report().expect("report").checkpoint_rows_loaded, 4);
    assert_eq!(rows(&db, &db.open_table("a").expect("a")).len(), 2);
    assert_eq!(rows(&db, &db.open_table("keep").expect("keep")).len(), 4);
    // A checkpoint after the drop leaves the dropped table out.
    let before = db.checkpoint_stats().bytes_uploaded;
    db.checkpoint().expect("checkpoint without the old a");
    let written = db.checkpoint_stats().bytes_uploaded - before;
    db.close().expect("close");

    let db = Database::open(options(&store)).expect("recover again");
    let report = db.recovery_report().expect("report");
    assert_eq!(report.checkpoint_rows_loaded, 6, "4 of keep and 2 of the new a");
    assert!(written > 0);
    db.close().expect("close");
}

#[test]
fn a_write_that_commits_after_the_drop_keeps_its_other_writes() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let db = Database::open(options(&store)).expect("open");
    let a = db.create_table("a").expect("a");
    let b = db.create_table("b").expect("b");
    let mut tx = db.begin().expect("begin");
    tx.put(&a, b"x", b"in a").expect("put a");
    tx.put(&b, b"y", b"in b").expect("put b");
    db.drop_table("a").expect("drop while a transaction wrote to it");
    tx.commit_and_wait().expect("the commit goes through");
    assert_eq!(db.get(&b, b"y").expect("get"), Some(b"in b".to_vec()));
    db.close().expect("close");

    let db = Database::open(options(&store)).expect("recover");
    assert_eq!(db.table_names(), ["b"]);
    let b = db.open_table("b").expect("b");
    assert_eq!(db.get(&b, b"y").expect("get"), Some(b"in b".to_vec()));
    db.close().expect("close");
}

#[test]
fn a_drop_is_durable_when_it_returns_and_a_refused_one_changes_nothing() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let switch = Switch::new(Arc::clone(&store));
    let handle: Arc<dyn ObjectStore> = switch.clone();
    let db = Database::open(options(&handle)).expect("open");
    let a = db.create_table("a").expect("a");
    let gone = db.create_table("gone").expect("gone");
    fill(&db, &a, "a", 5);
    fill(&db, &gone, "g", 5);

    // The store is down: the drop fails, and the table is still there.
    switch.set_down(true);
    let e = db.drop_table("a").expect_err("no store, no drop");
    assert!(matches!(e, Error::StoreUnavailable(_) | Error::Store(_)), "{e}");
    switch.set_down(false);
    assert_eq!(db.open_table("a").expect("still there").id(), a.id());
    assert_eq!(rows(&db, &a).len(), 5);

    // A drop that returned survives a crash right after it: a new writer
    // takes over from the store while this one is still running.
    db.drop_table("gone").expect("drop");
    let next = Database::open(options(&store)).expect("a new writer recovers");
    assert_eq!(next.table_names(), ["a"]);
    assert_eq!(rows(&next, &next.open_table("a").expect("a")).len(), 5);
    next.close().expect("close");
    drop(db);
}

#[test]
fn a_replica_follows_the_drop() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let db = Database::open(options(&store)).expect("open");
    let a = db.create_table("a").expect("a");
    fill(&db, &a, "a", 5);
    let replica = Replica::open_with(
        Options::new().add_store_handle(Arc::clone(&store)),
        ReplicaOptions {
            poll_min: Duration::from_millis(1),
            poll_max: Duration::from_millis(20),
            manifest_every: Duration::from_millis(20),
            ..ReplicaOptions::default()
        },
    )
    .expect("replica");
    let ra = replica.open_table("a").expect("the replica has a");
    db.drop_table("a").expect("drop");
    let deadline = Instant::now() + Duration::from_secs(10);
    while replica.open_table("a").is_ok() {
        assert!(Instant::now() < deadline, "the replica never saw the drop");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut tx = replica.begin().expect("begin");
    assert!(is_table_not_found(tx.get(&ra, b"a0000")));
    assert!(replica.table_names().is_empty());
    drop(tx);
    drop(replica);
    db.close().expect("close");
}
