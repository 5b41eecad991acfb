//! A read replica follows a live writer: reads at a commit's token see it,
//! snapshots only move forward, a replica cut off from the store while the
//! writer checkpoints and truncates its log catches up from the
//! checkpoint, it follows a new writer (a new epoch), an idle database
//! costs it few requests, and it refuses an address with no database.

use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common;

use common::switch::Switch;
use common::{fast_polls as fast, followed_writer as writer};
use milliscale::{CommitProtocol, Database, Direction, Error, Options, Replica, ReplicaOptions};
use objstore::{MemoryStore, ObjectStore};

fn writer_with(p: CommitProtocol, store: &Arc<dyn ObjectStore>) -> Options {
    writer(store).commit_protocol(p)
}

const WAIT: Duration = Duration::from_secs(10);

fn all(replica: &Replica, table: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let t = replica.open_table(table).expect("table");
    let mut tx = replica.begin().expect("begin");
    tx.scan(&t, Bound::Unbounded, Bound::Unbounded, Direction::Forward, usize::MAX).expect("scan")
}

fn all_db(db: &Database, table: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let t = db.open_table(table).expect("table");
    let mut tx = db.begin().expect("begin");
    tx.scan(&t, Bound::Unbounded, Bound::Unbounded, Direction::Forward, usize::MAX).expect("scan")
}

#[test]
fn reads_at_a_commits_token_see_it_and_snapshots_only_move_forward() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let db = Database::open(writer(&store)).expect("open");
    let t = db.create_table("t").expect("table");
    let mut tx = db.begin().expect("begin");
    tx.put(&t, b"counter", &0u64.to_le_bytes()).expect("put");
    tx.commit_and_wait().expect("commit");
    let replica = Replica::open_with(Options::new().add_store_handle(Arc::clone(&store)), fast())
        .expect("replica");
    let mut last_seen = 0u64;
    let mut last_token = 0;
    for i in 1..=200u64 {
        let mut tx = db.begin().expect("begin");
        tx.update_range(&t, b"counter", 0, &i.to_le_bytes()).expect("delta");
        tx.put(&t, format!("k{i:04}").as_bytes(), &i.to_le_bytes()).expect("put");
        let info = tx.commit_and_wait().expect("commit");
        let token = info.csn.expect("a write has a CSN");
        // Read-your-writes: every tenth commit, read at its token.
        if i.is_multiple_of(10) {
            let rt = replica.open_table("t").expect("table appears");
            let mut r = replica.begin_at(token, WAIT).expect("the token's commit is applied");
            assert!(r.snapshot() > token);
            let v = r.get(&rt, b"counter").expect("get").expect("counter");
            let v = u64::from_le_bytes(v.try_into().expect("8 bytes"));
            assert!(v >= i, "read at token {token} saw counter {v}, not {i}");
            assert!(v >= last_seen, "went back in time: {v} after {last_seen}");
            assert!(r.get(&rt, format!("k{i:04}").as_bytes()).expect("get").is_some());
            last_seen = v;
            // Monotonic reads: a later read at this read's token sees as much.
            let mt = Replica::token_of(&r);
            assert!(mt >= last_token);
            last_token = mt;
            drop(r);
            let mut r2 = replica.begin_at(mt, WAIT).expect("monotonic");
            let v2 = r2.get(&rt, b"counter").expect("get").expect("counter");
            assert!(u64::from_le_bytes(v2.try_into().expect("8")) >= v);
        }
    }
    let end = db.durable_csn();
    replica.wait_for(end - 1, WAIT).expect("caught up");
    assert_eq!(all(&replica, "t"), all_db(&db, "t"));
    let m = replica.metrics();
    assert!(m.entries_applied >= 200, "{m:?}");
    assert!(m.stopped.is_none() && m.applied_csn >= end, "{m:?}");
    // A token the writer has not reached: Stale, with the lag, after the deadline.
    let started = Instant::now();
    match replica.begin_at(end + 1000, Duration::from_millis(100)) {
        Err(Error::Stale { token, applied, .. }) => {
            assert_eq!(token, end + 1000);
            assert!(applied <= end + 1);
        }
        other => panic!("expected Stale, got {:?}", other.map(|t| t.snapshot())),
    }
    assert!(started.elapsed() >= Duration::from_millis(100));
    // Replica transactions are read-only.
    let rt = replica.open_table("t").expect("table");
    let mut w = replica.begin().expect("begin");
    assert!(w.put(&rt, b"x", b"y").is_err(), "a replica accepted a write");
}

