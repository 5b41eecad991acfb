//! Write skew: allowed by snapshot isolation, prevented by serializable.
//!
//! Two doctors are on call; each transaction checks that both are on call
//! and takes one of them off. Run concurrently, both succeed under snapshot
//! isolation (nobody is on call: write skew) while serializable aborts one.

use std::sync::atomic::{AtomicU64, Ordering};

use milliscale::{ConflictKind, Database, Error, Isolation, Options, Table, TxnOptions};

fn setup(db: &Database) -> Table {
    let t = db.create_table("oncall").expect("table");
    let mut tx = db.begin().expect("begin");
    tx.put(&t, b"alice", &[1]).expect("put");
    tx.put(&t, b"bob", &[1]).expect("put");
    tx.commit_and_wait().expect("commit");
    t
}

fn on_call(db: &Database, t: &Table) -> usize {
    let mut tx = db.begin().expect("begin");
    [&b"alice"[..], b"bob"].iter().filter(|k| tx.get(t, k).expect("get") == Some(vec![1])).count()
}

/// Interleave two "go off call" transactions on one thread.
fn interleaved(isolation: Isolation) -> (Result<(), Error>, Result<(), Error>, usize) {
    let db = Database::open(Options::new()).expect("open");
    let t = setup(&db);
    let mut t1 = db.begin_with(TxnOptions::isolation(isolation)).expect("begin");
    let mut t2 = db.begin_with(TxnOptions::isolation(isolation)).expect("begin");
    for tx in [&mut t1, &mut t2] {
        assert_eq!(tx.get(&t, b"alice").expect("get"), Some(vec![1]));
        assert_eq!(tx.get(&t, b"bob").expect("get"), Some(vec![1]));
    }
    t1.put(&t, b"alice", &[0]).expect("disjoint write");
    t2.put(&t, b"bob", &[0]).expect("disjoint write");
    let r1 = t1.commit().map(|_| ());
    let r2 = t2.commit().map(|_| ());
    (r1, r2, on_call(&db, &t))
}

#[test]
fn write_skew_succeeds_under_snapshot() {
    let (r1, r2, n) = interleaved(Isolation::Snapshot);
    assert_eq!((r1, r2), (Ok(()), Ok(())));
    assert_eq!(n, 0, "snapshot isolation permits write skew");
}

#[test]
fn write_skew_is_prevented_under_serializable() {
    let (r1, r2, n) = interleaved(Isolation::Serializable);
    assert_eq!(r1, Ok(()));
    assert_eq!(r2, Err(Error::Conflict(ConflictKind::ReadValidation)));
    assert_eq!(n, 1);
}

#[test]
fn phantom_in_a_scan_is_caught_under_serializable() {
    use std::ops::Bound::Unbounded;
    let db = Database::open(Options::new()).expect("open");
    let t = setup(&db);
    let ser = TxnOptions::isolation(Isolation::Serializable);
    let mut t1 = db.begin_with(ser).expect("begin");
    let n =
        t1.scan(&t, Unbounded, Unbounded, milliscale::Direction::Forward, 10).expect("scan").len();
    let mut t2 = db.begin_with(ser).expect("begin");
    t2.put(&t, b"carol", &[1]).expect("insert");
    t2.commit_and_wait().expect("commit");
    t1.put(&t, b"count", &(n as u64).to_le_bytes()).expect("write");
    assert_eq!(t1.commit().map(|_| ()), Err(Error::Conflict(ConflictKind::ReadValidation)));
}

