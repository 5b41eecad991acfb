//! Bank transfers under snapshot isolation: 8 threads run 10,000 transfers in
//! total; every transfer reads both accounts and writes both. Concurrent
//! auditors read every account in one snapshot and must always find the
//! same total: a reader never sees half a transfer.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use milliscale::{Database, Error, Options, Table, TxnOptions};
use rand::{Rng, SeedableRng};

const ACCOUNTS: u64 = 64;
const INITIAL: u64 = 1_000;
const THREADS: u64 = 8;
const TRANSFERS: u64 = 10_000;

fn balance(v: &[u8]) -> u64 {
    u64::from_le_bytes(v.try_into().expect("8-byte balance"))
}

fn transfer(db: &Database, t: &Table, from: u64, to: u64, amount: u64) -> Result<bool, Error> {
    let mut tx = db.begin()?;
    let a = balance(&tx.get(t, &from.to_be_bytes())?.expect("account exists"));
    let b = balance(&tx.get(t, &to.to_be_bytes())?.expect("account exists"));
    if a < amount {
        return Ok(false);
    }
    tx.put(t, &from.to_be_bytes(), &(a - amount).to_le_bytes())?;
    tx.put(t, &to.to_be_bytes(), &(b + amount).to_le_bytes())?;
    tx.commit()?.wait()?;
    Ok(true)
}

fn audit(db: &Database, t: &Table) -> u64 {
    let mut tx = db.begin_with(TxnOptions::read_only()).expect("begin");
    let total = (0..ACCOUNTS)
        .map(|i| balance(&tx.get(t, &i.to_be_bytes()).expect("get").expect("account exists")))
        .sum();
    tx.commit_and_wait().expect("read-only commit");
    total
}

#[test]
fn total_balance_never_changes() {
    let db = Database::open(Options::new()).expect("open");
    let t = db.create_table("accounts").expect("table");
    let mut tx = db.begin().expect("begin");
    for i in 0..ACCOUNTS {
        tx.put(&t, &i.to_be_bytes(), &INITIAL.to_le_bytes()).expect("put");
    }
    tx.commit_and_wait().expect("load");

    let done = AtomicU64::new(0);
    let conflicts = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let audits = AtomicU64::new(0);
    let mid_run_audits = AtomicU64::new(0);
    std::thread::scope(|s| {
        for w in 0..THREADS {
            let (db, t, done, conflicts) = (&db, &t, &done, &conflicts);
            let mid_run_audits = &mid_run_audits;
            s.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(w);
                for _ in 0..TRANSFERS / THREADS {
                    loop {
                        let from = rng.random_range(0..ACCOUNTS);
                        let to = (from + rng.random_range(1..ACCOUNTS)) % ACCOUNTS;
                        match transfer(db, t, from, to, rng.random_range(1..50)) {
                            Ok(_) => break,
                            Err(Error::Conflict(_)) => {
                                conflicts.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => panic!("unexpected error {e}"),
                        }
                    }
                    let n = done.fetch_add(1, Ordering::Relaxed);
                    // Workers audit too, so audits interleave with transfers.
                    if n % 10 == 0 {
                        assert_eq!(
                            audit(db, t),
                            ACCOUNTS * INITIAL,
                            "a worker saw a partial transfer"
                        );
                        mid_run_audits.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        // A long-lived snapshot: while transfers run and GC trims chains,
        // re-reading every account in the same old transaction must give
        // the same balances each time (GC never frees a visible version).
        {
            let (db, t, stop, audits) = (&db, &t, &stop, &audits);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let mut tx = db.begin_with(TxnOptions::read_only()).expect("begin");
                    let read = |tx: &mut milliscale::Transaction<'_>| -> Vec<u64> {
                        (0..ACCOUNTS)
                            .map(|i| {
                                balance(&tx.get(t, &i.to_be_bytes()).expect("get").expect("exists"))
                            })
                            .collect()
                    };
                    let first = read(&mut tx);
                    assert_eq!(first.iter().sum::<u64>(), ACCOUNTS * INITIAL);
                    for _ in 0..20 {
                        std::thread::yield_now();
                        assert_eq!(read(&mut tx), first, "an old snapshot changed under GC");
                    }
                    audits.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for _ in 0..2 {
            let (db, t, stop, audits) = (&db, &t, &stop, &audits);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    assert_eq!(audit(db, t), ACCOUNTS * INITIAL, "a reader saw a partial transfer");
                    audits.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        while done.load(Ordering::Relaxed) < TRANSFERS {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(done.load(Ordering::Relaxed), TRANSFERS);
    assert_eq!(audit(&db, &t), ACCOUNTS * INITIAL);
    assert!(audits.load(Ordering::Relaxed) > 0, "auditors ran");
    // Every tenth transfer is followed by an audit while the others run.
    assert_eq!(mid_run_audits.load(Ordering::Relaxed), TRANSFERS / 10);
    // 64 accounts and 8 writers: conflicts must have happened and been retried.
    eprintln!("conflicts retried: {}", conflicts.load(Ordering::Relaxed));
}
