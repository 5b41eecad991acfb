//! YCSB through SlateDB (`milliscale bench ycsb --engine slatedb`).
//!
//! The operations are those of `milliscale_bench::ycsb`: 80-byte records,
//! transactions of `ops_per_txn` point reads (read-only) or
//! read-modify-writes of one 8-byte field, mixed by the workload. SlateDB
//! has no partial-value update, so a read-modify-write puts the whole
//! record. Each transaction is a SlateDB `DbTransaction` at snapshot
//! isolation. A writing transaction counts as committed at
//! `WriteHandle::await_durable`: the same durability as a milliscale
//! acknowledgment (on the store, in a quorum of one).
//!
//! **Closed loop** (the default): clients are tokio tasks, each running
//! one transaction at a time, so SlateDB's group commit (its WAL flush
//! every `flush_interval`) sees `clients` concurrent commits.
//!
//! **Open loop** (`--rate`): transactions arrive as a Poisson process at
//! the rate, each run by a task of its own, so SlateDB sees as many
//! concurrent commits as the load makes; `clients` caps the transactions
//! in flight, and an arrival beyond the cap waits for one to finish.
//! Latency runs from the scheduled arrival, as for milliscale's open loop,
//! so a backlog counts (no coordinated omission); a rate SlateDB cannot
//! serve shows as committed transactions below the offered rate and a
//! growing latency.
//!
//! The store is a milliscale store (`sim://s3x` by default, with its
//! latency model and accounting) behind [`crate::object_store_adapter`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use milliscale_bench::harness::{PHASE_MEASURE, PHASE_STOP, PHASE_WARMUP, Pacing, worker_rng};
use milliscale_bench::keys::KeyChooser;
use milliscale_bench::report::{Environment, KindStats, LogReport, Percentiles, Report};
use milliscale_bench::ycsb::{FIELD_BYTES, FIELDS, WorkerStats, YcsbConfig, initial_record};
use objstore::sim::accounting::AccountingReport;
use rand::Rng;
use slatedb::{Db, ErrorKind, IsolationLevel, Settings, WriteBatch};

use crate::object_store_adapter::Adapter;

/// SlateDB's own knobs.
#[derive(Debug, Clone)]
pub struct SlateOptions {
    /// Concurrent clients (tokio tasks), each one transaction at a time.
    pub clients: usize,
    /// SlateDB's WAL flush interval.
    pub flush_interval: Duration,
}

fn key(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

/// Run YCSB on SlateDB and report like `bench ycsb`.
pub fn run(cfg: &YcsbConfig, opts: &SlateOptions) -> Result<Report, String> {
    if cfg.log.stores.len() != 1 || cfg.log.stores[0] == "none" {
        return Err("SlateDB runs on exactly one store: give one --store URL".into());
    }
    if opts.clients == 0 || opts.clients > 100_000 {
        return Err(format!("--clients must be in 1..=100000, got {}", opts.clients));
    }
    if let Pacing::Open { rate } = cfg.pacing
        && !(rate.is_finite() && rate > 0.0)
    {
        return Err(format!("the open-loop rate must be positive, got {rate}"));
    }
    if opts.flush_interval.is_zero() {
        return Err("SlateDB's flush interval must be positive".into());
    }
    if cfg.ops_per_txn == 0 {
        return Err("ops-per-txn must be positive".into());
    }
    let chooser = KeyChooser::new(cfg.records, cfg.dist)?;
    let mut log = cfg.log.clone();
    log.seed_sims(cfg.seed);
    let url = log.stores[0].clone();
    let store = objstore::open(&url).map_err(|e| format!("{url}: {e}"))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.threads.max(1))
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(run_async(cfg, opts, store, &url, chooser))
}

