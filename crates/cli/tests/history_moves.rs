//! History checks while ranges split and move continually (design record
//! 0009): three `milliscale serve --cluster` shards, a mover running
//! `milliscale cluster split` and `cluster move` one after another, and
//! four cluster clients running, through `Cluster`, a bank (transfers
//! between accounts, and read-only transactions that sum them) and a
//! list-append workload (each transaction reads one to three lists and
//! appends its id to each), for a few seconds per seed.
//!
//! The checks, at the end:
//! - the bank's total, in every read-only transaction and at the end;
//! - every acknowledged append is in its list, once; an append whose
//!   outcome is unknown is in all of its lists or in none; no other id is
//!   in any list;
//! - every list a committed transaction read is a prefix of the final
//!   list;
//! - the application saw no error (retryable ones are run again, up to
//!   50 times, as `Client.run` does).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use milliscale_client::Cluster;
use milliscale_milana::shard_map::MapStore;
use milliscale_milana::types::split_cluster_key;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::cluster_change::{cli, said};
use super::shard_kill::{Proc, free_port, logs, primary, url};

const ACCOUNTS: u32 = 12;
const INITIAL: i64 = 100;
const LISTS: u32 = 16;

fn account(i: u32) -> Vec<u8> {
    format!("a{i:02}").into_bytes()
}

fn list(i: u32) -> Vec<u8> {
    format!("l{i:02}").into_bytes()
}

fn ids(v: Option<Vec<u8>>) -> Vec<u64> {
    let text = v.map(|b| String::from_utf8(b).expect("utf8")).unwrap_or_default();
    text.split(',').filter(|s| !s.is_empty()).map(|s| s.parse().expect("an id")).collect()
}

fn amount(v: Option<Vec<u8>>) -> i64 {
    v.map_or(INITIAL, |b| String::from_utf8(b).expect("utf8").parse().expect("a number"))
}

/// What one client saw.
#[derive(Default)]
struct History {
    /// Committed appends: id, its lists.
    appended: Vec<(u64, Vec<u32>)>,
    /// Appends whose outcome is not known.
    unknown: Vec<(u64, Vec<u32>)>,
    /// Lists read by committed transactions.
    reads: Vec<(u32, Vec<u64>)>,
    /// Totals seen by read-only transactions.
    totals: Vec<i64>,
    transfers: u64,
    errors: Vec<String>,
}

/// One list-append transaction: read `keys`, append `id` to each.
async fn append(
    c: &Cluster,
    id: u64,
    keys: &[u32],
) -> milliscale_client::Result<Vec<(u32, Vec<u64>)>> {
    milliscale_client::retry(50, || async {
        let mut tx = c.begin();
        let mut seen = Vec::new();
        for &k in keys {
            let mut l = ids(tx.get("lists", &list(k)).await?);
            seen.push((k, l.clone()));
            l.push(id);
            let text: Vec<String> = l.iter().map(u64::to_string).collect();
            tx.put("lists", &list(k), text.join(",").as_bytes())?;
        }
        tx.commit().await?;
        Ok(seen)
    })
    .await
}

async fn transfer(c: &Cluster, from: u32, to: u32, n: i64) -> milliscale_client::Result<()> {
    milliscale_client::retry(50, || async {
        let mut tx = c.begin();
        let a = amount(tx.get("bank", &account(from)).await?);
        let b = amount(tx.get("bank", &account(to)).await?);
        tx.put("bank", &account(from), (a - n).to_string().as_bytes())?;
        tx.put("bank", &account(to), (b + n).to_string().as_bytes())?;
        tx.commit().await.map(|_| ())
    })
    .await
}

/// A read-only transaction: the bank's total and list `k`.
async fn audit(c: &Cluster, k: u32) -> milliscale_client::Result<(i64, Vec<u64>)> {
    milliscale_client::retry(50, || async {
        let mut tx = c.begin();
        let mut total = 0;
        for a in 0..ACCOUNTS {
            total += amount(tx.get("bank", &account(a)).await?);
        }
        let l = ids(tx.get("lists", &list(k)).await?);
        tx.commit().await?;
        Ok((total, l))
    })
    .await
}

