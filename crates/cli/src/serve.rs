//! `milliscale serve`: the database (or a read replica of it) over gRPC,
//! until SIGTERM or SIGINT; and the verbs that use a server from a shell
//! (`get`, `put`, `delete`, `scan`, `create-table`).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use milliscale_client::{Client, KeyRange, TxnOptions};
use milliscale_server::shard::ShardOptions;
use milliscale_server::{Backend, Server, ServerOptions, TlsIdentity, Tokens};

use crate::args::{Failure, Usage, parse_size, seconds, store_options};

/// A shard's `checkpoint_log_ratio` unless the configuration sets one.
pub const SHARD_CHECKPOINT_LOG_RATIO: f64 = 0.125;

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// A store holding the database (repeat for replicas); or the
    /// `--config` file's stores.
    #[arg(long)]
    store: Vec<String>,
    /// The gRPC address to listen on (port 0: any free port; the address
    /// is printed as `listening on ADDR` once the server is ready).
    /// Default 127.0.0.1:7878; with `--cluster`, the shard's address in
    /// the map.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Also serve `/healthz`, `/readyz` and `/metrics` over HTTP here.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Serve a read replica of the database: read-only transactions, with
    /// read-your-writes through the writer's tokens.
    #[arg(long)]
    replica: bool,
    /// Bearer tokens, one `read-write:TOKEN` or `read-only:TOKEN` a line;
    /// `MILLISCALE_TOKENS` may list them instead (comma-separated).
    #[arg(long, value_name = "FILE")]
    tokens: Option<PathBuf>,
    /// The TLS certificate chain (PEM); with `--tls-key`, the server
    /// speaks TLS.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The TLS private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Listen on a non-loopback address without TLS and tokens.
    #[arg(long)]
    insecure: bool,
    /// Keep a retention window of this length (`7d`, `12h`, `90s`): the
    /// past stays readable that far back (`serve --at`, `dump --at`,
    /// `restore`).
    #[arg(long, value_name = "DURATION", value_parser = crate::args::retention, conflicts_with_all = ["replica", "at"])]
    retention: Option<Duration>,
    /// Serve the database as it was at this point of its retention window,
    /// read-only: `csn:N` (or a bare number) or an RFC 3339 time
    /// (`2026-12-07T06:30:00Z`). The writer, if one runs, is not fenced.
    #[arg(long, value_name = "CSN|TIME", conflicts_with_all = ["replica", "cluster"])]
    at: Option<String>,
    /// Largest message, e.g. 16M.
    #[arg(long, default_value = "16M")]
    max_message_bytes: String,
    /// Most interactive transactions open at once.
    #[arg(long, default_value_t = 4096)]
    max_open_txns: usize,
    /// Most interactive transactions open at once on one connection.
    #[arg(long, default_value_t = 1024)]
    max_open_txns_per_conn: usize,
    /// Most bytes (keys, values, patches) one interactive transaction may
    /// write, e.g. 256M: its writes stay in the server's memory until it
    /// ends. A write past it is refused (RESOURCE_EXHAUSTED) and the
    /// transaction stays open.
    #[arg(long, default_value = "256M")]
    max_txn_bytes: String,
    /// Abort an interactive transaction idle this many seconds.
    #[arg(long, default_value_t = 30.0)]
    idle_timeout_s: f64,
    /// At shutdown, seconds open transactions get to finish.
    #[arg(long, default_value_t = 10.0)]
    grace_s: f64,
    #[command(flatten)]
    cluster: ClusterServeArgs,
}

