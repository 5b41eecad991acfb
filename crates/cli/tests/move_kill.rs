//! kill -9 in the middle of a range's move (design record 0009), with
//! real processes: three `milliscale serve --cluster` shards on file
//! stores (a 1 s move timeout), a `cluster bank` coordinator journaling
//! each transfer and one-shot batch it saw commit, and a `cluster move`
//! of the range holding the journal's markers and some accounts, each
//! trial to the next shard, ten rows a page. Each trial kills one of them at a
//! pseudo-random moment of the move, or (every other round) just after
//! its freeze, in turn:
//!
//! - the mover: the old owner settles the move by the map alone
//!   (released if the mover published, given up after the move timeout
//!   if not);
//! - the source shard, restarted at once: it comes back frozen, and
//!   settles the same way;
//! - the destination shard, restarted at once: the mover fails or
//!   finishes, and the move with it.
//!
//! After each trial: the coordinator saw no error (it ran all its
//! transfers), no range stays frozen past the move timeout, no shard keeps
//! a transaction prepared, every journaled transfer's and batch's marker
//! is there and the bank's total holds (`shard_kill`'s oracle). The range
//! is where the newest map says: moved or not, both are counted.

use std::process::Command;
use std::time::{Duration, Instant};

use milliscale_client::Cluster;
use milliscale_milana::shard_map::MapStore;
use milliscale_milana::types::split_cluster_key;

use super::shard_kill::{
    BIN, Oracle, Proc, cluster_with, coordinator, delay, log_file, logs, primary_with, shard_but,
    url,
};

const MOVE_TIMEOUT: &[&str] = &["--move-timeout-ms", "1000"];

/// The newest map's last range (the markers' and some accounts'): its
/// `TABLE=KEY`, and its owner.
fn last_range(maps: &MapStore) -> (String, u32) {
    let map = maps.latest().expect("map").expect("a map");
    let (start, owner) = map.ranges.last().expect("a range").clone();
    let (table, key) = split_cluster_key(&start).expect("a table's key");
    (format!("{table}={}", String::from_utf8(key.to_vec()).expect("a text key")), owner)
}

