//! S3 Express through the emulator: the emulator serves S3 with S3
//! Express append semantics and latencies on loopback, and the database
//! logs to it over HTTP as it would to a directory bucket. The store's
//! accounting says what the requests would have cost on S3 Express.
//!
//! `cargo run --release -p milliscale --example s3_express_emulator`
//!
//! Against real S3 Express, the URL is `s3://NAME--ZONE--x-s3/prefix` and
//! the credentials come from the AWS SDK's chain (environment, profile,
//! SSO, web identity, container or instance metadata).

use emulator::{Emulator, EmulatorOptions};
use milliscale::store::S3Credentials;
use milliscale::{Database, Options};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The emulator with the S3 Express One Zone latency preset.
    let emu = Emulator::start(EmulatorOptions { preset: "s3x".into(), ..Default::default() })?;
    emu.bucket("orders")?; // create the bucket
    let url = format!("{}&price=s3x", emu.bucket_url("orders"));
    let creds = S3Credentials::new(emulator::DEFAULT_ACCESS_KEY, emulator::DEFAULT_SECRET_KEY);
    let db = Database::open(Options::new().add_s3_store(&url, creds))?;
    let orders = db.create_table("orders")?;
    let started = std::time::Instant::now();
    let mut acks = Vec::new();
    for i in 0..200u32 {
        let mut tx = db.begin()?;
        tx.put(&orders, format!("order-{i:05}").as_bytes(), b"pending")?;
        acks.push(tx.commit()?); // pipelined: do not wait here
    }
    for ack in acks {
        ack.wait()?;
    }
    println!("200 commits durable on the emulator in {:.1?}", started.elapsed());
    if let Some(m) = db.log_metrics() {
        let usd = m.cost.usd.map_or("no price table".into(), |d| format!("${d:.6}"));
        println!("the log sent {} requests: {usd} at S3 Express prices", m.cost.requests);
    }
    db.close()?;
    let a = emu.accounting();
    println!(
        "the emulator served {} PUT-class and {} GET-class requests",
        a.put_class, a.get_class
    );
    Ok(())
}
