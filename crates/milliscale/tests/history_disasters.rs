//! The disasters a retention window undoes (design record 0012), each as a
//! script: a table dropped by mistake, restored from the moment before
//! the drop; a writer that wrote garbage, restored to before it while the
//! source keeps serving; a backup taken, the source's objects deleted, the
//! database restored from the backup alone. Nothing acknowledged before
//! the point is lost in any of them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use milliscale::history::backup;
use milliscale::{At, Database, RestoreStep, Table};
use objstore::{MemoryStore, ObjectStore};
use parking_lot::Mutex;

use crate::common::window::{options, rows};

fn fill(db: &Database, t: &Table, prefix: &str, n: u32) {
    for i in 0..n {
        db.put(t, format!("{prefix}{i:04}").as_bytes(), format!("{prefix}-{i}").as_bytes())
            .expect("put");
    }
}

#[test]
fn a_dropped_table_comes_back_from_the_moment_before_the_drop() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let db = Database::open(options(&store)).expect("open");
    let orders = db.create_table("orders").expect("orders");
    let other = db.create_table("other").expect("other");
    for i in 0..50u32 {
        db.put(&orders, format!("o{i:03}").as_bytes(), b"paid").expect("put");
    }
    let before = rows(&db, &orders);
    let before_drop = std::time::SystemTime::now();
    std::thread::sleep(Duration::from_millis(3));
    db.drop_table("orders").expect("the mistake");
    let orders = db.create_table("orders").expect("a new table of that name");
    db.put(&orders, b"new", b"x").expect("put");
    for i in 0..20u32 {
        db.put(&other, format!("k{i}").as_bytes(), b"v").expect("put");
    }
    db.checkpoint().expect("a checkpoint: the window keeps the past");
    // The past: the old table, whole; the new one not there yet.
    let past = Database::open_at(options(&store), At::Time(before_drop)).expect("open the past");
    assert_eq!(past.table_names(), ["orders", "other"]);
    let old = past.open_table("orders").expect("the old table");
    assert_eq!(rows(&past, &old), before);
    assert!(past.begin().expect("begin").put(&old, b"x", b"y").is_err(), "read-only");
    // Restored to a new database that a writer opens.
    let target: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let steps = Mutex::new(Vec::new());
    let r = milliscale::restore(options(&store), At::Time(before_drop), &options(&target), &|s| {
        steps.lock().push(s)
    })
    .expect("restore");
    assert_eq!(r.rows, 50);
    assert!(matches!(steps.lock().first(), Some(RestoreStep::Reading)));
    assert!(matches!(steps.lock().last(), Some(RestoreStep::Publishing)));
    let restored = Database::open(options(&target)).expect("open the restored database");
    let t = restored.open_table("orders").expect("orders");
    assert_eq!(rows(&restored, &t), before);
    restored.put(&t, b"after", b"restore").expect("the restored database takes writes");
    // The source is untouched: its new table and its writes are there.
    let now = db.open_table("orders").expect("orders");
    assert_eq!(rows(&db, &now), vec![(b"new".to_vec(), b"x".to_vec())]);
    // A target that holds a database is refused, and nothing is written.
    let e = milliscale::restore(options(&store), At::Time(before_drop), &options(&target), &|_| {})
        .expect_err("a target with a database");
    assert!(e.to_string().contains("not empty"), "{e}");
    restored.close().expect("close");
    db.close().expect("close");
}

#[test]
fn a_writer_that_wrote_garbage_is_restored_to_before_it_while_the_source_keeps_serving() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let db = Database::open(options(&store)).expect("open");
    let t = db.create_table("accounts").expect("accounts");
    fill(&db, &t, "acct", 200);
    db.checkpoint().expect("checkpoint");
    fill(&db, &t, "more", 50);
    let good = rows(&db, &t);
    let before = SystemTime::now();
    std::thread::sleep(Duration::from_millis(2));
    // The bad deploy: overwrites every row with garbage, for a while,
    // with checkpoints meanwhile; the source keeps serving throughout.
    let garbage_for = Duration::from_millis(
        std::env::var("MILLISCALE_GARBAGE_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000),
    );
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let (k, _) = &good[(n as usize) % good.len()];
                db.put(&t, k, format!("garbage {n}").as_bytes()).expect("garbage");
                n += 1;
                if n.is_multiple_of(500) {
                    db.checkpoint().expect("checkpoint");
                }
            }
        });
        std::thread::sleep(garbage_for);
        // Restored while the garbage still flows.
        let target: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
        let r = milliscale::restore(options(&store), At::Time(before), &options(&target), &|_| {})
            .expect("restore");
        assert_eq!(r.rows, good.len() as u64);
        let restored = Database::open(options(&target)).expect("open the restored database");
        let rt = restored.open_table("accounts").expect("accounts");
        assert_eq!(rows(&restored, &rt), good, "every row as it was before the garbage");
        restored.close().expect("close");
        stop.store(true, Ordering::SeqCst);
    });
    assert!(rows(&db, &t).iter().any(|(_, v)| v.starts_with(b"garbage")), "the source kept going");
    db.close().expect("close");
}

