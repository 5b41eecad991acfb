//! Arguments several commands share: the log's settings (`LogArgs`), the
//! value enums, sizes and durations.

use clap::{Args, ValueEnum};
use milliscale::{Quorum, Tracking};
use milliscale_bench::variant::{LogSettings, Variant};
use milliscale_milana::shard_map::MapStore;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum WorkloadArg {
    A,
    B,
    C,
    U,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum DistArg {
    Uniform,
    Zipfian,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum IsolationArg {
    ReadCommitted,
    Snapshot,
    Serializable,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum VariantArg {
    Milliscale,
    S3x,
    S3Standard,
    Gp3,
    Io2,
    /// No log: write every dirty page at commit (Database on S3's Naïve).
    NaivePages,
    /// No log: the records and a commit record to an ATOMIC-queue object
    /// at commit, applied to the pages by checkpoints (Database on S3's
    /// Atomicity).
    AtomicPages,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum QuorumArg {
    Majority,
    All,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum CommitArg {
    Pipelined,
    Autonomous,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum TrackingArg {
    Record,
    Txn,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum HedgingArg {
    Auto,
    Always,
    Off,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum FlushPolicyArg {
    Target,
    Adaptive,
    Timeout,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum EngineArg {
    Milliscale,
    RawIndex,
    /// SlateDB 0.18 on the same store (the first --store), each commit
    /// acknowledged at await_durable.
    Slatedb,
}

/// The log's settings, shared by the benchmarks.
#[derive(Args)]
pub(crate) struct LogArgs {
    /// The paper's system variant (§5.1): sets the store, group size,
    /// buffer size and tracking; the flags below override each setting.
    #[arg(long, value_enum, default_value = "milliscale")]
    pub(crate) variant: VariantArg,
    /// Where the log goes (repeat for replication): sim://s3x,
    /// file:///path, s3://bucket/prefix?endpoint=..., memory://; "none"
    /// disables logging. [default: the variant's store]
    #[arg(long)]
    pub(crate) store: Vec<String>,
    /// Stores that must hold a part before it is durable.
    #[arg(long, value_enum, default_value = "majority")]
    pub(crate) quorum: QuorumArg,
    /// Worker threads per log buffer. [default: the variant's]
    #[arg(long)]
    pub(crate) log_group_size: Option<usize>,
    /// Bytes per log buffer, or with a K/M suffix. [default: the variant's]
    #[arg(long)]
    pub(crate) log_buffer: Option<String>,
    /// Milliseconds after which a buffer that is not full is flushed at the
    /// latest. [default: 10]
    #[arg(long = "flush-timeout-ms", alias = "flush-timeout")]
    pub(crate) flush_timeout: Option<f64>,
    /// The most appends each log stream keeps in flight, each lane its own
    /// chain of segments (1..=16). [default: the variant's; milliscale 8]
    #[arg(long)]
    pub(crate) log_lanes: Option<usize>,
    /// Log streams: the groups are split among this many streams, each
    /// with its own lanes; one append carries a part of every group of its
    /// stream. A number, or `per-group` (the paper's layout: each group its
    /// own log). [default: the variant's; milliscale 1]
    #[arg(long)]
    pub(crate) log_streams: Option<String>,
    /// The scheduler slice the log's threads ask for, in milliseconds
    /// (0.1..=100), so that they preempt busy workers when they wake
    /// (Linux 6.12+); `off` leaves the kernel's default. [default: 0.1]
    #[arg(long = "log-thread-slice-ms", alias = "log-thread-slice")]
    pub(crate) log_thread_slice: Option<String>,
    /// When a stream flushes: target (when the latency an append saves is
    /// worth its price, see --ms-price-usd; between --flush-pace and
    /// --flush-max-wait-ms), adaptive (a fixed pace: --flush-pace appends per
    /// store round trip whenever a buffer holds data) or timeout (the
    /// paper's: full, or --flush-timeout-ms after the first entry).
    /// [default: the variant's; milliscale target]
    #[arg(long, value_enum)]
    pub(crate) flush_policy: Option<FlushPolicyArg>,
    /// Target and adaptive flushing: the least milliseconds between two
    /// flushes of a stream. [default: 1]
    #[arg(long = "flush-min-interval-ms", alias = "flush-min-interval")]
    pub(crate) flush_min_interval: Option<f64>,
    /// Appends a stream starts per store round trip (the median of its
    /// recent appends), in (0, 64]: the target's most, adaptive's always;
    /// `off`: whenever a lane is free. [default: 2.75]
    #[arg(long)]
    pub(crate) flush_pace: Option<String>,
    /// A request budget: at most this many log parts per second for the
    /// whole database (each part one request per store). [default: none]
    #[arg(long)]
    pub(crate) max_appends_per_s: Option<u32>,
    /// Target flushing: dollars an hour that one millisecond off the
    /// commit latency of 1,000 transactions a second is worth; higher buys
    /// latency with requests, 0 flushes every --flush-max-wait-ms.
    /// [default: 0.016]
    #[arg(long)]
    pub(crate) ms_price_usd: Option<f64>,
    /// Target flushing: the longest data waits for its append to start,
    /// in milliseconds (1..=10000). [default: 20]
    #[arg(long)]
    pub(crate) flush_max_wait_ms: Option<f64>,
    /// A ceiling on the log's request dollars an hour (all stores; bytes
    /// not included), at the stores' prices. [default: none]
    #[arg(long)]
    pub(crate) max_usd_per_hour: Option<f64>,
    /// Dollars of one log append to one store, for a store without a price
    /// table. [default: the store's table; file:// and memory:// are free]
    #[arg(long)]
    pub(crate) append_price_usd: Option<f64>,
    /// Dependency tracking: record (DSN < gCSN) or txn (CSN < gCSN).
    /// [default: the variant's]
    #[arg(long, value_enum)]
    pub(crate) tracking: Option<TrackingArg>,
    /// The commit protocol: pipelined (lane threads flush, paced by the
    /// store) or autonomous (Autonomous Commit: each worker flushes its own buffer,
    /// and its neighbours', at a flush unit or when idle, and acknowledges
    /// commits itself; a buffer per worker, streams of --steal-group).
    #[arg(long = "commit", value_enum, default_value = "pipelined")]
    pub(crate) commit: CommitArg,
    /// Autonomous commit: a worker flushes once its buffer holds this much
    /// (K/M suffix). [default: 16K; 256K when a log store is an object
    /// store (s3://, sim://s3x, sim://s3-standard)]
    #[arg(long)]
    pub(crate) flush_unit: Option<String>,
    /// Autonomous commit: force a flush after a transaction when the
    /// worker's average idle time reaches a random draw below this many
    /// microseconds; 0 turns the prediction off. [default: 50]
    #[arg(long)]
    pub(crate) max_idle_us: Option<u64>,
    /// Autonomous commit: buffers per stream (log stealing). [default: 4]
    #[arg(long)]
    pub(crate) steal_group: Option<usize>,
    /// Write one object per flush even where the store appends.
    #[arg(long)]
    pub(crate) put_per_flush: bool,
    /// Where a slow log append is sent a second time (after the 90th
    /// percentile of recent appends, for at most 10% of them): auto (where
    /// the store's client does it without helper threads: s3://, sim://),
    /// always (helper threads elsewhere), off. [default: the variant's;
    /// milliscale auto]
    #[arg(long, value_enum)]
    pub(crate) hedging: Option<HedgingArg>,
    /// Same as --hedging always.
    #[arg(long, conflicts_with = "hedging")]
    pub(crate) hedge_appends: bool,
    /// Hedge an append once it is slower than this many times the 90th
    /// percentile of recent appends.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) hedge_multiple: f64,
    /// Hedge at most this share of appends in the long run (each hedge is
    /// one more request).
    #[arg(long, default_value_t = 0.1)]
    pub(crate) hedge_budget: f64,
    /// Take a background checkpoint after this many log bytes (K/M/G
    /// suffix). Off by default in benchmarks, so runs measure the log alone.
    #[arg(long)]
    pub(crate) checkpoint_every: Option<String>,
    /// With --checkpoint-every: do not scan memory, adopt a checkpoint that
    /// a replica offers (`milliscale checkpoint --from-log`, `replica
    /// --offer-checkpoints` or `--offer-checkpoint-every`) once one covers
    /// the log.
    #[arg(long)]
    pub(crate) checkpoint_offload: bool,
    /// Keep a hash table of the keys beside each table's ordered index for
    /// one-key lookups (`Options::point_index`); `--point-index false`
    /// goes without (about 70 bytes a key less, point reads slower).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) point_index: bool,
    /// Keep a retention window of this length (`7d`, `12h`, `90s`): the
    /// checkpoints and log it needs stay, with a time index
    /// (`Options::retention`).
    #[arg(long, value_name = "DURATION", value_parser = retention)]
    pub(crate) retention: Option<Duration>,
    /// Take a background checkpoint this often, in seconds, when the log
    /// grew (besides --checkpoint-every). For --variant atomic-pages: how
    /// often the ATOMIC queue is applied to the pages [default there: 15,
    /// the fourth paper's].
    #[arg(long = "checkpoint-interval-s", alias = "checkpoint-interval")]
    pub(crate) checkpoint_interval: Option<f64>,
    /// Bill `sim://` stores with this price table of the presets file
    /// (`s3-express`, `s3-standard`, `s3-2008` = the fourth paper's 2007
    /// prices, `ebs`), or `preset`: each preset's own.
    #[arg(long, default_value = "preset")]
    pub(crate) price: String,
}

/// Why a command failed, which sets the exit code: misuse (a bad flag
/// value or combination: 2, as clap's own usage errors) or a failure at
/// run time (1).
#[derive(Debug)]
pub(crate) enum Failure {
    /// The command line asks for something that cannot be: fix it.
    Usage(String),
    /// The command ran and failed (a store, a database, the disk).
    Run(String),
}

/// A failure at run time: what the engine and the stores report.
impl From<String> for Failure {
    fn from(e: String) -> Failure {
        Failure::Run(e)
    }
}

/// A fixed message is a flag check's (the engine's and the stores' errors
/// carry details): misuse.
impl From<&str> for Failure {
    fn from(e: &str) -> Failure {
        Failure::Usage(e.to_owned())
    }
}

/// A bad flag value: what the argument helpers below report.
#[derive(Debug)]
pub(crate) struct Usage(pub(crate) String);

impl From<Usage> for Failure {
    fn from(e: Usage) -> Failure {
        Failure::Usage(e.0)
    }
}

impl From<&str> for Usage {
    fn from(e: &str) -> Usage {
        Usage(e.to_owned())
    }
}

impl From<String> for Usage {
    fn from(e: String) -> Usage {
        Usage(e)
    }
}

/// A byte count for `--NAME`: a number, or with a binary suffix K, M, G
/// or T (KiB, MiB, GiB, TiB), e.g. 4096, 512K, 2M, 1G.
pub(crate) fn parse_size(name: &str, s: &str) -> Result<usize, Usage> {
    let (num, shift) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 30),
        Some('T' | 't') => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1usize.checked_shl(shift)?))
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            Usage(format!(
                "--{name} must be a positive byte count like 4096, 512K, 2M or 1G; got {s:?}"
            ))
        })
}

/// A duration given in seconds as `--NAME`.
/// A retention window as `--retention` takes it: `7d`, `12h`, `30m`,
/// `90s` (humantime's forms).
pub(crate) fn retention(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("{e}; give a duration such as 7d, 12h or 90s"))?;
    if d < milliscale::options::RETENTION_MIN {
        return Err(format!(
            "a window of at least {}s",
            milliscale::options::RETENTION_MIN.as_secs()
        ));
    }
    Ok(d)
}

pub(crate) fn seconds(name: &str, s: f64) -> Result<Duration, Usage> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| Usage(format!("--{name} must be a non-negative number of seconds, got {s}")))
}

/// Read-only commands must not create what they read: a `file://` store
/// whose directory is missing is an error, not a new empty directory.
pub(crate) fn require_existing(urls: &[String]) -> Result<(), Failure> {
    for u in urls {
        if let Some(path) = u.strip_prefix("file://")
            && !std::path::Path::new(path).is_dir()
        {
            return Err(Failure::Run(format!(
                "{u}: no such directory (a read-only command does not create one)"
            )));
        }
    }
    Ok(())
}

/// A duration given in milliseconds as `--NAME`.
pub(crate) fn millis(name: &str, ms: f64) -> Result<Duration, Usage> {
    Duration::try_from_secs_f64(ms / 1e3).map_err(|_| {
        Usage(format!("--{name} must be a non-negative number of milliseconds, got {ms}"))
    })
}

#[allow(clippy::too_many_lines, reason = "maps every log flag onto LogSettings, one line each")]
pub(crate) fn log_settings(a: &LogArgs) -> Result<(Variant, LogSettings), Usage> {
    let variant = match a.variant {
        VariantArg::Milliscale => Variant::Milliscale,
        VariantArg::S3x => Variant::S3x,
        VariantArg::S3Standard => Variant::S3Standard,
        VariantArg::Gp3 => Variant::Gp3,
        VariantArg::Io2 => Variant::Io2,
        VariantArg::NaivePages => Variant::NaivePages,
        VariantArg::AtomicPages => Variant::AtomicPages,
    };
    let mut l = variant.settings();
    if !a.store.is_empty() {
        if a.store.len() > 1 && a.store.iter().any(|s| s == "none") {
            return Err("--store none cannot be combined with other stores".into());
        }
        l.stores = a.store.clone();
    }
    l.quorum = match a.quorum {
        QuorumArg::Majority => Quorum::Majority,
        QuorumArg::All => Quorum::All,
    };
    if let Some(n) = a.log_group_size {
        l.log_group_size = n;
    }
    if let Some(b) = &a.log_buffer {
        l.log_buffer_bytes = parse_size("log-buffer", b)?;
    }
    if let Some(ms) = a.flush_timeout {
        l.flush_timeout = millis("flush-timeout-ms", ms)?;
    }
    if let Some(n) = a.log_lanes {
        l.log_lanes = n;
    }
    if let Some(v) = &a.log_thread_slice {
        l.log_thread_slice = match v.as_str() {
            "off" => None,
            ms => match ms.parse::<f64>() {
                Ok(ms) if (0.1..=100.0).contains(&ms) => {
                    Some(std::time::Duration::from_secs_f64(ms / 1e3))
                }
                _ => {
                    return Err(format!(
                        "--log-thread-slice-ms must be in 0.1..=100 (ms) or off, got {v:?}"
                    )
                    .into());
                }
            },
        };
    }
    if let Some(n) = &a.log_streams {
        l.log_streams = match n.as_str() {
            "per-group" => milliscale::options::LOG_STREAMS_PER_GROUP,
            n => match n.parse::<usize>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    return Err(format!(
                        "--log-streams must be a number of at least 1 or per-group, got {n:?}"
                    )
                    .into());
                }
            },
        };
    }
    if let Some(p) = a.flush_policy {
        l.flush_policy = match p {
            FlushPolicyArg::Target => milliscale::FlushPolicy::Target,
            FlushPolicyArg::Adaptive => milliscale::FlushPolicy::Adaptive,
            FlushPolicyArg::Timeout => milliscale::FlushPolicy::Timeout,
        };
    }
    if let Some(ms) = a.flush_min_interval {
        if !(0.0..=1000.0).contains(&ms) {
            return Err(format!("--flush-min-interval-ms must be in 0..=1000 ms, got {ms}").into());
        }
        l.flush_min_interval = std::time::Duration::from_secs_f64(ms / 1e3);
    }
    if let Some(v) = &a.flush_pace {
        l.flush_pace = match v.as_str() {
            "off" => None,
            p => match p.parse::<f64>() {
                Ok(p) if p > 0.0 && p <= milliscale::options::FLUSH_PACE_MAX => Some(p),
                _ => {
                    return Err(format!("--flush-pace must be in (0, 64] or off, got {v:?}").into());
                }
            },
        };
    }
    if a.max_appends_per_s.is_some() {
        l.max_appends_per_s = a.max_appends_per_s;
    }
    if let Some(p) = a.ms_price_usd {
        if !(p.is_finite() && p >= 0.0) {
            return Err(
                format!("--ms-price-usd must be a number of dollars, at least 0, got {p}").into()
            );
        }
        l.millisecond_price = p;
    }
    if let Some(ms) = a.flush_max_wait_ms {
        if !(1.0..=10_000.0).contains(&ms) {
            return Err(format!("--flush-max-wait-ms must be in 1..=10000 ms, got {ms}").into());
        }
        l.flush_max_wait = std::time::Duration::from_secs_f64(ms / 1e3);
    }
    if let Some(u) = a.max_usd_per_hour {
        if !(u.is_finite() && u > 0.0) {
            return Err(format!("--max-usd-per-hour must be above 0, got {u}").into());
        }
        l.max_usd_per_hour = Some(u);
    }
    if let Some(p) = a.append_price_usd {
        if !(p.is_finite() && p >= 0.0) {
            return Err(format!("--append-price-usd must be at least 0, got {p}").into());
        }
        l.append_price = Some(p);
    }
    if let Some(t) = a.tracking {
        l.tracking = match t {
            TrackingArg::Record => Tracking::Record,
            TrackingArg::Txn => Tracking::Txn,
        };
    }
    l.commit_protocol = match a.commit {
        CommitArg::Pipelined => milliscale::CommitProtocol::Pipelined,
        CommitArg::Autonomous => milliscale::CommitProtocol::Autonomous,
    };
    if let Some(u) = &a.flush_unit {
        let unit = parse_size("flush-unit", u)?;
        l.flush_unit = Some(unit);
        if unit == 0 {
            return Err("--flush-unit must be at least 1 byte".into());
        }
    }
    if let Some(us) = a.max_idle_us {
        if us > 1_000_000 {
            return Err(format!("--max-idle-us must be at most 1000000, got {us}").into());
        }
        l.max_idle = std::time::Duration::from_micros(us);
    }
    if let Some(n) = a.steal_group {
        if !(1..=milliscale::options::LOG_LANES_MAX).contains(&n) {
            return Err(format!(
                "--steal-group must be in 1..={}, got {n}",
                milliscale::options::LOG_LANES_MAX
            )
            .into());
        }
        l.steal_group = n;
    }
    l.put_per_flush |= a.put_per_flush;
    if a.hedge_appends {
        l.hedging = milliscale::Hedging::Always;
    }
    if let Some(h) = a.hedging {
        l.hedging = match h {
            HedgingArg::Auto => milliscale::Hedging::Auto,
            HedgingArg::Always => milliscale::Hedging::Always,
            HedgingArg::Off => milliscale::Hedging::Off,
        };
    }
    if !(a.hedge_multiple.is_finite() && a.hedge_multiple >= 0.0) {
        return Err("--hedge-multiple must be a number >= 0".into());
    }
    l.hedge_multiple = a.hedge_multiple;
    if !(0.0..=1.0).contains(&a.hedge_budget) {
        return Err("--hedge-budget must be a share in 0..=1".into());
    }
    l.hedge_budget = a.hedge_budget;
    l.checkpoint_offload = a.checkpoint_offload;
    l.point_index = a.point_index;
    l.retention = a.retention;
    if let Some(b) = &a.checkpoint_every {
        l.checkpoint_log_bytes = parse_size("checkpoint-every", b)? as u64;
    }
    if a.price != "preset" {
        objstore::sim::model::Catalog::builtin()
            .prices_named(&a.price)
            .map_err(|e| format!("--price: {e}"))?;
        for url in &mut l.stores {
            if let Some(rest) = url.strip_prefix("sim://") {
                // Before `inner=`, which takes the rest of the URL.
                let (preset, query) = rest.split_once('?').unwrap_or((rest, ""));
                *url = if query.is_empty() {
                    format!("sim://{preset}?price={}", a.price)
                } else {
                    format!("sim://{preset}?price={}&{query}", a.price)
                };
            }
        }
    }
    if let Some(secs) = a.checkpoint_interval {
        let d = seconds("checkpoint-interval-s", secs)?;
        if d.is_zero() {
            return Err("--checkpoint-interval-s must be above 0 seconds".into());
        }
        l.checkpoint_interval = Some(d);
    } else if l.pages == Some(milliscale_bench::pages::PageProtocol::Atomic) {
        l.checkpoint_interval = Some(std::time::Duration::from_secs(15));
    }
    Ok((variant, l))
}

