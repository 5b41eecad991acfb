//! A cluster grows under a writer: two shards holding 2,000 rows, two
//! more added with `cluster add-shard`, then `cluster rebalance on`. The
//! rebalancer (in the shard holding the map's lease) splits and moves
//! ranges until the four hold rows within a fifth of the mean of each
//! other; the writer sees no error, and every write it was told committed
//! reads back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use milliscale_client::{Batch, Client, Cluster, proto};
use milliscale_milana::shard_map::MapStore;

use super::cluster_change::{add_shard, cli, said};
use super::shard_kill::{Proc, free_port, logs, primary, url};

const ROWS: u64 = 2_000;

fn key(i: u64) -> Vec<u8> {
    format!("k{i:04}").into_bytes()
}

/// Each shard's rows (its ranges' loads), or `None` while a move is in
/// flight or a shard does not answer.
async fn rows(maps: &MapStore) -> Option<BTreeMap<u32, u64>> {
    let map = maps.latest().ok()??;
    let mut out = BTreeMap::new();
    for (s, info) in &map.shards {
        let c = Client::connect(info.addr.clone()).await.ok()?;
        let req = proto::ShardInfoRequest { loads: true, ..Default::default() };
        let i = c.shard_info(req).await.ok()?;
        if !i.moving.is_empty() {
            return None;
        }
        out.insert(*s, i.loads.iter().map(|l| l.rows).sum());
    }
    Some(out)
}

#[test]
fn the_rebalancer_spreads_the_rows_over_added_shards_while_a_client_writes() {
    let dir = tempfile::tempdir().expect("dir");
    let d = dir.path();
    let map = url(d, "map");
    let mut init: Vec<String> =
        ["cluster", "init", "--map", &map, "--split", "kv=k1000"].map(String::from).to_vec();
    for s in 0..2 {
        init.extend([
            "--shard".into(),
            format!("{}={}", free_port(), url(d, &format!("shard{s}"))),
        ]);
    }
    let args: Vec<&str> = init.iter().map(String::as_str).collect();
    assert!(cli(&args).status.success());
    let mut shards: Vec<Proc> = (0..2).map(|s| primary(d, s)).collect();
    let maps = MapStore::new(milliscale::store::open(&map).expect("store"), "");
    let addr = maps.latest().expect("map").expect("a map").shards[&0].addr.clone();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let c = rt.block_on(async {
        let c = Cluster::builder(addr).client_id(7).connect().await.expect("client");
        c.create_table("kv").await.expect("create");
        for chunk in 0..ROWS / 100 {
            let mut b = Batch::new();
            for i in chunk * 100..(chunk + 1) * 100 {
                b.put("kv", &key(i), b"0");
            }
            c.execute(b.retries(8)).await.expect("load");
        }
        c
    });
    // The writer: one key a batch, in turn, each its sequence number.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (c, stop) = (c.clone(), Arc::clone(&stop));
        rt.spawn(async move {
            let (mut acked, mut errors, mut i) = (BTreeMap::new(), Vec::new(), 0u64);
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let k = key(i * 7 % ROWS);
                let mut b = Batch::new();
                b.put("kv", &k, i.to_string().as_bytes());
                match c.execute(b.retries(8)).await {
                    Ok(_) => {
                        acked.insert(k, i);
                    }
                    Err(e) => errors.push(format!("write {i}: {e}")),
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            (acked, errors, i)
        })
    };

    for s in 2..4 {
        add_shard(&map, &url(d, &format!("shard{s}")));
        shards.push(primary(d, s));
    }
    let on = cli(&["cluster", "rebalance", "on", "--map", &map, "--split-rows", "400"]);
    assert!(on.status.success(), "{}", said(&on));
    let since = Instant::now();
    let spread = rt.block_on(async {
        loop {
            if let Some(r) = rows(&maps).await {
                let (max, min) = (r.values().max().copied(), r.values().min().copied());
                let mean = r.values().sum::<u64>() / r.len() as u64;
                if r.len() == 4 && max.zip(min).is_some_and(|(a, b)| (a - b) * 5 <= mean) {
                    return r;
                }
            }
            assert!(since.elapsed() < Duration::from_secs(120), "not balanced\n{}", logs(d));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let balanced = since.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (acked, errors, sent) = rt.block_on(writer).expect("writer");
    assert!(errors.is_empty(), "the writer saw errors: {errors:?}\n{}", logs(d));
    let version = maps.latest().expect("map").expect("a map").version;
    eprintln!(
        "balanced in {balanced:?} (map version {version}): rows per shard {spread:?}; {sent} \
         writes, all acknowledged"
    );
    rt.block_on(async {
        let c =
            Cluster::builder(maps.latest().expect("map").expect("a map").shards[&3].addr.clone())
                .client_id(8)
                .connect()
                .await
                .expect("client");
        for (k, v) in &acked {
            let got = milliscale_client::retry(20, || c.get("kv", k)).await.expect("read back");
            assert_eq!(got, Some(v.to_string().into_bytes()), "key {k:?}");
        }
    });
    // Each decision is told with its reason, on the lease holder's stderr.
    let told: String = std::fs::read_dir(d)
        .expect("dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("primary"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    assert!(told.contains("moving") && told.contains("(mean "), "no decision told:\n{told}");
}
