//! A cluster of three `milliscale serve --cluster` shards in this process,
//! reached by the cluster client: tables across the shards, a bank moved
//! by concurrent transfers with its total checked during and after, write
//! skew across two shards refused, a single server's calls refused on a
//! shard, and a shard restarted from its tables.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use milliscale::{AsyncDatabase, Options};
use milliscale_client::{Client, Cluster};
use milliscale_milana::shard_map::{MapStore, ShardInfo, ShardMap};
use milliscale_milana::types::cluster_key;
use milliscale_server::shard::ShardOptions;
use milliscale_server::{Backend, Server, ServerOptions};

const TABLE: &str = "bank";
const ACCOUNTS: u32 = 12;
const INITIAL: u64 = 100;

fn account(i: u32) -> Vec<u8> {
    format!("a{i:02}").into_bytes()
}

/// A free loopback port (bound, then let go: the shard takes it next).
fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
}

struct Fixture {
    _dir: tempfile::TempDir,
    map_url: String,
    data: Vec<String>,
    addrs: Vec<SocketAddr>,
    servers: Vec<Option<(Server, AsyncDatabase)>>,
}

/// Three shards; the accounts split 4/4/4 among them.
async fn three_shards() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let map_url = format!("file://{}/map", dir.path().display());
    let addrs: Vec<SocketAddr> = (0..3).map(|_| free_addr()).collect();
    let data: Vec<String> =
        (0..3).map(|i| format!("file://{}/shard-{i}", dir.path().display())).collect();
    let store = milliscale::store::open(&map_url).expect("map store");
    let maps = MapStore::new(store, "");
    let map = ShardMap {
        version: 1,
        ranges: vec![
            (Vec::new(), 0),
            (cluster_key(TABLE, &account(4)), 1),
            (cluster_key(TABLE, &account(8)), 2),
        ],
        shards: (0..3)
            .map(|i| {
                (
                    i,
                    ShardInfo {
                        addr: addrs[i as usize].to_string(),
                        log: data[i as usize].clone(),
                    },
                )
            })
            .collect(),
    };
    maps.publish(&map).expect("publish");
    let mut f = Fixture { _dir: dir, map_url, data, addrs, servers: Vec::new() };
    for i in 0..3 {
        let s = start_shard(&f, i).await;
        f.servers.push(Some(s));
    }
    f
}

async fn start_shard(f: &Fixture, i: u32) -> (Server, AsyncDatabase) {
    let db = AsyncDatabase::open(Options::new().store(&f.data[i as usize])).await.expect("open");
    let mut o = ServerOptions::new(f.addrs[i as usize]);
    let mut shard = ShardOptions::new(i, f.map_url.clone());
    shard.termination_timeout = Duration::from_millis(300);
    shard.collect_every = Duration::from_millis(200);
    o.cluster = Some(shard);
    let server = Server::start(Backend::Writer(db.clone()), o, None).await.expect("start a shard");
    (server, db)
}

async fn transfer(c: &Cluster, from: u32, to: u32, amount: u64) -> milliscale_client::Result<()> {
    milliscale_client::retry(50, || async {
        let mut tx = c.begin();
        let bf = balance(tx.get(TABLE, &account(from)).await?);
        let bt = balance(tx.get(TABLE, &account(to)).await?);
        let amount = amount.min(bf);
        tx.put(TABLE, &account(from), (bf - amount).to_string().as_bytes())?;
        tx.put(TABLE, &account(to), (bt + amount).to_string().as_bytes())?;
        tx.commit().await
    })
    .await
}

fn balance(v: Option<Vec<u8>>) -> u64 {
    v.map_or(INITIAL, |v| String::from_utf8(v).expect("utf8").parse().expect("a number"))
}

async fn total(c: &Cluster) -> milliscale_client::Result<u64> {
    milliscale_client::retry(50, || async {
        let mut tx = c.begin();
        let mut sum = 0;
        for i in 0..ACCOUNTS {
            sum += balance(tx.get(TABLE, &account(i)).await?);
        }
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
