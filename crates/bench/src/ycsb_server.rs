//! YCSB through a `milliscale serve` server, from this process: the same
//! records, keys and transactions as [`super::ycsb`], sent with the Rust
//! client by `sessions` concurrent tasks over `connections` HTTP/2
//! connections.
//!
//! Two ways to run a transaction:
//! - **one-shot**: the whole transaction is one batch (its gets, or its
//!   gets and patches), one round trip: a message on the connection's
//!   `ExecuteStream` (the client's default), or with `unary` one
//!   `Execute` call;
//! - **pipelined** one-shot: the same message, answered at pre-commit; the
//!   session sends its next transaction at once, as the embedded engine's
//!   workers do, and hears of each commit's durability later on the
//!   stream;
//! - **interactive**: `Begin`, then a `Get` (and a `Patch`) per key, then
//!   `Commit`: 2 + ops round trips on the connection's `CallStream` (each
//!   patch travels with the next call), 2 + 2 ops as unary calls; with
//!   `get_many`, `Begin`, one `GetMany` of the keys, and `Commit` with the
//!   patches: 3 round trips;
//! - **interactive pipelined**: the same, its commit answered at
//!   pre-commit, its durability told later on the stream, as pipelined
//!   one-shot's;
//! - **call**: one `Get` at a time in a read-only transaction the session
//!   keeps open: what one call on the stream (or with `unary`, one call)
//!   costs with a point read's engine work;
//! - **cluster** one-shot: the same batch through the cluster client
//!   (`Cluster::execute`) to a `serve --cluster` node: one `ShardExecute`
//!   when its keys are on one shard, a message on the connection's
//!   `ShardStream` (the client's default), or with `unary` a call.
//!
//! Closed loop by default: a session sends its next transaction when the
//! last is answered. With a rate (`--rate`, open loop), transactions
//! arrive as a Poisson process split evenly over the sessions (as the
//! embedded engine's workers split it), and a session's transaction waits
//! for its arrival; a session that falls behind sends its backlog at once,
//! and the transaction's latency counts from the scheduled arrival
//! (queueing counts, no coordinated omission).
//!
//! A conflict is run again (one-shot: by the server, up to 8 times;
//! interactive: by the task) and counted as an abort. Latencies: the
//! transaction from its first request (open loop: its arrival) to the
//! answer that says it is durable; "commit" is that last request alone
//! (the `Execute` of a one-shot write, the `Commit` of an interactive
//! one). Pipelined: the transaction to its pre-commit answer, and the
//! commit from that answer to the server's word that it is durable:
//! pre-commit to acknowledgment, as the embedded engine's commit latency
//! is measured, with both ends seen by the client across the network.
//! The report's extra `commit_from_send_p50_ms` (and p99) counts the
//! commit from sending its request instead, so also the time the request
//! waited at a busy server before it ran (with N sessions at T
//! transactions a second, about N / T). The server's CPU per transaction
//! comes from its `Status` before and after the measured phase.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use milliscale_client::{Batch, BatchResult, Client, Cluster, CommitAck, Isolation, TxnOptions};
use parking_lot::Mutex;
use rand::Rng;

use crate::harness::{PHASE_MEASURE, PHASE_STOP, PHASE_WARMUP, Pacer, Pacing, worker_rng};
use crate::keys::KeyChooser;
use crate::report::Report;
use crate::ycsb::{
    FIELD_BYTES, FIELDS, WorkerStats, YcsbConfig, build_report, initial_record, key_bytes,
    new_histogram,
};

/// The table the records live in on the server.
pub const TABLE: &str = "usertable";

/// How the client reaches and drives the server.
#[derive(Debug, Clone)]
pub struct ServerRun {
    pub addr: String,
    pub token: Option<String>,
    /// Concurrent sessions (tasks), 1..=10,000.
    pub sessions: usize,
    /// HTTP/2 connections the sessions share.
    pub connections: usize,
    /// The client's runtime threads.
    pub threads: usize,
    /// Interactive transactions instead of one-shot batches.
    pub interactive: bool,
    /// Interactive transactions read their keys with one `GetMany`.
    pub get_many: bool,
    /// Send one `Get` a time (a message on the connection's `CallStream`,
    /// or with `unary` a call) in a read-only transaction each session
    /// keeps open: what a call costs with a point read's engine work
    /// (each counted as a read-only "transaction").
    pub call: bool,
    /// One-shot batches as one `Execute` call each, and an interactive
    /// transaction's calls each a unary call, instead of messages on a
    /// stream.
    pub unary: bool,
    /// One-shot batches pipelined (see the module's comment).
    pub pipelined: bool,
    /// Send empty batches instead of transactions: what a batch costs
    /// without engine work (counted as read-only "transactions").
    pub empty: bool,
    /// Send `Status` calls instead of transactions: what an RPC costs by
    /// itself, with no engine work (counted as read-only "transactions").
    pub ping: bool,
    /// The address is a cluster's node: one-shot transactions through
    /// the cluster client (`Cluster::execute`).
    pub cluster: bool,
}

