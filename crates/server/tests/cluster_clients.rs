//! A cluster client's low-water mark as its shards see it: a client that
//! closes (`Cluster::close`, `ShardLeave`) stops holding back what they
//! collect at once, not after their client silence (10 s here).

use std::time::{Duration, Instant};

use milliscale_client::Cluster;
use milliscale_proto::v1 as proto;

use crate::cluster::{TABLE, account, raw, three_shards};

/// Decided transactions shard 0 remembers once client `reader` has read
/// (so that its mark is fresh) for up to `wait`, stopping early below 10.
async fn remembered_after(addr: std::net::SocketAddr, reader: &Cluster, wait: Duration) -> u64 {
    let mut s0 = raw(addr).await;
    let t = Instant::now();
    loop {
        reader.get(TABLE, &account(0)).await.expect("a read");
        let info = s0.shard_info(proto::ShardInfoRequest::default()).await.expect("info");
        let remembered = info.into_inner().remembered;
        if remembered < 10 || t.elapsed() > wait {
            return remembered;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_closes_stops_holding_the_shards_watermark() {
    let f = three_shards().await;
    let addr = f.addrs[0].to_string();
    // (None leaves by itself when idle: `idle_leave(None)`.)
    let client = |id| Cluster::builder(addr.clone()).client_id(id).idle_leave(None).connect();
    let gone = client(1).await.expect("connect");
    let stays = client(2).await.expect("connect");
    let silent = client(3).await.expect("connect");
    gone.create_table(TABLE).await.expect("create");
    // Each client is heard by shard 0 (account 0 is its key): a read
    // carries the client's mark (a blind write carries none).
    gone.put(TABLE, &account(0), b"0").await.expect("a write");
    for c in [&gone, &stays, &silent] {
        assert_eq!(c.get(TABLE, &account(0)).await.expect("a read"), Some(b"0".to_vec()));
    }
    // Silent stops without a word: its mark holds shard 0's watermark for
    // the client silence, and with it every decision taken meanwhile.
    for i in 0..40u32 {
        stays.put(TABLE, &account(0), i.to_string().as_bytes()).await.expect("a write");
    }
    let held = remembered_after(f.addrs[0], &stays, Duration::from_secs(1)).await;
    assert!(held >= 40, "a silent client's mark held nothing back: {held} remembered");
    // Closing while a transaction is under way sends nothing.
    let open = silent.begin();
    assert!(!silent.close().await, "closed with a transaction under way");
    drop(open);
    // Both leave; the stayer's own decisions below its mark go at once.
    assert!(silent.close().await && gone.close().await);
    let left = remembered_after(f.addrs[0], &stays, Duration::from_secs(3)).await;
    assert!(left < 10, "{left} decisions remembered after the other clients left");
    // A client that left and comes back counts again, as a new client.
    gone.put(TABLE, &account(0), b"back").await.expect("a write after leaving");
    assert_eq!(stays.get(TABLE, &account(0)).await.expect("a read"), Some(b"back".to_vec()));
}

/// A client idle for its `idle_leave` leaves by itself, and one dropped
/// leaves from a task: neither holds the watermark for the silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_or_dropped_client_leaves_by_itself() {
    let f = three_shards().await;
    let addr = f.addrs[0].to_string();
    let client = |id, idle| Cluster::builder(addr.clone()).client_id(id).idle_leave(idle).connect();
    let stays = client(2, None).await.expect("connect");
    let idle = client(3, Some(Duration::from_millis(300))).await.expect("connect");
    let dropped = client(4, None).await.expect("connect");
    stays.create_table(TABLE).await.expect("create");
    stays.put(TABLE, &account(0), b"0").await.expect("a write");
    for c in [&stays, &idle, &dropped] {
        assert_eq!(c.get(TABLE, &account(0)).await.expect("a read"), Some(b"0".to_vec()));
    }
    drop(dropped);
    for i in 0..40u32 {
        stays.put(TABLE, &account(0), i.to_string().as_bytes()).await.expect("a write");
    }
    let left = remembered_after(f.addrs[0], &stays, Duration::from_secs(3)).await;
    assert!(left < 10, "{left} decisions remembered with an idle and a dropped client");
    // The idle client is heard again at its next read.
    assert_eq!(idle.get(TABLE, &account(0)).await.expect("a read"), Some(b"39".to_vec()));
}
