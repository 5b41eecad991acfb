//! A range moved between two shards with `milliscale cluster move` while
//! a client writes (design record 0009), there, back, and there again,
//! then once more by a mover run again after one that stopped frozen:
//! the client sees no error, every write it was told committed reads back
//! from a client that opens the cluster afresh, and each shard ends up
//! holding only the rows of the ranges the map gives it.

use std::sync::atomic::Ordering;
use std::time::Duration;

use milliscale_client::{Batch, Client, Cluster, proto};
use milliscale_milana::types::cluster_key;

use super::cluster_change::{TABLE, add_shard, cli, map_at_least, one_shard, said, writing};
use super::shard_kill::{logs, primary, url};

#[test]
fn a_range_moves_there_and_back_while_a_client_writes() {
    let dir = tempfile::tempdir().expect("dir");
    let d = dir.path();
    let (_p0, maps, map) = one_shard(d);
    add_shard(&map, &url(d, "shard1"));
    let _p1 = primary(d, 1);
    let split = cli(&["cluster", "split", "--map", &map, "--at", "kv=k25"]);
    assert!(split.status.success(), "{}", said(&split));
    let m = maps.latest().expect("map").expect("a map");
    let (addr0, addr1) = (m.shards[&0].addr.clone(), m.shards[&1].addr.clone());
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // The table is created with whatever map shard 0 has now: shard 1 may
    // miss it, and a range moved there brings it.
    let (_client, stop, writer) = writing(&rt, &addr0);

    // There, back, there: versions 4, 5, 6.
    for (to, version) in [("1", 4), ("0", 5), ("1", 6)] {
        let moved = cli(&["cluster", "move", "--map", &map, "--range", "kv=k25", "--to", to]);
        assert!(moved.status.success(), "{}\n{}", said(&moved), logs(d));
        let says = said(&moved);
        assert!(says.contains(&format!("to shard {to}: map version {version}")), "{says}");
        eprint!("{says}");
        std::thread::sleep(Duration::from_millis(400));
        let listed = rt.block_on(async {
            Client::connect(addr1.clone()).await.expect("shard 1").list_tables().await
        });
        assert_eq!(listed.expect("list"), [TABLE], "shard 1 knows the table");
    }
    let m = maps.latest().expect("map").expect("a map");
    assert_eq!(m.shard_of(&cluster_key(TABLE, b"k30")), 1);
    assert_eq!(m.shard_of(&cluster_key(TABLE, b"k10")), 0);
    // Refused: a range that does not begin at the key, a shard the map
    // does not have, a move to where it is.
    for (range, to, why) in
        [("kv=k26", "0", "split"), ("kv=k25", "9", "no shard 9"), ("kv=k25", "1", "already")]
    {
        let o = cli(&["cluster", "move", "--map", &map, "--range", range, "--to", to]);
        assert!(!o.status.success() && said(&o).contains(why), "{}", said(&o));
    }

    // A mover that stopped after freezing (here, the freeze alone, as
    // it sends it): the same move run again finishes it.
    rt.block_on(async {
        let range = (cluster_key(TABLE, b"k25"), Vec::new());
        let freeze = proto::ShardFreezeRequest {
            start: range.0.into(),
            end: range.1.into(),
            to: 0,
            map_version: 7,
            unfreeze: false,
        };
        let one = Client::connect(addr1.clone()).await.expect("shard 1");
        one.shard_freeze(freeze).await.expect("frozen by a mover that then stopped");
    });
    let again = cli(&["cluster", "move", "--map", &map, "--range", "kv=k25", "--to", "0"]);
    assert!(again.status.success(), "{}", said(&again));
    assert!(said(&again).contains("to shard 0: map version 7"), "{}", said(&again));
    let back = cli(&["cluster", "move", "--map", &map, "--range", "kv=k25", "--to", "1"]);
    assert!(back.status.success(), "{}", said(&back));

    // Nothing to release: shard 0 holds the range frozen no more (each
    // mover released it), and says so; a range that does not begin at
    // the key is refused.
    let none = cli(&["cluster", "release", "--map", &map, "--range", "kv=k25", "--from", "0"]);
    assert!(
        !none.status.success() && said(&none).contains("no such range is frozen"),
        "{}",
        said(&none)
    );
    let bad = cli(&["cluster", "release", "--map", &map, "--range", "kv=k26", "--from", "0"]);
    assert!(!bad.status.success() && said(&bad).contains("no range"), "{}", said(&bad));

    stop.store(true, Ordering::Relaxed);
    let (acked, errors, sent) = rt.block_on(writer).expect("writer");
    assert!(errors.is_empty(), "the client saw errors: {errors:?}\n{}", logs(d));
    assert!(sent > 200, "only {sent} writes");
    eprintln!("{sent} writes, all acknowledged, across five moves");
    let acked = rt.block_on(async {
        let c = Cluster::builder(addr1).client_id(8).connect().await.expect("client");
        map_at_least(&c, 8).await;
        let mut b = Batch::new();
        for k in acked.keys() {
            b.get(TABLE, k);
        }
        let r = c.execute(b.retries(8)).await.expect("read back");
        for (i, (k, v)) in acked.iter().enumerate() {
            assert_eq!(r.value(i), Some(v.to_string().as_bytes()), "key {k:?}");
        }
        acked
    });
    // Each shard's engine holds the rows of its own range only, read
    // from its store once its process is gone.
    drop((_p0, _p1));
    let (below, above): (Vec<_>, Vec<_>) = acked.keys().partition(|k| k.as_slice() < &b"k25"[..]);
    for (s, want) in [(0, below), (1, above)] {
        let db = milliscale::Database::open(
            milliscale::Options::new().store(url(d, &format!("shard{s}"))),
        )
        .expect("open a shard's database");
        let table = db.open_table(TABLE).expect("its table");
        let mut tx = db.begin().expect("begin");
        let all = (std::ops::Bound::Unbounded, std::ops::Bound::Unbounded);
        let keys: Vec<Vec<u8>> = tx
            .range(&table, all.0, all.1, milliscale::Direction::Forward)
            .map(|r| r.expect("a row").0)
            .collect();
        assert_eq!(keys, want.into_iter().cloned().collect::<Vec<_>>(), "shard {s}'s rows");
    }
}
