//! Retry on conflict: two threads increment the same counter. Under
//! first-updater-wins one of two concurrent writers of a key gets
//! `Error::Conflict`; the transaction is finished, and the right response
//! is to run it again (`Error::is_retryable`). Every increment lands once.
//!
//! `cargo run --release -p milliscale --example retry_on_conflict`

use milliscale::{Database, Error, Options, Table};

/// Add 1 to `key`, running the transaction again until it commits.
fn increment(db: &Database, t: &Table, key: &[u8]) -> milliscale::Result<u32> {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let mut tx = db.begin()?;
        let run = (|| {
            let v =
                tx.get(t, key)?.map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
            tx.put(t, key, &(v + 1).to_le_bytes())
        })();
        match run.and_then(|()| tx.commit_and_wait()) {
            Ok(_) => return Ok(attempts),
            Err(e) if e.is_retryable() => continue, // a conflict: run it again
            Err(e) => return Err(e),
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let db = Database::open(Options::new().store("memory://"))?;
    let t = db.create_table("counters")?;
    const PER_THREAD: u32 = 500;
    let retries: u32 = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| -> milliscale::Result<u32> {
                    let mut retries = 0;
                    for _ in 0..PER_THREAD {
                        retries += increment(&db, &t, b"hits")? - 1;
                    }
                    Ok(retries)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("worker").unwrap_or(0)).sum()
    });
    let hits = db.get(&t, b"hits")?.ok_or(Error::NotFound)?;
    let hits = u64::from_le_bytes(hits.try_into().map_err(|_| "an 8-byte counter")?);
    println!("hits = {hits} after {retries} retries");
    assert_eq!(hits, 2 * u64::from(PER_THREAD), "every increment landed exactly once");
    db.close()?;
    Ok(())
}
