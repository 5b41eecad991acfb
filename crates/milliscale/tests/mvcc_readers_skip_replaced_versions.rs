//! A transaction that writes one record twice replaces its own uncommitted
//! version. Readers that picked up the replaced version just before must
//! skip it and never spin on it (this used to livelock: the replaced
//! version kept its owner marker forever). Readers also never see a torn
//! pair of writes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use milliscale::{Database, Error, Options};

#[test]
fn readers_never_hang_on_versions_replaced_by_their_owner() {
    let db = Arc::new(Database::open(Options::new()).expect("open"));
    let t = db.create_table("t").expect("table");
    db.begin()
        .and_then(|mut tx| {
            tx.put(&t, b"k", &[0u8; 16])?;
            tx.commit_and_wait()
        })
        .expect("load");
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let writes = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for _ in 0..3 {
        let (db, t, stop, reads) =
            (Arc::clone(&db), t.clone(), Arc::clone(&stop), Arc::clone(&reads));
        handles.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut tx = db.begin().expect("begin");
                let v = tx.get(&t, b"k").expect("get").expect("present");
                // Both halves are written by the same transaction.
                assert_eq!(v[..8], v[8..], "torn read");
                reads.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    {
        let (db, t, stop, writes) =
            (Arc::clone(&db), t.clone(), Arc::clone(&stop), Arc::clone(&writes));
        handles.push(std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let mut tx = db.begin().expect("begin");
                let r = (|| {
                    // Three writes to one record in one transaction: two replacements.
                    tx.update_range(&t, b"k", 0, &i.to_le_bytes())?;
                    tx.update_range(&t, b"k", 8, &i.to_le_bytes())?;
                    tx.put(&t, b"k", &[i.to_le_bytes(), i.to_le_bytes()].concat())?;
                    Ok::<_, Error>(())
                })();
                match r {
                    Ok(()) => {
                        tx.commit_and_wait().expect("single writer commits");
                        writes.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("single writer failed: {e}"),
                }
            }
        }));
    }
    // Watchdog: progress must continue; a livelocked reader stops the count.
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut last = (0, 0);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        let now = (reads.load(Ordering::Relaxed), writes.load(Ordering::Relaxed));
        assert!(now.0 > last.0 && now.1 > last.1, "no progress: reads/writes stuck at {now:?}");
        last = now;
    }
    stop.store(true, Ordering::Relaxed);
    let finish = Instant::now() + Duration::from_secs(10);
    for h in handles {
        while !h.is_finished() {
            assert!(Instant::now() < finish, "a thread did not stop: livelock");
            std::thread::sleep(Duration::from_millis(10));
        }
        h.join().expect("thread panicked");
    }
}