/// What the sessions send their transactions to.
#[derive(Clone)]
enum Target {
    Server(Box<Client>),
    Cluster(Cluster),
}

impl Target {
    async fn execute(&self, b: Batch) -> milliscale_client::Result<BatchResult> {
        match self {
            Target::Server(c) => c.execute(b).await,
            Target::Cluster(c) => c.execute(b).await,
        }
    }

    async fn create_table(&self, name: &str) -> milliscale_client::Result<()> {
        match self {
            Target::Server(c) => c.create_table(name).await,
            Target::Cluster(c) => c.create_table(name).await,
        }
    }

    /// The server's CPU seconds so far (a cluster: every shard's).
    async fn cpu_seconds(&self) -> Result<f64, String> {
        match self {
            Target::Server(c) => Ok(c.status().await.map_err(|e| e.to_string())?.cpu_seconds),
            Target::Cluster(c) => {
                let mut sum = 0.0;
                for s in c.status().await {
                    let server = s.server.ok_or_else(|| {
                        format!("shard {} did not answer: {:?}", s.shard, s.error)
                    })?;
                    sum += server.cpu_seconds;
                }
                Ok(sum)
            }
        }
    }

    /// A cluster client tells the shards it has left (`Cluster::close`),
    /// so that its low-water mark stops holding their watermark: the next
    /// run against the same shards starts with what this one left
    /// collected, not with its last 10 s of decisions.
    async fn close(&self) {
        if let Target::Cluster(c) = self {
            c.close().await;
        }
    }

    fn client(&self) -> Result<&Client, String> {
        match self {
            Target::Server(c) => Ok(c),
            Target::Cluster(_) => Err("a cluster runs one-shot transactions only".into()),
        }
    }
}

