//! A retention window (`Options::retention`, design record 0012): the
//! database read at a point of its past (`Database::open_at`) equals a
//! journal of every acknowledged commit at that point, across
//! checkpoints, truncations and a change of writer; points outside the
//! window are refused by name. The disasters it undoes are in
//! `history_disasters.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use milliscale::history::times::now_ms;
use milliscale::{At, Database, Error, Table};
use objstore::{MemoryStore, ObjectStore};
use parking_lot::Mutex;

use crate::common::window::{options, rows};
use rand::{Rng, SeedableRng};

const ACCOUNTS: u32 = 12;
const START: i64 = 1_000;

fn key(i: u32) -> Vec<u8> {
    format!("acct{i:03}").into_bytes()
}

/// One acknowledged commit: what it did, its CSN, and the wall-clock
/// milliseconds before its commit began and after its ack returned.
#[derive(Debug, Clone)]
struct Acked {
    csn: u64,
    began_ms: u64,
    acked_ms: u64,
    /// A transfer (from, to, amount), and the list key it appended its
    /// CSN-independent id to.
    transfer: (u32, u32, i64),
    list: (u32, u64),
}

/// The state the journal gives at CSN `n`: balances, and each list.
fn expected(setup: &[(Vec<u8>, Vec<u8>)], journal: &[Acked], n: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut state: BTreeMap<Vec<u8>, Vec<u8>> = setup.iter().cloned().collect();
    let mut sorted: Vec<&Acked> = journal.iter().filter(|a| a.csn <= n).collect();
    sorted.sort_by_key(|a| a.csn);
    for a in sorted {
        let (f, t, amount) = a.transfer;
        let bal = |s: &BTreeMap<Vec<u8>, Vec<u8>>, k: &[u8]| -> i64 {
            std::str::from_utf8(&s[k]).expect("utf8").parse().expect("a number")
        };
        let (bf, bt) = (bal(&state, &key(f)), bal(&state, &key(t)));
        state.insert(key(f), (bf - amount).to_string().into_bytes());
        state.insert(key(t), (bt + amount).to_string().into_bytes());
        let lk = format!("list{:02}", a.list.0).into_bytes();
        let mut v = state.get(&lk).cloned().unwrap_or_default();
        v.extend_from_slice(format!("{},", a.list.1).as_bytes());
        state.insert(lk, v);
    }
    state.into_iter().collect()
}

/// Transfers on `db` from 2 threads until each has `n` acknowledged, with
/// a checkpoint now and then; every ack is journaled.
fn run(db: &Database, t: &Table, n: usize, seed: u64, journal: &Mutex<Vec<Acked>>) {
    std::thread::scope(|s| {
        for w in 0..2u64 {
            s.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed * 10 + w);
                let mut done = 0;
                while done < n {
                    let (f, to) = (rng.random_range(0..ACCOUNTS), rng.random_range(0..ACCOUNTS));
                    if f == to {
                        continue;
                    }
                    let amount = rng.random_range(1..50i64);
                    let list =
                        (rng.random_range(0..4u32), seed * 1_000_000 + w * 100_000 + done as u64);
                    let mut tx = db.begin().expect("begin");
                    let bal = |tx: &mut milliscale::Transaction<'_>, k: &[u8]| -> Option<i64> {
                        tx.get(t, k).ok().flatten().map(|v| {
                            std::str::from_utf8(&v).expect("utf8").parse().expect("a number")
                        })
                    };
                    let (Some(bf), Some(bt)) = (bal(&mut tx, &key(f)), bal(&mut tx, &key(to)))
                    else {
                        continue;
                    };
                    let lk = format!("list{:02}", list.0).into_bytes();
                    let mut lv = match tx.get(t, &lk) {
                        Ok(v) => v.unwrap_or_default(),
                        Err(_) => continue,
                    };
                    lv.extend_from_slice(format!("{},", list.1).as_bytes());
                    let wrote = tx.put(t, &key(f), (bf - amount).to_string().as_bytes()).is_ok()
                        && tx.put(t, &key(to), (bt + amount).to_string().as_bytes()).is_ok()
                        && tx.put(t, &lk, &lv).is_ok();
                    if !wrote {
                        continue;
                    }
                    let began_ms = now_ms();
                    let Ok(info) = tx.commit_and_wait() else { continue };
                    let acked_ms = now_ms();
                    journal.lock().push(Acked {
                        csn: info.csn.expect("a write"),
                        began_ms,
                        acked_ms,
                        transfer: (f, to, amount),
                        list,
                    });
                    done += 1;
                    if done.is_multiple_of(40) && w == 0 {
                        db.checkpoint().expect("checkpoint");
                    }
                }
            });
        }
    });
}

