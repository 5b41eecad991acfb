//! YCSB as the Milliscale paper runs it (§5.1): a table of 80-byte records
//! (ten 8-byte fields; field 0 holds the record's key), transactions of
//! `ops_per_txn` operations that are either all point reads or all
//! read-modify-writes (read the record, rewrite one random field 1..=9 with
//! `update_range`). Workloads mix the two kinds: A 50/50, B 95/5, C 100/0,
//! U 0/100.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use milliscale::{CommitAck, Database, Error, Isolation, Table, TxnOptions};
use rand::Rng;
use rand::rngs::SmallRng;

use crate::harness::{
    LogWindow, PHASE_MEASURE, PHASE_STOP, PHASE_WARMUP, Pacer, Pacing, Pending, Shape, drive,
    worker_rng,
};
use crate::keys::{KeyChooser, KeyDist};
use crate::report::{Environment, KindStats, Percentiles, Report};
use crate::variant::LogSettings;

pub const FIELDS: usize = 10;
pub const FIELD_BYTES: usize = 8;
pub const RECORD_BYTES: usize = FIELDS * FIELD_BYTES;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    A,
    B,
    C,
    U,
}

impl Workload {
    /// Fraction of transactions that are read-only.
    pub fn read_fraction(self) -> f64 {
        match self {
            Workload::A => 0.5,
            Workload::B => 0.95,
            Workload::C => 1.0,
            Workload::U => 0.0,
        }
    }
}

/// What executes the operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// The milliscale engine: transactions, MVCC, the works.
    Milliscale,
    /// The same key stream as bare lookups on the engine's index type
    /// (`scc::TreeIndex`), no transactions: the ceiling for workload C.
    RawIndex,
}

#[derive(Debug, Clone)]
pub struct YcsbConfig {
    pub records: u64,
    pub threads: usize,
    pub duration: Duration,
    pub warmup: Duration,
    pub workload: Workload,
    pub dist: KeyDist,
    pub ops_per_txn: usize,
    /// The log: stores, groups, buffers, tracking (see `variant`).
    pub log: LogSettings,
    /// The variant the log settings started from, for the report.
    pub variant: String,
    pub isolation: Isolation,
    pub engine: Engine,
    pub seed: u64,
    /// Closed loop, or open loop at a rate (latency then runs from each
    /// transaction's arrival to its acknowledgment).
    pub pacing: Pacing,
    /// Draw a progress bar on stderr (only if it is a terminal).
    pub progress: bool,
    /// Run a read replica beside the writer (`replica_bench`).
    pub replica: Option<crate::replica_bench::ReplicaConfig>,
}

impl YcsbConfig {
    fn describe(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert("records".into(), self.records.to_string());
        m.insert("workload".into(), format!("{:?}", self.workload).to_lowercase());
        let dist = match self.dist {
            KeyDist::Uniform => "uniform".to_owned(),
            KeyDist::Zipfian { theta } => format!("zipfian({theta})"),
        };
        m.insert("dist".into(), dist);
        m.insert("ops_per_txn".into(), self.ops_per_txn.to_string());
        m.insert("variant".into(), self.variant.clone());
        self.log.describe_into(&mut m);
        m.insert("isolation".into(), format!("{:?}", self.isolation).to_lowercase());
        m.insert("warmup_s".into(), self.warmup.as_secs_f64().to_string());
        m.insert("seed".into(), self.seed.to_string());
        if let Pacing::Open { rate } = self.pacing {
            m.insert("pacing".into(), format!("open({rate}/s)"));
        }
        m
    }

    fn shape(&self) -> Shape {
        Shape {
            threads: self.threads,
            warmup: self.warmup,
            duration: self.duration,
            progress: self.progress,
        }
    }

    fn validate(&self) -> Result<(), String> {
        if self.threads == 0 || self.threads > 1024 {
            return Err(format!("threads must be in 1..=1024, got {}", self.threads));
        }
        if self.ops_per_txn == 0 || self.ops_per_txn > 10_000 {
            return Err(format!("ops-per-txn must be in 1..=10000, got {}", self.ops_per_txn));
        }
        if self.duration.is_zero() {
            return Err("duration must be positive".into());
        }
        if self.engine == Engine::RawIndex && self.workload != Workload::C {
            return Err("the raw-index engine only runs lookups: use --workload c".into());
        }
        Ok(())
    }
}

