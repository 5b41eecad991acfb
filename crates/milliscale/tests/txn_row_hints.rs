//! Row hints (`Transaction::row_hint`, `Transaction::assume_row`): where
//! one transaction found a key, taken by another that writes it, skipping
//! the index's descent, while the finder runs or after it ended. A hint is
//! used only while its record id cannot have gone to another key: a hint
//! whose key was deleted, reclaimed and whose record id went to a new key
//! is ignored (the table's count of record ids handed out again moved),
//! and the write lands on its own key. Prefetching the rows hints point at
//! (`Table::prefetch_rows`) changes nothing and skips hints of other tables.

use milliscale::{Database, Options};

use crate::mvcc_reclaims_deleted_keys::churn;

#[test]
fn a_hint_is_given_for_the_key_last_found_and_writes_that_key() {
    let db = Database::open(Options::new()).expect("open");
    let t = db.create_table("t").expect("t");
    let u = db.create_table("u").expect("u");
    let mut tx = db.begin().expect("begin");
    for k in [b"a", b"b"] {
        tx.put(&t, k, b"0000").expect("put");
    }
    tx.commit_and_wait().expect("commit");

    let mut reader = db.begin().expect("reader");
    assert!(reader.row_hint(&t, b"a").is_none(), "nothing looked up yet");
    assert_eq!(reader.get(&t, b"a").expect("get"), Some(b"0000".to_vec()));
    let hint = reader.row_hint(&t, b"a").expect("the key last found");
    assert!(reader.row_hint(&t, b"b").is_none(), "not the key last found");
    assert!(reader.row_hint(&u, b"a").is_none(), "not its table");

    // The writer takes it while the reader is open, and writes key a.
    let mut w = db.begin().expect("writer");
    w.assume_row(&t, b"a", hint);
    w.update_range(&t, b"a", 1, b"11").expect("patch");
    // A hint of another table is ignored: key a of u is inserted.
    w.assume_row(&u, b"a", hint);
    w.put(&u, b"a", b"u").expect("put");
    w.commit_and_wait().expect("commit");
    drop(reader);
    assert_eq!(db.get(&t, b"a").expect("get"), Some(b"0110".to_vec()));
    assert_eq!(db.get(&t, b"b").expect("get"), Some(b"0000".to_vec()));
    assert_eq!(db.get(&u, b"a").expect("get"), Some(b"u".to_vec()));
}

#[test]
fn a_hint_whose_record_went_to_another_key_is_ignored() {
    let db = Database::open(Options::new()).expect("open");
    let t = db.create_table("t").expect("t");
    let other = db.create_table("other").expect("other");
    db.put(&t, b"gone", b"old").expect("put");
    let hint = {
        let mut reader = db.begin().expect("reader");
        reader.get(&t, b"gone").expect("get");
        reader.row_hint(&t, b"gone").expect("hint")
    }; // the reader ends: nothing holds the record id any more

    // The key is deleted and reclaimed; its record id is freed, then
    // handed to a new key once the horizon has passed.
    let mut tx = db.begin().expect("begin");
    assert!(tx.delete(&t, b"gone").expect("delete"));
    tx.commit_and_wait().expect("commit");
    churn(&db, &other, 300);
    assert_eq!(db.stats().keys_reclaimed, 1);
    churn(&db, &other, 300);
    db.put(&t, b"new", b"its own").expect("put");

    // A writer given the stale hint must not write the new key's record.
    let mut w = db.begin().expect("writer");
    w.assume_row(&t, b"gone", hint);
    w.put(&t, b"gone", b"back").expect("put");
    w.commit_and_wait().expect("commit");
    assert_eq!(db.get(&t, b"new").expect("get"), Some(b"its own".to_vec()));
    assert_eq!(db.get(&t, b"gone").expect("get"), Some(b"back".to_vec()));
}

#[test]
fn a_hint_kept_after_its_finder_ended_writes_its_key() {
    let db = Database::open(Options::new()).expect("open");
    let t = db.create_table("t").expect("t");
    let other = db.create_table("other").expect("other");
    for k in [b"a", b"b"] {
        db.put(&t, k, b"0000").expect("put");
    }
    let hint = {
        let mut reader = db.begin().expect("reader");
        reader.get(&t, b"a").expect("get");
        reader.row_hint(&t, b"a").expect("hint")
    };
    // The horizon passes the finder's snapshot; no record id of `t` is
    // handed out again meanwhile.
    churn(&db, &other, 300);
    let mut w = db.begin().expect("writer");
    w.assume_row(&t, b"a", hint);
    w.update_range(&t, b"a", 1, b"11").expect("patch");
    w.commit_and_wait().expect("commit");
    assert_eq!(db.get(&t, b"a").expect("get"), Some(b"0110".to_vec()));
    assert_eq!(db.get(&t, b"b").expect("get"), Some(b"0000".to_vec()));
}

#[test]
fn prefetching_rows_by_hints_changes_nothing_and_skips_hints_of_other_tables() {
    // A hint from another database, past the first chunk of record ids
    // (65,536), and given to a table with one record: were it not skipped,
    // its record's slot would be outside what this table ever allocated.
    let big = Database::open(Options::new()).expect("open");
    let bt = big.create_table("t").expect("t");
    let mut tx = big.begin().expect("begin");
    for i in 0..70_000u32 {
        tx.put(&bt, &i.to_be_bytes(), b"v").expect("put");
    }
    tx.commit_and_wait().expect("commit");
    let far = {
        let mut reader = big.begin().expect("reader");
        reader.get(&bt, &69_999u32.to_be_bytes()).expect("get");
        reader.row_hint(&bt, &69_999u32.to_be_bytes()).expect("hint")
    };

    let db = Database::open(Options::new()).expect("open");
    let t = db.create_table("t").expect("t");
    let u = db.create_table("u").expect("u");
    let other = db.create_table("other").expect("other");
    db.put(&t, b"a", b"0000").expect("put");
    db.put(&u, b"x", b"u").expect("put");
    db.put(&t, b"gone", b"old").expect("put");
    let hint = |table: &milliscale::Table, key: &[u8]| {
        let mut reader = db.begin().expect("reader");
        reader.get(table, key).expect("get");
        reader.row_hint(table, key).expect("hint")
    };
    let (a, x, gone) = (hint(&t, b"a"), hint(&u, b"x"), hint(&t, b"gone"));
    // The key of one hint is deleted and its record reclaimed.
    let mut tx = db.begin().expect("begin");
    assert!(tx.delete(&t, b"gone").expect("delete"));
    tx.commit_and_wait().expect("commit");
    churn(&db, &other, 300);
    churn(&db, &other, 300);
    assert_eq!(db.stats().keys_reclaimed, 1);

    for table in [&t, &u] {
        table.prefetch_rows([far, a, x, gone].into_iter());
    }
    assert_eq!(db.get(&t, b"a").expect("get"), Some(b"0000".to_vec()));
    assert_eq!(db.get(&u, b"x").expect("get"), Some(b"u".to_vec()));
    assert_eq!(db.get(&t, b"gone").expect("get"), None);
    // A patch through a hint after the prefetch lands on its key.
    let mut w = db.begin().expect("writer");
    w.assume_row(&t, b"a", a);
    w.update_range(&t, b"a", 1, b"11").expect("patch");
    w.commit_and_wait().expect("commit");
    assert_eq!(db.get(&t, b"a").expect("get"), Some(b"0110".to_vec()));
}
