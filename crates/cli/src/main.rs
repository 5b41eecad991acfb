//! The `milliscale` command: benchmarks and the S3-compatible emulator;
//! recovery and inspection join as they are built.

#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, rust_2018_idioms)]

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use milliscale::{Isolation, Quorum, Tracking};
use milliscale_bench::index_bench::{self, IndexBenchConfig};
use milliscale_bench::keys::KeyDist;
use milliscale_bench::report::Report;
use milliscale_bench::variant::{LogSettings, Variant};
use milliscale_bench::ycsb::{self, Engine, Workload, YcsbConfig};

/// The binary uses mimalloc: versions are freed by epoch reclamation on
/// whichever thread advances the epoch, a cross-thread free pattern that
/// costs glibc malloc ~10% of an update-heavy run (BENCHMARKS.md). The
/// library itself does not choose an allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "milliscale",
    version,
    about = "Milliscale: an OLTP engine that commits to object storage"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the benchmark variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run a benchmark.
    #[command(subcommand)]
    Bench(Bench),
    /// Serve an S3-compatible store with S3 Express appends on loopback.
    Emulator(EmulatorArgs),
    /// Read a database from a store: the manifest, the checkpoint's chunks,
    /// the log's groups, segments, parts, CSN ranges and torn tails, and
    /// what recovery would replay. Reads only.
    Inspect(InspectArgs),
    /// Open a database as its writer and recover it: fence the previous
    /// writer, load the checkpoint, replay the log, checkpoint the result.
    /// Prints what was found and how long each step took.
    Recover(RecoverArgs),
    /// Print a table's rows as hex `key value` lines, in key order, from the
    /// database's durable state. Reads only: the writer is not fenced.
    Dump(DumpArgs),
    /// Follow a database's log as a read replica: load the checkpoint,
    /// apply what the writer commits, and print the replica's progress, lag
    /// and cost. Reads only: the writer is not asked or fenced.
    Replica(ReplicaArgs),
    /// Build a checkpoint off the writer: follow the log as a replica until
    /// caught up, write a checkpoint of that state and offer it. A writer
    /// opened with checkpoint offloading adopts it after checking it, and
    /// truncates its log. Reads the log; writes only checkpoint objects.
    Checkpoint(CheckpointArgs),
}

#[derive(Args)]
struct CheckpointArgs {
    /// A store holding the database (repeat for replicas, in the writer's
    /// order).
    #[arg(long, required = true)]
    store: Vec<String>,
    /// Build it from the log (the only way offered: the writer is not
    /// asked, and its memory is not scanned).
    #[arg(long, required = true)]
    from_log: bool,
    /// Give up if the replica has not caught up with the log within this
    /// many seconds.
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct RecoverArgs {
    /// A store holding the database (repeat for replicas, in the same order
    /// the writer used).
    #[arg(long, required = true)]
    store: Vec<String>,
    /// Replay threads (default: the number of cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Create an empty database if the stores hold none (without it, a
    /// store with no database is an error: most often a mistyped address).
    #[arg(long)]
    create: bool,
}

#[derive(Args)]
struct DumpArgs {
    /// A store holding the database (repeat for replicas).
    #[arg(long, required = true)]
    store: Vec<String>,
    /// The table to print.
    #[arg(long)]
    table: String,
}

#[derive(Args)]
struct ReplicaArgs {
    /// A store holding the database (repeat for replicas, in the writer's
    /// order).
    #[arg(long, required = true)]
    store: Vec<String>,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long = "for", value_name = "SECONDS")]
    run_for: Option<f64>,
    /// Stop once this CSN (a commit's token) is applied, or fail after
    /// `--for` seconds (default 30) without it.
    #[arg(long, value_name = "CSN")]
    until_csn: Option<u64>,
    /// Print a progress line this often, in seconds (0: never).
    #[arg(long, default_value_t = 1.0)]
    every: f64,
    /// Poll a chain this often while the database is active, in ms.
    #[arg(long, default_value_t = 5.0)]
    poll_min_ms: f64,
    /// Poll a chain at most this seldom while the database is idle, in ms.
    #[arg(long, default_value_t = 1000.0)]
    poll_max_ms: f64,
    /// Threads that apply the log, split by key (default: the cores, at
    /// most 4).
    #[arg(long)]
    apply_threads: Option<usize>,
    /// Never send a slow read a second time (by default a read slower than
    /// twice the 90th percentile of recent ones is raced by a second, where the
    /// store's client can: s3://, sim://).
    #[arg(long)]
    no_hedge_reads: bool,
    /// When it stops, print this table's rows (hex `key value` lines, in
    /// key order) as the replica sees them.
    #[arg(long)]
    dump: Option<String>,
    /// When it stops, print the metrics as JSON.
    #[arg(long)]
    json: bool,
    /// Build a checkpoint of the replica's state and offer it to the
    /// writer this often, in seconds (a writer with --checkpoint-offload
    /// adopts it and truncates its log).
    #[arg(long, value_name = "SECONDS")]
    offer_checkpoint_every: Option<f64>,
    /// Offer a checkpoint whenever a writer with --checkpoint-offload wants
    /// one (it publishes where it marked its log; the replica offers once
    /// it has applied that far).
    #[arg(long)]
    offer_checkpoints: bool,
}

#[derive(Args)]
struct InspectArgs {
    /// The store holding the database: file:///path, s3://bucket/prefix?endpoint=...
    #[arg(long)]
    store: String,
    /// Also list every part.
    #[arg(long)]
    parts: bool,
}

#[derive(Subcommand)]
enum Bench {
    /// YCSB transactions (the paper's §5 setup) against the engine.
    Ycsb(YcsbArgs),
    /// TPC-C: nine tables, the five transactions in the 45/43/4/4/4 mix;
    /// checks consistency conditions 1-4 after the run.
    Tpcc(TpccArgs),
    /// Run a grid of benchmark configurations from a TOML file; write a CSV
    /// of every report and PNG plots (see configs/sweeps/).
    Sweep(SweepArgs),
    /// Bank transfers that wait for their acks and journal them: the
    /// crash-test workload. Audits the total at the end.
    Bank(BankArgs),
    /// Failover time of a hot standby (promotion) against a cold recovery
    /// of the same database, with a large live log.
    Failover(FailoverArgs),
    /// Compare ordered-index candidates on inserts, lookups and scans.
    Index(IndexArgs),
    /// Append latency of a store, compared with its sim preset's model.
    Store(StoreArgs),
    /// The emulator's speed over loopback: append throughput and overhead.
    Emulator(EmulatorBenchArgs),
}