async fn client(addr: String, id: u32, seed: u64, stop: Arc<AtomicBool>) -> History {
    let c = Cluster::builder(addr).client_id(id).connect().await.expect("a client");
    let mut rng = StdRng::seed_from_u64(seed ^ u64::from(id));
    let mut h = History::default();
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        let roll = rng.random_range(0..10);
        if roll < 5 {
            let txn = u64::from(id) * 1_000_000 + seq;
            let n = rng.random_range(1..=3);
            let mut keys: Vec<u32> = (0..n).map(|_| rng.random_range(0..LISTS)).collect();
            keys.sort_unstable();
            keys.dedup();
            match append(&c, txn, &keys).await {
                Ok(seen) => {
                    h.appended.push((txn, keys));
                    h.reads.extend(seen);
                }
                Err(e) if e.kind() == "unknown" => h.unknown.push((txn, keys)),
                Err(e) => h.errors.push(format!("append {txn}: {e}")),
            }
        } else if roll < 8 {
            let from = rng.random_range(0..ACCOUNTS);
            let to = (from + rng.random_range(1..ACCOUNTS)) % ACCOUNTS;
            match transfer(&c, from, to, rng.random_range(1..=5)).await {
                Ok(()) => h.transfers += 1,
                // An unknown outcome moves money or not, whole: the total holds.
                Err(e) if e.kind() == "unknown" => {}
                Err(e) => h.errors.push(format!("transfer: {e}")),
            }
        } else {
            let k = rng.random_range(0..LISTS);
            match audit(&c, k).await {
                Ok((total, l)) => {
                    h.totals.push(total);
                    h.reads.push((k, l));
                }
                Err(e) => h.errors.push(format!("audit: {e}")),
            }
        }
    }
    h
}

