//! A cluster's change feed (design record 0014, "A cluster"): three
//! shards run bank transfers and list appends across shards while a range
//! moves away and back and a shard restarts, with a journal of every
//! acknowledged commit. A consumer applies the merged feed, read from the
//! shards' logs alone, to an empty map. At every resolved timestamp T its
//! map holds every journaled commit at or below T and none above, the
//! bank's total, each list append whole or absent; at some of them it
//! equals the cluster read back at T (`past::cluster_at`). Every
//! journaled commit is delivered once, whole (its writes on every shard
//! in one transaction), in version order.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use milliscale::feed::FeedFilter;
use milliscale::store::{Bytes, ObjectMeta, ObjectStore, Result as StoreResult};
use milliscale::{Options, ReplicaOptions};
use milliscale_client::handover::{self, MovePlan};
use milliscale_client::{Client, Cluster};
use milliscale_milana::shard_map::{MapStore, ShardMap};
use milliscale_milana::types::{CommitTs, cluster_key};
use milliscale_server::shard::feed::{ClusterEvent, ClusterFeed};
use milliscale_server::shard::past::cluster_at;

use crate::cluster::{TABLE, account, now_us};
use crate::cluster_fixture::{Fixture, start_shard, three_shards_keeping};
use crate::cluster_past::{ACCOUNTS, Acked, LISTS, append, check_rows, list, rows_of, transfer};

/// A store whose reads each take 50 ms more: shard 2's log read slowly,
/// so that the feed reads the other shards' bounds well ahead of it.
#[derive(Debug)]
struct Slow(Arc<dyn ObjectStore>);

fn slowly<T>(r: T) -> T {
    std::thread::sleep(Duration::from_millis(50));
    r
}

impl ObjectStore for Slow {
    fn put(&self, key: &str, body: Bytes) -> StoreResult<ObjectMeta> {
        self.0.put(key, body)
    }
    fn put_if_absent(&self, key: &str, body: Bytes) -> StoreResult<ObjectMeta> {
        self.0.put_if_absent(key, body)
    }
    fn put_if_match(&self, key: &str, body: Bytes, etag: &str) -> StoreResult<ObjectMeta> {
        self.0.put_if_match(key, body, etag)
    }
    fn append(&self, key: &str, offset: u64, body: Bytes) -> StoreResult<ObjectMeta> {
        self.0.append(key, offset, body)
    }
    fn get(&self, key: &str) -> StoreResult<Bytes> {
        slowly(self.0.get(key))
    }
    fn get_range(&self, key: &str, range: std::ops::Range<u64>) -> StoreResult<Bytes> {
        slowly(self.0.get_range(key, range))
    }
    fn head(&self, key: &str) -> StoreResult<ObjectMeta> {
        slowly(self.0.head(key))
    }
    fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectMeta>> {
        slowly(self.0.list(prefix))
    }
    fn delete(&self, key: &str) -> StoreResult<()> {
        self.0.delete(key)
    }
}

/// The consumer's map: cluster key to the version and value it holds.
type State = BTreeMap<Vec<u8>, (CommitTs, Option<Vec<u8>>)>;

/// A transaction's writes as delivered: cluster key, value.
type Writes = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// What the consumer saw: its map at each resolved timestamp, and each
/// transaction delivered (version, writes); how far behind the clock each
/// transaction was delivered, and each resolved timestamp was (µs).
#[derive(Default)]
struct Seen {
    points: Vec<(u64, State)>,
    txns: Vec<(CommitTs, Writes)>,
    delivery_lag: Vec<u64>,
    resolved_lag: Vec<u64>,
}

/// Apply the feed until its resolved timestamp passes `until` (set once
/// the writers are done) or `give_up` ends.
fn consume(mut feed: ClusterFeed, until: Arc<AtomicU64>) -> Seen {
    let mut seen = Seen::default();
    let mut state = State::new();
    let give_up = Instant::now() + Duration::from_secs(120);
    while Instant::now() < give_up {
        match feed.next_timeout(Duration::from_millis(100)).expect("the feed") {
            Some(ClusterEvent::Commit(t)) => {
                let mut writes = Vec::new();
                for c in t.changes {
                    let k = cluster_key(&c.table, &c.key);
                    state.insert(k.clone(), (t.version, c.value.clone()));
                    writes.push((k, c.value));
                }
                seen.delivery_lag.push(now_us().saturating_sub(t.version.ts));
                seen.txns.push((t.version, writes));
            }
            Some(ClusterEvent::Resolved(r)) => {
                seen.resolved_lag.push(now_us().saturating_sub(r));
                seen.points.push((r, state.clone()));
                let u = until.load(Ordering::Relaxed);
                if u > 0 && r >= u {
                    return seen;
                }
            }
            None => {}
        }
    }
    panic!("the feed's resolved timestamp never passed the last commit: {feed:?}");
}

