//! A hot standby takes over from a writer that dies: `milliscale bench
//! bank` runs as the writer, a second `milliscale bench bank
//! --promote-when FILE` follows it as a read replica; the writer gets
//! `kill -9` at a random moment, the trigger file is created, and the
//! standby promotes itself and runs transfers as the new writer. Then a
//! cold recovery checks the oracle:
//! - every transfer either process journaled as acknowledged is there;
//! - the accounts hold the bank's exact total (a consistent cut).
//!
//! Every third trial does not kill the old writer but freezes it
//! (`SIGSTOP`) and thaws it (`SIGCONT`) once the standby has promoted: it
//! must be fenced, so it acknowledges nothing more, exits with an error,
//! and everything it did acknowledge is in the database. Those trials run
//! against the emulator over HTTP: on a directory (`file://`) a process
//! frozen inside an append holds that key's lock (`flock`), and every other
//! process's writes to it wait until it thaws. The others run against a
//! directory, and one in four against the emulator.
//!
//! `MILLISCALE_STANDBY_TRIALS` sets the number of trials (default 6).

use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bank::{check_recovered, journaled_ids};
use crate::{ACCOUNTS, INITIAL, Target};
use milliscale::{Database, Options};

fn bank(t: &Target, journal: &Path, extra: &[&str], out: &Path) -> Child {
    let mut cmd = Command::new(&t.bin);
    cmd.args(["bench", "bank", "--accounts", &ACCOUNTS.to_string(), "--threads", "4"])
        .args(["--flush-timeout", "2", "--store", &t.url])
        .arg("--acked-log")
        .arg(journal)
        .args(extra)
        .stdout(std::fs::File::create(out.with_extension("out")).expect("a log file"))
        .stderr(std::fs::File::create(out).expect("a log file"));
    for (k, v) in &t.env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("start a bank process")
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill").args([sig, &child.id().to_string()]).status();
    assert!(ok.is_ok_and(|s| s.success()), "kill {sig}");
}

/// Wait for `child` to exit, up to `limit`; then kill it.
fn wait_for(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

fn trial(n: u64, t: &Target, dir: &Path) -> (usize, usize) {
    let name = format!("trial {n} ({})", t.url);
    let (wj, sj) = (dir.join("writer.log"), dir.join("standby.log"));
    let trigger = dir.join("promote");
    let mut writer = bank(t, &wj, &["--duration", "60", "--seed", &n.to_string()], &dir.join("w"));
    // The standby needs a database to follow: wait for the first
    // acknowledged transfer.
    let until = Instant::now() + Duration::from_secs(30);
    while journaled_ids(&wj).is_empty() {
        assert!(Instant::now() < until, "{name}: the writer acknowledged nothing in 30 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    let seed = (n + 1000).to_string();
    let when = trigger.display().to_string();
    let args = ["--duration", "1", "--seed", &seed, "--promote-when", &when];
    let mut standby = bank(t, &sj, &args, &dir.join("s"));
    std::thread::sleep(Duration::from_millis(300 + (n * 7919) % 1200));
    let freeze = n % 3 == 2;
    if freeze {
        signal(&writer, "-STOP");
    } else {
        writer.kill().expect("kill -9");
        let _ = writer.wait();
    }
    std::fs::write(&trigger, b"").expect("the trigger");
    let st = wait_for(&mut standby, Duration::from_secs(60));
    let log = std::fs::read_to_string(dir.join("s")).unwrap_or_default()
        + &std::fs::read_to_string(dir.join("s.out")).unwrap_or_default();
    assert!(st.is_some_and(|s| s.success()), "{name}: the standby failed: {log}");
    assert!(log.contains("failover:"), "{name}: no failover report: {log}");
    if freeze {
        // Thawed, the old writer finds itself fenced.
        signal(&writer, "-CONT");
        let st = wait_for(&mut writer, Duration::from_secs(30));
        assert!(
            st.is_some_and(|s| !s.success()),
            "{name}: the old writer kept running, or exited cleanly, after it was fenced: {st:?}"
        );
    }
    // Reaped already unless something above failed.
    let _ = writer.kill();
    let _ = writer.wait();
    // The oracle, on a cold recovery.
    let (wa, sa) = (journaled_ids(&wj), journaled_ids(&sj));
    assert!(!sa.is_empty(), "{name}: the promoted standby acknowledged nothing: {log}");
    let db = Database::open(Options::new().add_store_handle(Arc::clone(&t.store)))
        .unwrap_or_else(|e| panic!("{name}: recovery failed: {e}"));
    let acked: std::collections::BTreeSet<u64> = wa.union(&sa).copied().collect();
    check_recovered(&name, &db, &acked, ACCOUNTS, INITIAL, false);
    let failover = log.lines().find(|l| l.contains("failover:")).unwrap_or_default().to_owned();
    eprintln!("{name}: {} + {} acknowledged; {failover}", wa.len(), sa.len());
    (wa.len(), sa.len())
}

/// The trials, against the `milliscale` binary `bin`: `MILLISCALE_STANDBY_TRIALS` of them
/// (default 6).
pub fn run_standby_trials(bin: &Path) {
    let trials: u64 =
        std::env::var("MILLISCALE_STANDBY_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(6);
    let e = emulator::Emulator::start(emulator::EmulatorOptions::default()).expect("emulator");
    for n in 0..trials {
        let dir =
            std::env::temp_dir().join(format!("milliscale-standby-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let t = if n % 4 == 3 || n % 3 == 2 {
            let bucket = format!("standby-{n}");
            Target {
                bin: bin.to_path_buf(),
                url: e.bucket_url(&bucket),
                env: e.client_env().to_vec(),
                store: Arc::new(e.bucket(&bucket).expect("an emulator bucket")),
            }
        } else {
            let store = dir.join("store");
            std::fs::create_dir_all(&store).expect("store dir");
            Target {
                bin: bin.to_path_buf(),
                url: format!("file://{}", store.display()),
                env: Vec::new(),
                store: Arc::new(objstore::FsStore::open(&store).expect("the directory")),
            }
        };
        trial(n, &t, &dir);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
