//! One-shot batches racing on one shard's keys: a shard reads a batch's
//! rows outside its lock, between the read marks and the prepare; a
//! version installed in between must refuse the batch, or two batches
//! would both overwrite the same value (a lost update). And a version the
//! single-shard fast path installed before it is durable is not told to a
//! reader until it is.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use milliscale::{AsyncDatabase, Options};
use milliscale_client::{Batch, Cluster};
use milliscale_milana::shard_map::{MapStore, ShardInfo, ShardMap};
use milliscale_server::shard::ShardOptions;
use milliscale_server::{Backend, Server, ServerOptions};
use objstore::MemoryStore;
use objstore::sim::{Faults, SimStore};

use crate::cluster::{TABLE, account, free_addr, three_shards};

/// Per key: (the value read, the value written) of each committed batch.
type Seen = HashMap<Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>>;

/// 8 tasks, each running batches of "get k, then put k = a new id" on two
/// keys of shard 0 (a00..a03 are its own) until 150 have committed each.
/// The oracle: on each key, every value was read by at most one
/// committed batch, and the committed batches' reads and writes form one
/// chain from the first value to the last (a serial order of them all).
/// The batches that arrive together at the shard run as a group
/// (`Shard::execute_together`), the others alone: it prints how many
/// committed in groups (about a quarter here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_read_modify_write_batches_on_one_shard_lose_no_update() {
    const TASKS: u64 = 8;
    const EACH: u64 = 150;
    let f = three_shards().await;
    let c = Cluster::connect(f.addrs[0].to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    let keys = [account(0), account(2)];
    for k in &keys {
        c.put(TABLE, k, b"start").await.expect("the first value");
    }
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (c, seen, keys) = (c.clone(), Arc::clone(&seen), keys.clone());
        tasks.push(tokio::spawn(async move {
            let (mut done, mut refused) = (0u64, 0u64);
            while done < EACH {
                let k = &keys[((t + done + refused) % 2) as usize];
                let id = format!("t{t}-{done}-{refused}").into_bytes();
                let mut b = Batch::new();
                b.get(TABLE, k).put(TABLE, k, &id);
                match c.execute(b.retries(0)).await {
                    Ok(r) => {
                        let read = r.value(0).expect("every key has a value").to_vec();
                        seen.lock().unwrap().entry(k.clone()).or_default().push((read, id));
                        done += 1;
                    }
                    Err(e) if e.is_retryable() => refused += 1,
                    Err(e) => panic!("a batch failed: {e}"),
                }
            }
            refused
        }));
    }
    let mut refused = 0;
    for t in tasks {
        refused += t.await.expect("a task");
    }
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    for k in &keys {
        let pairs = &seen[k];
        let mut next: HashMap<&[u8], &[u8]> = HashMap::new();
        for (read, wrote) in pairs {
            let twice = next.insert(read, wrote);
            assert!(twice.is_none(), "two committed batches read {read:?} of {k:?}: a lost update");
        }
        // From "start", each value leads to the one written after reading
        // it, through every committed batch, to the key's value now.
        let (mut at, mut steps, mut visited) = (&b"start"[..], 0, HashSet::new());
        while let Some(w) = next.get(at) {
            assert!(visited.insert(*w), "a cycle in {k:?}'s chain");
            at = w;
            steps += 1;
        }
        assert_eq!(steps, pairs.len(), "every committed batch of {k:?} is in one chain");
        let now = c.get(TABLE, k).await.expect("read");
        assert_eq!(now.as_deref(), Some(at), "the chain ends at {k:?}'s value");
    }
    let mut s0 = crate::cluster::raw(f.addrs[0]).await;
    let info = s0.shard_info(milliscale_proto::v1::ShardInfoRequest::default()).await;
    let together = info.expect("info").into_inner().batches_together;
    eprintln!(
        "{} batches committed ({together} of them in groups), {refused} refused and run again",
        TASKS * EACH
    );
}