#[test]
fn a_replica_cut_off_while_the_writer_truncates_catches_up_from_the_checkpoint() {
    let inner: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let cut = Switch::new(Arc::clone(&inner));
    let db = Database::open(writer(&inner)).expect("open");
    let t = db.create_table("t").expect("table");
    let u = db.create_table("u").expect("table");
    let replica = Replica::open_with(
        Options::new().add_store_handle(cut.clone() as Arc<dyn ObjectStore>),
        fast(),
    )
    .expect("replica");
    let commit = |i: u64| {
        let mut tx = db.begin().expect("begin");
        tx.put(&t, format!("k{}", i % 50).as_bytes(), &i.to_le_bytes()).expect("put");
        if i.is_multiple_of(7) {
            tx.delete(&t, format!("k{}", (i + 25) % 50).as_bytes()).expect("delete");
        }
        tx.put(&u, &i.to_be_bytes(), b"u").expect("put");
        tx.commit_and_wait().expect("commit").csn.expect("csn")
    };
    for i in 0..100 {
        commit(i);
    }
    let token = commit(100);
    replica.wait_for(token, WAIT).expect("caught up before the cut");
    assert_eq!(all(&replica, "t"), all_db(&db, "t"));
    // Cut off: the writer goes on, checkpoints twice (deleting the log the
    // replica has not read), and goes on.
    cut.set_down(true);
    let before = replica.applied_csn();
    for i in 101..300 {
        commit(i);
    }
    db.checkpoint().expect("checkpoint");
    for i in 300..400 {
        commit(i);
    }
    db.checkpoint().expect("checkpoint");
    let last = commit(400);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(replica.applied_csn(), before, "a cut-off replica moved");
    assert!(replica.metrics().poll_errors > 0);
    cut.set_down(false);
    replica.wait_for(last, WAIT).expect("caught up after the cut");
    assert_eq!(all(&replica, "t"), all_db(&db, "t"));
    assert_eq!(all(&replica, "u"), all_db(&db, "u"));
    let m = replica.metrics();
    assert!(m.catch_ups >= 1, "the log it missed was deleted: {m:?}");
    assert!(m.stopped.is_none(), "{m:?}");
    // And it keeps following.
    let more = commit(401);
    replica.wait_for(more, WAIT).expect("follows on");
}

#[test]
fn a_replica_follows_a_new_writer() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let replica_opts = Options::new().add_store_handle(Arc::clone(&store));
    let db = Database::open(writer(&store)).expect("open");
    let t = db.create_table("t").expect("table");
    let replica = Replica::open_with(replica_opts, fast()).expect("replica");
    let put = |db: &Database, t: &milliscale::Table, k: &str| {
        let mut tx = db.begin().expect("begin");
        tx.put(t, k.as_bytes(), b"v").expect("put");
        tx.commit_and_wait().expect("commit").csn.expect("csn")
    };
    for i in 0..50 {
        put(&db, &t, &format!("a{i}"));
    }
    // The writer goes away without closing (its log stays as it was), and
    // a new one recovers: epoch 2.
    let token = put(&db, &t, "a-last");
    std::mem::forget(db);
    let db2 = Database::open(writer(&store)).expect("recover");
    let t2 = db2.open_table("t").expect("table");
    let v = db2.create_table("v").expect("a table of the new writer");
    let mut last = 0;
    for i in 0..50 {
        last = put(&db2, &t2, &format!("b{i}"));
        put(&db2, &v, &format!("c{i}"));
    }
    assert!(last > token);
    replica.wait_for(last, WAIT).expect("follows the new writer");
    assert_eq!(all(&replica, "t"), all_db(&db2, "t"));
    let m = replica.metrics();
    assert_eq!(m.epoch, 2, "{m:?}");
    assert!(m.epochs_followed >= 1);
    let lv = put(&db2, &v, "c-last");
    replica.wait_for(lv, WAIT).expect("follows");
    assert_eq!(all(&replica, "v"), all_db(&db2, "v"));
}