async fn run_async(
    cfg: &YcsbConfig,
    opts: &SlateOptions,
    store: Arc<dyn objstore::ObjectStore>,
    url: &str,
    chooser: KeyChooser,
) -> Result<Report, String> {
    let adapter = Arc::new(Adapter::new(store.clone(), url));
    let settings = Settings { flush_interval: Some(opts.flush_interval), ..Settings::default() };
    let db = Arc::new(
        Db::builder("ycsb", adapter)
            .with_settings(settings)
            .build()
            .await
            .map_err(|e| format!("SlateDB open: {e}"))?,
    );
    let mut notes = Vec::new();
    let t0 = Instant::now();
    const BATCH: u64 = 10_000;
    let mut start = 0;
    while start < cfg.records {
        let mut b = WriteBatch::new();
        for id in start..(start + BATCH).min(cfg.records) {
            b.put(key(id), initial_record(id));
        }
        db.write(b).await.map_err(|e| format!("SlateDB load: {e}"))?;
        start += BATCH;
    }
    db.flush().await.map_err(|e| format!("SlateDB load: {e}"))?;
    notes.push(format!("loaded {} records in {:.2} s", cfg.records, t0.elapsed().as_secs_f64()));

    let phase = Arc::new(AtomicU8::new(PHASE_WARMUP));
    let chooser = Arc::new(chooser);
    let mut clients = Vec::with_capacity(opts.clients);
    match cfg.pacing {
        Pacing::Closed => {
            for c in 0..opts.clients {
                let (db, phase, chooser, cfg) =
                    (db.clone(), phase.clone(), chooser.clone(), cfg.clone());
                clients.push(tokio::spawn(async move {
                    client(db, phase, chooser, cfg, c as u64).await
                }));
            }
        }
        Pacing::Open { rate } => {
            let (db, phase, chooser, cfg) =
                (db.clone(), phase.clone(), chooser.clone(), cfg.clone());
            let cap = opts.clients;
            clients.push(tokio::spawn(async move {
                open_loop(db, phase, chooser, cfg, rate, cap).await
            }));
        }
    }
    tokio::time::sleep(cfg.warmup).await;
    let before = store.accounting();
    phase.store(PHASE_MEASURE, Ordering::SeqCst);
    let m0 = Instant::now();
    tokio::time::sleep(cfg.duration).await;
    phase.store(PHASE_STOP, Ordering::SeqCst);
    let measured = m0.elapsed();
    let after = store.accounting();
    let mut all = WorkerStats::new();
    for h in clients {
        all.merge(&h.await.map_err(|e| e.to_string())??);
    }
    db.close().await.map_err(|e| format!("SlateDB close: {e}"))?;

    let secs = measured.as_secs_f64();
    let committed: u64 = all.committed.iter().sum();
    let aborted: u64 = all.aborted.iter().sum();
    let config = describe(cfg, opts, url);
    let log = window(before, after, secs, committed);
    notes.push(
        "commit latency: commit() to await_durable() of read-write transactions; \
         read-only transactions commit at once"
            .into(),
    );
    if let Pacing::Open { rate } = cfg.pacing {
        notes.push(format!(
            "txn latency: arrival to durability (open loop, Poisson arrivals at {rate}/s; \
             queueing counts)"
        ));
    }
    Ok(Report {
        benchmark: "ycsb".into(),
        engine: "slatedb".into(),
        config,
        env: Environment::detect(),
        threads: cfg.threads,
        duration_s: secs,
        committed,
        aborted,
        operations: committed * cfg.ops_per_txn as u64,
        txn_per_s: committed as f64 / secs,
        ops_per_s: (committed * cfg.ops_per_txn as u64) as f64 / secs,
        abort_rate: milliscale_bench::report::abort_rate(committed, aborted),
        txn_latency: Percentiles::from_nanos(&all.txn_ns),
        commit_latency: Percentiles::from_nanos(&all.commit_ns),
        by_kind: [
            (
                "read-only".to_owned(),
                KindStats { committed: all.committed[0], aborted: all.aborted[0] },
            ),
            (
                "read-modify-write".to_owned(),
                KindStats { committed: all.committed[1], aborted: all.aborted[1] },
            ),
        ]
        .into(),
        latency_by_kind: BTreeMap::new(),
        extra: BTreeMap::new(),
        memory: None,
        log,
        notes,
        timeline: Vec::new(),
    })
}