/// The options `--config FILE` and the `MILLISCALE_OPT_*` environment
/// give (set once by `main`; the environment's fields win).
pub(crate) static CONFIG: std::sync::OnceLock<milliscale::Config> = std::sync::OnceLock::new();

/// The stores a command works on: its `--store` flags, or else the
/// configuration's `stores`; at least one.
pub(crate) fn stores_of(flags: &[String]) -> Result<Vec<String>, Failure> {
    let stores = if flags.is_empty() {
        CONFIG.get().map(|c| c.stores.clone()).unwrap_or_default()
    } else {
        flags.to_vec()
    };
    if stores.is_empty() {
        return Err(Usage("no store: give --store URL, or `stores` in --config".into()).into());
    }
    Ok(stores)
}

/// The configured options (see [`CONFIG`]) on the stores of
/// [`stores_of`].
pub(crate) fn store_options(flags: &[String]) -> Result<milliscale::Options, Failure> {
    let config = CONFIG.get().cloned().unwrap_or_default();
    let mut o = milliscale::Options::from_config(&config).map_err(|e| Usage(e.to_string()))?;
    let stores = stores_of(flags)?;
    o = o.store(stores[0].clone());
    for s in &stores[1..] {
        o = o.add_store(s.clone());
    }
    Ok(o)
}

/// A thread count given as `--NAME`: at least 1; unset, the replica's
/// default (`ReplicaOptions::apply_threads`).
pub(crate) fn threads(name: &str, n: Option<usize>) -> Result<usize, Usage> {
    match n {
        None => Ok(milliscale::ReplicaOptions::default().apply_threads),
        Some(0) => Err(Usage(format!("--{name} must be at least 1"))),
        Some(n) => Ok(n),
    }
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
    pub(crate) fn open(&self) -> Result<Arc<MapStore>, Failure> {
        let store = milliscale::store::open(&self.map)
            .map_err(|e| Failure::Usage(format!("--map {}: {e}", self.map)))?;
        Ok(Arc::new(MapStore::new(store, &self.map_prefix)))
    }
}