/// Run YCSB against the server; loads the table first if it is missing.
pub fn run(cfg: &YcsbConfig, srv: &ServerRun) -> Result<Report, String> {
    if srv.sessions == 0 || srv.sessions > 10_000 || srv.connections == 0 || srv.threads == 0 {
        return Err(
            "--sessions must be in 1..=10000, --connections and --client-threads at least 1".into(),
        );
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(srv.threads)
        .enable_all()
        .thread_name("ycsb-client")
        .build()
        .map_err(|e| format!("cannot start the client's runtime: {e}"))?;
    rt.block_on(run_async(cfg, srv))
}

async fn connect(srv: &ServerRun) -> Result<Target, String> {
    if srv.cluster {
        let mut b = Cluster::builder(srv.addr.clone()).streamed_calls(!srv.unary);
        if let Some(t) = &srv.token {
            b = b.token(t.clone());
        }
        return b.connect().await.map(Target::Cluster).map_err(|e| e.to_string());
    }
    let mut b =
        Client::builder(srv.addr.clone()).streamed_batches(!srv.unary).streamed_calls(!srv.unary);
    if let Some(t) = &srv.token {
        b = b.token(t.clone());
    }
    b.connect().await.map(|c| Target::Server(Box::new(c))).map_err(|e| e.to_string())
}

async fn load(client: &Target, cfg: &YcsbConfig) -> Result<bool, String> {
    match client.create_table(TABLE).await {
        Ok(()) => {}
        Err(e) if e.code() == milliscale_client::Code::AlreadyExists => return Ok(false),
        Err(e) => return Err(format!("creating {TABLE}: {e}")),
    }
    const BATCH: u64 = 1_000;
    let batches: Vec<u64> = (0..cfg.records.div_ceil(BATCH)).collect();
    let next = Arc::new(Mutex::new(batches.into_iter()));
    let mut loaders = Vec::new();
    for _ in 0..8 {
        let (client, next, records) = (client.clone(), Arc::clone(&next), cfg.records);
        loaders.push(tokio::spawn(async move {
            loop {
                let Some(b) = next.lock().next() else { return Ok::<(), String>(()) };
                let mut batch = Batch::new();
                for id in b * BATCH..((b + 1) * BATCH).min(records) {
                    batch.put(TABLE, &key_bytes(id), &initial_record(id));
                }
                client.execute(batch).await.map_err(|e| format!("loading: {e}"))?;
            }
        }));
    }
    for l in loaders {
        l.await.map_err(|e| e.to_string())??;
    }
    Ok(true)
}

async fn run_async(cfg: &YcsbConfig, srv: &ServerRun) -> Result<Report, String> {
    let mut clients = Vec::new();
    for _ in 0..srv.connections {
        clients.push(connect(srv).await?);
    }
    let loaded_at = Instant::now();
    let loaded = load(&clients[0], cfg).await?;
    let load_took = loaded_at.elapsed();
    let chooser = KeyChooser::new(cfg.records, cfg.dist)?;
    let phase = Arc::new(AtomicU8::new(PHASE_WARMUP));
    // One set of histograms for all the sessions: a set per session (3 x
    // 264 KiB) made every record a cache miss, a tenth of the client's
    // CPU with 256 sessions.
    let stats = Arc::new(Mutex::new(Measured::new()));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut tasks = Vec::new();
    let srv_sessions = srv.sessions;
    for s in 0..srv.sessions {
        let client = clients[s % clients.len()].clone();
        let (cfg, chooser, phase) = (cfg.clone(), chooser.clone(), Arc::clone(&phase));
        let (stats, errors) = (Arc::clone(&stats), Arc::clone(&errors));
        let how = How::of(srv);
        tasks.push(tokio::spawn(async move {
            let sessions = (s as u64, srv_sessions);
            if let Err(e) = session(&client, &cfg, &chooser, &phase, sessions, how, &stats).await {
                errors.lock().push(e);
                // One failing session stops the run.
                phase.store(PHASE_STOP, Ordering::SeqCst);
            }
        }));
    }
    tokio::time::sleep(cfg.warmup).await;
    let before = clients[0].cpu_seconds().await?;
    let cpu_before = process_cpu();
    phase.store(PHASE_MEASURE, Ordering::SeqCst);
    let started = Instant::now();
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    eprintln!("measuring for {:?} (loaded and warmed up)", cfg.duration);
    // The commits of each second, for a dip to show.
    let mut timeline = Vec::new();
    let mut last = 0u64;
    let mut tick =
        tokio::time::interval_at((started + Duration::from_secs(1)).into(), Duration::from_secs(1));
    while started.elapsed() + Duration::from_millis(500) < cfg.duration {
        tick.tick().await;
        let now = stats.lock().run.committed.iter().sum::<u64>();
        timeline.push((now - last) as f64);
        last = now;
    }
    tokio::time::sleep(cfg.duration.saturating_sub(started.elapsed())).await;
    let measured = started.elapsed();
    let after = clients[0].cpu_seconds().await?;
    let cpu_client = process_cpu() - cpu_before;
    phase.store(PHASE_STOP, Ordering::SeqCst);
    for t in tasks {
        t.await.map_err(|e| e.to_string())?;
    }
    for c in &clients {
        c.close().await;
    }
    if let Some(e) = errors.lock().first() {
        return Err(format!("a session failed: {e}"));
    }
    let Measured { run, commit_from_send_ns: from_send } =
        std::mem::replace(&mut *stats.lock(), Measured::new());
    let stats = vec![run];
    let mode = mode_of(srv);
    let notes = notes(cfg, srv, mode, loaded.then_some(load_took));
    let mut report = build_report(cfg, stats, (measured, None), notes);
    report.engine = format!("milliscale-server ({mode})");
    report.timeline = timeline;
    report.extra.insert("measure_started_unix_s".into(), started_unix);
    report.config.retain(|k, _| {
        matches!(
            k.as_str(),
            "records" | "workload" | "dist" | "ops_per_txn" | "seed" | "isolation" | "pacing"
        )
    });
    report.config.insert("server".into(), srv.addr.clone());
    report.config.insert("sessions".into(), srv.sessions.to_string());
    report.config.insert("connections".into(), srv.connections.to_string());
    report.config.insert("client_threads".into(), srv.threads.to_string());
    report.config.insert("mode".into(), mode.into());
    let txns = report.committed.max(1) as f64;
    let server_cpu = after - before;
    report.extra.insert("server_cpu_us_per_txn".into(), server_cpu * 1e6 / txns);
    report.extra.insert("client_cpu_us_per_txn".into(), cpu_client * 1e6 / txns);
    report.extra.insert("server_cpu_cores".into(), server_cpu / measured.as_secs_f64());
    let from_send = crate::report::Percentiles::from_nanos(&from_send);
    report.extra.insert("commit_from_send_p50_ms".into(), from_send.p50_us / 1e3);
    report.extra.insert("commit_from_send_p99_ms".into(), from_send.p99_us / 1e3);
    Ok(report)
}

/// The report's notes: how the run drove the server and what its
/// latencies measure; `loaded`: how long loading the table took, if it did.
fn notes(
    cfg: &YcsbConfig,
    srv: &ServerRun,
    mode: &str,
    loaded: Option<std::time::Duration>,
) -> Vec<String> {
    let mut notes = vec![format!(
        "through the server at {} from another process: {} sessions over {} connections, \
         {mode} transactions; the log's settings are the server's",
        srv.addr, srv.sessions, srv.connections
    )];
    notes.push(match cfg.pacing {
        Pacing::Closed => "closed loop: a session sends its next transaction once answered".into(),
        Pacing::Open { rate } => format!(
            "open loop: Poisson arrivals at {rate}/s over the sessions; txn latency from each \
             arrival (queueing counts)"
        ),
    });
    notes.push(if srv.pipelined {
        "commit latency: from the pre-commit answer to the server's word that the commit is \
         durable (pre-commit to acknowledgment, as the embedded engine's); \
         extra.commit_from_send_*: from sending the request"
            .into()
    } else {
        "commit latency: from sending the commit's request to its durable answer".into()
    });
    if let Some(took) = loaded {
        notes.push(format!("loaded {} records through the server in {took:.1?}", cfg.records));
    }
    notes
}

/// This process's CPU time (user + system), in seconds.
fn process_cpu() -> f64 {
    crate::rss::process_cpu_seconds()
}

/// What a session sends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    OneShot,
    Pipelined,
    /// With its reads in one `GetMany`, or not; its commit pipelined, or
    /// not.
    Interactive {
        get_many: bool,
        pipelined: bool,
    },
    Ping,
    Empty,
    /// One `Get` a time in one read-only transaction kept open.
    Call,
}

