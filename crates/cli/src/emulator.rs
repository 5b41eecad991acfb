//! `milliscale emulator`: the S3-compatible server with S3 Express appends.

use crate::args::Failure;
use clap::Args;

#[derive(Args)]
pub(crate) struct EmulatorArgs {
    /// Address to bind. Keep it on loopback unless you mean it: there is no TLS.
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) host: std::net::IpAddr,
    /// Port; 0 picks a free one (printed on the first line).
    #[arg(long, default_value_t = 9100)]
    pub(crate) port: u16,
    /// Keep buckets in this directory (durable, fsynced); default: memory.
    #[arg(long)]
    pub(crate) dir: Option<std::path::PathBuf>,
    /// Create this bucket before serving (repeatable), so that clients
    /// that expect an existing bucket (the engine's `s3://` log) can start.
    #[arg(long = "bucket", value_name = "NAME")]
    pub(crate) buckets: Vec<String>,
    /// Latency preset: none, s3x, s3-standard, gp3, io2, nvme.
    #[arg(long, default_value = "none")]
    pub(crate) preset: String,
    /// Seed of the latency and fault streams.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Probability that a request gets 503 SlowDown (not applied).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) throttle: f64,
    /// Probability that a request gets 500 InternalError (not applied).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) error: f64,
    /// Probability that an append is applied but answered 500 (ambiguous).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) ambiguous: f64,
    /// Inject the preset's stalls.
    #[arg(long)]
    pub(crate) stalls: bool,
    /// Parts per object before 400 TooManyParts (S3 Express: 10000).
    #[arg(long, default_value_t = 10_000)]
    pub(crate) parts_max: u32,
    /// Access key id clients sign with [default: $AWS_ACCESS_KEY_ID or milliscale].
    #[arg(long)]
    pub(crate) access_key: Option<String>,
    /// Secret key [default: $AWS_SECRET_ACCESS_KEY or milliscale-secret].
    #[arg(long)]
    pub(crate) secret_key: Option<String>,
    /// Another accepted user, as ACCESS_KEY:SECRET_KEY (repeatable); every
    /// user sees the same buckets.
    #[arg(long = "user", value_name = "ACCESS_KEY:SECRET_KEY", value_parser = parse_user)]
    pub(crate) users: Vec<(String, String)>,
    /// Log each request as one JSON line (time, id, method, path, status,
    /// bytes, ms) to this file, or to standard error with `-`.
    #[arg(long, value_name = "PATH")]
    pub(crate) request_log: Option<std::path::PathBuf>,
    /// HTTP worker threads.
    #[arg(long, default_value_t = 2)]
    pub(crate) threads: usize,
}

pub(crate) fn parse_user(s: &str) -> Result<(String, String), String> {
    match s.split_once(':') {
        Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("expected ACCESS_KEY:SECRET_KEY, got {s:?}")),
    }
}

pub(crate) fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_owned())
}

pub(crate) fn emulator(a: EmulatorArgs) -> Result<(), Failure> {
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
        // Created before the listener binds: a client that can connect
        // finds them.
        buckets: a.buckets.clone(),
    };
    let access_key = opts.access_key.clone();
    let e = Emulator::start(opts).map_err(|e| e.to_string())?;
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
