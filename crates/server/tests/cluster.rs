//! A cluster of three `milliscale serve --cluster` shards in this process,
//! reached by the cluster client: tables across the shards, a bank moved
//! by concurrent transfers with its total checked during and after, write
//! skew across two shards refused, a single server's calls refused on a
//! shard, and a shard restarted from its tables.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use milliscale_client::{Client, Cluster, KeyRange};

pub(crate) const TABLE: &str = "bank";
const ACCOUNTS: u32 = 12;
const INITIAL: u64 = 100;

pub(crate) fn account(i: u32) -> Vec<u8> {
    format!("a{i:02}").into_bytes()
}

pub(crate) use crate::cluster_fixture::{
    Fixture, free_addr, start_shard, three_shards, three_shards_keeping, three_shards_with,
};

async fn transfer(c: &Cluster, from: u32, to: u32, amount: u64) -> milliscale_client::Result<()> {
    milliscale_client::retry(50, || async {
        let mut tx = c.begin();
        let bf = balance(tx.get(TABLE, &account(from)).await?);
        let bt = balance(tx.get(TABLE, &account(to)).await?);
        let amount = amount.min(bf);
        tx.put(TABLE, &account(from), (bf - amount).to_string().as_bytes())?;
        tx.put(TABLE, &account(to), (bt + amount).to_string().as_bytes())?;
        tx.commit().await.map(|_| ())
    })
    .await
}

fn balance(v: Option<Vec<u8>>) -> u64 {
    v.map_or(INITIAL, |v| String::from_utf8(v).expect("utf8").parse().expect("a number"))
}