#[derive(Args)]
struct EmulatorArgs {
    /// Address to bind. Keep it on loopback unless you mean it: there is no TLS.
    #[arg(long, default_value = "127.0.0.1")]
    host: std::net::IpAddr,
    /// Port; 0 picks a free one (printed on the first line).
    #[arg(long, default_value_t = 9100)]
    port: u16,
    /// Keep buckets in this directory (durable, fsynced); default: memory.
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Create this bucket before serving (repeatable), so that clients
    /// that expect an existing bucket (the engine's `s3://` log) can start.
    #[arg(long = "bucket", value_name = "NAME")]
    buckets: Vec<String>,
    /// Latency preset: none, s3x, s3-standard, gp3, io2, nvme.
    #[arg(long, default_value = "none")]
    preset: String,
    /// Seed of the latency and fault streams.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Probability that a request gets 503 SlowDown (not applied).
    #[arg(long, default_value_t = 0.0)]
    throttle: f64,
    /// Probability that a request gets 500 InternalError (not applied).
    #[arg(long, default_value_t = 0.0)]
    error: f64,
    /// Probability that an append is applied but answered 500 (ambiguous).
    #[arg(long, default_value_t = 0.0)]
    ambiguous: f64,
    /// Inject the preset's stalls.
    #[arg(long)]
    stalls: bool,
    /// Parts per object before 400 TooManyParts (S3 Express: 10000).
    #[arg(long, default_value_t = 10_000)]
    parts_max: u32,
    /// Access key id clients sign with [default: $AWS_ACCESS_KEY_ID or milliscale].
    #[arg(long)]
    access_key: Option<String>,
    /// Secret key [default: $AWS_SECRET_ACCESS_KEY or milliscale-secret].
    #[arg(long)]
    secret_key: Option<String>,
    /// Another accepted user, as ACCESS_KEY:SECRET_KEY (repeatable); every
    /// user sees the same buckets.
    #[arg(long = "user", value_name = "ACCESS_KEY:SECRET_KEY", value_parser = parse_user)]
    users: Vec<(String, String)>,
    /// Log each request as one JSON line (time, id, method, path, status,
    /// bytes, ms) to this file, or to standard error with `-`.
    #[arg(long, value_name = "PATH")]
    request_log: Option<std::path::PathBuf>,
    /// HTTP worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

fn parse_user(s: &str) -> Result<(String, String), String> {
    match s.split_once(':') {
        Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("expected ACCESS_KEY:SECRET_KEY, got {s:?}")),
    }
}

#[derive(Args)]
struct EmulatorBenchArgs {
    /// Concurrent clients for the throughput phase.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Append size for the throughput phase (bytes, K or M suffix).
    #[arg(long, default_value = "64K")]
    size: String,
    /// Appends in the throughput phase.
    #[arg(long, default_value_t = 10_000)]
    count: u64,
    /// Appends of 1 MiB in the overhead phase (direct, then through HTTP).
    #[arg(long, default_value_t = 500)]
    big_count: u64,
    #[arg(long)]
    json: bool,
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_owned())
}

fn emulator(a: EmulatorArgs) -> Result<(), String> {
    use emulator::{Backing, Emulator, EmulatorOptions};
    let opts = EmulatorOptions {
        addr: std::net::SocketAddr::new(a.host, a.port),
        backing: a.dir.clone().map_or(Backing::Memory, Backing::Dir),
        preset: a.preset.clone(),
        faults: objstore::sim::Faults {
            seed: a.seed,
            throttle: a.throttle,
            error: a.error,
            ambiguous: a.ambiguous,
            stalls: a.stalls,
        },
        parts_max: a.parts_max,
        access_key: a
            .access_key
            .unwrap_or_else(|| env_or("AWS_ACCESS_KEY_ID", emulator::DEFAULT_ACCESS_KEY)),
        secret_key: a
            .secret_key
            .unwrap_or_else(|| env_or("AWS_SECRET_ACCESS_KEY", emulator::DEFAULT_SECRET_KEY)),
        users: a.users.clone(),
        request_log: a.request_log.as_ref().map(|p| {
            if p.as_os_str() == "-" {
                emulator::RequestLog::Stderr
            } else {
                emulator::RequestLog::File(p.clone())
            }
        }),
        threads: a.threads,
    };
    let access_key = opts.access_key.clone();
    let e = Emulator::start(opts).map_err(|e| e.to_string())?;
    for b in &a.buckets {
        e.bucket(b).map_err(|err| format!("creating bucket {b}: {err}"))?;
    }
    let backing = a.dir.map_or("memory".to_owned(), |d| d.display().to_string());
    // The first line is for scripts: the endpoint, alone.
    println!("{}", e.endpoint());
    eprintln!(
        "milliscale emulator: serving {backing} with preset {} (access key {access_key}); \
         accounting at {}{}; Ctrl-C or SIGTERM stops it",
        a.preset,
        e.endpoint(),
        emulator::ACCOUNTING_PATH
    );
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    emulator::wait_for_shutdown_signal().map_err(|e| format!("waiting for a signal: {e}"))?;
    let report = e.accounting();
    e.stop();
    println!("accounting at shutdown:");
    print!("{}", report.to_human());
    Ok(())
}

fn bench_emulator(a: EmulatorBenchArgs) -> Result<(), String> {
    let cfg = milliscale_bench::emulator_bench::EmulatorBenchConfig {
        clients: a.clients,
        size: parse_size(&a.size)?,
        count: a.count,
        big_count: a.big_count,
        ..Default::default()
    };
    let r = milliscale_bench::emulator_bench::run(&cfg)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?);
        return Ok(());
    }
    println!(
        "throughput: {} appends of {} bytes from {} clients: {:.0} appends/s \
         (p50 {:.2} ms, p99 {:.2} ms)",
        r.appends, r.size_bytes, r.clients, r.appends_per_s, r.latency.p50_ms, r.latency.p99_ms
    );
    println!(
        "overhead: {} appends of {} bytes, one at a time: p50 {:.3} ms direct on memory, \
         {:.3} ms through the emulator: +{:.3} ms",
        r.big_appends, r.big_size_bytes, r.big_direct.p50_ms, r.big_http.p50_ms, r.big_added_p50_ms
    );
    Ok(())
}

#[derive(Clone, Copy, ValueEnum)]
enum WorkloadArg {
    A,
    B,
    C,
    U,
}

#[derive(Clone, Copy, ValueEnum)]
enum DistArg {
    Uniform,
    Zipfian,
}

#[derive(Clone, Copy, ValueEnum)]
enum IsolationArg {
    ReadCommitted,
    Snapshot,
    Serializable,
}

#[derive(Clone, Copy, ValueEnum)]
enum VariantArg {
    Milliscale,
    S3x,
    S3Standard,
    Gp3,
    Io2,
    /// No log: write every dirty page at commit (seed 003's Naïve).
    NaivePages,
    /// No log: the records and a commit record to an ATOMIC-queue object
    /// at commit, applied to the pages by checkpoints (seed 003's
    /// Atomicity).
    AtomicPages,
}

#[derive(Clone, Copy, ValueEnum)]
enum QuorumArg {
    Majority,
    All,
}

#[derive(Clone, Copy, ValueEnum)]
enum CommitArg {
    Pipelined,
    Autonomous,
}

#[derive(Clone, Copy, ValueEnum)]
enum TrackingArg {
    Record,
    Txn,
}

#[derive(Clone, Copy, ValueEnum)]
enum HedgingArg {
    Auto,
    Always,
    Off,
}

#[derive(Clone, Copy, ValueEnum)]
enum FlushPolicyArg {
    Adaptive,
    Timeout,
}

#[derive(Clone, Copy, ValueEnum)]
enum EngineArg {
    Milliscale,
    RawIndex,
    /// SlateDB 0.18 on the same store (the first --store), each commit
    /// acknowledged at await_durable.
    Slatedb,
}

