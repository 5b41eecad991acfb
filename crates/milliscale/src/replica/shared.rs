//! What the follower and its tail threads share: the replica's published
//! progress and counters, the sleep they wake from, the writer's
//! transaction rate the tails pace by, and the messages tails send.

use milliscale_seam::Elapsed as _;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use parking_lot::{Condvar, Mutex};

use crate::error::Error;
use crate::keys::Chain;
use crate::log::record::Part;
use crate::log::segment::WriteMode;
use crate::mvcc::Csn;
use crate::rate::EventRate;

/// How fast the tails' estimates of the writer's transactions a second
/// follow it.
pub(super) const TXN_RATE_TAU: Duration = Duration::from_secs(1);

/// After a tail last found something, tails keep polling in proportion to
/// the writer's appends for this long; then they back off to `poll_max`.
pub const ACTIVE_WINDOW: Duration = Duration::from_secs(2);

/// What the follower publishes to readers.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// Every commit below this is applied (the readers' snapshot).
    pub(crate) applied: Csn,
    /// One past the largest CSN read from the log.
    pub(crate) seen: Csn,
    /// The writer's epoch whose log is followed.
    pub(crate) epoch: u64,
    /// The manifest version last read.
    pub(crate) manifest_version: u64,
    /// Its `checkpoint_wanted`.
    pub(crate) checkpoint_wanted: Option<Csn>,
    /// The follower stopped on this error; reads go on at `applied`.
    pub(crate) error: Option<Error>,
    /// The follower has stopped (closed, or failed).
    pub(crate) stopped: bool,
    /// Tasks awaiting progress (`AsyncReplica::wait_for`); woken, and
    /// forgotten, at every publication.
    pub(crate) wakers: Vec<std::task::Waker>,
}

impl Progress {
    /// Wake the tasks awaiting progress (they look again, and register
    /// again if they still wait).
    pub(crate) fn wake_tasks(&mut self) {
        for w in self.wakers.drain(..) {
            w.wake();
        }
    }
}

/// Counters behind `ReplicaMetrics`.
pub(crate) struct Counters {
    pub(crate) started: Instant,
    /// Upper bound of the time from a part's landing in the store to its
    /// entries' being applied, in microseconds.
    pub(crate) lag_us: Histogram<u64>,
    pub(crate) entries: u64,
    pub(crate) records: u64,
    pub(crate) polls: u64,
    pub(crate) get_class: u64,
    pub(crate) put_class: u64,
    pub(crate) bytes_down: u64,
    pub(crate) poll_errors: u64,
    pub(crate) reads_hedged: u64,
    pub(crate) reads_hedges_won: u64,
    pub(crate) manifest_reads: u64,
    pub(crate) catch_ups: u64,
    pub(crate) catch_up_rows: u64,
    pub(crate) epochs_followed: u64,
    pub(crate) checkpoints_offered: u64,
    pub(crate) last_error: Option<String>,
}

impl Counters {
    pub(crate) fn new() -> Counters {
        Counters {
            started: milliscale_seam::now(),
            lag_us: Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds"),
            entries: 0,
            records: 0,
            polls: 0,
            get_class: 0,
            put_class: 0,
            bytes_down: 0,
            poll_errors: 0,
            reads_hedged: 0,
            reads_hedges_won: 0,
            manifest_reads: 0,
            catch_ups: 0,
            catch_up_rows: 0,
            epochs_followed: 0,
            checkpoints_offered: 0,
            last_error: None,
        }
    }
}

/// State shared by the replica's handle, its follower and tail threads.
pub(crate) struct Shared {
    pub(crate) stop: AtomicBool,
    /// The follower should stop and hand itself back, tails running
    /// (promotion).
    pub(crate) handover: AtomicBool,
    pub(crate) progress: Mutex<Progress>,
    /// Signalled when `progress` changes.
    pub(crate) progressed: Condvar,
    pub(crate) counters: Mutex<Counters>,
    /// Wakes sleeping threads at close.
    pub(super) sleep: (Mutex<()>, Condvar),
    /// When a tail last found something (ns since `origin`).
    last_activity: AtomicU64,
    origin: Instant,
    /// Transactions the tails found, all stores and chains together, and
    /// how many tails there are: the average a chain carries.
    pub(super) txns: Mutex<EventRate>,
    pub(super) tails: AtomicUsize,
    /// Requests the follower's idle manifest checks spent, which idle
    /// tails pay back by skipping a poll each: so an idle replica sends at
    /// most one request per chain per `poll_max`, manifest included.
    pub(super) owed: AtomicU64,
    /// Per store, the write mode a tail learned, for the others.
    modes: Mutex<Vec<Option<WriteMode>>>,
    /// Bumped by a reader that waits for a token the replica has not seen
    /// ([`Shared::poll_now`]): every tail then polls its chain in full at
    /// once, whatever its interval. Requests follow the readers' demand.
    pub(super) demand: AtomicU64,
}

impl Shared {
    pub(crate) fn new() -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            handover: AtomicBool::new(false),
            progress: Mutex::new(Progress::default()),
            progressed: Condvar::new(),
            counters: Mutex::new(Counters::new()),
            sleep: (Mutex::new(()), Condvar::new()),
            last_activity: AtomicU64::new(0),
            origin: milliscale_seam::now(),
            txns: Mutex::new(EventRate::new(TXN_RATE_TAU)),
            tails: AtomicUsize::new(0),
            owed: AtomicU64::new(0),
            modes: Mutex::new(Vec::new()),
            demand: AtomicU64::new(0),
        }
    }

    /// Stop every thread.
    pub(crate) fn shut_down(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let _g = self.sleep.0.lock();
        self.sleep.1.notify_all();
    }

    /// Sleep for `d`, or until `stop` (or the follower's stop) is set.
    pub(super) fn sleep(&self, d: Duration, stop: &AtomicBool) {
        let mut g = self.sleep.0.lock();
        if !self.stop.load(Ordering::SeqCst) && !stop.load(Ordering::SeqCst) {
            milliscale_seam::cv_wait_for(&self.sleep.1, &mut g, d);
        }
    }

    pub(super) fn active(&self) -> bool {
        let last = self.last_activity.load(Ordering::Relaxed);
        last > 0
            && self.origin.elapsed_now().as_nanos() as u64 - last < ACTIVE_WINDOW.as_nanos() as u64
    }

    pub(super) fn mark_active(&self) {
        self.last_activity
            .store(self.origin.elapsed_now().as_nanos().max(1) as u64, Ordering::Relaxed);
    }

    /// Take one request the idle manifest checks are owed, if any.
    pub(super) fn pay_back(&self) -> bool {
        self.owed.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
    }

    /// The transactions a second one tail sees on average.
    pub(super) fn txns_per_tail(&self, now: Instant) -> f64 {
        self.txns.lock().at(now) / self.tails.load(Ordering::Relaxed).max(1) as f64
    }

    /// The write mode of `store`'s chains, if a tail learned it.
    pub(super) fn mode(&self, store: usize) -> Option<WriteMode> {
        self.modes.lock().get(store).copied().flatten()
    }

    pub(super) fn learned_mode(&self, store: usize, mode: WriteMode) {
        let mut m = self.modes.lock();
        if m.len() <= store {
            m.resize(store + 1, None);
        }
        m[store] = Some(mode);
    }
}

/// What a tail thread sends.
pub(super) enum TailMsg {
    Polled {
        store: usize,
        chain: Chain,
        parts: Vec<Part>,
        /// The start of the poll before this one: the parts landed after it.
        since: Instant,
        gone: bool,
        fenced: bool,
    },
    Failed(Error),
}
