//! kill -9 in the middle of a range's move (design record 0009), with
//! real processes: three `milliscale serve --cluster` shards on file
//! stores (a 1 s move timeout), a `cluster bank` coordinator journaling
//! each transfer and one-shot batch it saw commit, and a `cluster move`
//! of the range holding the journal's markers and some accounts, each
//! trial to the next shard, ten rows a page. Each trial kills one of them at a
//! pseudo-random moment of the move, in turn:
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
        // The CLI starts in a few ms, and the move copies its range ten
        // rows a page (the markers of every trial so far: 60 rows more
        // each), a few ms a page: the kill lands before, during or after
        // it.
        tokio::time::sleep(delay(t.wrapping_mul(7).wrapping_add(3), 5, 150)).await;
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
        let t0 = Instant::now();
        loop {
            if let Some(status) = c.0.try_wait().expect("wait") {
                assert!(status.success(), "the coordinator failed: {status}\n{}", logs(dir));
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(90), "the coordinator hung\n{}", logs(dir));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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
