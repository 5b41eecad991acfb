//! Three stores, majority quorum. During a bank run one store goes down
//! for good; afterwards a second one loses the last parts of its log and
//! the third has a damaged part early in its log. Nothing acknowledged is
//! lost: recovery takes each part from whichever store holds it intact,
//! with the down store still down (two of three answer) or back up.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use crate::common;

use common::switch::Switch;
use milliscale::internals::record::decode_segment;
use milliscale::{CommitProtocol, Database, Direction, Error, Options};
use objstore::{Bytes, MemoryStore, ObjectStore};
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const ACCOUNTS: u64 = 10;
const INITIAL: u64 = 1000;

fn options(stores: &[Arc<Switch>], protocol: CommitProtocol) -> Options {
    let mut o = Options::new()
        .commit_protocol(protocol)
        .workers(2)
        .log_group_size(1)
        .segment_parts_max(6)
        .flush_timeout(Duration::from_millis(1))
        .store_deadline(Duration::from_millis(300))
        .checkpoint_log_bytes(0)
        .recovery_threads(3);
    for s in stores {
        o = o.add_store_handle(s.clone());
    }
    o
}

/// The bank run; store 0 goes down halfway. Returns acknowledged ids.
fn run(stores: &[Arc<Switch>], seed: u64, p: CommitProtocol) -> BTreeSet<u64> {
    let db = Database::open(options(stores, p)).expect("open");
    let a = db.create_table("accounts").expect("table");
    let h = db.create_table("history").expect("table");
    let mut tx = db.begin().expect("begin");
    for i in 0..ACCOUNTS {
        tx.put(&a, &i.to_be_bytes(), &INITIAL.to_le_bytes()).expect("put");
    }
    tx.commit_and_wait().expect("load");
    let acked = Mutex::new(BTreeSet::new());
    std::thread::scope(|s| {
        for w in 0..2u64 {
            let (db, a, h, acked) = (&db, &a, &h, &acked);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed * 2 + w);
                for n in 0..150u64 {
                    if w == 0 && n == 60 {
                        stores[0].set_down(true);
                    }
                    let id = n * 2 + w;
                    let r = (|| {
                        let mut tx = db.begin()?;
                        let from = rng.random_range(0..ACCOUNTS);
                        let to = (from + 1 + rng.random_range(0..ACCOUNTS - 1)) % ACCOUNTS;
                        let bal = |v: Option<Vec<u8>>| {
                            u64::from_le_bytes(v.expect("account")[..8].try_into().expect("8"))
                        };
                        let bf = bal(tx.get(a, &from.to_be_bytes())?);
                        let bt = bal(tx.get(a, &to.to_be_bytes())?);
                        let x = rng.random_range(0..=bf.min(9));
                        tx.update_range(a, &from.to_be_bytes(), 0, &(bf - x).to_le_bytes())?;
                        tx.update_range(a, &to.to_be_bytes(), 0, &(bt + x).to_le_bytes())?;
                        tx.put(h, &id.to_be_bytes(), b"t")?;
                        tx.commit_and_wait()
                    })();
                    match r {
                        Ok(_) => {
                            acked.lock().insert(id);
                        }
                        Err(Error::Conflict(_)) => {}
                        Err(e) => panic!("seed {seed}: {e}"),
                    }
                }
            });
        }
    });
    let status = db.log_metrics().expect("metrics").stores;
    assert!(status[0].parts < status[1].parts, "the down store fell behind: {status:?}");
    db.close().expect("close");
    acked.into_inner()
}

/// The last segment object of each group on `store`.
fn last_segments(store: &dyn ObjectStore) -> Vec<String> {
    let mut last: std::collections::BTreeMap<String, String> = Default::default();
    for o in store.list("log/").expect("list") {
        let group = o.key[..9].to_owned();
        last.insert(group, o.key);
    }
    last.into_values().collect()
}

fn check(stores: &[Arc<Switch>], acked: &BTreeSet<u64>, what: &str) -> Option<usize> {
    // Recovery does not depend on how the log was written.
    let db = Database::open_read_only(options(stores, CommitProtocol::Pipelined))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let a = db.open_table("accounts").expect("accounts");
    let h = db.open_table("history").expect("history");
    let mut tx = db.begin().expect("begin");
    let rows = tx
        .scan(&a, Bound::Unbounded, Bound::Unbounded, Direction::Forward, usize::MAX)
        .expect("scan");
    let total: u64 =
        rows.iter().map(|(_, v)| u64::from_le_bytes(v[..8].try_into().expect("8"))).sum();
    assert_eq!(total, ACCOUNTS * INITIAL, "{what}: the total");
    for id in acked {
        assert!(tx.get(&h, &id.to_be_bytes()).expect("get").is_some(), "{what}: lost {id}");
    }
    db.recovery_report().map(|r| r.repaired.len())
}

#[test]
fn a_down_store_a_lost_tail_and_a_damaged_part_lose_nothing() {
    // Seed 1 and 3 commit autonomously.
    for seed in 0..4 {
        let p = if seed % 2 == 1 { CommitProtocol::Autonomous } else { CommitProtocol::Pipelined };
        let stores: Vec<Arc<Switch>> =
            (0..3).map(|_| Switch::new(Arc::new(MemoryStore::new()))).collect();
        let acked = run(&stores, seed, p);
        assert!(acked.len() > 200, "{} acknowledged", acked.len());

        // Store 1 loses the last parts of each group's log.
        for key in last_segments(stores[1].inner.as_ref()) {
            let b = stores[1].inner.get(&key).expect("get");
            let (parts, _) = decode_segment(&b);
            let mut cut = 0;
            let keep = parts.len().saturating_sub(3);
            for _ in 0..keep {
                cut += milliscale::internals::record::decode_part(&b.slice(cut..)).expect("part").1;
            }
            stores[1].inner.put(&key, b.slice(..cut)).expect("cut");
        }
        // Store 2 has a damaged part early in group 0's log.
        let first = stores[2].inner.list("log/g0000/").expect("list")[0].key.clone();
        let mut b = stores[2].inner.get(&first).expect("get").to_vec();
        b[40] ^= 0xff;
        stores[2].inner.put(&first, Bytes::from(b)).expect("flip");

        // Store 0 still down: two of three answer.
        let repaired = check(&stores, &acked, &format!("seed {seed}, store 0 down"));
        assert!(repaired.is_some_and(|n| n > 0), "the damaged part was taken from another store");
        // Store 0 back, with only the log up to when it went down.
        stores[0].set_down(false);
        check(&stores, &acked, &format!("seed {seed}, all up"));
        // And the next writer recovers it and goes on.
        let t0 = std::time::Instant::now();
        let db = Database::open(options(&stores, p)).expect("a writer recovers from the merge");
        eprintln!("seed {seed}: writer open {:?}: {:?}", t0.elapsed(), db.recovery_report());
        let h = db.open_table("history").expect("history");
        let mut tx = db.begin().expect("begin");
        tx.put(&h, &u64::MAX.to_be_bytes(), b"after").expect("put");
        tx.commit_and_wait().expect("commit");
        db.close().expect("close");
        let mut all = acked.clone();
        all.insert(u64::MAX);
        check(&stores, &all, &format!("seed {seed}, after the next writer"));
    }
}