/// The report's name for how `srv` drives the server.
fn mode_of(srv: &ServerRun) -> &'static str {
    if srv.ping {
        "ping"
    } else if srv.call && srv.unary {
        "call-unary"
    } else if srv.call {
        "call"
    } else if srv.empty && srv.unary {
        "empty-unary"
    } else if srv.empty {
        "empty"
    } else if srv.interactive && srv.unary {
        "interactive-unary"
    } else if srv.interactive && srv.get_many && srv.pipelined {
        "interactive-get-many-pipelined"
    } else if srv.interactive && srv.get_many {
        "interactive-get-many"
    } else if srv.interactive && srv.pipelined {
        "interactive-pipelined"
    } else if srv.interactive {
        "interactive"
    } else if srv.cluster && srv.unary {
        "one-shot-cluster-unary"
    } else if srv.unary {
        "one-shot-unary"
    } else if srv.pipelined {
        "one-shot-pipelined"
    } else if srv.cluster {
        "one-shot-cluster"
    } else {
        "one-shot"
    }
}

impl How {
    fn of(srv: &ServerRun) -> How {
        if srv.ping {
            How::Ping
        } else if srv.empty {
            How::Empty
        } else if srv.interactive {
            How::Interactive { get_many: srv.get_many, pipelined: srv.pipelined }
        } else if srv.pipelined {
            How::Pipelined
        } else if srv.call {
            How::Call
        } else {
            How::OneShot
        }
    }
}

/// What a session measured: the report's figures, and the commit
/// latency from sending the commit's request (the same as the report's
/// except for pipelined commits; see the module's comment).
struct Measured {
    run: WorkerStats,
    commit_from_send_ns: hdrhistogram::Histogram<u64>,
}

impl Measured {
    fn new() -> Measured {
        Measured { run: WorkerStats::new(), commit_from_send_ns: new_histogram() }
    }
}