/// `serve --cluster`: the server is a shard of a cluster.
#[derive(Args)]
pub(crate) struct ClusterServeArgs {
    /// Serve as a shard of the cluster whose shard map is on this store
    /// (`file:///dir`, `s3://bucket?...`; `milliscale cluster init`
    /// publishes it). The server's database holds the shard's rows.
    #[arg(long, value_name = "MAP_URL", requires = "shard", conflicts_with = "replica")]
    cluster: Option<String>,
    /// The prefix of the map's objects on that store.
    #[arg(long, default_value = "", requires = "cluster")]
    map_prefix: String,
    /// Which shard of the map this server is.
    #[arg(long, requires = "cluster")]
    shard: Option<u32>,
    /// Be the shard's hot standby: follow its database (`--store`, the
    /// shard's) as a read replica, watch the shard, and when it stops
    /// answering (5 checks in a row, 100 ms apart, unanswered for 250 ms
    /// each) promote, publish the next map with `--listen`, and serve.
    #[arg(long, requires_all = ["cluster", "listen"])]
    standby: bool,
    /// How long a multi-shard transaction may stay prepared before this
    /// shard asks the other participants (ms).
    #[arg(long, default_value_t = 1000, requires = "cluster")]
    termination_timeout_ms: u64,
    /// How long a range frozen here for a move waits for its silent mover
    /// before this shard aborts the move by publishing the map unchanged
    /// (ms; the mover is heard from at each page of the copy).
    #[arg(long, default_value_t = 10_000, requires = "cluster")]
    move_timeout_ms: u64,
    /// How often the rebalancer looks, when `cluster rebalance on` and
    /// this shard holds the map's lease (ms).
    #[arg(long, default_value_t = 1000, requires = "cluster")]
    rebalance_every_ms: u64,
    /// With no decided transaction to forget, write the shard's forget
    /// bound anyway this often while it rises, so that a cluster's change
    /// feed sees its resolved timestamp move while this shard is idle
    /// (ms; one log write each; 0: never).
    #[arg(long, default_value_t = 1000, requires = "cluster")]
    resolved_every_ms: u64,
    /// The bearer token this shard calls the other shards with (they
    /// check it as they check any caller's); or MILLISCALE_PEER_TOKEN.
    #[arg(long, env = "MILLISCALE_PEER_TOKEN", hide_env_values = true, requires = "cluster")]
    peer_token: Option<String>,
    /// The certificate authority of the other shards' TLS certificates
    /// (PEM): calls to them use TLS.
    #[arg(long, value_name = "FILE", requires = "cluster")]
    peer_tls_ca: Option<PathBuf>,
    /// Serve reads only: a transaction or batch that writes, a table
    /// created or dropped, and a range moved here are refused. For a
    /// cluster restored at a point of its past (`cluster restore --at`),
    /// to be looked at as it was.
    #[arg(long, requires = "cluster")]
    read_only: bool,
}

fn read(path: &PathBuf, what: &str) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| Failure::Run(format!("{what} {}: {e}", path.display())))
}

fn server_options(a: &ServeArgs, listen: SocketAddr) -> Result<ServerOptions, Failure> {
    let mut o = ServerOptions::new(listen);
    o.http = a.http;
    o.insecure = a.insecure;
    o.tokens = match (&a.tokens, std::env::var("MILLISCALE_TOKENS")) {
        (Some(path), _) => {
            let text = String::from_utf8(read(path, "--tokens")?)
                .map_err(|_| Usage("the --tokens file is not UTF-8".into()))?;
            Tokens::parse(&text).map_err(|e| Usage(format!("--tokens {}: {e}", path.display())))?
        }
        (None, Ok(v)) => Tokens::parse(&v).map_err(|e| Usage(format!("MILLISCALE_TOKENS: {e}")))?,
        (None, Err(_)) => Tokens::none(),
    };
    if let (Some(cert), Some(key)) = (&a.tls_cert, &a.tls_key) {
        o.tls = Some(TlsIdentity {
            cert_pem: read(cert, "--tls-cert")?,
            key_pem: read(key, "--tls-key")?,
        });
    }
    o.max_message_bytes = parse_size("max-message-bytes", &a.max_message_bytes)?;
    o.max_open_txns = a.max_open_txns;
    o.max_open_txns_per_conn = a.max_open_txns_per_conn;
    o.max_txn_bytes = parse_size("max-txn-bytes", &a.max_txn_bytes)? as u64;
    o.idle_timeout = seconds("idle-timeout-s", a.idle_timeout_s)?;
    o.grace = seconds("grace-s", a.grace_s)?;
    if let (Some(map), Some(shard)) = (&a.cluster.cluster, a.cluster.shard) {
        let mut s = ShardOptions::new(shard, map.clone());
        s.map_prefix.clone_from(&a.cluster.map_prefix);
        s.termination_timeout = Duration::from_millis(a.cluster.termination_timeout_ms.max(1));
        s.move_timeout = Duration::from_millis(a.cluster.move_timeout_ms.max(1));
        s.rebalance_every = Duration::from_millis(a.cluster.rebalance_every_ms.max(1));
        s.resolved_every = (a.cluster.resolved_every_ms > 0)
            .then(|| Duration::from_millis(a.cluster.resolved_every_ms));
        s.peer_token.clone_from(&a.cluster.peer_token);
        s.read_only = a.cluster.read_only;
        if let Some(ca) = &a.cluster.peer_tls_ca {
            s.peer_tls_ca = Some(read(ca, "--peer-tls-ca")?);
        }
        o.cluster = Some(s);
    }
    o.check().map_err(Failure::Usage)?;
    Ok(o)
}

