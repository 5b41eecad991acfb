//! Bad input gets a clear, typed error and never a panic.

use std::ops::Bound;

use milliscale::limits::{KEY_BYTES_MAX, TABLE_NAME_BYTES_MAX, VALUE_BYTES_MAX};
use milliscale::{Database, Direction, Error, Options, TxnOptions};

fn db() -> Database {
    Database::open(Options::new()).expect("open")
}

#[test]
fn oversized_keys_and_values_are_refused() {
    let db = db();
    let t = db.create_table("t").expect("table");
    let mut tx = db.begin().expect("begin");
    let big_key = vec![0u8; KEY_BYTES_MAX + 1];
    assert!(matches!(tx.put(&t, &big_key, b"v"), Err(Error::InvalidArgument(_))));
    assert!(matches!(tx.get(&t, &big_key), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        tx.scan(&t, Bound::Included(&big_key), Bound::Unbounded, Direction::Forward, 1),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        tx.put(&t, b"k", &vec![0u8; VALUE_BYTES_MAX + 1]),
        Err(Error::InvalidArgument(_))
    ));
    // The limits themselves are accepted, and the transaction is still usable.
    tx.put(&t, &vec![7u8; KEY_BYTES_MAX], &vec![1u8; VALUE_BYTES_MAX]).expect("at the limits");
    assert!(matches!(tx.update_range(&t, b"k", usize::MAX, b"x"), Err(Error::InvalidArgument(_))));
    tx.commit_and_wait().expect("commit");
}

#[test]
fn update_range_checks_key_and_bounds() {
    let db = db();
    let t = db.create_table("t").expect("table");
    let mut tx = db.begin().expect("begin");
    assert_eq!(tx.update_range(&t, b"missing", 0, b"x"), Err(Error::NotFound));
    tx.put(&t, b"k", b"abcd").expect("put");
    assert!(matches!(tx.update_range(&t, b"k", 3, b"xy"), Err(Error::InvalidArgument(_))));
    tx.update_range(&t, b"k", 2, b"XY").expect("in range");
    assert_eq!(tx.get(&t, b"k").expect("get"), Some(b"abXY".to_vec()));
    tx.delete(&t, b"k").expect("delete");
    assert_eq!(tx.update_range(&t, b"k", 0, b"x"), Err(Error::NotFound));
}

#[test]
fn tables_are_checked() {
    let db = db();
    assert!(matches!(db.open_table("nope"), Err(Error::TableNotFound(_))));
    assert!(matches!(db.create_table(""), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        db.create_table(&"x".repeat(TABLE_NAME_BYTES_MAX + 1)),
        Err(Error::InvalidArgument(_))
    ));
    let t = db.create_table("t").expect("table");
    assert!(matches!(db.create_table("t"), Err(Error::TableExists(_))));
    assert_eq!(db.open_table("t").expect("open").id(), t.id());
    let other = self::db();
    let foreign = other.create_table("t").expect("table");
    let mut tx = db.begin().expect("begin");
    assert!(matches!(tx.get(&foreign, b"k"), Err(Error::InvalidArgument(_))));
    assert_eq!(db.table_names(), vec!["t".to_owned()]);
}

#[test]
fn use_after_close_is_refused() {
    let db = db();
    let t = db.create_table("t").expect("table");
    let mut running = db.begin().expect("begin");
    running.put(&t, b"k", b"v").expect("put");
    db.close().expect("close");
    assert_eq!(db.begin().map(|_| ()), Err(Error::Closed));
    assert!(matches!(db.create_table("u"), Err(Error::Closed)));
    assert_eq!(running.get(&t, b"k"), Err(Error::Closed));
    assert_eq!(running.commit().map(|_| ()), Err(Error::Closed));
}

#[test]
fn read_only_transactions_refuse_writes_and_take_no_csn() {
    let db = db();
    let t = db.create_table("t").expect("table");
    let mut tx = db.begin_with(TxnOptions::read_only()).expect("begin");
    assert!(matches!(tx.put(&t, b"k", b"v"), Err(Error::InvalidArgument(_))));
    assert_eq!(tx.commit().expect("commit").csn(), None);
    let before = db.stats().next_csn;
    let mut tx = db.begin().expect("begin");
    assert_eq!(tx.get(&t, b"k").expect("get"), None);
    assert_eq!(tx.commit().expect("commit").csn(), None);
    assert_eq!(db.stats().next_csn, before, "read-only transactions take no CSN");
}

