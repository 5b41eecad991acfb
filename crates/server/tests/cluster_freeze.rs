//! A range frozen on its shard for a move (design record 0009): from the
//! freeze on, no read, scan, prepare or one-shot batch that touches it is
//! served there, across a restart too; the freeze answers only once the
//! transaction prepared there before it is decided; lifted, the range is
//! served again, with what that transaction wrote. And the new owner of
//! a moved range refuses writes below the reads its old owner served.

use std::time::Duration;

use milliscale_client::{Batch, Cluster, KeyRange};
use milliscale_milana::shard_map::MapStore;
use milliscale_milana::types::cluster_key;
use milliscale_proto::v1 as proto;

use crate::cluster::{
    TABLE, account, now_us, prepare, raw, start_shard, three_shards, three_shards_with, txn,
};

/// A freeze of `[a<start>, a<end>)` on its shard, for its move to shard 1
/// by map version 2 (or, `unfreeze`, the move given up).
pub(super) fn freeze(start: u32, end: u32, unfreeze: bool) -> proto::ShardFreezeRequest {
    proto::ShardFreezeRequest {
        start: cluster_key(TABLE, &account(start)).into(),
        end: cluster_key(TABLE, &account(end)).into(),
        to: 1,
        map_version: 2,
        unfreeze,
    }
}

/// A read of account `key` served by `r` at `ahead` µs past now (ahead
/// of the clocks); its timestamp.
async fn read_ahead(r: &mut crate::cluster::Raw, key: u32, ahead: u64) -> u64 {
    let at = now_us() + ahead;
    let key = proto::TableKey { table: TABLE.into(), key: account(key).into() };
    let read = proto::ShardReadRequest { keys: vec![key], at, client: 78, low_water: 0 };
    r.shard_read(read).await.expect("a read, ahead of the clocks");
    at
}

/// A cluster client (id 5) through shard 0 that created the table and
/// wrote `rows` (account, value) in one batch.
pub(super) async fn client_with(f: &crate::cluster::Fixture, rows: &[(u32, &[u8])]) -> Cluster {
    let c = Cluster::builder(f.addrs[0].to_string()).client_id(5).connect().await.expect("client");
    c.create_table(TABLE).await.expect("create");
    let mut b = Batch::new();
    for (a, v) in rows {
        b.put(TABLE, &account(*a), v);
    }
    c.execute(b).await.expect("write the rows");
    c
}