/// Where to listen: `--listen`, or with `--cluster` the shard's address in
/// the newest map, or 127.0.0.1:7878.
fn listen_addr(a: &ServeArgs) -> Result<SocketAddr, Failure> {
    if let Some(l) = a.listen {
        return Ok(l);
    }
    let (Some(map), Some(shard)) = (&a.cluster.cluster, a.cluster.shard) else {
        return Ok(SocketAddr::from(([127, 0, 0, 1], 7878)));
    };
    let store = milliscale::store::open(map).map_err(|e| Usage(format!("--cluster {map}: {e}")))?;
    let maps = milliscale_milana::shard_map::MapStore::new(store, &a.cluster.map_prefix);
    let m = maps
        .latest()
        .map_err(|e| Failure::Run(format!("the shard map: {e}")))?
        .ok_or_else(|| Usage(format!("no shard map on {map}: run `milliscale cluster init`")))?;
    let info = m
        .shards
        .get(&shard)
        .ok_or_else(|| Usage(format!("shard map version {} has no shard {shard}", m.version)))?;
    let addr = info
        .addr
        .parse()
        .map_err(|e| Usage(format!("shard {shard}'s address {}: {e}", info.addr)))?;
    Ok(addr)
}

/// Serve until SIGTERM or SIGINT, then shut down gracefully and close the
/// database (its final flush).
/// `pages`: the process's huge pages, turned on once the database is open
/// if they wait for it (huge_pages.rs).
pub(crate) fn serve(
    a: ServeArgs,
    metrics_elsewhere: bool,
    pages: crate::huge_pages::HugePages,
) -> Result<(), Failure> {
    let listen = listen_addr(&a)?;
    let options = server_options(&a, listen)?;
    if a.http.is_some() && metrics_elsewhere {
        return Err("--metrics-addr and serve's --http both serve /metrics; give one".into());
    }
    let metrics = match a.http {
        Some(_) => Some(
            metrics_exporter_prometheus::PrometheusBuilder::new()
                .install_recorder()
                .map_err(|e| Failure::Run(format!("metrics: {e}")))?,
        ),
        None => None,
    };
    // One engine transaction slot per open interactive transaction, and
    // room for the one-shot batches beside them.
    let slots = (options.max_open_txns + 1024).min(milliscale::limits::TRANSACTIONS_MAX);
    let mut db_options = store_options(&a.store)?.max_transactions(slots);
    if a.retention.is_some() {
        db_options = db_options.retention(a.retention);
    }
    // A shard's restart replays at most about an eighth of its live
    // data's worth of log (at least 16 MiB), however many transactions it
    // has committed, unless the configuration says otherwise. A shard's
    // log records are small (a version row, an outcome row, the
    // collector's deletes), so a MiB of its log costs 4-6x a MiB of
    // checkpoint to replay: at a quarter, a restart's replay could take
    // longer than its checkpoint load (BENCHMARKS.md, "Does a shard's
    // state stay bounded"). The price: a checkpoint of the live data for
    // each eighth of it in log.
    let configured = crate::args::CONFIG.get().and_then(|c| c.checkpoint_log_ratio);
    if options.cluster.is_some() && configured.is_none() {
        db_options = db_options.checkpoint_log_ratio(SHARD_CHECKPOINT_LOG_RATIO);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("milliscale-serve")
        .build()
        .map_err(|e| Failure::Run(format!("cannot start the runtime: {e}")))?;
    let options_shard = options.cluster.as_ref().map(|c| c.shard);
    runtime.block_on(async move {
        // Before anything else: a SIGTERM that comes once the address is
        // printed (or while the database opens) shuts the server down
        // gracefully, never by the signal's default action.
        let signals = Signals::install();
        let started = std::time::Instant::now();
        let backend = if let Some(at) = &a.at {
            open_past(db_options.clone(), at).await?
        } else if a.replica {
            Backend::Replica(
                milliscale::AsyncReplica::open(db_options).await.map_err(|e| e.to_string())?,
            )
        } else if a.cluster.standby {
            let shard = options.cluster.as_ref().ok_or("--standby needs --cluster")?;
            eprintln!("milliscale serve: shard {}'s standby, following its database", shard.shard);
            let watch = milliscale_server::shard::standby::Watch::default();
            let db = milliscale_server::shard::standby::stand_by(shard, db_options, listen, watch)
                .await
                .map_err(Failure::Run)?;
            eprintln!("milliscale serve: shard {} stopped answering; promoted", shard.shard);
            Backend::Writer(db)
        } else {
            Backend::Writer(
                milliscale::AsyncDatabase::open(db_options).await.map_err(|e| e.to_string())?,
            )
        };
        let opened = started.elapsed();
        // Where a restart's time went (BENCHMARKS.md, "Does a shard's state
        // stay bounded").
        if let Backend::Writer(db) = &backend
            && let Some(r) = db.blocking().recovery_report()
        {
            let t = &r.timings;
            eprintln!(
                "milliscale serve: recovery: fence {:.2?}, log scan {:.2?} ({} objects, {} bytes), \
                 checkpoint load {:.2?} ({} rows), replay {:.2?} ({} transactions), new \
                 checkpoint and manifest {:.2?}",
                t.fence,
                t.scan,
                r.log_objects,
                r.log_bytes,
                t.load_checkpoint,
                r.checkpoint_rows_loaded,
                t.replay,
                r.replayed,
                t.checkpoint_and_publish
            );
        }
        let server = Server::start(backend.clone(), options, metrics)
            .await
            .map_err(|e| Failure::Run(e.to_string()))?;
        // Opened (a shard's own state too): what it reads from now on is
        // faster on huge pages.
        crate::huge_pages::allow(pages);
        let role = match (a.replica, &options_shard) {
            _ if a.at.is_some() => "the past, read-only,".to_owned(),
            (true, _) => "replica".to_owned(),
            (false, Some(s)) => format!("shard {s}"),
            (false, None) => "writer".to_owned(),
        };
        eprintln!(
            "milliscale serve: {role} opened in {opened:.2?}; every CSN below {} is {}",
            backend.progress(),
            if a.replica { "applied" } else { "durable" }
        );
        // The one line on stdout: the address, once the server takes calls.
        println!("listening on {}", server.local_addr());
        let _ = std::io::stdout().flush();
        let signal = signals.recv().await;
        eprintln!("milliscale serve: {signal}; shutting down");
        let report = server.shutdown().await;
        let closed = match &backend {
            Backend::Writer(db) => db.close().await.map_err(|e| e.to_string()),
            Backend::Replica(r) => {
                r.blocking().close();
                Ok(())
            }
        };
        eprintln!(
            "milliscale serve: stopped in {:.2?}: {} open transactions finished, {} aborted; \
             {} aborted for idling over the server's life; every CSN below {} is {}",
            report.took,
            report.finished,
            report.aborted,
            report.expired,
            backend.progress(),
            if a.replica { "applied" } else { "durable" }
        );
        closed.map_err(|e| Failure::Run(format!("closing the database: {e}")))
    })
}

/// `serve --at`: the database at a point of its retention window, as a
/// read-only backend.
async fn open_past(options: milliscale::Options, at: &str) -> Result<Backend, Failure> {
    let at = milliscale::At::parse(at).map_err(|e| Usage(e.to_string()))?;
    let past = tokio::task::spawn_blocking(move || milliscale::Database::open_at(options, at))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    if let Some(r) = past.past_report() {
        eprintln!(
            "milliscale serve: the database at {at}: CSN {} (from the base at CSN {}, {} \
             transactions replayed); read-only",
            r.csn, r.base_csn, r.replayed
        );
    }
    Ok(Backend::Writer(milliscale::AsyncDatabase::from(std::sync::Arc::new(past))))
}

/// SIGTERM and SIGINT, caught from the moment they are installed.
struct Signals(Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>);

impl Signals {
    /// Catch them from now on (on the runtime this is called in).
    fn install() -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(term), Ok(int)) => Signals(Some((term, int))),
            // Without signal handlers, serve until killed.
            _ => Signals(None),
        }
    }

    /// The first that came (or comes).
    async fn recv(mut self) -> &'static str {
        let Some((term, int)) = &mut self.0 else {
            std::future::pending::<()>().await;
            return "killed";
        };
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    }
}

