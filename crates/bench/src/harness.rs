//! What every timed benchmark shares: the warmup / measure / stop phases,
//! the worker threads and the progress bar, per-worker random streams, the
//! log's metrics over the measured window, and open-loop pacing.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use milliscale::{Database, LogMetrics};
use objstore::sim::accounting::AccountingReport;
use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::report::{LogReport, MemoryReport, Percentiles};
use crate::rss::RssSampler;

/// How long and how wide a run is.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub threads: usize,
    pub warmup: Duration,
    pub duration: Duration,
    /// Draw a progress bar on stderr (only if it is a terminal).
    pub progress: bool,
}

pub const PHASE_WARMUP: u8 = 0;
pub const PHASE_MEASURE: u8 = 1;
pub const PHASE_STOP: u8 = 2;

/// The workers' results, the measured time and the memory samples.
pub type Drive<W> = (Vec<W>, (Duration, Option<MemoryReport>));

/// Start the workers, run warmup then the measured phase, stop them.
/// `on_phase` runs right after the measured phase starts and right after
/// it stops.
pub fn drive<F, W: Send>(
    cfg: &Shape,
    phase: &AtomicU8,
    worker: F,
    on_phase: impl Fn(u8),
) -> Result<Drive<W>, String>
where
    F: Fn(u64) -> Result<W, String> + Sync,
{
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..cfg.threads as u64)
            .map(|w| {
                s.spawn({
                    let worker = &worker;
                    move || worker(w)
                })
            })
            .collect();
        let sampler = RssSampler::start();
        let bar = progress_bar(cfg);
        sleep_with_progress(cfg.warmup, &bar, "warmup");
        phase.store(PHASE_MEASURE, Ordering::SeqCst);
        on_phase(PHASE_MEASURE);
        let t0 = Instant::now();
        sleep_with_progress(cfg.duration, &bar, "measure");
        phase.store(PHASE_STOP, Ordering::SeqCst);
        let measured = t0.elapsed();
        on_phase(PHASE_STOP);
        bar.finish_and_clear();
        let memory = sampler.finish();
        let stats: Result<Vec<_>, String> = handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "worker panicked".to_owned())?)
            .collect();
        Ok((stats?, (measured, memory)))
    })
}

fn progress_bar(cfg: &Shape) -> indicatif::ProgressBar {
    if !cfg.progress {
        return indicatif::ProgressBar::hidden();
    }
    let total = (cfg.warmup + cfg.duration).as_millis() as u64;
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg:>8} [{bar:40}] {elapsed}/{duration}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar
}

fn sleep_with_progress(d: Duration, bar: &indicatif::ProgressBar, msg: &'static str) {
    bar.set_message(msg);
    let end = Instant::now() + d;
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        let step = left.min(Duration::from_millis(100));
        std::thread::sleep(step);
        bar.inc(step.as_millis() as u64);
    }
}

/// Worker `w`'s random stream: distinct per worker, reproducible per seed.
pub fn worker_rng(seed: u64, w: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed.wrapping_add(w.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
}

/// A store's accounting, hedged appends and hedges won when the window
/// opened.
type StoreStart = (Option<AccountingReport>, u64, u64);

/// The log's metrics and store accounting over the measured phase.
pub struct LogWindow<'a> {
    db: &'a Database,
    /// Per store at the window's start: accounting and hedged appends.
    start: parking_lot::Mutex<Option<Vec<StoreStart>>>,
    end: parking_lot::Mutex<Option<LogMetrics>>,
}

