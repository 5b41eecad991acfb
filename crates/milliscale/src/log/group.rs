//! Restricted decentralized logging (paper §4.2): worker threads are split
//! into groups of `log_group_size`, and each group shares one log buffer.
//!
//! **One step (invariant 1).** A worker pre-commits under its group's lock:
//! it waits for room, takes the CSN from the global counter, writes its
//! entry into the buffer and queues its ack, all before the lock is
//! released. So a group's buffer is in CSN order, and a CSN is pending in
//! its group from the moment it exists (invariant 2's first race).
//!
//! **Parts.** The group's workers fill the *active* buffer. Its stream
//! (`stream`: the lanes that write the parts of one or more groups) cuts
//! it when a lane flushes: the buffer is sealed as the group's next part
//! and the workers go on filling a fresh one. They wait only when that one
//! is full while every lane is busy.
//!
//! Parts are cut from the buffer in CSN order and numbered in that order
//! (`Pending::part`), but lanes finish in any order. What of the group is
//! durable (its parts in flight, its contiguous mark, the parts that
//! landed out of order) is kept in one place,
//! `commit::durability::GroupDurability`: the group reports each cut and
//! each landing there.
//!
//! **Two locks, so that the log's threads never wait for a worker the
//! scheduler took off its core.** A worker holds the group's buffer lock
//! (`state`) while it takes its CSN and copies its entry; with more
//! workers than cores it is sometimes preempted there, and whoever wants
//! that lock waits for the worker's next turn on a core: milliseconds
//! (measured: with 8 workers in 4 groups on 2 cores, 1% of cuts waited 8
//! ms or more). So the lanes and the committer touch it as little as they
//! can:
//! - a lane *tries* the lock to cut the buffer, and leaves a busy group
//!   for the next flush (`LogGroup::cut`);
//! - the parts in flight have their own lock (in `GroupDurability`),
//!   which only the log's threads take;
//! - the transactions a buffer holds, which the committer measures, are
//!   kept in the buffer's state (`GroupState::txns`) and travel with the
//!   part they were cut into: pre-commit takes no other lock for them;
//! - the oldest CSN not yet durable in the active buffer is published in
//!   an atomic (`GroupDurability::buffer_pending`), which the committer
//!   reads for gCSN without the buffer lock. A worker publishes a lower
//!   bound of its CSN *before* it takes it (invariant 2's first race),
//!   then the CSN itself.
//!
//! The buffer is the part itself: it starts with room for the part header,
//! entries are appended as encoded, and the lane seals the header and
//! checksum in place (`record::seal_part`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use parking_lot::{Condvar, Mutex, MutexGuard};

use super::record::{self, EntryKind, PART_HEADER_BYTES};
use super::signal::FlushSignal;
use crate::commit::CommitMarks;
use crate::commit::durability::{GroupDurability, Pending};
use crate::error::{Error, Result};
use crate::mvcc::Csn;

/// One log group: a buffer its workers fill, cut into parts by its stream.
pub(crate) struct LogGroup {
    pub(crate) id: u32,
    capacity: usize,
    /// The lanes of its stream.
    lanes: u32,
    /// The buffer: workers hold it to log an entry.
    state: Mutex<GroupState>,
    /// Workers wait here for room in the active buffer.
    room: Condvar,
    /// Its stream's lanes wait here for something to flush.
    signal: Arc<FlushSignal>,
    commit: Arc<CommitMarks>,
    pub(crate) stats: GroupStats,
}

struct GroupState {
    /// The part being filled: header room, then entries.
    active: Vec<u8>,
    active_entries: u32,
    active_first: Csn,
    active_last: Csn,
    /// When the first entry arrived in the active buffer.
    active_since: Option<Instant>,
    /// The number the active buffer will have as a part.
    active_part: u64,
    /// Its pre-committed transactions, in CSN order, for the committer's
    /// measurements; they go with the part.
    txns: Vec<Pending>,
    /// A worker found no room (for the count of full flushes).
    full: bool,
    closing: bool,
}

