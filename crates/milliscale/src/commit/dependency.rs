//! Record-level commit dependency tracking: DSN vs gCSN (paper §4.3,
//! DESIGN.md invariant 2).
//!
//! Each log group publishes `durable[g]`: every CSN of group g up to it is
//! durable (a group's parts are cut from its buffer in CSN order, so this
//! is one number). With several lanes a group's parts can become durable
//! out of order, so each part also has a number (`Pending::part`), and a
//! group publishes each part's durability in a small ring,
//! `parts_durable[g]`: a transaction's own records are durable once its
//! part is, whatever happened to the parts before it. The
//! committer publishes `gcsn`: every CSN below it, in every group, is
//! durable. It computes it as the minimum over groups of the oldest CSN
//! not yet durable there, where a group with nothing pending contributes
//! the CSN counter, **read before the scan**: a CSN taken after that read is
//! at least the value read, and one taken before it is already registered
//! as pending in its group (taking a CSN and registering it are one step
//! under the group lock, see `log::group`).
//!
//! A pre-committed transaction T (group g) is acknowledged when
//! - `Tracking::Record`: T's own part is durable (`durable[g] >= T.csn`,
//!   or the ring says so) `&& T.dsn < gcsn`;
//! - `Tracking::Txn`: `T.csn < gcsn`.
//!
//! Both sides are monotone, so an ack handle decides by reading two
//! atomics: no per-transaction allocation or queue entry is needed to
//! answer `is_acknowledged`. The committer's commit queues (one per group,
//! filled at pre-commit) exist for the metrics: they record when each
//! transaction was released, and how long it waited on dependencies after
//! its own records were durable.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;
use parking_lot::{Condvar, Mutex};

use crate::error::Error;
use crate::log::group::{LogGroup, Pending};
use crate::mvcc::{CSN_FIRST, Csn};
use crate::options::Tracking;

/// Slots of a group's part-durability ring: how many parts may become
/// durable behind a stuck one before their transactions wait for the
/// stuck part after all (at 250 parts a second, 4 s).
pub(crate) const PART_RING: usize = 1024;

/// Where a transaction's own records are: its group and the number of the
/// part they go out in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct OwnPart {
    pub(crate) group: usize,
    pub(crate) part: u64,
}

/// Shared by workers, flushers, the committer and ack handles.
pub(crate) struct CommitState {
    /// The next CSN to hand out (invariant 1: one counter, dense CSNs).
    pub(crate) next_csn: CachePadded<AtomicU64>,
    /// Every CSN below this is durable in every group.
    pub(crate) gcsn: CachePadded<AtomicU64>,
    /// Per group: every CSN of the group up to this one is durable.
    pub(crate) durable: Box<[CachePadded<AtomicU64>]>,
    /// Per group, a ring of [`PART_RING`] slots: slot `p % PART_RING`
    /// holds `p + 1` once part `p` of the group is durable. A slot only
    /// ever names a durable part, so a hit is proof; a part whose slot was
    /// reused is found durable through `durable[g]` once the parts before
    /// it are (later, never wrongly).
    parts_durable: Box<[Box<[AtomicU64]>]>,
    pub(crate) tracking: Tracking,
    /// False without a log: pre-commit is the commit.
    pub(crate) logged: bool,
    poisoned: AtomicBool,
    poison: Mutex<Option<Error>>,
    /// Bumped after each committer round; ack waiters sleep on it.
    acked: Mutex<u64>,
    acked_cv: Condvar,
    waiters: AtomicUsize,
    /// Flushers set it after a flush; the committer sleeps on it.
    wake: Mutex<bool>,
    wake_cv: Condvar,
    pub(crate) metrics: Mutex<CommitMetrics>,
    /// Autonomous commit: flush the stream of a group now (force commit by
    /// a worker about to wait for an ack). Unset under pipelined commit.
    force_flush: std::sync::OnceLock<ForceFlush>,
}

/// See [`CommitState::set_force_flush`]: flush group `g`'s stream for a
/// worker that waits for an ack, with no deadline (`None`) or for at most
/// the time given.
pub(crate) type ForceFlush = Box<dyn Fn(usize, Option<Duration>) + Send + Sync>;

/// What the committer measured.
#[derive(Debug, Clone)]
pub struct CommitMetrics {
    /// Pre-commit to acknowledgment, microseconds, writing transactions.
    pub latency_us: Histogram<u64>,
    /// Microseconds from a transaction's own records being durable (as the
    /// committer saw it) to its release, for those that waited at all.
    pub dependency_wait_us: Histogram<u64>,
    /// Transactions released.
    pub released: u64,
    /// Of those, how many waited on dependencies after their own records
    /// were durable.
    pub waited: u64,
}

impl CommitMetrics {
    pub(crate) fn new() -> CommitMetrics {
        let h = || Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds");
        CommitMetrics { latency_us: h(), dependency_wait_us: h(), released: 0, waited: 0 }
    }
}

