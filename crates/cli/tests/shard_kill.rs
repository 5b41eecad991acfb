//! kill -9 trials of a cluster's transactions with real processes: three
//! `milliscale serve --cluster` shards on file stores, a `cluster bank`
//! coordinator journaling each transfer it saw commit, and a hot standby
//! per shard (`serve --cluster --standby`).
//!
//! - The coordinator, killed mid-run (10 trials): the participants of its
//!   unfinished two-phase commits decide them by cooperative termination.
//! - A shard primary, killed mid-run while the coordinator goes on (10
//!   trials, rotating over the shards): its standby promotes, publishes
//!   the next shard map, recovers the prepares from the shard's tables and
//!   asks the other participants about the undecided ones.
//!
//! After each transfer the coordinator also writes a marker of its own as
//! a one-shot batch (`Cluster::execute`, run whole by its shard).
//!
//! After each trial the oracle checks: every journaled transfer's marker
//! and every journaled batch's marker is there, the bank's total holds (a read-only transaction across the
//! shards), and no shard keeps a transaction prepared past the
//! termination timeout (plus the time a failover takes).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use milliscale_client::Cluster;
use milliscale_milana::shard_map::MapStore;

pub(super) const BIN: &str = env!("CARGO_BIN_EXE_milliscale");
pub(super) const ACCOUNTS: u64 = 12;
pub(super) const INITIAL: i64 = 100;
const TERMINATION_MS: u64 = 300;

/// A child process, killed (-9) when dropped.
pub(super) struct Proc(pub(super) Child);

impl Proc {
    /// kill -9, and wait for it.
    pub(super) fn kill_9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill_9();
    }
}

/// A free loopback address whose port is below the kernel's ephemeral
/// range (32768 and up on Linux). A port from `bind(":0")` is in that range,
/// so between this test's check and the node's own bind an outgoing
/// connection could take it; a port below the range can only be taken by
/// an explicit bind. The ports are handed out in turn from a start that
/// depends on the process, so parallel tests and test processes do not
/// pick the same one.
pub(super) fn free_port() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let at = (std::process::id() % 100) * 120;
    std::iter::repeat_with(|| 20_000 + (at + NEXT.fetch_add(1, Ordering::Relaxed)) % 12_000)
        .find_map(|p| std::net::TcpListener::bind(("127.0.0.1", p as u16)).ok()?.local_addr().ok())
        .expect("a free port")
        .to_string()
}

pub(super) fn url(dir: &Path, name: &str) -> String {
    format!("file://{}/{name}", dir.display())
}

/// Where a process's stderr goes: a file in the trial's directory, shown
/// when a check fails.
pub(super) fn log_file(dir: &Path, name: &str) -> Stdio {
    let n = std::fs::read_dir(dir).map_or(0, |d| d.count());
    let f = std::fs::File::create(dir.join(format!("{name}-{n}.err"))).expect("a log file");
    Stdio::from(f)
}

