//! The numbers an ack decides by: record-level commit dependency
//! tracking, DSN vs gCSN (Milliscale §4.3; invariant 2 in ARCHITECTURE.md).
//!
//! Each log group publishes `durable[g]`: every CSN of group g up to it is
//! durable (a group's parts are cut from its buffer in CSN order, so this
//! is one number), and, since parts can land out of order, which parts
//! landed (see [`super::durability`]). The committer publishes `gcsn`:
//! every CSN below it, in every group, is durable (see
//! [`super::committer::publish_gcsn`] for how it is computed without
//! racing a CSN being taken).
//!
//! A pre-committed transaction T (group g) is acknowledged when
//! - `Tracking::Record`: T's own part is durable (`durable[g] >= T.csn`,
//!   or the ring says so) `&& T.dsn < gcsn`;
//! - `Tracking::Txn`: `T.csn < gcsn`.
//!
//! Both sides are monotone, so an ack handle decides by reading two
//! atomics: no per-transaction allocation or queue entry is needed to
//! answer `is_acknowledged`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;
use parking_lot::{Condvar, Mutex};

use super::durability::{GroupDurability, OwnPart};
use crate::error::Error;
use crate::mvcc::{CSN_FIRST, Csn};
use crate::options::Tracking;

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

/// The ack-to-flush path: how a worker that is about to wait for an ack
/// gets its group's records written first (autonomous commit's force
/// commit; `log::autonomous` implements it). Unset under pipelined
/// commit, where the lanes' threads flush.
pub(crate) trait ForceFlush: Send + Sync {
    /// Flush group `group`'s stream for a worker that waits for an ack,
    /// with no deadline (`None`) or for at most the time given.
    fn flush_for_waiter(&self, group: usize, within: Option<Duration>);
}

/// Shared by workers, flushers, the committer and ack handles.
pub(crate) struct CommitMarks {
    /// The next CSN to hand out (invariant 1: one counter, dense CSNs).
    pub(crate) next_csn: CachePadded<AtomicU64>,
    /// Every CSN below this is durable in every group.
    pub(crate) gcsn: CachePadded<AtomicU64>,
    /// Per log group: what of it is durable.
    groups: Box<[GroupDurability]>,
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
    /// See [`ForceFlush`].
    force_flush: std::sync::OnceLock<Box<dyn ForceFlush>>,
    /// Acks awaited as futures ([`super::ack::Durable`]): each waits to be
    /// woken by the committer round that acknowledges it.
    async_waiters: Mutex<AsyncWaiters>,
    /// How many are registered (read without the lock after a round).
    async_waiting: AtomicUsize,
    /// With a retention window: the time index that acknowledgments keep
    /// (the `history` module's, through [`AckClock`]).
    time_index: std::sync::OnceLock<Arc<dyn AckClock>>,
}

/// What an acknowledgment tells before it is given: the time index of a
/// database with a retention window takes a sample that reaches `csn` if
/// none does yet (`history::times`, rule 2). `counter` is the next CSN to
/// hand out. Like [`ForceFlush`], a path back from `commit/` that knows
/// nothing of who implements it.
pub(crate) trait AckClock: Send + Sync + std::fmt::Debug {
    fn cover(&self, csn: Csn, counter: &AtomicU64);
}

/// The acks awaited as futures, by registration id.
#[derive(Default)]
struct AsyncWaiters {
    next_id: u64,
    by_id: std::collections::HashMap<u64, AsyncWaiter>,
}

/// What one awaited ack waits for, and whom to wake.
struct AsyncWaiter {
    csn: Option<Csn>,
    dsn: Csn,
    own: OwnPart,
    waker: std::task::Waker,
}

impl CommitMarks {
    /// `first` is the first CSN to hand out (after recovery: above every
    /// CSN in the log it read).
    pub(crate) fn new(groups: usize, tracking: Tracking, logged: bool, first: Csn) -> CommitMarks {
        let first = first.max(CSN_FIRST);
        CommitMarks {
            next_csn: CachePadded::new(AtomicU64::new(first)),
            gcsn: CachePadded::new(AtomicU64::new(first)),
            groups: (0..groups).map(|_| GroupDurability::new()).collect(),
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
            async_waiters: Mutex::new(AsyncWaiters::default()),
            async_waiting: AtomicUsize::new(0),
            time_index: std::sync::OnceLock::new(),
        }
    }

    /// Is the transaction (`csn` in part `own`, or read-only) acknowledged?
    /// With a time index, a sample reaches `csn` before this says yes
    /// (`history::times`, rule 2).
    pub(crate) fn is_acknowledged(&self, csn: Option<Csn>, dsn: Csn, own: OwnPart) -> bool {
        if !self.logged {
            return true;
        }
        let gcsn = self.gcsn.load(Ordering::SeqCst);
        match csn {
            // A read-only transaction waits for what it saw.
            None => dsn < gcsn,
            Some(csn) => {
                let acked = match self.tracking {
                    Tracking::Record => dsn < gcsn && self.own_records_durable(csn, own),
                    Tracking::Txn => csn < gcsn,
                };
                if acked && let Some(t) = self.time_index.get() {
                    t.cover(csn, &self.next_csn);
                }
                acked
            }
        }
    }