/// The run's settings, for the report.
fn describe(cfg: &YcsbConfig, opts: &SlateOptions, url: &str) -> BTreeMap<String, String> {
    let mut config = BTreeMap::new();
    config.insert("records".into(), cfg.records.to_string());
    config.insert("workload".into(), format!("{:?}", cfg.workload).to_lowercase());
    config.insert(
        "dist".into(),
        match cfg.dist {
            milliscale_bench::keys::KeyDist::Uniform => "uniform".to_owned(),
            milliscale_bench::keys::KeyDist::Zipfian { theta } => format!("zipfian({theta})"),
        },
    );
    config.insert("ops_per_txn".into(), cfg.ops_per_txn.to_string());
    config.insert("store".into(), url.to_owned());
    config.insert("clients".into(), opts.clients.to_string());
    config
        .insert("flush_interval_ms".into(), (opts.flush_interval.as_secs_f64() * 1e3).to_string());
    config.insert("isolation".into(), "snapshot".into());
    config.insert("warmup_s".into(), cfg.warmup.as_secs_f64().to_string());
    config.insert("seed".into(), cfg.seed.to_string());
    if let Pacing::Open { rate } = cfg.pacing {
        config.insert("pacing".into(), format!("open({rate}/s)"));
        config.insert("clients".into(), format!("at most {} in flight", opts.clients));
    }
    config
}

/// The store's requests and cost over the measured window.
fn window(
    before: Option<AccountingReport>,
    after: Option<AccountingReport>,
    secs: f64,
    committed: u64,
) -> Option<LogReport> {
    let (before, after) = (before?, after?);
    let mut requests = BTreeMap::new();
    for (k, n) in &after.requests {
        let n0 = before.requests.get(k).copied().unwrap_or(0);
        if *n > n0 {
            requests.insert((*k).to_owned(), (n - n0) as f64 / secs);
        }
    }
    let usd = after.cost_usd - before.cost_usd;
    Some(
        LogReport {
            stores: vec!["SlateDB WAL + SSTs (object per flush)".into()],
            requests_per_s: requests,
            ..LogReport::default()
        }
        .priced(usd, secs, committed),
    )
}

/// A closed-loop client: one transaction at a time until the run stops.
async fn client(
    db: Arc<Db>,
    phase: Arc<AtomicU8>,
    chooser: Arc<KeyChooser>,
    cfg: YcsbConfig,
    c: u64,
) -> Result<WorkerStats, String> {
    let mut rng = worker_rng(cfg.seed, c);
    let mut stats = WorkerStats::new();
    loop {
        let p = phase.load(Ordering::Relaxed);
        if p == PHASE_STOP {
            return Ok(stats);
        }
        let started = Instant::now();
        let done = one_txn(&db, &chooser, &cfg, &mut rng).await?;
        if p == PHASE_MEASURE && phase.load(Ordering::Relaxed) == PHASE_MEASURE {
            stats.count(&done, started);
        }
    }
}

/// The open loop: Poisson arrivals at `rate` a second, each transaction a
/// task of its own, at most `cap` in flight. Returns the stats of every
/// transaction that arrived and finished inside the measured phase.
async fn open_loop(
    db: Arc<Db>,
    phase: Arc<AtomicU8>,
    chooser: Arc<KeyChooser>,
    cfg: YcsbConfig,
    rate: f64,
    cap: usize,
) -> Result<WorkerStats, String> {
    let mut rng = worker_rng(cfg.seed, u64::MAX);
    let gap = rand_distr::Exp::new(rate).map_err(|e| e.to_string())?;
    let slots = Arc::new(tokio::sync::Semaphore::new(cap));
    let mut tasks = tokio::task::JoinSet::new();
    let mut stats = WorkerStats::new();
    let mut next = Instant::now();
    let mut n: u64 = 0;
    loop {
        // Collect what finished, so the set does not grow with the run.
        while let Some(r) = tasks.try_join_next() {
            stats.merge(&r.map_err(|e| e.to_string())??);
        }
        let p = phase.load(Ordering::Relaxed);
        if p == PHASE_STOP {
            break;
        }
        // The timer wakes at most once a millisecond: start every arrival
        // due by then, each with its own scheduled instant.
        tokio::time::sleep_until(next.into()).await;
        let now = Instant::now();
        while next <= now {
            let arrival = next;
            next += Duration::from_secs_f64(rand_distr::Distribution::sample(&gap, &mut rng));
            n += 1;
            let permit = slots.clone().acquire_owned().await.map_err(|e| e.to_string())?;
            let (db, phase, chooser, cfg) =
                (db.clone(), phase.clone(), chooser.clone(), cfg.clone());
            let mut trng = worker_rng(cfg.seed, n);
            tasks.spawn(async move {
                let _permit = permit;
                let p = phase.load(Ordering::Relaxed);
                let mut stats = WorkerStats::new();
                let done = one_txn(&db, &chooser, &cfg, &mut trng).await?;
                if p == PHASE_MEASURE && phase.load(Ordering::Relaxed) == PHASE_MEASURE {
                    stats.count(&done, arrival);
                }
                Ok::<_, String>(stats)
            });
        }
    }
    while let Some(r) = tasks.join_next().await {
        stats.merge(&r.map_err(|e| e.to_string())??);
    }
    Ok(stats)
}

