//! `milliscale cluster`: a cluster of `milliscale serve --cluster` shards.
//! `init` publishes the first shard map on its store; `add-shard`, `split`
//! and `remove-shard` publish the next with a change that moves no data
//! (design record 0009); `show` prints the
//! newest; `status` asks every shard how it is; `bank` runs bank transfers
//! as one client (the crash tests' workload); and `bench retwis` drives
//! the shards with Retwis.

use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use milliscale_client::{Cluster, Code};
use milliscale_milana::shard_map::{
    MapChange, MapError, MapStore, ShardInfo, ShardMap, Thresholds,
};
use milliscale_milana::types::cluster_key;

use crate::args::{Failure, MapArgs};

#[derive(Subcommand)]
pub(crate) enum ClusterCmd {
    /// Publish the first shard map: shard i (from 0, in the order given)
    /// at `--shard ADDR=STORE_URL`, owning the keys from the i-th split
    /// key (the empty key for shard 0) to the next. Fails if a map is
    /// already published there.
    Init(InitArgs),
    /// Print the newest version of the shard map, as JSON.
    Show(MapArgs),
    /// Ask every shard of the cluster how it is: its ranges, address,
    /// transactions prepared and remembered, CPU time and durable point.
    Status(StatusArgs),
    /// Bank transfers across the shards, as one client (the crash-test
    /// workload): each acknowledged transfer is appended to a journal
    /// (and synced) only after its commit returned, and writes a marker
    /// row `t<client>-<seq>`. Balances start at `--initial` (an absent
    /// account holds it). The table `bank` is created if missing.
    Bank(BankArgs),
    /// Add a shard to the map, owning no range yet; then start it with
    /// `milliscale serve --cluster MAP --shard ID --store STORE_URL`. It
    /// takes the cluster's tables from another shard as it starts.
    AddShard(AddShardArgs),
    /// Cut the range holding a key in two at that key, both halves with
    /// the range's owner. No data moves; clients and shards with the
    /// older map route every key as before.
    Split(SplitArgs),
    /// Take a shard that owns no range out of the map.
    RemoveShard(RemoveShardArgs),
    /// Move a range to another shard while clients run (design record
    /// 0009): frozen on its shard, copied, the map's next version
    /// published, released. The range is refused, retryably, meanwhile.
    Move(crate::cluster_move::MoveArgs),
    /// Finish a move whose mover stopped after publishing the map: the
    /// old owner deletes the range's rows and lifts its freeze (it does so
    /// by itself once it reads the map; this makes it happen now).
    Release(crate::cluster_move::ReleaseArgs),
    /// The cluster at a commit timestamp or time, read from its shards'
    /// logs on the object store alone (each shard keeping a retention
    /// window), written as a new cluster: an empty store per shard and a
    /// new map. Every transaction with a commit timestamp at or below the
    /// point that committed is in it, and none above; a transaction across
    /// shards is whole or absent; the ranges are the map's at the point.
    Restore(crate::cluster_time::ClusterRestoreArgs),
    /// `restore`, without copying: each shard's database is cloned where
    /// its log settled the point, with an overlay that puts back the rows
    /// as they were at the point (design record 0012). Each clone's first
    /// `serve --cluster` loads its shard's objects; until then the source
    /// keeps them. Refused if a table of the point was dropped since.
    Clone(crate::cluster_time::ClusterRestoreArgs),
    /// Switch the rebalancer on or off. On, the shard holding the map's
    /// lease splits a range past `--split-rows` rows at its middle key,
    /// and moves ranges from the fullest shard to the emptiest until they
    /// differ by at most a tenth of the mean, one move at a time; each
    /// decision is logged with its reason (`milliscale::rebalance`).
    Rebalance(RebalanceArgs),
}

#[derive(Args)]
pub(crate) struct RebalanceArgs {
    #[command(flatten)]
    map: MapArgs,
    /// `on` or `off`.
    #[arg(value_parser = ["on", "off"])]
    switch: String,
    /// On: split a range past this many rows.
    #[arg(long, default_value_t = 100_000)]
    split_rows: u64,
    /// On: also split a range past this many requests a second (keys read
    /// or written, scans begun), and move ranges from the busiest shard
    /// to the least busy while the rows are balanced. Default: rows only.
    #[arg(long)]
    split_load: Option<u64>,
}

#[derive(Args)]
pub(crate) struct AddShardArgs {
    #[command(flatten)]
    map: MapArgs,
    /// The new shard's id (default: one more than the largest in the map).
    #[arg(long)]
    id: Option<u32>,
    /// Its server's address (`host:port`), as clients and shards reach it.
    #[arg(long)]
    addr: String,
    /// Its database's store URL.
    #[arg(long)]
    store: String,
}

