//! Quick start: a database whose log lives in a local directory. Write,
//! close, open again (recovery replays the log), read back.
//!
//! `cargo run --release -p milliscale --example quickstart [DIR]`
//! (without DIR, a scratch directory that is removed at the end).

use milliscale::{Database, Options};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let given = std::env::args().nth(1);
    let dir = match &given {
        Some(d) => std::path::PathBuf::from(d),
        None => std::env::temp_dir().join(format!("milliscale-quickstart-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir)?;
    let url = format!("file://{}", std::fs::canonicalize(&dir)?.display());

    let db = Database::open(Options::new().store(&url))?;
    let users = match db.open_table("users") {
        Ok(t) => t,
        Err(_) => db.create_table("users")?,
    };
    let mut tx = db.begin()?;
    tx.put(&users, b"alice", b"{\"visits\": 1}")?;
    tx.put(&users, b"bob", b"{\"visits\": 7}")?;
    // Pre-commit makes the writes visible; the ack resolves once durable.
    let info = tx.commit()?.wait()?;
    println!("committed at CSN {:?}, durable in {url}", info.csn);
    db.close()?;

    // Reopen: recovery finds the database and replays its log.
    let db = Database::open(Options::new().store(&url))?;
    if let Some(r) = db.recovery_report() {
        println!("recovered: {} transactions replayed", r.replayed);
    }
    let users = db.open_table("users")?;
    let alice = db.get(&users, b"alice")?.ok_or("alice is missing")?;
    println!("alice = {}", String::from_utf8_lossy(&alice));
    db.close()?;
    if given.is_none() {
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(())
}