/// The consumer's map at `t` against the journal and the lists' finals,
/// as `cluster_past` checks the cluster read back (a deletion as an
/// empty value, as there).
fn check(t: u64, state: &State, journal: &[Acked], finals: &[Vec<u8>]) {
    let rows =
        state.iter().map(|(k, (v, value))| (k.clone(), (*v, value.clone().unwrap_or_default())));
    check_rows(t, &rows.collect(), journal, finals);
}

/// The delivered transactions and every resolved point against the
/// journal.
fn check_seen(seen: &Seen, journal: &[Acked], finals: &[Vec<u8>]) {
    assert!(journal.len() > 100, "{} commits", journal.len());
    assert!(seen.points.len() > 5, "{} resolved timestamps", seen.points.len());

    // Delivered in version order, each version once.
    for w in seen.txns.windows(2) {
        assert!(w[0].0 < w[1].0, "out of order: {:?} then {:?}", w[0].0, w[1].0);
    }
    // Every acknowledged commit once, whole: all its writes, with its
    // values, in one transaction.
    // (The journal has a commit's timestamp, not its client: two
    // transactions may share a timestamp.)
    let mut by_ts: HashMap<u64, Vec<Writes>> = HashMap::new();
    for (v, w) in &seen.txns {
        let mut w = w.clone();
        w.sort();
        by_ts.entry(v.ts).or_default().push(w);
    }
    for a in journal {
        let got = by_ts.get(&a.ts).unwrap_or_else(|| panic!("the commit at {} is missing", a.ts));
        let mut want: Vec<_> = a.writes.iter().map(|(k, v)| (k.clone(), Some(v.clone()))).collect();
        want.sort();
        let keys = |w: &Writes| {
            w.iter().map(|(k, _)| String::from_utf8_lossy(k).into_owned()).collect::<Vec<_>>()
        };
        assert!(
            got.contains(&want),
            "the commit at {} delivered as another: {:?} for {:?}",
            a.ts,
            got.iter().map(keys).collect::<Vec<_>>(),
            keys(&want)
        );
    }
    // Every resolved timestamp against the journal; some against the
    // cluster read back at that point from the shards' logs.
    for (t, state) in &seen.points {
        check(*t, state, journal, finals);
    }
}