/// Open the past at `at` and compare it with the journal; returns the
/// CSN it resolved to.
fn check_at(
    store: &Arc<dyn ObjectStore>,
    setup: &[(Vec<u8>, Vec<u8>)],
    setup_csn: u64,
    journal: &[Acked],
    at: At,
) -> u64 {
    let past =
        Database::open_at(options(store), at).unwrap_or_else(|e| panic!("open at {at}: {e}"));
    let n = past.past_report().expect("a past report").csn;
    if let At::Time(t) = at {
        let t = t.duration_since(UNIX_EPOCH).expect("after 1970").as_millis() as u64;
        for a in journal {
            assert!(
                a.acked_ms >= t || a.csn <= n,
                "CSN {} was acknowledged at {} ms, before {t}, but the past at it ends at CSN {n}",
                a.csn,
                a.acked_ms
            );
            assert!(
                a.began_ms <= t || a.csn > n,
                "CSN {} began committing at {} ms, after {t}, but the past at it holds CSN {n}",
                a.csn,
                a.began_ms
            );
        }
    }
    if n < setup_csn {
        // Before the setup committed: the table was created at most (it
        // is there from the first CSN after its creation), and empty.
        if let Ok(t) = past.open_table("bank") {
            assert!(rows(&past, &t).is_empty(), "the database at {at} (CSN {n}) is empty");
        }
        return n;
    }
    let t = past.open_table("bank").expect("the table");
    let got = rows(&past, &t);
    assert_eq!(got, expected(setup, journal, n), "the database at {at} (CSN {n})");
    let total: i64 = got
        .iter()
        .filter(|(k, _)| k.starts_with(b"acct"))
        .map(|(_, v)| std::str::from_utf8(v).expect("utf8").parse::<i64>().expect("a number"))
        .sum();
    assert_eq!(total, START * i64::from(ACCOUNTS), "the total at {at}");
    n
}

#[test]
fn the_past_equals_the_journal_at_csns_and_times_across_checkpoints_and_writers() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let journal = Mutex::new(Vec::new());
    let setup: Vec<(Vec<u8>, Vec<u8>)> =
        (0..ACCOUNTS).map(|i| (key(i), START.to_string().into_bytes())).collect();
    let setup_csn;
    {
        let db = Database::open(options(&store)).expect("open");
        let t = db.create_table("bank").expect("bank");
        let mut tx = db.begin().expect("begin");
        for (k, v) in &setup {
            tx.put(&t, k, v).expect("put");
        }
        setup_csn = tx.commit_and_wait().expect("setup").csn.expect("a write");
        run(&db, &t, 120, 1, &journal);
        // A writer that stops without closing: the next one recovers, ends
        // this epoch's log with its decision, and writes a checkpoint.
        std::mem::forget(db);
    }
    let db = Database::open(options(&store)).expect("recover");
    let t = db.open_table("bank").expect("bank");
    run(&db, &t, 120, 2, &journal);
    let journal = journal.into_inner();
    let m = db.manifest().expect("a manifest");
    let h = m.history.clone().expect("a history");
    assert!(h.bases.len() >= 4, "checkpoints are bases: {:?}", h.bases.len());
    assert_eq!(h.ended.len(), 1, "the first writer's log ended");
    assert!(
        store.list("log/").expect("list").len() > 8,
        "the window keeps the segments the checkpoints covered"
    );
    // The setup's state is the first point after it; the newest is the last ack.
    let (lo, hi) = (
        journal.iter().map(|a| a.csn).min().unwrap_or(1) - 1,
        journal.iter().map(|a| a.csn).max().expect("commits"),
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let points =
        std::env::var("MILLISCALE_HISTORY_POINTS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    for _ in 0..points {
        check_at(&store, &setup, setup_csn, &journal, At::Csn(rng.random_range(lo..=hi)));
    }
    let (t0, t1) = (
        journal.iter().map(|a| a.began_ms).min().expect("commits").max(h.oldest().1),
        journal.iter().map(|a| a.acked_ms).max().expect("commits"),
    );
    for _ in 0..points {
        let t = rng.random_range(t0..=t1);
        check_at(
            &store,
            &setup,
            setup_csn,
            &journal,
            At::Time(UNIX_EPOCH + Duration::from_millis(t)),
        );
    }
    // Every 37th ack's own millisecond, the one after it, and the one
    // before its commit began (if the window reaches it).
    let oldest_ms = h.oldest().1;
    for a in journal.iter().step_by(37) {
        for t in [a.acked_ms, a.acked_ms + 1, a.began_ms.saturating_sub(1).max(oldest_ms)] {
            check_at(
                &store,
                &setup,
                setup_csn,
                &journal,
                At::Time(UNIX_EPOCH + Duration::from_millis(t)),
            );
        }
    }
    db.close().expect("close");
}