/// Wait until no shard holds a range frozen (up to `within`); how long.
async fn unfrozen(dir: &std::path::Path, within: Duration) -> Duration {
    let t = Instant::now();
    loop {
        let asked = async {
            let c = Cluster::connect(shard_but(dir, None)).await.ok()?;
            let status = c.status().await;
            status.iter().map(|s| s.info.as_ref().map(|i| i.moving.len())).sum::<Option<usize>>()
        };
        let moving =
            tokio::time::timeout(Duration::from_secs(2), asked).await.ok().flatten().unwrap_or(1);
        if moving == 0 {
            return t.elapsed();
        }
        assert!(t.elapsed() < within, "still frozen after {:?}\n{}", t.elapsed(), logs(dir));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait for the coordinator `c` to end (up to 90 s): it must have run all
/// its transfers, the application seeing no error.
async fn ran_through(c: &mut Proc, dir: &std::path::Path) {
    let t0 = Instant::now();
    loop {
        if let Some(status) = c.0.try_wait().expect("wait") {
            assert!(status.success(), "the coordinator failed: {status}\n{}", logs(dir));
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(90), "the coordinator hung\n{}", logs(dir));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_killed_midway_finishes_or_rolls_back_and_loses_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    let dir = dir.path();
    let mut shards: Vec<Proc> = cluster_with(dir, MOVE_TIMEOUT);
    let maps = MapStore::new(milliscale::store::open(&url(dir, "map")).expect("store"), "");
    let oracle = Oracle::new(dir).await;
    let trials: u32 = std::env::var("MILLISCALE_MOVE_KILL_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let names = ["mover", "source", "destination"];
    // Per victim: moves finished, moves rolled back.
    let mut outcomes = [(0u32, 0u32); 3];
    let (mut acked, mut slowest, mut blocked) = (0, Duration::ZERO, Duration::ZERO);
    for t in 0..trials * 3 {
        let victim = (t % 3) as usize;
        let (range, from) = last_range(&maps);
        let to = (from + 1) % 3;
        let client = 300 + t;
        let killed = match victim {
            1 => Some(from),
            2 => Some(to),
            _ => None,
        };
        let mut c = coordinator(dir, client, 30, &shard_but(dir, killed));
        tokio::time::sleep(delay(t, 20, 150)).await;
        let mut mover = Proc(
            Command::new(BIN)
                .args(["cluster", "move", "--map", &url(dir, "map"), "--range", &range])
                .args(["--to", &to.to_string(), "--page-rows", "10"])
                .stdout(log_file(dir, &format!("mover{t}-out")))
                .stderr(log_file(dir, &format!("mover{t}")))
                .spawn()
                .expect("spawn a mover"),
        );
        // Every other round of three, the kill is aimed at the freeze:
        // up to 15 ms after the mover logs it, while the keys written
        // since the copy began are copied again and the map is written.
        // Otherwise at a pseudo-random moment: the CLI starts in a few ms,
        // and the move copies its range ten rows a page (the markers of
        // every trial so far: 60 rows more each), a few ms a page, so the
        // kill lands before, during or after the copy.
        if (t / 3) % 2 == 1 {
            let t0 = Instant::now();
            while !logged(dir, &format!("mover{t}-"), "frozen on shard")
                && t0.elapsed() < Duration::from_secs(10)
                && mover.0.try_wait().expect("wait").is_none()
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            tokio::time::sleep(delay(t, 0, 15)).await;
        } else {
            tokio::time::sleep(delay(t.wrapping_mul(7).wrapping_add(3), 5, 150)).await;
        }
        match killed {
            None => drop(mover), // kill -9
            Some(s) => {
                let s = s as usize;
                shards[s].kill_9();
                shards[s] = primary_with(dir, s as u32, MOVE_TIMEOUT);
                let t0 = Instant::now();
                while mover.0.try_wait().expect("wait").is_none() {
                    assert!(
                        t0.elapsed() < Duration::from_secs(60),
                        "the mover hung\n{}",
                        logs(dir)
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        ran_through(&mut c, dir).await;
        slowest = slowest.max(unfrozen(dir, Duration::from_secs(10)).await);
        blocked = blocked.max(oracle.settled().await);
        acked += oracle.check(dir, client).await;
        let (_, owner) = last_range(&maps);
        assert!(owner == from || owner == to, "the range went to shard {owner}");
        if owner == to {
            outcomes[victim].0 += 1;
        } else {
            outcomes[victim].1 += 1;
        }
    }
    let batches = oracle.batches.swap(0, std::sync::atomic::Ordering::Relaxed);
    for (v, (done, back)) in outcomes.iter().enumerate() {
        eprintln!("{} killed: {done} moves finished, {back} rolled back", names[v]);
    }
    eprintln!(
        "{acked} acknowledged transfers and {batches} one-shot batches checked; every freeze \
         settled within {slowest:?} of the coordinator's end, every prepared transaction \
         within {blocked:?} more"
    );
    assert!(acked > 0 && batches > 0, "nothing was acknowledged");
    assert!(blocked < Duration::from_secs(3), "a key stayed blocked {blocked:?}");
}

/// The shard whose rebalancer holds the map's lease (its holder is named
/// `shard N at ADDR`).
fn lease_holder(dir: &std::path::Path) -> Option<u32> {
    let store = milliscale::store::open(&url(dir, "map")).expect("store");
    let lease = milliscale_milana::map_lease::MapLease::new(store, "");
    let holder = lease.newest().ok()??.holder;
    holder.strip_prefix("shard ")?.split(' ').next()?.parse().ok()
}

/// Shard `s`'s newest log.
fn newest_log(dir: &std::path::Path, s: u32) -> String {
    let mut logs: Vec<_> = std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&format!("primary{s}-")))
        })
        .collect();
    logs.sort_by_key(|p| {
        let n = p.file_stem().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        n.rsplit('-').next().and_then(|k| k.parse::<u64>().ok()).unwrap_or(0)
    });
    logs.last().map(|p| std::fs::read_to_string(p).unwrap_or_default()).unwrap_or_default()
}

/// The last step the rebalancer told in shard `s`'s newest log.
fn last_decision(dir: &std::path::Path, s: u32) -> String {
    let text = newest_log(dir, s);
    let step = |l: &&str| ["moving", "frozen on", "moved", "split"].iter().any(|w| l.contains(w));
    text.lines().rev().find(step).unwrap_or("").to_owned()
}

/// kill -9 of the shard running the rebalancer (design record 0009), 10
/// trials (`MILLISCALE_MOVE_KILL_TRIALS`): shard 0 starts with every
/// account and marker of a bank that a coordinator runs, and the
/// rebalancer, every 100 ms, splits the bank's ranges past 40 rows and
/// moves them to shards 1 and 2. Each trial kills the lease holder at a
/// pseudo-random moment and starts it again; its moves finish or roll
/// back, and `shard_kill`'s oracle checks every acknowledged transfer
/// and batch, and the total.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_rebalancer_loses_nothing_and_its_moves_settle() {
    let dir = tempfile::tempdir().expect("dir");
    let dir = dir.path();
    let map = url(dir, "map");
    let mut init = Command::new(BIN);
    init.args(["cluster", "init", "--map", &map, "--split", "zz=1", "--split", "zz=2"]);
    for s in 0..3 {
        init.args([
            "--shard",
            &format!("{}={}", super::shard_kill::free_port(), url(dir, &format!("shard{s}"))),
        ]);
    }
    assert!(init.status().expect("init").success());
    const EXTRA: &[&str] = &["--move-timeout-ms", "1000", "--rebalance-every-ms", "100"];
    let mut shards: Vec<Proc> = (0..3).map(|s| primary_with(dir, s, EXTRA)).collect();
    let oracle = Oracle::new(dir).await;
    let on = Command::new(BIN)
        .args(["cluster", "rebalance", "on", "--map", &map, "--split-rows", "40"])
        .output()
        .expect("rebalance on");
    assert!(on.status.success());
    let trials: u32 = std::env::var("MILLISCALE_MOVE_KILL_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let (mut acked, mut mid_move, mut slowest) = (0, 0, Duration::ZERO);
    let maps = MapStore::new(milliscale::store::open(&map).expect("store"), "");
    // The shards see the switch when they next read the map (every 5 s).
    let t0 = Instant::now();
    while lease_holder(dir).is_none() {
        assert!(t0.elapsed() < Duration::from_secs(15), "no rebalancer took the lease");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for t in 0..trials {
        let client = 500 + t;
        let mut c = coordinator(dir, client, 30, &shard_but(dir, None));
        tokio::time::sleep(delay(t, 100, 400)).await;
        let Some(holder) = lease_holder(dir) else {
            panic!("no rebalancer holds the lease\n{}", logs(dir));
        };
        // Aim at a move: wait (up to 3 s) for the holder to start one,
        // then kill it 0-15 ms later.
        let begun = newest_log(dir, holder).matches("moving").count();
        let t0 = Instant::now();
        while newest_log(dir, holder).matches("moving").count() == begun
            && t0.elapsed() < Duration::from_secs(3)
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(delay(t.wrapping_mul(5), 0, 15)).await;
        shards[holder as usize].kill_9();
        let last = last_decision(dir, holder);
        if last.contains("moving") || last.contains("frozen on") {
            mid_move += 1;
        }
        shards[holder as usize] = primary_with(dir, holder, EXTRA);
        ran_through(&mut c, dir).await;
        slowest = slowest.max(unfrozen(dir, Duration::from_secs(10)).await);
        oracle.settled().await;
        acked += oracle.check(dir, client).await;
    }
    let m = maps.latest().expect("map").expect("a map");
    let owners: std::collections::BTreeSet<u32> = m.ranges.iter().map(|(_, s)| *s).collect();
    eprintln!(
        "rebalancer killed {trials} times ({mid_move} while its last decision was a move): \
         {acked} acknowledged transfers checked; map version {}, {} ranges on shards \
         {owners:?}; every freeze settled within {slowest:?}",
        m.version,
        m.ranges.len()
    );
    assert!(acked > 0);
    assert!(owners.len() == 3, "the rebalancer moved nothing: {:?}", m.ranges);
}

/// Whether a log file of `dir` whose name begins with `prefix` holds
/// `line`.
fn logged(dir: &std::path::Path, prefix: &str, line: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    entries.flatten().any(|e| {
        e.file_name().to_string_lossy().starts_with(prefix)
            && std::fs::read_to_string(e.path()).is_ok_and(|s| s.contains(line))
    })
}
