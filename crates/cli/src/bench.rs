//! `milliscale bench ...`: YCSB, TPC-C, sweeps, the bank auditor, failover,
//! the index, a store's own latency and the emulator.

use crate::args::Failure;
use crate::args::{
    DistArg, EngineArg, IsolationArg, LogArgs, WorkloadArg, log_settings, parse_size, seconds,
    threads,
};
use clap::{Args, Subcommand};
use milliscale::Isolation;
use milliscale_bench::index_bench::{self, IndexBenchConfig};
use milliscale_bench::keys::KeyDist;
use milliscale_bench::report::Report;
use milliscale_bench::ycsb::{self, Engine, Workload, YcsbConfig};
use std::io::IsTerminal;

mod tpcc;
pub(crate) use tpcc::{TpccArgs, bench_tpcc};

#[derive(Subcommand)]
pub(crate) enum Bench {
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
    /// Iterate over every row of a large table and report how much the
    /// resident memory grew (an iterator holds one batch at a time).
    Scan(ScanArgs),
    /// Append latency of a store, compared with its sim preset's model.
    Store(StoreArgs),
    /// The emulator's speed over loopback: append throughput and overhead.
    Emulator(EmulatorBenchArgs),
    /// Retwis (or YCSB-T) across a cluster's shards (`serve --cluster`).
    Retwis(crate::cluster::RetwisArgs),
}

