//! Real process crashes: `kill -9` of `milliscale bench bank` at a random
//! moment, then recovery (`Database::open` on the same store, as the next
//! writer) and the oracle:
//! - every transfer the client journaled as acknowledged is in `history`;
//! - the accounts hold the bank's exact total (a consistent cut).
//!
//! Each trial runs 1 to 3 log lanes per group (adaptive flushing), and
//! half of them hedge every slow append (`--hedging always`: helper threads
//! on a directory; the emulator's `s3://` client hedges in its runtime
//! either way), so crashes land with parts in flight on several lanes.
//!
//! Odd trials crash twice: the second run recovers and continues the
//! database (a new epoch, new segments, a checkpoint at open), is killed in
//! turn, and the check runs again over both journals. Their first run
//! commits autonomously (Autonomous Commit: the workers write the log, with flush
//! units of 256 B to 4 KiB), the second pipelined. Trials run against a
//! directory (`file://`), against the simulated NVMe device over a
//! directory (`sim://nvme?inner=file://`, whose appends the workers send
//! and finish later), and against the emulator over HTTP.
//!
//! `MILLISCALE_KILL_TRIALS` sets the number of trials (default 50).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::bank::{check_recovered, journaled_ids};
use crate::{ACCOUNTS, INITIAL, Target};
use milliscale::{Database, Options};

fn run_bank(t: &Target, journal: &Path, seed: u64, after: Duration) {
    // Odd trials start autonomous and, crashed, are continued pipelined.
    let autonomous = (seed / 10 + seed % 10) % 2 == 1;
    let mut cmd = Command::new(&t.bin);
    cmd.args(["bench", "bank", "--accounts", &ACCOUNTS.to_string(), "--threads", "4"])
        .args(["--duration", "60", "--flush-timeout", "2", "--seed", &seed.to_string()])
        .args(["--store", &t.url])
        .args(["--log-lanes", &(1 + seed % 3).to_string()])
        .args(["--hedging", if seed % 4 < 2 { "always" } else { "auto" }])
        .args(["--commit", if autonomous { "autonomous" } else { "pipelined" }])
        .args(["--flush-unit", &(256 << (seed % 5)).to_string()])
        .arg("--acked-log")
        .arg(journal)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in &t.env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start the bank");
    std::thread::sleep(after);
    child.kill().expect("kill -9");
    let _ = child.wait();
}

/// Recover and check the oracle. Returns (acknowledged, replayed).
fn recover_and_check(name: &str, t: &Target, journal: &Path) -> (usize, usize) {
    let acked = journaled_ids(journal);
    let db = Database::open(Options::new().add_store_handle(Arc::clone(&t.store)))
        .unwrap_or_else(|e| panic!("{name}: recovery failed: {e}"));
    let replayed = db.recovery_report().map_or(0, |r| r.replayed);
    check_recovered(name, &db, &acked, ACCOUNTS, INITIAL, true);
    db.close().unwrap_or_else(|e| panic!("{name}: closing after the check: {e}"));
    (acked.len(), replayed)
}

/// One trial: one or two crashes, each followed by recovery and checks.
fn trial(n: u64, t: &Target, dir: &Path) -> usize {
    let journal = dir.join("acked.log");
    let rounds = if n % 2 == 1 { 2 } else { 1 };
    let mut acked = 0;
    for round in 0..rounds {
        // 150 ms .. 1.5 s: from before the accounts exist to mid-run.
        let after = Duration::from_millis(150 + ((n * 2 + round) * 7919) % 1350);
        run_bank(t, &journal, n * 10 + round, after);
        let name = format!("trial {n} ({}) round {round}", t.url);
        let (a, replayed) = recover_and_check(&name, t, &journal);
        eprintln!("{name}: killed after {after:?}; {a} acknowledged, {replayed} replayed");
        acked = a;
    }
    acked
}

fn fresh_dir(tag: &str, n: u64) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("milliscale-kill-{}-{tag}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

/// The trials, against the `milliscale` binary `bin`: `MILLISCALE_KILL_TRIALS` of them
/// (default 50).
pub fn run_bank_trials(bin: &Path) {
    let trials: u64 =
        std::env::var("MILLISCALE_KILL_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    let e = emulator::Emulator::start(emulator::EmulatorOptions::default()).expect("emulator");
    let mut journaled = 0;
    for n in 0..trials {
        let dir = fresh_dir("t", n);
        // One trial in five runs against the emulator.
        let t = if n % 5 == 4 {
            let bucket = format!("kill-{n}");
            Target {
                bin: bin.to_path_buf(),
                url: e.bucket_url(&bucket),
                env: e.client_env().to_vec(),
                store: Arc::new(e.bucket(&bucket).expect("an emulator bucket")),
            }
        } else {
            let store_dir = dir.join("store");
            std::fs::create_dir_all(&store_dir).expect("store dir");
            // One trial in five logs through the simulated NVMe device over
            // the directory: its appends go out asynchronously
            // (`start_append`), so the kill finds some sent and unanswered.
            let url = if n % 5 == 2 {
                format!("sim://nvme?seed={n}&inner=file://{}", store_dir.display())
            } else {
                format!("file://{}", store_dir.display())
            };
            Target {
                bin: bin.to_path_buf(),
                url,
                env: Vec::new(),
                store: Arc::new(objstore::FsStore::open(&store_dir).expect("open the directory")),
            }
        };
        journaled += trial(n, &t, &dir);
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(journaled > 0, "no trial got as far as an acknowledged transfer");
}
