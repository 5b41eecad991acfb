//! One log group's durability state, in one owner.
//!
//! A group's buffer is cut into numbered parts in CSN order (`log::group`),
//! and the lanes that write them finish in any order. For each group this
//! keeps:
//! - `pending_first`: the first CSN of the active buffer, or a lower bound
//!   of it while a worker takes it (0: the buffer is empty). A worker
//!   publishes the bound *before* it takes its CSN, so a CSN is pending
//!   here from the moment it exists (invariant 2's first race);
//! - the parts in flight, in part (and CSN) order; the front, if any, is
//!   not durable;
//! - `durable`: every CSN of the group up to it is durable (the contiguous
//!   prefix of landed parts);
//! - a ring of [`PART_RING`] slots: slot `p % PART_RING` holds `p + 1` once
//!   part `p` landed. A transaction's own records are durable once its
//!   part is, whatever happened to the parts before it: a hit in the ring
//!   is proof, and a part whose slot was reused is found durable through
//!   `durable` once the parts before it are (later, never wrongly);
//! - the pre-committed transactions of the parts that landed, until the
//!   committer takes them ([`GroupDurability::take_landed`]). They travel
//!   with their part from the buffer (`log::group::Cut::txns`), so that
//!   pre-commit takes no lock for them beyond the buffer's. The lists are
//!   recycled (the committer gives each back empty, a cut takes one for
//!   the next buffer), so in a steady state no list is allocated or grown.
//!
//! Lock order: the group's buffer lock (in `log::group`), then `flight`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

use crate::mvcc::Csn;

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

/// A pre-committed transaction, as the committer measures it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pending {
    pub(crate) csn: Csn,
    pub(crate) dsn: Csn,
    /// The number of the group's part its entry goes out in.
    pub(crate) part: u64,
    /// When it pre-committed.
    pub(crate) at: Instant,
}

/// A part cut from a group's buffer and not yet popped as durable.
#[derive(Debug, Clone, Copy)]
struct PartInFlight {
    part: u64,
    first: Csn,
    last: Csn,
    durable: bool,
}

#[derive(Default)]
struct Flight {
    parts: VecDeque<PartInFlight>,
    /// Transactions of landed parts, not yet taken by the committer.
    landed: Vec<Pending>,
    /// Empty lists the committer gave back, for the next buffers.
    spare: Vec<Vec<Pending>>,
}

/// Lists kept for reuse per group: one per buffer that may be filling or
/// in flight at once is plenty; more are dropped.
const SPARE_LISTS_MAX: usize = 8;

/// See the module docs.
pub(crate) struct GroupDurability {
    durable: CachePadded<AtomicU64>,
    pending_first: CachePadded<AtomicU64>,
    ring: Box<[AtomicU64]>,
    /// Only the log's threads take this lock (a lane inside the buffer
    /// lock when it cuts); never a worker.
    flight: Mutex<Flight>,
}

impl GroupDurability {
    pub(crate) fn new() -> GroupDurability {
        GroupDurability {
            durable: CachePadded::new(AtomicU64::new(0)),
            pending_first: CachePadded::new(AtomicU64::new(0)),
            ring: (0..PART_RING).map(|_| AtomicU64::new(0)).collect(),
            flight: Mutex::new(Flight::default()),
        }
    }

    /// Every CSN of the group up to this one is durable.
    #[cfg(test)]
    pub(crate) fn durable(&self) -> Csn {
        self.durable.load(Ordering::SeqCst)
    }

    /// A worker, under the buffer lock: the active buffer's oldest CSN is
    /// now `csn` (or at least it: a lower bound, before the CSN is taken).
    pub(crate) fn buffer_pending(&self, csn: Csn) {
        self.pending_first.store(csn, Ordering::SeqCst);
    }

    /// A lane, under the buffer lock: the active buffer was cut as part
    /// `part` holding CSNs `first..=last`. In flight first, then the buffer
    /// is marked empty, so [`GroupDurability::oldest_not_durable`] always
    /// sees the part in one of them.
    /// Returns an empty list for the next buffer's transactions.
    pub(crate) fn part_cut(&self, part: u64, first: Csn, last: Csn) -> Vec<Pending> {
        let mut flight = self.flight.lock();
        flight.parts.push_back(PartInFlight { part, first, last, durable: false });
        self.pending_first.store(0, Ordering::SeqCst);
        flight.spare.pop().unwrap_or_default()
    }