/// The processes' stderr so far, for a failed check.
pub(super) fn logs(dir: &Path) -> String {
    let mut out = String::new();
    let mut files: Vec<_> =
        std::fs::read_dir(dir).expect("dir").flatten().map(|e| e.path()).collect();
    files.sort();
    for f in files.iter().filter(|f| f.extension().is_some_and(|e| e == "err")) {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(8).collect();
        out.push_str(&format!("--- {}\n", f.display()));
        for l in tail.iter().rev() {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

fn shard_args(dir: &Path, shard: u32) -> Vec<String> {
    let mut a: Vec<String> = vec!["serve".into(), "--cluster".into(), url(dir, "map")];
    a.extend(["--shard".into(), shard.to_string()]);
    a.extend(["--store".into(), url(dir, &format!("shard{shard}"))]);
    a.extend(["--termination-timeout-ms".into(), TERMINATION_MS.to_string()]);
    a
}

/// Start a shard and wait until it listens.
pub(super) fn primary(dir: &Path, shard: u32) -> Proc {
    primary_with(dir, shard, &[])
}

/// Start a shard with `extra` arguments and wait until it listens.
pub(super) fn primary_with(dir: &Path, shard: u32, extra: &[&str]) -> Proc {
    let mut c = Command::new(BIN)
        .args(shard_args(dir, shard))
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(log_file(dir, &format!("primary{shard}")))
        .spawn()
        .expect("spawn a primary");
    let out = c.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).expect("read");
    assert!(line.starts_with("listening on"), "shard {shard}: {line:?}");
    Proc(c)
}

/// Start a shard's standby on a fresh port.
fn standby(dir: &Path, shard: u32) -> Proc {
    standby_with(dir, shard, &[])
}

/// Start a shard's standby on a fresh port with `extra` arguments.
pub(super) fn standby_with(dir: &Path, shard: u32, extra: &[&str]) -> Proc {
    let c = Command::new(BIN)
        .args(shard_args(dir, shard))
        .args(["--standby", "--listen", &free_port()])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(log_file(dir, &format!("standby{shard}")))
        .spawn()
        .expect("spawn a standby");
    Proc(c)
}

pub(super) fn coordinator(dir: &Path, client: u32, transfers: u64, server: &str) -> Proc {
    let c = Command::new(BIN)
        .args(["cluster", "bank", "--server", server, "--client-id", &client.to_string()])
        .args(["--accounts", &ACCOUNTS.to_string(), "--initial", &INITIAL.to_string()])
        .args(["--transfers", &transfers.to_string()])
        .args(["--journal", &dir.join(format!("journal-{client}")).display().to_string()])
        .args(["--batch-journal", &dir.join(format!("batches-{client}")).display().to_string()])
        .stdout(Stdio::null())
        .stderr(log_file(dir, &format!("coordinator{client}")))
        .spawn()
        .expect("spawn a coordinator");
    Proc(c)
}

/// A shard's address from the newest map, shard 0 first (the one a
/// trial kills may still be in it: the client asks the others then).
fn any_shard(dir: &Path) -> String {
    shard_but(dir, None)
}

/// The address of the first shard in the newest map other than `not`:
/// a client started just before a trial kills shard `not` may not have
/// opened the cluster through it yet.
pub(super) fn shard_but(dir: &Path, not: Option<u32>) -> String {
    let store = milliscale::store::open(&url(dir, "map")).expect("the map's store");
    let map = MapStore::new(store, "").latest().expect("map").expect("a map");
    let mut others = map.shards.iter().filter(|(s, _)| Some(**s) != not);
    others.next().map(|(_, i)| i.addr.clone()).expect("a shard")
}

fn cluster(dir: &Path) -> Vec<Proc> {
    cluster_with(dir, &[])
}

/// Three shards, `bank` split evenly, each started with `extra`.
pub(super) fn cluster_with(dir: &Path, extra: &[&str]) -> Vec<Proc> {
    let mut init = Command::new(BIN);
    init.args(["cluster", "init", "--map", &url(dir, "map"), "--even-table", "bank"]);
    for s in 0..3 {
        init.args(["--shard", &format!("{}={}", free_port(), url(dir, &format!("shard{s}")))]);
    }
    assert!(init.status().expect("init").success());
    (0..3).map(|s| primary_with(dir, s, extra)).collect()
}

/// The oracle, in this process.
pub(super) struct Oracle {
    maps: Arc<MapStore>,
    pub(super) client: Cluster,
    dir: std::path::PathBuf,
    /// Acknowledged one-shot batches checked so far.
    pub(super) batches: std::sync::atomic::AtomicUsize,
}

impl Oracle {
    pub(super) async fn new(dir: &Path) -> Oracle {
        let store = milliscale::store::open(&url(dir, "map")).expect("the map's store");
        let maps = Arc::new(MapStore::new(store, ""));
        let client =
            Cluster::builder(any_shard(dir)).client_id(9_999).connect().await.expect("client");
        // The coordinators create the table; the oracle may read first.
        let _ = client.create_table("bank").await;
        Oracle { maps, client, dir: dir.to_path_buf(), batches: Default::default() }
    }

    /// Wait until no shard has a transaction prepared; how long it took.
    pub(super) async fn settled(&self) -> Duration {
        let t = Instant::now();
        loop {
            let m = Arc::clone(&self.maps);
            let map = tokio::task::spawn_blocking(move || m.latest()).await.expect("task");
            let map = map.expect("map").expect("a map");
            let mut prepared = 0;
            for info in map.shards.values() {
                let asked = async {
                    let c = Cluster::connect(info.addr.clone()).await.ok()?;
                    let status = c.status().await;
                    let me = status.iter().find(|s| s.addr == info.addr)?;
                    Some(me.info.as_ref()?.prepared)
                };
                prepared += tokio::time::timeout(Duration::from_millis(500), asked)
                    .await
                    .ok()
                    .flatten()
                    .unwrap_or(1);
            }
            if prepared == 0 {
                return t.elapsed();
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "still prepared (or a shard unreachable) after {:?}; map version {}: {:?}\n{}",
                t.elapsed(),
                map.version,
                map.shards,
                logs(&self.dir)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Check the journals of `client` and the total; how many transfers
    /// the journal holds.
    pub(super) async fn check(&self, dir: &Path, client: u32) -> usize {
        // A transfer's line: client, seq, from, to, amount.
        let transfers = self.markers('t', client, &journal(dir, "journal", client), 4).await;
        // Every acknowledged one-shot batch's marker is there too (a
        // line: client, seq, amount).
        let batches = self.markers('b', client, &journal(dir, "batches", client), 2).await;
        self.batches.fetch_add(batches, std::sync::atomic::Ordering::Relaxed);
        let keys: Vec<Vec<u8>> = (0..ACCOUNTS).map(milliscale_bench::retwis::key_of).collect();
        let total = self
            .read_only(
                |vals| {
                    let sum: i64 = vals
                        .iter()
                        .map(|v| {
                            v.as_ref().map_or(INITIAL, |b| {
                                String::from_utf8(b.clone()).expect("utf8").parse().expect("number")
                            })
                        })
                        .sum();
                    Some(sum.to_string().into_bytes())
                },
                keys,
            )
            .await;
        let total: i64 =
            String::from_utf8(total.expect("a sum")).expect("utf8").parse().expect("n");
        assert_eq!(total, INITIAL * ACCOUNTS as i64, "the total holds");
        transfers
    }

    /// Check that the marker `<prefix><client>-<seq>` of every journal
    /// line holds the line's field `value`; how many lines.
    async fn markers(
        &self,
        prefix: char,
        client: u32,
        lines: &[Vec<String>],
        value: usize,
    ) -> usize {
        for f in lines {
            let seq: u64 = f[1].parse().expect("seq");
            let key = format!("{prefix}{client:04}-{seq:08}").into_bytes();
            let found = self.read_only(|tx_vals| tx_vals[0].clone(), vec![key]).await;
            assert_eq!(
                found.as_deref(),
                Some(f[value].as_bytes()),
                "acknowledged write {f:?} ({prefix}) lost"
            );
        }
        lines.len()
    }

    /// Read `keys` in one read-only transaction (run again until it
    /// commits); `f` of the values.
    async fn read_only(
        &self,
        f: impl Fn(&[Option<Vec<u8>>]) -> Option<Vec<u8>>,
        keys: Vec<Vec<u8>>,
    ) -> Option<Vec<u8>> {
        for _ in 0..400 {
            let _ = self.client.refresh().await;
            let mut tx = self.client.begin();
            let mut vals = Vec::new();
            let mut ok = true;
            for k in &keys {
                match tx.get("bank", k).await {
                    Ok(v) => vals.push(v),
                    Err(_) => {
                        ok = false;
                        break;
                    }
                }
            }
            if ok && tx.commit().await.is_ok() {
                return f(&vals);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("no read-only transaction committed in 400 tries");
    }
}

/// The whole lines of journal `<name>-<client>` (a kill can cut the last
/// one short), each split into its fields.
fn journal(dir: &Path, name: &str, client: u32) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(dir.join(format!("{name}-{client}"))).unwrap_or_default();
    text.split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .map(|l| l.trim_end().split(' ').map(str::to_owned).collect())
        .collect()
}

/// A pseudo-random delay for trial `t` (deterministic).
pub(super) fn delay(t: u32, lo: u64, hi: u64) -> Duration {
    let x = u64::from(t).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    Duration::from_millis(lo + x % (hi - lo))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_coordinators_and_primaries_lose_no_acknowledged_transfer() {
    let dir = tempfile::tempdir().expect("dir");
    let dir = dir.path();
    let mut primaries = cluster(dir);
    let oracle = Oracle::new(dir).await;
    let trials: u32 = std::env::var("MILLISCALE_SHARD_KILL_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let (mut acked, mut slowest) = (0, Duration::ZERO);
    // The coordinator, killed mid-run.
    for t in 0..trials {
        let client = 100 + t;
        let c = coordinator(dir, client, 0, &any_shard(dir));
        tokio::time::sleep(delay(t, 150, 700)).await;
        drop(c); // kill -9
        slowest = slowest.max(oracle.settled().await);
        acked += oracle.check(dir, client).await;
    }
    let batches = oracle.batches.swap(0, std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "coordinator kills: {acked} acknowledged transfers and {batches} one-shot batches \
         checked; settled within {slowest:?}"
    );
    assert!(acked > 0 && batches > 0, "nothing was acknowledged before the kills");
    assert!(
        slowest < Duration::from_millis(TERMINATION_MS) + Duration::from_secs(3),
        "a shard stayed blocked {slowest:?}"
    );
    // A shard primary, killed while a coordinator runs; its standby takes
    // over and the coordinator goes on.
    let mut standbys: Vec<Option<Proc>> = (0..3).map(|s| Some(standby(dir, s))).collect();
    let (mut acked, mut slowest) = (0, Duration::ZERO);
    tokio::time::sleep(Duration::from_millis(500)).await; // the standbys follow
    for t in 0..trials {
        let (client, s) = (200 + t, (t % 3) as usize);
        let mut c = coordinator(dir, client, 40, &shard_but(dir, Some(s as u32)));
        tokio::time::sleep(delay(t, 50, 300)).await;
        drop(std::mem::replace(&mut primaries[s], standbys[s].take().expect("a standby")));
        let t0 = Instant::now();
        loop {
            if let Some(status) = c.0.try_wait().expect("wait") {
                assert!(status.success(), "the coordinator failed: {status}\n{}", logs(dir));
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "the coordinator hung");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        slowest = slowest.max(oracle.settled().await);
        acked += oracle.check(dir, client).await;
        // The next standby follows the new primary.
        standbys[s] = Some(standby(dir, s as u32));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let batches = oracle.batches.swap(0, std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "primary kills: {acked} acknowledged transfers and {batches} one-shot batches checked; \
         settled within {slowest:?}"
    );
    assert!(acked > 0 && batches > 0);
    assert!(slowest < Duration::from_secs(5), "a shard stayed blocked {slowest:?}");
}
