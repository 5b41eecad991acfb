//! Shard primaries and clients over loopback, in one process: a bank
//! across three shards keeps its total under concurrent transfers; a
//! coordinator that dies mid-commit leaves nothing blocked past the
//! termination timeout, and the participants agree on its outcome; a
//! primary restarted mid-two-phase-commit recovers its prepares and
//! settles them by asking the others; a single-shard prepare whose caller
//! left commits all the same; versions below the clients'
//! watermark are collected, and a read below it is refused.

use std::sync::Arc;
use std::time::{Duration, Instant};

use milliscale::Options;
use milliscale::store::{MemoryStore, ObjectStore};
use milliscale_milana::net::client::{ClientOptions, ShardedClient, TxnError};
use milliscale_milana::net::proto::{self, shard_client::ShardClient};
use milliscale_milana::net::server::{Recovery, ShardOptions, ShardServer};
use milliscale_milana::shard_map::{MapStore, ShardInfo, ShardMap};

const ACCOUNTS: u32 = 12;
const INITIAL: i64 = 100;

fn account(i: u32) -> Vec<u8> {
    format!("acct-{i:02}").into_bytes()
}

struct Cluster {
    maps: Arc<MapStore>,
    dirs: Vec<tempfile::TempDir>,
    servers: Vec<Option<ShardServer>>,
    listeners: Vec<std::net::SocketAddr>,
    recovered: Recovery,
}

fn log_options(dir: &tempfile::TempDir) -> Options {
    Options::new().store(format!("file://{}", dir.path().display()))
}

fn shard_options(s: u32) -> ShardOptions {
    let mut o = ShardOptions::new(s);
    // A short lease: a restarted primary refuses writes below its last
    // lease, and the restart case writes right after.
    o.lease_span = 50_000;
    o.termination_timeout = Duration::from_millis(300);
    o.collect_every = Duration::from_millis(50);
    o.peer_timeout = Duration::from_millis(300);
    o
}

impl Cluster {
    /// Three shards: accounts 0-3, 4-7, 8-11.
    async fn start() -> Cluster {
        let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
        let maps = Arc::new(MapStore::new(store, "bank"));
        let mut listeners = Vec::new();
        let mut bound = Vec::new();
        for _ in 0..3 {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            listeners.push(l.local_addr().expect("addr"));
            bound.push(l);
        }
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("dir")).collect();
        let map = ShardMap {
            version: 1,
            ranges: vec![(Vec::new(), 0), (account(4), 1), (account(8), 2)],
            shards: (0..3u32)
                .map(|s| {
                    let info = ShardInfo {
                        addr: listeners[s as usize].to_string(),
                        log: format!("file://{}", dirs[s as usize].path().display()),
                    };
                    (s, info)
                })
                .collect(),
        };
        let m = Arc::clone(&maps);
        tokio::task::spawn_blocking(move || m.publish(&map)).await.expect("task").expect("publish");
        let mut servers = Vec::new();
        for (s, l) in bound.into_iter().enumerate() {
            let opts = shard_options(s as u32);
            let server = ShardServer::start_on(opts, log_options(&dirs[s]), Arc::clone(&maps), l)
                .await
                .expect("start");
            servers.push(Some(server));
        }
        let recovered = Recovery { records: 0, committed: 0, asked: 0 };
        Cluster { maps, dirs, servers, listeners, recovered }
    }

    async fn client(&self, id: u32) -> ShardedClient {
        ShardedClient::connect(ClientOptions::new(id), Arc::clone(&self.maps))
            .await
            .expect("client")
    }

    fn raw(&self, s: usize) -> ShardClient<tonic::transport::Channel> {
        let ch = tonic::transport::Channel::from_shared(format!("http://{}", self.listeners[s]))
            .expect("uri")
            .connect_lazy();
        ShardClient::new(ch)
    }

    async fn stop(&mut self, s: usize) {
        if let Some(server) = self.servers[s].take() {
            server.shutdown().await.expect("shutdown");
        }
    }

    async fn restart(&mut self, s: usize) {
        let l = tokio::net::TcpListener::bind(self.listeners[s]).await.expect("rebind");
        let server = ShardServer::start_on(
            shard_options(s as u32),
            log_options(&self.dirs[s]),
            Arc::clone(&self.maps),
            l,
        )
        .await
        .expect("restart");
        self.recovered = server.recovery();
        self.servers[s] = Some(server);
    }

    async fn shutdown(mut self) {
        for s in 0..3 {
            self.stop(s).await;
        }
    }
}