#[test]
fn a_backup_restores_the_database_with_the_source_gone() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let copy: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let db = Database::open(options(&store)).expect("open");
    let t = db.create_table("t").expect("t");
    fill(&db, &t, "a", 300);
    db.checkpoint().expect("checkpoint");
    fill(&db, &t, "b", 300);
    let first = backup::backup(&options(&store), &options(&copy), &|_, _| {}).expect("a backup");
    assert!(first.objects_copied > 0 && first.objects_skipped == 0, "{first:?}");
    let at_first = db.put(&t, b"marker", b"1").expect("put");
    fill(&db, &t, "c", 300);
    let expected = rows(&db, &t);
    let last = db.put(&t, b"marker", b"2").expect("put");
    let second = backup::backup(&options(&store), &options(&copy), &|_, _| {}).expect("again");
    assert!(second.objects_skipped > 0 && second.bytes_skipped > 0, "incremental: {second:?}");
    let fresh: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let full = backup::backup(&options(&store), &options(&fresh), &|_, _| {}).expect("full");
    assert!(
        second.bytes_copied < full.bytes_copied / 2,
        "an incremental pass copies what is new: {second:?} against a full one: {full:?}"
    );
    let v = backup::verify(&options(&copy)).expect("verify");
    assert!(v.problems.is_empty() && v.chunks > 0 && v.log_objects > 0, "{v:?}");
    // The source's objects are gone: emptied by hand.
    db.close().expect("close");
    for o in store.list("").expect("list") {
        store.delete(&o.key).expect("delete");
    }
    assert!(Database::open_at(options(&store), At::Csn(last)).is_err(), "the source is gone");
    let past = Database::open_at(options(&copy), At::Csn(last - 1)).expect("the backup's past");
    let pt = past.open_table("t").expect("t");
    assert_eq!(rows(&past, &pt), expected);
    let early = Database::open_at(options(&copy), At::Csn(at_first)).expect("earlier");
    assert_eq!(
        early.get(&early.open_table("t").expect("t"), b"marker").expect("get"),
        Some(b"1".to_vec())
    );
    let target: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    milliscale::restore(options(&copy), At::Csn(last), &options(&target), &|_| {})
        .expect("restore");
    let restored = Database::open(options(&target)).expect("open");
    let rt = restored.open_table("t").expect("t");
    assert_eq!(restored.get(&rt, b"marker").expect("get"), Some(b"2".to_vec()));
    restored.close().expect("close");
    // Damage is found: one flipped byte in one chunk.
    let chunk = copy
        .list("checkpoint/")
        .expect("list")
        .into_iter()
        .find(|o| !o.key.ends_with("/list"))
        .expect("a chunk");
    let mut b = copy.get(&chunk.key).expect("get").to_vec();
    let n = b.len();
    b[n - 1] ^= 1;
    copy.put(&chunk.key, b.into()).expect("put");
    let v = backup::verify(&options(&copy)).expect("verify");
    assert_eq!(v.problems.len(), 1, "{v:?}");
    // A database that is not a backup is refused as a target.
    let other: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let d2 = Database::open(options(&other)).expect("open");
    d2.create_table("x").expect("x");
    d2.close().expect("close");
    let e =
        backup::backup(&options(&copy), &options(&other), &|_, _| {}).expect_err("not a backup");
    assert!(e.to_string().contains("not a backup"), "{e}");
}

