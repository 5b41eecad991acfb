//! Checkpoint offload: the writer does not scan its own memory to
//! checkpoint. When its log has grown enough, it marks where a checkpoint
//! is wanted; a read replica, which has the same state from the log,
//! writes the checkpoint and offers it; the writer checks the offer,
//! adopts it and truncates its log.
//!
//! `cargo run --release -p milliscale --example checkpoint_offload`

use std::sync::Arc;
use std::time::{Duration, Instant};

use milliscale::store::{MemoryStore, ObjectStore};
use milliscale::{Database, Options, Replica};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let options = || Options::new().add_store_handle(Arc::clone(&store));
    // A checkpoint is due every 16 KiB of log (1 GiB by default).
    let writer = Database::open(options().checkpoint_offload(true).checkpoint_log_bytes(16 << 10))?;
    let events = writer.create_table("events")?;
    let replica = Replica::open(options())?;
    for i in 0..1_000u32 {
        writer.put(&events, format!("event-{:04}", i % 300).as_bytes(), &i.to_le_bytes())?;
    }
    let until = Instant::now() + Duration::from_secs(30);
    let offered = loop {
        if let Some(c) = replica.offer_if_wanted()? {
            break c;
        }
        if Instant::now() > until {
            return Err("the writer never wanted a checkpoint".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    println!("the replica offered a checkpoint at CSN {}", offered.csn);
    // The writer looks for offers about once a second.
    while writer.checkpoint_stats().adopted == 0 {
        if Instant::now() > until {
            return Err("the writer never adopted the offer".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let m = writer.manifest().ok_or("a logged database has a manifest")?;
    println!(
        "the writer adopted it: checkpoint at CSN {:?}, its log now starts at CSN {}",
        m.checkpoint.as_ref().map(|c| c.csn),
        m.replay_from()
    );
    replica.close();
    writer.close()?;
    Ok(())
}