#[test]
fn points_outside_the_window_are_refused_naming_it() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let o = options(&store).retention(Some(Duration::from_secs(1)));
    let db = Database::open(o.clone()).expect("open");
    let t = db.create_table("t").expect("t");
    let early = db.put(&t, b"a", b"1").expect("put");
    db.checkpoint().expect("checkpoint");
    std::thread::sleep(Duration::from_millis(1_200));
    let mid = db.put(&t, b"a", b"2").expect("put");
    db.checkpoint().expect("checkpoint");
    std::thread::sleep(Duration::from_millis(1_200));
    db.put(&t, b"a", b"3").expect("put");
    db.checkpoint().expect("checkpoint: the window moves past the first ones");
    let h = db.manifest().expect("manifest").history.expect("a history");
    let (oldest, _) = h.oldest();
    assert!(oldest > early, "the window let the first checkpoint go: oldest {oldest}");
    let e = Database::open_at(o.clone(), At::Csn(early)).expect_err("before the window");
    assert!(
        matches!(e, Error::InvalidArgument(_))
            && e.to_string().contains("before the retention window"),
        "{e}"
    );
    assert!(e.to_string().contains(&format!("CSN {oldest}")), "names the oldest point: {e}");
    let e = Database::open_at(o.clone(), At::Csn(1 << 40)).expect_err("after the newest");
    assert!(e.to_string().contains("past the newest durable point"), "{e}");
    let past = Database::open_at(o.clone(), At::Csn(mid)).expect("inside");
    let pt = past.open_table("t").expect("t");
    assert_eq!(past.get(&pt, b"a").expect("get"), Some(b"2".to_vec()));
    let e = Database::open_at(o, At::Time(UNIX_EPOCH + Duration::from_secs(1))).expect_err("1970");
    assert!(e.to_string().contains("oldest reachable time"), "{e}");
    db.close().expect("close");
}

#[test]
fn without_a_window_the_past_before_the_checkpoint_is_gone() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let o = options(&store).retention(None);
    let db = Database::open(o.clone()).expect("open");
    let t = db.create_table("t").expect("t");
    let first = db.put(&t, b"a", b"1").expect("put");
    let second = db.put(&t, b"a", b"2").expect("put");
    let at = db.checkpoint().expect("checkpoint");
    assert!(db.manifest().expect("manifest").history.is_none());
    assert!(store.list("time/").expect("list").is_empty(), "no time index without a window");
    let e = Database::open_at(o.clone(), At::Csn(first)).expect_err("covered");
    assert!(e.to_string().contains("before the retention window"), "{e}");
    // The checkpoint itself is reachable: the present.
    let past = Database::open_at(o.clone(), At::Csn(at - 1)).expect("the checkpoint");
    assert_eq!(
        past.get(&past.open_table("t").expect("t"), b"a").expect("get"),
        Some(b"2".to_vec())
    );
    assert!(second < at);
    let e = Database::open_at(o, At::Time(std::time::SystemTime::now())).expect_err("no index");
    assert!(e.to_string().contains("keeps no retention window"), "{e}");
    db.close().expect("close");
}
