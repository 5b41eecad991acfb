//! Running YCSB (the workload is `ycsb_workload`): load the table, start
//! the workers on the engine's threads (or as tasks, `ycsb_tasks`, or on a
//! baseline, `ycsb_baselines`), and build the report.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU8;
use std::time::{Duration, Instant};

use milliscale::Database;

use crate::harness::{LogWindow, PHASE_MEASURE, PHASE_WARMUP, Pacing, Shape, drive};
use crate::keys::KeyChooser;
use crate::report::{Environment, KindStats, Percentiles, Report};
use crate::ycsb_baselines::{raw_worker, run_pages};
use crate::ycsb_tasks;
pub use crate::ycsb_workload::*;

/// Run the benchmark and produce its report.
pub fn run(cfg: &YcsbConfig) -> Result<Report, String> {
    if cfg.replica.is_some_and(|r| r.pin) || cfg.feeds_pin {
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

#[allow(
    clippy::too_many_lines,
    reason = "one benchmark run read in order: open, load, the phases, the report"
)]
fn run_here(cfg: &YcsbConfig) -> Result<Report, String> {
    cfg.validate()?;
    let chooser = KeyChooser::new(cfg.records, cfg.dist)?;
    let phase = std::sync::Arc::new(AtomicU8::new(PHASE_WARMUP));
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
            let db = std::sync::Arc::new(db);
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
            let feeds = match cfg.feeds {
                0 => None,
                n => Some(crate::feed_bench::FeedRun::open(&db, n, cfg.feeds_pin)?),
            };
            let window = LogWindow::new(&db);
            // Checkpoint cost over the measured window: the background column.
            let background = parking_lot::Mutex::new(Vec::new());
            let offered = parking_lot::Mutex::new(None);
            let (stats, measured) = std::thread::scope(|s| {
                let consumers: Vec<_> = match &feeds {
                    Some(f) => {
                        s.spawn(|| f.probe(&db));
                        (0..f.len()).map(|i| s.spawn(move || f.consume(i))).collect()
                    }
                    None => Vec::new(),
                };
                if let Some(r) = &replica {
                    s.spawn(|| r.probe(&db));
                    if cfg.log.checkpoint_offload {
                        // The writer adopts what the replica offers.
                        s.spawn(|| *offered.lock() = Some(r.offer_loop()));
                    }
                }
                let tasks = cfg.tasks.map(|t| (t, Shape { threads: 1, ..cfg.shape() }));
                let out = drive(
                    tasks.as_ref().map_or(&cfg.shape(), |t| &t.1),
                    &phase,
                    |w| match tasks {
                        Some((t, _)) => {
                            ycsb_tasks::run_tasks(&db, &table, cfg, &chooser, &phase, t)
                        }
                        None => engine_worker(&db, &table, cfg, &chooser, &phase, w),
                    },
                    |p| {
                        window.at(p);
                        let c = db.checkpoint_stats();
                        background.lock().push((c.cost_usd.unwrap_or(0.0), c.checkpoints));
                        if let Some(r) = &replica {
                            r.mark(&db, p == PHASE_MEASURE);
                        }
                        if let Some(f) = &feeds {
                            f.mark(p == PHASE_MEASURE);
                        }
                    },
                );
                if let Some(r) = &replica {
                    r.stop();
                }
                if let Some(f) = &feeds {
                    f.stop();
                }
                for c in consumers {
                    c.join().map_err(|_| "a feed's consumer panicked".to_string())??;
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
            if let Some(f) = &feeds {
                let (x, note) = f.report();
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
            let tree = scc::TreeIndex::<milliscale::internals::IndexKey, u64>::new();
            for id in 0..cfg.records {
                let _ = tree
                    .insert_sync(milliscale::internals::IndexKey::from_slice(&key_bytes(id)), id);
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

pub(crate) fn build_report(
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
        timeline: Vec::new(),
    }
}