impl<'a> LogWindow<'a> {
    pub fn new(db: &'a Database) -> LogWindow<'a> {
        LogWindow { db, start: Default::default(), end: Default::default() }
    }

    pub fn at(&self, phase: u8) {
        if phase == PHASE_MEASURE {
            self.db.reset_log_metrics();
            *self.start.lock() = self.db.log_metrics().map(|m| {
                m.stores.into_iter().map(|s| (s.accounting, s.hedged, s.hedges_won)).collect()
            });
        } else {
            *self.end.lock() = self.db.log_metrics();
        }
    }

    pub fn report(&self, measured: Duration, committed: u64) -> Option<(LogReport, Percentiles)> {
        let m = self.end.lock().take()?;
        let start = self.start.lock().take().unwrap_or_default();
        let secs = measured.as_secs_f64().max(1e-9);
        // A flush is one append of a stream; it carries a part of each of
        // the stream's groups that had entries.
        let flushes: u64 = m.streams.iter().map(|s| s.appends).sum();
        let parts: u64 = m.groups.iter().map(|g| g.flushes).sum();
        let full: u64 = m.groups.iter().map(|g| g.full_flushes).sum();
        let bytes: u64 = m.groups.iter().map(|g| g.bytes).sum();
        let entries: u64 = m.groups.iter().map(|g| g.entries).sum();
        let mut fill = m.groups.first()?.fill_us.clone();
        let mut flush = m.groups.first()?.flush_us.clone();
        for g in &m.groups[1..] {
            fill.add(&g.fill_us).expect("same bounds");
            flush.add(&g.flush_us).expect("same bounds");
        }
        let mut requests = BTreeMap::<String, f64>::new();
        let mut usd = 0.0;
        let (mut hedged, mut won) = (0, 0);
        for (i, st) in m.stores.iter().enumerate() {
            hedged += st.hedged - start.get(i).map_or(0, |s| s.1);
            won += st.hedges_won - start.get(i).map_or(0, |s| s.2);
            let Some(end) = &st.accounting else { continue };
            let before = start.get(i).and_then(|s| s.0.clone());
            for (k, n) in &end.requests {
                let n0 = before.as_ref().and_then(|b| b.requests.get(k).copied()).unwrap_or(0);
                if n > &n0 {
                    *requests.entry((*k).to_owned()).or_default() += (n - n0) as f64 / secs;
                }
            }
            usd += end.cost_usd - before.map_or(0.0, |b| b.cost_usd);
        }
        let commit = Percentiles::from_micros(&m.commit.latency_us);
        let store_append =
            m.stores.iter().find_map(|s| s.accounting.as_ref().and_then(|a| a.append_latency));
        let log_requests: f64 =
            ["append", "put_if_absent"].iter().filter_map(|k| requests.get(*k)).sum::<f64>() * secs;
        let report = LogReport {
            groups: m.groups.len(),
            streams: m.streams.len(),
            lanes: m.streams.first().map_or(0, |s| s.lanes as usize),
            overlapped_fraction: if flushes == 0 {
                0.0
            } else {
                m.streams.iter().map(|s| s.overlapped).sum::<u64>() as f64 / flushes as f64
            },
            parts_per_flush: if flushes == 0 { 0.0 } else { parts as f64 / flushes as f64 },
            busy_skips_per_s: m.groups.iter().map(|g| g.skipped).sum::<u64>() as f64 / secs,
            flush_interval_ms: m.streams.first().map_or(0.0, |s| s.interval.as_secs_f64() * 1e3),
            out_of_order_parts: m.groups.iter().map(|g| g.out_of_order).sum(),
            hedges_won_per_s: won as f64 / secs,
            log_requests_per_txn: if committed == 0 {
                0.0
            } else {
                log_requests / committed as f64
            },
            commit_over_store: store_append.map(|a| {
                let r = |c: f64, s: u64| c / (s.max(1) as f64);
                [
                    r(commit.p50_us, a.p50_us),
                    r(commit.p99_us, a.p99_us),
                    r(commit.p999_us, a.p999_us),
                ]
            }),
            store_append,
            stores: m
                .stores
                .iter()
                .map(|s| {
                    let mode = match s.mode {
                        milliscale::internals::segment::WriteMode::Append => "append",
                        milliscale::internals::segment::WriteMode::PutPerFlush => "put",
                    };
                    format!("{} ({mode})", s.name)
                })
                .collect(),
            flushes_per_s: flushes as f64 / secs,
            full_flush_fraction: if parts == 0 { 0.0 } else { full as f64 / parts as f64 },
            bytes_per_flush: if flushes == 0 { 0.0 } else { bytes as f64 / flushes as f64 },
            bytes_per_logged_txn: if entries == 0 { 0.0 } else { bytes as f64 / entries as f64 },
            fill: Percentiles::from_micros(&fill),
            flush: Percentiles::from_micros(&flush),
            room_waits: m.groups.iter().map(|g| g.room_waits).sum(),
            released: m.commit.released,
            dependency_waited: m.commit.waited,
            dependency_wait: Percentiles::from_micros(&m.commit.dependency_wait_us),
            hedged_appends_per_s: hedged as f64 / secs,
            requests_per_s: requests,
            ..LogReport::default()
        }
        .priced(usd, secs, committed);
        Some((report, commit))
    }
}

/// When a worker issues its next transaction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pacing {
    /// Closed loop: a worker issues its next transaction as soon as it has
    /// pre-committed the last one (the commit pipeline acknowledges it
    /// later).
    Closed,
    /// Open loop: transactions arrive as a Poisson process of `rate` per
    /// second over all workers (each worker gets `rate / threads`).
    /// Latency is measured from the scheduled arrival, so a worker that
    /// falls behind counts its backlog: no coordinated omission.
    Open { rate: f64 },
}

