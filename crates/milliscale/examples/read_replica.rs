//! A read replica with read-your-writes tokens: the writer commits and
//! hands its client the commit's CSN; a read replica, which follows the
//! log on the same store, is asked to begin at that token, so the client
//! reads its own write even though the replica lags the writer.
//!
//! `cargo run --release -p milliscale --example read_replica`

use std::sync::Arc;
use std::time::Duration;

use milliscale::store::{MemoryStore, ObjectStore};
use milliscale::{Database, Options, Replica};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let options = || Options::new().add_store_handle(Arc::clone(&store));
    let writer = Database::open(options())?;
    let profiles = writer.create_table("profiles")?;
    let replica = Replica::open(options())?;

    for i in 0..20u32 {
        // The write returns its CSN once durable: the session's token.
        let token = writer.put(&profiles, b"alice", format!("version {i}").as_bytes())?;
        // The replica waits (here at most a second) until it has applied
        // the token, then reads at a snapshot that includes it.
        let mut tx = replica.begin_at(token, Duration::from_secs(1))?;
        let profiles = replica.open_table("profiles")?;
        let seen = tx.get(&profiles, b"alice")?.ok_or("not replicated")?;
        assert_eq!(seen, format!("version {i}").into_bytes(), "read-your-writes");
    }
    let m = replica.metrics();
    println!(
        "20 writes read back from the replica; it applied every CSN below {} (lag p50 {:.1?})",
        m.applied_csn, m.lag_p50
    );
    replica.close();
    writer.close()?;
    Ok(())
}