/// A one-shot batch reading `key`, run once: its error's kind, if any.
async fn get_kind(c: &Cluster, key: u32) -> Option<String> {
    let mut b = Batch::new();
    b.get(TABLE, &account(key));
    c.execute(b.retries(0)).await.err().map(|e| e.kind().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_range_is_served_no_more_until_unfrozen_even_across_a_restart() {
    let mut f = three_shards().await;
    // A client that waits for the move's map version only briefly: the
    // refusals are what is looked at here.
    let c = Cluster::builder(f.addrs[0].to_string())
        .client_id(5)
        .move_wait(Duration::from_millis(20))
        .connect()
        .await
        .expect("client");
    c.create_table(TABLE).await.expect("create");
    let mut b = Batch::new();
    for i in 0..4 {
        b.put(TABLE, &account(i), b"1");
    }
    c.execute(b).await.expect("write a00..a03 (shard 0's)");

    // A read of a02 served at a timestamp a little ahead: the freeze's
    // floor is no lower.
    let mut r0 = raw(f.addrs[0]).await;
    let read_at = read_ahead(&mut r0, 2, 50_000).await;
    // A transaction across shards 0 and 1, prepared on shard 0 (writing
    // a03) before the freeze of [a02, a04): the freeze waits for it.
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
    // Its prepare asked again (its first answer lost) is answered as the
    // first time: refused, its coordinator would abort a transaction
    // prepared here.
    let again = prepare(77, 1, account(3), vec![0, 1]);
    assert!(r0.shard_prepare(again).await.expect("asked again, frozen").into_inner().yes);
    let decide = proto::ShardDecideRequest { txn: txn(77, 1), commit: true, ts };
    r0.shard_decide(decide).await.expect("decide");
    let floor = tokio::time::timeout(Duration::from_secs(5), freezing)
        .await
        .expect("the freeze answers once the prepared write is decided")
        .expect("task")
        .expect("freeze")
        .into_inner()
        .floor;
    assert!(floor >= read_at, "the floor {floor} covers the read served at {read_at}");

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

    // Still frozen after a restart (its mover, silent, is given the move
    // timeout again from the restart).
    let (server, db) = f.servers[0].take().expect("shard 0");
    server.shutdown().await;
    db.close().await.expect("close");
    f.servers[0] = Some(start_shard(&f, 0).await);
    assert_eq!(get_kind(&c, 2).await.as_deref(), Some("wrong_shard"));
    assert_eq!(get_kind(&c, 1).await, None);

    // Given up: the shard publishes map version 2 unchanged, then serves
    // the range again, with the prepared transaction's write.
    let mut r0 = raw(f.addrs[0]).await;
    r0.shard_freeze(freeze(2, 4, true)).await.expect("unfreeze");
    let maps = MapStore::new(milliscale::store::open(&f.map_url).expect("the map's store"), "");
    let v2 = maps.get(2).expect("map").expect("version 2, published by shard 0");
    assert_eq!(v2.ranges, maps.get(1).expect("map").expect("version 1").ranges);
    let mut b = Batch::new();
    b.get(TABLE, &account(2)).get(TABLE, &account(3));
    let r = c.execute(b).await.expect("read a02 and a03");
    assert_eq!(r.value(0), Some(&b"1"[..]));
    assert_eq!(r.value(1), Some(&b"7"[..]));
    // The prepare refused while frozen was refused for good (its
    // coordinator aborted on it): a late copy of it is a no.
    let late = r0.shard_prepare(prepare(77, 2, account(2), vec![0])).await.expect("late copy");
    assert!(!late.into_inner().yes, "a prepare refused by a freeze, accepted after it");
}

/// A prepare on shard 1 of one write of `key` at timestamp `ts`: its vote.
async fn vote_at(r: &mut crate::cluster::Raw, seq: u64, key: u32, ts: u64) -> bool {
    let mut p = prepare(79, seq, account(key), vec![1]);
    p.version = Some(proto::CommitTs { ts, client: 79 });
    r.shard_prepare(p).await.expect("prepare").into_inner().yes
}

/// MILANA §4.5's pitfall, met by a move: the old owner served a read at
/// `read_at`; the range's new owner must refuse a write at or below it,
/// before and after a restart of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_range_keeps_the_reads_its_old_owner_served_below_new_writes() {
    let mut f = three_shards().await;
    client_with(&f, &[(2, b"1")]).await;
    let mut r0 = raw(f.addrs[0]).await;
    let read_at = read_ahead(&mut r0, 2, 2_000_000).await;

    // [a02, a04) moves from shard 0 to shard 1, as `cluster move` does.
    let (start, end) = (cluster_key(TABLE, &account(2)), cluster_key(TABLE, &account(4)));
    let freeze = proto::ShardFreezeRequest {
        start: start.clone().into(),
        end: end.clone().into(),
        to: 1,
        map_version: 2,
        unfreeze: false,
    };
    let answer = r0.shard_freeze(freeze).await.expect("freeze").into_inner();
    assert!(!answer.tracked, "no copy began before the freeze: no keys are known");
    let floor = answer.floor;
    assert!(floor >= read_at, "the floor {floor} is below the read at {read_at}");
    let export = proto::ShardExportRequest {
        start: start.clone().into(),
        end: end.clone().into(),
        ..Default::default()
    };
    let page = r0.shard_export(export).await.expect("export").into_inner();
    assert_eq!(page.rows.len(), 1);
    let mut r1 = raw(f.addrs[1]).await;
    let import = proto::ShardImportRequest {
        start: start.clone().into(),
        end: end.clone().into(),
        rows: page.rows,
        first: true,
        floor,
        tables: page.tables,
        deleted: Vec::new(),
        map_version: 2,
    };
    r1.shard_import(import).await.expect("import");
    let maps = MapStore::new(milliscale::store::open(&f.map_url).expect("the map's store"), "");
    let mut next = maps.latest().expect("map").expect("a map");
    next.version = 2;
    next.ranges.insert(1, (start.clone(), 1));
    maps.publish(&next).expect("publish version 2");
    // Shard 1 reads the map again when asked for version 2 (at most
    // every 50 ms).
    let mut tries = 0;
    while r1
        .shard_map(proto::ShardMapRequest { at_least: 2 })
        .await
        .expect("map")
        .into_inner()
        .version
        < 2
    {
        tries += 1;
        assert!(tries < 40, "shard 1 did not read map version 2");
        tokio::time::sleep(Duration::from_millis(60)).await;
    }

    // Shard 0 lets the range go by itself, once it reads the map: its
    // rows deleted, the freeze gone, the range refused by its map.
    released(&mut r0).await;
    let release =
        proto::ShardReleaseRequest { start: start.clone().into(), end: end.clone().into() };
    let st = r0.shard_release(release).await.expect_err("released already");
    assert!(st.message().contains("no such range is frozen"), "{st:?}");

    // Below the read: refused; above it: accepted.
    assert!(!vote_at(&mut r1, 1, 2, read_at - 1_000).await, "a write below a read served");
    assert!(!vote_at(&mut r1, 2, 3, read_at).await, "a write at a read served");
    // Again after shard 1 restarts (its own lease may be lower).
    let (server, db) = f.servers[1].take().expect("shard 1");
    server.shutdown().await;
    db.close().await.expect("close");
    // It serves once its clock has passed the floor (two seconds ahead).
    f.servers[1] = Some(start_shard(&f, 1).await);
    assert!(now_us() > read_at, "shard 1 served before its clock passed the floor");
    let mut r1 = raw(f.addrs[1]).await;
    assert!(!vote_at(&mut r1, 3, 2, read_at - 500).await, "below the read, after a restart");
    let mut b = Batch::new();
    b.get(TABLE, &account(2));
    let c = Cluster::builder(f.addrs[1].to_string()).client_id(6).connect().await.expect("client");
    let r = c.execute(b.retries(8)).await.expect("read a02 at its new owner");
    assert_eq!(r.value(0), Some(&b"1"[..]), "the version copied from shard 0");
    assert!(vote_at(&mut r1, 4, 2, now_us()).await, "a write above the read");
}

/// Wait until shard `r` holds no range frozen and no row of [a00, a04)
/// (up to 5 s).
pub(super) async fn released(r: &mut crate::cluster::Raw) {
    for _ in 0..100 {
        let info =
            r.shard_info(proto::ShardInfoRequest::default()).await.expect("info").into_inner();
        if info.moving.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the shard did not let the range go");
}

/// Copy `[start, end)` from `from` to `to` as a mover does, with `floor`,
/// for the move that publishes map version `version`.
pub(super) async fn copy(
    from: &mut crate::cluster::Raw,
    to: &mut crate::cluster::Raw,
    (start, end): (&[u8], &[u8]),
    floor: u64,
    version: u64,
) -> usize {
    let export = proto::ShardExportRequest {
        start: start.to_vec().into(),
        end: end.to_vec().into(),
        ..Default::default()
    };
    let page = from.shard_export(export).await.expect("export").into_inner();
    let n = page.rows.len();
    let import = proto::ShardImportRequest {
        start: start.to_vec().into(),
        end: end.to_vec().into(),
        rows: page.rows,
        first: true,
        floor,
        tables: page.tables,
        deleted: Vec::new(),
        map_version: version,
    };
    to.shard_import(import).await.expect("import");
    n
}

/// A freeze ends by the map alone (design record 0009). Its mover silent
/// past the move timeout (1 s here), the shard publishes the map version
/// unchanged and serves the range again, and a late mover's publish
/// loses; a client asking meanwhile waits for that version and is
/// served, with no error. A move published by a mover that then stopped
/// (here, one that gives up, taking its publish for lost) is released by
/// the old owner, which never serves the range again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freeze_ends_by_the_map_whatever_its_mover_does() {
    let f = three_shards_with(Duration::from_millis(200), Duration::from_secs(1)).await;
    let c = client_with(&f, &[(2, b"1"), (3, b"2")]).await;
    let maps = MapStore::new(milliscale::store::open(&f.map_url).expect("the map's store"), "");
    let (start, end) = (cluster_key(TABLE, &account(2)), cluster_key(TABLE, &account(4)));
    let mut r0 = raw(f.addrs[0]).await;
    let mut r1 = raw(f.addrs[1]).await;

    // A freeze must name the next map version (2): no other could be
    // settled by the map.
    let ahead = proto::ShardFreezeRequest { map_version: 5, ..freeze(2, 4, false) };
    let st = r0.shard_freeze(ahead).await.expect_err("a freeze for version 5");
    assert!(st.message().contains("the next is 2"), "{st:?}");
    // A mover freezes, copies, and goes silent before publishing.
    let floor = r0.shard_freeze(freeze(2, 4, false)).await.expect("freeze").into_inner().floor;
    assert_eq!(copy(&mut r0, &mut r1, (&start, &end), floor, 2).await, 2);
    let t = std::time::Instant::now();
    let mut b = Batch::new();
    b.get(TABLE, &account(2));
    let r = c.execute(b).await.expect("served once the move is aborted");
    assert_eq!(r.value(0), Some(&b"1"[..]));
    let waited = t.elapsed();
    assert!(waited >= Duration::from_millis(700), "answered after {waited:?}, still frozen?");
    let v2 = maps.get(2).expect("map").expect("version 2, published by shard 0");
    assert_eq!(v2.sole_owner(&start, &end), Some(0), "the move did not happen");
    let mut late = v2.clone();
    late.ranges.insert(1, (start.clone(), 1));
    assert!(
        matches!(maps.publish(&late), Err(milliscale_milana::shard_map::MapError::Lost(2))),
        "a late mover's publish loses"
    );
    // The rows copied to shard 1 for it are deleted there (its incoming
    // row names version 2, which does not give it the range).
    let mut held = u64::MAX;
    for _ in 0..60 {
        let info = r1.shard_info(proto::ShardInfoRequest::default()).await.expect("info");
        held = info.into_inner().versions;
        if held == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(held, 0, "shard 1 kept the rows of a move that did not happen");
    let mut b = Batch::new();
    b.put(TABLE, &account(3), b"3");
    c.execute(b).await.expect("written on shard 0 again");

    // Moved for real, by map version 3: the mover publishes, then takes
    // its publish for lost and asks to give the move up. The shard
    // refuses (or has released the range already), and lets it go.
    let freeze3 = |unfreeze| proto::ShardFreezeRequest { map_version: 3, ..freeze(2, 4, unfreeze) };
    let floor = r0.shard_freeze(freeze3(false)).await.expect("freeze").into_inner().floor;
    assert_eq!(copy(&mut r0, &mut r1, (&start, &end), floor, 3).await, 2);
    let mut v3 = v2.clone();
    v3.version = 3;
    v3.ranges.insert(1, (start.clone(), 1));
    maps.publish(&v3).expect("publish version 3");
    match r0.shard_freeze(freeze3(true)).await {
        Ok(_) => {} // released by the background first
        Err(st) => {
            assert_eq!(st.code(), tonic::Code::FailedPrecondition, "{st:?}");
            assert!(st.message().contains("the move happened"), "{st:?}");
        }
    }
    released(&mut r0).await;
    let read = proto::ShardReadRequest {
        keys: vec![proto::TableKey { table: TABLE.into(), key: account(3).into() }],
        at: now_us(),
        client: 78,
        low_water: 0,
    };
    let st = r0.shard_read(read).await.expect_err("shard 0 serves the range no more");
    assert_eq!(st.code(), tonic::Code::FailedPrecondition, "{st:?}");
    let mut b = Batch::new();
    b.get(TABLE, &account(2)).get(TABLE, &account(3));
    let r = c.execute(b).await.expect("read at shard 1");
    assert_eq!((r.value(0), r.value(1)), (Some(&b"1"[..]), Some(&b"3"[..])));
}

/// MILANA §4.5: a restarted shard serves once its clock has passed its
/// last read lease. Serving at once and refusing the writes below the
/// lease would have the client move its clock up to it, stamping the
/// commit up to a lease span (500 ms here) ahead of real time, where a
/// transaction another client begins after the commit reads below it
/// and misses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_shard_serves_past_its_lease_so_no_commit_is_stamped_ahead() {
    let mut f = three_shards().await;
    let a = client_with(&f, &[(0, b"1")]).await;
    // A read: its lease reaches 500 ms past it, durably.
    let mut r0 = raw(f.addrs[0]).await;
    read_ahead(&mut r0, 1, 0).await;
    let (server, db) = f.servers[0].take().expect("shard 0");
    server.shutdown().await;
    db.close().await.expect("close");
    f.servers[0] = Some(start_shard(&f, 0).await);

    let mut b = Batch::new();
    b.put(TABLE, &account(0), b"2");
    let token = a.execute(b.retries(8)).await.expect("write a00 again").token.expect("a write");
    let ahead = token.saturating_sub(now_us());
    assert!(ahead < 50_000, "the commit is stamped {ahead} µs ahead of the clock");
    let other = Cluster::builder(f.addrs[1].to_string()).client_id(6).connect().await.expect("b");
    let mut b = Batch::new();
    b.get(TABLE, &account(0));
    let r = other.execute(b).await.expect("read a00");
    assert_eq!(r.value(0), Some(&b"2"[..]), "a transaction begun after the commit sees it");
}

/// Wait until shard `r` serves under map version `v` or later (up to 2.4 s).
async fn map_read(r: &mut crate::cluster::Raw, v: u64) {
    for _ in 0..40 {
        let map = r.shard_map(proto::ShardMapRequest { at_least: v }).await.expect("map");
        if map.into_inner().version >= v {
            return;
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    panic!("the shard did not read map version {v}");
}

/// The copy before the freeze (design record 0009): the old owner records
/// the keys written in the range from the copy's first page on, and its
/// freeze names them; copied again (rows, or their absence), they bring
/// the new owner to the old owner's rows at the freeze. A later page of a
/// copy the shard does not record is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_before_the_freeze_is_completed_by_the_keys_written_since() {
    let f = three_shards().await;
    let c = client_with(&f, &[(1, b"1"), (2, b"1"), (3, b"1")]).await;
    let (mut r0, mut r1) = (raw(f.addrs[0]).await, raw(f.addrs[1]).await);
    let (start, end) = (cluster_key(TABLE, &account(2)), cluster_key(TABLE, &account(4)));
    let export = |after: Vec<u8>, keys: Vec<Vec<u8>>| proto::ShardExportRequest {
        start: start.clone().into(),
        end: end.clone().into(),
        after: after.into(),
        keys: keys.into_iter().map(Into::into).collect(),
        ..Default::default()
    };
    let import =
        |page: proto::ShardExportResponse, first: bool, floor: u64| proto::ShardImportRequest {
            start: start.clone().into(),
            end: end.clone().into(),
            rows: page.rows,
            first,
            floor,
            tables: page.tables,
            deleted: page.absent,
            map_version: 2,
        };
    let st = r0.shard_export(export(start.clone(), vec![])).await.expect_err("never begun");
    assert_eq!(st.code(), tonic::Code::FailedPrecondition, "{st:?}");

    // The copy's one page, while shard 0 serves the range.
    let page = r0.shard_export(export(vec![], vec![])).await.expect("a served range's page");
    let page = page.into_inner();
    assert_eq!(page.rows.len(), 2, "a02 and a03");
    r1.shard_import(import(page, true, 0)).await.expect("import the page");
    // Written meanwhile: a02 changed, a03 deleted, a025 new; a01 is not
    // in the range.
    let a025 = [account(2), b"5".to_vec()].concat();
    let mut b = Batch::new();
    b.put(TABLE, &account(2), b"2").delete(TABLE, &account(3)).put(TABLE, &a025, b"new");
    b.put(TABLE, &account(1), b"2");
    c.execute(b).await.expect("writes during the copy");

    let answer = r0.shard_freeze(freeze(2, 4, false)).await.expect("freeze").into_inner();
    assert!(answer.tracked, "the copy was recorded");
    let changed: Vec<Vec<u8>> = answer.changed.iter().map(|k| k.to_vec()).collect();
    let mut want = vec![cluster_key(TABLE, &account(2)), cluster_key(TABLE, &a025)];
    want.push(cluster_key(TABLE, &account(3)));
    assert_eq!(changed, want, "the keys written in the range since the copy began");
    // With a key never written: it has no row, and is deleted at the new
    // owner (as one whose deletion was collected would be).
    let never = [account(2), b"6".to_vec()].concat();
    let asked = [changed, vec![cluster_key(TABLE, &never)]].concat();
    let again = r0.shard_export(export(vec![], asked)).await.expect("their rows").into_inner();
    assert_eq!(again.rows.len(), 3, "a02, a025, and a03's deletion (a row with its stamp)");
    assert_eq!(again.absent, vec![bytes::Bytes::from(cluster_key(TABLE, &never))]);
    r1.shard_import(import(again, false, answer.floor)).await.expect("import the changes");
    let asked_again = r0.shard_freeze(freeze(2, 4, false)).await.expect("again").into_inner();
    assert!(!asked_again.tracked, "the keys are named once: asked again, copy every row");

    let maps = MapStore::new(milliscale::store::open(&f.map_url).expect("the map's store"), "");
    let mut next = maps.latest().expect("map").expect("a map");
    next.version = 2;
    next.ranges.insert(1, (start.clone(), 1));
    maps.publish(&next).expect("publish version 2");
    map_read(&mut r1, 2).await;
    let c1 = Cluster::builder(f.addrs[1].to_string()).client_id(6).connect().await.expect("c1");
    let mut b = Batch::new();
    b.get(TABLE, &account(2)).get(TABLE, &a025).get(TABLE, &account(3));
    let r = c1.execute(b.retries(8)).await.expect("read at the new owner");
    assert_eq!(r.value(0), Some(&b"2"[..]), "a02 as changed during the copy");
    assert_eq!(r.value(1), Some(&b"new"[..]), "a025, written during the copy");
    assert_eq!(r.value(2), None, "a03, deleted during the copy");
}

/// A one-shot batch refused because its range froze is run again by its
/// client as another transaction: so the shard logs an abort for the one
/// it refused (a late copy of it is refused once the range is served
/// again), and a batch that had committed here, asked again after its
/// answer was lost, is told so (kind `unknown`, not retryable) instead of
/// being refused, which would have it run twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_refused_by_a_freeze_is_never_run_twice() {
    let f = three_shards().await;
    let _c = client_with(&f, &[(2, b"1")]).await;
    let mut r0 = raw(f.addrs[0]).await;
    let put = |value: &[u8]| proto::Operation {
        table: String::new(),
        op: Some(proto::operation::Op::Put(proto::Row {
            key: account(2).into(),
            value: value.to_vec().into(),
        })),
    };
    let execute = |seq: u64, value: &[u8]| {
        let at = now_us();
        proto::ShardExecuteRequest {
            txn: txn(81, seq),
            at,
            version: Some(proto::CommitTs { ts: at + 1_000, client: 81 }),
            operations: vec![put(value)],
            table: TABLE.into(),
            client: 81,
            low_water: 0,
        }
    };
    let first = execute(1, b"2");
    assert!(r0.shard_execute(first.clone()).await.expect("committed").into_inner().yes);
    let refused = execute(2, b"3");
    r0.shard_freeze(freeze(2, 4, false)).await.expect("freeze");
    // Asked again, frozen: it committed here, and says so.
    let st = r0.shard_execute(first).await.expect_err("asked again while frozen");
    let kind = st.metadata().get("milliscale-error").and_then(|v| v.to_str().ok());
    assert_eq!(kind, Some("unknown"), "{st:?}");
    assert!(st.metadata().get("milliscale-retryable").is_none(), "{st:?}");
    // A new one, frozen: refused as a wrong shard, for good.
    let st = r0.shard_execute(refused.clone()).await.expect_err("refused while frozen");
    assert_eq!(st.code(), tonic::Code::FailedPrecondition, "{st:?}");
    r0.shard_freeze(freeze(2, 4, true)).await.expect("unfreeze");
    let late = r0.shard_execute(refused).await.expect("a late copy, served again");
    assert!(!late.into_inner().yes, "a batch refused by a freeze ran after it");
}