#[test]
fn an_idle_database_costs_a_replica_one_request_per_chain_per_poll_max() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let db = Database::open(writer(&store)).expect("open");
    let t = db.create_table("t").expect("table");
    let mut tx = db.begin().expect("begin");
    tx.put(&t, b"k", b"v").expect("put");
    let csn = tx.commit_and_wait().expect("commit").csn.expect("csn");
    let opts = ReplicaOptions {
        poll_min: Duration::from_millis(1),
        poll_max: Duration::from_millis(200),
        manifest_every: Duration::from_millis(200),
        ..ReplicaOptions::default()
    };
    let replica = Replica::open_with(Options::new().add_store_handle(Arc::clone(&store)), opts)
        .expect("replica");
    replica.wait_for(csn, WAIT).expect("applied");
    // Past the active window, the polls back off to poll_max.
    std::thread::sleep(milliscale::internals::ACTIVE_WINDOW + Duration::from_millis(500));
    let a = replica.metrics();
    std::thread::sleep(Duration::from_secs(2));
    let b = replica.metrics();
    let chains = db.manifest().expect("manifest").log.chains().count() as u64;
    let polls = b.polls - a.polls;
    // At 200 ms, 10 polls per chain in 2 s (one more at a window's edge);
    // at poll_min it would be 2,000.
    assert!(polls <= chains * 11, "{polls} polls of {chains} chains in 2 s idle");
    // Each idle poll is one request (the chains never written take the
    // mode the written one showed; a poll looks at its segment or for the
    // next, in turn), and the manifest, checked every 16 poll_max while
    // idle, is paid for by tails skipping as many polls: at most one
    // request per chain per poll_max in all.
    let requests = (b.get_requests + b.put_requests) - (a.get_requests + a.put_requests);
    assert!(requests <= chains * 11, "{requests} requests from {chains} chains in 2 s idle");
    assert!(requests <= polls + 2, "{requests} requests for {polls} polls of {chains} chains");
    // And the replica still sees the writer wake up.
    let mut tx = db.begin().expect("begin");
    tx.put(&t, b"k2", b"v").expect("put");
    let csn = tx.commit_and_wait().expect("commit").csn.expect("csn");
    replica.wait_for(csn, WAIT).expect("applied after the idle spell");
}

/// A reader that waits for a token the replica has not read yet asks the
/// tails to poll now: on an idle database polled every 5 s, each
/// read-your-writes wait ends in milliseconds, blocking or async, and
/// costs about one poll per chain, and never more than the tails' pace
/// (`poll_min`) allows over the wait: no storm of polls.
#[test]
fn a_reader_waiting_for_an_unseen_token_polls_at_once() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let db = Database::open(writer(&store)).expect("open");
    let t = db.create_table("t").expect("table");
    let poll_min = Duration::from_millis(20);
    let opts =
        ReplicaOptions { poll_min, poll_max: Duration::from_secs(5), ..ReplicaOptions::default() };
    let replica =
        Replica::open_with(Options::new().add_store_handle(Arc::clone(&store)), opts.clone())
            .expect("replica");
    let chains = db.manifest().expect("manifest").log.chains().count() as u64;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
    let async_replica = milliscale::AsyncReplica::from(
        Replica::open_with(Options::new().add_store_handle(Arc::clone(&store)), opts)
            .expect("replica"),
    );
    for i in 0..6u32 {
        // Past the active window: the tails poll every poll_max (5 s).
        std::thread::sleep(milliscale::internals::ACTIVE_WINDOW + Duration::from_millis(100));
        let mut tx = db.begin().expect("begin");
        tx.put(&t, b"k", &i.to_be_bytes()).expect("put");
        let csn = tx.commit_and_wait().expect("commit").csn.expect("csn");
        let before = replica.metrics().polls;
        let started = std::time::Instant::now();
        if i % 2 == 0 {
            replica.wait_for(csn, Duration::from_secs(3)).expect("applied on demand");
        } else {
            let r = async_replica.clone();
            runtime
                .block_on(async {
                    tokio::time::timeout(Duration::from_secs(3), r.wait_for(csn)).await
                })
                .expect("applied on demand in time")
                .expect("applied");
        }
        let waited = started.elapsed();
        assert!(waited < Duration::from_secs(1), "wait {i} took {waited:?} (poll_max is 5 s)");
        if i % 2 == 0 {
            // At once per chain (a poll or two), then at most one every
            // poll_min while the wait lasts (a loaded machine stretches it).
            let polls = replica.metrics().polls - before;
            let paced = (waited.as_millis() / poll_min.as_millis()) as u64;
            assert!(
                polls <= chains * (3 + paced),
                "{polls} polls of {chains} chains for one wait of {waited:?}"
            );
        }
    }
}