/// Where a verb finds its server.
#[derive(Args)]
pub(crate) struct ServerArgs {
    /// The server's address (`host:port`, or an http:// or https:// URL).
    #[arg(long, env = "MILLISCALE_SERVER")]
    server: String,
    /// The bearer token.
    #[arg(long, env = "MILLISCALE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// With TLS: the certificate authority to trust (PEM).
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// With TLS: the name on the server's certificate (default: the
    /// address's host).
    #[arg(long)]
    tls_domain: Option<String>,
    /// Keys and values are hexadecimal, on the command line and in the
    /// output (default: text).
    #[arg(long)]
    hex: bool,
}

/// A key or value as the verb's user typed it.
fn bytes(s: &str, hex: bool) -> Result<Vec<u8>, Failure> {
    if !hex {
        return Ok(s.as_bytes().to_vec());
    }
    ::hex::decode(s).map_err(|e| Failure::Usage(format!("{s:?} is not hexadecimal: {e}")))
}

fn show(b: &[u8], hex: bool) -> String {
    if hex { crate::inspect::hex(b) } else { String::from_utf8_lossy(b).into_owned() }
}

/// A verb: what it does to the server.
#[derive(Args)]
pub(crate) struct VerbArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The table.
    #[arg(long)]
    table: String,
    /// The key (get, put, delete).
    key: Option<String>,
    /// The value (put).
    value: Option<String>,
    /// Scan: the keys starting with this.
    #[arg(long)]
    prefix: Option<String>,
    /// Scan: the first key.
    #[arg(long)]
    start: Option<String>,
    /// Scan: the end (exclusive).
    #[arg(long)]
    end: Option<String>,
    /// Scan: at most this many rows (0: all).
    #[arg(long, default_value_t = 0)]
    limit: u64,
    /// Scan: in reverse key order.
    #[arg(long)]
    reverse: bool,
}