/// What one transaction did: its kind (0 read-only, 1 read-modify-write),
/// when it entered commit, and when it was durable (`None`: aborted).
struct Done {
    kind: usize,
    precommit: Instant,
    acked: Option<Instant>,
}

trait Count {
    fn count(&mut self, done: &Done, origin: Instant);
    fn merge(&mut self, other: &WorkerStats);
}

impl Count for WorkerStats {
    /// Count `done`, its latency from `origin` (its start, or its
    /// scheduled arrival in open loop).
    fn count(&mut self, done: &Done, origin: Instant) {
        let Some(acked) = done.acked else {
            self.aborted[done.kind] += 1;
            return;
        };
        self.committed[done.kind] += 1;
        let _ = self.txn_ns.record((acked - origin).as_nanos().max(1) as u64);
        if done.kind == 1 {
            let _ = self.commit_ns.record((acked - done.precommit).as_nanos().max(1) as u64);
        }
    }

    fn merge(&mut self, s: &WorkerStats) {
        for k in 0..2 {
            self.committed[k] += s.committed[k];
            self.aborted[k] += s.aborted[k];
        }
        self.txn_ns.add(&s.txn_ns).expect("same bounds");
        self.commit_ns.add(&s.commit_ns).expect("same bounds");
    }
}

/// One YCSB transaction through SlateDB, to `await_durable`.
async fn one_txn(
    db: &Db,
    chooser: &KeyChooser,
    cfg: &YcsbConfig,
    rng: &mut rand::rngs::SmallRng,
) -> Result<Done, String> {
    let rmw = rng.random::<f64>() >= cfg.workload.read_fraction();
    let kind = usize::from(rmw);
    let txn = db.begin(IsolationLevel::Snapshot).map_err(|e| e.to_string())?;
    let mut failed = None;
    for _ in 0..cfg.ops_per_txn {
        let id = chooser.next(rng);
        let k = key(id);
        let v = match txn.get(&k).await {
            Ok(Some(v)) => v,
            Ok(None) => return Err(format!("SlateDB lost record {id}")),
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
        if rmw {
            let mut record = v.to_vec();
            let field = rng.random_range(1..FIELDS);
            let value: u64 = rng.random();
            record[field * FIELD_BYTES..(field + 1) * FIELD_BYTES]
                .copy_from_slice(&value.to_le_bytes());
            if let Err(e) = txn.put(k, record) {
                failed = Some(e);
                break;
            }
        }
    }
    let precommit = Instant::now();
    let result = match failed {
        Some(e) => Err(e),
        None => match txn.commit().await {
            Ok(Some(handle)) => handle.await_durable().await,
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => Ok(Done { kind, precommit, acked: Some(Instant::now()) }),
        Err(e) if e.kind() == ErrorKind::Transaction => Ok(Done { kind, precommit, acked: None }),
        Err(e) => Err(format!("SlateDB transaction failed: {e}")),
    }
}
