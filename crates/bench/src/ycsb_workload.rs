//! YCSB as the Milliscale paper runs it (§5.1): a table of 80-byte records
//! (ten 8-byte fields; field 0 holds the record's key), transactions of
//! `ops_per_txn` operations that are either all point reads or all
//! read-modify-writes (read the record, rewrite one random field 1..=9 with
//! `update_range`). Workloads mix the two kinds: A 50/50, B 95/5, C 100/0,
//! U 0/100.
//!
//! This module holds the workload and one worker's loop, which every way of
//! running it shares (`ycsb` on the engine's threads, `ycsb_tasks` on
//! tokio tasks, `ycsb_baselines` on a raw index or the page variants).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use milliscale::{CommitAck, Database, Error, Isolation, Table, TxnOptions};
use rand::Rng;
use rand::rngs::SmallRng;

use crate::harness::{PHASE_MEASURE, PHASE_STOP, Pacer, Pacing, Pending, Shape, worker_rng};
use crate::keys::{KeyChooser, KeyDist};
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
    /// Run this many change feeds beside the writer, each consumed on a
    /// thread of its own (`feed_bench`).
    pub feeds: usize,
    /// The writer's threads on core 0 and the feeds' on core 1 (also with
    /// no feed: the writer alone on core 0, to compare against).
    pub feeds_pin: bool,
    /// Run the workers as tokio tasks through the async API (`ycsb_tasks`).
    pub tasks: Option<Tasks>,
}

impl YcsbConfig {
    pub(crate) fn describe(&self) -> BTreeMap<String, String> {
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
        if let Some(t) = self.tasks {
            m.insert("tasks".into(), format!("{} (ack window {})", t.tasks, t.window));
        }
        if let Pacing::Open { rate } = self.pacing {
            m.insert("pacing".into(), format!("open({rate}/s)"));
        }
        m
    }

    pub(crate) fn shape(&self) -> Shape {
        Shape {
            threads: self.threads,
            warmup: self.warmup,
            duration: self.duration,
            progress: self.progress,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
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

pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds")
}

pub fn key_bytes(id: u64) -> [u8; 8] {
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

pub fn load(db: &Database, table: &Table, cfg: &YcsbConfig) -> Result<(), Error> {
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

/// What one unit of a worker's work did.
pub(crate) enum Step {
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
pub(crate) fn run_worker(
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

pub(crate) fn engine_worker(
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
pub fn one_txn(
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

/// How the async run is shaped (`bench ycsb --tasks N --ack-window K`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tasks {
    /// Concurrent tasks.
    pub tasks: usize,
    /// Acks a task may hold before it awaits the oldest (1: each commit
    /// is awaited before the next transaction begins).
    pub window: usize,
}
