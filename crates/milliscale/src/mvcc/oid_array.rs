//! The indirection array: record id (RID) -> head of the record's version chain.
//!
//! A fixed directory of lazily allocated chunks, so the array grows without
//! ever moving a slot: a slot's address is stable for the table's lifetime,
//! which lets writers CAS the head in place. RIDs are handed out densely by
//! an atomic counter; a RID freed by `reclaim` (the crate's module) is handed out again
//! once no running transaction can still hold it (see [`OidArray::free`]).
//!
//! A head tagged [`SEALED`] (and null) belongs to a key whose index entry
//! is being removed or is gone: readers find an empty chain (the key is
//! absent), and a writer looks the key up again instead of installing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use crossbeam_epoch::{Atomic, Shared};
use parking_lot::Mutex;

use super::version::Version;
use crate::error::{Error, Result};

pub(crate) const CHUNK_LEN: usize = 1 << 16;
pub(crate) const DIRECTORY_LEN: usize = 1 << 12;
const _: () = assert!(
    (DIRECTORY_LEN as u64) * (CHUNK_LEN as u64) == crate::limits::RECORDS_PER_TABLE_MAX,
    "the limit is the indirection array's size"
);

/// A record id, dense within a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rid(pub(crate) u64);

/// The tag of a sealed head (see the module's doc).
pub(crate) const SEALED: usize = 1;

type Chunk = [Atomic<Version>; CHUNK_LEN];

pub(crate) struct OidArray {
    directory: Box<[AtomicPtr<Chunk>]>,
    next_rid: AtomicU64,
    /// Freed RIDs, each with the mark above which the GC horizon must be
    /// before it is handed out again; marks grow along the queue.
    free: Mutex<VecDeque<(u64, Rid)>>,
    free_len: AtomicUsize,
    /// How many times a freed RID was handed out again: while it has not
    /// moved, no RID changed keys ([`OidArray::reuses`]).
    reused: AtomicU64,
}

impl OidArray {
    pub(crate) fn new() -> OidArray {
        let directory = (0..DIRECTORY_LEN).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect();
        OidArray {
            directory,
            next_rid: AtomicU64::new(0),
            free: Mutex::new(VecDeque::new()),
            free_len: AtomicUsize::new(0),
            reused: AtomicU64::new(0),
        }
    }

    /// Reserve a record id whose slot is empty (null head): a freed one
    /// whose mark is below `reuse_below` (the caller's GC horizon), or a
    /// new one.
    pub(crate) fn allocate(&self, reuse_below: u64) -> Result<Rid> {
        if self.free_len.load(Ordering::Acquire) > 0 {
            let mut free = self.free.lock();
            if free.front().is_some_and(|(mark, _)| *mark < reuse_below) {
                let (_, rid) = free.pop_front().expect("checked above");
                self.free_len.store(free.len(), Ordering::Release);
                drop(free);
                // Counted before the unseal: whoever sees the slot unsealed
                // by this reuse sees the count moved ([`OidArray::reuses`]).
                self.reused.fetch_add(1, Ordering::SeqCst);
                // Unseal: the sealed head is null, and nobody holds this RID.
                self.slot(rid).store(Shared::null(), Ordering::SeqCst);
                return Ok(rid);
            }
        }
        let rid = self.next_rid.fetch_add(1, Ordering::Relaxed);
        if rid >= crate::limits::RECORDS_PER_TABLE_MAX {
            self.next_rid.fetch_sub(1, Ordering::Relaxed);
            return Err(Error::InvalidArgument(format!(
                "table is full: at most {} records per table",
                crate::limits::RECORDS_PER_TABLE_MAX
            )));
        }
        self.ensure_chunk((rid as usize) / CHUNK_LEN);
        Ok(Rid(rid))
    }

    /// The head slot of an allocated record.
    pub(crate) fn slot(&self, rid: Rid) -> &Atomic<Version> {
        let (dir, off) = ((rid.0 as usize) / CHUNK_LEN, (rid.0 as usize) % CHUNK_LEN);
        let chunk = self.directory[dir].load(Ordering::Acquire);
        assert!(!chunk.is_null(), "slot() on a RID that was never allocated");
        // SAFETY: chunks are allocated before their RIDs are handed out and
        // freed only in `Drop`, which has exclusive access.
        unsafe { &(*chunk)[off] }
    }

    /// Number of RIDs handed out so far (an upper bound on records).
    pub(crate) fn len(&self) -> u64 {
        self.next_rid.load(Ordering::Acquire)
    }

    /// Give `rid` back, its head sealed or null and its index entry gone.
    /// It is handed out again once the GC horizon passes `mark`: the GC
    /// counter read after the index entry was removed. A transaction holds
    /// a RID only from an index lookup to its end, with its slot in the
    /// transaction table all that time; one that looked the key up before
    /// the removal began before it, so its snapshot is at most `mark` and
    /// it keeps the horizon at or below `mark` until it ends (the drop of a
    /// table frees its contents by the same rule). Marks must not decrease
    /// from call to call.
    pub(crate) fn free(&self, rid: Rid, mark: u64) {
        let mut free = self.free.lock();
        debug_assert!(free.back().is_none_or(|(m, _)| *m <= mark), "marks grow");
        free.push_back((mark, rid));
        self.free_len.store(free.len(), Ordering::Release);
    }

