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
    /// another publisher wrote that version first, or if the ranges differ
    /// from the newest version's (keys do not move between shards).
    Publish(PublishArgs),
    /// Run one shard's primary: open its log (the store URL in the map),
    /// recover it, fencing any earlier primary, and serve until SIGTERM
    /// or SIGINT.
    Serve(ShardServeArgs),
    /// Print the newest version of the shard map, as JSON.
    Show(MapArgs),
    /// Bank transfers across the shards, as one client (the crash-test
    /// workload): each acknowledged transfer is appended to a journal
    /// (and synced) only after its commit returned, and writes a marker
    /// key `t<client>-<seq>`. Balances start at `--initial` (an absent
    /// account holds it).
    Bank(BankArgs),
}

#[derive(Args)]
pub(crate) struct BankArgs {
    #[command(flatten)]
    map: MapArgs,
    /// This client's id (unique among the clients).
    #[arg(long)]
    client_id: u32,
    /// Accounts (keys spread over the shards as `bench retwis`'s are).
    #[arg(long, default_value_t = 12)]
    accounts: u32,
    /// Every account's balance before its first transfer.
    #[arg(long, default_value_t = 100)]
    initial: i64,
    /// Transfers to commit (0: until killed).
    #[arg(long, default_value_t = 0)]
    transfers: u64,
    /// Where to journal the acknowledged transfers.
    #[arg(long)]
    journal: std::path::PathBuf,
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
    /// Be the shard's hot standby: follow its log as a read replica,
    /// watch the primary, and when it stops answering (5 checks in a row,
    /// 100 ms apart, unanswered for 250 ms each) promote, publish the next
    /// map with `--listen`, and serve.
    #[arg(long, requires = "listen")]
    standby: bool,
}

pub(crate) fn shard(cmd: Shard) -> Result<(), Failure> {
    match cmd {
        Shard::Publish(a) => publish(a),
        Shard::Serve(a) => serve(a),
        Shard::Bank(a) => bank(a),
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
    let latest = maps.latest().map_err(|e| e.to_string())?;
    if let Some(m) = &latest
        && m.ranges != ranges
    {
        // The shards hold their keys' data: a new map may move a shard's
        // server (its address), not its keys.
        return Err(Failure::Usage(format!(
            "version {} gives the keys to the shards differently; moving ranges between shards \
             is not supported (a new version may change addresses and log URLs only)",
            m.version
        )));
    }
    let version = latest.map_or(1, |m| m.version + 1);
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
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| Failure::Run(format!("listening on {listen}: {e}")))?;
        let server = if a.standby {
            eprintln!("shard {}: standing by, following its log", a.shard);
            let watch = milliscale_milana::net::standby::Watch::default();
            let log = milliscale_milana::net::standby::stand_by(
                a.shard,
                log,
                std::sync::Arc::clone(&maps),
                listen,
                watch,
            )
            .await?;
            eprintln!("shard {}: the primary stopped answering; promoted", a.shard);
            ShardServer::start_with_log(opts, log, maps, listener).await
        } else {
            ShardServer::start_on(opts, log, maps, listener).await
        }
        .map_err(|e| e.to_string())?;
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
    /// Seconds run before measuring.
    #[arg(long, default_value_t = 2)]
    warmup_s: u64,
    /// Seconds measured.
    #[arg(long, default_value_t = 10)]
    duration_s: u64,
    /// Seeds the keys, the mix and the clients' skews.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The transactions: `retwis` (MILANA's mix) or `ycsb-t` (`--ops`
    /// read-modify-writes each, written back half of the time).
    #[arg(long, default_value = "retwis", value_parser = ["retwis", "ycsb-t"])]
    mix: String,
    /// With `--mix ycsb-t`: keys per transaction.
    #[arg(long, default_value_t = 4)]
    ops: usize,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn bench_retwis(a: RetwisArgs) -> Result<(), Failure> {
    let mix = match a.mix.as_str() {
        "ycsb-t" => milliscale_bench::retwis::Mix::YcsbT { ops: a.ops },
        _ => milliscale_bench::retwis::Mix::Retwis,
    };
    let cfg = milliscale_bench::retwis::RetwisConfig {
        mix,
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
        "{}: {} clients, α {}, ε {} µs, local validation {}: {:.0} txn/s, abort rate {:.1}%, \
         {} unknown",
        r.benchmark,
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

fn bank(a: BankArgs) -> Result<(), Failure> {
    use milliscale_milana::net::client::{ClientOptions, ShardedClient, TxnError};
    use std::io::Write;
    let maps = a.map.open()?;
    let mut journal = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&a.journal)
        .map_err(|e| Failure::Usage(format!("--journal {}: {e}", a.journal.display())))?;
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let c = ShardedClient::connect(ClientOptions::new(a.client_id), maps)
            .await
            .map_err(|e| e.to_string())?;
        let n = a.accounts.max(2);
        let mut seq = 0u64;
        while a.transfers == 0 || seq < a.transfers {
            seq += 1;
            let from = (seq * 7 + u64::from(a.client_id)) % u64::from(n);
            let to = (from + 1 + seq % u64::from(n - 1)) % u64::from(n);
            let amount = 1 + (seq % 5) as i64;
            let mut tries = 0;
            loop {
                tries += 1;
                let mut tx = c.begin();
                let r = async {
                    let (kf, kt) = (account_key(from), account_key(to));
                    let bf = balance(tx.get(&kf).await?, a.initial);
                    let bt = balance(tx.get(&kt).await?, a.initial);
                    tx.put(&kf, (bf - amount).to_string().as_bytes());
                    tx.put(&kt, (bt + amount).to_string().as_bytes());
                    tx.put(&marker_key(a.client_id, seq), amount.to_string().as_bytes());
                    tx.commit().await
                }
                .await;
                match r {
                    Ok(()) => {
                        // One write per line: a kill leaves at most a last line
                        // without its newline, which readers skip.
                        let line = format!("{} {seq} {from} {to} {amount}\n", a.client_id);
                        journal
                            .write_all(line.as_bytes())
                            .and_then(|()| journal.sync_data())
                            .map_err(|e| format!("the journal: {e}"))?;
                        break;
                    }
                    Err(TxnError::Unknown(why)) => {
                        eprintln!("transfer {seq}: outcome unknown ({why})");
                        break;
                    }
                    Err(e) if e.is_retryable() && tries < 1000 => {
                        tokio::time::sleep(Duration::from_millis(if tries > 3 { 50 } else { 1 }))
                            .await;
                    }
                    Err(e) => return Err(Failure::Run(format!("transfer {seq}: {e}"))),
                }
            }
        }
        Ok(())
    })
}

/// The key of bank account `i` (spread over the shards as `bench retwis`'s
/// keys are).
pub(crate) fn account_key(i: u64) -> Vec<u8> {
    milliscale_bench::retwis::key_of(i)
}

/// The marker a transfer writes: `t<client>-<seq>`.
pub(crate) fn marker_key(client: u32, seq: u64) -> Vec<u8> {
    format!("t{client:04}-{seq:08}").into_bytes()
}

fn balance(v: Option<Vec<u8>>, initial: i64) -> i64 {
    v.and_then(|b| String::from_utf8(b).ok()).and_then(|s| s.parse().ok()).unwrap_or(initial)
}