    /// Part `part` is on a quorum, carrying `txns`: publish it, then pop
    /// the durable parts at the front of the queue and advance the
    /// contiguous mark. One step under the flight lock: whoever sees the
    /// part durable (an ack) and then scans the groups for gCSN finds the
    /// queue already updated. Returns whether an earlier part is still in
    /// flight (it landed out of order).
    pub(crate) fn landed(&self, part: u64, txns: Vec<Pending>) -> bool {
        let mut flight = self.flight.lock();
        self.ring[(part % PART_RING as u64) as usize].store(part + 1, Ordering::SeqCst);
        let out_of_order = flight.parts.front().is_some_and(|p| p.part != part);
        if let Some(p) = flight.parts.iter_mut().find(|p| p.part == part) {
            p.durable = true;
        }
        let mut contiguous = None;
        while flight.parts.front().is_some_and(|p| p.durable) {
            contiguous = flight.parts.pop_front().map(|p| p.last);
        }
        if let Some(last) = contiguous {
            self.durable.store(last, Ordering::SeqCst);
        }
        if flight.landed.is_empty() {
            let empty = std::mem::replace(&mut flight.landed, txns);
            if flight.spare.len() < SPARE_LISTS_MAX && empty.capacity() > 0 {
                flight.spare.push(empty);
            }
        } else {
            flight.landed.extend_from_slice(&txns);
            if flight.spare.len() < SPARE_LISTS_MAX {
                let mut txns = txns;
                txns.clear();
                flight.spare.push(txns);
            }
        }
        out_of_order
    }

    /// The oldest CSN of this group that is not yet durable (or a lower
    /// bound of it), if any: the first CSN of its oldest part in flight,
    /// else of its active buffer. Never waits for the buffer lock. The
    /// active buffer is read first (see [`GroupDurability::part_cut`]).
    pub(crate) fn oldest_not_durable(&self) -> Option<Csn> {
        let active = self.pending_first.load(Ordering::SeqCst);
        let flight = self.flight.lock().parts.front().map(|p| p.first);
        match (flight, active) {
            (Some(f), 0) => Some(f),
            (Some(f), a) => Some(f.min(a)),
            (None, 0) => None,
            (None, a) => Some(a),
        }
    }

    /// Are the records of transaction `csn`, logged in part `part`,
    /// durable?
    pub(crate) fn own_records_durable(&self, csn: Csn, part: u64) -> bool {
        self.durable.load(Ordering::SeqCst) >= csn
            || self.ring[(part % PART_RING as u64) as usize].load(Ordering::SeqCst) == part + 1
    }

    /// The committer: the transactions whose part landed since the last
    /// call (their own records are durable).
    /// Give the list back with [`GroupDurability::recycle`].
    pub(crate) fn take_landed(&self) -> Vec<Pending> {
        let mut flight = self.flight.lock();
        let empty = flight.spare.pop().unwrap_or_default();
        std::mem::replace(&mut flight.landed, empty)
    }

    /// The committer is done with a list [`GroupDurability::take_landed`]
    /// gave it: keep it, emptied, for a later buffer.
    pub(crate) fn recycle(&self, mut list: Vec<Pending>) {
        list.clear();
        let mut flight = self.flight.lock();
        if flight.spare.len() < SPARE_LISTS_MAX {
            flight.spare.push(list);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(csn: Csn, part: u64) -> Pending {
        Pending { csn, dsn: 0, part, at: milliscale_seam::now() }
    }

    #[test]
    fn a_part_that_lands_out_of_order_is_durable_for_its_own_transactions_only() {
        let g = GroupDurability::new();
        g.buffer_pending(10);
        assert_eq!(g.oldest_not_durable(), Some(10));
        let _ = g.part_cut(0, 10, 11);
        g.buffer_pending(12);
        let _ = g.part_cut(1, 12, 12);
        assert_eq!(g.oldest_not_durable(), Some(10));
        // Part 1 lands first: its transaction is durable, the mark is not.
        assert!(g.landed(1, vec![txn(12, 1)]));
        assert!(g.own_records_durable(12, 1));
        assert!(!g.own_records_durable(11, 0));
        assert_eq!((g.durable(), g.oldest_not_durable()), (0, Some(10)));
        assert_eq!(g.take_landed().iter().map(|p| p.csn).collect::<Vec<_>>(), [12]);
        // Part 0 lands: the contiguous prefix covers both.
        assert!(!g.landed(0, vec![txn(10, 0), txn(11, 0)]));
        assert_eq!((g.durable(), g.oldest_not_durable()), (12, None));
        assert!(g.own_records_durable(11, 0));
        let landed = g.take_landed();
        assert_eq!(landed.len(), 2);
        assert!(g.take_landed().is_empty());
        // The committer gives the list back; the next buffer reuses it.
        let capacity = landed.capacity();
        g.recycle(landed);
        g.buffer_pending(13);
        let next = g.part_cut(2, 13, 13);
        assert!(next.is_empty() && next.capacity() >= capacity.min(2), "a recycled list");
    }
}
