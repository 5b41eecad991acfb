//! Standby promotion: a replica follows the writer as a hot standby; the
//! writer stops (here: it is closed; in production, its machine is gone),
//! and the standby becomes the writer. Promotion fences the old writer's
//! log, so a writer that was only slow cannot acknowledge anything more,
//! and every acknowledged commit is in the new writer.
//!
//! `cargo run --release -p milliscale --example standby_promotion`

use std::sync::Arc;

use milliscale::store::{MemoryStore, ObjectStore};
use milliscale::{Database, Options, Replica};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let options = || Options::new().add_store_handle(Arc::clone(&store));
    let writer = Database::open(options())?;
    let jobs = writer.create_table("jobs")?;
    let standby = Replica::open(options())?;
    let mut last = 0;
    for i in 0..100u32 {
        last = writer.put(&jobs, format!("job-{i:03}").as_bytes(), b"queued")?;
    }
    drop(writer); // the writer goes away

    let started = std::time::Instant::now();
    let db = standby.promote()?;
    println!("promoted in {:.1?}", started.elapsed());
    if let Some(r) = db.promotion_report() {
        println!("promotion: {r:?}");
    }
    let jobs = db.open_table("jobs")?;
    assert!(db.durable_csn() > last, "the new writer holds every acknowledged commit");
    assert_eq!(db.get(&jobs, b"job-099")?, Some(b"queued".to_vec()));
    // It writes, and its writes are durable.
    db.put(&jobs, b"job-100", b"queued")?;
    db.close()?;
    Ok(())
}