/// The verbs.
#[derive(Clone, Copy)]
pub(crate) enum Verb {
    Get,
    Put,
    Delete,
    Scan,
    CreateTable,
}

pub(crate) fn verb(verb: Verb, a: VerbArgs) -> Result<(), Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Run(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(run_verb(verb, a))
}

async fn run_verb(verb: Verb, a: VerbArgs) -> Result<(), Failure> {
    let hex = a.server.hex;
    let mut b = Client::builder(a.server.server.clone());
    if let Some(t) = &a.server.token {
        b = b.token(t.clone());
    }
    if let Some(ca) = &a.server.tls_ca {
        b = b.tls(read(ca, "--tls-ca")?);
    }
    if let Some(d) = &a.server.tls_domain {
        b = b.tls_domain(d.clone());
    }
    let client = b.connect().await.map_err(|e| Failure::Run(e.to_string()))?;
    let failed = |e: milliscale_client::Error| Failure::Run(e.to_string());
    let key = || -> Result<Vec<u8>, Failure> {
        bytes(a.key.as_deref().ok_or(Failure::Usage("give the KEY".into()))?, hex)
    };
    let mut out = std::io::stdout().lock();
    let io = |e: std::io::Error| Failure::Run(format!("stdout: {e}"));
    match verb {
        Verb::CreateTable => client.create_table(&a.table).await.map_err(failed)?,
        Verb::Get => match client.get(&a.table, &key()?).await.map_err(failed)? {
            Some(v) => writeln!(out, "{}", show(&v, hex)).map_err(io)?,
            None => return Err(Failure::Run("no such key".into())),
        },
        Verb::Put => {
            let value =
                bytes(a.value.as_deref().ok_or(Failure::Usage("give the VALUE".into()))?, hex)?;
            let token = client.put(&a.table, &key()?, &value).await.map_err(failed)?;
            writeln!(out, "{token}").map_err(io)?;
        }
        Verb::Delete => {
            if !client.delete(&a.table, &key()?).await.map_err(failed)? {
                return Err(Failure::Run("no such key".into()));
            }
        }
        Verb::Scan => {
            let range = KeyRange {
                start: a.start.as_deref().map(|s| bytes(s, hex)).transpose()?,
                end: a.end.as_deref().map(|s| bytes(s, hex)).transpose()?,
                prefix: a.prefix.as_deref().map(|s| bytes(s, hex)).transpose()?,
                reverse: a.reverse,
                limit: a.limit,
            };
            let mut tx = client.begin_with(TxnOptions::read_only()).await.map_err(failed)?;
            let mut stream = tx.scan_stream(&a.table, range).await.map_err(failed)?;
            while let Some(batch) = stream.message().await.map_err(|s| failed(s.into()))? {
                for r in batch.rows {
                    writeln!(out, "{}\t{}", show(&r.key, hex), show(&r.value, hex)).map_err(io)?;
                }
            }
            tx.commit().await.map_err(failed)?;
        }
    }
    Ok(())
}

