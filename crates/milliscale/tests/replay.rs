//! A seed replays exactly, the engine included (design record 0015): a
//! bank on the simulated S3 Express store, with its own threads (the lanes'
//! flushers, the store writers, the committer) and two workers and two
//! checkpoints, all tasks of the seam's seeded scheduler on simulated time.
//! Run twice, a seed gives the same trace hash (the order in which the
//! tasks ran, and the engine's events), the same acknowledged transfers and
//! the same final state.

use std::collections::BTreeMap;
use std::sync::Arc;

use milliscale::{Database, Error, Options};
use milliscale_seam::{self as seam, sim};
use objstore::sim::SimStore;

const ACCOUNTS: u64 = 8;
const INITIAL: u64 = 1_000;
/// Transfers each of the two workers commits.
const TRANSFERS: usize = 12;

/// What one run of the bank saw: the transfers acknowledged (worker,
/// number, CSN), the balances at the end and the checkpoints taken.
type Seen = (Vec<(u64, u64, u64)>, BTreeMap<u64, u64>, u64);

fn bank(seed: u64) -> Seen {
    let store = Arc::new(SimStore::from_url(&format!("sim://s3x?seed={seed}")).expect("sim"));
    let db = Database::open(
        Options::new()
            .add_store_handle(store)
            .workers(2)
            .log_group_size(1)
            .checkpoint_log_bytes(0)
            .metrics_interval(None),
    )
    .expect("open");
    let db = Arc::new(db);
    let accounts = db.create_table("accounts").expect("table");
    let mut tx = db.begin().expect("begin");
    for a in 0..ACCOUNTS {
        tx.put(&accounts, &a.to_be_bytes(), &INITIAL.to_le_bytes()).expect("put");
    }
    tx.commit_and_wait().expect("load");
    let workers: Vec<_> = (0..2u64)
        .map(|w| {
            let (db, accounts) = (Arc::clone(&db), accounts.clone());
            seam::spawn(format!("worker-{w}"), move || {
                let mut acked = Vec::new();
                let mut n = 0u64;
                while acked.len() < TRANSFERS {
                    n += 1;
                    let (from, to) = ((w * 3 + n) % ACCOUNTS, (w * 5 + n * 7 + 1) % ACCOUNTS);
                    if from == to {
                        continue;
                    }
                    let mut tx = db.begin().expect("begin");
                    let get = |tx: &mut milliscale::Transaction<'_>, a: u64| {
                        let v = tx.get(&accounts, &a.to_be_bytes())?.expect("an account");
                        Ok::<u64, Error>(u64::from_le_bytes(v.try_into().expect("8 bytes")))
                    };
                    let moved = (|| {
                        let (f, t) = (get(&mut tx, from)?, get(&mut tx, to)?);
                        tx.put(&accounts, &from.to_be_bytes(), &(f - 1).to_le_bytes())?;
                        tx.put(&accounts, &to.to_be_bytes(), &(t + 1).to_le_bytes())?;
                        tx.commit_and_wait()
                    })();
                    match moved {
                        Ok(info) => acked.push((w, n, info.csn.expect("a CSN"))),
                        Err(Error::Conflict(_)) => {}
                        Err(e) => panic!("worker {w}: {e}"),
                    }
                }
                acked
            })
            .expect("spawn")
        })
        .collect();
    // Two checkpoints while the workers commit.
    let checkpointer = {
        let db = Arc::clone(&db);
        seam::spawn("checkpoints".into(), move || {
            for _ in 0..2 {
                seam::sleep(std::time::Duration::from_millis(30));
                db.checkpoint().expect("a checkpoint");
            }
        })
        .expect("spawn")
    };
    let mut acked: Vec<(u64, u64, u64)> =
        workers.into_iter().flat_map(|h| h.join().expect("a worker")).collect();
    acked.sort_unstable();
    checkpointer.join().expect("the checkpoints");
    let mut tx = db.begin().expect("begin");
    let balances = (0..ACCOUNTS)
        .map(|a| {
            let v = tx.get(&accounts, &a.to_be_bytes()).expect("get").expect("an account");
            (a, u64::from_le_bytes(v.try_into().expect("8 bytes")))
        })
        .collect();
    drop(tx);
    let checkpoints = db.checkpoint_stats().checkpoints;
    Arc::try_unwrap(db).map_err(|_| "one owner").expect("the database").close().expect("close");
    (acked, balances, checkpoints)
}

/// The seeds: `MILLISCALE_REPLAY_SEEDS` of them (default 50) from
/// `MILLISCALE_REPLAY_FIRST` (default 0).
fn seeds() -> std::ops::Range<u64> {
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let first = env("MILLISCALE_REPLAY_FIRST", 0);
    first..first + env("MILLISCALE_REPLAY_SEEDS", 50)
}

#[test]
fn a_seed_replays_exactly_the_engine_included() {
    let started = std::time::Instant::now();
    let (mut turns, mut checkpoints) = (0, 0);
    for seed in seeds() {
        let a = sim::run(seed, || bank(seed));
        let b = sim::run(seed, || bank(seed));
        let again = format!(
            "MILLISCALE_REPLAY_FIRST={seed} MILLISCALE_REPLAY_SEEDS=1 cargo test --release -p \
             milliscale --features sim --test engine replay::"
        );
        assert_eq!(
            a.value, b.value,
            "seed {seed}: two runs acknowledged or ended differently; {again}"
        );
        assert_eq!(a.trace, b.trace, "seed {seed}: two runs took different turns; {again}");
        assert_eq!(a.elapsed, b.elapsed, "seed {seed}: two runs' clocks differ; {again}");
        let total: u64 = a.value.1.values().sum();
        assert_eq!(total, INITIAL * ACCOUNTS, "seed {seed}: the bank's total; {again}");
        assert_eq!(a.value.0.len(), 2 * TRANSFERS, "seed {seed}: every transfer acknowledged");
        assert!(
            a.tasks > 8,
            "seed {seed}: only {} tasks: the engine's threads are not in it",
            a.tasks
        );
        turns += a.switches;
        checkpoints += a.value.2;
    }
    let n = seeds().end - seeds().start;
    eprintln!(
        "{n} seeds run twice with equal traces in {:.1?}: {turns} turns and {checkpoints} \
         checkpoints in the first runs",
        started.elapsed()
    );
    assert!(checkpoints >= 2 * n, "only {checkpoints} checkpoints in {n} seeds");
}
