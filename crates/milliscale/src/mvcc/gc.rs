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

use std::sync::atomic::Ordering;

use crossbeam_epoch::{Atomic, Guard, Shared};

use super::Csn;
use super::version::{Stamp, Version};

/// Cut the chain at `head` below its newest version committed before
/// `horizon`. Returns the number of versions retired.
pub(crate) fn trim_chain(head: &Atomic<Version>, horizon: Csn, guard: &Guard) -> usize {
    let mut cur = head.load(Ordering::Acquire, guard);
    // SAFETY: pinned by `guard`; versions are freed only through the epoch collector.
    while let Some(v) = unsafe { cur.as_ref() } {
        if matches!(v.stamp(), Stamp::Committed(c) if c < horizon) {
            return retire_below(v, guard);
        }
        cur = v.next.load(Ordering::Acquire, guard);
    }
    0
}

/// Detach and retire everything below `v`. Every node is reached through
/// exactly one `next` pointer, and each pointer is taken with `swap`, so two
/// concurrent trimmers of one chain never retire the same node twice.
fn retire_below(v: &Version, guard: &Guard) -> usize {
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
    fn keeps_the_newest_version_below_the_horizon() {
        let head = chain(&[40, 30, 20, 10]);
        let guard = crossbeam_epoch::pin();
        assert_eq!(trim_chain(&head, 10, &guard), 0, "nothing is older than the horizon");
        assert_eq!(len(&head, &guard), 4);
        assert_eq!(trim_chain(&head, 31, &guard), 2, "30 stays, 20 and 10 go");
        assert_eq!(len(&head, &guard), 2);
        assert_eq!(trim_chain(&head, 1000, &guard), 1);
        assert_eq!(len(&head, &guard), 1);
        drop(guard);
        // Free the remaining head.
        let guard = crossbeam_epoch::pin();
        let h = head.swap(Shared::null(), Ordering::AcqRel, &guard);
        // SAFETY: detached from the only reference, the head.
        unsafe { guard.defer_destroy(h) };
    }
}