/// Counters of one group; read with [`LogGroup::metrics`].
#[derive(Default)]
pub(crate) struct GroupStats {
    /// Part bytes since the group started (never reset; checkpoint trigger).
    written: AtomicU64,
    flushes: AtomicU64,
    bytes: AtomicU64,
    entries: AtomicU64,
    full_flushes: AtomicU64,
    out_of_order: AtomicU64,
    room_waits: AtomicU64,
    skipped: AtomicU64,
    hist: Mutex<Option<GroupHistograms>>,
}

struct GroupHistograms {
    fill_us: Histogram<u64>,
    flush_us: Histogram<u64>,
}

/// What one log group did.
#[derive(Debug, Clone)]
pub struct GroupMetrics {
    /// The group.
    pub group: u32,
    /// Its stream's lanes (parts it may have in flight at once).
    pub lanes: u32,
    /// Parts written (one in each append of its stream that found the
    /// group's buffer holding entries).
    pub flushes: u64,
    /// Of those, flushed because the buffer was full (the rest by the
    /// flush policy or at close).
    pub full_flushes: u64,
    /// Parts that landed before an earlier part of the group did.
    pub out_of_order: u64,
    /// Part bytes written (per store).
    pub bytes: u64,
    /// Entries (transactions) logged.
    pub entries: u64,
    /// Pre-commits that had to wait for room in the buffer.
    pub room_waits: u64,
    /// Flushes that left the group's entries for the next one because a
    /// worker held its buffer lock.
    pub skipped: u64,
    /// Microseconds from a buffer's first entry to its flush.
    pub fill_us: Histogram<u64>,
    /// Microseconds the append that carried a part took to reach a quorum.
    pub flush_us: Histogram<u64>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
}

/// The least room a fresh buffer starts with.
const BUFFER_START_MIN: usize = 4 << 10;

/// An empty buffer (a part header's room) that can hold `bytes` before it
/// grows.
fn new_buffer(bytes: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(bytes.max(PART_HEADER_BYTES));
    v.resize(PART_HEADER_BYTES, 0);
    v
}

/// What [`LogGroup::cut`] found.
pub(crate) enum CutResult {
    /// The buffer, sealed as the group's next part.
    Part(Cut),
    /// Nothing to cut.
    Empty,
    /// A worker held the buffer lock; try again with the next flush.
    Skipped,
}

/// A part a lane took from a group's buffer, to write.
pub(crate) struct Cut {
    pub(crate) bytes: Vec<u8>,
    pub(crate) part: u64,
    pub(crate) first: Csn,
    pub(crate) entries: u32,
    /// From the buffer's first entry to the cut.
    pub(crate) fill: Duration,
    /// A worker found the buffer full.
    pub(crate) full: bool,
    /// The transactions whose commit entries it holds.
    pub(crate) txns: Vec<Pending>,
}

impl LogGroup {
    pub(crate) fn new(
        id: u32,
        capacity: usize,
        lanes: u32,
        signal: Arc<FlushSignal>,
        commit: Arc<CommitMarks>,
    ) -> LogGroup {
        LogGroup {
            id,
            capacity,
            lanes,
            state: Mutex::new(GroupState {
                active: new_buffer(PART_HEADER_BYTES + capacity),
                active_entries: 0,
                active_first: 0,
                active_last: 0,
                active_since: None,
                active_part: 0,
                txns: Vec::new(),
                full: false,
                closing: false,
            }),
            room: Condvar::new(),
            signal,
            commit,
            stats: GroupStats::default(),
        }
    }

