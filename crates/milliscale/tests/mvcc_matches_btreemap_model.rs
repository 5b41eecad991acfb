//! Model-based test: random single-threaded transaction sequences against a
//! `BTreeMap` model, with aborts, deletes, partial updates, scans in both
//! directions, every isolation level, and one long-lived snapshot reader
//! that must keep seeing the state of its snapshot while GC runs; with
//! and without the point index (lookups of one key through a hash table).

use std::collections::BTreeMap;
use std::ops::Bound;

use milliscale::{Database, Direction, Error, Isolation, Options, TxnOptions};
use proptest::prelude::*;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Debug, Clone)]
enum Op {
    Put(Vec<u8>, Vec<u8>),
    UpdateRange(Vec<u8>, usize, Vec<u8>),
    Delete(Vec<u8>),
    Get(Vec<u8>),
    Scan(Option<Vec<u8>>, Option<Vec<u8>>, bool, usize),
}

#[derive(Debug, Clone)]
struct Txn {
    isolation: Isolation,
    ops: Vec<Op>,
    commit: bool,
    /// Open the long-lived snapshot reader before this transaction.
    open_reader: bool,
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    // A small key space so transactions collide with earlier ones.
    prop_oneof![(0u8..12).prop_map(|b| vec![b]), (0u8..4, 0u8..4).prop_map(|(a, b)| vec![a, b]),]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (key(), proptest::collection::vec(any::<u8>(), 0..12)).prop_map(|(k, v)| Op::Put(k, v)),
        2 => (key(), 0usize..12, proptest::collection::vec(any::<u8>(), 0..5))
            .prop_map(|(k, o, b)| Op::UpdateRange(k, o, b)),
        1 => key().prop_map(Op::Delete),
        2 => key().prop_map(Op::Get),
        1 => (proptest::option::of(key()), proptest::option::of(key()), any::<bool>(), 0usize..6)
            .prop_map(|(lo, hi, rev, limit)| Op::Scan(lo, hi, rev, limit)),
    ]
}

fn txn() -> impl Strategy<Value = Txn> {
    (
        prop_oneof![
            Just(Isolation::ReadCommitted),
            Just(Isolation::Snapshot),
            Just(Isolation::Serializable)
        ],
        proptest::collection::vec(op(), 0..10),
        proptest::bool::weighted(0.75),
        proptest::bool::weighted(0.05),
    )
        .prop_map(|(isolation, ops, commit, open_reader)| Txn {
            isolation,
            ops,
            commit,
            open_reader,
        })
}

fn model_scan(
    m: &Model,
    lo: &Option<Vec<u8>>,
    hi: &Option<Vec<u8>>,
    rev: bool,
    limit: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let lower = lo.as_ref().map_or(Bound::Unbounded, |k| Bound::Included(k.clone()));
    let upper = hi.as_ref().map_or(Bound::Unbounded, |k| Bound::Excluded(k.clone()));
    if let (Bound::Included(a), Bound::Excluded(b)) = (&lower, &upper)
        && a >= b
    {
        return vec![];
    }
    let it = m.range((lower, upper)).map(|(k, v)| (k.clone(), v.clone()));
    if rev { it.rev().take(limit).collect() } else { it.take(limit).collect() }
}

fn run(history: Vec<Txn>, point_index: bool) -> Result<(), TestCaseError> {
    let db = Database::open(Options::new().point_index(point_index)).expect("open");
    let t = db.create_table("t").expect("table");
    let mut committed = Model::new();
    let mut reader: Option<(milliscale::Transaction<'_>, Model)> = None;
    for spec in history {
        if spec.open_reader && reader.is_none() {
            let r = db
                .begin_with(TxnOptions {
                    isolation: Some(Isolation::Snapshot),
                    read_only: true,
                    ..Default::default()
                })
                .expect("begin");
            reader = Some((r, committed.clone()));
        }
        let mut tx = db.begin_with(TxnOptions::isolation(spec.isolation)).expect("begin");
        let mut work = committed.clone();
        let mut installed = false;
        for op in &spec.ops {
            match op {
                Op::Put(k, v) => {
                    tx.put(&t, k, v).expect("single-threaded put cannot conflict");
                    work.insert(k.clone(), v.clone());
                    installed = true;
                }
                Op::UpdateRange(k, off, bytes) => {
                    let got = tx.update_range(&t, k, *off, bytes);
                    match work.get_mut(k) {
                        None => prop_assert_eq!(got, Err(Error::NotFound)),
                        Some(v) if off + bytes.len() > v.len() => {
                            prop_assert!(matches!(got, Err(Error::InvalidArgument(_))), "{got:?}")
                        }
                        Some(v) => {
                            prop_assert_eq!(got, Ok(()));
                            v[*off..off + bytes.len()].copy_from_slice(bytes);
                            installed = true;
                        }
                    }
                }
                Op::Delete(k) => {
                    let existed = tx.delete(&t, k).expect("delete");
                    prop_assert_eq!(existed, work.remove(k).is_some());
                    installed |= existed;
                }
                Op::Get(k) => prop_assert_eq!(tx.get(&t, k).expect("get"), work.get(k).cloned()),
                Op::Scan(lo, hi, rev, limit) => {
                    let lower = lo.as_deref().map_or(Bound::Unbounded, Bound::Included);
                    let upper = hi.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
                    let dir = if *rev { Direction::Backward } else { Direction::Forward };
                    let got = tx.scan(&t, lower, upper, dir, *limit).expect("scan");
                    prop_assert_eq!(got, model_scan(&work, lo, hi, *rev, *limit));
                }
            }
        }
        if spec.commit {
            let info =
                tx.commit().expect("single-threaded commit cannot conflict").wait().expect("ack");
            // Exactly the transactions that installed a version take a CSN.
            prop_assert_eq!(info.csn.is_some(), installed);
            committed = work;
        } else {
            tx.abort();
        }
        // A fresh transaction sees exactly the committed model.
        let mut check = db.begin().expect("begin");
        let all = check
            .scan(&t, Bound::Unbounded, Bound::Unbounded, Direction::Forward, usize::MAX)
            .expect("scan");
        prop_assert_eq!(all, committed.clone().into_iter().collect::<Vec<_>>());
        check.commit().expect("read-only commit").wait().expect("ack");
    }
    if let Some((mut r, snap)) = reader {
        let all = r
            .scan(&t, Bound::Unbounded, Bound::Unbounded, Direction::Forward, usize::MAX)
            .expect("scan");
        prop_assert_eq!(all, snap.into_iter().collect::<Vec<_>>(), "the old snapshot survives GC");
        prop_assert_eq!(r.commit().expect("commit").csn(), None, "read-only takes no CSN");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    #[test]
    fn engine_matches_btreemap_model(
        history in proptest::collection::vec(txn(), 1..60),
        point_index in any::<bool>(),
    ) {
        run(history, point_index)?;
    }
}