    /// Give back a RID that `allocate` just returned and nobody else has
    /// seen (its key's insert lost a race): it may be handed out at once.
    pub(crate) fn give_back_unused(&self, rid: Rid) {
        let mut free = self.free.lock();
        free.push_front((0, rid));
        self.free_len.store(free.len(), Ordering::Release);
    }

    /// How many freed RIDs were handed out again so far. A RID found as
    /// a key's record stays that key's record, or sealed, for as long as
    /// this count does not move: a freed RID is sealed until it is handed
    /// out again, and the count rises before it is unsealed. So a caller
    /// that finds `rid` unsealed ([`OidArray::is_sealed`], loaded first)
    /// and then the count unchanged since `rid` was the key's knows it
    /// still is.
    pub(crate) fn reuses(&self) -> u64 {
        self.reused.load(Ordering::SeqCst)
    }

    /// Is the head of `rid` sealed? (A load of the tag alone; nothing is
    /// dereferenced.)
    pub(crate) fn is_sealed(&self, rid: Rid) -> bool {
        // SAFETY: the pointer is only inspected for its tag, never followed.
        let guard = unsafe { crossbeam_epoch::unprotected() };
        self.slot(rid).load(Ordering::SeqCst, guard).tag() == SEALED
    }

    fn ensure_chunk(&self, dir: usize) {
        if !self.directory[dir].load(Ordering::Acquire).is_null() {
            return;
        }
        let fresh: Box<Chunk> = new_chunk();
        let fresh = Box::into_raw(fresh);
        if self.directory[dir]
            .compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // SAFETY: we just allocated `fresh` and lost the race; nobody else saw it.
            drop(unsafe { Box::from_raw(fresh) });
        }
    }

    /// Visit every allocated slot (used by `Drop` and by diagnostics).
    pub(crate) fn for_each_slot(&self, mut f: impl FnMut(Rid, &Atomic<Version>)) {
        for rid in 0..self.len() {
            f(Rid(rid), self.slot(Rid(rid)));
        }
    }
}

fn new_chunk() -> Box<Chunk> {
    let v: Vec<Atomic<Version>> = (0..CHUNK_LEN).map(|_| Atomic::null()).collect();
    v.into_boxed_slice().try_into().unwrap_or_else(|_| unreachable!("length is CHUNK_LEN"))
}

impl Drop for OidArray {
    fn drop(&mut self) {
        // SAFETY: `&mut self` means no other thread can reach these versions;
        // every chain is owned solely through its head slot.
        let guard = unsafe { crossbeam_epoch::unprotected() };
        self.for_each_slot(|_, slot| {
            let mut cur = slot.swap(crossbeam_epoch::Shared::null(), Ordering::Relaxed, guard);
            while !cur.is_null() {
                // SAFETY: exclusive access, see above.
                let owned = unsafe { cur.into_owned() };
                cur = owned.next.swap(crossbeam_epoch::Shared::null(), Ordering::Relaxed, guard);
                drop(owned);
            }
        });
        for ptr in self.directory.iter() {
            let chunk = ptr.load(Ordering::Relaxed);
            if !chunk.is_null() {
                // SAFETY: allocated by `ensure_chunk` via `Box::into_raw`.
                drop(unsafe { Box::from_raw(chunk) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rids_are_dense_and_slots_stable() {
        let a = OidArray::new();
        let r0 = a.allocate(0).expect("first rid");
        let r1 = a.allocate(0).expect("second rid");
        assert_eq!((r0, r1), (Rid(0), Rid(1)));
        let p = a.slot(r1) as *const _;
        for _ in 0..CHUNK_LEN + 3 {
            a.allocate(0).expect("rid");
        }
        assert_eq!(p, a.slot(r1) as *const _, "slots never move");
        assert_eq!(a.len(), CHUNK_LEN as u64 + 5);
    }

    #[test]
    fn a_freed_rid_is_handed_out_again_only_past_its_mark() {
        let a = OidArray::new();
        let rids: Vec<Rid> = (0..4).map(|_| a.allocate(0).expect("rid")).collect();
        a.free(rids[1], 10);
        a.free(rids[2], 20);
        assert_eq!(a.allocate(10).expect("rid"), Rid(4), "10 is not past mark 10");
        assert_eq!(a.allocate(11).expect("rid"), rids[1]);
        assert_eq!(a.allocate(11).expect("rid"), Rid(5), "mark 20 waits");
        a.give_back_unused(Rid(5));
        assert_eq!(a.allocate(1).expect("rid"), Rid(5), "an unused rid comes back at once");
        assert_eq!(a.allocate(u64::MAX).expect("rid"), rids[2]);
        assert_eq!(a.len(), 6, "no new rid was needed for the reused ones");
    }
}