/// One run: writers, two moves, a restart; the feed checked.
async fn run(seed: u64) {
    let mut f = three_shards_keeping(
        Duration::from_millis(200),
        Duration::from_secs(30),
        Some(Duration::from_secs(3600)),
        Duration::from_millis(300),
    )
    .await;
    let map_url = f.map_url.clone();
    let maps =
        || Arc::new(MapStore::new(milliscale::store::open(&map_url).expect("map store"), ""));
    let options = |_: u32, url: &str| Ok(Options::new().store(url));
    // Opened on the empty cluster, before anything is written.
    let feed = tokio::task::block_in_place(|| {
        let slow_2 = |s: u32, url: &str| match s {
            2 => {
                let store = milliscale::store::open(url).map_err(|e| e.to_string())?;
                Ok(Options::new().add_store_handle(Arc::new(Slow(store))))
            }
            _ => Ok(Options::new().store(url)),
        };
        ClusterFeed::open(
            maps(),
            Box::new(slow_2),
            ReplicaOptions::default(),
            None,
            FeedFilter::default(),
        )
    })
    .expect("the cluster's feed");
    let until = Arc::new(AtomicU64::new(0));
    let consumer = {
        let until = Arc::clone(&until);
        std::thread::spawn(move || consume(feed, until))
    };
    let (journal, finals) = write(&mut f, seed).await;
    until.store(journal.iter().map(|a| a.ts).max().expect("commits"), Ordering::Relaxed);
    let seen = tokio::task::block_in_place(|| consumer.join()).expect("the consumer");
    check_seen(&seen, &journal, &finals);
    let m = maps();
    let step = (seen.points.len() / 5).max(1);
    for (t, state) in seen.points.iter().skip(1).step_by(step) {
        let p = tokio::task::block_in_place(|| cluster_at(m.as_ref(), *t, options, |_| {}))
            .unwrap_or_else(|e| panic!("the cluster at {t}: {e}"));
        let past: BTreeMap<_, _> =
            rows_of(&p).into_iter().map(|(k, (v, value))| (k, (v, Some(value)))).collect();
        assert_eq!(&past, state, "at {t}: the feed's map is not the cluster at that point");
    }
    // Resumed after a resolved timestamp in the middle: exactly the
    // transactions above it, as the first feed delivered them (read back
    // from the shards' retention windows where their newest checkpoint is
    // past the cursor).
    let cursor = seen.points[seen.points.len() / 2].0;
    let again = tokio::task::block_in_place(|| {
        let feed = ClusterFeed::open(
            maps(),
            Box::new(options),
            ReplicaOptions::default(),
            Some(cursor),
            FeedFilter::default(),
        )
        .expect("the feed after a cursor");
        consume(feed, Arc::clone(&until))
    });
    let after: Vec<_> = seen.txns.iter().filter(|(v, _)| v.ts > cursor).cloned().collect();
    assert_eq!(again.txns.len(), after.len(), "resumed after {cursor}");
    assert!(again.txns == after, "resumed after {cursor}: other transactions");
    let pct = |v: &[u64], p: f64| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v[((v.len() - 1) as f64 * p) as usize] as f64 / 1000.0
    };
    eprintln!(
        "seed {seed}: {} commits, {} delivered, {} resolved timestamps; delivered after its \
         commit timestamp p50 {:.0} ms, p99 {:.0} ms; resolved behind the clock p50 {:.0} ms, \
         p99 {:.0} ms",
        journal.len(),
        seen.txns.len(),
        seen.points.len(),
        pct(&seen.delivery_lag, 0.5),
        pct(&seen.delivery_lag, 0.99),
        pct(&seen.resolved_lag, 0.5),
        pct(&seen.resolved_lag, 0.99),
    );
}

