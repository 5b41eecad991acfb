//! Corruption: flip bytes in a random log part, checkpoint chunk or
//! manifest of a closed database, then recover. Recovery must either
//! refuse with `Corrupt` naming the damaged object, or (damage in the last
//! part of a group's log) cut that tail, report it, and load a consistent
//! earlier state. It must never load wrong data silently.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use milliscale::{CommitProtocol, Database, Direction, Error, Options};
use objstore::{Bytes, MemoryStore, ObjectStore};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const ACCOUNTS: u64 = 10;
const INITIAL: u64 = 1000;

type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// A bank database with a checkpoint and log after it, closed cleanly.
fn build(groups: usize, lanes: usize, seed: u64, protocol: CommitProtocol) -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new());
    let db = Database::open(
        Options::new()
            .add_store_handle(store.clone())
            .workers(groups)
            .log_group_size(1)
            .log_lanes(lanes)
            .segment_parts_max(4)
            .flush_timeout(Duration::from_millis(1))
            .checkpoint_chunk_bytes(4096)
            .checkpoint_log_bytes(0)
            .commit_protocol(protocol),
    )
    .expect("open");
    let a = db.create_table("accounts").expect("table");
    let h = db.create_table("history").expect("table");
    let mut tx = db.begin().expect("begin");
    for i in 0..ACCOUNTS {
        tx.put(&a, &i.to_be_bytes(), &INITIAL.to_le_bytes()).expect("put");
    }
    tx.commit_and_wait().expect("load");
    let mut rng = SmallRng::seed_from_u64(seed);
    std::thread::scope(|s| {
        for w in 0..groups as u64 {
            let (db, a, h) = (&db, &a, &h);
            let mut rng = SmallRng::seed_from_u64(seed * 7 + w);
            s.spawn(move || {
                for n in 0..60u64 {
                    if w == 0 && n == 30 {
                        db.checkpoint().expect("checkpoint");
                    }
                    let mut tx = db.begin().expect("begin");
                    let from = rng.random_range(0..ACCOUNTS);
                    let to = (from + 1) % ACCOUNTS;
                    let get = |tx: &mut milliscale::Transaction<'_>, k: u64| {
                        tx.get(a, &k.to_be_bytes()).map(|v| {
                            u64::from_le_bytes(v.expect("account")[..8].try_into().expect("8"))
                        })
                    };
                    let r = (|| {
                        let (bf, bt) = (get(&mut tx, from)?, get(&mut tx, to)?);
                        let x = bf.min(7);
                        tx.update_range(a, &from.to_be_bytes(), 0, &(bf - x).to_le_bytes())?;
                        tx.update_range(a, &to.to_be_bytes(), 0, &(bt + x).to_le_bytes())?;
                        tx.put(h, &(n * 16 + w).to_be_bytes(), b"transfer")?;
                        tx.commit_and_wait()
                    })();
                    match r {
                        Ok(_) | Err(Error::Conflict(_)) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
    });
    let _ = rng.random::<u8>();
    db.close().expect("close");
    store
}

fn copy(store: &MemoryStore) -> Arc<MemoryStore> {
    let c = Arc::new(MemoryStore::new());
    for o in store.list("").expect("list") {
        c.put(&o.key, store.get(&o.key).expect("get")).expect("put");
    }
    c
}

fn state(db: &Database) -> (Rows, Rows) {
    let mut tx = db.begin().expect("begin");
    let mut rows = |name: &str| match db.open_table(name) {
        Ok(t) => tx
            .scan(&t, Bound::Unbounded, Bound::Unbounded, Direction::Forward, usize::MAX)
            .expect("scan"),
        Err(_) => Vec::new(),
    };
    (rows("accounts"), rows("history"))
}

#[test]
fn flipped_bytes_are_cut_at_a_tail_or_refused_as_corrupt_never_loaded() {
    let (mut refused, mut truncated) = (0, 0);
    // Seeds 6 and 7 commit autonomously (a buffer per worker, lanes
    // stealing across them).
    for seed in 0..8u64 {
        let groups = 1 + (seed as usize % 2);
        let lanes = 1 + (seed as usize / 2 % 2);
        let protocol =
            if seed >= 6 { CommitProtocol::Autonomous } else { CommitProtocol::Pipelined };
        let clean = build(groups, lanes, seed, protocol);
        let reader = |s: Arc<MemoryStore>| {
            Database::open_read_only(Options::new().add_store_handle(s).recovery_threads(2))
        };
        let clean_db = reader(copy(&clean)).expect("the clean image recovers");
        let (accounts, history) = state(&clean_db);
        let clean_parts: Vec<usize> =
            clean_db.recovery_report().expect("report").chains.iter().map(|c| c.1).collect();
        assert!(history.len() >= 50, "the workload ran: {} transfers", history.len());
        let all_history: BTreeSet<Vec<u8>> = history.iter().map(|(k, _)| k.clone()).collect();
        // What recovery reads: the latest manifest (older versions are kept
        // one step and never read), the checkpoint's chunks, the live log.
        let mut keys: Vec<String> =
            clean.list("").expect("list").into_iter().map(|o| o.key).collect();
        let latest = keys.iter().filter(|k| k.starts_with("manifest/")).max().cloned();
        keys.retain(|k| !k.starts_with("manifest/") || Some(k) == latest.as_ref());
        assert!(keys.iter().any(|k| k.starts_with("checkpoint/")), "{keys:?}");
        let mut rng = SmallRng::seed_from_u64(seed);
        for trial in 0..60 {
            let image = copy(&clean);
            let key = &keys[rng.random_range(0..keys.len())];
            let mut b = image.get(key).expect("get").to_vec();
            let flips = rng.random_range(1..4);
            for _ in 0..flips {
                let at = rng.random_range(0..b.len());
                b[at] ^= rng.random_range(1..=255u8);
            }
            image.put(key, Bytes::from(b)).expect("put");
            let what = format!("seed {seed} trial {trial}: {key}");
            match reader(image) {
                Err(Error::Corrupt(m)) => {
                    assert!(m.contains(key.as_str()), "{what}: the error names the object: {m}");
                    refused += 1;
                }
                Err(e) => panic!("{what}: {e}"),
                Ok(db) => {
                    let r = db.recovery_report().expect("report").clone();
                    let cut: Vec<_> = r.chains.iter().filter_map(|(_, _, t)| t.as_ref()).collect();
                    assert!(
                        cut.iter().any(|t| &t.key == key),
                        "{what}: loaded without reporting the damage: {r:?}"
                    );
                    // Only the damaged last part of that chain is lost (or
                    // the last few, if several flips hit several).
                    for ((c, parts, t), clean) in r.chains.iter().zip(&clean_parts) {
                        let lost = clean - parts;
                        match (t, flips) {
                            (None, _) => assert_eq!(lost, 0, "{what}: {c}"),
                            (Some(_), 1) => assert_eq!(lost, 1, "{what}: {c}"),
                            (Some(_), _) => assert!((1..=flips).contains(&lost), "{what}"),
                        }
                    }
                    let (a, h) = state(&db);
                    let total: u64 = a
                        .iter()
                        .map(|(_, v)| u64::from_le_bytes(v[..8].try_into().expect("8")))
                        .sum();
                    assert_eq!(a.len(), accounts.len(), "{what}");
                    assert_eq!(total, ACCOUNTS * INITIAL, "{what}: a consistent cut");
                    assert!(h.len() < history.len(), "{what}: the tail was cut");
                    assert!(h.iter().all(|(k, _)| all_history.contains(k)), "{what}");
                    truncated += 1;
                }
            }
        }
    }
    eprintln!("{refused} refused as corrupt, {truncated} torn tails cut and reported");
    assert!(refused > 100 && truncated > 0, "{refused} refused, {truncated} truncated");
}

#[test]
fn a_writer_refuses_a_corrupt_checkpoint_chunk() {
    let clean = build(1, 2, 9, CommitProtocol::Pipelined);
    let image = copy(&clean);
    let chunk = image.list("checkpoint/").expect("list").into_iter().next().expect("a chunk").key;
    let mut b = image.get(&chunk).expect("get").to_vec();
    let n = b.len();
    b[n / 2] ^= 0x10;
    image.put(&chunk, Bytes::from(b)).expect("put");
    match Database::open(Options::new().add_store_handle(image)) {
        Err(Error::Corrupt(m)) => assert!(m.contains(&chunk), "{m}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}
