//! The three shards the cluster tests run: each a `milliscale serve
//! --cluster` in this process on a loopback port, its database in a
//! directory, the bank's accounts split 4/4/4 among them.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use milliscale::{AsyncDatabase, Options};
use milliscale_milana::shard_map::{MapStore, ShardInfo, ShardMap};
use milliscale_milana::types::cluster_key;
use milliscale_server::shard::ShardOptions;
use milliscale_server::{Backend, Server, ServerOptions};

use crate::cluster::{TABLE, account};

/// A free loopback port below the ephemeral range (32768 and up), so that
/// no client connection takes it before the shard binds it.
pub(crate) fn free_addr() -> SocketAddr {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let at = (std::process::id() % 100) * 120;
    std::iter::repeat_with(|| 20_000 + (at + NEXT.fetch_add(1, Ordering::Relaxed)) % 12_000)
        .find_map(|p| std::net::TcpListener::bind(("127.0.0.1", p as u16)).ok()?.local_addr().ok())
        .expect("a free port")
}

pub(crate) struct Fixture {
    _dir: tempfile::TempDir,
    pub(crate) map_url: String,
    pub(crate) data: Vec<String>,
    pub(crate) addrs: Vec<SocketAddr>,
    pub(crate) servers: Vec<Option<(Server, AsyncDatabase)>>,
    /// How often the shards collect and forget.
    every: Duration,
    /// How long a frozen range waits for its silent mover.
    pub(crate) move_timeout: Duration,
    /// The shards' retention window (none: they keep none).
    pub(crate) retention: Option<Duration>,
    /// How long a prepared transaction waits before its shard asks.
    pub(crate) termination: Duration,
}

/// Three shards; the accounts split 4/4/4 among them. They collect and
/// forget every 200 ms.
pub(crate) async fn three_shards() -> Fixture {
    three_shards_with(Duration::from_millis(200), Duration::from_secs(30)).await
}

/// Shard `i`'s place in the map.
fn place((i, (addr, log)): (u32, (&SocketAddr, &String))) -> (u32, ShardInfo) {
    (i, ShardInfo { addr: addr.to_string(), log: log.clone() })
}

/// Three shards collecting every `every`; a mover silent for `move_timeout` is aborted.
pub(crate) async fn three_shards_with(every: Duration, move_timeout: Duration) -> Fixture {
    three_shards_keeping(every, move_timeout, None, Duration::from_millis(300)).await
}

/// [`three_shards_with`], each shard keeping a retention window.
pub(crate) async fn three_shards_keeping(
    every: Duration,
    move_timeout: Duration,
    retention: Option<Duration>,
    termination: Duration,
) -> Fixture {
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
        shards: (0..3u32).zip(addrs.iter().zip(&data)).map(place).collect(),
        rebalance: None,
        split_load: None,
    };
    maps.publish(&map).expect("publish");
    let servers = Vec::new();
    let mut f = Fixture {
        _dir: dir,
        map_url,
        data,
        addrs,
        servers,
        every,
        move_timeout,
        retention,
        termination,
    };
    for i in 0..3 {
        let s = start_shard(&f, i).await;
        f.servers.push(Some(s));
    }
    f
}

pub(crate) async fn start_shard(f: &Fixture, i: u32) -> (Server, AsyncDatabase) {
    let options = Options::new().store(&f.data[i as usize]).retention(f.retention);
    let db = AsyncDatabase::open(options).await.expect("open");
    let mut o = ServerOptions::new(f.addrs[i as usize]);
    let mut shard = ShardOptions::new(i, f.map_url.clone());
    shard.termination_timeout = f.termination;
    shard.collect_every = f.every;
    shard.move_timeout = f.move_timeout;
    o.cluster = Some(shard);
    let server = Server::start(Backend::Writer(db.clone()), o, None).await.expect("start a shard");
    (server, db)
}
