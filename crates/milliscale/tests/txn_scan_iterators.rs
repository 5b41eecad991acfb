//! Range and prefix iterators against a `BTreeMap` model: every bound
//! kind, both directions, ranges that span many batches, rows deleted
//! between batches' keys, a snapshot that ignores later commits, and
//! serializable validation of what an iteration read.

use std::collections::BTreeMap;
use std::ops::Bound;

use milliscale::{
    ConflictKind, Database, Direction, Error, Isolation, Options, SCAN_BATCH_ROWS, Table,
    TxnOptions,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;
/// A key range: its lower and upper bound.
type Range<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

fn key(i: u32) -> Vec<u8> {
    // Three prefixes, so that prefix scans have neighbours on both sides.
    let p = [b"a/".as_slice(), b"b/", b"c/"][(i % 3) as usize];
    [p, format!("{i:06}").as_bytes()].concat()
}

/// A table with 3,000 keys written and about a third of them deleted
/// afterwards, and the model of what is visible.
fn database() -> (Database, Table, Model) {
    let db = Database::open(Options::new()).expect("open");
    let t = db.create_table("t").expect("table");
    let mut model = Model::new();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut tx = db.begin().expect("begin");
    for i in 0..3_000 {
        let v = format!("v{i}").into_bytes();
        tx.put(&t, &key(i), &v).expect("put");
        model.insert(key(i), v);
    }
    tx.commit_and_wait().expect("commit");
    let mut tx = db.begin().expect("begin");
    for i in 0..3_000 {
        if rng.random_bool(0.33) {
            assert!(tx.delete(&t, &key(i)).expect("delete"));
            model.remove(&key(i));
        }
    }
    tx.commit_and_wait().expect("commit");
    (db, t, model)
}

fn expected(
    model: &Model,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    d: Direction,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    use std::ops::RangeBounds;
    // A filter, not `BTreeMap::range`, which panics on an inverted range.
    let range = (lower, upper);
    let mut rows: Vec<_> = model
        .iter()
        .filter(|(k, _)| RangeBounds::<&[u8]>::contains(&range, &k.as_slice()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if d == Direction::Backward {
        rows.reverse();
    }
    rows
}

#[test]
fn ranges_match_the_model_in_both_directions() {
    let (db, t, model) = database();
    assert!(model.len() > 4 * SCAN_BATCH_ROWS, "the ranges span several batches");
    let k = |i: u32| key(i);
    let (k1, k2) = (k(300), k(2_700));
    let bounds: Vec<Range<'_>> = vec![
        (Bound::Unbounded, Bound::Unbounded),
        (Bound::Included(&k1), Bound::Excluded(&k2)),
        (Bound::Excluded(&k1), Bound::Included(&k2)),
        (Bound::Included(b"b/"), Bound::Unbounded),
        (Bound::Unbounded, Bound::Excluded(b"b/")),
        (Bound::Included(b"zz"), Bound::Unbounded),
        (Bound::Included(&k2), Bound::Included(&k1)), // empty: inverted
    ];
    for (lower, upper) in bounds {
        for d in [Direction::Forward, Direction::Backward] {
            let mut tx = db.begin().expect("begin");
            let got: Vec<_> =
                tx.range(&t, lower, upper, d).collect::<Result<_, _>>().expect("scan");
            assert_eq!(got, expected(&model, lower, upper, d), "{lower:?}..{upper:?} {d:?}");
        }
    }
}

#[test]
fn prefixes_match_the_model() {
    let (db, t, model) = database();
    for prefix in [b"a/".as_slice(), b"b/00", b"c/0029", b"", b"d", &[0xff, 0xff]] {
        for d in [Direction::Forward, Direction::Backward] {
            let mut tx = db.begin().expect("begin");
            let got: Vec<_> = tx.prefix(&t, prefix, d).collect::<Result<_, _>>().expect("scan");
            let mut want: Vec<_> = model
                .iter()
                .filter(|(k, _)| k.starts_with(prefix))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if d == Direction::Backward {
                want.reverse();
            }
            assert_eq!(got, want, "prefix {prefix:?} {d:?}");
        }
    }
}

/// Commits made while an iteration runs are not seen by it: every batch
/// reads at the transaction's snapshot.
#[test]
fn an_iteration_reads_one_snapshot() {
    let (db, t, model) = database();
    let mut reader = db.begin().expect("begin");
    let mut it = reader.range(&t, Bound::Unbounded, Bound::Unbounded, Direction::Forward);
    let mut got = Vec::new();
    for (i, row) in it.by_ref().enumerate() {
        got.push(row.expect("row"));
        if i == SCAN_BATCH_ROWS + 3 {
            // Mid-iteration: change keys on both sides of the cursor.
            let mut w = db.begin().expect("begin");
            w.put(&t, b"b/new-key", b"later").expect("put");
            w.delete(&t, &key(2_999)).expect("delete");
            w.put(&t, &key(0), b"changed").expect("put");
            w.commit_and_wait().expect("commit");
        }
    }
    let want = expected(&model, Bound::Unbounded, Bound::Unbounded, Direction::Forward);
    assert_eq!(got, want, "the iteration saw a commit made after its snapshot");
}

/// Under serializable isolation an iteration's range is validated: a key
/// inserted into it by a transaction that commits first makes the
/// iterating transaction's commit fail.
#[test]
fn a_serializable_iteration_conflicts_with_an_insert_into_its_range() {
    let (db, t, _) = database();
    let mut tx = db.begin_with(TxnOptions::isolation(Isolation::Serializable)).expect("begin");
    let n = tx.prefix(&t, b"b/", Direction::Forward).count();
    assert!(n > SCAN_BATCH_ROWS);
    let mut w = db.begin().expect("begin");
    // Past the first batch: only the later batches' ranges cover it.
    w.put(&t, b"b/002999x", b"phantom").expect("put");
    w.commit_and_wait().expect("commit");
    tx.put(&t, b"summary", &n.to_le_bytes()).expect("put");
    match tx.commit() {
        Err(Error::Conflict(ConflictKind::ReadValidation)) => {}
        other => panic!("the phantom went unnoticed: {other:?}"),
    }
}