    /// Lock the group with room for an entry of `len` bytes. The caller
    /// then takes its CSN and writes its entry through the returned guard,
    /// in one critical section. An entry larger than the buffer goes out
    /// alone, as one larger part.
    pub(crate) fn reserve(&self, len: usize) -> Result<Reservation<'_>> {
        let mut st = self.state.lock();
        let mut waited = false;
        loop {
            if let Some(e) = self.commit.poison_error() {
                return Err(e);
            }
            if st.closing {
                return Err(Error::Closed);
            }
            let used = st.active.len() - PART_HEADER_BYTES;
            if st.active_entries == 0 || used + len <= self.capacity {
                break;
            }
            if !waited {
                waited = true;
                self.stats.room_waits.fetch_add(1, Ordering::Relaxed);
            }
            st.full = true;
            self.signal.full();
            milliscale_seam::cv_wait_for(&self.room, &mut st, Duration::from_millis(100));
        }
        Ok(Reservation { group: self, st, csn: None })
    }

    /// What of this group is durable.
    pub(crate) fn durability(&self) -> &GroupDurability {
        self.commit.group(self.id as usize)
    }

    /// Part bytes written since the group started.
    pub(crate) fn bytes_written(&self) -> u64 {
        self.stats.written.load(Ordering::Relaxed)
    }

    /// Take no more entries (its stream then writes what is left).
    pub(crate) fn close(&self) {
        self.state.lock().closing = true;
        self.room.notify_all();
    }

    /// Wake workers waiting for room (after poisoning).
    pub(crate) fn wake_all(&self) {
        let _st = self.state.lock();
        self.room.notify_all();
    }

    /// Cut the active buffer as the group's next part, if it holds any
    /// entry, and put the part in flight. Unless `wait`, a busy buffer
    /// lock is not waited for: the group is left for the next flush
    /// (`Skipped`).
    pub(crate) fn cut(&self, now: Instant, wait: bool) -> CutResult {
        let mut st = if wait {
            self.state.lock()
        } else if let Some(st) = self.state.try_lock() {
            st
        } else {
            self.stats.skipped.fetch_add(1, Ordering::Relaxed);
            return CutResult::Skipped;
        };
        if st.active_entries == 0 {
            return CutResult::Empty;
        }
        // The next buffer starts at twice this part's size: room to grow
        // without copying, and no buffer-sized allocation per flush (a
        // worker flushing 1 KiB parts would otherwise fault in a fresh
        // megabyte each time).
        let next = (2 * st.active.len()).clamp(BUFFER_START_MIN, PART_HEADER_BYTES + self.capacity);
        let bytes = std::mem::replace(&mut st.active, new_buffer(next));
        let mut cut = Cut {
            bytes,
            part: st.active_part,
            first: st.active_first,
            entries: st.active_entries,
            fill: st.active_since.map_or(Duration::ZERO, |t| now.saturating_duration_since(t)),
            full: st.full,
            txns: Vec::new(),
        };
        // The part's transactions go with it; the next buffer gets a
        // recycled list (see `commit::durability`).
        let spare = self.durability().part_cut(cut.part, cut.first, st.active_last);
        cut.txns = std::mem::replace(&mut st.txns, spare);
        st.active_part += 1;
        st.active_entries = 0;
        st.active_first = 0;
        st.active_since = None;
        st.full = false;
        drop(st);
        self.room.notify_all();
        CutResult::Part(cut)
    }

    /// Seal a cut part in place: header and checksum.
    pub(crate) fn seal(&self, cut: &mut Cut) {
        record::seal_part(&mut cut.bytes, self.id, cut.first, cut.entries);
    }

    /// Part `part`, carrying `txns`, is on a quorum (see
    /// `GroupDurability::landed`).
    pub(crate) fn landed(&self, part: u64, txns: Vec<Pending>) {
        if self.durability().landed(part, txns) {
            self.stats.out_of_order.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Count a part that landed: its size, entries, how long its buffer
    /// filled and how long the append that carried it took.
    pub(crate) fn record_flush(&self, cut: &Cut, size: u64, took: Duration) {
        self.room.notify_all();
        let s = &self.stats;
        s.flushes.fetch_add(1, Ordering::Relaxed);
        s.bytes.fetch_add(size, Ordering::Relaxed);
        s.written.fetch_add(size, Ordering::Relaxed);
        s.entries.fetch_add(u64::from(cut.entries), Ordering::Relaxed);
        if cut.full {
            s.full_flushes.fetch_add(1, Ordering::Relaxed);
        }
        let mut h = s.hist.lock();
        let h = h
            .get_or_insert_with(|| GroupHistograms { fill_us: histogram(), flush_us: histogram() });
        h.fill_us.saturating_record((cut.fill.as_micros() as u64).max(1));
        h.flush_us.saturating_record((took.as_micros() as u64).max(1));
    }

    /// A snapshot of the counters.
    pub(crate) fn metrics(&self) -> GroupMetrics {
        let s = &self.stats;
        let h = s.hist.lock();
        GroupMetrics {
            group: self.id,
            lanes: self.lanes,
            flushes: s.flushes.load(Ordering::Relaxed),
            full_flushes: s.full_flushes.load(Ordering::Relaxed),
            out_of_order: s.out_of_order.load(Ordering::Relaxed),
            bytes: s.bytes.load(Ordering::Relaxed),
            entries: s.entries.load(Ordering::Relaxed),
            room_waits: s.room_waits.load(Ordering::Relaxed),
            skipped: s.skipped.load(Ordering::Relaxed),
            fill_us: h.as_ref().map_or_else(histogram, |h| h.fill_us.clone()),
            flush_us: h.as_ref().map_or_else(histogram, |h| h.flush_us.clone()),
        }
    }

    /// Zero the counters (benchmarks: after loading, before measuring).
    pub(crate) fn reset_metrics(&self) {
        let s = &self.stats;
        for c in [
            &s.flushes,
            &s.full_flushes,
            &s.out_of_order,
            &s.bytes,
            &s.entries,
            &s.room_waits,
            &s.skipped,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        *s.hist.lock() = None;
    }
}

/// A worker's hold on its group between taking a CSN and logging its
/// entry (see the module docs). Dropping it without writing an entry after
/// taking a CSN would lose that CSN, so it panics in debug builds.
pub(crate) struct Reservation<'g> {
    group: &'g LogGroup,
    st: MutexGuard<'g, GroupState>,
    csn: Option<Csn>,
}

impl Reservation<'_> {
    /// Take the next CSN. The caller has already marked itself COMMITTING.
    pub(crate) fn take_csn(&mut self) -> Csn {
        debug_assert!(self.csn.is_none(), "one CSN per reservation");
        let next = &self.group.commit.next_csn;
        if self.st.active_entries == 0 {
            // Pending before it exists (see the module docs): the counter
            // now is a lower bound of the CSN taken next.
            self.group.durability().buffer_pending(next.load(Ordering::SeqCst));
        }
        let csn = next.fetch_add(1, Ordering::SeqCst);
        self.csn = Some(csn);
        csn
    }

    /// Count the entry just encoded; true if it is the buffer's first.
    fn push_entry(&mut self, csn: Csn) -> bool {
        let st = &mut *self.st;
        debug_assert!(st.active_entries == 0 || csn > st.active_last, "a group logs in CSN order");
        let first = st.active_entries == 0;
        if first {
            st.active_first = csn;
            self.group.durability().buffer_pending(csn);
            st.active_since = Some(milliscale_seam::now());
        }
        st.active_entries += 1;
        st.active_last = csn;
        first
    }

    /// Release the buffer lock, then, if the entry was the buffer's first,
    /// tell the stream. Not under the lock: the signal may wake a lane,
    /// and a lane with a short scheduler slice takes the core at once, so
    /// a worker that signalled under the lock was preempted holding it,
    /// and the next cut found the group busy (measured: 1.5 of 4 groups
    /// skipped per flush at 8 threads on 2 cores). Safe: the entry is in
    /// the buffer before the signal, so either a cut after the signal's
    /// `data_since` takes it, or a cut before it did.
    fn release(self, first: bool) {
        let group = self.group;
        drop(self);
        if first {
            group.signal.data();
        }
    }

    /// Log a commit entry: header, then the records encoded while the
    /// transaction ran; queue its ack. Returns it, and the bytes the
    /// buffer now holds.
    pub(crate) fn write_commit(mut self, dsn: Csn, records: u32, redo: &[u8]) -> (Pending, usize) {
        let csn = self.csn.take().expect("take_csn first");
        record::encode_entry_header(&mut self.st.active, EntryKind::Commit, records, csn, dsn);
        self.st.active.extend_from_slice(redo);
        let first = self.push_entry(csn);
        let p = Pending { csn, dsn, part: self.st.active_part, at: milliscale_seam::now() };
        let buffered = self.st.active.len() - PART_HEADER_BYTES;
        self.st.txns.push(p);
        self.release(first);
        (p, buffered)
    }

    /// Log an abort entry for a CSN that will not commit (invariant 1).
    pub(crate) fn write_abort(mut self) {
        let csn = self.csn.take().expect("take_csn first");
        record::encode_entry_header(&mut self.st.active, EntryKind::Abort, 0, csn, 0);
        let first = self.push_entry(csn);
        self.release(first);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        debug_assert!(self.csn.is_none(), "a CSN was taken but nothing was logged for it");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Tracking;

    #[test]
    fn a_lane_skips_a_busy_buffer_and_gcsn_never_waits_for_its_lock() {
        let commit = Arc::new(CommitMarks::new(1, Tracking::Record, true, 1));
        let signal = Arc::new(FlushSignal::new(&[0], Duration::ZERO));
        let g = LogGroup::new(0, 4096, 1, signal, Arc::clone(&commit));
        assert_eq!(g.durability().oldest_not_durable(), None);
        let mut r = g.reserve(32).expect("room");
        let csn = r.take_csn();
        let (p, buffered) = r.write_commit(0, 0, &[]);
        assert_eq!(buffered, record::ENTRY_HEADER_BYTES);
        assert_eq!(p.csn, csn);
        // A worker holds the buffer lock (as if the scheduler took it off
        // its core there): the lane does not wait, and gCSN is known.
        let held = g.state.lock();
        assert!(matches!(g.cut(milliscale_seam::now(), false), CutResult::Skipped));
        assert_eq!(g.durability().oldest_not_durable(), Some(csn));
        drop(held);
        let CutResult::Part(cut) = g.cut(milliscale_seam::now(), false) else {
            panic!("the buffer holds an entry")
        };
        assert_eq!((cut.first, cut.entries), (csn, 1));
        assert!(matches!(g.cut(milliscale_seam::now(), false), CutResult::Empty));
        // In flight now, not in the buffer: still the oldest not durable.
        assert_eq!(g.durability().oldest_not_durable(), Some(csn));
        assert_eq!(cut.txns.iter().map(|p| p.csn).collect::<Vec<_>>(), [csn]);
        g.landed(cut.part, cut.txns);
        assert_eq!(g.durability().oldest_not_durable(), None);
        let landed = g.durability().take_landed();
        assert_eq!(landed.iter().map(|p| p.csn).collect::<Vec<_>>(), [csn]);
    }

    #[test]
    fn a_csn_is_pending_before_it_is_taken() {
        let commit = Arc::new(CommitMarks::new(1, Tracking::Record, true, 7));
        let g = LogGroup::new(
            0,
            4096,
            1,
            Arc::new(FlushSignal::new(&[0], Duration::ZERO)),
            Arc::clone(&commit),
        );
        let mut r = g.reserve(32).expect("room");
        // Between taking the lock and the CSN, the group already reports
        // a lower bound of it, so a committer that read the counter after
        // the CSN was taken can never skip it.
        let r_bound = commit.next_csn.load(Ordering::SeqCst);
        let csn = r.take_csn();
        assert!(g.durability().oldest_not_durable().is_some_and(|o| o <= csn && o >= r_bound));
        r.write_abort();
        assert_eq!(g.durability().oldest_not_durable(), Some(csn));
    }
}