/// A shard commits a lone transaction in memory at once and writes its
/// prepare and commit in one engine transaction: until that is durable, a
/// crash takes the version back. Here the shard's store refuses every
/// request for a while, so the write of A's batch stays undurable; B's
/// read-only batch, at a later timestamp, must not return A's value
/// before A's write is durable (then A's answer is on its way too).
/// Seen failing with the shard answering reads of fresh versions at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_of_a_version_not_yet_durable_waits_until_it_is() {
    const OUTAGE: Duration = Duration::from_millis(600);
    let dir = tempfile::tempdir().expect("tempdir");
    let map_url = format!("file://{}/map", dir.path().display());
    let addr = free_addr();
    let maps = MapStore::new(milliscale::store::open(&map_url).expect("map store"), "");
    let info = ShardInfo { addr: addr.to_string(), log: "memory://".into() };
    let map = ShardMap {
        version: 1,
        ranges: vec![(Vec::new(), 0)],
        shards: [(0, info)].into(),
        rebalance: None,
        split_load: None,
    };
    maps.publish(&map).expect("publish");
    let sim = Arc::new(
        SimStore::new(Arc::new(MemoryStore::new()), "io2", Faults::default()).expect("sim"),
    );
    let db = AsyncDatabase::open(
        Options::new().add_store_handle(sim.clone()).flush_timeout(Duration::from_millis(1)),
    )
    .await
    .expect("open");
    let mut o = ServerOptions::new(addr);
    let mut shard = ShardOptions::new(0, map_url);
    // A read lease of a minute (µs): every read below is covered by the
    // first read's, none waits for a renewal during the store's outage.
    shard.lease_span = 60_000_000;
    o.cluster = Some(shard);
    let _server = Server::start(Backend::Writer(db), o, None).await.expect("start a shard");
    let c = Cluster::connect(addr.to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    let k = account(0);
    c.put(TABLE, &k, b"before").await.expect("the first value");
    // A read now: the read lease covers the reads below.
    assert_eq!(c.get(TABLE, &k).await.expect("read").as_deref(), Some(&b"before"[..]));

    // B reads in a batch (`ShardExecute`), then in a transaction
    // (`ShardRead`).
    for (round, value) in [b"after".as_slice(), b"again"].into_iter().enumerate() {
        sim.set_unavailable_for(OUTAGE);
        let started = Instant::now();
        let (writer, key) = (c.clone(), k.clone());
        let a = tokio::spawn(async move {
            let mut b = Batch::new();
            b.put(TABLE, &key, value);
            writer.execute(b.retries(0)).await.expect("A commits once the store is back");
            started.elapsed()
        });
        // A's batch is installed at the shard by now, its write not durable.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let read = if round == 0 {
            let mut b = Batch::new();
            b.get(TABLE, &k);
            c.execute(b).await.expect("B's batch").value(0).map(<[u8]>::to_vec)
        } else {
            let mut tx = c.begin();
            let v = tx.get(TABLE, &k).await.expect("B's read");
            tx.commit().await.expect("B's commit");
            v
        };
        let b_done = started.elapsed();
        let a_done = a.await.expect("A's task");
        assert_eq!(read.as_deref(), Some(value), "B began after A's version: it reads it");
        assert!(
            b_done >= OUTAGE.mul_f64(0.9),
            "B (round {round}) was told A's value after {b_done:?}, before A's write could be \
             durable (the store was down for {OUTAGE:?}; A was acknowledged after {a_done:?})"
        );
    }
}

/// A key or value over its limit is refused by the cluster client before
/// anything is sent, on every path, naming the limit, and is not retried
/// (a 40 MiB value used to be sent whole and come back UNAVAILABLE).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_values_over_their_limits_are_refused_before_they_are_sent() {
    let f = three_shards().await;
    let c = Cluster::connect(f.addrs[0].to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    let huge = vec![7u8; 40 << 20];
    let long_key = vec![1u8; 1025];
    let mut tx = c.begin();
    let errors = [
        c.put(TABLE, &account(1), &huge).await.expect_err("40 MiB"),
        c.put(TABLE, &long_key, b"v").await.expect_err("a long key"),
        c.execute(Batch::new().put(TABLE, &account(2), &huge).clone()).await.expect_err("a batch"),
        tx.put(TABLE, &account(3), &huge).expect_err("in a transaction"),
    ];
    for e in errors {
        assert_eq!((e.code(), e.is_retryable()), (tonic::Code::InvalidArgument, false), "{e}");
        assert!(e.message().contains("262144") || e.message().contains("1024"), "{e}");
    }
    assert_eq!(c.get(TABLE, &account(1)).await.expect("read"), None);
}
