//! The transaction table: one slot per running transaction.
//!
//! A slot publishes three things other threads need:
//! - `tid`: which transaction owns the slot now (generation << SLOT_BITS | index);
//! - `state`: ACTIVE, COMMITTING, VALIDATING(csn), COMMITTED(csn) or ABORTED;
//! - `snapshot`: the transaction's begin snapshot, for the GC horizon.
//!
//! Slots are claimed with a CAS on a per-slot flag, starting from the slot
//! the calling thread used last (see [`TxnTable`]).
//!
//! A reader that meets a version stamped `Owner(tid)` reads the slot like a
//! seqlock: tid, state, tid again. The owner stamps all its versions before it
//! changes the slot's tid, so a reader that sees a changed tid re-reads the
//! version's stamp and finds the final CSN or ABORTED there.
//!
//! Commit states, and why each exists:
//! - COMMITTING is set *before* the CSN is taken, so a reader whose snapshot
//!   was taken after the CSN was handed out can never mistake the creator for
//!   ACTIVE (invisible). A reader that sees COMMITTING waits a few
//!   instructions until the CSN is published.
//! - VALIDATING(csn) is a serializable transaction checking its reads. Readers
//!   with a snapshot above csn wait for the outcome; waits only ever go to a
//!   smaller CSN, so they cannot form a cycle.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crossbeam_utils::{Backoff, CachePadded};

use crate::mvcc::Csn;

pub(crate) const SLOT_BITS: u32 = 20;
pub(crate) const SLOTS_MAX: usize = 1 << SLOT_BITS;
const _: () = assert!(crate::limits::TRANSACTIONS_MAX <= SLOTS_MAX);
/// `snapshot` value of a slot that holds no running transaction.
const NO_SNAPSHOT: u64 = u64::MAX;

/// A transaction id: the slot index plus a generation, unique over the
/// database's lifetime (2^43 generations per slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tid(pub(crate) u64);

impl Tid {
    fn slot_index(self) -> usize {
        (self.0 & ((1 << SLOT_BITS) - 1)) as usize
    }
}

/// The published state of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxnState {
    Active,
    /// Entered commit; CSN not yet known.
    Committing,
    /// Has CSN `csn`; serializable validation in progress.
    Validating(Csn),
    Committed(Csn),
    Aborted,
}

const TAG_ACTIVE: u64 = 0;
const TAG_COMMITTING: u64 = 1;
const TAG_COMMITTED: u64 = 2;
const TAG_ABORTED: u64 = 3;

impl TxnState {
    fn encode(self) -> u64 {
        match self {
            TxnState::Active => TAG_ACTIVE,
            TxnState::Committing => TAG_COMMITTING,
            TxnState::Validating(c) => (c << 2) | TAG_COMMITTING,
            TxnState::Committed(c) => (c << 2) | TAG_COMMITTED,
            TxnState::Aborted => TAG_ABORTED,
        }
    }

    fn decode(raw: u64) -> TxnState {
        let csn = raw >> 2;
        match raw & 3 {
            TAG_ACTIVE => TxnState::Active,
            TAG_COMMITTING if csn == 0 => TxnState::Committing,
            TAG_COMMITTING => TxnState::Validating(csn),
            TAG_COMMITTED => TxnState::Committed(csn),
            _ => TxnState::Aborted,
        }
    }
}

struct Slot {
    /// Claimed by a running transaction (CAS false -> true at begin).
    in_use: AtomicBool,
    tid: AtomicU64,
    state: AtomicU64,
    snapshot: AtomicU64,
}

/// Slots are claimed by CAS on their own `in_use` flag, starting from the
/// slot this thread used last. A thread that runs one transaction after
/// another keeps reclaiming the same slot, touching only that slot's cache
/// line: no shared free list bounces between workers.
pub(crate) struct TxnTable {
    /// Identifies this table in the per-thread hint.
    id: u64,
    slots: Box<[CachePadded<Slot>]>,
    /// One past the highest slot index ever claimed (read-mostly), bounding
    /// the horizon scan.
    high_water: CachePadded<AtomicU32>,
}

static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// (table id, slot index) this thread claimed last.
    static SLOT_HINT: Cell<(u64, u32)> = const { Cell::new((0, 0)) };
}

/// What the owner of a slot holds; returned to the table on drop of the txn.
pub(crate) struct SlotLease {
    pub(crate) tid: Tid,
}