#[test]
fn a_clone_and_its_parent_write_apart_and_the_parents_collection_keeps_what_the_clone_reads() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let parent_o = options(&store).retention(Some(Duration::from_secs(1)));
    let db = Database::open(parent_o.clone()).expect("open");
    let t = db.create_table("t").expect("t");
    fill(&db, &t, "p", 200);
    db.checkpoint().expect("checkpoint");
    fill(&db, &t, "q", 100);
    let at = db.put(&t, b"point", b"here").expect("put");
    let at_point = rows(&db, &t);
    let target: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let clone_o =
        options(&target).parent_stores(vec![milliscale::StoreSpec::Handle(Arc::clone(&store))]);
    let r = milliscale::clone_at(&parent_o, At::Csn(at), &clone_o).expect("clone");
    assert_eq!(r.csn, at);
    assert!(r.requests < 20, "a clone costs a few requests: {r:?}");
    // The parent goes on writing and collecting past the clone's base:
    // its window (1 s) moves on, but the clone's registration keeps what
    // the clone reads.
    for round in 0..3 {
        std::thread::sleep(Duration::from_millis(1_100));
        fill(&db, &t, &format!("r{round}"), 50);
        db.checkpoint().expect("checkpoint");
    }
    let oldest = db.manifest().expect("m").history.expect("h").oldest().0;
    assert!(oldest > at, "the parent's window moved past the clone point ({oldest} > {at})");
    assert!(!store.list("readers/").expect("list").is_empty(), "the clone is registered");
    // The clone opens as a writer: the parent's state at the point.
    let clone = Database::open(clone_o.clone()).expect("open the clone");
    let ct = clone.open_table("t").expect("t");
    assert_eq!(rows(&clone, &ct), at_point);
    assert!(store.list("readers/").expect("list").is_empty(), "withdrawn once on its own");
    assert!(clone.manifest().expect("m").parent.is_none());
    // Each writes heavily; neither sees the other's writes.
    std::thread::scope(|s| {
        s.spawn(|| fill(&clone, &ct, "clone", 300));
        s.spawn(|| fill(&db, &t, "parent", 300));
    });
    db.checkpoint().expect("the parent collects what nothing reaches now");
    assert!(rows(&db, &t).iter().all(|(k, _)| !k.starts_with(b"clone")));
    assert!(
        rows(&clone, &ct).iter().all(|(k, _)| !k.starts_with(b"parent") && !k.starts_with(b"r"))
    );
    assert_eq!(rows(&clone, &ct).len(), at_point.len() + 300);
    // The clone recovers on its own, with the parent's objects gone.
    clone.close().expect("close");
    db.close().expect("close");
    for o in store.list("").expect("list") {
        store.delete(&o.key).expect("delete");
    }
    let again = Database::open(options(&target)).expect("reopen the clone without its parent");
    let at2 = again.open_table("t").expect("t");
    assert_eq!(rows(&again, &at2).len(), at_point.len() + 300);
    again.close().expect("close");
}

#[test]
fn a_clone_with_an_overlay_starts_from_the_point_with_the_overlay_written_on_it() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let parent_o = options(&store).retention(Some(Duration::from_secs(3600)));
    let db = Database::open(parent_o.clone()).expect("open");
    let t = db.create_table("t").expect("t");
    fill(&db, &t, "p", 50);
    db.checkpoint().expect("checkpoint");
    fill(&db, &t, "q", 20);
    let at = db.put(&t, b"q0003", b"patched").expect("put");
    let mut expect: std::collections::BTreeMap<Vec<u8>, Vec<u8>> =
        rows(&db, &t).into_iter().collect();
    fill(&db, &t, "after", 10);
    let target: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let clone_o =
        options(&target).parent_stores(vec![milliscale::StoreSpec::Handle(Arc::clone(&store))]);
    let overlay: Vec<milliscale::OverlayWrite> = vec![
        ("t".into(), b"p0001".to_vec(), Some(b"overlaid".to_vec())),
        ("t".into(), b"q0003".to_vec(), None),
        ("t".into(), b"new".to_vec(), Some(b"row".to_vec())),
    ];
    // A table the parent does not have is refused, naming it.
    let bad = vec![("nope".into(), b"k".to_vec(), None)];
    let scratch: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let scratch_o =
        options(&scratch).parent_stores(vec![milliscale::StoreSpec::Handle(Arc::clone(&store))]);
    let e = milliscale::clone_with(&parent_o, At::Csn(at), &scratch_o, &bad)
        .expect_err("no such table");
    assert!(e.to_string().contains("nope"), "{e}");
    let r = milliscale::clone_with(&parent_o, At::Csn(at), &clone_o, &overlay).expect("clone");
    assert!(r.requests < 20, "{r:?}");
    assert_eq!(target.list("clone/").expect("list").len(), 1, "the overlay object");
    expect.insert(b"p0001".to_vec(), b"overlaid".to_vec());
    expect.remove(&b"q0003"[..]);
    expect.insert(b"new".to_vec(), b"row".to_vec());
    let expect: Vec<(Vec<u8>, Vec<u8>)> = expect.into_iter().collect();
    let clone = Database::open(clone_o.clone()).expect("open the clone");
    let ct = clone.open_table("t").expect("t");
    assert_eq!(rows(&clone, &ct), expect);
    assert!(target.list("clone/").expect("list").is_empty(), "in the clone's checkpoint now");
    clone.put(&ct, b"own", b"write").expect("a write of its own");
    clone.close().expect("close");
    db.close().expect("close");
    let again = Database::open(clone_o).expect("reopen");
    let at2 = again.open_table("t").expect("t");
    assert_eq!(rows(&again, &at2).len(), expect.len() + 1);
    again.close().expect("close");
}
