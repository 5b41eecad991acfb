//! The shard map's changes that move no data (design record 0009), made
//! with the CLI while a client writes: a shard added (it takes the
//! cluster's tables from another as it starts), a range split, changes
//! the map refuses, and a shard that owns nothing removed. The client sees
//! no error, and every write it was told committed reads back.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use milliscale_client::{Batch, Client, Cluster};
use milliscale_milana::shard_map::MapStore;
use milliscale_milana::types::cluster_key;

use super::shard_kill::{BIN, Proc, free_port, logs, primary, url};

pub(super) const TABLE: &str = "kv";
const KEYS: u64 = 50;

fn key(i: u64) -> Vec<u8> {
    format!("k{:02}", i % KEYS).into_bytes()
}

pub(super) fn cli(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run the CLI")
}

pub(super) fn said(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Write one key a batch, in turn, each its sequence number, until
/// stopped: what the client was told committed (by key), the errors it
/// saw, and how many it sent.
pub(super) async fn write(
    c: Cluster,
    stop: Arc<AtomicBool>,
) -> (BTreeMap<Vec<u8>, u64>, Vec<String>, u64) {
    let mut acked = BTreeMap::new();
    let mut errors = Vec::new();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let mut b = Batch::new();
        b.put(TABLE, &key(i), i.to_string().as_bytes());
        match c.execute(b.retries(8)).await {
            Ok(_) => {
                acked.insert(key(i), i);
            }
            Err(e) => errors.push(format!("write {i}: {e}")),
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    (acked, errors, i)
}

/// Add a shard at a free port with its database at `store` to the map
/// at `map` (`cluster add-shard`).
pub(super) fn add_shard(map: &str, store: &str) {
    let add =
        cli(&["cluster", "add-shard", "--map", map, "--addr", &free_port(), "--store", store]);
    assert!(add.status.success(), "{}", said(&add));
}

/// Wait until `c`'s map is at `version` or later (the shards reload the
/// map every few seconds, or when asked for it and theirs is old).
pub(super) async fn map_at_least(c: &Cluster, version: u64) {
    let t = Instant::now();
    while c.map().version < version {
        assert!(t.elapsed() < Duration::from_secs(20), "the client's map stayed old");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = c.refresh().await;
    }
}

/// What a cluster test's writer returns ([`write`]).
pub(super) type Written = (BTreeMap<Vec<u8>, u64>, Vec<String>, u64);

/// A cluster of one shard, shard 0 (`kv` from `k00`, and all else),
/// started in `d`: its process, the map's store and its URL.
pub(super) fn one_shard(d: &Path) -> (Proc, MapStore, String) {
    let map = url(d, "map");
    let shard0 = format!("{}={}", free_port(), url(d, "shard0"));
    let init = cli(&["cluster", "init", "--map", &map, "--shard", &shard0, "--split", "kv=k00"]);
    assert!(init.status.success(), "{}", said(&init));
    let p0 = primary(d, 0);
    let maps = MapStore::new(milliscale::store::open(&map).expect("the map's store"), "");
    (p0, maps, map)
}

/// A client of the cluster through `addr` that created the table (with
/// the map that shard has now), and its writer ([`write`]) started.
pub(super) fn writing(
    rt: &tokio::runtime::Runtime,
    addr: &str,
) -> (Cluster, Arc<AtomicBool>, tokio::task::JoinHandle<Written>) {
    let client = rt.block_on(async {
        let c = Cluster::builder(addr.to_owned()).client_id(7).connect().await.expect("client");
        c.create_table(TABLE).await.expect("create");
        c
    });
    let stop = Arc::new(AtomicBool::new(false));
    let writer = rt.spawn(write(client.clone(), Arc::clone(&stop)));
    std::thread::sleep(Duration::from_millis(300));
    (client, stop, writer)
}

#[test]
fn a_shard_joins_a_range_splits_and_an_empty_shard_leaves_while_a_client_writes() {
    let dir = tempfile::tempdir().expect("dir");
    let d = dir.path();
    let (_p0, maps, map) = one_shard(d);
    let addr0 = maps.latest().expect("map").expect("a map").shards[&0].addr.clone();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (client, stop, writer) = writing(&rt, &addr0);

    // A shard joins: in the map first, owning nothing; then started, it
    // takes the table from shard 0.
    let addr1 = free_port();
    let store1 = url(d, "shard1");
    let add = cli(&["cluster", "add-shard", "--map", &map, "--addr", &addr1, "--store", &store1]);
    assert!(add.status.success(), "{}", said(&add));
    assert!(said(&add).contains("version 2: shard 1 added"), "{}", said(&add));
    // Until it starts, the client's calls to every shard go on without it
    // (it owns nothing), at once.
    rt.block_on(async {
        map_at_least(&client, 2).await;
        let t = Instant::now();
        assert_eq!(client.list_tables().await.expect("list"), [TABLE]);
        assert!(t.elapsed() < Duration::from_secs(2), "listing waited {:?}", t.elapsed());
    });
    let _p1 = primary(d, 1);
    let joined = rt.block_on(async {
        let c = Client::connect(addr1.clone()).await.expect("shard 1");
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(20) {
            if c.list_tables().await.is_ok_and(|names| names.iter().any(|n| n == TABLE)) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    });
    assert!(joined, "shard 1 did not take the table\n{}", logs(d));
    // The same shard again is refused, as usage.
    let again = cli(&["cluster", "add-shard", "--map", &map, "--id", "1", "--addr", &addr1]);
    assert!(!again.status.success());
    let again =
        cli(&["cluster", "add-shard", "--map", &map, "--id", "1", "--addr", "x:1", "--store", "y"]);
    assert!(!again.status.success() && said(&again).contains("already"), "{}", said(&again));

    // A split under the writer: every key keeps its owner.
    let split = cli(&["cluster", "split", "--map", &map, "--at", "kv=k25"]);
    assert!(split.status.success(), "{}", said(&split));
    assert!(said(&split).contains("version 3"), "{}", said(&split));
    let m = maps.latest().expect("map").expect("a map");
    assert_eq!(m.shard_of(&cluster_key(TABLE, b"k25")), 0);
    assert!(m.ranges.iter().any(|(k, _)| *k == cluster_key(TABLE, b"k25")));
    let twice = cli(&["cluster", "split", "--map", &map, "--at", "kv=k25"]);
    assert!(!twice.status.success(), "{}", said(&twice));
    assert!(said(&twice).contains("already begins"), "{}", said(&twice));
    let bad = cli(&["cluster", "split", "--map", &map, "--at", "k25"]);
    assert!(!bad.status.success() && said(&bad).contains("TABLE=KEY"), "{}", said(&bad));

    // A shard that owns a range cannot leave; one that owns none can.
    let owner = cli(&["cluster", "remove-shard", "--map", &map, "--id", "0"]);
    assert!(!owner.status.success() && said(&owner).contains("owns"), "{}", said(&owner));
    rt.block_on(async {
        map_at_least(&client, 3).await;
        assert_eq!(client.list_tables().await.expect("list"), [TABLE]);
        let status = client.status().await;
        let one = status.iter().find(|s| s.shard == 1).expect("shard 1 in the status");
        assert!(one.ranges.is_empty() && one.error.is_none(), "{one}");
    });
    let gone = cli(&["cluster", "remove-shard", "--map", &map, "--id", "1"]);
    assert!(gone.status.success(), "{}", said(&gone));
    drop(_p1);
    std::thread::sleep(Duration::from_millis(300));

    stop.store(true, Ordering::Relaxed);
    let (acked, errors, sent) = rt.block_on(writer).expect("writer");
    assert!(errors.is_empty(), "the client saw errors: {errors:?}\n{}", logs(d));
    assert!(sent > 100, "only {sent} writes");
    eprintln!("{sent} writes, all acknowledged, over map versions 1-4");
    // Every write acknowledged reads back, through a client that opens
    // the cluster afresh.
    rt.block_on(async {
        let c = Cluster::builder(addr0).client_id(8).connect().await.expect("client");
        map_at_least(&c, 4).await;
        assert!(!c.map().shards.contains_key(&1));
        assert_eq!(c.list_tables().await.expect("list"), [TABLE]);
        let mut b = Batch::new();
        for k in acked.keys() {
            b.get(TABLE, k);
        }
        let r = c.execute(b).await.expect("read back");
        for (i, (k, v)) in acked.iter().enumerate() {
            assert_eq!(r.value(i), Some(v.to_string().as_bytes()), "key {k:?}");
        }
    });
}