#[test]
fn transaction_slots_run_out_cleanly() {
    let db = Database::open(Options::new().max_transactions(2)).expect("open");
    let a = db.begin().expect("first");
    let _b = db.begin().expect("second");
    assert_eq!(db.begin().map(|_| ()), Err(Error::TooManyTransactions(2)));
    drop(a);
    db.begin().expect("a slot was freed");
    assert!(matches!(
        Database::open(Options::new().max_transactions(0)),
        Err(Error::InvalidArgument(_))
    ));
    for bad in ["ftp://x", "file://relative/path", "sim://no-such-preset", "no-scheme"] {
        assert!(
            matches!(Database::open(Options::new().store(bad)), Err(Error::InvalidArgument(_))),
            "{bad}"
        );
    }
}

#[test]
fn csns_are_dense_and_dsn_tracks_reads_and_overwrites() {
    let db = db();
    let t = db.create_table("t").expect("table");
    let c1 = db
        .begin()
        .and_then(|mut tx| {
            tx.put(&t, b"a", b"1")?;
            tx.commit()
        })
        .expect("c1")
        .csn()
        .expect("csn");
    let c2 = db
        .begin()
        .and_then(|mut tx| {
            tx.put(&t, b"b", b"1")?;
            tx.commit()
        })
        .expect("c2")
        .csn()
        .expect("csn");
    assert_eq!(c2, c1 + 1, "CSNs are dense");
    // Reading a (c1) gives DSN c1; overwriting b (c2) raises it to c2.
    let mut tx = db.begin().expect("begin");
    tx.get(&t, b"a").expect("get");
    assert_eq!(tx.dsn(), c1);
    tx.put(&t, b"b", b"2").expect("blind overwrite counts as a dependency");
    assert_eq!(tx.dsn(), c2);
    let ack = tx.commit().expect("commit");
    assert_eq!((ack.csn(), ack.dsn()), (Some(c2 + 1), c2));
    // An insert of a fresh key and own reads add nothing.
    let mut tx = db.begin().expect("begin");
    tx.put(&t, b"z", b"1").expect("put");
    tx.get(&t, b"z").expect("own read");
    assert_eq!(tx.dsn(), 0);
}

#[test]
fn first_updater_wins() {
    let db = db();
    let t = db.create_table("t").expect("table");
    db.begin()
        .and_then(|mut tx| {
            tx.put(&t, b"k", b"0")?;
            tx.commit_and_wait()
        })
        .expect("load");
    let mut t1 = db.begin().expect("begin");
    let mut t2 = db.begin().expect("begin");
    t1.put(&t, b"k", b"1").expect("first writer");
    assert!(matches!(t2.put(&t, b"k", b"2"), Err(Error::Conflict(_))), "uncommitted head");
    assert!(matches!(t2.get(&t, b"other"), Err(Error::Conflict(_))), "a conflicted txn is doomed");
    t1.commit_and_wait().expect("commit");
    let mut t3 =
        db.begin_with(TxnOptions::isolation(milliscale::Isolation::Snapshot)).expect("begin");
    let mut t4 = db.begin().expect("begin");
    t4.put(&t, b"k", b"4").expect("write");
    t4.commit_and_wait().expect("commit");
    assert_eq!(t3.get(&t, b"k").expect("snapshot read"), Some(b"1".to_vec()));
    assert!(matches!(t3.put(&t, b"k", b"3"), Err(Error::Conflict(_))), "committed after snapshot");
    // Read committed may overwrite a newer committed version.
    let mut rc =
        db.begin_with(TxnOptions::isolation(milliscale::Isolation::ReadCommitted)).expect("begin");
    let mut t5 = db.begin().expect("begin");
    t5.put(&t, b"k", b"5").expect("write");
    t5.commit_and_wait().expect("commit");
    assert_eq!(rc.get(&t, b"k").expect("latest"), Some(b"5".to_vec()));
    rc.put(&t, b"k", b"6").expect("read committed overwrites");
    rc.commit_and_wait().expect("commit");
}
