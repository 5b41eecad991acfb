//! `milliscale shard`: sharded transactions across servers (the
//! `milliscale-milana` crate). `publish` writes the next version of the
//! shard map to its store; `serve` runs one shard's primary; `show`
//! prints the map; and `bench retwis` drives the shards with Retwis.

use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use milliscale_milana::net::server::{ShardOptions, ShardServer};
use milliscale_milana::shard_map::{MapStore, ShardInfo, ShardMap};

use crate::args::Failure;

#[derive(Subcommand)]
pub(crate) enum Shard {
    /// Publish the next version of the shard map: shard i (from 0, in the
    /// order given) at `--shard ADDR=LOG_URL`, owning the keys from the
    /// i-th split key (the empty key for shard 0) to the next. Fails if
    /// another publisher wrote that version first.
    Publish(PublishArgs),
    /// Run one shard's primary: open its log (the store URL in the map),
    /// recover it, fencing any earlier primary, and serve until SIGTERM
    /// or SIGINT.
    Serve(ShardServeArgs),
    /// Print the newest version of the shard map, as JSON.
    Show(MapArgs),
}

/// Where the shard map lives.
#[derive(Args, Clone)]
pub(crate) struct MapArgs {
    /// The store the map is on (`s3://bucket?endpoint=...`, `file:///dir`).
    #[arg(long)]
    pub(crate) map: String,
    /// The prefix of the map's objects on that store.
    #[arg(long, default_value = "")]
    pub(crate) map_prefix: String,
}

impl MapArgs {
    fn open(&self) -> Result<Arc<MapStore>, Failure> {
        let store = milliscale::store::open(&self.map)
            .map_err(|e| Failure::Usage(format!("--map {}: {e}", self.map)))?;
        Ok(Arc::new(MapStore::new(store, &self.map_prefix)))
    }
}

#[derive(Args)]
pub(crate) struct PublishArgs {
    #[command(flatten)]
    map: MapArgs,
    /// A shard: its server's address and its log's store URL, as
    /// `ADDR=LOG_URL`. Repeat for each shard, in order.
    #[arg(long = "shard", value_name = "ADDR=LOG_URL", required = true)]
    shards: Vec<String>,
    /// The first key of each shard after the first, in order (one fewer
    /// than the shards). Default: equal parts of the keys `bench retwis`
    /// uses (`r` and 16 hex digits).
    #[arg(long = "split", value_name = "KEY")]
    splits: Vec<String>,
}

#[derive(Args)]
pub(crate) struct ShardServeArgs {
    #[command(flatten)]
    map: MapArgs,
    /// The shard to serve.
    #[arg(long)]
    shard: u32,
    /// Where to listen (default: the shard's address in the map).
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// How long a multi-shard transaction may stay prepared before this
    /// primary asks the other participants (ms).
    #[arg(long, default_value_t = 1000)]
    termination_timeout_ms: u64,
}

pub(crate) fn shard(cmd: Shard) -> Result<(), Failure> {
    match cmd {
        Shard::Publish(a) => publish(a),
        Shard::Serve(a) => serve(a),
        Shard::Show(a) => {
            let map = a.open()?.latest().map_err(|e| e.to_string())?;
            let map = map.ok_or_else(|| Failure::Run("no shard map published".into()))?;
            println!("{}", serde_json::to_string_pretty(&map).map_err(|e| e.to_string())?);
            Ok(())
        }
    }
}

fn publish(a: PublishArgs) -> Result<(), Failure> {
    let maps = a.map.open()?;
    let n = a.shards.len() as u32;
    let splits: Vec<Vec<u8>> = if a.splits.is_empty() {
        milliscale_bench::retwis::even_splits(n)
    } else {
        a.splits.iter().map(|s| s.clone().into_bytes()).collect()
    };
    if splits.len() + 1 != a.shards.len() {
        return Err(Failure::Usage(format!(
            "{} shards need {} split keys, not {}",
            n,
            n - 1,
            splits.len()
        )));
    }
    let mut shards = std::collections::BTreeMap::new();
    for (i, s) in a.shards.iter().enumerate() {
        let (addr, log) = s
            .split_once('=')
            .ok_or_else(|| Failure::Usage(format!("--shard {s}: expected ADDR=LOG_URL")))?;
        shards.insert(i as u32, ShardInfo { addr: addr.into(), log: log.into() });
    }
    let mut ranges = vec![(Vec::new(), 0)];
    ranges.extend(splits.into_iter().zip(1..));
    let version = maps.latest().map_err(|e| e.to_string())?.map_or(1, |m| m.version + 1);
    let map = ShardMap { version, ranges, shards };
    maps.publish(&map).map_err(|e| e.to_string())?;
    println!("published shard map version {version}: {n} shards");
    Ok(())
}