/// While the writer is active, a replica's polls follow what it commits:
/// a chain is polled every `sqrt(2 g / (λ r))` for a GET price `g`, so at
/// 20 commits a second over 3 lanes (segments of 4 appends), with S3
/// Express's GET price, polls cost about as many requests as the writer's
/// appends, not a poll of every chain every `poll_min` (3,000 a second
/// here); and nine times the commits cost about three times the polls.
/// Every commit is applied soon after it is acknowledged.
#[test]
fn a_replica_polls_as_the_square_root_of_the_writers_load() {
    let sim = |seed| -> Arc<dyn ObjectStore> {
        Arc::new(
            objstore::sim::SimStore::from_url(&format!("sim://nvme?seed={seed}&price=s3-express"))
                .expect("sim"),
        )
    };
    let run = |rate: u32, store: Arc<dyn ObjectStore>| {
        let db = Database::open(writer(&store)).expect("open");
        let t = db.create_table("t").expect("table");
        // λ such that a chain carrying 7 transactions a second (20 over
        // 3 chains) is polled every 100 ms: X = 2 g 3600 / (r I^2).
        let g = 0.03e-6;
        let opts = ReplicaOptions {
            poll_min: Duration::from_millis(1),
            poll_max: Duration::from_secs(1),
            millisecond_price: 2.0 * g * 3600.0 / (20.0 / 3.0 * 0.01),
            ..ReplicaOptions::default()
        };
        let replica = Replica::open_with(Options::new().add_store_handle(Arc::clone(&store)), opts)
            .expect("replica");
        let every = Duration::from_secs_f64(1.0 / f64::from(rate));
        let commit = |i: u32| {
            let mut tx = db.begin().expect("begin");
            tx.put(&t, &i.to_be_bytes(), b"v").expect("put");
            tx.commit().expect("commit")
        };
        // Warm up for a second: the tails learn the rate.
        let mut warm = Vec::new();
        for i in 0..rate {
            warm.push(commit(i));
            std::thread::sleep(every);
        }
        for ack in warm {
            ack.wait().expect("durable");
        }
        let a = replica.metrics();
        let mut last = None;
        for i in rate..3 * rate {
            last = Some(commit(i));
            std::thread::sleep(every);
        }
        let b = replica.metrics();
        let csn = last.expect("commits").wait().expect("durable").csn.expect("csn");
        let acked = std::time::Instant::now();
        replica.wait_for(csn, WAIT).expect("applied");
        (b.polls - a.polls, acked.elapsed())
    };
    let (slow, slow_lag) = run(20, sim(1));
    let (fast, fast_lag) = run(180, sim(2));
    eprintln!("20/s: {slow} polls in 2 s, lag {slow_lag:?}; 180/s: {fast} polls, lag {fast_lag:?}");
    // 3 chains every 100 ms for 2 s: 60; every 33 ms at 9x: 180.
    assert!((30..=120).contains(&slow), "{slow} polls at 20 commits a second");
    let ratio = fast as f64 / slow as f64;
    assert!((1.8..=4.5).contains(&ratio), "9x the load, {ratio:.2}x the polls");
    assert!(slow_lag < Duration::from_millis(500) && fast_lag < Duration::from_millis(500));
}

#[test]
fn a_replica_refuses_an_address_with_no_database() {
    let dir = std::env::temp_dir().join(format!("milliscale-replica-none-{}", std::process::id()));
    let url = format!("file://{}", dir.display());
    match Replica::open(Options::new().store(url)) {
        Err(Error::NoDatabase(at)) => assert!(at.contains("milliscale-replica-none")),
        other => panic!("expected NoDatabase, got {other:?}"),
    }
    assert!(!dir.exists() || std::fs::read_dir(&dir).expect("dir").next().is_none());
}

#[test]
fn a_standby_promotes_without_a_checkpoint_and_every_reader_honours_the_seal() {
    for p in [CommitProtocol::Pipelined, CommitProtocol::Autonomous] {
        promote_and_fence(p);
    }
}