/// Per-worker results by kind (0 read-only, 1 read-modify-write), merged
/// at the end. The SlateDB peer keeps the same.
pub struct WorkerStats {
    pub committed: [u64; 2],
    pub aborted: [u64; 2],
    pub txn_ns: Histogram<u64>,
    pub commit_ns: Histogram<u64>,
}

impl Default for WorkerStats {
    fn default() -> WorkerStats {
        WorkerStats::new()
    }
}

impl WorkerStats {
    pub fn new() -> WorkerStats {
        WorkerStats {
            committed: [0; 2],
            aborted: [0; 2],
            txn_ns: new_histogram(),
            commit_ns: new_histogram(),
        }
    }
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds")
}

fn key_bytes(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

/// The initial value of record `id`.
pub fn initial_record(id: u64) -> [u8; RECORD_BYTES] {
    let mut r = [0u8; RECORD_BYTES];
    for (f, chunk) in r.chunks_exact_mut(FIELD_BYTES).enumerate() {
        chunk.copy_from_slice(&id.wrapping_mul(f as u64 + 1).to_le_bytes());
    }
    r
}

fn load(db: &Database, table: &Table, cfg: &YcsbConfig) -> Result<(), Error> {
    const BATCH: u64 = 1_000;
    let threads = cfg.threads as u64;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|w| {
                s.spawn(move || -> Result<(), Error> {
                    let mut start = w * BATCH;
                    let mut last = None;
                    while start < cfg.records {
                        let end = (start + BATCH).min(cfg.records);
                        let mut tx = db.begin()?;
                        for id in start..end {
                            tx.put(table, &key_bytes(id), &initial_record(id))?;
                        }
                        // Pipelined: the next batch does not wait for this
                        // one to be durable; the last ack covers them all
                        // (a later commit of one thread has a later CSN in
                        // the same group).
                        last = Some(tx.commit()?);
                        start += threads * BATCH;
                    }
                    last.map_or(Ok(()), |a| a.wait().map(|_| ()))
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().expect("loader thread panicked"))
    })
}

/// Run the benchmark and produce its report.
pub fn run(cfg: &YcsbConfig) -> Result<Report, String> {
    if cfg.replica.is_some_and(|r| r.pin) {
        crate::replica_bench::cores();
        // On a thread of its own, pinned to the writer's core: the
        // writer's threads inherit the pin and this thread's end drops it.
        return std::thread::scope(|s| {
            s.spawn(|| {
                crate::replica_bench::pin_current(crate::replica_bench::WRITER_CORE)?;
                run_here(cfg)
            })
            .join()
            .map_err(|_| "the pinned benchmark panicked".to_string())?
        });
    }
    run_here(cfg)
}

fn run_here(cfg: &YcsbConfig) -> Result<Report, String> {
    cfg.validate()?;
    let chooser = KeyChooser::new(cfg.records, cfg.dist)?;
    let phase = AtomicU8::new(PHASE_WARMUP);
    let mut notes = Vec::new();
    let mut extra = BTreeMap::new();
    let mut log_report = None;
    let (stats, measured) = match cfg.engine {
        Engine::Milliscale if cfg.log.pages.is_some() => {
            let (stats, measured, x, latency) = run_pages(cfg, &chooser, &phase, &mut notes)?;
            extra = x;
            let mut report = build_report(cfg, stats, measured, notes);
            report.extra = extra;
            report.commit_latency = latency;
            return Ok(report);
        }
        Engine::Milliscale => {
            let mut log = cfg.log.clone();
            log.seed_sims(cfg.seed);
            let mut opts = log.options(cfg.threads).isolation(cfg.isolation);
            if cfg.replica.is_some() {
                // One handle per store, shared with the replica.
                opts = opts.open_stores().map_err(|e| e.to_string())?;
            }
            let db = Database::open(opts.clone()).map_err(|e| e.to_string())?;
            if let Some(r) = db.recovery_report() {
                return Err(format!(
                    "the store already holds a database (epoch {}, tables {:?}); YCSB loads \
                     fresh data, so give it an empty bucket, prefix or directory",
                    r.old_epoch,
                    db.table_names()
                ));
            }
            if !cfg.log.is_logged() {
                notes.push("store none: no log; a commit is acknowledged at pre-commit".into());
            }
            for st in db.log_metrics().map(|m| m.stores).unwrap_or_default() {
                if let Some(why) = st.put_reason {
                    notes.push(format!("{}: one object per flush: {why}", st.name));
                }
            }
            let table = db.create_table("usertable").map_err(|e| e.to_string())?;
            let t0 = Instant::now();
            load(&db, &table, cfg).map_err(|e| format!("load failed: {e}"))?;
            notes.push(format!(
                "loaded {} records in {:.2} s",
                cfg.records,
                t0.elapsed().as_secs_f64()
            ));
            let replica = match cfg.replica {
                Some(rc) => Some(crate::replica_bench::ReplicaRun::open(&db, &opts, &rc)?),
                None => None,
            };
            let window = LogWindow::new(&db);
            // Checkpoint cost over the measured window: the background column.
            let background = parking_lot::Mutex::new(Vec::new());
            let offered = parking_lot::Mutex::new(None);
            let (stats, measured) = std::thread::scope(|s| {
                if let Some(r) = &replica {
                    s.spawn(|| r.probe(&db));
                    if cfg.log.checkpoint_offload {
                        // The writer adopts what the replica offers.
                        s.spawn(|| *offered.lock() = Some(r.offer_loop()));
                    }
                }
                let out = drive(
                    &cfg.shape(),
                    &phase,
                    |w| engine_worker(&db, &table, cfg, &chooser, &phase, w),
                    |p| {
                        window.at(p);
                        let c = db.checkpoint_stats();
                        background.lock().push((c.cost_usd.unwrap_or(0.0), c.checkpoints));
                        if let Some(r) = &replica {
                            r.mark(&db, p == PHASE_MEASURE);
                        }
                    },
                );
                if let Some(r) = &replica {
                    r.stop();
                }
                out
            })?;
            if let (Some(r), Some(rc)) = (&replica, cfg.replica) {
                let (readers, secs) = (rc.readers, rc.read_for);
                let reads = if readers > 0 && !secs.is_zero() {
                    Some(r.read_throughput(
                        &chooser,
                        cfg.ops_per_txn,
                        readers,
                        secs,
                        cfg.seed,
                        |id| key_bytes(id).to_vec(),
                    )?)
                } else {
                    None
                };
                let (x, note) = r.report(&db, reads);
                extra.extend(x);
                notes.push(note);
            }
            if let Some((n, busy)) = offered.into_inner() {
                notes.push(format!(
                    "checkpoint offload: the replica offered {n} checkpoints (when the writer \
                     wanted one; {:.2} s building them); the writer adopted {}",
                    busy.as_secs_f64(),
                    db.checkpoint_stats().adopted
                ));
            }
            let committed: u64 = stats.iter().map(|s| s.committed[0] + s.committed[1]).sum();
            log_report = window.report(measured.0, committed);
            if let (Some(l), [before, after]) = (&log_report, background.lock().as_slice()) {
                let per_1000 =
                    |usd: f64| if committed == 0 { 0.0 } else { usd / committed as f64 * 1000.0 };
                let bg = per_1000(after.0 - before.0);
                // Checkpoints that finished inside the measured window.
                extra.insert("checkpoints".to_owned(), (after.1 - before.1) as f64);
                extra.insert("background_usd_per_1000_txn".to_owned(), bg);
                extra.insert("foreground_usd_per_1000_txn".to_owned(), l.0.usd_per_1000_txn - bg);
                extra.insert("usd_per_1000_txn".to_owned(), l.0.usd_per_1000_txn);
            }
            let c = db.checkpoint_stats();
            if c.checkpoints > 0 {
                // The store's accounting counts the checkpoints' requests
                // too: this is the background column, the rest foreground.
                notes.push(format!(
                    "background: {} checkpoints since open ({} rows in the last), {} PUT-class \
                     requests, {} deletes, {} bytes up, {}; the store's $ above includes them",
                    c.checkpoints,
                    c.last_rows,
                    c.put_requests,
                    c.delete_requests,
                    c.bytes_uploaded,
                    c.cost_usd.map_or("no price table".into(), |usd| format!(
                        "${usd:.6} (${:.8} per 1,000 measured txns)",
                        if committed == 0 { 0.0 } else { usd / committed as f64 * 1000.0 }
                    ))
                ));
            }
            (stats, measured)
        }
        Engine::RawIndex => {
            let tree = scc::TreeIndex::<milliscale::raw::IndexKey, u64>::new();
            for id in 0..cfg.records {
                let _ = tree.insert_sync(milliscale::raw::IndexKey::from_slice(&key_bytes(id)), id);
            }
            drive(&cfg.shape(), &phase, |w| raw_worker(&tree, cfg, &chooser, &phase, w), |_| {})?
        }
    };
    let mut report = build_report(cfg, stats, measured, notes);
    report.extra = extra;
    if let Some(l) = log_report {
        report.commit_latency = l.1;
        report.log = Some(l.0);
        report.notes.push(
            "commit latency: pre-commit to acknowledgment of read-write transactions, measured by the committer; workers do not wait (pipelined commit)"
                .into(),
        );
        report.notes.push(match cfg.pacing {
            Pacing::Closed => "txn latency: begin to pre-commit (closed loop; the ack comes later, see commit latency)".into(),
            Pacing::Open { rate } => format!(
                "txn latency: arrival to acknowledgment (open loop, Poisson arrivals at {rate}/s; queueing counts)"
            ),
        });
    }
    Ok(report)
}

/// What one unit of a worker's work did.
enum Step {
    /// `ack`: the commit's acknowledgment, for open-loop latency (None
    /// when there is nothing to wait for).
    Committed {
        kind: usize,
        started: Instant,
        precommit: Instant,
        ack: Option<CommitAck>,
    },
    Aborted {
        kind: usize,
    },
}

/// The worker loop shared by every engine: run `step` until the stop
/// phase, and record what it did while the measure phase lasts.
fn run_worker(
    cfg: &YcsbConfig,
    phase: &AtomicU8,
    w: u64,
    mut step: impl FnMut(&mut SmallRng) -> Result<Step, String>,
) -> Result<WorkerStats, String> {
    let mut rng = worker_rng(cfg.seed, w);
    let mut stats = WorkerStats::new();
    let mut pacer = Pacer::new(cfg.pacing, cfg.threads)?;
    let open = cfg.pacing != Pacing::Closed;
    // Open loop: commits whose ack the worker has not seen yet, with their
    // arrival times.
    let mut pending = Pending::default();
    loop {
        let p = phase.load(Ordering::Relaxed);
        if p == PHASE_STOP {
            break;
        }
        let txn_ns = &mut stats.txn_ns;
        let arrival = pacer.next_arrival_tracking(&mut rng, &mut pending, |_, ns| {
            let _ = txn_ns.record(ns);
        });
        let done = step(&mut rng)?;
        // Count only work that started and ended inside the measured phase.
        if p == PHASE_MEASURE && phase.load(Ordering::Relaxed) == PHASE_MEASURE {
            match done {
                Step::Committed { kind, started, precommit, ack } => {
                    stats.committed[kind] += 1;
                    let acked = Instant::now();
                    let _ = stats.commit_ns.record((acked - precommit).as_nanos().max(1) as u64);
                    match ack {
                        Some(ack) if open => pending.push(kind, arrival, ack),
                        _ => {
                            let origin = if open { arrival } else { started };
                            let _ = stats.txn_ns.record((acked - origin).as_nanos().max(1) as u64);
                        }
                    }
                }
                Step::Aborted { kind } => stats.aborted[kind] += 1,
            }
        }
        let txn_ns = &mut stats.txn_ns;
        pending.poll(|_, ns| {
            let _ = txn_ns.record(ns);
        });
    }
    let txn_ns = &mut stats.txn_ns;
    pending
        .finish(|_, ns| {
            let _ = txn_ns.record(ns);
        })
        .map_err(|e| format!("a commit failed: {e}"))?;
    Ok(stats)
}

fn engine_worker(
    db: &Database,
    table: &Table,
    cfg: &YcsbConfig,
    chooser: &KeyChooser,
    phase: &AtomicU8,
    w: u64,
) -> Result<WorkerStats, String> {
    let read_fraction = cfg.workload.read_fraction();
    let mut keys = vec![0u64; cfg.ops_per_txn];
    run_worker(cfg, phase, w, |rng| {
        let rmw = rng.random::<f64>() >= read_fraction;
        for k in keys.iter_mut() {
            *k = chooser.next(rng);
        }
        let kind = usize::from(rmw);
        let started = Instant::now();
        match one_txn(db, table, cfg, rmw, &keys, rng) {
            Ok((precommit, ack)) => Ok(Step::Committed { kind, started, precommit, ack }),
            Err(Error::Conflict(_)) => Ok(Step::Aborted { kind }),
            Err(e) => Err(format!("transaction failed: {e}")),
        }
    })
}

/// One YCSB transaction; returns the instant it entered pre-commit.
fn one_txn(
    db: &Database,
    table: &Table,
    cfg: &YcsbConfig,
    rmw: bool,
    keys: &[u64],
    rng: &mut SmallRng,
) -> Result<(Instant, Option<CommitAck>), Error> {
    let opts = TxnOptions { isolation: Some(cfg.isolation), read_only: !rmw, ..Default::default() };
    let mut tx = db.begin_with(opts)?;
    // Reads copy the record out, as a client would, into a reused buffer.
    let mut record = [0u8; RECORD_BYTES];
    for &id in keys {
        let key = key_bytes(id);
        let found = tx.get_with(table, &key, |v| record.copy_from_slice(v))?;
        if found.is_none() {
            return Err(Error::InvalidArgument(format!("record {id} is missing")));
        }
        std::hint::black_box(&record);
        if rmw {
            let field = rng.random_range(1..FIELDS);
            let value: u64 = rng.random();
            tx.update_range(table, &key, field * FIELD_BYTES, &value.to_le_bytes())?;
        }
    }
    let precommit = Instant::now();
    let ack = tx.commit()?;
    if !cfg.log.is_logged() {
        ack.wait()?; // resolved at once without a log
        return Ok((precommit, None));
    }
    // With a log the worker goes on (pipelined commit): the committer
    // acknowledges the transaction and measures its commit latency.
    Ok((precommit, Some(ack)))
}

/// `--variant naive-pages|atomic-pages`: the transactions run in the
/// engine's memory with no log; each read-write transaction is made
/// durable by `milliscale::pages` on the first store, by the committing
/// worker (seed 003: the commit is complete when its PUTs are). Returns
/// the workers' stats, the cost split and the commit latency of read-write
/// transactions (pre-commit to the last PUT's answer).
#[allow(clippy::type_complexity)]
fn run_pages(
    cfg: &YcsbConfig,
    chooser: &KeyChooser,
    phase: &AtomicU8,
    notes: &mut Vec<String>,
) -> Result<
    (
        Vec<WorkerStats>,
        (Duration, Option<crate::report::MemoryReport>),
        BTreeMap<String, f64>,
        Percentiles,
    ),
    String,
> {
    use milliscale::pages::{PageProtocol, PageStore};
    let protocol = cfg.log.pages.expect("a page variant");
    let mut log = cfg.log.clone();
    log.seed_sims(cfg.seed);
    let url = log.stores.first().ok_or("the page variants need a store (--store)")?;
    let store = objstore::open(url).map_err(|e| format!("{url}: {e}"))?;
    // The fourth paper's pages were 100 KB.
    const PAGE_BYTES: u64 = 100 * 1024;
    let entry = (8 + 14 + RECORD_BYTES) as u64;
    let page_count = u32::try_from((cfg.records * entry).div_ceil(PAGE_BYTES).max(1))
        .map_err(|_| "too many records for the page store")?;
    let pages =
        PageStore::new(store.clone(), protocol, page_count, "bench").map_err(|e| e.to_string())?;
    let db = Database::open(
        LogSettings { stores: vec!["none".into()], ..LogSettings::default() }
            .options(cfg.threads)
            .isolation(cfg.isolation),
    )
    .map_err(|e| e.to_string())?;
    let table = db.create_table("usertable").map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    load(&db, &table, cfg).map_err(|e| format!("load failed: {e}"))?;
    pages
        .load((0..cfg.records).map(|id| (key_bytes(id).to_vec(), initial_record(id).to_vec())), 32)
        .map_err(|e| format!("page load failed: {e}"))?;
    notes.push(format!(
        "page-at-commit ({protocol}, seed 003): no log; {} records on {page_count} pages of \
         about {} KB in {url}, loaded in {:.2} s; the client caches every page, so a naive \
         commit is PUTs only, sent one after the other as in the paper",
        cfg.records,
        PAGE_BYTES / 1024,
        t0.elapsed().as_secs_f64()
    ));
    let interval = cfg.log.checkpoint_interval;
    let commit_ns = parking_lot::Mutex::new(new_histogram());
    let window = parking_lot::Mutex::new(Vec::new());
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (driven, checkpoint_failures) = std::thread::scope(|s| {
        let checkpointer = (protocol == PageProtocol::Atomic).then(|| {
            s.spawn(|| -> (u64, Option<String>) {
                let every = interval.unwrap_or(Duration::from_secs(15));
                let mut next = Instant::now() + every;
                let (mut failed, mut last) = (0, None);
                while !stop.load(Ordering::Relaxed) {
                    if Instant::now() >= next {
                        if let Err(e) = pages.checkpoint() {
                            failed += 1;
                            last = Some(e.to_string());
                        }
                        next += every;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                (failed, last)
            })
        });
        let out = drive(
            &cfg.shape(),
            phase,
            |w| pages_worker(&db, &table, &pages, cfg, chooser, phase, &commit_ns, w),
            |p| {
                if p == PHASE_MEASURE {
                    pages.reset_latency();
                }
                window.lock().push(pages.stats());
            },
        );
        stop.store(true, Ordering::Relaxed);
        let failed = checkpointer.map(|c| c.join().expect("checkpointer panicked"));
        (out, failed)
    });
    let (stats, measured) = driven?;
    if let Some((n, Some(last))) = checkpoint_failures {
        notes.push(format!(
            "{n} page checkpoints failed, each retried at the next interval; the last: {last}"
        ));
    }
    let committed: u64 = stats.iter().map(|s| s.committed[0] + s.committed[1]).sum();
    let mut extra = BTreeMap::new();
    if let [before, after] = window.lock().as_slice() {
        let per_1000 =
            |usd: f64| if committed == 0 { 0.0 } else { usd / committed as f64 * 1000.0 };
        let fg = per_1000(after.foreground.cost_usd - before.foreground.cost_usd);
        let bg = per_1000(after.background.cost_usd - before.background.cost_usd);
        extra.insert("foreground_usd_per_1000_txn".to_owned(), fg);
        extra.insert("background_usd_per_1000_txn".to_owned(), bg);
        extra.insert("usd_per_1000_txn".to_owned(), fg + bg);
        let reqs =
            |r: &objstore::sim::accounting::AccountingReport| (r.put_class + r.get_class) as f64;
        extra.insert(
            "foreground_requests_per_txn".to_owned(),
            (reqs(&after.foreground) - reqs(&before.foreground)) / committed.max(1) as f64,
        );
        extra.insert(
            "background_requests_per_txn".to_owned(),
            (reqs(&after.background) - reqs(&before.background)) / committed.max(1) as f64,
        );
        extra.insert("checkpoints".to_owned(), (after.checkpoints - before.checkpoints) as f64);
        if let Some(w) = after.commit_writes {
            extra.insert("store_write_p50_us".to_owned(), w.p50_us as f64);
            extra.insert("store_write_p99_us".to_owned(), w.p99_us as f64);
            extra.insert("store_write_p999_us".to_owned(), w.p999_us as f64);
            notes.push(format!(
                "the store's own commit writes: {} requests, p50 {:.1} ms, p99 {:.1} ms, p99.9 \
                 {:.1} ms, max {:.1} ms",
                w.count,
                w.p50_us as f64 / 1e3,
                w.p99_us as f64 / 1e3,
                w.p999_us as f64 / 1e3,
                w.max_us as f64 / 1e3
            ));
        }
        let p = after.foreground.prices;
        notes.push(format!(
            "$ per 1,000 transactions: {:.6} foreground (commits) + {:.6} background \
             (checkpoints) = {:.6}, at ${}/M PUT, ${}/M GET, ${}/GB up, ${}/GB down",
            fg,
            bg,
            fg + bg,
            p.put_per_million,
            p.get_per_million,
            p.upload_per_gb,
            p.download_per_gb
        ));
    }
    let latency = Percentiles::from_nanos(&commit_ns.into_inner());
    notes.push(
        "commit latency: read-write transactions, pre-commit to the answer of the commit's last \
         PUT (the worker waits: the commit protocol is synchronous)"
            .into(),
    );
    Ok((stats, measured, extra, latency))
}

#[allow(clippy::too_many_arguments)]
fn pages_worker(
    db: &Database,
    table: &Table,
    pages: &milliscale::pages::PageStore,
    cfg: &YcsbConfig,
    chooser: &KeyChooser,
    phase: &AtomicU8,
    commit_ns: &parking_lot::Mutex<Histogram<u64>>,
    w: u64,
) -> Result<WorkerStats, String> {
    let read_fraction = cfg.workload.read_fraction();
    let mut keys = vec![0u64; cfg.ops_per_txn];
    let mut mine = new_histogram();
    let out = run_worker(cfg, phase, w, |rng| {
        let rmw = rng.random::<f64>() >= read_fraction;
        for k in keys.iter_mut() {
            *k = chooser.next(rng);
        }
        let kind = usize::from(rmw);
        let started = Instant::now();
        let opts =
            TxnOptions { isolation: Some(cfg.isolation), read_only: !rmw, ..Default::default() };
        type Writes = Vec<(Vec<u8>, Vec<u8>)>;
        let mut run = || -> Result<(Instant, Writes, Option<u64>), Error> {
            let mut tx = db.begin_with(opts)?;
            let mut writes = Vec::new();
            for &id in &keys {
                let key = key_bytes(id);
                let mut record = [0u8; RECORD_BYTES];
                if tx.get_with(table, &key, |v| record.copy_from_slice(v))?.is_none() {
                    return Err(Error::InvalidArgument(format!("record {id} is missing")));
                }
                if rmw {
                    let field = rng.random_range(1..FIELDS);
                    let value: u64 = rng.random();
                    tx.update_range(table, &key, field * FIELD_BYTES, &value.to_le_bytes())?;
                    record[field * FIELD_BYTES..][..FIELD_BYTES]
                        .copy_from_slice(&value.to_le_bytes());
                    writes.push((key.to_vec(), record.to_vec()));
                }
            }
            let precommit = Instant::now();
            let info = tx.commit()?.wait()?; // no log: resolved at once
            Ok((precommit, writes, info.csn))
        };
        match run() {
            Ok((precommit, writes, csn)) => {
                if let Some(csn) = csn {
                    pages.commit(csn, &writes).map_err(|e| format!("page commit failed: {e}"))?;
                    if phase.load(Ordering::Relaxed) == PHASE_MEASURE {
                        let _ = mine.record(precommit.elapsed().as_nanos().max(1) as u64);
                    }
                }
                Ok(Step::Committed { kind, started, precommit, ack: None })
            }
            Err(Error::Conflict(_)) => Ok(Step::Aborted { kind }),
            Err(e) => Err(format!("transaction failed: {e}")),
        }
    });
    commit_ns.lock().add(&mine).expect("same bounds");
    out
}

fn raw_worker(
    tree: &scc::TreeIndex<milliscale::raw::IndexKey, u64>,
    cfg: &YcsbConfig,
    chooser: &KeyChooser,
    phase: &AtomicU8,
    w: u64,
) -> Result<WorkerStats, String> {
    run_worker(cfg, phase, w, |rng| {
        let started = Instant::now();
        for _ in 0..cfg.ops_per_txn {
            let key = key_bytes(chooser.next(rng));
            let guard = scc::Guard::new();
            let v = tree.peek(&milliscale::raw::KeyQuery(&key), &guard).copied();
            if v.is_none() {
                return Err("raw index lost a key".into());
            }
            std::hint::black_box(v);
        }
        // No commit: "pre-commit" is the end of the lookups.
        Ok(Step::Committed { kind: 0, started, precommit: Instant::now(), ack: None })
    })
}

fn build_report(
    cfg: &YcsbConfig,
    stats: Vec<WorkerStats>,
    (measured, memory): (Duration, Option<crate::report::MemoryReport>),
    notes: Vec<String>,
) -> Report {
    let mut all = WorkerStats::new();
    for s in &stats {
        for k in 0..2 {
            all.committed[k] += s.committed[k];
            all.aborted[k] += s.aborted[k];
        }
        all.txn_ns.add(&s.txn_ns).expect("same bounds");
        all.commit_ns.add(&s.commit_ns).expect("same bounds");
    }
    let committed: u64 = all.committed.iter().sum();
    let aborted: u64 = all.aborted.iter().sum();
    let secs = measured.as_secs_f64();
    let operations = committed * cfg.ops_per_txn as u64;
    let mut by_kind = BTreeMap::new();
    by_kind.insert(
        "read-only".to_owned(),
        KindStats { committed: all.committed[0], aborted: all.aborted[0] },
    );
    if cfg.engine == Engine::Milliscale {
        by_kind.insert(
            "read-modify-write".to_owned(),
            KindStats { committed: all.committed[1], aborted: all.aborted[1] },
        );
    }
    Report {
        benchmark: "ycsb".into(),
        engine: match cfg.engine {
            Engine::Milliscale => "milliscale".into(),
            Engine::RawIndex => "raw-index".into(),
        },
        config: cfg.describe(),
        env: Environment::detect(),
        threads: cfg.threads,
        duration_s: secs,
        committed,
        aborted,
        operations,
        txn_per_s: committed as f64 / secs,
        ops_per_s: operations as f64 / secs,
        abort_rate: crate::report::abort_rate(committed, aborted),
        txn_latency: Percentiles::from_nanos(&all.txn_ns),
        commit_latency: Percentiles::from_nanos(&all.commit_ns),
        by_kind,
        latency_by_kind: BTreeMap::new(),
        extra: BTreeMap::new(),
        memory,
        log: None,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn cfg(workload: Workload, dist: KeyDist) -> YcsbConfig {
        YcsbConfig {
            records: 2_000,
            threads: 2,
            duration: Duration::from_millis(300),
            warmup: Duration::from_millis(50),
            workload,
            dist,
            ops_per_txn: 10,
            log: LogSettings { stores: vec!["none".into()], ..LogSettings::default() },
            variant: "none".into(),
            isolation: Isolation::Snapshot,
            engine: Engine::Milliscale,
            seed: 7,
            pacing: Pacing::Closed,
            progress: false,
            replica: None,
        }
    }

    #[test]
    fn every_workload_commits_and_reports() {
        for w in [Workload::A, Workload::B, Workload::C, Workload::U] {
            let r = run(&cfg(w, KeyDist::Zipfian { theta: 0.99 })).expect("run");
            assert!(r.committed > 0, "{w:?} committed nothing");
            assert_eq!(r.operations, r.committed * 10);
            let rmw = r.by_kind["read-modify-write"].committed;
            match w {
                Workload::C => assert_eq!(rmw, 0),
                Workload::U => assert_eq!(r.by_kind["read-only"].committed, 0),
                _ => assert!(rmw > 0),
            }
            assert!(r.txn_latency.count == r.committed);
            let row = r.csv_row();
            assert_eq!(row.split(',').count(), Report::CSV_HEADER.split(',').count());
            let json: serde_json::Value = serde_json::from_str(&r.to_json()).expect("valid json");
            assert_eq!(json["committed"].as_u64(), Some(r.committed));
        }
    }

    /// Open loop: about the offered rate is committed, and every committed
    /// transaction's latency runs to its acknowledgment (it includes the
    /// log's flush, so it cannot be microseconds).
    #[test]
    fn open_loop_commits_at_the_rate_and_waits_for_acks() {
        let mut c = cfg(Workload::U, KeyDist::Uniform);
        c.log = LogSettings { stores: vec!["memory://".into()], ..LogSettings::default() };
        c.duration = Duration::from_secs(1);
        c.pacing = Pacing::Open { rate: 400.0 };
        let r = run(&c).expect("run");
        assert!((250.0..550.0).contains(&r.txn_per_s), "{} txn/s", r.txn_per_s);
        assert_eq!(r.txn_latency.count, r.committed, "every commit's ack was seen");
        // The log flushes every 10 ms (or when full): an ack takes at least
        // part of that, so a p50 under 100 µs would mean pre-commit was timed.
        assert!(r.txn_latency.p50_us > 100.0, "{:?}", r.txn_latency);
        assert!(r.notes.iter().any(|n| n.contains("arrival to acknowledgment")));
    }

    #[test]
    fn raw_index_runs_only_lookups() {
        let mut c = cfg(Workload::C, KeyDist::Uniform);
        c.engine = Engine::RawIndex;
        assert!(run(&c).expect("run").committed > 0);
        c.workload = Workload::A;
        assert!(run(&c).is_err());
    }

    #[test]
    fn bad_configs_are_refused() {
        let mut c = cfg(Workload::A, KeyDist::Uniform);
        c.threads = 0;
        assert!(run(&c).is_err());
        let mut c = cfg(Workload::A, KeyDist::Uniform);
        c.records = 0;
        assert!(run(&c).is_err());
        let mut c = cfg(Workload::A, KeyDist::Uniform);
        c.log.stores = vec!["ftp://nowhere".into()];
        assert!(run(&c).is_err());
    }

    #[test]
    fn rmw_updates_change_exactly_one_field() {
        let db = Database::open(milliscale::Options::new()).expect("open");
        let t = db.create_table("usertable").expect("table");
        let c = cfg(Workload::U, KeyDist::Uniform);
        let mut c1 = c.clone();
        c1.records = 10;
        load(&db, &t, &c1).expect("load");
        let mut rng = SmallRng::seed_from_u64(3);
        one_txn(&db, &t, &c1, true, &[4], &mut rng).expect("txn");
        let after =
            db.begin().expect("begin").get(&t, &key_bytes(4)).expect("get").expect("exists");
        let before = initial_record(4);
        let changed = (0..FIELDS)
            .filter(|f| {
                after[f * FIELD_BYTES..(f + 1) * FIELD_BYTES]
                    != before[f * FIELD_BYTES..(f + 1) * FIELD_BYTES]
            })
            .count();
        assert!(changed <= 1);
        assert_eq!(after[..8], before[..8], "field 0 (the key) is never rewritten");
    }
}