/// The log's settings, shared by the benchmarks.
#[derive(Args)]
struct LogArgs {
    /// The paper's system variant (§5.1): sets the store, group size,
    /// buffer size and tracking; the flags below override each setting.
    #[arg(long, value_enum, default_value = "milliscale")]
    variant: VariantArg,
    /// Where the log goes (repeat for replication): sim://s3x,
    /// file:///path, s3://bucket/prefix?endpoint=..., memory://; "none"
    /// disables logging. [default: the variant's store]
    #[arg(long)]
    store: Vec<String>,
    /// Stores that must hold a part before it is durable.
    #[arg(long, value_enum, default_value = "majority")]
    quorum: QuorumArg,
    /// Worker threads per log buffer. [default: the variant's]
    #[arg(long)]
    log_group_size: Option<usize>,
    /// Bytes per log buffer, or with a K/M suffix. [default: the variant's]
    #[arg(long)]
    log_buffer: Option<String>,
    /// Milliseconds after which a buffer that is not full is flushed at the
    /// latest. [default: 10]
    #[arg(long)]
    flush_timeout: Option<f64>,
    /// The most appends each log stream keeps in flight, each lane its own
    /// chain of segments (1..=16). [default: the variant's; milliscale 8]
    #[arg(long)]
    log_lanes: Option<usize>,
    /// Log streams: the groups are split among this many streams, each
    /// with its own lanes; one append carries a part of every group of its
    /// stream. A number, or `per-group` (the paper's layout: each group its
    /// own log). [default: the variant's; milliscale 1]
    #[arg(long)]
    log_streams: Option<String>,
    /// The scheduler slice the log's threads ask for, in milliseconds
    /// (0.1..=100), so that they preempt busy workers when they wake
    /// (Linux 6.12+); `off` leaves the kernel's default. [default: 0.1]
    #[arg(long)]
    log_thread_slice: Option<String>,
    /// When a stream flushes: adaptive (evenly paced by the store's
    /// latency, see --flush-pace, on a free lane, when a buffer holds data)
    /// or timeout (the paper's: full, or --flush-timeout after the first
    /// entry). [default: the variant's; milliscale adaptive]
    #[arg(long, value_enum)]
    flush_policy: Option<FlushPolicyArg>,
    /// Adaptive flushing: the least milliseconds between two flushes of a
    /// stream. [default: 1]
    #[arg(long)]
    flush_min_interval: Option<f64>,
    /// Adaptive flushing: appends a stream starts per store round trip
    /// (the median of its recent appends), evenly spaced, in (0, 64];
    /// `off` flushes whenever a lane is free. [default: 2.75]
    #[arg(long)]
    flush_pace: Option<String>,
    /// A request budget: at most this many log parts per second for the
    /// whole database (each part one request per store). [default: none]
    #[arg(long)]
    max_appends_per_s: Option<u32>,
    /// Dependency tracking: record (DSN < gCSN) or txn (CSN < gCSN).
    /// [default: the variant's]
    #[arg(long, value_enum)]
    tracking: Option<TrackingArg>,
    /// The commit protocol: pipelined (lane threads flush, paced by the
    /// store) or autonomous (seed 001: each worker flushes its own buffer,
    /// and its neighbours', at a flush unit or when idle, and acknowledges
    /// commits itself; a buffer per worker, streams of --steal-group).
    #[arg(long = "commit", value_enum, default_value = "pipelined")]
    commit: CommitArg,
    /// Autonomous commit: a worker flushes once its buffer holds this much
    /// (K/M suffix). [default: 16K; 256K when a log store is an object
    /// store (s3://, sim://s3x, sim://s3-standard)]
    #[arg(long)]
    flush_unit: Option<String>,
    /// Autonomous commit: force a flush after a transaction when the
    /// worker's average idle time reaches a random draw below this many
    /// microseconds; 0 turns the prediction off. [default: 50]
    #[arg(long)]
    max_idle_us: Option<u64>,
    /// Autonomous commit: buffers per stream (log stealing). [default: 4]
    #[arg(long)]
    steal_group: Option<usize>,
    /// Write one object per flush even where the store appends.
    #[arg(long)]
    put_per_flush: bool,
    /// Where a slow log append is sent a second time (after the 90th
    /// percentile of recent appends, for at most 10% of them): auto (where
    /// the store's client does it without helper threads: s3://, sim://),
    /// always (helper threads elsewhere), off. [default: the variant's;
    /// milliscale auto]
    #[arg(long, value_enum)]
    hedging: Option<HedgingArg>,
    /// Same as --hedging always.
    #[arg(long, conflicts_with = "hedging")]
    hedge_appends: bool,
    /// Hedge an append once it is slower than this many times the 90th
    /// percentile of recent appends.
    #[arg(long, default_value_t = 1.0)]
    hedge_multiple: f64,
    /// Hedge at most this share of appends in the long run (each hedge is
    /// one more request).
    #[arg(long, default_value_t = 0.1)]
    hedge_budget: f64,
    /// Take a background checkpoint after this many log bytes (K/M/G
    /// suffix). Off by default in benchmarks, so runs measure the log alone.
    #[arg(long)]
    checkpoint_every: Option<String>,
    /// With --checkpoint-every: do not scan memory, adopt a checkpoint that
    /// a replica offers (`milliscale checkpoint --from-log`, `replica
    /// --offer-checkpoints` or `--offer-checkpoint-every`) once one covers
    /// the log.
    #[arg(long)]
    checkpoint_offload: bool,
    /// Take a background checkpoint this often, in seconds, when the log
    /// grew (besides --checkpoint-every). For --variant atomic-pages: how
    /// often the ATOMIC queue is applied to the pages [default there: 15,
    /// the fourth paper's].
    #[arg(long)]
    checkpoint_interval: Option<f64>,
    /// Bill `sim://` stores with this price table of the presets file
    /// (`s3-express`, `s3-standard`, `s3-2008` = the fourth paper's 2007
    /// prices, `ebs`), or `preset`: each preset's own.
    #[arg(long, default_value = "preset")]
    price: String,
}

#[derive(Args)]
struct BankArgs {
    /// Accounts; each starts with --initial-balance.
    #[arg(long, default_value_t = 1_000)]
    accounts: u64,
    #[arg(long, default_value_t = 1_000_000)]
    initial_balance: u64,
    /// Worker threads, each waiting for its transfer's acknowledgment.
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Append each acknowledged transfer id to this file (flushed and
    /// synced before the next transfer is issued).
    #[arg(long)]
    acked_log: Option<std::path::PathBuf>,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Run as a hot standby: follow the bank's writer as a read replica
    /// until this file exists (create it when the writer dies), then
    /// promote the replica to writer (the old writer is fenced) and run
    /// the transfers. Reports the failover time, from the file's
    /// modification time to the first acknowledged transfer.
    #[arg(long, value_name = "FILE")]
    promote_when: Option<std::path::PathBuf>,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    log: LogArgs,
}

#[derive(Args)]
struct FailoverArgs {
    /// Live log to build before the writer dies, in MB.
    #[arg(long, default_value_t = 1024.0)]
    log_mb: f64,
    /// Rows in the table.
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 1000)]
    value_bytes: usize,
    /// Rows updated per transaction (whole values).
    #[arg(long, default_value_t = 10)]
    ops: usize,
    /// Writer threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    log: LogArgs,
}

#[derive(Args)]
struct YcsbArgs {
    /// Records in the table.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// a: 50/50 read/update txns, b: 95/5, c: read-only, u: update-only.
    #[arg(long, value_enum, default_value = "a")]
    workload: WorkloadArg,
    #[arg(long, value_enum, default_value = "uniform")]
    dist: DistArg,
    /// Zipfian skew.
    #[arg(long, default_value_t = 0.99)]
    theta: f64,
    /// Operations per transaction.
    #[arg(long, default_value_t = 10)]
    ops_per_txn: usize,
    /// milliscale; raw-index: the same lookups on the bare index (workload
    /// c); slatedb: the same transactions through SlateDB on the same store.
    #[arg(long, value_enum, default_value = "milliscale")]
    engine: EngineArg,
    /// SlateDB only: concurrent clients, each one transaction at a time.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// SlateDB only: its WAL flush interval in milliseconds.
    #[arg(long, default_value_t = 10.0)]
    slatedb_flush_ms: f64,
    /// Run a read replica beside the writer, on the same stores: report its
    /// lag (writer gCSN to replica visibility), whether it keeps up, and
    /// its requests; then read from it (see --replica-readers).
    #[arg(long)]
    replica: bool,
    /// With --replica: reader threads that run read-only transactions of
    /// --ops-per-txn keys on the replica after the measured phase.
    #[arg(long, default_value_t = 2)]
    replica_readers: usize,
    /// With --replica: seconds the readers run.
    #[arg(long, default_value_t = 3.0)]
    replica_read_secs: f64,
    /// With --replica: the replica's apply threads (default: the cores,
    /// at most 4).
    #[arg(long)]
    replica_apply_threads: Option<usize>,
    /// With --replica: run the writer's threads on core 0 and the
    /// replica's on core 1, as two one-core machines sharing the store.
    #[arg(long)]
    replica_pin: bool,
    /// With --replica: never send a slow read a second time.
    #[arg(long)]
    replica_no_hedge: bool,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Args)]
