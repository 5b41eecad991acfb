//! Version garbage collection against the oldest active snapshot.
//!
//! The horizon `h` is a lower bound on every running and future snapshot
//! (see `TxnTable::horizon`). In a chain, the newest version committed with
//! CSN `< h` is visible to every reader that can still reach the chain, so
//! every version *below* it is unreachable by any visibility walk and can be
//! cut off. Readers already walking stop at or above that version (a version
//! they skip as invisible has a CSN >= their snapshot >= h), so cutting below
//! it never changes what they find. Memory is returned through the epoch
//! collector, after every thread pinned at the time has moved on.
//!
//! Trimming runs on the commit path, for each record the transaction wrote,
//! so an update-only workload keeps each chain short and memory bounded.
//!
//! **Long walks are amortized.** With a log, the horizon trails gCSN (so
//! durable-snapshot readers find their versions), and a hot record keeps
//! every version written since the last flush: hundreds under a zipfian
//! load. Walking all of them on every write of that record doubled the
//! commit path's cost. So a trim walks at most [`SHORT_WALK`] versions
//! unless the caller asks for a full walk, which the commit path does for
//! one write in [`FULL_WALK_EVERY`] (by CSN). Garbage on a hot chain is then
//! retired within that many writes of it; chains that are short (the usual
//! case) are trimmed on every write, as before.
//!
//! **A replaced version goes once the horizon passes its replacement, not
//! at the record's next write.** The horizon trails the commit that trims
//! (it is below the commit's own CSN, and with a log below gCSN), so that
//! trim keeps the version the commit replaced. Left there, every record
//! ever updated would hold two versions until it is written again: one
//! more version per record touched, a third more memory once every row
//! of a table has been updated (`BENCHMARKS.md`). So a commit whose trim
//! leaves a version below its own queues the record ([`Retrims`]), and
//! later commits trim the queued records once the horizon passes the
//! commit that queued them, a bounded number per commit.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_epoch::{Atomic, Guard, Shared};
use parking_lot::Mutex;

use super::Csn;
use super::oid_array::Rid;
use super::version::{Stamp, Version, prefetch};

/// Queued records a commit trims at most beyond its own writes' number
/// (see [`Retrims::cycle`]).
pub(crate) const RETRIMS_PER_COMMIT: usize = 64;

/// A record to trim again once the horizon passes `csn`, the commit that
/// left a version below its own there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retrim {
    pub(crate) table: u32,
    pub(crate) rid: Rid,
    pub(crate) csn: Csn,
}

/// Records due for a trim, taken from the queue by one commit.
pub(crate) type Due = smallvec::SmallVec<[Retrim; 16]>;

/// The records waiting for the horizon (see the module's comment), oldest
/// commit first (roughly: commits queue concurrently).
#[derive(Default)]
pub(crate) struct Retrims {
    queue: Mutex<VecDeque<Retrim>>,
    queued: AtomicUsize,
}

impl Retrims {
    /// Queue `new`, and move into `due` up to `max` queued records whose
    /// commit is below `horizon`: one lock for both.
    pub(crate) fn cycle(&self, new: &[Retrim], horizon: Csn, max: usize, due: &mut Due) {
        if new.is_empty() && self.queued.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut q = self.queue.lock();
        q.extend(new.iter().copied());
        while due.len() < max && q.front().is_some_and(|r| r.csn < horizon) {
            due.extend(q.pop_front());
        }
        self.queued.store(q.len(), Ordering::Release);
    }

    /// Records queued.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }
}

/// Whether the chain at `head` holds a version below its newest.
pub(crate) fn holds_older(head: &Atomic<Version>, guard: &Guard) -> bool {
    // SAFETY: pinned by `guard`; versions are freed only through the epoch collector.
    unsafe { head.load(Ordering::Acquire, guard).as_ref() }
        .is_some_and(|v| !v.next.load(Ordering::Acquire, guard).is_null())
}

/// The most chains [`prefetch_chains`] loads at once.
pub(crate) const PREFETCH_CHAINS_MAX: usize = 64;

/// Start loading into the CPU's cache the heads at `slots` and the first
/// `1 + below` versions of their chains, a level of all the chains at a
/// time: the records a batch touches are scattered over far more memory
/// than the cache holds, and each otherwise waits for its loads from
/// memory one after another. It changes nothing else (see [`prefetch`]).
/// Only the first [`PREFETCH_CHAINS_MAX`] chains: the cache would not
/// keep more until they are used.
pub(crate) fn prefetch_chains<'a>(
    slots: impl Iterator<Item = &'a Atomic<Version>> + Clone,
    below: usize,
    guard: &Guard,
) {
    let slots = slots.take(PREFETCH_CHAINS_MAX);
    for slot in slots.clone() {
        prefetch(slot);
    }
    for level in 0..=below {
        for slot in slots.clone() {
            let mut cur = slot.load(Ordering::Acquire, guard);
            for _ in 0..level {
                // SAFETY: pinned by `guard`; versions are freed only through
                // the epoch collector.
                match unsafe { cur.as_ref() } {
                    Some(v) => cur = v.next.load(Ordering::Acquire, guard),
                    None => break,
                }
            }
            if !cur.is_null() {
                // The address only (a tag, if any, is in its low bits).
                prefetch(crossbeam_epoch::Pointer::into_usize(cur) as *const u8);
            }
        }
    }
}