/// The mover: a split or a move at a time until stopped; (splits, moves)
/// done, and the moves refused or failed.
fn mover(map: &str, maps: &MapStore, seed: u64, stop: &AtomicBool) -> (u32, u32, Vec<String>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut splits, mut moves, mut failed) = (0, 0, Vec::new());
    while !stop.load(Ordering::Relaxed) {
        let m = maps.latest().expect("map").expect("a map");
        if rng.random_bool(0.3) && m.ranges.len() < 24 {
            let at = if rng.random_bool(0.5) {
                format!("bank=a{:02}", rng.random_range(1..ACCOUNTS))
            } else {
                format!("lists=l{:02}", rng.random_range(1..LISTS))
            };
            // A split where a range begins already is refused: fine.
            if cli(&["cluster", "split", "--map", map, "--at", &at]).status.success() {
                splits += 1;
            }
        } else {
            // A range of `bank` or `lists` that begins at a key.
            let movable: Vec<(String, u32)> = m
                .ranges
                .iter()
                .filter_map(|(start, owner)| {
                    let (t, k) = split_cluster_key(start)?;
                    ((t == "bank" || t == "lists") && !k.is_empty())
                        .then(|| (format!("{t}={}", String::from_utf8_lossy(k)), *owner))
                })
                .collect();
            if let Some((range, owner)) = movable.get(rng.random_range(0..movable.len().max(1))) {
                let to = (owner + rng.random_range(1..3)) % 3;
                let o = cli(&[
                    "cluster",
                    "move",
                    "--map",
                    map,
                    "--range",
                    range,
                    "--to",
                    &to.to_string(),
                ]);
                if o.status.success() {
                    moves += 1;
                } else {
                    failed.push(said(&o));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(rng.random_range(20..120)));
    }
    (splits, moves, failed)
}

/// One seed: a fresh cluster, `secs` seconds of the workloads under the
/// mover, and the checks.
fn run_seed(dir: &Path, seed: u64, secs: u64) {
    let map = url(dir, "map");
    let mut init: Vec<String> = ["cluster", "init", "--map", &map].map(String::from).to_vec();
    for s in 0..3 {
        init.extend([
            "--shard".into(),
            format!("{}={}", free_port(), url(dir, &format!("shard{s}"))),
        ]);
    }
    for at in ["bank=a04", "bank=a08", "lists=l05", "lists=l10"] {
        init.extend(["--split".into(), at.into()]);
    }
    let args: Vec<&str> = init.iter().map(String::as_str).collect();
    assert!(cli(&args).status.success());
    let _shards: Vec<Proc> = (0..3).map(|s| primary(dir, s)).collect();
    let maps = MapStore::new(milliscale::store::open(&map).expect("store"), "");
    let addr = maps.latest().expect("map").expect("a map").shards[&0].addr.clone();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let c = Cluster::builder(addr.clone()).client_id(90).connect().await.expect("client");
        c.create_table("bank").await.expect("bank");
        c.create_table("lists").await.expect("lists");
    });
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> =
        (1..=4).map(|id| rt.spawn(client(addr.clone(), id, seed, Arc::clone(&stop)))).collect();
    let (splits, moves, failed) = std::thread::scope(|s| {
        let moving = s.spawn(|| mover(&map, &maps, seed, &stop));
        std::thread::sleep(Duration::from_secs(secs));
        stop.store(true, Ordering::Relaxed);
        moving.join().expect("the mover")
    });
    let histories: Vec<History> = rt.block_on(async { futures_join(clients).await });
    let (finals, total) = rt.block_on(async {
        let c = Cluster::builder(addr).client_id(91).connect().await.expect("client");
        let mut finals = BTreeMap::new();
        for k in 0..LISTS {
            let key = list(k);
            let v = milliscale_client::retry(50, || c.get("lists", &key)).await;
            finals.insert(k, ids(v.expect("a final list")));
        }
        (finals, audit(&c, 0).await.expect("the final total").0)
    });

    let errors: Vec<&String> = histories.iter().flat_map(|h| &h.errors).collect();
    assert!(errors.is_empty(), "seed {seed}: the clients saw errors: {errors:?}\n{}", logs(dir));
    assert_eq!(total, INITIAL * i64::from(ACCOUNTS), "seed {seed}: the final total");
    for h in &histories {
        for t in &h.totals {
            assert_eq!(*t, INITIAL * i64::from(ACCOUNTS), "seed {seed}: a total seen");
        }
    }
    let mut known: BTreeSet<u64> = BTreeSet::new();
    for (k, l) in &finals {
        let unique: BTreeSet<u64> = l.iter().copied().collect();
        assert_eq!(unique.len(), l.len(), "seed {seed}: an id twice in list {k}: {l:?}");
    }
    for h in &histories {
        for (id, keys) in &h.appended {
            known.insert(*id);
            for k in keys {
                assert!(
                    finals[k].contains(id),
                    "seed {seed}: acknowledged append {id} lost from list {k}"
                );
            }
        }
        for (id, keys) in &h.unknown {
            known.insert(*id);
            let present: Vec<bool> = keys.iter().map(|k| finals[k].contains(id)).collect();
            assert!(
                present.iter().all(|p| *p) || present.iter().all(|p| !*p),
                "seed {seed}: append {id} of unknown outcome in some of its lists only"
            );
        }
        for (k, seen) in &h.reads {
            assert!(
                finals[k].starts_with(seen),
                "seed {seed}: a read of list {k} ({seen:?}) is not a prefix of {:?}",
                finals[k]
            );
        }
    }
    for (k, l) in &finals {
        for id in l {
            assert!(
                known.contains(id),
                "seed {seed}: list {k} holds {id}, which no client committed"
            );
        }
    }
    let appends: usize = histories.iter().map(|h| h.appended.len()).sum();
    let reads: usize = histories.iter().map(|h| h.reads.len()).sum();
    let transfers: u64 = histories.iter().map(|h| h.transfers).sum();
    let audits: usize = histories.iter().map(|h| h.totals.len()).sum();
    eprintln!(
        "seed {seed}: {splits} splits and {moves} moves ({} refused or failed); {appends} appends, \
         {reads} list reads, {transfers} transfers and {audits} audits checked",
        failed.len()
    );
    assert!(moves >= 3, "seed {seed}: only {moves} moves: {failed:?}");
    assert!(appends > 50 && transfers > 20, "seed {seed}: too little work");
}

async fn futures_join(handles: Vec<tokio::task::JoinHandle<History>>) -> Vec<History> {
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("a client"));
    }
    out
}

#[test]
fn bank_and_list_append_histories_hold_while_ranges_split_and_move() {
    let seeds: Vec<u64> = std::env::var("MILLISCALE_HISTORY_SEEDS")
        .ok()
        .map(|s| s.split(',').map(|x| x.trim().parse().expect("a seed")).collect())
        .unwrap_or_else(|| vec![1, 2, 3]);
    let secs =
        std::env::var("MILLISCALE_HISTORY_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(6);
    for seed in seeds {
        let dir = tempfile::tempdir().expect("dir");
        run_seed(dir.path(), seed, secs);
    }
}
