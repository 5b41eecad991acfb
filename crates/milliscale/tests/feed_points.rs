//! The feed reproduces the database at every resolved point (decision
//! record 0014): two writers run bank transfers (each balance an 8-byte
//! number written as a delta record, `update_range`) and list appends
//! (an id appended to two lists in one transaction) while a consumer
//! applies the feed to an empty map. At every resolved point `n` the map
//! holds the bank's total and every append in both of its lists or in
//! neither; at some of them, and at the last, it equals the database
//! opened at CSN `n - 1` (`Database::open_at`), every row of both tables.
//! Three seeds; the writer checkpoints halfway.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{fast_polls as fast, followed_writer as writer};
use crate::feed::Rows;
use milliscale::feed::{Feed, FeedEvent, FeedFilter};
use milliscale::{At, Database};
use objstore::{MemoryStore, ObjectStore};

const ACCOUNTS: u64 = 10;
const INITIAL: u64 = 100;
const LISTS: u64 = 6;

fn account(i: u64) -> Vec<u8> {
    format!("acct{i:02}").into_bytes()
}

fn list(i: u64) -> Vec<u8> {
    format!("list{i}").into_bytes()
}

/// One writer's transactions: transfers and appends, each tried again
/// after a conflict; the highest CSN committed.
fn writer_run(db: &Database, seed: u64, w: u64, n: u64) -> u64 {
    let (bank, lists) = (db.open_table("bank").expect("bank"), db.open_table("lists").expect("l"));
    let mut high = 0;
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ w;
    let mut next = |m: u64| {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d) % m
    };
    for i in 0..n {
        let (kind, a, b, amount) = (next(10), next(ACCOUNTS), next(ACCOUNTS), next(9) + 1);
        let (la, lb) = (next(LISTS), next(LISTS));
        if !(kind < 7 && a != b) && la == lb {
            continue;
        }
        let attempt = || -> milliscale::Result<u64> {
            let mut tx = db.begin()?;
            if kind < 7 && a != b {
                let mut get = |k: u64| -> milliscale::Result<u64> {
                    let v = tx.get(&bank, &account(k))?.expect("an account");
                    Ok(u64::from_be_bytes(v[..8].try_into().expect("8 bytes")))
                };
                let (ba, bb) = (get(a)?, get(b)?);
                let amount = amount.min(ba);
                tx.update_range(&bank, &account(a), 0, &(ba - amount).to_be_bytes())?;
                tx.update_range(&bank, &account(b), 0, &(bb + amount).to_be_bytes())?;
            } else {
                for l in [la, lb] {
                    let old = tx.get(&lists, &list(l))?.unwrap_or_default();
                    tx.put(
                        &lists,
                        &list(l),
                        &[old, format!("{w}-{seed}-{i},").into_bytes()].concat(),
                    )?;
                }
            }
            Ok(tx.commit()?.wait()?.csn.unwrap_or(0))
        };
        for tries in 0.. {
            match attempt() {
                Ok(csn) => {
                    high = high.max(csn);
                    break;
                }
                Err(e) => {
                    assert!(e.is_retryable() && tries < 10_000, "a transaction: {e}");
                    // The other writer holds the row: let it finish.
                    std::thread::sleep(Duration::from_micros(100 * (tries % 20 + 1)));
                }
            }
        }
    }
    high
}

fn rows_of(db: &Database) -> Rows {
    crate::feed::rows_in(db, &["bank", "lists"])
}

/// The bank's total and the appends' atomicity in `rows`.
fn invariants(n: u64, rows: &Rows) {
    let total: u64 = (0..ACCOUNTS)
        .map(|i| {
            let v = &rows[&("bank".to_owned(), account(i))];
            u64::from_be_bytes(v[..8].try_into().expect("8 bytes"))
        })
        .sum();
    assert_eq!(total, ACCOUNTS * INITIAL, "at resolved point {n}: the bank's total");
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for l in 0..LISTS {
        let v = rows.get(&("lists".to_owned(), list(l))).cloned().unwrap_or_default();
        for id in String::from_utf8(v).expect("utf8").split(',').filter(|s| !s.is_empty()) {
            *seen.entry(id.to_owned()).or_default() += 1;
        }
    }
    for (id, k) in seen {
        assert_eq!(k, 2, "at resolved point {n}: append {id} is in {k} of its 2 lists");
    }
}

#[test]
fn at_every_resolved_point_the_feed_equals_the_database_at_that_point() {
    for seed in [1u64, 2, 3] {
        let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
        let with_window = || writer(&store).retention(Some(Duration::from_secs(3600)));
        let db = Arc::new(Database::open(with_window()).expect("open"));
        let (bank, _) = (db.create_table("bank").expect("bank"), db.create_table("lists"));
        let mut tx = db.begin().expect("begin");
        for i in 0..ACCOUNTS {
            tx.put(&bank, &account(i), &INITIAL.to_be_bytes()).expect("put");
        }
        tx.commit().expect("commit").wait().expect("durable");
        // From the start of the log: every row the writers made.
        let mut feed =
            Feed::open_with(with_window(), fast(), Some(0), FeedFilter::default()).expect("feed");
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let db = Arc::clone(&db);
                std::thread::spawn(move || {
                    let high = writer_run(&db, seed, w, 200);
                    if w == 0 {
                        db.checkpoint().expect("checkpoint");
                    }
                    high.max(writer_run(&db, seed + 100, w, 200))
                })
            })
            .collect();
        let last = writers.into_iter().map(|w| w.join().expect("a writer")).max().expect("two");
        let (mut rows, mut points) = (Rows::new(), Vec::new());
        let give_up = Instant::now() + Duration::from_secs(60);
        while points.last().is_none_or(|(n, _)| *n <= last) {
            assert!(Instant::now() < give_up, "the feed never passed CSN {last}");
            match feed.next_timeout(Duration::from_millis(50)).expect("the feed") {
                Some(FeedEvent::Commit(t)) => {
                    for c in t.changes {
                        match c.value {
                            Some(v) => rows.insert((c.table, c.key), v),
                            None => rows.remove(&(c.table, c.key)),
                        };
                    }
                }
                Some(FeedEvent::Resolved(n)) => {
                    if rows.len() >= ACCOUNTS as usize {
                        invariants(n, &rows);
                    }
                    points.push((n, rows.clone()));
                }
                None => {}
            }
        }
        assert!(points.len() > 10, "seed {seed}: {} resolved points", points.len());
        assert_eq!(&points.last().expect("a point").1, &rows_of(&db), "seed {seed}: the end");
        let step = (points.len() / 8).max(1);
        for (n, rows) in points.iter().skip(1).step_by(step) {
            let past = Database::open_at(with_window(), At::Csn(n - 1)).expect("the past");
            assert_eq!(rows, &rows_of(&past), "seed {seed}: at resolved point {n}");
        }
    }
}
