//! A cluster's past (design record 0012, "A cluster's past"): three shards
//! keeping a retention window run bank transfers and list appends across
//! shards, with a journal of every acknowledged commit and its commit
//! timestamp. At random timestamps T the cluster read back from the
//! shards' logs alone holds every journaled commit at or below T, none
//! above, the bank's total, and each list append whole or absent, as a
//! prefix of the list's final value. Then the cluster at one T is written
//! to new stores, served by three new shards, read and written.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use milliscale::{AsyncDatabase, Options};
use milliscale_client::handover::{self, MovePlan};
use milliscale_client::{Client, Cluster, KeyRange};
use milliscale_milana::shard_map::{MapStore, ShardInfo, ShardMap};
use milliscale_milana::types::{CommitTs, cluster_key};
use milliscale_milana::versions::split_row;
use milliscale_server::shard::ShardOptions;
use milliscale_server::shard::past::{ClusterPast, clone_shard, cluster_at, write_shard};
use milliscale_server::{Backend, Server, ServerOptions};
use rand::{Rng, SeedableRng};

use crate::cluster::{TABLE, account, free_addr, now_us, prepare, raw, three_shards_keeping};
use milliscale_proto::v1 as proto;

pub(crate) const ACCOUNTS: u32 = 12;
pub(crate) const INITIAL: u64 = 100;

/// The lists: two keys on each shard (the map splits `bank` at `a04` and
/// `a08`).
pub(crate) fn list(i: usize) -> Vec<u8> {
    ["a01l", "a02l", "a05l", "a06l", "a09l", "a10l"][i].as_bytes().to_vec()
}
pub(crate) const LISTS: usize = 6;

/// An acknowledged commit: its timestamp and what it wrote (cluster keys).
#[derive(Debug, Clone)]
pub(crate) struct Acked {
    pub(crate) ts: u64,
    pub(crate) writes: Vec<(Vec<u8>, Vec<u8>)>,
}

fn number(v: Option<Vec<u8>>) -> u64 {
    v.map_or(INITIAL, |v| String::from_utf8(v).expect("utf8").parse().expect("a number"))
}

pub(crate) async fn transfer(
    c: &Cluster,
    from: u32,
    to: u32,
    amount: u64,
) -> milliscale_client::Result<Acked> {
    milliscale_client::retry(50, || async {
        let mut tx = c.begin();
        let bf = number(tx.get(TABLE, &account(from)).await?);
        let bt = number(tx.get(TABLE, &account(to)).await?);
        let amount = amount.min(bf);
        let (a, b) = ((bf - amount).to_string(), (bt + amount).to_string());
        tx.put(TABLE, &account(from), a.as_bytes())?;
        tx.put(TABLE, &account(to), b.as_bytes())?;
        let ts = tx.commit().await?.expect("a write");
        let writes = vec![
            (cluster_key(TABLE, &account(from)), a.into_bytes()),
            (cluster_key(TABLE, &account(to)), b.into_bytes()),
        ];
        Ok(Acked { ts, writes })
    })
    .await
}

/// Append `id` to lists `a` and `b` in one transaction.
pub(crate) async fn append(
    c: &Cluster,
    a: usize,
    b: usize,
    id: &str,
) -> milliscale_client::Result<Acked> {
    milliscale_client::retry(50, || async {
        let mut tx = c.begin();
        let mut writes = Vec::new();
        for l in [a, b] {
            let old = tx.get(TABLE, &list(l)).await?.unwrap_or_default();
            let new = [old, format!("{id},").into_bytes()].concat();
            tx.put(TABLE, &list(l), &new)?;
            writes.push((cluster_key(TABLE, &list(l)), new));
        }
        let ts = tx.commit().await?.expect("a write");
        Ok(Acked { ts, writes })
    })
    .await
}

/// The past's rows, all shards together: key to (version, value).
pub(crate) fn rows_of(p: &ClusterPast) -> BTreeMap<Vec<u8>, (CommitTs, Vec<u8>)> {
    let mut out = BTreeMap::new();
    for rows in p.shards.values() {
        for (k, row) in rows {
            let (v, value) = split_row(row).expect("a version");
            assert!(out.insert(k.clone(), (v, value.unwrap_or_default().to_vec())).is_none());
        }
    }
    out
}

/// Check the past at `t` against the journal and the lists' final values.
fn check(t: u64, p: &ClusterPast, journal: &[Acked], finals: &[Vec<u8>]) {
    check_rows(t, &rows_of(p), journal, finals);
}