/// `bench ycsb --server`: where the server is and how to drive it.
#[derive(Args)]
pub(crate) struct BenchServerArgs {
    /// Drive a `milliscale serve` server at this address instead of an
    /// embedded engine: the client's tasks (on --client-threads threads) send the
    /// transactions; the table is loaded through the server if missing.
    /// The log's flags are the server's business and are ignored.
    #[arg(long, value_name = "ADDR")]
    pub(crate) server: Option<String>,
    /// With --server: concurrent sessions (1..=10000).
    #[arg(long, default_value_t = 64)]
    pub(crate) sessions: usize,
    /// With --server: HTTP/2 connections the sessions share.
    #[arg(long, default_value_t = 4)]
    pub(crate) connections: usize,
    /// With --server: the client's runtime threads (default: --threads).
    /// On a machine the server shares, one thread costs the client less
    /// CPU per transaction than two (fewer context switches).
    #[arg(long, value_name = "N")]
    pub(crate) client_threads: Option<usize>,
    /// With --server: interactive transactions (begin, a get and a patch
    /// per key, commit: a round trip each) instead of one `Execute` each.
    #[arg(long)]
    pub(crate) interactive: bool,
    /// With --interactive: read a transaction's keys in one `GetMany`
    /// call (its patches then travel with the commit).
    #[arg(long, requires = "interactive", conflicts_with = "unary")]
    pub(crate) get_many: bool,
    /// With --server: one `Get` at a time (a message on the connection's
    /// `CallStream`, or a call with --unary) in a read-only transaction
    /// each session keeps open, to measure what a call costs.
    #[arg(long, conflicts_with_all = ["interactive", "ping", "empty", "pipelined", "cluster"])]
    pub(crate) call: bool,
    /// With --server: one-shot transactions as one `Execute` call each
    /// instead of messages on one `ExecuteStream` per connection, and
    /// with --interactive each call of a transaction a unary call instead
    /// of a message on the connection's `CallStream` (with --cluster:
    /// each shard call a call, not a message on the shard's
    /// `ShardStream`).
    #[arg(long, conflicts_with = "ping")]
    pub(crate) unary: bool,
    /// With --server: transactions pipelined, as the embedded engine's
    /// workers run: a session sends its next transaction once the last is
    /// pre-committed, and hears of its durability later on the stream
    /// (one-shot, or with --interactive each commit on the `CallStream`).
    #[arg(long, conflicts_with_all = ["ping", "unary", "empty"])]
    pub(crate) pipelined: bool,
    /// With --server: send empty batches instead of transactions, to
    /// measure what a batch costs without engine work (on the stream, or
    /// as calls with --unary).
    #[arg(long, conflicts_with_all = ["interactive", "ping"])]
    pub(crate) empty: bool,
    /// With --server: send `Status` calls instead of transactions, to
    /// measure what a call costs without engine work.
    #[arg(long, conflicts_with = "interactive")]
    pub(crate) ping: bool,
    /// With --server: the address is a node of a cluster (`serve
    /// --cluster`): one-shot transactions through the cluster client
    /// (`Cluster::execute`; a transaction on one shard is one call to it).
    #[arg(long, conflicts_with_all = ["interactive", "ping", "empty", "pipelined"])]
    pub(crate) cluster: bool,
    /// With --server: the bearer token (or MILLISCALE_TOKEN).
    #[arg(long, env = "MILLISCALE_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
}

/// Run `bench ycsb` through a server when `--server` is given.
pub(crate) fn bench_through_server(
    a: &BenchServerArgs,
    cfg: &milliscale_bench::ycsb::YcsbConfig,
    engine: &crate::args::EngineArg,
) -> Result<Option<milliscale_bench::report::Report>, Failure> {
    let Some(addr) = &a.server else { return Ok(None) };
    if cfg.tasks.is_some()
        || cfg.replica.is_some()
        || !matches!(engine, crate::args::EngineArg::Milliscale)
    {
        return Err("--server runs without --tasks, --replica or another --engine".into());
    }
    let srv = milliscale_bench::ycsb_server::ServerRun {
        addr: addr.clone(),
        token: a.token.clone(),
        sessions: a.sessions,
        connections: a.connections,
        threads: a.client_threads.unwrap_or(cfg.threads),
        interactive: a.interactive,
        get_many: a.get_many,
        call: a.call,
        unary: a.unary,
        pipelined: a.pipelined,
        empty: a.empty,
        ping: a.ping,
        cluster: a.cluster,
    };
    Ok(Some(milliscale_bench::ycsb_server::run(cfg, &srv)?))
}