fn serve(a: ShardServeArgs) -> Result<(), Failure> {
    let maps = a.map.open()?;
    let map = maps.latest().map_err(|e| e.to_string())?;
    let map = map.ok_or_else(|| Failure::Usage("no shard map published".into()))?;
    let info = map.shards.get(&a.shard).ok_or_else(|| {
        Failure::Usage(format!("map version {} has no shard {}", map.version, a.shard))
    })?;
    let listen = match a.listen {
        Some(l) => l,
        None => info.addr.parse().map_err(|e| {
            Failure::Usage(format!("shard {}'s address {}: {e}", a.shard, info.addr))
        })?,
    };
    let log = milliscale::Options::new().store(info.log.clone());
    let mut opts = ShardOptions::new(a.shard);
    opts.termination_timeout = Duration::from_millis(a.termination_timeout_ms.max(1));
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let server =
            ShardServer::start(opts, log, maps, listen).await.map_err(|e| e.to_string())?;
        let r = server.recovery();
        eprintln!(
            "shard {}: recovered {} log records ({} lone prepares committed, {} multi-shard \
             prepares to ask about)",
            a.shard, r.records, r.committed, r.asked
        );
        println!("listening on {}", server.local_addr());
        let signal = crate::serve::wait_for_signal().await;
        eprintln!("shard {}: {signal}; shutting down", a.shard);
        server.shutdown().await.map_err(|e| Failure::Run(format!("closing the log: {e}")))
    })
}

/// `bench retwis`.
#[derive(Args)]
pub(crate) struct RetwisArgs {
    #[command(flatten)]
    map: MapArgs,
    /// Concurrent clients, each the coordinator of one transaction at a
    /// time.
    #[arg(long, default_value_t = 16)]
    clients: u32,
    /// Keys (Zipf ranks).
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// The Zipf exponent α of the key choice.
    #[arg(long, default_value_t = 0.75)]
    alpha: f64,
    /// Clock uncertainty ε in µs: each client's clock is off by up to ε/2
    /// either way (53 µs: PTP; 1,500 µs: NTP).
    #[arg(long, default_value_t = 53)]
    epsilon_us: u64,
    /// Validate read-only transactions at their shards instead of at the
    /// client.
    #[arg(long)]
    no_local_validation: bool,
    #[arg(long, default_value_t = 2)]
    warmup_s: u64,
    #[arg(long, default_value_t = 10)]
    duration_s: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn bench_retwis(a: RetwisArgs) -> Result<(), Failure> {
    let cfg = milliscale_bench::retwis::RetwisConfig {
        map: a.map.map.clone(),
        map_prefix: a.map.map_prefix.clone(),
        clients: a.clients,
        keys: a.keys,
        alpha: a.alpha,
        epsilon_us: a.epsilon_us,
        local_validation: !a.no_local_validation,
        warmup: Duration::from_secs(a.warmup_s),
        duration: Duration::from_secs(a.duration_s),
        seed: a.seed,
    };
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let r = rt.block_on(milliscale_bench::retwis::run(&cfg))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?);
        return Ok(());
    }
    println!(
        "retwis: {} clients, α {}, ε {} µs, local validation {}: {:.0} txn/s, abort rate {:.1}%, \
         {} unknown",
        r.clients,
        r.alpha,
        r.epsilon_us,
        if r.local_validation { "on" } else { "off" },
        r.txn_per_s,
        r.abort_rate * 100.0,
        r.unknown
    );
    for (name, l) in [
        ("all", &r.latency),
        ("single-shard", &r.single_shard),
        ("cross-shard", &r.cross_shard),
        ("read-only", &r.read_only),
    ] {
        println!(
            "{name:<13} {:>8} txns  p50 {:>7.2} ms  p99 {:>7.2} ms",
            l.count, l.p50_ms, l.p99_ms
        );
    }
    Ok(())
}