impl CommitState {
    /// `first` is the first CSN to hand out (after recovery: above every
    /// CSN in the log it read).
    pub(crate) fn new(groups: usize, tracking: Tracking, logged: bool, first: Csn) -> CommitState {
        let first = first.max(CSN_FIRST);
        CommitState {
            next_csn: CachePadded::new(AtomicU64::new(first)),
            gcsn: CachePadded::new(AtomicU64::new(first)),
            durable: (0..groups).map(|_| CachePadded::new(AtomicU64::new(0))).collect(),
            parts_durable: (0..groups)
                .map(|_| (0..PART_RING).map(|_| AtomicU64::new(0)).collect())
                .collect(),
            tracking,
            force_flush: std::sync::OnceLock::new(),
            logged,
            poisoned: AtomicBool::new(false),
            poison: Mutex::new(None),
            acked: Mutex::new(0),
            acked_cv: Condvar::new(),
            waiters: AtomicUsize::new(0),
            wake: Mutex::new(false),
            wake_cv: Condvar::new(),
            metrics: Mutex::new(CommitMetrics::new()),
        }
    }

    /// Is the transaction (`csn` in part `own`, or read-only) acknowledged?
    pub(crate) fn is_acknowledged(&self, csn: Option<Csn>, dsn: Csn, own: OwnPart) -> bool {
        if !self.logged {
            return true;
        }
        let gcsn = self.gcsn.load(Ordering::SeqCst);
        match csn {
            // A read-only transaction waits for what it saw.
            None => dsn < gcsn,
            Some(csn) => match self.tracking {
                Tracking::Record => dsn < gcsn && self.own_records_durable(csn, own),
                Tracking::Txn => csn < gcsn,
            },
        }
    }

    /// Are the records of transaction `csn`, logged in part `own`, durable?
    pub(crate) fn own_records_durable(&self, csn: Csn, own: OwnPart) -> bool {
        self.durable[own.group].load(Ordering::SeqCst) >= csn
            || self.parts_durable[own.group][(own.part % PART_RING as u64) as usize]
                .load(Ordering::SeqCst)
                == own.part + 1
    }