async fn total(c: &Cluster) -> milliscale_client::Result<u64> {
    milliscale_client::retry(50, || async {
        // Half the accounts in one call per shard (`get_many`, shards at
        // once), the other half one by one, and one of each twice: both
        // paths agree or the total is off.
        let mut tx = c.begin();
        let keys: Vec<Vec<u8>> = (0..ACCOUNTS / 2).map(account).collect();
        let many = tx.get_many(TABLE, &keys.iter().map(Vec::as_slice).collect::<Vec<_>>()).await?;
        assert_eq!(many.len(), keys.len());
        let mut sum: u64 = many.into_iter().map(balance).sum();
        for i in ACCOUNTS / 2..ACCOUNTS {
            sum += balance(tx.get(TABLE, &account(i)).await?);
        }
        let again = tx.get_many(TABLE, &[&account(0), &account(ACCOUNTS - 1)]).await?;
        assert_eq!(again[0], tx.get(TABLE, &account(0)).await?);
        assert_eq!(again[1], tx.get(TABLE, &account(ACCOUNTS - 1)).await?);
        tx.commit().await?;
        Ok(sum)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bank_across_three_shards_keeps_its_total_and_survives_a_shard_restart() {
    let mut f = three_shards().await;
    let c = Cluster::connect(f.addrs[0].to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    assert_eq!(c.list_tables().await.expect("list"), [TABLE]);
    assert_eq!(c.create_table(TABLE).await.expect_err("again").code(), tonic::Code::AlreadyExists);
    // Eight clients move money; an auditor checks the total meanwhile.
    let stop = Arc::new(AtomicBool::new(false));
    let moved = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..8u32 {
        let c = Cluster::builder(f.addrs[(w % 3) as usize].to_string())
            .client_id(100 + w)
            .connect()
            .await
            .expect("connect");
        let (stop, moved) = (Arc::clone(&stop), Arc::clone(&moved));
        tasks.push(tokio::spawn(async move {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let from = (w * 7 + n * 5) % ACCOUNTS;
                let to = (from + 1 + n % (ACCOUNTS - 1)) % ACCOUNTS;
                transfer(&c, from, to, u64::from(n % 9 + 1)).await.expect("a transfer");
                moved.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let mut audits = 0;
    while moved.load(Ordering::Relaxed) < 300 {
        assert_eq!(total(&c).await.expect("audit"), u64::from(ACCOUNTS) * INITIAL);
        audits += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("a worker");
    }
    assert!(audits > 0);
    assert_eq!(total(&c).await.expect("audit"), u64::from(ACCOUNTS) * INITIAL);
    let before: Vec<u64> = {
        let mut tx = c.begin();
        let mut v = Vec::new();
        for i in 0..ACCOUNTS {
            v.push(balance(tx.get(TABLE, &account(i)).await.expect("read")));
        }
        v
    };
    assert_ne!(before, vec![INITIAL; ACCOUNTS as usize], "money moved");

    // Shard 1 restarts from its tables: the same balances.
    let held = info(&mut raw(f.addrs[1]).await).await.versions;
    assert!(held > 0, "shard 1 holds versions");
    let (server, db) = f.servers[1].take().expect("shard 1");
    server.shutdown().await;
    db.close().await.expect("close");
    let (server, db) = start_shard(&f, 1).await;
    assert_eq!(server.shard().expect("a shard").recovery().asked, 0);
    f.servers[1] = Some((server, db));
    let after = milliscale_client::retry(50, || async {
        let mut tx = c.begin();
        let mut v = Vec::new();
        for i in 0..ACCOUNTS {
            v.push(balance(tx.get(TABLE, &account(i)).await?));
        }
        Ok(v)
    })
    .await
    .expect("read after the restart");
    assert_eq!(after, before);
    // Its count of version rows comes back (counted in the background
    // after a restart): at least one per account it holds, and no more
    // than before (nothing was written since; the collector only deletes).
    let mut s1 = raw(f.addrs[1]).await;
    let t = std::time::Instant::now();
    let counted = loop {
        let v = info(&mut s1).await.versions;
        if v > 0 || t.elapsed() > Duration::from_secs(5) {
            break v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(counted > 0 && counted <= held, "after the restart {counted}, before {held}");
    transfer(&c, 5, 0, 1).await.expect("a transfer after the restart");
    assert_eq!(total(&c).await.expect("audit"), u64::from(ACCOUNTS) * INITIAL);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_skew_across_two_shards_is_refused_and_single_server_calls_are_too() {
    let f = three_shards().await;
    let c = Cluster::connect(f.addrs[2].to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    // Both read a00 (shard 0) and a04 (shard 1); each writes the other.
    let (mut t1, mut t2) = (c.begin(), c.begin());
    for t in [&mut t1, &mut t2] {
        t.get(TABLE, &account(0)).await.expect("read");
        t.get(TABLE, &account(4)).await.expect("read");
    }
    assert_eq!(t1.shards(), [0, 1]);
    t1.put(TABLE, &account(0), b"0").expect("write");
    t2.put(TABLE, &account(4), b"0").expect("write");
    let first = t1.commit().await;
    let second = t2.commit().await;
    assert!(first.is_ok(), "{first:?}");
    let e = second.expect_err("write skew must not commit under SERIALIZABLE");
    assert!(e.is_retryable() && e.kind() == "conflict", "{e:?}");
    assert_eq!(balance(c.get(TABLE, &account(4)).await.expect("get")), INITIAL);

    // A single server's transaction on a shard is refused, by name.
    let plain = Client::connect(f.addrs[0].to_string()).await.expect("connect");
    let e = plain.begin().await.expect_err("a shard serves no plain transactions");
    assert_eq!((e.code(), e.kind()), (tonic::Code::FailedPrecondition, "cluster"));
    // An unknown table is NOT_FOUND; a key of another shard, wrong_shard.
    let e = c.get("nope", b"k").await.expect_err("no such table");
    assert_eq!(e.code(), tonic::Code::NotFound);
}

pub(crate) type Raw =
    milliscale_proto::v1::milliscale_client::MilliscaleClient<tonic::transport::Channel>;

pub(crate) async fn raw(addr: SocketAddr) -> Raw {
    Raw::connect(format!("http://{addr}")).await.expect("connect")
}

pub(crate) fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("time").as_micros()
        as u64
}

pub(crate) fn txn(client: u32, seq: u64) -> Option<proto::ClusterTxnId> {
    Some(proto::ClusterTxnId { client, seq })
}

/// A prepare of one write of `key` (of the bank), by client `client`.
pub(crate) fn prepare(
    client: u32,
    seq: u64,
    key: Vec<u8>,
    parts: Vec<u32>,
) -> proto::ShardPrepareRequest {
    proto::ShardPrepareRequest {
        txn: txn(client, seq),
        version: Some(proto::CommitTs { ts: now_us(), client }),
        reads: Vec::new(),
        writes: vec![proto::ShardWrite {
            key: Some(proto::TableKey { table: TABLE.into(), key: key.into() }),
            value: Some(b"7".to_vec().into()),
        }],
        participants: parts,
        ranges: Vec::new(),
    }
}

async fn status(c: &mut Raw, client: u32, seq: u64) -> i32 {
    c.shard_query(proto::ShardQueryRequest { txn: txn(client, seq), ts: 0 })
        .await
        .expect("query")
        .into_inner()
        .status
}

async fn info(c: &mut Raw) -> proto::ShardInfoResponse {
    c.shard_info(proto::ShardInfoRequest::default()).await.expect("info").into_inner()
}

/// Wait until a new transaction can write `key` (the prepared one holding
/// it was decided); how long that took.
async fn unblocked(c: &Cluster, key: &[u8]) -> Duration {
    let t = std::time::Instant::now();
    milliscale_client::retry(200, || async {
        let mut tx = c.begin();
        tx.get(TABLE, key).await?;
        tx.put(TABLE, key, b"100")?;
        tx.commit().await
    })
    .await
    .expect("the key is writable again");
    t.elapsed()
}

use milliscale_proto::v1 as proto;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_dead_mid_commit_blocks_nothing_past_the_timeout() {
    // Nothing forgotten during the test: it asks the shards afterwards
    // what they decided (a shard answers "aborted" about a transaction it
    // forgot, which no participant asks about; design record 0008).
    let mut f = three_shards_with(Duration::from_secs(3600), Duration::from_secs(30)).await;
    let c = Cluster::connect(f.addrs[0].to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    let (mut s0, mut s1) = (raw(f.addrs[0]).await, raw(f.addrs[1]).await);
    // Both participants voted yes, then the coordinator died: the
    // participants commit by termination (it may have committed).
    for (key, s) in [(account(0), &mut s0), (account(4), &mut s1)] {
        let v = s.shard_prepare(prepare(50, 1, key, vec![0, 1])).await.expect("vote");
        assert!(v.into_inner().yes);
    }
    // Only one participant heard of it: the other, asked, aborts it (and
    // files the abort, so the prepare arriving late is refused), and so
    // does the first.
    let v = s0.shard_prepare(prepare(51, 1, account(1), vec![0, 1])).await.expect("vote");
    assert!(v.into_inner().yes);
    for key in [account(0), account(4), account(1)] {
        let took = unblocked(&c, &key).await;
        assert!(took < Duration::from_secs(3), "{key:?} blocked for {took:?}");
    }
    let committed = proto::ClusterTxnStatus::Committed as i32;
    let aborted = proto::ClusterTxnStatus::Aborted as i32;
    assert_eq!(
        (status(&mut s0, 50, 1).await, status(&mut s1, 50, 1).await),
        (committed, committed)
    );
    assert_eq!((status(&mut s0, 51, 1).await, status(&mut s1, 51, 1).await), (aborted, aborted));
    let late = s1.shard_prepare(prepare(51, 1, account(5), vec![0, 1])).await.expect("vote");
    assert!(!late.into_inner().yes, "a prepare after the abort is refused");
    // A shard restarted while a transaction is prepared on it and
    // undecided: it finds the prepare in its tables and asks the other
    // participant, which committed. On shard 2 the prepare writes 800 KiB,
    // more than one engine value holds: its row is kept in pieces.
    let mut s2 = raw(f.addrs[2]).await;
    let big = vec![b'9'; 200 << 10];
    for (key, s) in [(account(2), &mut s0), (account(8), &mut s2)] {
        let mut p = prepare(52, 1, key, vec![0, 2]);
        if s.shard_info(proto::ShardInfoRequest::default()).await.expect("info").into_inner().shard
            == 2
        {
            p.writes = (8..12)
                .map(|i| proto::ShardWrite {
                    key: Some(proto::TableKey { table: TABLE.into(), key: account(i).into() }),
                    value: Some(big.clone().into()),
                })
                .collect();
        }
        let v = s.shard_prepare(p).await.expect("vote");
        assert!(v.into_inner().yes);
    }
    let decide = proto::ShardDecideRequest { txn: txn(52, 1), commit: true, ts: 0 };
    s0.shard_decide(decide).await.expect("decide");
    let (server, db) = f.servers[2].take().expect("shard 2");
    server.shutdown().await;
    db.close().await.expect("close");
    let (server, db) = start_shard(&f, 2).await;
    assert_eq!(server.shard().expect("a shard").recovery().asked, 1, "its prepare, to ask about");
    f.servers[2] = Some((server, db));
    for i in 9..12 {
        assert_eq!(c.get(TABLE, &account(i)).await.expect("read"), Some(big.clone()));
    }
    let took = unblocked(&c, &account(8)).await;
    assert!(took < Duration::from_secs(3), "blocked for {took:?} after the restart");
    assert_eq!(status(&mut raw(f.addrs[2]).await, 52, 1).await, committed);
    // Its decision replaced every piece: another restart finds nothing
    // to ask about.
    let (server, db) = f.servers[2].take().expect("shard 2");
    server.shutdown().await;
    db.close().await.expect("close");
    let (server, _db) = start_shard(&f, 2).await;
    assert_eq!(server.shard().expect("a shard").recovery().asked, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_versions_are_collected_and_old_decisions_forgotten() {
    let f = three_shards().await;
    let c = Cluster::connect(f.addrs[0].to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    // 100 versions of one key on shard 0 (single-shard), and 50 transfers
    // between shards 0 and 1 (decisions both remember).
    for i in 0..100u32 {
        c.put(TABLE, &account(0), i.to_string().as_bytes()).await.expect("a write");
    }
    for _ in 0..50 {
        transfer(&c, 1, 5, 1).await.expect("a transfer");
    }
    // Shard 0 wrote 150 versions (a00 100 times, a01 50) and decided 150
    // transactions. The client's reads carry its low-water mark; the
    // shards collect versions and forget decisions below it (already
    // while the writes ran: every 200 ms here).
    let mut s0 = raw(f.addrs[0]).await;
    let t = std::time::Instant::now();
    let after = loop {
        assert_eq!(c.get(TABLE, &account(0)).await.expect("read"), Some(b"99".to_vec()));
        let i = info(&mut s0).await;
        if (i.versions < 10 && i.remembered < 10) || t.elapsed() > Duration::from_secs(5) {
            break i;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(after.versions < 10 && after.remembered < 10, "{after:?}");
    // A read below the collected versions is refused, with the floor.
    let old = proto::ShardReadRequest {
        keys: vec![proto::TableKey { table: TABLE.into(), key: account(0).into() }],
        at: 1,
        ..Default::default()
    };
    let refused = s0.shard_read(old).await.expect_err("a read below the watermark");
    assert_eq!(refused.code(), tonic::Code::Aborted);
    assert!(refused.metadata().get("milliscale-floor").is_some());
    // A client whose clock is 300 ms behind is refused, moves its clock
    // past the floor, and commits once its clock passes the key's latest
    // read (skew costs aborts, never correctness).
    let late = Cluster::builder(f.addrs[1].to_string())
        .clock_skew_us(-300_000)
        .connect()
        .await
        .expect("connect");
    late.put(TABLE, &account(0), b"100").await.expect("the late client commits");
    assert_eq!(c.get(TABLE, &account(0)).await.expect("read"), Some(b"100".to_vec()));
    // a00 went from 100 to 99 and back to 100; the transfers kept the sum.
    assert_eq!(total(&c).await.expect("audit"), u64::from(ACCOUNTS) * INITIAL);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_restarted_under_its_id_does_not_reuse_its_transaction_names() {
    let f = three_shards().await;
    let setup = Cluster::connect(f.addrs[0].to_string()).await.expect("connect");
    setup.create_table(TABLE).await.expect("create");
    for value in [b"first".as_slice(), b"second"] {
        // A new client each time, the same id: its first transaction must
        // not be taken for the last run's first (and answered "already
        // committed" without its writes).
        let c = Cluster::builder(f.addrs[0].to_string()).client_id(7).connect().await.expect("c");
        let mut tx = c.begin();
        tx.get(TABLE, &account(3)).await.expect("read");
        tx.put(TABLE, &account(3), value).expect("write");
        tx.commit().await.expect("commit");
    }
    assert_eq!(setup.get(TABLE, &account(3)).await.expect("read"), Some(b"second".to_vec()));
}

/// A single-shard transaction commits in the engine transaction of its
/// prepare. A caller that goes away while the prepare waits for
/// durability (a coordinator killed, a call timed out) must not leave it
/// prepared. Callers give up after 0.2 to 6 ms, so some leave before the
/// prepare reaches the shard, some while it waits, some after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_shard_prepare_whose_caller_left_commits_all_the_same() {
    let f = three_shards().await;
    let setup = Cluster::connect(f.addrs[0].to_string()).await.expect("connect");
    setup.create_table(TABLE).await.expect("create");
    let mut s0 = raw(f.addrs[0]).await;
    info(&mut s0).await;
    let attempts = 30u64;
    for seq in 0..attempts {
        let req = prepare(60, seq, account((seq % 4) as u32), vec![0]);
        let gave_up_after = Duration::from_micros(200 + seq * 200);
        let _ = tokio::time::timeout(gave_up_after, s0.clone().shard_prepare(req)).await;
    }
    let t = std::time::Instant::now();
    loop {
        let prepared = info(&mut s0).await.prepared;
        if prepared == 0 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(3), "{prepared} prepares left undecided");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let committed = proto::ClusterTxnStatus::Committed as i32;
    let mut n = 0;
    for seq in 0..attempts {
        n += u64::from(status(&mut s0, 60, seq).await == committed);
    }
    assert!(n > 0, "no prepare reached the shard");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_spans_the_shards_and_a_phantom_in_it_refuses_the_commit() {
    let f = three_shards().await;
    let c = Cluster::connect(f.addrs[1].to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    c.create_table("other").await.expect("create");
    // Every other account, on all three shards, and a row of another table.
    for i in (0..ACCOUNTS).step_by(2) {
        c.put(TABLE, &account(i), i.to_string().as_bytes()).await.expect("put");
    }
    c.put("other", &account(1), b"x").await.expect("put");
    let all = c.scan(TABLE, KeyRange::all()).await.expect("scan");
    let keys: Vec<Vec<u8>> = (0..ACCOUNTS).step_by(2).map(account).collect();
    assert_eq!(all.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(), keys);
    assert_eq!(all[3], (account(6), b"6".to_vec()));
    let limited = c.scan(TABLE, KeyRange::all().limit(4)).await.expect("scan");
    assert_eq!(limited.len(), 4);
    let back = c.scan(TABLE, KeyRange::all().reversed().limit(2)).await.expect("scan");
    assert_eq!(back, vec![(account(10), b"10".to_vec()), (account(8), b"8".to_vec())]);
    let between = c.scan(TABLE, KeyRange::between(&account(3), &account(9))).await.expect("scan");
    assert_eq!(between.len(), 3, "a04, a06, a08");
    assert_eq!(c.scan(TABLE, KeyRange::prefix(b"a1")).await.expect("scan").len(), 1);
    // T1 scans the accounts and writes a summary; T2 adds an account the
    // scan would have seen, and commits first: T1 must not commit (its
    // summary would miss T2's row, a phantom).
    let mut t1 = c.begin();
    let seen = t1.scan(TABLE, KeyRange::all()).await.expect("scan");
    assert_eq!(t1.shards(), [0, 1, 2]);
    c.put(TABLE, &account(5), b"5").await.expect("a new row in the range");
    t1.put("other", b"summary", seen.len().to_string().as_bytes()).expect("write");
    let e = t1.commit().await.expect_err("a phantom appeared in the scanned range");
    assert!(e.is_retryable() && e.kind() == "conflict", "{e:?}");
    assert_eq!(c.get("other", b"summary").await.expect("get"), None);
    // Run again, it sees the new row and commits.
    let mut t1 = c.begin();
    let seen = t1.scan(TABLE, KeyRange::all()).await.expect("scan");
    t1.put("other", b"summary", seen.len().to_string().as_bytes()).expect("write");
    t1.commit().await.expect("commit");
    assert_eq!(c.get("other", b"summary").await.expect("get"), Some(b"7".to_vec()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_waits_for_the_decisions_of_prepared_writes_to_the_table() {
    let f = three_shards_with(Duration::from_secs(3600), Duration::from_secs(30)).await;
    let c = Cluster::connect(f.addrs[0].to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    let (mut s0, mut s1) = (raw(f.addrs[0]).await, raw(f.addrs[1]).await);
    for (key, s) in [(account(0), &mut s0), (account(4), &mut s1)] {
        let v = s.shard_prepare(prepare(60, 1, key, vec![0, 1])).await.expect("vote");
        assert!(v.into_inner().yes);
    }
    // Both voted yes: the coordinator may have acknowledged the commit;
    // only its decisions are still on their way. A drop asked now must
    // not let them write the dropped table's rows again.
    let dropping = tokio::spawn({
        let c = c.clone();
        async move { c.drop_table(TABLE).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!dropping.is_finished(), "the drop waits for the decisions");
    for s in [&mut s0, &mut s1] {
        let decide = proto::ShardDecideRequest { txn: txn(60, 1), commit: true, ts: 0 };
        s.shard_decide(decide).await.expect("decide");
    }
    dropping.await.expect("task").expect("the drop, once decided");
    c.create_table(TABLE).await.expect("create again");
    for i in [0, 4] {
        assert_eq!(c.get(TABLE, &account(i)).await.expect("read"), None, "account {i}");
    }
}

/// A batch on one shard runs there whole (`ShardExecute`): its operations
/// in order, its own writes seen, the patch and delete rules of one
/// server's batches. A batch across shards runs at the client, the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_runs_whole_on_its_shard_and_across_shards_at_the_client() {
    let f = three_shards().await;
    let c = Cluster::connect(f.addrs[0].to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    c.put(TABLE, &account(1), b"old-1").await.expect("put");
    // Every key on shard 0 (a00..a03), then a00 and a05 (shards 0 and 1).
    for spread in [false, true] {
        let (k, other) = (account(0), if spread { account(5) } else { account(2) });
        let mut b = milliscale_client::Batch::new();
        b.put(TABLE, &k, b"v0")
            .get(TABLE, &k)
            .patch(TABLE, &k, 1, b"X")
            .get(TABLE, &k)
            .delete(TABLE, &account(1))
            .delete(TABLE, &account(3))
            .put(TABLE, &other, b"o")
            .scan(TABLE, KeyRange::all().limit(3));
        let r = c.execute(b.retries(8)).await.expect("a batch");
        assert_eq!(r.value(1), Some(&b"v0"[..]), "its own put (spread: {spread})");
        assert_eq!(r.value(3), Some(&b"vX"[..]), "its own patch");
        assert!(r.existed(4) && !r.existed(5), "a01 had a value, a03 none");
        let rows: Vec<Vec<u8>> = r.rows(7).into_iter().map(|(k, _)| k).collect();
        // a01 deleted; a02 written by the first batch; at most 3 rows.
        let want = if spread {
            vec![account(0), account(2), other.clone()]
        } else {
            vec![account(0), other.clone()]
        };
        assert_eq!(rows, want, "spread: {spread}");
        let token = r.token.expect("it wrote");
        assert!(r.durable);
        assert_eq!(c.get(TABLE, &k).await.expect("get"), Some(b"vX".to_vec()));
        assert_eq!(c.get(TABLE, &account(1)).await.expect("get"), None);
        // A later transaction of this client begins above the commit.
        assert!(c.begin().begin_ts() > token);
        c.put(TABLE, &account(1), b"old-1").await.expect("put back");
    }
    // The engine's refusals: a patch of no value, one past the end.
    for (key, offset, kind) in [(account(3), 0, "not_found"), (account(0), 2, "invalid_input")] {
        let mut b = milliscale_client::Batch::new();
        b.put(TABLE, &account(2), b"not this").patch(TABLE, &key, offset, b"Z");
        let e = c.execute(b).await.expect_err("refused");
        assert_eq!(e.kind(), kind, "{e:?}");
        assert!(e.message().contains("operation 1"), "{e:?}");
    }
    assert_eq!(c.get(TABLE, &account(2)).await.expect("get"), Some(b"o".to_vec()), "nothing of it");
    // Each shard tells its log's write rate; a directory has no price.
    for s in c.status().await {
        let server = s.server.clone().expect("a shard's status");
        assert!(server.log_requests_per_s.is_some_and(|r| r > 0.0), "{s}");
        assert_eq!(server.log_usd_per_hour, None, "{s}");
    }
    // A scan without a limit, and SNAPSHOT, are refused at the client.
    let mut b = milliscale_client::Batch::new();
    b.scan(TABLE, KeyRange::all());
    assert_eq!(c.execute(b).await.expect_err("no limit").kind(), "invalid_input");
    let mut b = milliscale_client::Batch::new();
    b.get(TABLE, &account(0));
    let b =
        b.options(milliscale_client::TxnOptions::isolation(milliscale_client::Isolation::Snapshot));
    assert_eq!(c.execute(b).await.expect_err("not SNAPSHOT").kind(), "invalid_input");
}

/// A batch run on the shard follows MILANA's rules as a client's
/// transaction does: its reads set the keys' read marks (a write below
/// them is refused), a read waits for the decision of a prepared write
/// below it and sees the committed value, and a key read before another
/// commit makes its transaction conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_on_a_shard_keeps_milanas_rules() {
    let f = three_shards_with(Duration::from_secs(3600), Duration::from_secs(30)).await;
    let c = Cluster::connect(f.addrs[0].to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    let mut s0 = raw(f.addrs[0]).await;
    let op = |op| proto::Operation { table: String::new(), op: Some(op) };
    let execute = |seq: u64, at: u64, ops: Vec<proto::Operation>| proto::ShardExecuteRequest {
        txn: txn(70, seq),
        at,
        version: Some(proto::CommitTs { ts: at + 1, client: 70 }),
        operations: ops,
        table: TABLE.into(),
        client: 70,
        low_water: 0,
    };
    // A read of a00 at a second from now: a write of a00 below it is
    // refused, and the refusal names a floor above the read.
    let later = now_us() + 1_000_000;
    let get = |k: u32| op(proto::operation::Op::Get(account(k).into()));
    let r = s0.shard_execute(execute(1, later, vec![get(0)])).await.expect("read").into_inner();
    assert!(r.yes && r.results.len() == 1);
    let v = s0.shard_prepare(prepare(71, 1, account(0), vec![0])).await.expect("vote").into_inner();
    assert!(!v.yes && v.floor >= later, "a write below a read served by a batch at {later}: {v:?}");
    // A multi-shard write of a01 prepared below a batch's read: the read
    // waits for the decision and sees the committed value.
    let v = s0.shard_prepare(prepare(72, 1, account(1), vec![0, 1])).await.expect("vote");
    assert!(v.into_inner().yes);
    let reading = tokio::spawn({
        let mut s0 = s0.clone();
        let req = execute(2, now_us() + 1_000, vec![get(1)]);
        async move { s0.shard_execute(req).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!reading.is_finished(), "the read waits for the decision");
    let decide = proto::ShardDecideRequest { txn: txn(72, 1), commit: true, ts: 0 };
    s0.shard_decide(decide).await.expect("decide");
    let r = reading.await.expect("task").expect("the read").into_inner();
    let Some(proto::operation_result::Result::Get(g)) = &r.results[0].result else {
        panic!("a get's result: {r:?}")
    };
    assert_eq!(g.value.as_deref(), Some(&b"7"[..]), "the committed write");
    // A client's transaction reads a02; a batch writes a02 and commits;
    // the transaction's commit (a write of a03) must conflict.
    let mut t = c.begin();
    t.get(TABLE, &account(2)).await.expect("read");
    let mut b = milliscale_client::Batch::new();
    b.put(TABLE, &account(2), b"by a batch");
    c.execute(b).await.expect("the batch");
    t.put(TABLE, &account(3), b"from a stale read").expect("write");
    let e = t.commit().await.expect_err("its read of a02 is stale");
    assert!(e.is_retryable() && e.kind() == "conflict", "{e:?}");
    assert_eq!(c.get(TABLE, &account(3)).await.expect("get"), None);
}