#[derive(Args)]
pub(crate) struct EmulatorBenchArgs {
    /// Concurrent clients for the throughput phase.
    #[arg(long, default_value_t = 8)]
    pub(crate) clients: usize,
    /// Append size for the throughput phase (bytes, K or M suffix).
    #[arg(long, default_value = "64K")]
    pub(crate) size: String,
    /// Appends in the throughput phase.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) count: u64,
    /// Appends of 1 MiB in the overhead phase (direct, then through HTTP).
    #[arg(long, default_value_t = 500)]
    pub(crate) big_count: u64,
    /// Print the report as JSON only.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn bench_emulator(a: EmulatorBenchArgs) -> Result<(), Failure> {
    let cfg = milliscale_bench::emulator_bench::EmulatorBenchConfig {
        clients: a.clients,
        size: parse_size("size", &a.size)?,
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

#[derive(Args)]
pub(crate) struct BankArgs {
    /// Accounts; each starts with --initial-balance.
    #[arg(long, default_value_t = 1_000)]
    pub(crate) accounts: u64,
    /// Each account's balance at the start (the total the auditor checks
    /// is accounts times this).
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) initial_balance: u64,
    /// Worker threads, each waiting for its transfer's acknowledgment.
    #[arg(long, default_value_t = 8)]
    pub(crate) threads: usize,
    /// Seconds to run.
    #[arg(long = "duration-s", alias = "duration", default_value_t = 10.0)]
    pub(crate) duration: f64,
    /// Append each acknowledged transfer id to this file (flushed and
    /// synced before the next transfer is issued).
    #[arg(long)]
    pub(crate) acked_log: Option<std::path::PathBuf>,
    /// Seed of the transfers' random choices (and of sim:// stores).
    #[arg(long, default_value_t = 42)]
    pub(crate) seed: u64,
    /// Run as a hot standby: follow the bank's writer as a read replica
    /// until this file exists (create it when the writer dies), then
    /// promote the replica to writer (the old writer is fenced) and run
    /// the transfers. Reports the failover time, from the file's
    /// modification time to the first acknowledged transfer.
    #[arg(long, value_name = "FILE")]
    pub(crate) promote_when: Option<std::path::PathBuf>,
    /// Print the report as JSON only.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) log: LogArgs,
}

#[derive(Args)]
pub(crate) struct FailoverArgs {
    /// Live log to build before the writer dies, in MB.
    #[arg(long, default_value_t = 1024.0)]
    pub(crate) log_mb: f64,
    /// Rows in the table.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) records: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 1000)]
    pub(crate) value_bytes: usize,
    /// Rows updated per transaction (whole values).
    #[arg(long, default_value_t = 10)]
    pub(crate) ops: usize,
    /// Writer threads.
    #[arg(long, default_value_t = 2)]
    pub(crate) threads: usize,
    /// Seed of the writers' random choices and of sim:// stores.
    #[arg(long, default_value_t = 42)]
    pub(crate) seed: u64,
    /// Print the report as JSON only.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) log: LogArgs,
}

#[derive(Args)]
pub(crate) struct YcsbArgs {
    /// Records in the table.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) records: u64,
    /// a: 50/50 read/update txns, b: 95/5, c: read-only, u: update-only.
    #[arg(long, value_enum, default_value = "a")]
    pub(crate) workload: WorkloadArg,
    /// How keys are chosen: uniform, or zipfian with --theta.
    #[arg(long, value_enum, default_value = "uniform")]
    pub(crate) dist: DistArg,
    /// Zipfian skew.
    #[arg(long, default_value_t = 0.99)]
    pub(crate) theta: f64,
    /// Operations per transaction.
    #[arg(long, default_value_t = 10)]
    pub(crate) ops_per_txn: usize,
    /// milliscale; raw-index: the same lookups on the bare index (workload
    /// c); slatedb: the same transactions through SlateDB on the same store.
    #[arg(long, value_enum, default_value = "milliscale")]
    pub(crate) engine: EngineArg,
    /// SlateDB only: closed loop, concurrent clients, each one transaction
    /// at a time [default: 64]; open loop (--rate), the most transactions
    /// in flight [default: 10000].
    #[arg(long)]
    pub(crate) clients: Option<usize>,
    /// SlateDB only: its WAL flush interval in milliseconds.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) slatedb_flush_ms: f64,
    /// Run a read replica beside the writer, on the same stores: report its
    /// lag (writer gCSN to replica visibility), whether it keeps up, and
    /// its requests; then read from it (see --replica-readers).
    #[arg(long)]
    pub(crate) replica: bool,
    /// With --replica: reader threads that run read-only transactions of
    /// --ops-per-txn keys on the replica after the measured phase.
    #[arg(long, default_value_t = 2)]
    pub(crate) replica_readers: usize,
    /// With --replica: seconds the readers run.
    #[arg(long, default_value_t = 3.0)]
    pub(crate) replica_read_secs: f64,
    /// With --replica: the replica's apply threads (default: the cores,
    /// at most 4).
    #[arg(long)]
    pub(crate) replica_apply_threads: Option<usize>,
    /// With --replica: run the writer's threads on core 0 and the
    /// replica's on core 1, as two one-core machines sharing the store.
    #[arg(long)]
    pub(crate) replica_pin: bool,
    /// With --replica: never send a slow read a second time.
    #[arg(long)]
    pub(crate) replica_no_hedge: bool,
    /// With --replica: the lag probe watches the applied CSN without
    /// asking the replica to poll at once (as a feed's consumer watches).
    #[arg(long)]
    pub(crate) replica_passive_probe: bool,
    /// Run this many change feeds beside the writer, each consumed on a
    /// thread: report their catch-up rate and lag (writer gCSN to every
    /// consumer's resolved point).
    #[arg(long, default_value_t = 0)]
    pub(crate) feeds: usize,
    /// Run the writer's threads on core 0 and the feeds' on core 1, as a
    /// writer and consumers on machines of their own sharing the store
    /// (with --feeds 0: the writer alone on core 0).
    #[arg(long)]
    pub(crate) feeds_pin: bool,
    /// Run the workers as this many tokio tasks through the async API, on
    /// a runtime of --threads threads (a service's tasks), instead of one
    /// thread per worker. Closed loop only.
    #[arg(long)]
    pub(crate) tasks: Option<usize>,
    /// With --tasks: the commit acks a task holds before it awaits the
    /// oldest; 1 awaits every commit before the next transaction (a
    /// request handler that answers once its commit is durable).
    #[arg(long, default_value_t = 1)]
    pub(crate) ack_window: usize,
    #[command(flatten)]
    pub(crate) through: crate::serve::BenchServerArgs,
    #[command(flatten)]
    pub(crate) run: RunArgs,
}

#[derive(Args)]
pub(crate) struct SweepArgs {
    /// The sweep's TOML config (grid, fixed flags, plots).
    #[arg(long)]
    pub(crate) config: std::path::PathBuf,
    /// Where the CSV and PNGs go [default: sweeps/<name>].
    #[arg(long)]
    pub(crate) out: Option<std::path::PathBuf>,
    /// Do not run: re-draw the plots from the CSV an earlier run of this
    /// config wrote (after editing its [[plot]] sections).
    #[arg(long)]
    pub(crate) replot: bool,
    /// Override the config, KEY=VALUE, repeatable: `repetitions=N`, a grid
    /// flag's values (`threads=1,2,4,8,16`), or a fixed flag
    /// (`records=30000000`). For the paper's scale on a bigger machine.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) sets: Vec<String>,
}

/// The flags every timed transaction benchmark (ycsb, tpcc) takes.
#[derive(Args)]
pub(crate) struct RunArgs {
    /// Worker threads (TPC-C: terminals) [default: the number of cores].
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// Measured seconds.
    #[arg(long = "duration-s", alias = "duration", default_value_t = 10.0)]
    pub(crate) duration: f64,
    /// Seconds of warmup before measuring.
    #[arg(long = "warmup-s", alias = "warmup", default_value_t = 2.0)]
    pub(crate) warmup: f64,
    /// Open loop: transactions arrive as a Poisson process at this many per
    /// second (all workers, or with --server all sessions, together);
    /// latency then runs from arrival to the durable acknowledgment, so
    /// queueing counts.
    #[arg(long)]
    pub(crate) rate: Option<f64>,
    #[command(flatten)]
    pub(crate) log: LogArgs,
    /// The transactions' isolation level.
    #[arg(long, value_enum, default_value = "snapshot")]
    pub(crate) isolation: IsolationArg,
    /// Seed of the workload's random choices and of sim:// stores (their
    /// latency and fault draws).
    #[arg(long, default_value_t = 42)]
    pub(crate) seed: u64,
    /// Print the report as JSON only.
    #[arg(long)]
    pub(crate) json: bool,
    /// Print a CSV header and the report as one row.
    #[arg(long, conflicts_with = "json")]
    pub(crate) csv: bool,
}

impl RunArgs {
    pub(crate) fn threads(&self) -> usize {
        self.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    pub(crate) fn pacing(&self) -> milliscale_bench::harness::Pacing {
        match self.rate {
            None => milliscale_bench::harness::Pacing::Closed,
            Some(rate) => milliscale_bench::harness::Pacing::Open { rate },
        }
    }

    pub(crate) fn isolation(&self) -> Isolation {
        match self.isolation {
            IsolationArg::ReadCommitted => Isolation::ReadCommitted,
            IsolationArg::Snapshot => Isolation::Snapshot,
            IsolationArg::Serializable => Isolation::Serializable,
        }
    }

    /// A progress bar only for a human reading a terminal.
    pub(crate) fn progress(&self) -> bool {
        !self.json && !self.csv && std::io::stderr().is_terminal()
    }

    pub(crate) fn print(&self, report: &Report) {
        print_report(report, self.json, self.csv);
    }
}

#[derive(Args)]
pub(crate) struct ScanArgs {
    /// Rows in the table.
    #[arg(long, default_value_t = 10_000_000)]
    pub(crate) keys: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 16)]
    pub(crate) value_bytes: usize,
    /// Iterate in descending key order.
    #[arg(long)]
    pub(crate) backward: bool,
    /// Print the report as JSON only.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn bench_scan(a: ScanArgs) -> Result<(), Failure> {
    use milliscale_bench::scan_bench::{ScanConfig, run};
    let cfg = ScanConfig { keys: a.keys, value_bytes: a.value_bytes, backward: a.backward };
    let json = a.json;
    let r = run(&cfg, |m| {
        if !json {
            eprintln!("{m}");
        }
    })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?);
    } else {
        println!(
            "{} rows ({} B values, {}): loaded in {:.1} s; iterated in {:.2} s ({:.0} rows/s); \
             RSS {:.0} MiB before, at most {:.0} MiB during, {:.0} MiB after: grew {:.1} MiB",
            r.rows,
            r.value_bytes,
            r.direction,
            r.load_s,
            r.scan_s,
            r.rows_per_s,
            r.rss_mib_before,
            r.rss_mib_max_during,
            r.rss_mib_after,
            r.rss_mib_growth
        );
    }
    Ok(())
}