/// The old writer commits under protocol `p`; the standby promotes, seals
/// its log and fences it.
fn promote_and_fence(p: CommitProtocol) {
    let inner: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    // The old writer reaches the store through a switch: off is its death
    // (or a partition that leaves it running, cut off).
    let cut = Switch::new(Arc::clone(&inner));
    let old = Database::open(writer_with(p, &(cut.clone() as Arc<dyn ObjectStore>))).expect("open");
    let t = old.create_table("t").expect("table");
    let mut tx = old.begin().expect("begin");
    tx.put(&t, b"counter", &0u64.to_le_bytes()).expect("put");
    tx.commit_and_wait().expect("commit");
    old.checkpoint().expect("a checkpoint the standby loads");
    let standby = Replica::open_with(writer_with(p, &inner), fast()).expect("standby");
    let other = Replica::open_with(writer_with(p, &inner), fast()).expect("another replica");
    let mut acked = Vec::new();
    for i in 1..=300u64 {
        let mut tx = old.begin().expect("begin");
        tx.update_range(&t, b"counter", 0, &i.to_le_bytes()).expect("delta");
        tx.put(&t, format!("k{i:04}").as_bytes(), &i.to_le_bytes()).expect("put");
        acked.push(tx.commit_and_wait().expect("commit").csn.expect("csn"));
    }
    let before = standby.applied_csn();
    cut.set_down(true);
    let checkpoint_before = Database::open_read_only(writer_with(p, &inner))
        .expect("read")
        .recovery_report()
        .and_then(|r| r.checkpoint.map(|c| c.0));
    let db = standby.promote().expect("promotes");
    let r = db.promotion_report().expect("a promotion report").clone();
    assert_eq!((r.old_epoch, r.new_epoch), (1, 2), "{r:?}");
    assert!(r.applied_before >= before && r.base_csn > *acked.last().expect("acked"), "{r:?}");
    let m = db.manifest().expect("manifest");
    assert_eq!(m.sealed.len(), 1, "sealed, not checkpointed: {m:?}");
    assert_eq!(m.checkpoint.as_ref().map(|c| c.csn), checkpoint_before, "no new checkpoint");
    // Everything the old writer acknowledged is there.
    let mut expect = all_db(&db, "t");
    assert_eq!(expect.len(), 301);
    let counter = expect.iter().find(|(k, _)| k == b"counter").expect("counter").1.clone();
    assert_eq!(counter, 300u64.to_le_bytes());
    // The old writer, alive again, is fenced: nothing it commits is
    // acknowledged.
    cut.set_down(false);
    let mut tx = old.begin().expect("begin");
    tx.put(&t, b"zombie", b"1").expect("put");
    assert!(tx.commit_and_wait().is_err(), "the old writer acknowledged a commit");
    drop(old);
    // The new writer commits; the other replica follows the seal, then
    // the new log.
    let t2 = db.open_table("t").expect("table");
    let mut last = 0;
    for i in 0..50u64 {
        let mut tx = db.begin().expect("begin");
        tx.put(&t2, format!("n{i:04}").as_bytes(), b"new").expect("put");
        last = tx.commit_and_wait().expect("commit").csn.expect("csn");
    }
    other.wait_for(last, WAIT).expect("the other replica follows the promoted writer");
    expect = all_db(&db, "t");
    assert_eq!(expect.len(), 351);
    assert_eq!(all(&other, "t"), expect);
    assert!(!expect.iter().any(|(k, _)| k == b"zombie"));
    // A cold recovery replays the sealed log as the seal says, then the
    // new one.
    drop(db);
    let again = Database::open(writer_with(p, &inner)).expect("recovers");
    let rr = again.recovery_report().expect("report");
    assert_eq!(rr.sealed_logs, 1, "{rr:?}");
    assert_eq!(all_db(&again, "t"), expect);
    assert!(again.manifest().expect("m").sealed.is_empty(), "recovery's checkpoint drops the seal");
    drop(again);
    assert_eq!(all_db(&Database::open(writer_with(p, &inner)).expect("reopen"), "t"), expect);
}

