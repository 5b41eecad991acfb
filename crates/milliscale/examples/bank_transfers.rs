//! Bank transfers with durable acks: threads move money between accounts
//! in serializable transactions; a transfer counts as done only once its
//! ack resolved (its log records and everything it depends on are on the
//! store). The total never changes, and after a restart every
//! acknowledged transfer is there.
//!
//! `cargo run --release -p milliscale --example bank_transfers`

use milliscale::{Database, Isolation, Options, TxnOptions};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const ACCOUNTS: u64 = 100;
const INITIAL: u64 = 1_000;

fn balance(b: Option<Vec<u8>>) -> u64 {
    b.and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store: Arc<dyn milliscale::store::ObjectStore> =
        Arc::new(milliscale::store::MemoryStore::new());
    let options = || Options::new().add_store_handle(Arc::clone(&store));
    let db = Database::open(options())?;
    let accounts = db.create_table("accounts")?;
    let mut tx = db.begin()?;
    for a in 0..ACCOUNTS {
        tx.put(&accounts, &a.to_be_bytes(), &INITIAL.to_le_bytes())?;
    }
    tx.commit_and_wait()?;

    let acknowledged = AtomicU64::new(0);
    std::thread::scope(|s| {
        for w in 0..4u64 {
            let (db, accounts, acknowledged) = (&db, &accounts, &acknowledged);
            s.spawn(move || {
                let serializable = TxnOptions::isolation(Isolation::Serializable);
                for i in 0..500u64 {
                    let (from, to) =
                        ((w * 31 + i * 7) % ACCOUNTS, (w * 17 + i * 13 + 1) % ACCOUNTS);
                    if from == to {
                        continue;
                    }
                    let Ok(mut tx) = db.begin_with(serializable) else { return };
                    let moved = (|| {
                        let a = balance(tx.get(accounts, &from.to_be_bytes())?);
                        let b = balance(tx.get(accounts, &to.to_be_bytes())?);
                        let amount = a.min(10);
                        tx.put(accounts, &from.to_be_bytes(), &(a - amount).to_le_bytes())?;
                        tx.put(accounts, &to.to_be_bytes(), &(b + amount).to_le_bytes())
                    })();
                    // A conflict aborts the transfer; it is simply not done.
                    if moved.is_ok() && tx.commit().and_then(|ack| ack.wait()).is_ok() {
                        acknowledged.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    db.close()?;

    // Restart: recovery replays the log; the total holds.
    let db = Database::open(options())?;
    let accounts = db.open_table("accounts")?;
    let mut tx = db.begin()?;
    let mut total = 0;
    for a in 0..ACCOUNTS {
        total += balance(tx.get(&accounts, &a.to_be_bytes())?);
    }
    println!(
        "{} transfers acknowledged; after a restart the total is {total}",
        acknowledged.load(Ordering::Relaxed)
    );
    assert_eq!(total, ACCOUNTS * INITIAL, "money was created or destroyed");
    db.close()?;
    Ok(())
}