#[derive(Args)]
pub(crate) struct IndexArgs {
    /// Key counts, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1000000")]
    pub(crate) keys: Vec<u64>,
    /// Threads that look keys up at once.
    #[arg(long, default_value_t = 2)]
    pub(crate) threads: usize,
    /// Seconds per lookup and scan phase.
    #[arg(long, default_value_t = 3.0)]
    pub(crate) phase_secs: f64,
    /// Print the report as JSON only.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
pub(crate) struct StoreArgs {
    /// Store URL, e.g. sim://s3x or sim://s3x?inner=file:///tmp/x.
    #[arg(long, default_value = "sim://s3x")]
    pub(crate) store: String,
    /// Part size: bytes, or with a K/M suffix (KiB/MiB).
    #[arg(long, default_value = "512K")]
    pub(crate) size: String,
    /// Appends in total.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) count: u64,
    /// Concurrent appenders, each to its own segments.
    #[arg(long, default_value_t = 8)]
    pub(crate) threads: usize,
    /// Parts per segment before a new one is started.
    #[arg(long, default_value_t = 20)]
    pub(crate) rollover: u64,
    /// Print the report as JSON only.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn bench_store(a: StoreArgs) -> Result<(), Failure> {
    let cfg = milliscale_bench::store_bench::StoreBenchConfig {
        url: a.store,
        size: parse_size("size", &a.size)?,
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

pub(crate) fn bench_bank(a: BankArgs) -> Result<(), Failure> {
    let (_, log) = log_settings(&a.log)?;
    if log.pages.is_some() {
        return Err("the page variants (naive-pages, atomic-pages) run `bench ycsb` only".into());
    }
    let cfg = milliscale_faults::bank::BankConfig {
        accounts: a.accounts,
        initial_balance: a.initial_balance,
        threads: a.threads,
        duration: seconds("duration-s", a.duration)?,
        log,
        isolation: Isolation::Snapshot,
        acked_log: a.acked_log,
        seed: a.seed,
        standby: a.promote_when,
    };
    let report = milliscale_faults::bank::run(&cfg)?;
    print_report(&report, a.json, false);
    Ok(())
}

pub(crate) fn bench_failover(a: FailoverArgs) -> Result<(), Failure> {
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

pub(crate) fn bench_ycsb(a: YcsbArgs) -> Result<(), Failure> {
    let r = &a.run;
    let (variant, log) = log_settings(&r.log)?;
    let cfg = YcsbConfig {
        records: a.records,
        threads: r.threads(),
        duration: seconds("duration-s", r.duration)?,
        warmup: seconds("warmup-s", r.warmup)?,
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
                passive_probe: a.replica_passive_probe,
            })
        } else {
            None
        },
        feeds: a.feeds,
        feeds_pin: a.feeds_pin,
        tasks: match a.tasks {
            None => None,
            Some(tasks) if (1..=1_000_000).contains(&tasks) && a.ack_window >= 1 => {
                Some(milliscale_bench::ycsb::Tasks { tasks, window: a.ack_window })
            }
            Some(tasks) => {
                return Err(Failure::Usage(format!(
                    "--tasks must be in 1..=1000000 and --ack-window at least 1, got {tasks} \
                     and {}",
                    a.ack_window
                )));
            }
        },
    };
    if cfg.tasks.is_some()
        && (cfg.pacing != milliscale_bench::harness::Pacing::Closed
            || !matches!(a.engine, EngineArg::Milliscale)
            || cfg.log.pages.is_some()
            || cfg.replica.is_some())
    {
        return Err("--tasks runs the milliscale engine in closed loop, without --rate, \
                    --replica or a page variant"
            .into());
    }
    if cfg.log.pages.is_some() && !matches!(a.engine, EngineArg::Milliscale) {
        return Err("the page variants run on the milliscale engine (--engine milliscale)".into());
    }
    if let Some(report) = crate::serve::bench_through_server(&a.through, &cfg, &a.engine)? {
        r.print(&report);
        return Ok(());
    }
    let report = if matches!(a.engine, EngineArg::Slatedb) {
        slatedb_ycsb(&cfg, &a, r.rate.is_some())?
    } else {
        ycsb::run(&cfg)?
    };
    r.print(&report);
    Ok(())
}

/// The same YCSB transactions through SlateDB (the `peer` feature).
#[cfg(feature = "peer")]
fn slatedb_ycsb(cfg: &YcsbConfig, a: &YcsbArgs, open_loop: bool) -> Result<Report, Failure> {
    let opts = peer::slatedb_ycsb::SlateOptions {
        clients: a.clients.unwrap_or(if open_loop { 10_000 } else { 64 }),
        flush_interval: seconds("slatedb-flush-ms", a.slatedb_flush_ms / 1e3)?,
    };
    Ok(peer::slatedb_ycsb::run(cfg, &opts)?)
}

/// Without the `peer` feature the binary has no SlateDB: say how to get it.
#[cfg(not(feature = "peer"))]
fn slatedb_ycsb(_: &YcsbConfig, _: &YcsbArgs, _: bool) -> Result<Report, Failure> {
    Err("--engine slatedb needs a binary built with the SlateDB peer: \
         cargo build --release -p milliscale-cli --features peer"
        .into())
}

pub(crate) fn bench_sweep(a: SweepArgs) -> Result<(), Failure> {
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

pub(crate) fn print_report(r: &Report, json: bool, csv: bool) {
    if json {
        println!("{}", r.to_json());
    } else if csv {
        println!("{}", Report::CSV_HEADER);
        println!("{}", r.csv_row());
    } else {
        print!("{}", r.to_human());
    }
}

pub(crate) fn bench_index(a: IndexArgs) -> Result<(), Failure> {
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
