//! The indirection array: record id (RID) -> head of the record's version chain.
//!
//! A fixed directory of lazily allocated chunks, so the array grows without
//! ever moving a slot: a slot's address is stable for the table's lifetime,
//! which lets writers CAS the head in place. RIDs are handed out densely by
//! an atomic counter and never reused.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use crossbeam_epoch::Atomic;

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

type Chunk = [Atomic<Version>; CHUNK_LEN];

pub(crate) struct OidArray {
    directory: Box<[AtomicPtr<Chunk>]>,
    next_rid: AtomicU64,
}

impl OidArray {
    pub(crate) fn new() -> OidArray {
        let directory = (0..DIRECTORY_LEN).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect();
        OidArray { directory, next_rid: AtomicU64::new(0) }
    }

    /// Reserve a new record id whose slot is empty (null head).
    pub(crate) fn allocate(&self) -> Result<Rid> {
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
        let r0 = a.allocate().expect("first rid");
        let r1 = a.allocate().expect("second rid");
        assert_eq!((r0, r1), (Rid(0), Rid(1)));
        let p = a.slot(r1) as *const _;
        for _ in 0..CHUNK_LEN + 3 {
            a.allocate().expect("rid");
        }
        assert_eq!(p, a.slot(r1) as *const _, "slots never move");
        assert_eq!(a.len(), CHUNK_LEN as u64 + 5);
    }
}
