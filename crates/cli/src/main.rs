//! The `milliscale` command, one module per family of subcommands:
//! `bench` (benchmarks), `inspect` (inspect, dump, recover), `replica`
//! (read replicas, standbys, checkpoints from the log), `emulator` (the
//! S3-compatible server), `serve` (the gRPC server and the verbs that
//! use one: get, put, delete, scan, create-table), `cluster` (a cluster
//! of shards: its map, its status, the bank workload; Retwis); `args` holds
//! the arguments they share.

#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, rust_2018_idioms)]

mod args;
mod bench;
mod changes;
mod cluster;
mod cluster_move;
mod cluster_time;
mod emulator;
mod history;
mod huge_pages;
mod inspect;
mod replica;
mod serve;

use crate::args::Failure;
use crate::bench::{
    Bench, bench_bank, bench_emulator, bench_failover, bench_index, bench_scan, bench_store,
    bench_sweep, bench_tpcc, bench_ycsb,
};
use crate::changes::{ChangesArgs, changes};
use crate::cluster::{ClusterCmd, bench_retwis, cluster};
use crate::emulator::{EmulatorArgs, emulator};
use crate::history::{BackupArgs, CloneArgs, RestoreArgs, backup, clone, restore};
use crate::huge_pages::HugePages;
use crate::inspect::{DumpArgs, InspectArgs, RecoverArgs, dump, inspect, recover};
use crate::replica::{CheckpointArgs, ReplicaArgs, checkpoint_from_log, replica};
use crate::serve::{ServeArgs, Verb, VerbArgs, serve, verb};
use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// The binary uses mimalloc: versions are freed by epoch reclamation on
/// whichever thread advances the epoch, a cross-thread free pattern that
/// costs glibc malloc ~10% of an update-heavy run (BENCHMARKS.md). The
/// library itself does not choose an allocator.
///
/// It asks the kernel for transparent huge pages; whether the process
/// takes them depends on the command (`--huge-pages`, huge_pages.rs).
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
    /// Say more on stderr: -v the engine's steps (open, recovery,
    /// checkpoints, replicas), -vv its debug events. `RUST_LOG`, when set,
    /// decides instead (e.g. `RUST_LOG=milliscale=debug,s3s=off`).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Serve the engine's metrics for Prometheus at `http://ADDR/metrics`
    /// while the command runs (e.g. `127.0.0.1:9898`): commit latency,
    /// appends, hedges, requests and dollars per store, replica lag. The
    /// names are listed in ARCHITECTURE.md, "Observability".
    #[arg(long, global = true, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// Read the database's options from this TOML file (fields as in
    /// `configs/milliscale.toml`); `MILLISCALE_OPT_*` environment variables
    /// override it. Used by recover, dump, replica and checkpoint; their
    /// `--store` flags replace the file's `stores`. The benchmarks take
    /// their options from their own flags.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Transparent huge pages for this process: they make reading a
    /// loaded database faster (YCSB in memory 1.16-1.18x) and loading one
    /// slower (a recovery 1.3x). Default: on, but off for recover, dump,
    /// restore and inspect, whose time is mostly loading, and for serve
    /// off while its database opens (a restart is downtime), then on.
    #[arg(long, global = true, value_enum, env = "MILLISCALE_HUGE_PAGES")]
    huge_pages: Option<HugePages>,
}