/// Session `s` of `sessions` (its share of an open loop's rate),
/// recording into `stats` (shared by the sessions).
async fn session(
    target: &Target,
    cfg: &YcsbConfig,
    chooser: &KeyChooser,
    phase: &AtomicU8,
    (s, sessions): (u64, usize),
    how: How,
    stats: &Mutex<Measured>,
) -> Result<(), String> {
    let mut rng = worker_rng(cfg.seed, s);
    let mut pacer = Pacer::new(cfg.pacing, sessions)?;
    let read_fraction = cfg.workload.read_fraction();
    let isolation = match cfg.isolation {
        milliscale::Isolation::ReadCommitted => Isolation::ReadCommitted,
        milliscale::Isolation::Snapshot => Isolation::Snapshot,
        milliscale::Isolation::Serializable => Isolation::Serializable,
    };
    let mut keys = vec![0u64; cfg.ops_per_txn];
    // Pipelined: the commits whose durability the session has not heard
    // of yet.
    let mut acks = FuturesUnordered::new();
    // Calls: the session's read-only transaction, begun at its first call.
    let mut open = None;
    loop {
        let p = phase.load(Ordering::Relaxed);
        if p == PHASE_STOP {
            while let Some(done) = acks.next().await {
                acked(stats, done)?;
            }
            return Ok(());
        }
        // Open loop: wait for this session's next arrival (hearing of
        // pipelined commits meanwhile); a session behind goes at once.
        let arrival = pacer.schedule(&mut rng);
        if let Some(at) = arrival {
            let until = tokio::time::sleep_until(at.into());
            let until = async {
                until.await;
                Ok::<(), String>(())
            };
            while_acks(&mut acks, stats, until).await?;
        }
        let rmw = !matches!(how, How::Ping | How::Empty | How::Call)
            && rng.random::<f64>() >= read_fraction;
        for k in keys.iter_mut() {
            *k = chooser.next(&mut rng);
        }
        let patches: Vec<(usize, u64)> = if rmw {
            keys.iter().map(|_| (rng.random_range(1..FIELDS), rng.random())).collect()
        } else {
            Vec::new()
        };
        let started = Instant::now();
        let (commit_started, aborts) = match how {
            How::Interactive { get_many, pipelined } => {
                let client = target.client()?;
                let how = (get_many, pipelined);
                let txn = interactive_txn(client, isolation, rmw, &keys, &patches, how);
                let (commit_started, aborts, ack) = while_acks(&mut acks, stats, txn).await?;
                if let Some(ack) = ack {
                    let measured = p == PHASE_MEASURE && rmw;
                    acks.push(durable((commit_started, Instant::now()), measured, ack));
                }
                (commit_started, aborts)
            }
            How::OneShot => one_shot_txn(target, isolation, rmw, &keys, &patches).await?,
            How::Pipelined => {
                let client = target.client()?;
                let b = one_shot_batch(isolation, rmw, &keys, &patches);
                let sent = client.execute_pipelined(b);
                let (r, ack) = while_acks(&mut acks, stats, sent).await?;
                let measured = p == PHASE_MEASURE && rmw;
                acks.push(durable((started, Instant::now()), measured, ack));
                (started, r.attempts.saturating_sub(1))
            }
            How::Ping => {
                target.client()?.status().await.map_err(|e| e.to_string())?;
                (started, 0)
            }
            How::Empty => {
                target.execute(Batch::new()).await.map_err(|e| e.to_string())?;
                (started, 0)
            }
            How::Call => {
                if open.is_none() {
                    let tx = target.client()?.begin_with(TxnOptions::read_only()).await;
                    open = Some(tx.map_err(|e| e.to_string())?);
                }
                let tx = open.as_mut().expect("begun");
                let v = tx.get(TABLE, &key_bytes(keys[0])).await.map_err(|e| e.to_string())?;
                std::hint::black_box(v);
                (started, 0)
            }
        };
        let done = Instant::now();
        if p == PHASE_MEASURE && phase.load(Ordering::Relaxed) == PHASE_MEASURE {
            let kind = usize::from(rmw);
            let mut stats = stats.lock();
            stats.run.committed[kind] += 1;
            stats.run.aborted[kind] += u64::from(aborts);
            let origin = arrival.unwrap_or(started);
            let _ = stats.run.txn_ns.record((done - origin).as_nanos().max(1) as u64);
            let pipelined =
                matches!(how, How::Pipelined | How::Interactive { pipelined: true, .. });
            if rmw && !pipelined {
                let ns = (done - commit_started).as_nanos().max(1) as u64;
                let _ = stats.run.commit_ns.record(ns);
                let _ = stats.commit_from_send_ns.record(ns);
            }
        }
    }
}