    /// Keep a time index from now on (a database with a retention window).
    pub(crate) fn set_time_index(&self, t: Arc<dyn AckClock>) {
        let _ = self.time_index.set(t);
    }

    /// Are the records of transaction `csn`, logged in part `own`, durable?
    pub(crate) fn own_records_durable(&self, csn: Csn, own: OwnPart) -> bool {
        self.groups[own.group].own_records_durable(csn, own.part)
    }

    /// Group `g`'s durability state.
    pub(crate) fn group(&self, g: usize) -> &GroupDurability {
        &self.groups[g]
    }

    /// Every group's durability state.
    pub(crate) fn groups(&self) -> &[GroupDurability] {
        &self.groups
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
    /// [`CommitMarks::wait`], giving up at `deadline`: `None` if the
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
        let idle = deadline.saturating_duration_since(milliscale_seam::now());
        if csn.is_some()
            && !idle.is_zero()
            && let Some(flush) = self.force_flush.get()
        {
            flush.flush_for_waiter(own.group, Some(idle));
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
            let now = milliscale_seam::now();
            if now >= deadline {
                break None;
            }
            // Spurious or unrelated wake-ups go round the loop again.
            let _ = milliscale_seam::cv_wait_for(
                &self.acked_cv,
                &mut round,
                (deadline - now).min(Duration::from_millis(100)),
            );
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        result
    }

    pub(crate) fn wait(&self, csn: Option<Csn>, dsn: Csn, own: OwnPart) -> Result<(), Error> {
        for _ in 0..64 {
            if self.is_acknowledged(csn, dsn, own) {
                return Ok(());
            }
            milliscale_seam::spin_loop();
        }
        if csn.is_some()
            && let Some(flush) = self.force_flush.get()
        {
            // Autonomous commit: a waiting worker is idle; it writes its
            // own records out rather than wait for the backstop.
            flush.flush_for_waiter(own.group, None);
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
                if milliscale_seam::cv_wait_for(
                    &self.acked_cv,
                    &mut round,
                    Duration::from_millis(100),
                ) {
                    break;
                }
            }
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        result
    }

    /// Autonomous commit: how a waiting worker flushes its group's stream.
    pub(crate) fn set_force_flush(&self, f: Box<dyn ForceFlush>) {
        let _ = self.force_flush.set(f);
    }

    /// Wake the ack waiters to look again (after a publication). Threads
    /// all look again; an awaited ack is woken only once it is decided
    /// (acknowledged, or the database poisoned), so a thousand tasks that
    /// wait cost a round a thousand checks of two atomics, not a thousand
    /// wake-ups.
    pub(crate) fn notify_acks(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            *self.acked.lock() += 1;
            self.acked_cv.notify_all();
        }
        if self.async_waiting.load(Ordering::SeqCst) > 0 {
            let poisoned = self.is_poisoned();
            let mut w = self.async_waiters.lock();
            w.by_id.retain(|_, a| {
                let decided = poisoned || self.is_acknowledged(a.csn, a.dsn, a.own);
                if decided {
                    a.waker.wake_by_ref();
                }
                !decided
            });
            self.async_waiting.store(w.by_id.len(), Ordering::SeqCst);
        }
    }

    /// Register (or, with `id`, renew) an awaited ack's waker; returns its
    /// id. The caller looks at the marks again afterwards: a round that
    /// published before the registration did not see it.
    pub(crate) fn register_async(
        &self,
        id: Option<u64>,
        csn: Option<Csn>,
        dsn: Csn,
        own: OwnPart,
        waker: &std::task::Waker,
    ) -> u64 {
        let mut w = self.async_waiters.lock();
        let id = id.unwrap_or_else(|| {
            w.next_id += 1;
            w.next_id
        });
        match w.by_id.get_mut(&id) {
            Some(a) => a.waker.clone_from(waker),
            None => {
                let a = AsyncWaiter { csn, dsn, own, waker: waker.clone() };
                w.by_id.insert(id, a);
            }
        }
        self.async_waiting.store(w.by_id.len(), Ordering::SeqCst);
        id
    }

    /// Forget an awaited ack (its future was dropped or finished).
    pub(crate) fn deregister_async(&self, id: u64) {
        let mut w = self.async_waiters.lock();
        w.by_id.remove(&id);
        self.async_waiting.store(w.by_id.len(), Ordering::SeqCst);
    }

    /// Called by a flusher after a part became durable.
    pub(crate) fn wake_committer(&self) {
        *self.wake.lock() = true;
        self.wake_cv.notify_one();
    }

    /// Committer: sleep until woken or `timeout`.
    pub(crate) fn sleep(&self, timeout: Duration) {
        let mut w = self.wake.lock();
        if !*w {
            milliscale_seam::cv_wait_for(&self.wake_cv, &mut w, timeout);
        }
        *w = false;
    }
}