impl Command {
    /// Huge pages unless `--huge-pages` says otherwise (huge_pages.rs).
    fn huge_pages(&self) -> HugePages {
        match self {
            Command::Serve(_) => HugePages::OnceOpen,
            Command::Recover(_) | Command::Dump(_) | Command::Restore(_) | Command::Inspect(_) => {
                HugePages::Off
            }
            _ => HugePages::On,
        }
    }
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
    /// database's durable state (or, with --at, its state at a point of its
    /// retention window). Reads only: the writer is not fenced.
    Dump(DumpArgs),
    /// Write the database as it was at a point of its retention window to
    /// empty stores, as a new database a writer opens. The source is only
    /// read.
    Restore(RestoreArgs),
    /// Copy what a database's retention window needs to other stores, as a
    /// database of the same layout that `restore`, `dump --at` and `serve
    /// --at` read with the source gone: incrementally, once or with
    /// --follow; `backup verify` checks one. The source is only read.
    Backup(BackupArgs),
    /// Make a new database on empty stores that starts as the source was at
    /// a point of its window, without copying: its first writer loads the
    /// source's objects (kept for it by a registration) and writes its own
    /// checkpoint; from then on the two share nothing.
    Clone(CloneArgs),
    /// Follow a database's log as a read replica: load the checkpoint,
    /// apply what the writer commits, and print the replica's progress, lag
    /// and cost. Reads only: the writer is not asked or fenced.
    Replica(ReplicaArgs),
    /// Print a database's committed changes as JSON lines, transaction by
    /// transaction in CSN order, each write as the row's whole new value,
    /// from after a cursor (`--after CSN`). Reads the log as a replica
    /// does: the writer is not asked.
    Changes(ChangesArgs),
    /// Build a checkpoint off the writer: follow the log as a replica until
    /// caught up, write a checkpoint of that state and offer it. A writer
    /// opened with checkpoint offloading adopts it after checking it, and
    /// truncates its log. Reads the log; writes only checkpoint objects.
    Checkpoint(CheckpointArgs),
    /// Serve the database over gRPC (the writer, or with `--replica` a
    /// read replica) until SIGTERM or SIGINT; then finish or abort the
    /// open transactions, flush the log and report.
    Serve(ServeArgs),
    /// Read a key from a server: prints its value.
    Get(VerbArgs),
    /// Write a key on a server (durable on return): prints the token.
    Put(VerbArgs),
    /// Delete a key on a server.
    Delete(VerbArgs),
    /// Print a table's rows from a server, as `key<TAB>value` lines.
    Scan(VerbArgs),
    /// Create a table on a server.
    CreateTable(VerbArgs),
    /// A cluster of `serve --cluster` shards: publish its first shard
    /// map, show it, ask the shards how they are, run bank transfers.
    #[command(subcommand)]
    Cluster(ClusterCmd),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before any database opens: pages already touched keep what they got.
    let pages = cli.huge_pages.unwrap_or_else(|| cli.command.huge_pages());
    if let Err(e) = huge_pages::apply(pages) {
        eprintln!("milliscale: error: {e}");
        return ExitCode::from(1);
    }
    // The engine reports through `tracing` (a store that cannot append, a
    // store dropped from replication, a poisoned database): warnings and
    // errors go to stderr.
    // The S3 layer (s3s) logs every refused request at error level; a
    // client's 404 or 412 is not the server's error, so it stays quiet (the
    // emulator's request log records every answer).
    use tracing_subscriber::filter::{EnvFilter, LevelFilter};
    let level = match cli.verbose {
        0 => LevelFilter::WARN,
        1 => LevelFilter::INFO,
        _ => LevelFilter::DEBUG,
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.is_empty() => EnvFilter::builder().parse_lossy(v),
        // The rebalancer's decisions, with their reasons, are always told.
        _ => EnvFilter::default()
            .add_directive(level.into())
            .add_directive("s3s=off".parse().expect("a valid directive"))
            .add_directive("milliscale::rebalance=info".parse().expect("a valid directive")),
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colours only on a terminal: a log file gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .with_env_filter(filter)
        .init();
    let config = match &cli.config {
        Some(path) => milliscale::Config::from_file(path),
        None => Ok(milliscale::Config::default()),
    }
    .and_then(|file| Ok(file.merged(milliscale::Config::from_env()?)));
    match config {
        Ok(c) => {
            let _ = args::CONFIG.set(c);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    let metrics_elsewhere = cli.metrics_addr.is_some();
    if let Some(addr) = cli.metrics_addr {
        // Before any database opens: the engine takes its histograms'
        // handles from the recorder installed at the time.
        let installed = metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install();
        if let Err(e) = installed {
            eprintln!("error: --metrics-addr {addr}: {e}");
            return ExitCode::from(1);
        }
    }
    let result = match cli.command {
        Command::Recover(a) => recover(a),
        Command::Dump(a) => dump(a),
        Command::Restore(a) => restore(a),
        Command::Backup(a) => backup(a),
        Command::Clone(a) => clone(a),
        Command::Replica(a) => replica(a),
        Command::Changes(a) => changes(a),
        Command::Checkpoint(a) => checkpoint_from_log(a),
        Command::Bench(Bench::Ycsb(a)) => bench_ycsb(a),
        Command::Bench(Bench::Tpcc(a)) => bench_tpcc(a),
        Command::Bench(Bench::Sweep(a)) => bench_sweep(a),
        Command::Bench(Bench::Bank(a)) => bench_bank(a),
        Command::Bench(Bench::Failover(a)) => bench_failover(a),
        Command::Bench(Bench::Index(a)) => bench_index(a),
        Command::Bench(Bench::Scan(a)) => bench_scan(a),
        Command::Bench(Bench::Store(a)) => bench_store(a),
        Command::Bench(Bench::Emulator(a)) => bench_emulator(a),
        Command::Emulator(a) => emulator(a),
        Command::Inspect(a) => inspect(a),
        Command::Serve(a) => serve(a, metrics_elsewhere, pages),
        Command::Get(a) => verb(Verb::Get, a),
        Command::Put(a) => verb(Verb::Put, a),
        Command::Delete(a) => verb(Verb::Delete, a),
        Command::Scan(a) => verb(Verb::Scan, a),
        Command::CreateTable(a) => verb(Verb::CreateTable, a),
        Command::Cluster(c) => cluster(c),
        Command::Bench(Bench::Retwis(a)) => bench_retwis(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Misuse exits 2, as clap's own usage errors do.
        Err(Failure::Usage(e)) => {
            eprintln!("milliscale: error: {e}");
            ExitCode::from(2)
        }
        Err(Failure::Run(e)) => {
            eprintln!("milliscale: error: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use crate::huge_pages::{self, HugePages};
    use clap::{CommandFactory, Parser};

    /// Huge pages by command: off where the time is mostly loading (or a
    /// restart is downtime), on elsewhere; `--huge-pages` decides instead.
    #[test]
    fn huge_pages_follow_the_command_unless_the_flag_says() {
        let choice = |args: &[&str]| {
            let cli = Cli::try_parse_from(args).expect("the arguments parse");
            cli.huge_pages.unwrap_or_else(|| cli.command.huge_pages())
        };
        assert_eq!(choice(&["milliscale", "bench", "ycsb"]), HugePages::On);
        assert_eq!(choice(&["milliscale", "serve", "--store", "memory://"]), HugePages::OnceOpen);
        assert_eq!(choice(&["milliscale", "recover", "--store", "memory://"]), HugePages::Off);
        assert_eq!(choice(&["milliscale", "--huge-pages", "off", "bench", "ycsb"]), HugePages::Off);
        assert_eq!(
            choice(&["milliscale", "serve", "--store", "memory://", "--huge-pages", "on"]),
            HugePages::On
        );
        for bad in ["maybe", "once-open"] {
            assert!(
                Cli::try_parse_from(["milliscale", "--huge-pages", bad, "bench", "ycsb"]).is_err()
            );
        }
    }

    /// `--huge-pages off` reaches the kernel: the process reads its flag back.
    #[cfg(target_os = "linux")]
    #[test]
    fn huge_pages_off_sets_the_process_flag() {
        huge_pages::apply(HugePages::On).expect("nothing to do");
        huge_pages::apply(HugePages::Off).expect("prctl");
        assert!(huge_pages::disabled(), "PR_GET_THP_DISABLE reads 0 after PR_SET_THP_DISABLE");
        // `serve`'s default: off while opening, on once it serves; the
        // others' choices do not change once applied.
        huge_pages::allow(HugePages::Off);
        assert!(huge_pages::disabled(), "allow() changed an explicit off");
        huge_pages::apply(HugePages::OnceOpen).expect("prctl");
        assert!(huge_pages::disabled(), "off while the database opens");
        huge_pages::allow(HugePages::OnceOpen);
        assert!(!huge_pages::disabled(), "on once the database is open");
    }

    /// Every subcommand and every flag says what it is for, and no help
    /// text points outside the repository.
    #[test]
    fn every_flag_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") || arg.is_hide_set() {
                    continue;
                }
                let help = arg.get_help().or(arg.get_long_help()).map(ToString::to_string);
                match help {
                    None => missing.push(format!("{path} --{id}: no help")),
                    Some(h) if h.contains("seed 0") => {
                        missing.push(format!("{path} --{id}: cites a paper by its seed number"));
                    }
                    Some(_) => {}
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "milliscale", &mut missing);
        assert!(missing.is_empty(), "flags without help:\n{}", missing.join("\n"));
    }

    /// A flag that takes a time, a size in units or a rate says its unit
    /// in its name (`--flush-timeout-ms`, `--duration-s`), whatever its
    /// help says; the old unitless names stay as hidden aliases.
    #[test]
    fn every_flag_in_a_unit_names_it() {
        fn walk(cmd: &clap::Command, path: &str, bad: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let (Some(long), Some(help)) = (arg.get_long(), arg.get_help()) else { continue };
                let help = help.to_string().to_lowercase();
                // The phrases that state a flag's own unit (a help text
                // may mention another flag's seconds in passing).
                let states = |u: &str| {
                    help.starts_with(u)
                        || [format!("in {u}"), format!("many {u}"), format!("measured {u}")]
                            .iter()
                            .chain([format!(": {u} "), format!("least {u} ")].iter())
                            .any(|p| help.contains(p.as_str()))
                };
                let unit = [
                    ("microseconds", &["-us"][..]),
                    ("milliseconds", &["-ms"][..]),
                    ("ms", &["-ms"][..]),
                    ("seconds", &["-s", "-secs"][..]),
                ]
                .into_iter()
                .find(|(u, _)| states(u));
                let named = |u: &str, suffixes: &[&str]| {
                    suffixes.iter().any(|s| long.ends_with(s))
                        || arg
                            .get_value_names()
                            .is_some_and(|v| v.iter().any(|n| n.as_str().eq_ignore_ascii_case(u)))
                };
                if let Some((u, suffixes)) = unit
                    && !named(u, suffixes)
                {
                    bad.push(format!("{path} --{long}: in {u}, but not named so"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), bad);
            }
        }
        let mut bad = Vec::new();
        walk(&Cli::command(), "milliscale", &mut bad);
        assert!(bad.is_empty(), "flags whose unit is not in their name:\n{}", bad.join("\n"));
    }
}