#[derive(Args)]
pub(crate) struct SplitArgs {
    #[command(flatten)]
    map: MapArgs,
    /// Where the new range begins, as `TABLE=KEY`.
    #[arg(long, value_name = "TABLE=KEY")]
    at: String,
}

#[derive(Args)]
pub(crate) struct RemoveShardArgs {
    #[command(flatten)]
    map: MapArgs,
    /// The shard's id.
    #[arg(long)]
    id: u32,
}

/// The bank's table.
pub(crate) const BANK: &str = "bank";

#[derive(Args)]
pub(crate) struct BankArgs {
    /// Any shard's address (`host:port`).
    #[arg(long, env = "MILLISCALE_SERVER")]
    server: String,
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
    /// After each transfer, also write a marker row `b<client>-<seq>` as a
    /// one-shot batch (`Cluster::execute`: one call to the shard holding
    /// it), and journal each acknowledged one here as `<client> <seq>
    /// <amount>`.
    #[arg(long, value_name = "PATH")]
    batch_journal: Option<std::path::PathBuf>,
}

#[derive(Args)]
pub(crate) struct InitArgs {
    #[command(flatten)]
    map: MapArgs,
    /// A shard: its server's address and its database's store URL, as
    /// `ADDR=STORE_URL`. Repeat for each shard, in order.
    #[arg(long = "shard", value_name = "ADDR=STORE_URL", required = true)]
    shards: Vec<String>,
    /// A key where a range begins, as `TABLE=KEY` (repeat: at least one
    /// fewer than the shards). The ranges, in key order, go to the shards
    /// in turn: the first (from the start of the key space) to shard 0,
    /// the next to shard 1, and so on, starting over after the last
    /// shard. Default: each `--even-table` split evenly.
    #[arg(long = "split", value_name = "TABLE=KEY", conflicts_with = "even_table")]
    splits: Vec<String>,
    /// Without `--split`: a table whose `bench retwis`-style keys (`r` and
    /// 16 hex digits) the shards split evenly, shard 0 from the table's
    /// first key (repeat for more tables; other tables' keys stay with
    /// whoever owns the range they fall in).
    #[arg(long, default_values = ["retwis"])]
    even_table: Vec<String>,
}

#[derive(Args)]
pub(crate) struct StatusArgs {
    /// Any shard's address (`host:port`).
    #[arg(long, env = "MILLISCALE_SERVER")]
    server: String,
    /// The bearer token.
    #[arg(long, env = "MILLISCALE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Print the status as JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn cluster(cmd: ClusterCmd) -> Result<(), Failure> {
    match cmd {
        ClusterCmd::Init(a) => init(a),
        ClusterCmd::Status(a) => status(a),
        ClusterCmd::Bank(a) => bank(a),
        ClusterCmd::AddShard(a) => {
            let maps = a.map.open()?;
            let id = match a.id {
                Some(id) => id,
                None => {
                    let map = maps.latest().map_err(|e| e.to_string())?;
                    let map = map.ok_or_else(|| Failure::Run("no shard map published".into()))?;
                    map.shards.keys().max().map_or(0, |m| m + 1)
                }
            };
            let info = ShardInfo { addr: a.addr, log: a.store };
            let m = change(&maps, &MapChange::AddShard(id, info))?;
            println!(
                "published shard map version {}: shard {id} added, owning no range",
                m.version
            );
            Ok(())
        }
        ClusterCmd::Split(a) => {
            let (table, key) =
                a.at.split_once('=')
                    .ok_or_else(|| Failure::Usage(format!("--at {}: expected TABLE=KEY", a.at)))?;
            let at = cluster_key(table, key.as_bytes());
            let m = change(&a.map.open()?, &MapChange::Split(at.clone()))?;
            println!(
                "published shard map version {}: a range begins at {}, owned by shard {}",
                m.version,
                a.at,
                m.shard_of(&at)
            );
            Ok(())
        }
        ClusterCmd::Rebalance(a) => {
            let on = a.switch == "on";
            let t = Thresholds { split_rows: a.split_rows, split_load: a.split_load };
            let m = change(&a.map.open()?, &MapChange::Rebalance(on.then_some(t)))?;
            match m.rebalance {
                Some(rows) => println!(
                    "published shard map version {}: the rebalancer is on, splitting ranges past \
                     {rows} rows{}",
                    m.version,
                    m.split_load.map_or(String::new(), |l| format!(" or {l} requests a second"))
                ),
                None => {
                    println!("published shard map version {}: the rebalancer is off", m.version)
                }
            }
            Ok(())
        }
        ClusterCmd::RemoveShard(a) => {
            let m = change(&a.map.open()?, &MapChange::RemoveShard(a.id))?;
            println!("published shard map version {}: shard {} removed", m.version, a.id);
            Ok(())
        }
        ClusterCmd::Move(a) => crate::cluster_move::move_range(a),
        ClusterCmd::Restore(a) => crate::cluster_time::restore(a, false),
        ClusterCmd::Clone(a) => crate::cluster_time::restore(a, true),
        ClusterCmd::Release(a) => crate::cluster_move::release(a),
        ClusterCmd::Show(a) => {
            let map = a.open()?.latest().map_err(|e| e.to_string())?;
            let map = map.ok_or_else(|| Failure::Run("no shard map published".into()))?;
            println!("{}", serde_json::to_string_pretty(&map).map_err(|e| e.to_string())?);
            Ok(())
        }
    }
}

