//! A call that waited while its range moved away (design record 0009).
//! A shard checks a call's keys against its map when the call arrives,
//! but serves it later, under its lock: after the read lease is durable,
//! and after a prepared write below the call's timestamp is decided
//! (up to the termination timeout). A range can be frozen, copied,
//! published elsewhere and released in between; then the freeze no longer
//! refuses it, and the rows are deleted here. Served anyway, a read finds
//! no row (an account of 5 read as absent: a bank total that no cut
//! holds), and a batch's write lands on a shard that no longer owns the
//! key (an acknowledged write the new owner never sees). Each must be
//! refused as a wrong shard where it is served, and run again by its
//! client at the new owner.

use std::time::Duration;

use milliscale_milana::shard_map::MapStore;
use milliscale_milana::types::cluster_key;
use milliscale_proto::v1 as proto;

use crate::cluster::{Raw, TABLE, account, now_us, prepare, raw, txn};
use crate::cluster_fixture::three_shards_keeping;
use crate::cluster_freeze::{client_with, copy, freeze, released};

/// Move `[a02, a04)` from shard 0 to shard 1 as `cluster move` does
/// (freeze, copy, publish map version 2, release), while shard 0 is
/// asked to serve other calls.
async fn move_a02_a04(map_url: &str, r0: &mut Raw, r1: &mut Raw) {
    let (start, end) = (cluster_key(TABLE, &account(2)), cluster_key(TABLE, &account(4)));
    let floor = r0.shard_freeze(freeze(2, 4, false)).await.expect("freeze").into_inner().floor;
    assert_eq!(copy(r0, r1, (&start, &end), floor, 2).await, 1, "a02's row copied");
    let maps = MapStore::new(milliscale::store::open(map_url).expect("the map's store"), "");
    let mut next = maps.latest().expect("map").expect("a map");
    next.version = 2;
    next.ranges.insert(1, (start.clone(), 1));
    maps.publish(&next).expect("publish version 2");
    let release = proto::ShardReleaseRequest { start: start.into(), end: end.into() };
    // The release reads the map again; the background may have let the
    // range go first.
    if let Err(st) = r0.shard_release(release).await {
        assert!(st.message().contains("no such range is frozen"), "{st:?}");
    }
    released(r0).await;
}

/// The kind of error a shard answered with.
fn kind(st: tonic::Status) -> String {
    milliscale_client::Error::from(st).kind().to_owned()
}

/// A read of a00 and a02 (shard 0's) waits for a prepared write of a00
/// below it; meanwhile [a02, a04) moves to shard 1 and shard 0 deletes
/// its rows. Once the write is decided, the read is refused as a wrong
/// shard, not answered with a02 absent. The same for a one-shot batch
/// that reads a00 and writes a02: refused, its write not installed on
/// shard 0, and shard 1 serves a02 as it was moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_waited_while_its_range_moved_away_is_refused_where_it_is_served() {
    // Prepared writes wait 20 s for their coordinator: the calls below
    // wait for the decision this test sends.
    let every = Duration::from_millis(200);
    let f =
        three_shards_keeping(every, Duration::from_secs(30), None, Duration::from_secs(20)).await;
    let c = client_with(&f, &[(0, b"1"), (2, b"5")]).await;
    let (mut r0, mut r1) = (raw(f.addrs[0]).await, raw(f.addrs[1]).await);
    // A write of a00 prepared on shards 0 and 1 (so not committed alone),
    // by a coordinator that says nothing until told.
    let p = prepare(80, 1, account(0), vec![0, 1]);
    assert!(r0.shard_prepare(p).await.expect("prepare").into_inner().yes);

    let key = |k: u32| proto::TableKey { table: TABLE.into(), key: account(k).into() };
    let at = now_us() + 1_000;
    let read = proto::ShardReadRequest { keys: vec![key(2), key(0)], at, client: 81, low_water: 0 };
    let reading = tokio::spawn({
        let mut r0 = r0.clone();
        async move { r0.shard_read(read).await }
    });
    let op = |op| proto::Operation { table: String::new(), op: Some(op) };
    let batch = proto::ShardExecuteRequest {
        txn: txn(82, 1),
        at,
        version: Some(proto::CommitTs { ts: at + 1, client: 82 }),
        operations: vec![
            op(proto::operation::Op::Get(account(0).into())),
            op(proto::operation::Op::Put(proto::Row { key: account(2).into(), value: "9".into() })),
        ],
        table: TABLE.into(),
        client: 82,
        low_water: 0,
    };
    let writing = tokio::spawn({
        let mut r0 = r0.clone();
        async move { r0.shard_execute(batch).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!reading.is_finished() && !writing.is_finished(), "both wait for the decision");

    move_a02_a04(&f.map_url, &mut r0, &mut r1).await;
    assert!(!reading.is_finished() && !writing.is_finished(), "both wait through the move");
    let decide = proto::ShardDecideRequest { txn: txn(80, 1), commit: false, ts: 0 };
    r0.shard_decide(decide).await.expect("decide");

    let mut served = Vec::new();
    match reading.await.expect("task") {
        Ok(r) => served.push(format!("a read after a02 moved away: {:?}", r.into_inner())),
        Err(st) => assert_eq!(kind(st), "wrong_shard", "the read"),
    }
    match writing.await.expect("task") {
        Ok(r) => served.push(format!("a write of a02 after it moved away: {:?}", r.into_inner())),
        Err(st) => assert_eq!(kind(st), "wrong_shard", "the batch"),
    }
    assert!(served.is_empty(), "shard 0 served {served:#?}");
    assert_eq!(c.get(TABLE, &account(2)).await.expect("a02 at shard 1"), Some(b"5".to_vec()));
    assert_eq!(c.get(TABLE, &account(0)).await.expect("a00"), Some(b"1".to_vec()), "aborted");
}
