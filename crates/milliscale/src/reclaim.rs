//! Reclaiming deleted keys: a key whose newest version is a tombstone that
//! every snapshot sees loses its index entry, its chain and its RID.
//!
//! **Invariant: reclaiming a key changes no answer.** A committed tombstone
//! with CSN `c < h` (the GC horizon) at the head of a chain is visible to
//! every running and future snapshot (see `mvcc::gc`): each of them
//! reads the key as absent, which is what a missing entry says too.
//!
//! The protocol for key `k` at RID `r`, one reclaimer at a time:
//! 1. Check that the index still maps `k` to `r`: the slot is `k`'s.
//! 2. **Seal**: CAS the head from the tombstone to a null pointer tagged
//!    [`SEALED`]. A writer installing over the tombstone races this CAS and
//!    one of them wins. A writer that finds a sealed head looks `k` up
//!    again and, once the entry is gone, inserts `k` afresh under another
//!    RID. A reader finds an empty chain: absent.
//! 3. Remove `k -> r` from the index.
//! 4. Retire the tombstone (and anything below it) through the epoch
//!    collector: readers that loaded it before the seal are pinned.
//! 5. Free `r`, marked with the GC counter read after step 3: it is handed
//!    out again only when no transaction that looked `k` up before step 3
//!    can still run (`OidArray::free`).
//!
//! Serializable validation needs nothing more: it looks its keys up again
//! by key and compares the visible versions, so a key reclaimed and then
//! inserted again is caught like any other write.
//!
//! Candidates come from commits: each committed delete queues its key with
//! the commit's CSN ([`Reclaimer::push`]), and the commit path drains the
//! queue once the horizon passes them, at most [`DRAIN_PER_COMMIT`] keys a
//! commit ([`Reclaimer::drain`]). Recovery removes the keys its replay
//! finds deleted at once (`recovery::replay::install`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_epoch::{Guard, Shared};
use parking_lot::Mutex;

use crate::mvcc::Csn;
use crate::mvcc::gc;
use crate::mvcc::oid_array::{Rid, SEALED};
use crate::mvcc::version::{Stamp, Version};
use crate::table::TableInner;

/// Keys a commit reclaims at most, so that a burst of deletes is paid for
/// over the commits that follow it rather than by one of them.
pub(crate) const DRAIN_PER_COMMIT: usize = 64;

/// A deleted key waiting for the horizon to pass its delete.
pub(crate) struct Doomed {
    pub(crate) table: Arc<TableInner>,
    pub(crate) key: Box<[u8]>,
    pub(crate) rid: Rid,
    /// The CSN of the delete.
    pub(crate) csn: Csn,
}

/// The queue of deleted keys and the one reclaimer that drains it.
#[derive(Default)]
pub(crate) struct Reclaimer {
    queue: Mutex<VecDeque<Doomed>>,
    queued: AtomicUsize,
    /// Held by the one thread reclaiming (see step 1 of the module's doc:
    /// two reclaimers of one key could free its RID twice).
    reclaiming: Mutex<()>,
    /// Keys reclaimed so far.
    pub(crate) reclaimed: AtomicU64,
}

impl Reclaimer {
    /// Queue the keys a transaction deleted and committed at `csn`.
    pub(crate) fn push(&self, deleted: impl IntoIterator<Item = Doomed>) {
        let mut q = self.queue.lock();
        q.extend(deleted);
        self.queued.store(q.len(), Ordering::Release);
    }

    /// Keys queued, not yet reclaimed or found alive again.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Reclaim up to `max` queued keys deleted below `horizon`, unless
    /// another thread is reclaiming. `counter` is the GC counter (marks
    /// for the freed RIDs). Returns the versions retired.
    pub(crate) fn drain(
        &self,
        horizon: Csn,
        counter: &AtomicU64,
        max: usize,
        guard: &Guard,
    ) -> usize {
        if self.queued() == 0 {
            return 0;
        }
        let Some(_one) = self.reclaiming.try_lock() else { return 0 };
        let mut retired = 0;
        for _ in 0..max {
            let next = {
                let mut q = self.queue.lock();
                // Roughly in CSN order (commits push concurrently): one
                // above the horizon holds back the ones behind it a while.
                let d = q.front().is_some_and(|d| d.csn < horizon).then(|| q.pop_front());
                self.queued.store(q.len(), Ordering::Release);
                d.flatten()
            };
            let Some(d) = next else { break };
            if let Some(n) = reclaim_one(&d, horizon, counter, guard) {
                self.reclaimed.fetch_add(1, Ordering::Relaxed);
                retired += n;
            }
        }
        retired
    }
}

/// Steps 1-5 of the module's doc for `d`; `None` if the key is not a
/// reclaimable tombstone at its RID any more (written again, or reclaimed
/// already), else the versions retired.
fn reclaim_one(d: &Doomed, horizon: Csn, counter: &AtomicU64, guard: &Guard) -> Option<usize> {
    let t = &d.table;
    if t.is_dropped() || t.index.get(&d.key) != Some(d.rid) {
        return None;
    }
    let slot = t.records.slot(d.rid);
    let head = slot.load(Ordering::Acquire, guard);
    // SAFETY: pinned by `guard`; versions are freed through the collector.
    let v = unsafe { head.as_ref() }?;
    let below = matches!(v.stamp(), Stamp::Committed(c) if c < horizon);
    if head.tag() == SEALED || !below || !v.is_tombstone() {
        return None;
    }
    let sealed = Shared::<Version>::null().with_tag(SEALED);
    slot.compare_exchange(head, sealed, Ordering::AcqRel, Ordering::Acquire, guard).ok()?;
    let removed = t.index.remove_if(&d.key, d.rid);
    assert!(removed, "only the reclaimer removes index entries, and the entry was there");
    let mark = counter.load(Ordering::SeqCst);
    let retired = gc::retire_below(v, guard) + 1;
    // SAFETY: unlinked by the seal; readers that loaded it are pinned.
    unsafe { guard.defer_destroy(head) };
    t.records.free(d.rid, mark);
    Some(retired)
}