/// Publish `c` on the newest map (redone on the winner's map if another
/// change wins the version); a change the map refuses is a usage error.
fn change(maps: &Arc<MapStore>, c: &MapChange) -> Result<ShardMap, Failure> {
    maps.change(c).map_err(|e| match e {
        MapError::Invalid(why) => Failure::Usage(why),
        e => Failure::Run(e.to_string()),
    })
}

fn init(a: InitArgs) -> Result<(), Failure> {
    let maps = a.map.open()?;
    let n = a.shards.len() as u32;
    let mut ranges: Vec<(Vec<u8>, u32)> = vec![(Vec::new(), 0)];
    if a.splits.is_empty() {
        // Each table's keys split evenly: shard 0 from the table's first
        // key, shard i from the i-th split.
        let mut tables = a.even_table.clone();
        tables.sort();
        tables.dedup();
        for t in &tables {
            ranges.push((cluster_key(t, b""), 0));
            ranges.extend(milliscale_bench::retwis::even_splits(t, n).into_iter().zip(1..));
        }
    } else {
        if a.splits.len() + 1 < a.shards.len() {
            return Err(Failure::Usage(format!(
                "{} shards need at least {} split keys, not {}",
                n,
                n - 1,
                a.splits.len()
            )));
        }
        let mut keys = Vec::new();
        for s in &a.splits {
            let (table, key) = s
                .split_once('=')
                .ok_or_else(|| Failure::Usage(format!("--split {s}: expected TABLE=KEY")))?;
            keys.push(cluster_key(table, key.as_bytes()));
        }
        keys.sort();
        if keys.first().is_some_and(|k| k.is_empty()) || keys.windows(2).any(|w| w[0] == w[1]) {
            return Err(Failure::Usage(
                "--split keys must differ from each other and from the start of the key space"
                    .into(),
            ));
        }
        ranges.extend(keys.into_iter().zip(1..).map(|(k, i)| (k, i % n)));
    }
    let mut shards = std::collections::BTreeMap::new();
    for (i, s) in a.shards.iter().enumerate() {
        let (addr, store) = s
            .split_once('=')
            .ok_or_else(|| Failure::Usage(format!("--shard {s}: expected ADDR=STORE_URL")))?;
        shards.insert(i as u32, ShardInfo { addr: addr.into(), log: store.into() });
    }
    if let Some(m) = maps.latest().map_err(|e| e.to_string())? {
        return Err(Failure::Usage(format!(
            "a shard map is already published there (version {}); the cluster exists",
            m.version
        )));
    }
    let map = ShardMap { version: 1, ranges, shards, rebalance: None, split_load: None };
    maps.publish(&map).map_err(|e| Failure::Usage(e.to_string()))?;
    println!("published shard map version 1: {n} shards, {} ranges", map.ranges.len());
    Ok(())
}

fn status(a: StatusArgs) -> Result<(), Failure> {
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let mut b = Cluster::builder(a.server.clone());
        if let Some(t) = &a.token {
            b = b.token(t.clone());
        }
        let c = b.connect().await.map_err(|e| Failure::Run(e.to_string()))?;
        let shards = c.status().await;
        if a.json {
            let rows: Vec<serde_json::Value> = shards
                .iter()
                .map(|s| {
                    serde_json::json!({
                        "shard": s.shard,
                        "addr": s.addr,
                        "ranges": s.ranges.iter().map(|r| String::from_utf8_lossy(r).into_owned()).collect::<Vec<_>>(),
                        "role": s.server.as_ref().map(|x| x.role.clone()),
                        "cpu_seconds": s.server.as_ref().map(|x| x.cpu_seconds),
                        "durable_token": s.server.as_ref().map(|x| x.durable_token),
                        "map_version": s.info.as_ref().map(|i| i.map_version),
                        "prepared": s.info.as_ref().map(|i| i.prepared),
                        "remembered": s.info.as_ref().map(|i| i.remembered),
                        "oldest_undecided": s.info.as_ref().and_then(|i| i.oldest_undecided),
                        "error": s.error,
                    })
                })
                .collect();
            let json = serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?;
            println!("{json}");
            return Ok(());
        }
        println!("shard map version {}", c.map().version);
        for s in &shards {
            println!("{s}");
        }
        Ok(())
    })
}