/// Offers on demand: a writer with offloading publishes where it marked
/// its log (`Manifest::checkpoint_wanted`); a replica offers once it has
/// applied that far, once; the writer adopts the offer and clears the want.
#[test]
fn a_replica_offers_a_checkpoint_when_the_writer_wants_one() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let db = Database::open(writer(&store).checkpoint_offload(true).checkpoint_log_bytes(2048))
        .expect("open");
    let t = db.create_table("t").expect("table");
    let replica = Replica::open_with(writer(&store), fast()).expect("replica");
    assert_eq!(replica.checkpoint_wanted(), None);
    assert_eq!(replica.offer_if_wanted().expect("no want"), None, "nothing wanted yet");
    for i in 0..300u64 {
        let mut tx = db.begin().expect("begin");
        tx.put(&t, format!("k{:04}", i % 120).as_bytes(), &i.to_le_bytes()).expect("put");
        tx.commit_and_wait().expect("commit");
    }
    let until = Instant::now() + WAIT;
    let offered = loop {
        if let Some(c) = replica.offer_if_wanted().expect("offer") {
            break c;
        }
        assert!(Instant::now() < until, "no checkpoint was wanted and offered");
        std::thread::sleep(Duration::from_millis(10));
    };
    let wanted = db.manifest().expect("manifest").checkpoint_wanted;
    assert!(wanted.is_some_and(|w| offered.csn >= w), "offer {} for want {wanted:?}", offered.csn);
    assert_eq!(replica.offer_if_wanted().expect("again"), None, "one offer per want");
    while db.checkpoint_stats().adopted == 0 {
        assert!(Instant::now() < until, "the writer never adopted the offer");
        std::thread::sleep(Duration::from_millis(20));
    }
    let m = db.manifest().expect("manifest");
    assert_eq!(m.checkpoint.as_ref().map(|c| c.csn), Some(offered.csn));
    assert_eq!(m.checkpoint_wanted, None, "adopting clears the want");
    while replica.checkpoint_wanted().is_some() {
        assert!(Instant::now() < until, "the replica still sees a want");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(replica.metrics().checkpoints_offered, 1);
}

#[test]
fn a_writer_adopts_a_checkpoint_a_replica_built_and_truncates_its_log() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let opts = || writer(&store).checkpoint_offload(true).checkpoint_log_bytes(2048);
    let db = Database::open(opts()).expect("open");
    let t = db.create_table("t").expect("table");
    let replica = Replica::open_with(writer(&store), fast()).expect("replica");
    let mut last = 0;
    for i in 0..300u64 {
        let mut tx = db.begin().expect("begin");
        tx.put(&t, format!("k{:04}", i % 120).as_bytes(), &i.to_le_bytes()).expect("put");
        last = tx.commit_and_wait().expect("commit").csn.expect("csn");
    }
    // Due (2 KiB of log), but nothing is adopted without an offer; the
    // writer marks its log meanwhile.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(db.checkpoint_stats().adopted, 0);
    // A damaged offer (a chunk missing) is refused.
    replica.wait_for(last, WAIT).expect("caught up");
    let bad = replica.offer_checkpoint().expect("offer");
    store.delete(&bad.chunks[0].key).expect("delete a chunk");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(db.checkpoint_stats().adopted, 0, "adopted an offer with a chunk missing");
    // More commits (past the writer's mark), then a good offer.
    for i in 0..50u64 {
        let mut tx = db.begin().expect("begin");
        tx.put(&t, format!("n{i:04}").as_bytes(), b"x").expect("put");
        last = tx.commit_and_wait().expect("commit").csn.expect("csn");
    }
    replica.wait_for(last, WAIT).expect("caught up");
    let offered = replica.offer_checkpoint().expect("offer");
    assert_eq!(offered.csn, last + 1);
    let until = Instant::now() + WAIT;
    while db.checkpoint_stats().adopted == 0 {
        assert!(Instant::now() < until, "the writer never adopted the offer");
        std::thread::sleep(Duration::from_millis(20));
    }
    let m = db.manifest().expect("manifest");
    assert_eq!(m.checkpoint.as_ref().map(|c| c.csn), Some(offered.csn));
    // Truncated: no log segment before each chain's new start is left.
    let segments = store.list("log/").expect("list");
    let starts: Vec<u64> = m.log.group_start.clone();
    assert!(starts.iter().any(|s| *s > 0), "the log's start moved: {starts:?}");
    assert!(
        segments.iter().all(|o| milliscale::internals::keys::segment_of(&o.key)
            .is_none_or(|(chain, seg)| m.log.start(chain).is_none_or(|s| seg >= s))),
        "segments before the start were left"
    );
    // A cold recovery from the adopted checkpoint gives the writer's state.
    for i in 0..10u64 {
        let mut tx = db.begin().expect("begin");
        tx.put(&t, format!("z{i:04}").as_bytes(), b"after").expect("put");
        tx.commit_and_wait().expect("commit");
    }
    let expect = all_db(&db, "t");
    drop(db);
    let again = Database::open(writer(&store)).expect("recovers");
    let rr = again.recovery_report().expect("report");
    assert_eq!(rr.checkpoint.map(|c| c.0), Some(offered.csn), "{rr:?}");
    assert_eq!(all_db(&again, "t"), expect);
    assert_eq!(replica.metrics().checkpoints_offered, 2);
}