struct SweepArgs {
    /// The sweep's TOML config (grid, fixed flags, plots).
    #[arg(long)]
    config: std::path::PathBuf,
    /// Where the CSV and PNGs go [default: sweeps/<name>].
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Do not run: re-draw the plots from the CSV an earlier run of this
    /// config wrote (after editing its [[plot]] sections).
    #[arg(long)]
    replot: bool,
    /// Override the config, KEY=VALUE, repeatable: `repetitions=N`, a grid
    /// flag's values (`threads=1,2,4,8,16`), or a fixed flag
    /// (`records=30000000`). For the paper's scale on a bigger machine.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
}

#[derive(Args)]
struct TpccArgs {
    /// Warehouses (each about 135 MiB of memory).
    #[arg(long, default_value_t = 10)]
    warehouses: u32,
    /// Percent NewOrder,Payment,OrderStatus,Delivery,StockLevel (sum 100).
    #[arg(long, value_delimiter = ',', default_value = "45,43,4,4,4")]
    mix: Vec<u32>,
    /// Each worker uses one home warehouse (worker mod warehouses), instead
    /// of a random warehouse per transaction (the paper's choice).
    #[arg(long)]
    home_warehouse: bool,
    /// Log whole rows on update instead of deltas of the changed fields.
    #[arg(long)]
    full_record_logging: bool,
    #[command(flatten)]
    run: RunArgs,
}

/// The flags every timed transaction benchmark (ycsb, tpcc) takes.
#[derive(Args)]
struct RunArgs {
    /// Worker threads (TPC-C: terminals) [default: the number of cores].
    #[arg(long)]
    threads: Option<usize>,
    /// Measured seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds of warmup before measuring.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Open loop: transactions arrive as a Poisson process at this many per
    /// second (all workers together); latency then runs from arrival to
    /// the durable acknowledgment, so queueing counts.
    #[arg(long)]
    rate: Option<f64>,
    #[command(flatten)]
    log: LogArgs,
    #[arg(long, value_enum, default_value = "snapshot")]
    isolation: IsolationArg,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Print the report as JSON only.
    #[arg(long)]
    json: bool,
    /// Print a CSV header and the report as one row.
    #[arg(long, conflicts_with = "json")]
    csv: bool,
}

impl RunArgs {
    fn threads(&self) -> usize {
        self.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    fn pacing(&self) -> milliscale_bench::harness::Pacing {
        match self.rate {
            None => milliscale_bench::harness::Pacing::Closed,
            Some(rate) => milliscale_bench::harness::Pacing::Open { rate },
        }
    }

    fn isolation(&self) -> Isolation {
        match self.isolation {
            IsolationArg::ReadCommitted => Isolation::ReadCommitted,
            IsolationArg::Snapshot => Isolation::Snapshot,
            IsolationArg::Serializable => Isolation::Serializable,
        }
    }

    /// A progress bar only for a human reading a terminal.
    fn progress(&self) -> bool {
        !self.json && !self.csv && std::io::stderr().is_terminal()
    }

    fn print(&self, report: &Report) {
        print_report(report, self.json, self.csv);
    }
}

#[derive(Args)]
struct IndexArgs {
    /// Key counts, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1000000")]
    keys: Vec<u64>,
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Seconds per lookup and scan phase.
    #[arg(long, default_value_t = 3.0)]
    phase_secs: f64,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct StoreArgs {
    /// Store URL, e.g. sim://s3x or sim://s3x?inner=file:///tmp/x.
    #[arg(long, default_value = "sim://s3x")]
    store: String,
    /// Part size: bytes, or with a K/M suffix (KiB/MiB).
    #[arg(long, default_value = "512K")]
    size: String,
    /// Appends in total.
    #[arg(long, default_value_t = 10_000)]
    count: u64,
    /// Concurrent appenders, each to its own segments.
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Parts per segment before a new one is started.
    #[arg(long, default_value_t = 20)]
    rollover: u64,
    #[arg(long)]
    json: bool,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1024),
        Some('M' | 'm') => (&s[..s.len() - 1], 1024 * 1024),
        _ => (s, 1),
    };
    num.parse::<usize>().ok().and_then(|n| n.checked_mul(mult)).filter(|&n| n > 0).ok_or_else(
        || format!("--size must be a positive byte count like 4096, 512K or 2M; got {s:?}"),
    )
}

fn bench_store(a: StoreArgs) -> Result<(), String> {
    let cfg = milliscale_bench::store_bench::StoreBenchConfig {
        url: a.store,
        size: parse_size(&a.size)?,
        count: a.count,
        threads: a.threads,
        rollover: a.rollover,
    };
    let r = milliscale_bench::store_bench::run(&cfg)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?);
        return Ok(());
    }
    println!(
        "{} — {} appends of {} bytes, {} threads, {:.0} appends/s",
        r.url, r.appends, r.size_bytes, r.threads, r.appends_per_s
    );
    println!("{:<10}{:>10}{:>10}{:>10}", "ms", "p50", "p99", "p99.9");
    let row = |name: &str, q: &milliscale_bench::store_bench::Quantiles| {
        println!("{name:<10}{:>10.2}{:>10.2}{:>10.2}", q.p50_ms, q.p99_ms, q.p999_ms)
    };
    row("measured", &r.measured);
    if let (Some(e), Some(x)) = (&r.expected, &r.ratio) {
        row("model", e);
        println!("{:<10}{:>10.3}{:>10.3}{:>10.3}", "ratio", x.p50_ms, x.p99_ms, x.p999_ms);
    }
    if let Some((lo, hi)) = r.model_p999_band_ms {
        println!(
            "the model's own p99.9 at {} samples: {lo:.1}..{hi:.1} ms (5th..95th percentile of 200 draws)",
            r.appends
        );
    }
    Ok(())
}

fn seconds(name: &str, s: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| format!("--{name} must be a non-negative number of seconds, got {s}"))
}

