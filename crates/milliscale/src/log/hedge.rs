//! Hedged requests: when a request is slow enough to send a second time
//! ([`HedgePolicy`], `Hedger`), and the helper threads that send a
//! hedging writer's appends where the store cannot hedge inside its own
//! client (`AppendPool`). Why hedging is safe for appends is in
//! `segment`'s module docs.

use std::sync::Arc;
use std::time::Duration;

use super::latency_window::LatencyWindow;
use crate::options::Hedging;

/// When an append is slow enough to send again (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HedgePolicy {
    /// Hedge after this quantile of the writer's recent append latencies...
    pub quantile: f64,
    /// ...times this...
    pub multiple: f64,
    /// ...but never sooner than this.
    pub min: Duration,
    /// In the long run, hedge at most this share of appends (a hedge is one
    /// more request); short bursts may go up to 10 hedges over it.
    pub max_share: f64,
    /// For stores that cannot hedge inside their client, hedge through
    /// helper threads (which cost median latency on busy cores).
    pub threads: bool,
}

impl HedgePolicy {
    /// The 90th percentile of recent appends (at least 2 ms), at most 10%
    /// more appends, no helper threads.
    pub const DEFAULT: HedgePolicy = HedgePolicy {
        quantile: 0.9,
        multiple: 1.0,
        min: Duration::from_millis(2),
        max_share: 0.1,
        threads: false,
    };

    /// For a replica's reads: twice the 90th percentile of recent reads
    /// (at least 2 ms), so that only the tail's outliers are raced and the
    /// 10% budget is not spent on reads that were merely a little slow.
    pub const READS: HedgePolicy = HedgePolicy { multiple: 2.0, ..HedgePolicy::DEFAULT };

    /// Race every append at once, through helper threads where the store
    /// cannot hedge itself, with no cap (tests use it).
    pub const EVERY_APPEND: HedgePolicy = HedgePolicy {
        quantile: 0.9,
        multiple: 0.0,
        min: Duration::ZERO,
        max_share: 1.0,
        threads: true,
    };

    /// The policy for a [`Hedging`] setting.
    pub fn for_setting(h: Hedging) -> Option<HedgePolicy> {
        match h {
            Hedging::Auto => Some(HedgePolicy::DEFAULT),
            Hedging::Always => Some(HedgePolicy { threads: true, ..HedgePolicy::DEFAULT }),
            Hedging::Off => None,
        }
    }
}

/// Hedges a burst may take beyond the long-run share.
const HEDGE_BURST: f64 = 10.0;

/// Helper threads that send a hedging writer's appends, so that the
/// writer can wait for the first answer with a timeout. They live as long
/// as the writer and sleep on its job queue between appends: a woken
/// sleeper gets a core sooner than a newly spawned thread does on busy
/// cores. A thread is added when none is idle (a hedge needs a second one
/// while the first request is out, and a request can outlive its append
/// when the other copy answered first), up to [`AppendPool::MAX`]; past
/// that, jobs wait in the queue.
#[derive(Debug)]
pub(crate) struct AppendPool {
    jobs: crossbeam_channel::Sender<AppendJob>,
    queue: crossbeam_channel::Receiver<AppendJob>,
    idle: Arc<std::sync::atomic::AtomicUsize>,
    threads: usize,
}

pub(crate) type AppendJob = Box<dyn FnOnce() + Send>;

impl AppendPool {
    const MAX: usize = 4;

    /// A pool with no threads yet: they start with the first hedged append.
    pub(crate) fn new() -> AppendPool {
        let (jobs, queue) = crossbeam_channel::unbounded();
        AppendPool { jobs, queue, idle: Arc::default(), threads: 0 }
    }

    /// Run `job` on a helper thread. Gives the job back if there is no
    /// thread to run it.
    pub(crate) fn run(&mut self, job: AppendJob) -> Result<(), AppendJob> {
        use std::sync::atomic::Ordering;
        if self.idle.load(Ordering::Acquire) == 0 && self.threads < Self::MAX {
            let (idle, rx) = (Arc::clone(&self.idle), self.queue.clone());
            let spawned = milliscale_seam::spawn("log-append".into(), move || {
                idle.fetch_add(1, Ordering::AcqRel);
                while let Ok(job) = milliscale_seam::recv(&rx) {
                    idle.fetch_sub(1, Ordering::AcqRel);
                    job();
                    idle.fetch_add(1, Ordering::AcqRel);
                }
            });
            match spawned {
                Ok(_) => self.threads += 1,
                Err(_) if self.threads == 0 => return Err(job),
                Err(_) => {}
            }
        }
        self.jobs.send(job).map_err(|e| e.into_inner())
    }
}

/// When to send a request a second time: a [`HedgePolicy`], the latencies
/// of one client's recent requests of one kind, and the credit that bounds
/// the extra requests. The log's segment writers hedge appends with one;
/// a replica's tails hedge their reads with another (reads are idempotent,
/// so racing two is always safe).
#[derive(Debug, Clone)]
pub(crate) struct Hedger {
    policy: Option<HedgePolicy>,
    recent: LatencyWindow,
    /// Hedges that may still go out (`max_share` per request, up to a
    /// burst).
    credit: f64,
    /// Requests sent a second time.
    pub(crate) hedged: u64,
    /// Of those, the ones whose second request answered first (where the
    /// store hedges itself and can tell).
    pub(crate) won: u64,
}

impl Hedger {
    pub(crate) fn new(policy: Option<HedgePolicy>) -> Hedger {
        Hedger { policy, recent: LatencyWindow::default(), credit: HEDGE_BURST, hedged: 0, won: 0 }
    }

    pub(crate) fn policy(&self) -> Option<HedgePolicy> {
        self.policy
    }

    /// How long to wait for the next request before hedging it, if at
    /// all: the policy's quantile of recent latencies, once enough were
    /// measured and while credit lasts.
    pub(crate) fn delay(&mut self) -> Option<Duration> {
        let h = self.policy?;
        self.credit = (self.credit + h.max_share).min(HEDGE_BURST);
        if self.credit < 1.0 {
            return None;
        }
        let q = self.recent.quantile(h.quantile)?;
        Some(q.mul_f64(h.multiple).max(h.min))
    }

    /// What a request's hedge did.
    pub(crate) fn count(&mut self, hedge: objstore::Hedge) {
        if hedge.sent() {
            self.hedged += 1;
            self.credit -= 1.0;
        }
        if hedge == objstore::Hedge::Won {
            self.won += 1;
        }
    }

    /// A request succeeded after `took` (hedge included).
    pub(crate) fn record(&mut self, took: Duration) {
        self.recent.add(took);
    }
}
