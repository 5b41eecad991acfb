//! What a shard tells the rebalancer about each range it owns (design
//! record 0009): its rows, a key near its middle, and the requests served
//! on its keys, counted as keys are read and written while the map has
//! the rebalancer look at load.

use milliscale_client::Batch;
use milliscale_milana::shard_map::{MapChange, MapStore, Thresholds};
use milliscale_milana::types::cluster_key;
use milliscale_proto::v1 as proto;

use crate::cluster::{TABLE, account, raw, three_shards};
use crate::cluster_freeze::client_with;

/// Shard `r`'s ranges: (first key, rows, requests).
async fn loads(r: &mut crate::cluster::Raw) -> Vec<(Vec<u8>, u64, u64)> {
    let req = proto::ShardInfoRequest { loads: true, ..Default::default() };
    let info = r.shard_info(req).await.expect("info").into_inner();
    info.loads.into_iter().map(|l| (l.start.to_vec(), l.rows, l.requests)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_counts_the_rows_and_requests_of_each_range_it_owns() {
    let f = three_shards().await;
    // a00..a03: shard 0's.
    let c = client_with(&f, &[(0, b"1"), (1, b"1"), (2, b"1"), (3, b"1")]).await;
    let mut r0 = raw(f.addrs[0]).await;
    let before = loads(&mut r0).await;
    assert_eq!(before.len(), 1, "shard 0 owns one range: {before:?}");
    assert_eq!(before[0].1, 4, "its rows");
    assert_eq!(before[0].2, 0, "no load counted while the rebalancer looks at rows only");
    // The rebalancer on, looking at load (thresholds far from this test's).
    let maps = MapStore::new(milliscale::store::open(&f.map_url).expect("the map's store"), "");
    let t = Thresholds { split_rows: 1 << 40, split_load: Some(1 << 40) };
    let m = maps.change(&MapChange::Rebalance(Some(t))).expect("the rebalancer on");
    for tries in 0.. {
        let req = proto::ShardMapRequest { at_least: m.version };
        if r0.shard_map(req).await.expect("map").into_inner().version >= m.version {
            break;
        }
        assert!(tries < 40, "shard 0 did not read map version {}", m.version);
        tokio::time::sleep(std::time::Duration::from_millis(60)).await;
    }
    let mut b = Batch::new();
    b.put(TABLE, &account(1), b"2").put(TABLE, &account(3), b"2");
    c.execute(b).await.expect("write a01 and a03");
    let (start, _, counted) = loads(&mut r0).await[0].clone();
    assert_eq!(counted, 2, "the two writes are counted");
    // Ten reads of a02: ten more requests on the range, none elsewhere.
    for _ in 0..10 {
        let mut b = Batch::new();
        b.get(TABLE, &account(2));
        c.execute(b).await.expect("read a02");
    }
    let after = loads(&mut r0).await;
    assert_eq!(after[0].0, start);
    assert_eq!(after[0].2, counted + 10, "each read counted once");
    let mut r1 = raw(f.addrs[1]).await;
    let other = loads(&mut r1).await;
    assert!(other.iter().all(|(_, rows, n)| *rows == 0 && *n == 0), "shard 1: {other:?}");
    assert!(cluster_key(TABLE, &account(2)) > start, "a02 is in the range");
}