/// `bench retwis`.
#[derive(Args)]
pub(crate) struct RetwisArgs {
    /// Any shard's address (`host:port`).
    #[arg(long, env = "MILLISCALE_SERVER")]
    server: String,
    /// The bearer token.
    #[arg(long, env = "MILLISCALE_TOKEN", hide_env_values = true)]
    token: Option<String>,
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
        server: a.server.clone(),
        token: a.token.clone(),
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
    use std::io::Write;
    let mut journal = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&a.journal)
        .map_err(|e| Failure::Usage(format!("--journal {}: {e}", a.journal.display())))?;
    let mut batch_journal = match &a.batch_journal {
        None => None,
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| Failure::Usage(format!("--batch-journal {}: {e}", p.display())))?,
        ),
    };
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    rt.block_on(async move {
        // The shard named may be down (killed, its standby promoting):
        // try for up to 10 s before giving up.
        let since = std::time::Instant::now();
        let c = loop {
            match Cluster::builder(a.server.clone()).client_id(a.client_id).connect().await {
                Ok(c) => break c,
                Err(e) if since.elapsed() < Duration::from_secs(10) => {
                    eprintln!("connecting: {e}; trying again");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(Failure::Run(format!("connecting to {}: {e}", a.server))),
            }
        };
        // A shard failing over (its primary gone, its standby taking over)
        // does not answer for a moment: asked again (the shards that have
        // the table already say so, and that is no error).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match c.create_table(BANK).await {
                Ok(()) => break,
                Err(e) if e.code() == Code::AlreadyExists => break,
                Err(e)
                    if matches!(e.code(), Code::Unavailable | Code::Unknown)
                        && std::time::Instant::now() < deadline =>
                {
                    eprintln!("creating table {BANK}: {e}; trying again");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(Failure::Run(format!("creating table {BANK}: {e}"))),
            }
        }
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
                    let bf = balance(tx.get(BANK, &kf).await?, a.initial);
                    let bt = balance(tx.get(BANK, &kt).await?, a.initial);
                    tx.put(BANK, &kf, (bf - amount).to_string().as_bytes())?;
                    tx.put(BANK, &kt, (bt + amount).to_string().as_bytes())?;
                    tx.put(BANK, &marker_key(a.client_id, seq), amount.to_string().as_bytes())?;
                    tx.commit().await
                }
                .await;
                match r {
                    Ok(_) => {
                        // One write per line: a kill leaves at most a last line
                        // without its newline, which readers skip.
                        let line = format!("{} {seq} {from} {to} {amount}\n", a.client_id);
                        journal
                            .write_all(line.as_bytes())
                            .and_then(|()| journal.sync_data())
                            .map_err(|e| format!("the journal: {e}"))?;
                        if let Some(j) = batch_journal.as_mut() {
                            batch_marker(&c, j, a.client_id, seq, amount).await?;
                        }
                        break;
                    }
                    Err(e) if e.kind() == "unknown" => {
                        eprintln!("transfer {seq}: outcome unknown ({e})");
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
        c.close().await;
        Ok(())
    })
}

/// Write the batch marker of transfer `seq` with `Cluster::execute` and
/// journal it once acknowledged. A failure is not journaled (an unknown
/// outcome is reported); only a journal that cannot be written stops
/// the client.
async fn batch_marker(
    c: &Cluster,
    journal: &mut std::fs::File,
    client: u32,
    seq: u64,
    amount: i64,
) -> Result<(), Failure> {
    use std::io::Write;
    let mut b = milliscale_client::Batch::new();
    b.put(BANK, &batch_marker_key(client, seq), amount.to_string().as_bytes());
    match c.execute(b.retries(8)).await {
        Ok(_) => journal
            .write_all(format!("{client} {seq} {amount}\n").as_bytes())
            .and_then(|()| journal.sync_data())
            .map_err(|e| Failure::Run(format!("the batch journal: {e}"))),
        Err(e) => {
            eprintln!("batch marker {seq}: not acknowledged ({e})");
            Ok(())
        }
    }
}

/// The marker a transfer's one-shot batch writes: `b<client>-<seq>`.
pub(crate) fn batch_marker_key(client: u32, seq: u64) -> Vec<u8> {
    format!("b{client:04}-{seq:08}").into_bytes()
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