fn log_settings(a: &LogArgs) -> Result<(Variant, LogSettings), String> {
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
        l.log_buffer_bytes = parse_size(b).map_err(|e| e.replace("--size", "--log-buffer"))?;
    }
    if let Some(ms) = a.flush_timeout {
        l.flush_timeout = seconds("flush-timeout", ms / 1e3)?;
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
                        "--log-thread-slice must be in 0.1..=100 (ms) or off, got {v:?}"
                    ));
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
                    ));
                }
            },
        };
    }
    if let Some(p) = a.flush_policy {
        l.flush_policy = match p {
            FlushPolicyArg::Adaptive => milliscale::FlushPolicy::Adaptive,
            FlushPolicyArg::Timeout => milliscale::FlushPolicy::Timeout,
        };
    }
    if let Some(ms) = a.flush_min_interval {
        if !(0.0..=1000.0).contains(&ms) {
            return Err(format!("--flush-min-interval must be in 0..=1000 ms, got {ms}"));
        }
        l.flush_min_interval = std::time::Duration::from_secs_f64(ms / 1e3);
    }
    if let Some(v) = &a.flush_pace {
        l.flush_pace = match v.as_str() {
            "off" => None,
            p => match p.parse::<f64>() {
                Ok(p) if p > 0.0 && p <= milliscale::options::FLUSH_PACE_MAX => Some(p),
                _ => {
                    return Err(format!("--flush-pace must be in (0, 64] or off, got {v:?}"));
                }
            },
        };
    }
    if a.max_appends_per_s.is_some() {
        l.max_appends_per_s = a.max_appends_per_s;
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
        let unit = parse_size(u).map_err(|e| e.replace("--size", "--flush-unit"))?;
        l.flush_unit = Some(unit);
        if unit == 0 {
            return Err("--flush-unit must be at least 1 byte".into());
        }
    }
    if let Some(us) = a.max_idle_us {
        if us > 1_000_000 {
            return Err(format!("--max-idle-us must be at most 1000000, got {us}"));
        }
        l.max_idle = std::time::Duration::from_micros(us);
    }
    if let Some(n) = a.steal_group {
        if !(1..=milliscale::options::LOG_LANES_MAX).contains(&n) {
            return Err(format!(
                "--steal-group must be in 1..={}, got {n}",
                milliscale::options::LOG_LANES_MAX
            ));
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
    if let Some(b) = &a.checkpoint_every {
        l.checkpoint_log_bytes =
            parse_size(b).map_err(|e| e.replace("--size", "--checkpoint-every"))? as u64;
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
        let d = seconds("checkpoint-interval", secs)?;
        if d.is_zero() {
            return Err("--checkpoint-interval must be above 0 seconds".into());
        }
        l.checkpoint_interval = Some(d);
    } else if l.pages == Some(milliscale::pages::PageProtocol::Atomic) {
        l.checkpoint_interval = Some(std::time::Duration::from_secs(15));
    }
    Ok((variant, l))
}

fn bench_bank(a: BankArgs) -> Result<(), String> {
    let (_, log) = log_settings(&a.log)?;
    if log.pages.is_some() {
        return Err("the page variants (naive-pages, atomic-pages) run `bench ycsb` only".into());
    }
    let cfg = milliscale_bench::bank::BankConfig {
        accounts: a.accounts,
        initial_balance: a.initial_balance,
        threads: a.threads,
        duration: seconds("duration", a.duration)?,
        log,
        isolation: Isolation::Snapshot,
        acked_log: a.acked_log,
        seed: a.seed,
        standby: a.promote_when,
    };
    let report = milliscale_bench::bank::run(&cfg)?;
    print_report(&report, a.json, false);
    Ok(())
}

fn bench_failover(a: FailoverArgs) -> Result<(), String> {
    let (_, log) = log_settings(&a.log)?;
    if log.pages.is_some() {
        return Err("the page variants (naive-pages, atomic-pages) run `bench ycsb` only".into());
    }
    if a.log_mb.is_nan() || a.log_mb <= 0.0 {
        return Err("--log-mb must be above 0".into());
    }
    let cfg = milliscale_bench::failover::FailoverConfig {
        log,
        log_bytes: (a.log_mb * 1e6) as u64,
        records: a.records,
        value_bytes: a.value_bytes,
        ops: a.ops,
        threads: a.threads,
        seed: a.seed,
    };
    let report = milliscale_bench::failover::run(&cfg)?;
    print_report(&report, a.json, false);
    Ok(())
}

fn bench_ycsb(a: YcsbArgs) -> Result<(), String> {
    let r = &a.run;
    let (variant, log) = log_settings(&r.log)?;
    let cfg = YcsbConfig {
        records: a.records,
        threads: r.threads(),
        duration: seconds("duration", r.duration)?,
        warmup: seconds("warmup", r.warmup)?,
        workload: match a.workload {
            WorkloadArg::A => Workload::A,
            WorkloadArg::B => Workload::B,
            WorkloadArg::C => Workload::C,
            WorkloadArg::U => Workload::U,
        },
        dist: match a.dist {
            DistArg::Uniform => KeyDist::Uniform,
            DistArg::Zipfian => KeyDist::Zipfian { theta: a.theta },
        },
        ops_per_txn: a.ops_per_txn,
        log,
        variant: variant.name().to_owned(),
        isolation: r.isolation(),
        engine: match a.engine {
            // The peer reads the workload from the same config.
            EngineArg::Milliscale | EngineArg::Slatedb => Engine::Milliscale,
            EngineArg::RawIndex => Engine::RawIndex,
        },
        seed: r.seed,
        pacing: r.pacing(),
        progress: r.progress(),
        replica: if a.replica {
            Some(milliscale_bench::replica_bench::ReplicaConfig {
                readers: a.replica_readers,
                read_for: seconds("replica-read-secs", a.replica_read_secs)?,
                apply_threads: threads("replica-apply-threads", a.replica_apply_threads)?,
                pin: a.replica_pin,
                hedge_reads: !a.replica_no_hedge,
            })
        } else {
            None
        },
    };
    if cfg.log.pages.is_some() && !matches!(a.engine, EngineArg::Milliscale) {
        return Err("the page variants run on the milliscale engine (--engine milliscale)".into());
    }
    let report = if matches!(a.engine, EngineArg::Slatedb) {
        let opts = peer::slatedb_ycsb::SlateOptions {
            clients: a.clients,
            flush_interval: seconds("slatedb-flush-ms", a.slatedb_flush_ms / 1e3)?,
        };
        peer::slatedb_ycsb::run(&cfg, &opts)?
    } else {
        ycsb::run(&cfg)?
    };
    r.print(&report);
    Ok(())
}

fn bench_tpcc(a: TpccArgs) -> Result<(), String> {
    let r = &a.run;
    let (variant, log) = log_settings(&r.log)?;
    if log.pages.is_some() {
        return Err("the page variants (naive-pages, atomic-pages) run `bench ycsb` only".into());
    }
    let mix: [u32; 5] = a.mix.as_slice().try_into().map_err(|_| {
        format!("--mix takes five percentages (NewOrder,Payment,OrderStatus,Delivery,StockLevel), got {:?}", a.mix)
    })?;
    let cfg = milliscale_bench::tpcc::TpccConfig {
        warehouses: a.warehouses,
        scale: milliscale_bench::tpcc::Scale::SPEC,
        threads: r.threads(),
        duration: seconds("duration", r.duration)?,
        warmup: seconds("warmup", r.warmup)?,
        mix,
        home_warehouse: a.home_warehouse,
        delta: !a.full_record_logging,
        pacing: r.pacing(),
        log,
        variant: variant.name().to_owned(),
        isolation: r.isolation(),
        seed: r.seed,
        progress: r.progress(),
    };
    let report = milliscale_bench::tpcc::run(&cfg)?;
    r.print(&report);
    Ok(())
}

fn bench_sweep(a: SweepArgs) -> Result<(), String> {
    use milliscale_bench::sweep;
    let mut cfg = sweep::SweepConfig::load(&a.config)?;
    cfg.apply_overrides(&a.sets).map_err(|e| format!("{}: {e}", a.config.display()))?;
    let out = a.out.unwrap_or_else(|| std::path::Path::new("sweeps").join(&cfg.name));
    if a.replot {
        let csv = out.join(format!("{}.csv", cfg.name));
        let text = std::fs::read_to_string(&csv).map_err(|e| format!("{}: {e}", csv.display()))?;
        let rows = sweep::from_csv(&cfg, &text)?;
        for f in sweep::write_outputs(&cfg, &rows, &out, false)? {
            println!("{}", f.display());
        }
        return Ok(());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let total = (cfg.points().len() * cfg.repetitions) as u64;
    let bar = if std::io::stderr().is_terminal() {
        let b = indicatif::ProgressBar::new(total);
        b.set_style(
            indicatif::ProgressStyle::with_template("{pos}/{len} [{bar:40}] {elapsed} {msg}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    let quiet = !bar.is_hidden();
    let rows = sweep::run(&cfg, &exe, |done, total, argv| {
        bar.set_position(done as u64);
        bar.set_message(argv[2..].join(" "));
        if !quiet {
            eprintln!("[{}/{total}] milliscale {}", done + 1, argv.join(" "));
        }
    })?;
    bar.finish_and_clear();
    for f in sweep::write_outputs(&cfg, &rows, &out, true)? {
        println!("{}", f.display());
    }
    Ok(())
}

fn print_report(r: &Report, json: bool, csv: bool) {
    if json {
        println!("{}", r.to_json());
    } else if csv {
        println!("{}", Report::CSV_HEADER);
        println!("{}", r.csv_row());
    } else {
        print!("{}", r.to_human());
    }
}

fn bench_index(a: IndexArgs) -> Result<(), String> {
    if a.threads == 0 || a.keys.contains(&0) {
        return Err("--threads and every --keys value must be positive".into());
    }
    let cfg = IndexBenchConfig {
        keys: a.keys,
        threads: a.threads,
        phase_duration: seconds("phase-secs", a.phase_secs)?,
        seed: 42,
    };
    if !a.json {
        println!(
            "{:<30}{:>12}{:>8}{:>14}{:>14}{:>16}{:>12}",
            "candidate",
            "keys",
            "threads",
            "insert Mop/s",
            "lookup Mop/s",
            "scan100 Kop/s",
            "RSS MiB"
        );
    }
    let results = index_bench::run(&cfg, |r| {
        if !a.json {
            println!(
                "{:<30}{:>12}{:>8}{:>14.2}{:>14.2}{:>16.1}{:>12.0}",
                r.candidate,
                r.keys,
                r.threads,
                r.insert_mops,
                r.lookup_mops,
                r.scan100_kops,
                r.rss_mib_growth
            );
        }
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&results).map_err(|e| e.to_string())?);
    }
    Ok(())
}

fn inspect(a: InspectArgs) -> Result<(), String> {
    use milliscale::log::record::Entry;
    let store = objstore::open(&a.store).map_err(|e| format!("{}: {e}", a.store))?;
    let started = std::time::Instant::now();
    let (m, scan) =
        milliscale::recovery::scan_log(&store).map_err(|e| format!("{}: {e}", a.store))?;
    println!(
        "manifest {}: epoch {}, log format {}, tables {:?}",
        milliscale::manifest::manifest_key(m.version),
        m.epoch,
        m.log_format,
        m.tables
    );
    match &m.checkpoint {
        None => println!("checkpoint: none"),
        Some(c) => {
            println!(
                "checkpoint at CSN {}: {} chunks, {} rows, {} bytes",
                c.csn,
                c.chunks.len(),
                c.rows,
                c.bytes
            );
            for chunk in &c.chunks {
                println!("  {}: {} bytes, crc32c {:08x}", chunk.key, chunk.bytes, chunk.crc);
            }
        }
    }
    // What a replica follows: sealed logs (as their seals decided), then
    // the current log; and the checkpoints replicas offered a writer.
    for s in &m.sealed {
        println!(
            "sealed log of epoch {}: CSNs {}..={} as the next writer decided: every CSN below {} \
             and {} commits above it replayed; its segments end before {}",
            s.log.epoch,
            s.from,
            s.max_csn,
            s.prefix,
            s.above.len(),
            s.end_segment
        );
    }
    println!(
        "a replica opened now loads the checkpoint and follows the log from CSN {}",
        m.replay_from()
    );
    if let Some(w) = m.checkpoint_wanted {
        println!(
            "checkpoint wanted: the writer offloads its checkpoints and marked its log at CSN \
             {w}; a replica offers one once it has applied that far"
        );
    }
    let named = [(a.store.clone(), std::sync::Arc::clone(&store))];
    let (offers, _) = milliscale::checkpoint::list_offers(&named, Duration::from_secs(30));
    let current = m.checkpoint.as_ref().map_or(0, |c| c.csn);
    for o in &offers {
        let state = match o.csn.cmp(&current) {
            std::cmp::Ordering::Equal => "adopted",
            std::cmp::Ordering::Less => "superseded",
            std::cmp::Ordering::Greater => "not adopted yet",
        };
        println!(
            "checkpoint offer at CSN {}: {} chunks, {} rows, {} bytes ({state})",
            o.csn,
            o.chunks.len(),
            o.rows,
            o.bytes
        );
    }
    println!(
        "log of epoch {}: {} groups in {} streams of {} lanes, base CSN {}, segments from {:?}, \
         {} parts per segment",
        m.log.epoch,
        m.log.groups,
        m.log.streams(),
        m.log.lanes,
        m.log.base_csn,
        m.log.group_start,
        m.log.parts_max
    );
    println!(
        "{}: {} log objects, {} bytes (read in {:.2} s)",
        a.store,
        scan.objects,
        scan.bytes,
        started.elapsed().as_secs_f64()
    );
    for (c, log) in &scan.chains {
        let entries: usize = log.parts.iter().map(|(_, p)| p.entries.len()).sum();
        let csns = |e: Option<&Entry>| e.map_or(0, Entry::csn);
        // A stream's lanes interleave its groups' parts: CSNs by group.
        let all = log.parts.iter().flat_map(|(_, p)| p.entries.iter().map(Entry::csn));
        let first = all.clone().min().unwrap_or(0);
        let last = all.max().unwrap_or(0);
        let objects: std::collections::BTreeSet<&str> =
            log.parts.iter().map(|(k, _)| k.as_str()).collect();
        let groups = m.log.chain_groups(*c);
        println!(
            "{c} (groups {}..={}): {} objects, {} parts, {entries} entries, CSN {first}..={last}{}",
            groups.start,
            groups.end.saturating_sub(1),
            objects.len(),
            log.parts.len(),
            log.fenced_by.map_or(String::new(), |e| format!(", fenced by epoch {e}"))
        );
        if a.parts {
            for (key, p) in &log.parts {
                println!(
                    "  {key}: group {}, {} entries, CSN {}..={}",
                    p.group,
                    p.entries.len(),
                    csns(p.entries.first()),
                    csns(p.entries.last())
                );
            }
        }
        if let Some(t) = &log.truncated {
            println!(
                "  torn tail cut: {} bytes of {} at offset {}: {}",
                t.bytes, t.key, t.offset, t.error
            );
        }
    }
    let plan = milliscale::recovery::plan_replay(&scan).map_err(|e| e.to_string())?;
    println!(
        "recovery would replay {} transactions from CSN {}: every CSN below {} is in the \
         checkpoint or the log (largest {}); {} commits dropped (their DSN is not below {}), \
         {} aborts",
        plan.replay.len(),
        scan.from,
        plan.prefix,
        plan.max_csn,
        plan.dropped.len(),
        plan.prefix,
        plan.aborts
    );
    Ok(())
}

fn store_options(stores: &[String]) -> milliscale::Options {
    let mut o = milliscale::Options::new();
    for s in stores {
        o = o.add_store(s.clone());
    }
    o
}

fn recover(a: RecoverArgs) -> Result<(), String> {
    let mut o = store_options(&a.store).checkpoint_log_bytes(0).create_if_missing(a.create);
    if let Some(t) = a.threads {
        o = o.recovery_threads(t);
    }
    let started = std::time::Instant::now();
    let db = milliscale::Database::open(o).map_err(|e| e.to_string())?;
    let took = started.elapsed();
    let Some(r) = db.recovery_report() else {
        println!("{}: no database there; created an empty one (--create)", a.store.join(", "));
        return Ok(());
    };
    if a.json {
        let chains: Vec<_> = r
            .chains
            .iter()
            .map(|(c, parts, t)| {
                serde_json::json!({
                    "group": c.group,
                    "lane": c.lane,
                    "parts": parts,
                    "truncated": t.as_ref().map(|t| serde_json::json!({
                        "key": t.key, "offset": t.offset, "bytes": t.bytes, "error": t.error.to_string()
                    })),
                })
            })
            .collect();
        let j = serde_json::json!({
            "found_version": r.found_version,
            "old_epoch": r.old_epoch,
            "new_epoch": r.new_epoch,
            "checkpoint_csn": r.checkpoint.map(|c| c.0),
            "checkpoint_chunks": r.checkpoint.map(|c| c.1),
            "checkpoint_rows": r.checkpoint_rows_loaded,
            "log_objects": r.log_objects,
            "log_bytes": r.log_bytes,
            "chains": chains,
            "repaired": r.repaired,
            "prefix": r.prefix,
            "max_csn": r.max_csn,
            "replayed": r.replayed,
            "dropped": r.dropped.len(),
            "aborts": r.aborts,
            "records_applied": r.records_applied,
            "threads": r.threads,
            "new_checkpoint_csn": r.new_checkpoint_csn,
            "seconds": {
                "fence": r.timings.fence.as_secs_f64(),
                "scan": r.timings.scan.as_secs_f64(),
                "load_checkpoint": r.timings.load_checkpoint.as_secs_f64(),
                "replay": r.timings.replay.as_secs_f64(),
                "checkpoint_and_publish": r.timings.checkpoint_and_publish.as_secs_f64(),
                "total": r.timings.total.as_secs_f64(),
                "open": took.as_secs_f64(),
            },
            "log_mb_per_s": r.log_bytes as f64 / 1e6 / (r.timings.scan + r.timings.replay).as_secs_f64().max(1e-9),
        });
        println!("{}", serde_json::to_string_pretty(&j).map_err(|e| e.to_string())?);
        return Ok(());
    }
    println!(
        "recovered {} (manifest version {}, epoch {} -> {}), {} threads",
        a.store.join(", "),
        r.found_version,
        r.old_epoch,
        r.new_epoch,
        r.threads
    );
    match r.checkpoint {
        Some((csn, chunks, rows)) => {
            println!(
                "checkpoint: CSN {csn}, {chunks} chunks, {rows} rows ({} loaded)",
                r.checkpoint_rows_loaded
            )
        }
        None => println!("checkpoint: none"),
    }
    println!("log: {} objects, {} bytes", r.log_objects, r.log_bytes);
    for (c, parts, t) in &r.chains {
        let (g, l) = (c.group, c.lane);
        match t {
            None => println!("  group {g} lane {l}: {parts} parts"),
            Some(t) => println!(
                "  group {g} lane {l}: {parts} parts; torn tail cut: {} bytes of {} at offset {}: {}",
                t.bytes, t.key, t.offset, t.error
            ),
        }
    }
    for x in &r.repaired {
        println!("  repaired from another store: {x}");
    }
    println!(
        "replayed {} transactions ({} records, {} keys); every CSN below {} was durable \
         (largest {}); dropped {} (DSN not below the prefix); {} aborts",
        r.replayed,
        r.records_applied,
        r.keys_installed,
        r.prefix,
        r.max_csn,
        r.dropped.len(),
        r.aborts
    );
    if let Some(c) = r.new_checkpoint_csn {
        println!("wrote checkpoint at CSN {c}");
    }
    let t = &r.timings;
    println!(
        "time: fence {:.3} s, scan {:.3} s, load checkpoint {:.3} s, replay {:.3} s, \
         checkpoint+publish {:.3} s, total {:.3} s; log {:.1} MB/s (scan+replay)",
        t.fence.as_secs_f64(),
        t.scan.as_secs_f64(),
        t.load_checkpoint.as_secs_f64(),
        t.replay.as_secs_f64(),
        t.checkpoint_and_publish.as_secs_f64(),
        t.total.as_secs_f64(),
        r.log_bytes as f64 / 1e6 / (t.scan + t.replay).as_secs_f64().max(1e-9)
    );
    db.close();
    Ok(())
}

fn dump(a: DumpArgs) -> Result<(), String> {
    use std::io::Write;
    let db =
        milliscale::Database::open_read_only(store_options(&a.store)).map_err(|e| e.to_string())?;
    let table = db.open_table(&a.table).map_err(|e| e.to_string())?;
    let mut tx = db.begin().map_err(|e| e.to_string())?;
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    let mut lower: Vec<u8> = Vec::new();
    let mut first = true;
    loop {
        let bound = if first {
            std::ops::Bound::Unbounded
        } else {
            std::ops::Bound::Excluded(lower.as_slice())
        };
        let rows = tx
            .scan(&table, bound, std::ops::Bound::Unbounded, milliscale::Direction::Forward, 10_000)
            .map_err(|e| e.to_string())?;
        let Some((last, _)) = rows.last() else { break };
        let last = last.clone();
        for (k, v) in &rows {
            writeln!(out, "{} {}", hex(k), hex(v)).map_err(|e| e.to_string())?;
        }
        lower = last;
        first = false;
    }
    out.flush().map_err(|e| e.to_string())
}

/// A thread count given as `--NAME`: at least 1; unset, the replica's
/// default (`ReplicaOptions::apply_threads`).
fn threads(name: &str, n: Option<usize>) -> Result<usize, String> {
    match n {
        None => Ok(milliscale::ReplicaOptions::default().apply_threads),
        Some(0) => Err(format!("--{name} must be at least 1")),
        Some(n) => Ok(n),
    }
}

fn replica(a: ReplicaArgs) -> Result<(), String> {
    let ms = |x: f64, what: &str| {
        Duration::try_from_secs_f64(x / 1000.0).map_err(|_| format!("--{what} must be >= 0"))
    };
    let poll = milliscale::ReplicaOptions {
        poll_min: ms(a.poll_min_ms, "poll-min-ms")?,
        poll_max: ms(a.poll_max_ms, "poll-max-ms")?,
        apply_threads: threads("apply-threads", a.apply_threads)?,
        hedge_reads: !a.no_hedge_reads,
        ..milliscale::ReplicaOptions::default()
    };
    let run_for = a
        .run_for
        .or(a.until_csn.map(|_| 30.0))
        .map(Duration::try_from_secs_f64)
        .transpose()
        .map_err(|_| "--for must be >= 0".to_string())?;
    let every = Duration::try_from_secs_f64(a.every).map_err(|_| "--every must be >= 0")?;
    let started = std::time::Instant::now();
    let r =
        milliscale::Replica::open_with(store_options(&a.store), poll).map_err(|e| e.to_string())?;
    eprintln!(
        "replica of {}: checkpoint loaded in {:.2?}, following the log from CSN {}",
        a.store.join(", "),
        started.elapsed(),
        r.applied_csn()
    );
    let offer_every = a
        .offer_checkpoint_every
        .map(Duration::try_from_secs_f64)
        .transpose()
        .map_err(|_| "--offer-checkpoint-every must be >= 0".to_string())?;
    let mut last_offer = std::time::Instant::now();
    let step = if every.is_zero() { Duration::from_millis(100) } else { every };
    let step = offer_every.map_or(step, |o| step.min(o.max(Duration::from_millis(10))));
    let step = if a.offer_checkpoints { step.min(Duration::from_millis(100)) } else { step };
    let mut last_print = std::time::Instant::now();
    let mut last_records = 0;
    loop {
        let left = run_for.map(|d| d.saturating_sub(started.elapsed()));
        if left.is_some_and(|l| l.is_zero()) {
            break;
        }
        let wait = left.map_or(step, |l| l.min(step));
        if let Some(csn) = a.until_csn {
            match r.wait_for(csn, wait) {
                Ok(()) => break,
                Err(milliscale::Error::Stale { .. }) => {}
                Err(e) => return Err(e.to_string()),
            }
        } else {
            std::thread::sleep(wait);
        }
        if let Some(e) = r.error() {
            return Err(format!("the replica stopped: {e}"));
        }
        let timed = offer_every.is_some_and(|o| last_offer.elapsed() >= o);
        if timed || a.offer_checkpoints {
            let t0 = std::time::Instant::now();
            let offer = if timed { r.offer_checkpoint().map(Some) } else { r.offer_if_wanted() };
            match offer {
                Ok(None) => {}
                Ok(Some(c)) => eprintln!(
                    "offered checkpoint {}: {} rows, {} bytes in {:.1?}",
                    c.csn,
                    c.rows,
                    c.bytes,
                    t0.elapsed()
                ),
                Err(e) => eprintln!("offering a checkpoint failed (will retry): {e}"),
            }
            if timed {
                last_offer = std::time::Instant::now();
            }
        }
        if !every.is_zero() && last_print.elapsed() >= every {
            let m = r.metrics();
            let per_s = (m.records_applied - last_records) as f64
                / last_print.elapsed().as_secs_f64().max(1e-9);
            eprintln!(
                "applied CSN {} (seen {}), epoch {}, {:.0} records/s, lag p50 {:.1?} p99 {:.1?}, \
                 {:.0} requests/h{}",
                m.applied_csn,
                m.seen_csn,
                m.epoch,
                per_s,
                m.lag_p50,
                m.lag_p99,
                m.requests_per_hour(),
                m.usd_per_hour().map(|u| format!(", ${u:.4}/h")).unwrap_or_default()
            );
            last_records = m.records_applied;
            last_print = std::time::Instant::now();
        }
    }
    if let Some(csn) = a.until_csn
        && r.applied_csn() <= csn
    {
        let m = r.metrics();
        return Err(format!(
            "CSN {csn} was not applied within {:.1?}: the replica has applied every CSN below {} \
             and read the log up to CSN {}",
            started.elapsed(),
            m.applied_csn,
            m.seen_csn
        ));
    }
    r.close();
    let m = r.metrics();
    if let Some(table) = &a.dump {
        use std::io::Write;
        let t = r.open_table(table).map_err(|e| e.to_string())?;
        let mut tx = r.begin().map_err(|e| e.to_string())?;
        let rows = tx
            .scan(
                &t,
                std::ops::Bound::Unbounded,
                std::ops::Bound::Unbounded,
                milliscale::Direction::Forward,
                usize::MAX,
            )
            .map_err(|e| e.to_string())?;
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        for (k, v) in &rows {
            writeln!(out, "{} {}", hex(k), hex(v)).map_err(|e| e.to_string())?;
        }
    }
    if a.json {
        let j = serde_json::json!({
            "applied_csn": m.applied_csn,
            "seen_csn": m.seen_csn,
            "epoch": m.epoch,
            "manifest_version": m.manifest_version,
            "elapsed_s": m.elapsed.as_secs_f64(),
            "entries_applied": m.entries_applied,
            "records_applied": m.records_applied,
            "records_per_s": m.records_per_s(),
            "lag_ms": {
                "p50": m.lag_p50.as_secs_f64() * 1e3,
                "p99": m.lag_p99.as_secs_f64() * 1e3,
                "max": m.lag_max.as_secs_f64() * 1e3,
            },
            "polls": m.polls,
            "poll_errors": m.poll_errors,
            "get_requests": m.get_requests,
            "put_requests": m.put_requests,
            "bytes_read": m.bytes_read,
            "requests_per_hour": m.requests_per_hour(),
            "cost_usd": m.cost_usd,
            "usd_per_hour": m.usd_per_hour(),
            "catch_ups": m.catch_ups,
            "epochs_followed": m.epochs_followed,
            "last_error": m.last_error,
        });
        println!("{}", serde_json::to_string_pretty(&j).map_err(|e| e.to_string())?);
    } else {
        eprintln!(
            "stopped at CSN {}: {} transactions ({} records) applied in {:.1?}, lag p50 {:.1?} \
             p99 {:.1?} max {:.1?}, {} GET-class and {} PUT-class requests",
            m.applied_csn,
            m.entries_applied,
            m.records_applied,
            m.elapsed,
            m.lag_p50,
            m.lag_p99,
            m.lag_max,
            m.get_requests,
            m.put_requests
        );
    }
    Ok(())
}

fn checkpoint_from_log(a: CheckpointArgs) -> Result<(), String> {
    debug_assert!(a.from_log);
    let timeout = Duration::try_from_secs_f64(a.timeout).map_err(|_| "--timeout must be >= 0")?;
    let started = std::time::Instant::now();
    let r = milliscale::Replica::open(store_options(&a.store)).map_err(|e| e.to_string())?;
    // Caught up: after a second of following (every chain polled several
    // times, even idle ones backing off), wait until everything read by
    // then is applied. The log may still be growing: this is a point in it.
    std::thread::sleep(Duration::from_secs(1).min(timeout));
    let target = r.metrics().seen_csn;
    r.wait_for(target.saturating_sub(1), timeout.saturating_sub(started.elapsed()))
        .map_err(|e| format!("not caught up with CSN {target} within {timeout:?}: {e}"))?;
    let caught_up = started.elapsed();
    let c = r.offer_checkpoint().map_err(|e| e.to_string())?;
    r.close();
    if a.json {
        let j = serde_json::json!({
            "csn": c.csn, "rows": c.rows, "bytes": c.bytes, "chunks": c.chunks.len(),
            "caught_up_s": caught_up.as_secs_f64(), "total_s": started.elapsed().as_secs_f64(),
        });
        println!("{}", serde_json::to_string_pretty(&j).map_err(|e| e.to_string())?);
    } else {
        println!(
            "offered checkpoint {}: {} rows, {} bytes in {} chunks (caught up in {:.1?}, {:.1?} in \
             all); a writer with checkpoint offloading adopts it",
            c.csn,
            c.rows,
            c.bytes,
            c.chunks.len(),
            caught_up,
            started.elapsed()
        );
    }
    Ok(())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The engine reports through `tracing` (a store that cannot append, a
    // store dropped from replication, a poisoned database): warnings and
    // errors go to stderr.
    // The S3 layer (s3s) logs every refused request at error level; a
    // client's 404 or 412 is not the server's error, so it stays quiet (the
    // emulator's request log records every answer).
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter =
        Targets::new().with_target("s3s", LevelFilter::OFF).with_default(LevelFilter::WARN);
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .finish()
        .with(filter)
        .init();
    let result = match cli.command {
        Command::Recover(a) => recover(a),
        Command::Dump(a) => dump(a),
        Command::Replica(a) => replica(a),
        Command::Checkpoint(a) => checkpoint_from_log(a),
        Command::Bench(Bench::Ycsb(a)) => bench_ycsb(a),
        Command::Bench(Bench::Tpcc(a)) => bench_tpcc(a),
        Command::Bench(Bench::Sweep(a)) => bench_sweep(a),
        Command::Bench(Bench::Bank(a)) => bench_bank(a),
        Command::Bench(Bench::Failover(a)) => bench_failover(a),
        Command::Bench(Bench::Index(a)) => bench_index(a),
        Command::Bench(Bench::Store(a)) => bench_store(a),
        Command::Bench(Bench::Emulator(a)) => bench_emulator(a),
        Command::Emulator(a) => emulator(a),
        Command::Inspect(a) => inspect(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("milliscale: error: {e}");
            ExitCode::from(2)
        }
    }
}
