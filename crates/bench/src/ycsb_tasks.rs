//! YCSB through the async API: the workers are tokio tasks, many more of
//! them than cores, on a multi-threaded runtime of `--threads` threads,
//! as a service that runs one task per request would be.
//!
//! Each task loops like a thread worker ([`super::ycsb`]): begin, the
//! transaction's reads and writes, pre-commit. Then it holds the commit's
//! ack; once it holds `window` of them it awaits the oldest (an
//! [`milliscale::Durable`] future, woken by the committer); acks already
//! acknowledged are dropped as it goes, so it holds only commits in
//! flight. `window` 1 is a request handler: it answers only once its
//! commit is durable, so a task has one transaction in flight, and N
//! tasks offer N. A large window is what a thread worker does: it drops
//! its acks and goes on. Commit latency is measured by the committer, as
//! for thread workers.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;

use hdrhistogram::Histogram;
use milliscale::{AsyncDatabase, CommitAck, Database, Error, Table, TxnOptions};
use rand::Rng;
use rand::rngs::SmallRng;

use crate::harness::{PHASE_MEASURE, PHASE_STOP, worker_rng};
use crate::keys::KeyChooser;
use crate::ycsb_workload::{
    FIELD_BYTES, FIELDS, RECORD_BYTES, Tasks, WorkerStats, YcsbConfig, key_bytes,
};

/// Transactions a task runs between yields when it does not wait.
const YIELD_EVERY: u32 = 64;

/// Run the workers as tasks on a runtime of `cfg.threads` threads until
/// `phase` says stop; their stats merged into one.
pub(crate) fn run_tasks(
    db: &Arc<Database>,
    table: &Table,
    cfg: &YcsbConfig,
    chooser: &KeyChooser,
    phase: &Arc<AtomicU8>,
    shape: Tasks,
) -> Result<WorkerStats, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.threads)
        .enable_all()
        .thread_name("ycsb-task")
        .build()
        .map_err(|e| format!("cannot start the tasks' runtime: {e}"))?;
    let db = AsyncDatabase::from(Arc::clone(db));
    // The tasks are 'static: they share what they read through Arcs. They
    // record into a few shared histograms, not one each: a thousand
    // histograms of ~100 KB each would cost the run page faults and cache
    // misses that a service's tasks do not have.
    let ctx = Arc::new(Shared {
        table: table.clone(),
        cfg: cfg.clone(),
        chooser: chooser.clone(),
        txn_ns: (0..HISTOGRAM_SHARDS)
            .map(|_| parking_lot::Mutex::new(crate::ycsb_workload::new_histogram()))
            .collect(),
    });
    rt.block_on(async {
        let handles: Vec<_> = (0..shape.tasks as u64)
            .map(|t| {
                let (db, ctx, phase) = (db.clone(), Arc::clone(&ctx), Arc::clone(phase));
                tokio::spawn(async move { task(&db, &ctx, &phase, t, shape.window).await })
            })
            .collect();
        let mut all = WorkerStats::new();
        for h in handles {
            let (committed, aborted) = h.await.map_err(|e| format!("a task panicked: {e}"))??;
            for k in 0..2 {
                all.committed[k] += committed[k];
                all.aborted[k] += aborted[k];
            }
        }
        for shard in &ctx.txn_ns {
            all.txn_ns.add(&*shard.lock()).expect("same bounds");
        }
        Ok(all)
    })
}

/// What every task reads, and the histograms they record into.
struct Shared {
    table: Table,
    cfg: YcsbConfig,
    chooser: KeyChooser,
    /// Begin to pre-commit, by task id modulo the shard count.
    txn_ns: Vec<parking_lot::Mutex<Histogram<u64>>>,
}

/// Shards of the shared latency histogram (so that the runtime's threads
/// seldom wait for each other's lock).
const HISTOGRAM_SHARDS: usize = 16;

/// Transactions committed and aborted, by kind.
type Counts = ([u64; 2], [u64; 2]);

async fn task(
    db: &AsyncDatabase,
    ctx: &Shared,
    phase: &AtomicU8,
    t: u64,
    window: usize,
) -> Result<Counts, String> {
    let (table, cfg, chooser) = (&ctx.table, &ctx.cfg, &ctx.chooser);
    let txn_ns = &ctx.txn_ns[t as usize % HISTOGRAM_SHARDS];
    let mut rng = worker_rng(cfg.seed, t);
    let (mut committed, mut aborted) = ([0u64; 2], [0u64; 2]);
    let mut held: VecDeque<CommitAck> = VecDeque::with_capacity(window.min(64));
    let read_fraction = cfg.workload.read_fraction();
    let mut keys = vec![0u64; cfg.ops_per_txn];
    let mut since_yield = 0;
    loop {
        let p = phase.load(Ordering::Relaxed);
        if p == PHASE_STOP {
            break;
        }
        let rmw = rng.random::<f64>() >= read_fraction;
        for k in &mut keys {
            *k = chooser.next(&mut rng);
        }
        let kind = usize::from(rmw);
        let started = Instant::now();
        let outcome = one_txn(db, table, cfg, rmw, &keys, &mut rng);
        let counted = p == PHASE_MEASURE && phase.load(Ordering::Relaxed) == PHASE_MEASURE;
        match outcome {
            Ok((precommit, ack)) => {
                if counted {
                    committed[kind] += 1;
                    let ns = (precommit - started).as_nanos().max(1) as u64;
                    let _ = txn_ns.lock().record(ns);
                }
                // Acks already acknowledged need no awaiting: dropped, as a
                // thread worker drops its acks, so that a large window
                // holds only the commits in flight, not every commit.
                while held.front().is_some_and(CommitAck::is_acknowledged) {
                    held.pop_front();
                }
                held.push_back(ack);
                if held.len() >= window
                    && let Some(oldest) = held.pop_front()
                {
                    oldest.await.map_err(|e| format!("a commit failed: {e}"))?;
                }
            }
            Err(Error::Conflict(_)) => {
                if counted {
                    aborted[kind] += 1;
                }
            }
            Err(e) => return Err(format!("transaction failed: {e}")),
        }
        // A task that seldom waits (a large window, reads that resolve at
        // once) must still let the others run, now and then: a yield per
        // transaction would cost a scheduler round each.
        since_yield += 1;
        if since_yield == YIELD_EVERY {
            since_yield = 0;
            tokio::task::yield_now().await;
        }
    }
    for ack in held {
        ack.await.map_err(|e| format!("a commit failed: {e}"))?;
    }
    Ok((committed, aborted))
}

/// One YCSB transaction (as `ycsb::one_txn`): returns when it entered
/// pre-commit, and its ack.
fn one_txn(
    db: &AsyncDatabase,
    table: &Table,
    cfg: &YcsbConfig,
    rmw: bool,
    keys: &[u64],
    rng: &mut SmallRng,
) -> Result<(Instant, CommitAck), Error> {
    let opts = TxnOptions { isolation: Some(cfg.isolation), read_only: !rmw, ..Default::default() };
    let mut tx = db.begin_with(opts)?;
    let mut record = [0u8; RECORD_BYTES];
    for &id in keys {
        let key = key_bytes(id);
        if tx.get_with(table, &key, |v| record.copy_from_slice(v))?.is_none() {
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
    Ok((precommit, tx.precommit()?))
}