/// The writers, two moves, a restart: the journal of acknowledged commits
/// and the lists' final values.
async fn write(f: &mut Fixture, seed: u64) -> (Vec<Acked>, Vec<Vec<u8>>) {
    let maps = || MapStore::new(milliscale::store::open(&f.map_url).expect("map store"), "");
    let c = Cluster::connect(f.addrs[0].to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    // Cold rows on each shard, never written again: a move copies the
    // middle range's with their old versions.
    let mut tx = c.begin();
    let mut writes = Vec::new();
    for i in [1, 5, 9] {
        for j in 0..3 {
            let (k, v) = (format!("a0{i}c{j}").into_bytes(), format!("cold {seed}").into_bytes());
            tx.put(TABLE, &k, &v).expect("a put");
            writes.push((cluster_key(TABLE, &k), v));
        }
    }
    let ts = tx.commit().await.expect("the cold rows").expect("a write");
    let journal: Arc<Mutex<Vec<Acked>>> = Arc::new(Mutex::new(vec![Acked { ts, writes }]));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for w in 0..6u32 {
        let c = Cluster::builder(f.addrs[(w % 3) as usize].to_string())
            .client_id(100 + w)
            .connect()
            .await
            .expect("connect");
        let (stop, journal) = (Arc::clone(&stop), Arc::clone(&journal));
        let s = seed as u32;
        tasks.push(tokio::spawn(async move {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let acked = if w < 4 {
                    let from = (w * 7 + n * (5 + s)) % ACCOUNTS;
                    let to = (from + 1 + (n + s) % (ACCOUNTS - 1)) % ACCOUNTS;
                    transfer(&c, from, to, u64::from((n + s) % 9 + 1)).await
                } else {
                    let a = (n as usize * 3 + w as usize + s as usize) % LISTS;
                    let b = (a + 2 + n as usize % 3 * 2) % LISTS;
                    let b = if b / 2 == a / 2 { (b + 2) % LISTS } else { b };
                    append(&c, a, b, &format!("{w}-{n}")).await
                };
                journal.lock().expect("journal").push(acked.expect("a commit"));
            }
        }));
    }
    // The middle range moves to shard 2 and back to shard 1 meanwhile.
    let m = maps();
    for to in [2, 1] {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let map = m.latest().expect("the map").expect("a map");
        let plan = MovePlan::new(map.clone(), 1, to).expect("a move");
        let addr = |s: u32| map.shards[&s].addr.clone();
        let src = Client::connect(addr(plan.from)).await.expect("connect");
        let dst = Client::connect(addr(to)).await.expect("connect");
        let publish = async |next: ShardMap| m.publish(&next);
        handover::move_range(&plan, &src, &dst, publish, |_| {}).await.expect("a move");
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("a worker");
    }
    // Shard 0 restarts; then more transfers through it.
    let (server, db) = f.servers[0].take().expect("shard 0");
    server.shutdown().await;
    db.close().await.expect("close");
    f.servers[0] = Some(start_shard(f, 0).await);
    let c = Cluster::connect(f.addrs[1].to_string()).await.expect("connect");
    for n in 0..20u32 {
        let acked = transfer(&c, n % ACCOUNTS, (n + 5) % ACCOUNTS, 3).await.expect("a commit");
        journal.lock().expect("journal").push(acked);
    }
    let journal = journal.lock().expect("journal").clone();
    let mut finals = Vec::new();
    for l in 0..LISTS {
        finals.push(c.get(TABLE, &list(l)).await.expect("a list").unwrap_or_default());
    }
    (journal, finals)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_feed_reproduces_the_cluster_at_every_resolved_timestamp() {
    let seeds: u64 = std::env::var("MILLISCALE_CLUSTER_FEED_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for seed in 1..=seeds {
        run(seed).await;
    }
}

/// The cluster's feed over a shard's `Changes` call
/// (`Cluster::changes`): opened before the writes, it sends every
/// acknowledged transfer once, whole, in version order, then a resolved
/// timestamp past the last; filtered to a key prefix, only those keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_feed_through_a_shards_changes_call() {
    use milliscale_client::{ChangeFilter, ClusterChangeEvent};
    let f = three_shards_keeping(
        Duration::from_millis(200),
        Duration::from_secs(30),
        None,
        Duration::from_millis(300),
    )
    .await;
    let c = Cluster::connect(f.addrs[1].to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    let mut feed = c.changes(None, ChangeFilter::default()).await.expect("the feed");
    let only_a01 = ChangeFilter { tables: vec![TABLE.into()], prefix: Some(b"a01".to_vec()) };
    let mut filtered = c.changes(None, only_a01).await.expect("a filtered feed");
    let mut journal = Vec::new();
    for n in 0..30u32 {
        journal
            .push(transfer(&c, n % ACCOUNTS, (n * 5 + 1) % ACCOUNTS, 2).await.expect("a commit"));
    }
    let last = journal.iter().map(|a| a.ts).max().expect("commits");
    let mut got: HashMap<u64, Writes> = HashMap::new();
    let mut prev = (0, 0);
    loop {
        let e = tokio::time::timeout(Duration::from_secs(30), feed.next()).await;
        match e.expect("an event in time").expect("the feed").expect("open") {
            ClusterChangeEvent::Commit { ts, client, changes } => {
                assert!((ts, client) > prev, "out of order");
                prev = (ts, client);
                let w = changes.into_iter().map(|c| (cluster_key(&c.table, &c.key), c.value));
                assert!(got.insert(ts, w.collect()).is_none(), "{ts} twice");
            }
            ClusterChangeEvent::Resolved(t) if t >= last => break,
            ClusterChangeEvent::Resolved(_) => {}
        }
    }
    for a in &journal {
        let mut w =
            got.remove(&a.ts).unwrap_or_else(|| panic!("the commit at {} is missing", a.ts));
        let mut want: Writes = a.writes.iter().map(|(k, v)| (k.clone(), Some(v.clone()))).collect();
        w.sort();
        want.sort();
        assert_eq!(w, want, "the commit at {}", a.ts);
    }
    // The filtered feed: only account 1's writes.
    let mut seen = 0;
    loop {
        let e = tokio::time::timeout(Duration::from_secs(30), filtered.next()).await;
        match e.expect("an event in time").expect("the feed").expect("open") {
            ClusterChangeEvent::Commit { changes, .. } => {
                assert!(changes.iter().all(|c| c.key == account(1)), "{changes:?}");
                seen += 1;
            }
            ClusterChangeEvent::Resolved(t) if t >= last => break,
            ClusterChangeEvent::Resolved(_) => {}
        }
    }
    let want = journal.iter().filter(|a| a.writes.iter().any(|(k, _)| k.ends_with(b"a01"))).count();
    assert_eq!(seen, want, "account 1's transfers");
}