/// A pipelined commit heard durable: when it was sent and when its
/// pre-commit answer came, whether its latency counts, and when it was
/// heard durable (or why not).
type Acked = ((Instant, Instant), bool, Result<Instant, String>);

async fn durable(times: (Instant, Instant), measured: bool, ack: CommitAck) -> Acked {
    let r = ack.durable().await.map(|()| Instant::now()).map_err(|e| e.to_string());
    (times, measured, r)
}

fn acked(stats: &Mutex<Measured>, ((sent, answered), measured, r): Acked) -> Result<(), String> {
    let at = r.map_err(|e| format!("a pipelined commit did not become durable: {e}"))?;
    if measured {
        let mut stats = stats.lock();
        let _ = stats.run.commit_ns.record((at - answered).as_nanos().max(1) as u64);
        let _ = stats.commit_from_send_ns.record((at - sent).as_nanos().max(1) as u64);
    }
    Ok(())
}

/// Await `f`, hearing of pipelined commits' durability meanwhile (so
/// their latency is taken when the word comes, not when next looked at).
async fn while_acks<T, E: std::fmt::Display>(
    acks: &mut FuturesUnordered<impl Future<Output = Acked>>,
    stats: &Mutex<Measured>,
    f: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    let mut f = std::pin::pin!(f);
    loop {
        tokio::select! {
            biased;
            Some(done) = acks.next(), if !acks.is_empty() => acked(stats, done)?,
            out = &mut f => return out.map_err(|e| e.to_string()),
        }
    }
}

/// A transaction as one batch: a get per key, and for a read-modify-write
/// a patch of one field of each.
fn one_shot_batch(
    isolation: Isolation,
    rmw: bool,
    keys: &[u64],
    patches: &[(usize, u64)],
) -> Batch {
    let mut b = Batch::new();
    for (i, &id) in keys.iter().enumerate() {
        b.get(TABLE, &key_bytes(id));
        if rmw {
            let (field, value) = patches[i];
            b.patch(TABLE, &key_bytes(id), (field * FIELD_BYTES) as u32, &value.to_le_bytes());
        }
    }
    let opts = TxnOptions { isolation, read_only: !rmw, ..TxnOptions::default() };
    b.options(opts).retries(8)
}

/// One transaction as one `Execute`; when its last request started, and
/// how many times it conflicted.
async fn one_shot_txn(
    client: &Target,
    isolation: Isolation,
    rmw: bool,
    keys: &[u64],
    patches: &[(usize, u64)],
) -> Result<(Instant, u32), String> {
    let b = one_shot_batch(isolation, rmw, keys, patches);
    let started = Instant::now();
    let r = client.execute(b).await.map_err(|e| e.to_string())?;
    Ok((started, r.attempts.saturating_sub(1)))
}

/// One transaction in a session: begin, a get (and a patch) per key,
/// commit; run again on a retryable error.
async fn interactive_txn(
    client: &Client,
    isolation: Isolation,
    rmw: bool,
    keys: &[u64],
    patches: &[(usize, u64)],
    (get_many, pipelined): (bool, bool),
) -> Result<(Instant, u32, Option<CommitAck>), String> {
    let mut aborts = 0;
    loop {
        let attempt = async {
            let opts = TxnOptions { isolation, read_only: !rmw, ..TxnOptions::default() };
            let mut tx = client.begin_with(opts).await?;
            if get_many {
                let bytes: Vec<_> = keys.iter().map(|&id| key_bytes(id)).collect();
                let refs: Vec<&[u8]> = bytes.iter().map(|k| k.as_slice()).collect();
                std::hint::black_box(tx.get_many(TABLE, &refs).await?);
            }
            for (i, &id) in keys.iter().enumerate() {
                let key = key_bytes(id);
                if !get_many {
                    std::hint::black_box(tx.get(TABLE, &key).await?);
                }
                if rmw {
                    let (field, value) = patches[i];
                    tx.patch(TABLE, &key, (field * FIELD_BYTES) as u32, &value.to_le_bytes())
                        .await?;
                }
            }
            let commit_started = Instant::now();
            let ack = if pipelined {
                Some(tx.commit_pipelined().await?.1)
            } else {
                tx.commit().await?;
                None
            };
            Ok::<_, milliscale_client::Error>((commit_started, ack))
        };
        match attempt.await {
            Ok((at, ack)) => return Ok((at, aborts, ack)),
            Err(e) if e.is_retryable() && aborts < 1000 => aborts += 1,
            Err(e) => return Err(e.to_string()),
        }
    }
}