/// Versions a trim walks before it gives up, unless asked for a full walk.
pub(crate) const SHORT_WALK: usize = 4;
/// One write in this many (by CSN) trims with a full walk.
pub(crate) const FULL_WALK_EVERY: u64 = 16;

/// Cut the chain at `head` below its newest version committed before
/// `horizon`. Unless `full`, give up after [`SHORT_WALK`] versions.
/// Returns the number of versions retired.
pub(crate) fn trim_chain(head: &Atomic<Version>, horizon: Csn, full: bool, guard: &Guard) -> usize {
    let mut cur = head.load(Ordering::Acquire, guard);
    let mut walked = 0;
    // SAFETY: pinned by `guard`; versions are freed only through the epoch collector.
    while let Some(v) = unsafe { cur.as_ref() } {
        if matches!(v.stamp(), Stamp::Committed(c) if c < horizon) {
            return retire_below(v, guard);
        }
        walked += 1;
        if walked >= SHORT_WALK && !full {
            return 0;
        }
        cur = v.next.load(Ordering::Acquire, guard);
    }
    0
}

/// Detach and retire everything below `v`. Every node is reached through
/// exactly one `next` pointer, and each pointer is taken with `swap`, so two
/// concurrent trimmers of one chain never retire the same node twice.
pub(crate) fn retire_below(v: &Version, guard: &Guard) -> usize {
    let mut tail = v.next.swap(Shared::null(), Ordering::AcqRel, guard);
    let mut retired = 0;
    // SAFETY: pinned by `guard`; we own the detached tail.
    while let Some(t) = unsafe { tail.as_ref() } {
        let next = t.next.swap(Shared::null(), Ordering::AcqRel, guard);
        // SAFETY: `tail` is now unreachable from the chain, and only this
        // thread obtained it (see above); readers still holding it are pinned.
        unsafe { guard.defer_destroy(tail) };
        retired += 1;
        tail = next;
    }
    retired
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(csns: &[Csn]) -> Atomic<Version> {
        // csns newest first
        let head = Atomic::null();
        let guard = crossbeam_epoch::pin();
        for &c in csns.iter().rev() {
            let v = Version::committed(c, Some(&[c as u8]));
            v.next.store(head.load(Ordering::Relaxed, &guard), Ordering::Relaxed);
            head.store(v, Ordering::Release);
        }
        head
    }

    fn len(head: &Atomic<Version>, guard: &Guard) -> usize {
        let mut n = 0;
        let mut cur = head.load(Ordering::Acquire, guard);
        // SAFETY: pinned by `guard`.
        while let Some(v) = unsafe { cur.as_ref() } {
            n += 1;
            cur = v.next.load(Ordering::Acquire, guard);
        }
        n
    }

    #[test]
    fn a_short_walk_gives_up_on_a_long_chain_and_a_full_walk_does_not() {
        let csns: Vec<Csn> = (1..=40).rev().collect();
        let head = chain(&csns);
        let guard = crossbeam_epoch::pin();
        assert_eq!(trim_chain(&head, 5, false, &guard), 0, "36 versions above the horizon");
        assert_eq!(len(&head, &guard), 40);
        assert_eq!(trim_chain(&head, 5, true, &guard), 3, "4 stays; 3, 2, 1 go");
        assert_eq!(len(&head, &guard), 37);
        drop(guard);
        let guard = crossbeam_epoch::pin();
        let mut cur = head.swap(Shared::null(), Ordering::AcqRel, &guard);
        // SAFETY: detached from the only reference; freed one by one.
        while let Some(v) = unsafe { cur.as_ref() } {
            let next = v.next.load(Ordering::Acquire, &guard);
            // SAFETY: as above.
            unsafe { guard.defer_destroy(cur) };
            cur = next;
        }
    }

    #[test]
    fn keeps_the_newest_version_below_the_horizon() {
        let head = chain(&[40, 30, 20, 10]);
        let guard = crossbeam_epoch::pin();
        assert_eq!(trim_chain(&head, 10, true, &guard), 0, "nothing is older than the horizon");
        assert_eq!(len(&head, &guard), 4);
        assert_eq!(trim_chain(&head, 31, false, &guard), 2, "30 stays, 20 and 10 go");
        assert_eq!(len(&head, &guard), 2);
        assert_eq!(trim_chain(&head, 1000, false, &guard), 1);
        assert_eq!(len(&head, &guard), 1);
        drop(guard);
        // Free the remaining head.
        let guard = crossbeam_epoch::pin();
        let h = head.swap(Shared::null(), Ordering::AcqRel, &guard);
        // SAFETY: detached from the only reference, the head.
        unsafe { guard.defer_destroy(h) };
    }
}