fn balance(v: Option<Vec<u8>>) -> i64 {
    v.map_or(INITIAL, |b| String::from_utf8(b).expect("utf8").parse().expect("a number"))
}

/// Run `f` as transactions until one commits (a retryable error runs it
/// again).
async fn with_retry<F, Fut>(mut f: F) -> Result<u32, TxnError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), TxnError>>,
{
    let mut aborts = 0;
    loop {
        match f().await {
            Ok(()) => return Ok(aborts),
            Err(e) if e.is_retryable() && aborts < 200 => {
                aborts += 1;
                tokio::time::sleep(Duration::from_millis(u64::from(aborts % 7))).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The sum of the balances, read by a read-only transaction (run again
/// until it commits: local validation fails while a transfer is prepared
/// on a key it read).
async fn total(c: &ShardedClient) -> i64 {
    for _ in 0..200 {
        let mut tx = c.begin();
        let mut sum = Some(0);
        for i in 0..ACCOUNTS {
            match tx.get(&account(i)).await {
                Ok(v) => sum = sum.map(|s| s + balance(v)),
                Err(e) if e.is_retryable() => {
                    sum = None;
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        if let Some(sum) = sum {
            match tx.commit().await {
                Ok(()) => return sum,
                Err(e) if e.is_retryable() => {}
                Err(e) => panic!("{e}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("no audit committed in 200 tries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bank_across_three_shards_keeps_its_total() {
    let cluster = Cluster::start().await;
    let mut tasks = Vec::new();
    for id in 1..=4u32 {
        let c = cluster.client(id).await;
        tasks.push(tokio::spawn(async move {
            let mut aborts = 0;
            for n in 0..25u32 {
                let from = (id * 7 + n * 5) % ACCOUNTS;
                let to = (from + 1 + (n % (ACCOUNTS - 1))) % ACCOUNTS;
                aborts += with_retry(|| {
                    let c = c.clone();
                    async move {
                        let mut tx = c.begin();
                        let (a, b) = (
                            balance(tx.get(&account(from)).await?),
                            balance(tx.get(&account(to)).await?),
                        );
                        let amount = 1 + i64::from(n % 5);
                        tx.put(&account(from), (a - amount).to_string().as_bytes());
                        tx.put(&account(to), (b + amount).to_string().as_bytes());
                        tx.commit().await
                    }
                })
                .await
                .expect("a transfer commits or aborts cleanly");
            }
            aborts
        }));
    }
    // Meanwhile an auditor's read-only transactions, validated locally,
    // each see the whole total: a consistent snapshot across the shards.
    let auditor = cluster.client(8).await;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let audits = {
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let mut n = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                assert_eq!(total(&auditor).await, INITIAL * i64::from(ACCOUNTS), "audit {n}");
                n += 1;
            }
            n
        })
    };
    let mut aborts = 0;
    for t in tasks {
        aborts += t.await.expect("task");
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let audits = audits.await.expect("auditor");
    assert!(audits > 0, "no audit ran during the transfers");
    let c = cluster.client(9).await;
    assert_eq!(total(&c).await, INITIAL * i64::from(ACCOUNTS), "the total holds");
    // 100 transfers committed, some between shards, some within one.
    eprintln!("100 transfers committed after {aborts} aborts; {audits} audits");
    for s in &cluster.servers {
        assert_eq!(s.as_ref().expect("up").prepared(), 0, "nothing left prepared");
    }
    cluster.shutdown().await;
}

fn txn(client: u32, seq: u64) -> Option<proto::TxnId> {
    Some(proto::TxnId { client, seq })
}

fn prepare(client: u32, seq: u64, key: Vec<u8>, parts: Vec<u32>) -> proto::PrepareRequest {
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_micros() as u64;
    proto::PrepareRequest {
        txn: txn(client, seq),
        version: Some(proto::CommitTs { ts, client }),
        reads: Vec::new(),
        writes: vec![proto::Write { key, value: Some(b"7".to_vec()) }],
        participants: parts,
    }
}

async fn status(c: &mut ShardClient<tonic::transport::Channel>, client: u32, seq: u64) -> i32 {
    c.query(proto::QueryRequest { txn: txn(client, seq), ts: 0 })
        .await
        .expect("query")
        .into_inner()
        .status
}

/// Wait until a new transaction can write `key` (the prepared one holding
/// it was decided); how long that took.
async fn unblocked(c: &ShardedClient, key: &[u8]) -> Duration {
    let t = Instant::now();
    with_retry(|| {
        let c = c.clone();
        async move {
            let mut tx = c.begin();
            tx.get(key).await?;
            tx.put(key, b"100");
            tx.commit().await
        }
    })
    .await
    .expect("the key is writable again");
    t.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_dead_mid_commit_blocks_nothing_past_the_timeout() {
    let mut cluster = Cluster::start().await;
    let (mut s0, mut s1) = (cluster.raw(0), cluster.raw(1));
    // Both participants voted yes, then the coordinator died: the
    // participants commit by termination (it may have committed).
    for (s, c) in [(0, &mut s0), (1, &mut s1)] {
        let key = account(if s == 0 { 0 } else { 4 });
        let v = c.prepare(prepare(50, 1, key, vec![0, 1])).await.expect("vote").into_inner();
        assert!(v.yes);
    }
    // Only one participant heard of it: the other, asked, aborts it (it
    // logs the abort, so the prepare arriving late is refused), and so
    // does the first.
    let v = s0.prepare(prepare(51, 1, account(1), vec![0, 1])).await.expect("vote").into_inner();
    assert!(v.yes);
    let c = cluster.client(1).await;
    for key in [account(0), account(4), account(1)] {
        let took = unblocked(&c, &key).await;
        assert!(took < Duration::from_secs(3), "{key:?} blocked for {took:?}");
    }
    let committed = proto::TxnStatus::Committed as i32;
    let aborted = proto::TxnStatus::Aborted as i32;
    assert_eq!(
        (status(&mut s0, 50, 1).await, status(&mut s1, 50, 1).await),
        (committed, committed)
    );
    assert_eq!((status(&mut s0, 51, 1).await, status(&mut s1, 51, 1).await), (aborted, aborted));
    let late = s1.prepare(prepare(51, 1, account(5), vec![0, 1])).await.expect("vote").into_inner();
    assert!(!late.yes, "a prepare after the abort is refused");
    // A primary restarted while a transaction is prepared on it and
    // undecided: it rebuilds the prepare from its log and asks the other
    // participant, which committed.
    for (s, c) in [(0, &mut s0), (2, &mut cluster.raw(2))] {
        let key = account(if s == 0 { 2 } else { 8 });
        assert!(c.prepare(prepare(52, 1, key, vec![0, 2])).await.expect("vote").into_inner().yes);
    }
    s0.decide(proto::DecideRequest { txn: txn(52, 1), commit: true, ts: 0 }).await.expect("decide");
    cluster.stop(2).await;
    cluster.restart(2).await;
    let r = cluster.recovered;
    assert_eq!((r.records, r.asked), (1, 1), "its prepare, undecided, to ask about");
    let took = unblocked(&c, &account(8)).await;
    assert!(took < Duration::from_secs(3), "blocked for {took:?} after the restart");
    assert_eq!(status(&mut cluster.raw(2), 52, 1).await, committed);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_below_the_clients_watermark_are_collected() {
    let cluster = Cluster::start().await;
    let c = cluster.client(1).await;
    // 100 versions of one key on shard 0, each written after reading it.
    for i in 0..100u32 {
        with_retry(|| {
            let c = c.clone();
            async move {
                let mut tx = c.begin();
                tx.get(&account(0)).await?;
                tx.put(&account(0), i.to_string().as_bytes());
                tx.commit().await
            }
        })
        .await
        .expect("a write");
    }
    // The client's reads carry its low-water mark; the shard collects.
    let t = Instant::now();
    let (versions, floor) = loop {
        let mut tx = c.begin();
        assert_eq!(tx.get(&account(0)).await.expect("read"), Some(b"99".to_vec()));
        drop(tx);
        let (v, floor) = cluster.servers[0].as_ref().expect("up").versions();
        if v < 5 || t.elapsed() > Duration::from_secs(5) {
            break (v, floor);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(versions < 5, "{versions} versions held after collection");
    assert!(floor > 0);
    // A read below the watermark is refused, with the floor.
    let mut raw = cluster.raw(0);
    let old = raw.read(proto::ReadRequest { key: account(0), at: 1, ..Default::default() });
    let refused = old.await.expect_err("a read below the watermark");
    assert_eq!(refused.code(), tonic::Code::Aborted);
    assert!(refused.metadata().get("milana-floor").is_some());
    // A client whose clock is 300 ms behind is refused, moves its clock
    // past the floor, and commits once its clock passes the key's latest
    // read (skew costs aborts, never correctness).
    let mut opts = ClientOptions::new(2);
    opts.skew = -300_000;
    let late = ShardedClient::connect(opts, Arc::clone(&cluster.maps)).await.expect("client");
    let aborts = with_retry(|| {
        let late = late.clone();
        async move {
            let mut tx = late.begin();
            // At its (late) timestamp it may read an older version; its
            // write then fails validation and it runs again, later.
            tx.get(&account(0)).await?;
            tx.put(&account(0), b"100");
            tx.commit().await
        }
    })
    .await
    .expect("the late client commits");
    assert!(aborts >= 1, "the late client's first read was served below the watermark");
    let mut tx = c.begin();
    assert_eq!(tx.get(&account(0)).await.expect("read"), Some(b"100".to_vec()));
    drop(tx);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_restarted_under_its_id_does_not_reuse_its_transaction_names() {
    let cluster = Cluster::start().await;
    for value in [b"first".as_slice(), b"second"] {
        // A new client each time, the same id: its first transaction must
        // not be taken for the last run's first (and answered "already
        // committed" without its writes).
        let c = cluster.client(7).await;
        let mut tx = c.begin();
        tx.get(&account(3)).await.expect("read");
        tx.put(&account(3), value);
        tx.commit().await.expect("commit");
    }
    let c = cluster.client(8).await;
    let mut tx = c.begin();
    assert_eq!(tx.get(&account(3)).await.expect("read"), Some(b"second".to_vec()));
    drop(tx);
    cluster.shutdown().await;
}

/// A single-shard transaction commits at its durable prepare. A caller
/// that goes away while the prepare waits for the log (a coordinator
/// killed, a call timed out) must not leave it prepared: nothing would
/// decide it before a restart (cooperative termination asks only about
/// multi-shard transactions), and its keys would stay blocked. Callers
/// give up after 0.2 to 6 ms, so some leave before the prepare reaches
/// the shard, some while it waits for the log, some after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_shard_prepare_whose_caller_left_commits_all_the_same() {
    let cluster = Cluster::start().await;
    let mut s0 = cluster.raw(0);
    // Connected before the calls are timed.
    s0.info(proto::InfoRequest {}).await.expect("info");
    let attempts = 30u64;
    for seq in 0..attempts {
        let req = prepare(60, seq, account((seq % 4) as u32), vec![0]);
        let gave_up_after = Duration::from_micros(200 + seq * 200);
        let _ = tokio::time::timeout(gave_up_after, s0.clone().prepare(req)).await;
    }
    let t = Instant::now();
    loop {
        let prepared = s0.info(proto::InfoRequest {}).await.expect("info").into_inner().prepared;
        if prepared == 0 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(3), "{prepared} prepares left undecided");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Not vacuous: prepares did arrive (committed), and not all of them
    // answered before their caller gave up (the fast path ran anyway).
    let committed = proto::TxnStatus::Committed as i32;
    let mut n = 0;
    for seq in 0..attempts {
        n += u64::from(status(&mut s0, 60, seq).await == committed);
    }
    assert!(n > 0, "no prepare reached the shard");
    cluster.shutdown().await;
}