    /// A group's flusher: part `part` of `group` is durable.
    pub(crate) fn publish_part_durable(&self, group: usize, part: u64) {
        self.parts_durable[group][(part % PART_RING as u64) as usize]
            .store(part + 1, Ordering::SeqCst);
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// The error that poisoned the database, if any.
    pub(crate) fn poison_error(&self) -> Option<Error> {
        if !self.is_poisoned() {
            return None;
        }
        self.poison.lock().clone()
    }

    /// Stop acknowledging anything: the log cannot make more data durable.
    /// The first error is kept; every waiter is woken.
    pub(crate) fn poison(&self, e: Error) {
        {
            let mut p = self.poison.lock();
            if p.is_none() {
                tracing::error!("the database is poisoned: {e}");
                *p = Some(e);
            }
        }
        self.poisoned.store(true, Ordering::Release);
        self.notify_acks();
        self.wake_committer();
    }

    /// Block until acknowledged, or the database is poisoned.
    /// [`CommitState::wait`], giving up at `deadline`: `None` if the
    /// commit was not acknowledged by then.
    pub(crate) fn wait_until(
        &self,
        csn: Option<Csn>,
        dsn: Csn,
        own: OwnPart,
        deadline: std::time::Instant,
    ) -> Option<Result<(), Error>> {
        if self.is_acknowledged(csn, dsn, own) {
            return Some(Ok(()));
        }
        // A waiter with a deadline has work at the deadline: it must not
        // be held past it by the flush, and one whose deadline has passed
        // does not idle at all (no force commit).
        let idle = deadline.saturating_duration_since(std::time::Instant::now());
        if csn.is_some()
            && !idle.is_zero()
            && let Some(flush) = self.force_flush.get()
        {
            flush(own.group, Some(idle));
        }
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let result = loop {
            let mut round = self.acked.lock();
            if self.is_acknowledged(csn, dsn, own) {
                break Some(Ok(()));
            }
            if let Some(e) = self.poison_error() {
                break Some(Err(e));
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                break None;
            }
            // Spurious or unrelated wake-ups go round the loop again.
            let _ = self
                .acked_cv
                .wait_for(&mut round, (deadline - now).min(Duration::from_millis(100)));
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        result
    }

    pub(crate) fn wait(&self, csn: Option<Csn>, dsn: Csn, own: OwnPart) -> Result<(), Error> {
        for _ in 0..64 {
            if self.is_acknowledged(csn, dsn, own) {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        if csn.is_some()
            && let Some(flush) = self.force_flush.get()
        {
            // Autonomous commit: a waiting worker is idle; it writes its
            // own records out rather than wait for the backstop.
            flush(own.group, None);
            if self.is_acknowledged(csn, dsn, own) {
                return Ok(());
            }
        }
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let result = loop {
            let mut round = self.acked.lock();
            if self.is_acknowledged(csn, dsn, own) {
                break Ok(());
            }
            if let Some(e) = self.poison_error() {
                break Err(e);
            }
            // The committer bumps the round under this lock after it
            // publishes, so a release between our check and this wait
            // cannot be missed; the timeout is a second safety net.
            let seen = *round;
            while *round == seen {
                if self.acked_cv.wait_for(&mut round, Duration::from_millis(100)).timed_out() {
                    break;
                }
            }
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        result
    }

    /// Autonomous commit: how a waiting worker flushes its group's stream.
    pub(crate) fn set_force_flush(&self, f: ForceFlush) {
        let _ = self.force_flush.set(f);
    }

    /// Wake the ack waiters to look again (after a publication).
    pub(crate) fn notify_acks(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            *self.acked.lock() += 1;
            self.acked_cv.notify_all();
        }
    }

    /// Called by a flusher after a part became durable.
    pub(crate) fn wake_committer(&self) {
        *self.wake.lock() = true;
        self.wake_cv.notify_one();
    }

    /// Compute gCSN by the rule in the module docs and publish it; returns
    /// the published value (which never goes back). The committer runs
    /// this each round; a durable-snapshot reader runs it before it reads
    /// gCSN, because an ack can be seen before the committer's next round
    /// (under record tracking an ack needs `durable[g]`, which the flusher
    /// publishes).
    pub(crate) fn publish_gcsn(&self, groups: &[Arc<LogGroup>]) -> Csn {
        // Invariant 2: read the counter before scanning the groups.
        let counter = self.next_csn.load(Ordering::SeqCst);
        let gcsn = groups
            .iter()
            .map(|g| g.oldest_not_durable().unwrap_or(counter))
            .fold(counter, Csn::min);
        self.gcsn.fetch_max(gcsn, Ordering::SeqCst);
        self.gcsn.load(Ordering::SeqCst)
    }

    /// Committer: sleep until woken or `timeout`.
    fn sleep(&self, timeout: Duration) {
        let mut w = self.wake.lock();
        if !*w {
            self.wake_cv.wait_for(&mut w, timeout);
        }
        *w = false;
    }
}

/// The committer: releases transactions and measures their commit
/// latency. One per database with a log, behind a mutex: the lane that
/// lands a part runs a round at once, and a thread runs one every 50 ms.
pub(crate) struct Committer {
    state: Arc<CommitState>,
    groups: Vec<Arc<LogGroup>>,
    /// Per group: transactions whose records are durable but that wait on
    /// dependencies, with when the committer found them durable.
    held: Vec<Vec<(Pending, Instant)>>,
    stop: Arc<AtomicBool>,
}

impl Committer {
    pub(crate) fn new(
        state: Arc<CommitState>,
        groups: Vec<Arc<LogGroup>>,
        stop: Arc<AtomicBool>,
    ) -> Committer {
        let held = groups.iter().map(|_| Vec::new()).collect();
        Committer { state, groups, held, stop }
    }

    /// The committer thread: a round every 50 ms or when woken, until
    /// stopped (the last round runs after `stop` is seen). The lanes run a
    /// round themselves after each part lands (`LogGroup::run_lane`), so
    /// this thread is the safety net and the closer, not the fast path.
    pub(crate) fn run(shared: Arc<Mutex<Committer>>) {
        let (state, stop) = {
            let c = shared.lock();
            (Arc::clone(&c.state), Arc::clone(&c.stop))
        };
        loop {
            let stopping = stop.load(Ordering::Acquire);
            shared.lock().round();
            if stopping || state.is_poisoned() {
                return;
            }
            state.sleep(Duration::from_millis(50));
        }
    }

    /// Compute gCSN, release what it allows, wake the waiters.
    pub(crate) fn round(&mut self) {
        let gcsn = self.state.publish_gcsn(&self.groups);
        let now = Instant::now();
        let newly_durable: Vec<Vec<Pending>> =
            self.groups.iter().map(|g| g.drain_durable()).collect();
        let tracking = self.state.tracking;
        let releasable = |p: &Pending| match tracking {
            Tracking::Record => p.dsn < gcsn,
            Tracking::Txn => p.csn < gcsn,
        };
        let mut m = self.state.metrics.lock();
        for (held, fresh) in self.held.iter_mut().zip(newly_durable) {
            held.retain(|(p, durable_at)| {
                if !releasable(p) {
                    return true;
                }
                m.released += 1;
                m.waited += 1;
                record(&mut m.latency_us, now - p.at);
                record(&mut m.dependency_wait_us, now - *durable_at);
                false
            });
            for p in fresh {
                if releasable(&p) {
                    m.released += 1;
                    record(&mut m.latency_us, now - p.at);
                } else {
                    held.push((p, now));
                }
            }
        }
        drop(m);
        self.state.notify_acks();
    }
}

fn record(h: &mut Histogram<u64>, d: Duration) {
    h.saturating_record((d.as_micros() as u64).max(1));
}