impl TxnTable {
    pub(crate) fn new(capacity: usize) -> TxnTable {
        assert!(capacity > 0 && capacity <= SLOTS_MAX);
        let slots = (0..capacity)
            .map(|i| {
                CachePadded::new(Slot {
                    in_use: AtomicBool::new(false),
                    tid: AtomicU64::new(i as u64),
                    state: AtomicU64::new(TAG_ACTIVE),
                    snapshot: AtomicU64::new(NO_SNAPSHOT),
                })
            })
            .collect();
        TxnTable {
            id: NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed),
            slots,
            high_water: CachePadded::new(AtomicU32::new(0)),
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Take a slot and register a begin snapshot read from `counter`.
    ///
    /// The slot advertises a provisional snapshot before the final one is read,
    /// so a concurrent horizon computation either sees the slot or read the
    /// counter before our final read (see [`TxnTable::horizon`]).
    pub(crate) fn begin(&self, counter: &AtomicU64) -> Option<(SlotLease, Csn)> {
        let index = self.claim()?;
        // SeqCst with the stores and loads below and in `horizon`: the
        // horizon proof needs all of them in one total order.
        if self.high_water.load(Ordering::SeqCst) <= index {
            self.high_water.fetch_max(index + 1, Ordering::SeqCst);
        }
        let slot = &self.slots[index as usize];
        let tid = Tid(slot.tid.load(Ordering::Relaxed));
        debug_assert_eq!(tid.slot_index(), index as usize);
        debug_assert_eq!(TxnState::decode(slot.state.load(Ordering::Relaxed)), TxnState::Active);
        slot.snapshot.store(counter.load(Ordering::SeqCst), Ordering::SeqCst);
        let snapshot = counter.load(Ordering::SeqCst);
        Some((SlotLease { tid }, snapshot))
    }

    pub(crate) fn set_state(&self, lease: &SlotLease, state: TxnState) {
        self.slots[lease.tid.slot_index()].state.store(state.encode(), Ordering::SeqCst);
    }

    /// Return the slot. The caller must already have stamped every version it
    /// created with its final CSN or ABORTED.
    pub(crate) fn end(&self, lease: SlotLease) {
        let index = lease.tid.slot_index();
        let slot = &self.slots[index];
        slot.snapshot.store(NO_SNAPSHOT, Ordering::Release);
        // The tid changes before the state resets: a seqlock reader that sees
        // the reset state also sees the new tid and retries (see module docs).
        slot.tid.store(lease.tid.0 + (1 << SLOT_BITS), Ordering::Release);
        slot.state.store(TAG_ACTIVE, Ordering::Release);
        slot.in_use.store(false, Ordering::Release);
    }

    /// Claim a free slot: this thread's last one if free, else the first
    /// free one after it. `None` if all are in use.
    fn claim(&self) -> Option<u32> {
        let n = self.slots.len();
        let (table, hint) = SLOT_HINT.get();
        let start = if table == self.id { hint as usize % n } else { 0 };
        for i in 0..n {
            let index = (start + i) % n;
            let slot = &self.slots[index];
            if !slot.in_use.load(Ordering::Relaxed)
                && slot
                    .in_use
                    // SeqCst: a catalog that drops a table reads every
                    // slot's flag after marking it (`Engine::retire_table`).
                    .compare_exchange(false, true, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok()
            {
                SLOT_HINT.set((self.id, index as u32));
                return Some(index as u32);
            }
        }
        None
    }

    /// The state of transaction `tid`, or `None` if it has finished and
    /// released its slot (then its versions carry their final stamps).
    pub(crate) fn state_of(&self, tid: Tid) -> Option<TxnState> {
        let slot = self.slots.get(tid.slot_index())?;
        if slot.tid.load(Ordering::Acquire) != tid.0 {
            return None;
        }
        let state = TxnState::decode(slot.state.load(Ordering::Acquire));
        if slot.tid.load(Ordering::Acquire) != tid.0 {
            return None;
        }
        Some(state)
    }

    /// Wait until `tid` has a CSN (COMMITTING is a window of a few
    /// instructions; VALIDATING lasts one validation pass) and return its
    /// state, or `None` if it finished meanwhile.
    pub(crate) fn wait_while(
        &self,
        tid: Tid,
        mut pending: impl FnMut(TxnState) -> bool,
    ) -> Option<TxnState> {
        let backoff = Backoff::new();
        loop {
            let state = self.state_of(tid)?;
            if !pending(state) {
                return Some(state);
            }
            milliscale_seam::snooze(&backoff);
        }
    }

    /// The GC horizon: no running or future transaction reads at a snapshot
    /// below this, so every version that is older than the newest version
    /// committed below it can be reclaimed.
    ///
    /// Reads the counter first, then the slots. A transaction whose
    /// provisional snapshot this scan missed (because its store, or its
    /// `high_water` update, came after our read in the SeqCst order) reads
    /// its final snapshot after our counter read, so its snapshot is >= the
    /// counter value we use.
    /// Does any transaction hold a slot?
    pub(crate) fn any_running(&self) -> bool {
        let high = self.high_water.load(Ordering::SeqCst) as usize;
        self.slots[..high.min(self.slots.len())].iter().any(|s| s.in_use.load(Ordering::SeqCst))
    }

    pub(crate) fn horizon(&self, counter: &AtomicU64) -> Csn {
        let mut min = counter.load(Ordering::SeqCst);
        let high = self.high_water.load(Ordering::SeqCst) as usize;
        for slot in &self.slots[..high.min(self.slots.len())] {
            min = min.min(slot.snapshot.load(Ordering::SeqCst));
        }
        min
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip() {
        for s in [
            TxnState::Active,
            TxnState::Committing,
            TxnState::Validating(17),
            TxnState::Committed(1 << 40),
            TxnState::Aborted,
        ] {
            assert_eq!(TxnState::decode(s.encode()), s);
        }
    }

    #[test]
    fn slots_are_reused_with_a_new_generation() {
        let t = TxnTable::new(2);
        let counter = AtomicU64::new(5);
        let (a, snap) = t.begin(&counter).expect("slot");
        assert_eq!(snap, 5);
        let (b, _) = t.begin(&counter).expect("slot");
        assert!(t.begin(&counter).is_none(), "capacity is 2");
        assert_eq!(t.horizon(&counter), 5);
        let old = a.tid;
        t.set_state(&a, TxnState::Committed(5));
        assert_eq!(t.state_of(old), Some(TxnState::Committed(5)));
        t.end(a);
        assert_eq!(t.state_of(old), None, "a finished tid has no state");
        let (c, _) = t.begin(&counter).expect("slot freed");
        assert_ne!(c.tid, old);
        assert_eq!(c.tid.slot_index(), old.slot_index());
        t.end(b);
        t.end(c);
        counter.store(9, Ordering::SeqCst);
        assert_eq!(t.horizon(&counter), 9);
    }
}
