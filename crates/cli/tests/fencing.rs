//! Fencing with two processes: `milliscale bench bank` writes a database;
//! while it runs, this process opens the same database as a writer. The
//! bank must be fenced (it stops with a `fenced` error and acknowledges
//! nothing more), and every transfer it journaled as acknowledged, before
//! or after our open completed, must be in the state our open recovered.
//! Then the new writer commits, and a later reader sees both.
//! Against a directory (`file://`) and the emulator over HTTP.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use milliscale::{Database, Options};
use milliscale_faults::bank::journaled_ids;
use objstore::ObjectStore;

fn fence_a_running_bank(url: &str, env: &[(&str, String)], store: Arc<dyn ObjectStore>, tag: &str) {
    let dir = std::env::temp_dir().join(format!("milliscale-fence-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let journal = dir.join("acked.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_milliscale"));
    cmd.args(["bench", "bank", "--accounts", "50", "--threads", "4", "--duration", "60"])
        .args(["--flush-timeout", "2", "--store", url])
        .arg("--acked-log")
        .arg(&journal)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut bank = cmd.spawn().expect("start the bank");
    let started = Instant::now();
    while journaled_ids(&journal).len() < 200 {
        assert!(started.elapsed() < Duration::from_secs(30), "the bank made no progress");
        std::thread::sleep(Duration::from_millis(20));
    }

    // The second writer: takes over, fences, recovers.
    let db = Database::open(Options::new().add_store_handle(Arc::clone(&store)))
        .expect("the second writer opens");
    let opened = journaled_ids(&journal);
    let accounts = db.open_table("accounts").expect("accounts");
    let history = db.open_table("history").expect("history");

    // The first writer must stop by itself, fenced.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = bank.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "the fenced writer kept running");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    bank.stderr.take().expect("stderr").read_to_string(&mut stderr).expect("read stderr");
    assert!(!status.success(), "the fenced writer must fail");
    assert!(stderr.contains("fenced"), "it says why: {stderr}");

    // Everything it acknowledged, before our open finished or after, is in
    // what we recovered.
    let acked = journaled_ids(&journal);
    let mut tx = db.begin().expect("begin");
    let missing: Vec<u64> = acked
        .iter()
        .copied()
        .filter(|id| tx.get(&history, &id.to_be_bytes()).expect("get").is_none())
        .collect();
    assert!(missing.is_empty(), "acknowledged by the fenced writer but lost: {missing:?}");
    let after_open = acked.len() - opened.len();
    drop(tx);

    // The new writer works, and what it commits is durable.
    let mut tx = db.begin().expect("begin");
    let v = tx.get(&accounts, &0u64.to_be_bytes()).expect("get").expect("account 0");
    tx.put(&history, &u64::MAX.to_be_bytes(), &v).expect("put");
    tx.commit_and_wait().expect("the new writer commits");
    db.close().expect("close");
    drop(db);
    let reader = Database::open_read_only(Options::new().add_store_handle(store)).expect("read");
    let history = reader.open_table("history").expect("history");
    let mut tx = reader.begin().expect("begin");
    assert!(tx.get(&history, &u64::MAX.to_be_bytes()).expect("get").is_some());
    for id in &acked {
        assert!(tx.get(&history, &id.to_be_bytes()).expect("get").is_some(), "{id}");
    }
    eprintln!(
        "{tag}: {} transfers acknowledged by the fenced writer ({after_open} journaled after \
         the second writer's open returned), all recovered",
        acked.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_writer_fences_the_first_on_a_directory() {
    let dir = std::env::temp_dir().join(format!("milliscale-fence-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store: Arc<dyn ObjectStore> = Arc::new(objstore::FsStore::open(&dir).expect("dir"));
    fence_a_running_bank(&format!("file://{}", dir.display()), &[], store, "fs");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_writer_fences_the_first_on_the_emulator() {
    let e = emulator::Emulator::start(emulator::EmulatorOptions::default()).expect("emulator");
    let url = e.bucket_url("fence");
    let s = e.bucket("fence").expect("an emulator bucket");
    let env = e.client_env();
    fence_a_running_bank(&url, &env, Arc::new(s), "emulator");
}
