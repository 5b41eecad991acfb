//! A range frozen on its shard for a move (design record 0009): from the
//! freeze on, no read, scan, prepare or one-shot batch that touches it is
//! served there, across a restart too; the freeze answers only once the
//! transaction prepared there before it is decided; lifted, the range is
//! served again, with what that transaction wrote.

use std::time::Duration;

use milliscale_client::{Batch, Cluster, KeyRange};
use milliscale_milana::types::cluster_key;
use milliscale_proto::v1 as proto;

use crate::cluster::{TABLE, account, prepare, raw, start_shard, three_shards, txn};

fn freeze(start: u32, end: u32, unfreeze: bool) -> proto::ShardFreezeRequest {
    proto::ShardFreezeRequest {
        start: cluster_key(TABLE, &account(start)).into(),
        end: cluster_key(TABLE, &account(end)).into(),
        to: 1,
        map_version: 2,
        unfreeze,
    }
}

/// A one-shot batch reading `key`, run once: its error's kind, if any.
async fn get_kind(c: &Cluster, key: u32) -> Option<String> {
    let mut b = Batch::new();
    b.get(TABLE, &account(key));
    c.execute(b).await.err().map(|e| e.kind().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_range_is_served_no_more_until_unfrozen_even_across_a_restart() {
    let mut f = three_shards().await;
    let c = Cluster::builder(f.addrs[0].to_string()).client_id(5).connect().await.expect("client");
    c.create_table(TABLE).await.expect("create");
    let mut b = Batch::new();
    for i in 0..4 {
        b.put(TABLE, &account(i), b"1");
    }
    c.execute(b).await.expect("write a00..a03 (shard 0's)");

    // A transaction across shards 0 and 1, prepared on shard 0 (writing
    // a03) before the freeze of [a02, a04): the freeze waits for it.
    let mut r0 = raw(f.addrs[0]).await;
    let p = prepare(77, 1, account(3), vec![0, 1]);
    let ts = p.version.as_ref().expect("a version").ts;
    assert!(r0.shard_prepare(p).await.expect("prepare").into_inner().yes);
    let freezing = {
        let mut r = r0.clone();
        tokio::spawn(async move { r.shard_freeze(freeze(2, 4, false)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!freezing.is_finished(), "the freeze answered with a prepared write in the range");
    // Frozen already: a read of a02 is refused (as a wrong shard, which
    // is retryable); a00 outside the range is served.
    assert_eq!(get_kind(&c, 2).await.as_deref(), Some("wrong_shard"));
    assert_eq!(get_kind(&c, 0).await, None);
    let decide = proto::ShardDecideRequest { txn: txn(77, 1), commit: true, ts };
    r0.shard_decide(decide).await.expect("decide");
    let lease = tokio::time::timeout(Duration::from_secs(5), freezing)
        .await
        .expect("the freeze answers once the prepared write is decided")
        .expect("task")
        .expect("freeze")
        .into_inner()
        .lease;
    assert!(lease > ts, "the read lease {lease} covers the reads served");

    // Nothing touching the range is served: a read in a transaction, a
    // scan over it, a prepare writing in it.
    let mut tx = c.begin();
    let err = tx.get(TABLE, &account(3)).await.expect_err("a read in the frozen range");
    assert_eq!(err.kind(), "wrong_shard");
    assert!(err.is_retryable());
    let mut tx = c.begin();
    assert!(tx.scan(TABLE, KeyRange::default()).await.is_err(), "a scan over the frozen range");
    let st = r0.shard_prepare(prepare(77, 2, account(2), vec![0])).await;
    assert_eq!(
        st.expect_err("a prepare in the frozen range").code(),
        tonic::Code::FailedPrecondition
    );
    // Freezing again is answered again; an overlapping range is refused.
    r0.shard_freeze(freeze(2, 4, false)).await.expect("the same freeze again");
    assert!(r0.shard_freeze(freeze(1, 3, false)).await.is_err(), "an overlapping freeze");

    // Still frozen after a restart.
    let (server, db) = f.servers[0].take().expect("shard 0");
    server.shutdown().await;
    db.close().await.expect("close");
    f.servers[0] = Some(start_shard(&f, 0).await);
    assert_eq!(get_kind(&c, 2).await.as_deref(), Some("wrong_shard"));
    assert_eq!(get_kind(&c, 1).await, None);

    // Lifted: served again, with the prepared transaction's write.
    let mut r0 = raw(f.addrs[0]).await;
    r0.shard_freeze(freeze(2, 4, true)).await.expect("unfreeze");
    let mut b = Batch::new();
    b.get(TABLE, &account(2)).get(TABLE, &account(3));
    let r = c.execute(b).await.expect("read a02 and a03");
    assert_eq!(r.value(0), Some(&b"1"[..]));
    assert_eq!(r.value(1), Some(&b"7"[..]));
}