/// Many threads, random doctors: under serializable at least one of the
/// doctors in each pair stays on call, whatever the interleaving.
#[test]
fn concurrent_write_skew_never_breaks_the_invariant_under_serializable() {
    const PAIRS: u64 = 4;
    let db = Database::open(Options::new().isolation(Isolation::Serializable)).expect("open");
    let t = db.create_table("oncall").expect("table");
    let key = |pair: u64, who: u64| [pair.to_be_bytes(), who.to_be_bytes()].concat();
    let mut tx = db.begin().expect("begin");
    for p in 0..PAIRS {
        tx.put(&t, &key(p, 0), &[1]).expect("put");
        tx.put(&t, &key(p, 1), &[1]).expect("put");
    }
    tx.commit_and_wait().expect("commit");
    let commits = AtomicU64::new(0);
    std::thread::scope(|s| {
        for w in 0..4u64 {
            let (db, t, commits) = (&db, &t, &commits);
            s.spawn(move || {
                for i in 0..3_000u64 {
                    let pair = (i * 7 + w) % PAIRS;
                    let me = (i + w) % 2;
                    let mut tx = db.begin().expect("begin");
                    let a = tx.get(t, &key(pair, 0)).expect("get") == Some(vec![1]);
                    let b = tx.get(t, &key(pair, 1)).expect("get") == Some(vec![1]);
                    let r = if a && b {
                        tx.put(t, &key(pair, me), &[0]).and_then(|_| tx.commit().map(|_| ()))
                    } else {
                        // Put someone back on call.
                        let off = if a { 1 } else { 0 };
                        tx.put(t, &key(pair, off), &[1]).and_then(|_| tx.commit().map(|_| ()))
                    };
                    match r {
                        Ok(()) => {
                            commits.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(Error::Conflict(_)) => {}
                        Err(e) => panic!("{e}"),
                    }
                    let mut check = db.begin().expect("begin");
                    let on = (0..2)
                        .filter(|&d| check.get(t, &key(pair, d)).expect("get") == Some(vec![1]))
                        .count();
                    assert!(
                        on >= 1,
                        "pair {pair} has nobody on call: write skew under serializable"
                    );
                }
            });
        }
    });
    assert!(commits.load(Ordering::Relaxed) > 1000);
}

/// Phantoms under concurrency: in each round, 4 threads start together on a
/// fresh key range; each transaction counts the rows in the range and
/// inserts one only if it found fewer than `CAP`. Serializable must never
/// let a range grow past `CAP`, whatever the interleaving.
#[test]
fn concurrent_phantoms_never_overfill_a_range_under_serializable() {
    use std::ops::Bound::{Excluded, Included};
    const CAP: usize = 3;
    const ROUNDS: u64 = 200;
    const THREADS: u64 = 4;
    let db = Database::open(Options::new().isolation(Isolation::Serializable)).expect("open");
    let t = db.create_table("slots").expect("table");
    let barrier = std::sync::Barrier::new(THREADS as usize);
    std::thread::scope(|s| {
        for w in 0..THREADS {
            let (db, t, barrier) = (&db, &t, &barrier);
            s.spawn(move || {
                for round in 0..ROUNDS {
                    barrier.wait();
                    let (lo, hi) = (round.to_be_bytes(), (round + 1).to_be_bytes());
                    for i in 0..CAP as u64 + 2 {
                        let mut tx = db.begin().expect("begin");
                        let rows = tx
                            .scan(
                                t,
                                Included(&lo),
                                Excluded(&hi),
                                milliscale::Direction::Forward,
                                usize::MAX,
                            )
                            .expect("scan");
                        if rows.len() >= CAP {
                            break;
                        }
                        let key = [round.to_be_bytes(), (w << 32 | i).to_be_bytes()].concat();
                        match tx.put(t, &key, b"x").and_then(|_| tx.commit().map(|_| ())) {
                            Ok(()) | Err(Error::Conflict(_)) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            });
        }
    });
    let mut tx = db.begin().expect("begin");
    for round in 0..ROUNDS {
        let (lo, hi) = (round.to_be_bytes(), (round + 1).to_be_bytes());
        let n = tx
            .scan(&t, Included(&lo), Excluded(&hi), milliscale::Direction::Forward, usize::MAX)
            .expect("scan")
            .len();
        assert!(n <= CAP, "round {round}: {n} rows, serializable let a phantom overfill the range");
    }
}