/// One worker's arrival schedule (see [`Pacing`]).
pub struct Pacer {
    next: Instant,
    gap: Option<rand_distr::Exp<f64>>,
}

impl Pacer {
    pub fn new(pacing: Pacing, threads: usize) -> Result<Pacer, String> {
        let gap = match pacing {
            Pacing::Closed => None,
            Pacing::Open { rate } => {
                if !(rate.is_finite() && rate > 0.0) {
                    return Err(format!("the open-loop rate must be positive, got {rate}"));
                }
                // Exp(λ) gaps in seconds, λ = this worker's share of the rate.
                Some(
                    rand_distr::Exp::new(rate / threads.max(1) as f64)
                        .map_err(|e| e.to_string())?,
                )
            }
        };
        Ok(Pacer { next: Instant::now(), gap })
    }

    /// Wait for the next arrival and return its scheduled instant, the
    /// origin of the transaction's latency. Closed loop: now.
    pub fn next_arrival(&mut self, rng: &mut SmallRng) -> Instant {
        self.next_arrival_tracking(rng, &mut Pending::default(), |_, _| {})
    }

    /// Open loop: the next arrival's scheduled instant, without waiting
    /// for it (for a caller that waits its own way, as an async task
    /// does). Closed loop: `None`.
    pub fn schedule(&mut self, rng: &mut SmallRng) -> Option<Instant> {
        let gap = self.gap.as_ref()?;
        let at = self.next;
        self.next += Duration::from_secs_f64(rand_distr::Distribution::sample(gap, rng));
        Some(at)
    }

    /// [`Pacer::next_arrival`], recording the acks of `pending` while it
    /// waits ([`Pending::wait_until`]).
    pub fn next_arrival_tracking(
        &mut self,
        rng: &mut SmallRng,
        pending: &mut Pending,
        record: impl FnMut(usize, u64),
    ) -> Instant {
        let Some(at) = self.schedule(rng) else { return Instant::now() };
        pending.wait_until(at, record);
        if let Some(wait) = at.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        at
    }
}

/// Commits a worker has pre-committed and not yet seen acknowledged.
/// Workers poll it after every transaction, so an ack is observed within
/// one transaction's run time of happening.
#[derive(Default)]
pub struct Pending {
    items: Vec<(usize, Instant, milliscale::CommitAck)>,
}

impl Pending {
    /// Track `ack` of a transaction of `kind` whose latency starts at `origin`.
    pub fn push(&mut self, kind: usize, origin: Instant, ack: milliscale::CommitAck) {
        self.items.push((kind, origin, ack));
    }

    /// Until `deadline`, wait on the oldest tracked commit rather than
    /// sleep, recording each ack as it happens: an open-loop worker between
    /// arrivals then sees an ack when it resolves, not at its next arrival
    /// (which would add up to one inter-arrival gap to the latency).
    pub fn wait_until(&mut self, deadline: Instant, mut record: impl FnMut(usize, u64)) {
        loop {
            self.poll(&mut record);
            let Some((_, _, ack)) = self.items.first() else { return };
            match ack.wait_until(deadline) {
                Some(Ok(_)) => continue,
                // Timed out, or failed: `finish` reports a failure.
                None | Some(Err(_)) => return,
            }
        }
    }

    /// Call `record(kind, nanoseconds)` for every commit acknowledged by now.
    pub fn poll(&mut self, mut record: impl FnMut(usize, u64)) {
        let now = Instant::now();
        self.items.retain(|(kind, origin, ack)| {
            if ack.is_acknowledged() {
                record(*kind, (now - *origin).as_nanos().max(1) as u64);
                false
            } else {
                true
            }
        });
    }

    /// Wait for every tracked commit; the first failure is returned after
    /// all have been waited for.
    pub fn finish(self, mut record: impl FnMut(usize, u64)) -> Result<(), milliscale::Error> {
        let mut first = Ok(());
        for (kind, origin, ack) in self.items {
            match ack.wait() {
                Ok(_) => record(kind, (Instant::now() - origin).as_nanos().max(1) as u64),
                Err(e) => {
                    if first.is_ok() {
                        first = Err(e);
                    }
                }
            }
        }
        first
    }
}