/// Check the cluster's rows at `t` (key to version and value, a deletion
/// as an empty value) against the journal and the lists' final values.
pub(crate) fn check_rows(
    t: u64,
    rows: &BTreeMap<Vec<u8>, (CommitTs, Vec<u8>)>,
    journal: &[Acked],
    finals: &[Vec<u8>],
) {
    // Every key: the newest journaled write at or below t, or a newer
    // write at or below t whose acknowledgment was lost (none here: the
    // journal has every commit that returned).
    let mut expect: BTreeMap<&[u8], (u64, &[u8])> = BTreeMap::new();
    for a in journal.iter().filter(|a| a.ts <= t) {
        for (k, v) in &a.writes {
            let e = expect.entry(k).or_insert((0, &[]));
            if a.ts > e.0 {
                *e = (a.ts, v);
            }
        }
    }
    for (k, (ts, v)) in &expect {
        let (got, value) = rows.get(*k).unwrap_or_else(|| panic!("at {t}: {k:?} is missing"));
        assert!(got.ts <= t, "at {t}: {k:?} holds a version above the point, {got:?}");
        assert!(got.ts >= *ts, "at {t}: {k:?} lost the acknowledged commit at {ts}");
        if got.ts == *ts {
            assert_eq!(value.as_slice(), *v, "at {t}: {k:?}'s value at {ts}");
        }
    }
    for (k, (v, _)) in rows {
        assert!(v.ts <= t, "at {t}: {k:?} holds a version above the point, {v:?}");
    }
    // The bank's total.
    let total: u64 = (0..ACCOUNTS)
        .map(|i| {
            let r = rows.get(&cluster_key(TABLE, &account(i)));
            r.map_or(INITIAL, |(_, v)| String::from_utf8_lossy(v).parse().expect("a balance"))
        })
        .sum();
    assert_eq!(total, u64::from(ACCOUNTS) * INITIAL, "at {t}: the bank's total");
    // The lists: each a prefix of its final value; each append whole.
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (l, fin) in finals.iter().enumerate() {
        let v = rows.get(&cluster_key(TABLE, &list(l))).map(|(_, v)| v.clone()).unwrap_or_default();
        assert!(fin.starts_with(&v), "at {t}: list {l} is no prefix of its final value");
        for id in String::from_utf8(v).expect("utf8").split(',').filter(|s| !s.is_empty()) {
            *seen.entry(id.to_owned()).or_default() += 1;
        }
    }
    for (id, n) in seen {
        assert_eq!(n, 2, "at {t}: append {id} is in {n} of its 2 lists");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_at_a_timestamp_holds_every_commit_below_it_and_none_above() {
    let points: usize =
        std::env::var("MILLISCALE_CLUSTER_POINTS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let f = three_shards_keeping(
        Duration::from_millis(200),
        Duration::from_secs(30),
        Some(Duration::from_secs(3600)),
        Duration::from_millis(300),
    )
    .await;
    let c = Cluster::connect(f.addrs[0].to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    let journal: Arc<Mutex<Vec<Acked>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let started = now_us();
    let mut tasks = Vec::new();
    for w in 0..6u32 {
        let c = Cluster::builder(f.addrs[(w % 3) as usize].to_string())
            .client_id(100 + w)
            .connect()
            .await
            .expect("connect");
        let (stop, journal) = (Arc::clone(&stop), Arc::clone(&journal));
        tasks.push(tokio::spawn(async move {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let acked = if w < 4 {
                    let from = (w * 7 + n * 5) % ACCOUNTS;
                    let to = (from + 1 + n % (ACCOUNTS - 1)) % ACCOUNTS;
                    transfer(&c, from, to, u64::from(n % 9 + 1)).await
                } else {
                    // Two lists on different shards.
                    let a = (n as usize * 3 + w as usize) % LISTS;
                    let b = (a + 2 + n as usize % 3 * 2) % LISTS;
                    let b = if b / 2 == a / 2 { (b + 2) % LISTS } else { b };
                    append(&c, a, b, &format!("{w}-{n}")).await
                };
                journal.lock().expect("journal").push(acked.expect("a commit"));
            }
        }));
    }
    // The middle range (its two accounts... a04-a07, and two lists) moves
    // to shard 2 and back to shard 1 while they run: when each map
    // version was published lies between the two instants kept.
    let maps = MapStore::new(milliscale::store::open(&f.map_url).expect("map store"), "");
    let mut moves = Vec::new();
    for to in [2, 1] {
        tokio::time::sleep(Duration::from_millis(1300)).await;
        let map = maps.latest().expect("the map").expect("a map");
        let plan = MovePlan::new(map.clone(), 1, to).expect("a move");
        let addr = |s: u32| map.shards[&s].addr.clone();
        let src = Client::connect(addr(plan.from)).await.expect("connect");
        let dst = Client::connect(addr(to)).await.expect("connect");
        let before = now_us();
        let publish = async |next: ShardMap| maps.publish(&next);
        let moved = handover::move_range(&plan, &src, &dst, publish, |_| {}).await.expect("a move");
        moves.push((before, now_us(), moved.map_version));
    }
    tokio::time::sleep(Duration::from_millis(1300)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("a worker");
    }
    let ended = now_us();
    let journal = journal.lock().expect("journal").clone();
    assert!(journal.len() > 100, "{} commits", journal.len());
    let mut finals = Vec::new();
    for l in 0..LISTS {
        finals.push(c.get(TABLE, &list(l)).await.expect("a list").unwrap_or_default());
    }
    // Let the shards forget past the run, so that most points settle.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let options = |_, url: &str| Ok(Options::new().store(url));
    let mut rng = rand::rngs::StdRng::seed_from_u64(started);
    let mut ts: Vec<u64> = (0..points).map(|_| rng.random_range(started..ended)).collect();
    // And the journal's own commits, exactly at their timestamps.
    ts.push(journal[journal.len() / 2].ts);
    ts.push(journal[journal.len() / 3].ts - 1);
    let mut settled = 0;
    let mut last = None;
    for t in ts {
        let p = tokio::task::block_in_place(|| cluster_at(&maps, t, options, |_| {}))
            .unwrap_or_else(|e| panic!("the cluster at {t}: {e}"));
        check(t, &p, &journal, &finals);
        // The map as of t: each move's version once published.
        let published = moves.iter().filter(|(_, after, _)| *after < t).map(|m| m.2).max();
        let maybe = moves.iter().filter(|(before, _, _)| *before <= t).map(|m| m.2).max();
        let (low, high) = (published.unwrap_or(1), maybe.unwrap_or(1));
        assert!((low..=high).contains(&p.map.version), "at {t}: map version {}", p.map.version);
        settled += p.reports.iter().filter(|r| r.settled).count();
        last = Some(p);
    }
    assert!(settled > 0, "no shard's log settled a point");

    let last = last.expect("a point");
    serve_restored(&last, None).await;
    // And cloned (the sources still there): the same rows, then writes.
    serve_restored(&last, Some(&f.data)).await;
}

/// The cluster at `p`, written to new stores and served by three new
/// shards: every row reads back, and it takes writes.
async fn serve_restored(p: &ClusterPast, clone_of: Option<&[String]>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let map_url = format!("file://{}/map", dir.path().display());
    let addrs: Vec<SocketAddr> = (0..3).map(|_| free_addr()).collect();
    let mut shards = BTreeMap::new();
    for i in 0..3u32 {
        let url = format!("file://{}/shard-{i}", dir.path().display());
        let target = Options::new().store(&url);
        tokio::task::block_in_place(|| match clone_of {
            Some(sources) => {
                let source = Options::new().store(&sources[i as usize]);
                let r = clone_shard(&source, &target, p, i).expect("clone a shard");
                assert!(r.requests < 30, "a clone costs a few requests: {r:?}");
            }
            None => {
                let w = write_shard(&target, std::slice::from_ref(&url), p, i, |_| {});
                assert_eq!(w.expect("write a shard").rows, p.shards[&i].len());
            }
        });
        shards.insert(i, ShardInfo { addr: addrs[i as usize].to_string(), log: url });
    }
    // A second write to the same store is refused.
    let again = tokio::task::block_in_place(|| {
        let url = &shards[&0].log;
        write_shard(&Options::new().store(url), std::slice::from_ref(url), p, 0, |_| {})
    });
    assert!(again.expect_err("a store in use").contains("empty store"));
    let map = ShardMap {
        version: 1,
        ranges: p.map.ranges.clone(),
        shards,
        rebalance: None,
        split_load: None,
    };
    MapStore::new(milliscale::store::open(&map_url).expect("map"), "")
        .publish(&map)
        .expect("publish");
    // Read-only first: every row reads back, a write is refused.
    let rows = rows_of(p);
    for read_only in [true, false] {
        let mut servers = Vec::new();
        for i in 0..3u32 {
            let log = &map.shards[&i].log;
            let db = AsyncDatabase::open(Options::new().store(log)).await.expect("open");
            let mut o = ServerOptions::new(addrs[i as usize]);
            let mut shard = ShardOptions::new(i, map_url.clone());
            shard.read_only = read_only;
            o.cluster = Some(shard);
            servers.push((
                Server::start(Backend::Writer(db.clone()), o, None).await.expect("a shard"),
                db,
            ));
        }
        let c2 = Cluster::connect(addrs[0].to_string()).await.expect("connect");
        let mut tx = c2.begin();
        for (k, (_, v)) in &rows {
            let (_, key) = milliscale_milana::types::split_cluster_key(k).expect("a key");
            assert_eq!(tx.get(TABLE, key).await.expect("read").as_deref(), Some(&v[..]), "{k:?}");
        }
        tx.commit().await.expect("a read-only commit");
        // And nothing else: a scan finds exactly the rows at the point
        // (a tombstone is a deleted key).
        let all = c2.scan(TABLE, KeyRange::all()).await.expect("scan");
        let want: Vec<(Vec<u8>, Vec<u8>)> = p
            .shards
            .values()
            .flatten()
            .filter_map(|(k, row)| {
                let (_, value) = split_row(row).expect("a version");
                let (_, key) = milliscale_milana::types::split_cluster_key(k).expect("a key");
                value.map(|v| (key.to_vec(), v.to_vec()))
            })
            .collect::<BTreeMap<_, _>>()
            .into_iter()
            .collect();
        assert_eq!(all, want, "the cluster's rows are the point's");
        let moved = transfer(&c2, 0, 11, 5).await;
        if read_only {
            let e = moved.expect_err("a read-only cluster refuses writes");
            assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e}");
        } else {
            moved.expect("the restored cluster takes writes");
        }
        let mut total = 0;
        for i in 0..ACCOUNTS {
            total += number(c2.get(TABLE, &account(i)).await.expect("read"));
        }
        assert_eq!(total, u64::from(ACCOUNTS) * INITIAL);
        drop(c2);
        for (s, db) in servers {
            s.shutdown().await;
            db.close().await.expect("close");
        }
    }
}

/// A prepare of `txn` (client `client`) writing `value` to `key` at
/// version `ts`, among `parts`.
fn prepare_at(client: u32, ts: u64, key: u32, parts: Vec<u32>) -> proto::ShardPrepareRequest {
    let mut p = prepare(client, 1, account(key), parts);
    p.version = Some(proto::CommitTs { ts, client });
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_the_logs_end_before_settling_the_termination_rule_decides() {
    // No background rounds and no termination: no shard forgets (so no
    // log settles) and none asks about a prepared transaction.
    let mut f = three_shards_keeping(
        Duration::from_secs(3600),
        Duration::from_secs(30),
        Some(Duration::from_secs(3600)),
        Duration::from_secs(3600),
    )
    .await;
    let c = Cluster::connect(f.addrs[0].to_string()).await.expect("connect");
    c.create_table(TABLE).await.expect("create");
    let mut journal = Vec::new();
    for n in 0..20u32 {
        journal.push(transfer(&c, n % ACCOUNTS, (n * 5 + 1) % ACCOUNTS, 3).await.expect("a move"));
    }
    // Transaction 900 prepared on both its shards (0 and 1): committed
    // by the rule. Transaction 901 prepared on shard 0 only, of shards 0
    // and 2: aborted. Neither is ever decided by its coordinator.
    let ts = now_us();
    let (mut s0, mut s1) = (raw(f.addrs[0]).await, raw(f.addrs[1]).await);
    for (s, key) in [(&mut s0, 1), (&mut s1, 5)] {
        let v = s.shard_prepare(prepare_at(900, ts, key, vec![0, 1])).await.expect("a vote");
        assert!(v.into_inner().yes);
    }
    let v = s0.shard_prepare(prepare_at(901, ts + 1, 2, vec![0, 2])).await.expect("a vote");
    assert!(v.into_inner().yes);
    let t = now_us();
    // The shards stop with both transactions prepared.
    for s in &mut f.servers {
        let (server, db) = s.take().expect("a shard");
        server.shutdown().await;
        db.close().await.expect("close");
    }
    let maps = MapStore::new(milliscale::store::open(&f.map_url).expect("map store"), "");
    let options = |_, url: &str| Ok(Options::new().store(url));
    let p =
        tokio::task::block_in_place(|| cluster_at(&maps, t, options, |_| {})).expect("the past");
    assert!(p.reports.iter().all(|r| !r.settled), "{:?}", p.reports);
    assert_eq!(p.resolved, (1, 1), "one committed by the rule, one aborted");
    let rows = rows_of(&p);
    for key in [1, 5] {
        let (v, value) = &rows[&cluster_key(TABLE, &account(key))];
        assert_eq!((v.ts, v.client, &value[..]), (ts, 900, &b"7"[..]), "a{key:02}");
    }
    let (v, _) = &rows[&cluster_key(TABLE, &account(2))];
    assert_ne!(v.client, 901, "the transaction prepared on one of its two shards is absent");
    // The rest is the journal's: the bank's total without the rule's
    // writes (which set two balances to 7) is the journal's at t.
    let mut expect: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for a in &journal {
        for (k, v) in &a.writes {
            expect.insert(k.clone(), v.clone());
        }
    }
    for (k, v) in expect {
        if k != cluster_key(TABLE, &account(1)) && k != cluster_key(TABLE, &account(5)) {
            assert_eq!(rows[&k].1, v, "{k:?}");
        }
    }
}
