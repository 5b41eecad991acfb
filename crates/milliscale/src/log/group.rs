//! Restricted decentralized logging (paper §4.2): worker threads are split
//! into groups of `log_group_size`, and each group shares one log buffer and
//! one flusher thread.
//!
//! **One step (invariant 1).** A worker pre-commits under its group's lock:
//! it waits for room, takes the CSN from the global counter, writes its
//! entry into the buffer and queues its ack, all before the lock is
//! released. So a group's log is in CSN order, and a CSN is pending in its
//! group from the moment it exists (invariant 2's first race).
//!
//! **Double buffering.** A group has an *active* buffer that workers fill
//! and at most one *in-flight* buffer that its flusher is writing. The
//! flusher swaps them when the active buffer is full (a worker found no
//! room for its entry) or when `flush_timeout` has passed since the first
//! entry arrived in it. Workers wait only when the active buffer is full
//! while another flush is still in flight.
//!
//! The buffer is the part itself: it starts with room for the part header,
//! entries are appended as encoded, and the flusher seals the header and
//! checksum in place (`record::seal_part`) and hands the bytes to the
//! stores without another copy.
//!
//! **Segments are chosen here**, not by each store's writer: a part goes
//! to the group's current segment, which moves on after `parts_max` parts
//! or when a checkpoint asks for a fresh one ([`LogGroup::mark_checkpoint`]).
//! So every store holds the same parts in the same segments, each store's
//! segments are consecutive, and a checkpoint knows exactly which segments
//! it makes obsolete.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use parking_lot::{Condvar, Mutex, MutexGuard};

use super::record::{self, EntryKind, PART_HEADER_BYTES};
use super::replica::ReplicaSet;
use crate::commit::dependency::CommitState;
use crate::error::{Error, Result};
use crate::mvcc::Csn;

/// A pre-committed transaction in a group's commit queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pending {
    pub(crate) csn: Csn,
    pub(crate) dsn: Csn,
    /// When it pre-committed.
    pub(crate) at: Instant,
}

/// One log group: a buffer, its flusher's state, and its commit queue.
pub(crate) struct LogGroup {
    pub(crate) id: u32,
    capacity: usize,
    flush_timeout: Duration,
    parts_max: u32,
    state: Mutex<GroupState>,
    /// Workers wait here for room in the active buffer.
    room: Condvar,
    /// The flusher waits here for something to flush.
    work: Condvar,
    commit: Arc<CommitState>,
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
    /// First CSN of the part being written, 0 if none.
    in_flight_first: Csn,
    /// A worker found no room: flush without waiting for the timeout.
    full: bool,
    closing: bool,
    /// The segment the next part goes to, and parts already in it.
    segment: u64,
    segment_parts: u32,
    /// Pre-committed transactions of the active and in-flight parts, and
    /// of parts made durable since the committer last looked, in CSN order.
    queue: Vec<Pending>,
}

impl GroupState {
    /// The first CSN of the in-flight part, else of the active one.
    fn oldest_not_durable(&self) -> Option<Csn> {
        if self.in_flight_first != 0 {
            Some(self.in_flight_first)
        } else if self.active_entries > 0 {
            Some(self.active_first)
        } else {
            None
        }
    }
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
    room_waits: AtomicU64,
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
    /// Parts written (flushes).
    pub flushes: u64,
    /// Of those, flushed because the buffer was full (the rest timed out
    /// or were flushed at close).
    pub full_flushes: u64,
    /// Part bytes written (per store).
    pub bytes: u64,
    /// Entries (transactions) logged.
    pub entries: u64,
    /// Pre-commits that had to wait for room in the buffer.
    pub room_waits: u64,
    /// Microseconds from a buffer's first entry to its flush.
    pub fill_us: Histogram<u64>,
    /// Microseconds a flush took to reach a quorum.
    pub flush_us: Histogram<u64>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
}

fn new_buffer(capacity: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(PART_HEADER_BYTES + capacity);
    v.resize(PART_HEADER_BYTES, 0);
    v
}

impl LogGroup {
    pub(crate) fn new(
        id: u32,
        capacity: usize,
        flush_timeout: Duration,
        (first_segment, parts_max): (u64, u32),
        commit: Arc<CommitState>,
    ) -> LogGroup {
        LogGroup {
            id,
            capacity,
            flush_timeout,
            parts_max: parts_max.max(1),
            state: Mutex::new(GroupState {
                active: new_buffer(capacity),
                active_entries: 0,
                active_first: 0,
                active_last: 0,
                active_since: None,
                in_flight_first: 0,
                full: false,
                closing: false,
                segment: first_segment,
                segment_parts: 0,
                queue: Vec::new(),
            }),
            room: Condvar::new(),
            work: Condvar::new(),
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
            self.work.notify_one();
            self.room.wait_for(&mut st, Duration::from_millis(100));
        }
        Ok(Reservation { group: self, st, csn: None })
    }

    /// Committer: take the queued transactions whose records are durable.
    pub(crate) fn drain_durable(&self) -> Vec<Pending> {
        let mut st = self.state.lock();
        let durable = self.commit.durable[self.id as usize].load(Ordering::SeqCst);
        let n = st.queue.partition_point(|p| p.csn <= durable);
        st.queue.drain(..n).collect()
    }

    /// The oldest CSN of this group that is not yet durable, if any.
    pub(crate) fn oldest_not_durable(&self) -> Option<Csn> {
        self.state.lock().oldest_not_durable()
    }

    /// Checkpoint: start a fresh segment for everything logged from now on.
    /// Returns that segment and a CSN bound: every CSN this group logs from
    /// now on is at least the bound, and goes to the segment or a later one.
    pub(crate) fn mark_checkpoint(&self) -> (u64, Csn) {
        let mut st = self.state.lock();
        if st.segment_parts > 0 {
            st.segment += 1;
            st.segment_parts = 0;
        }
        // CSNs are taken under this lock (`Reservation::take_csn`).
        (st.segment, self.commit.next_csn.load(Ordering::SeqCst))
    }

    /// Part bytes written since the group started.
    pub(crate) fn bytes_written(&self) -> u64 {
        self.stats.written.load(Ordering::Relaxed)
    }

    /// Ask the flusher to write what it has and stop.
    pub(crate) fn close(&self) {
        self.state.lock().closing = true;
        self.work.notify_all();
        self.room.notify_all();
    }

    /// Wake workers waiting for room (after poisoning).
    pub(crate) fn wake_all(&self) {
        let _st = self.state.lock();
        self.work.notify_all();
        self.room.notify_all();
    }

    /// The flusher thread's loop: swap, seal, write to a quorum, publish.
    pub(crate) fn run_flusher(&self, mut replicas: ReplicaSet) {
        loop {
            let mut st = self.state.lock();
            let trigger = loop {
                if self.commit.is_poisoned() {
                    return;
                }
                if st.active_entries == 0 {
                    if st.closing {
                        return;
                    }
                    self.work.wait(&mut st);
                    continue;
                }
                let age = st.active_since.map_or(Duration::ZERO, |t| t.elapsed());
                if st.full {
                    break Trigger::Full;
                }
                if st.closing || age >= self.flush_timeout {
                    break Trigger::Timeout;
                }
                self.work.wait_for(&mut st, self.flush_timeout - age);
            };
            let mut part = std::mem::replace(&mut st.active, new_buffer(self.capacity));
            let (first, last, entries) = (st.active_first, st.active_last, st.active_entries);
            let fill = st.active_since.map_or(Duration::ZERO, |t| t.elapsed());
            st.in_flight_first = first;
            st.active_entries = 0;
            st.active_first = 0;
            st.active_since = None;
            st.full = false;
            if st.segment_parts >= self.parts_max {
                st.segment += 1;
                st.segment_parts = 0;
            }
            let segment = st.segment;
            st.segment_parts += 1;
            drop(st);
            self.room.notify_all();

            record::seal_part(&mut part, self.id, first, entries);
            // A store may keep the bytes (the memory store does): do not
            // let a small part pin a whole buffer's allocation.
            if part.capacity() > 2 * part.len() {
                part.shrink_to_fit();
            }
            let bytes = part.len() as u64;
            let started = Instant::now();
            if let Err(e) = replicas.write(segment, Bytes::from(part)) {
                self.commit.poison(e);
                self.wake_all();
                return;
            }
            let took = started.elapsed();
            {
                // One step under the lock: whoever sees the new `durable`
                // (an ack) and then scans the groups for gCSN
                // (`CommitState::publish_gcsn`) finds the in-flight part
                // gone.
                let mut st = self.state.lock();
                self.commit.durable[self.id as usize].store(last, Ordering::SeqCst);
                st.in_flight_first = 0;
            }
            self.room.notify_all();
            self.commit.wake_committer();

            let s = &self.stats;
            s.flushes.fetch_add(1, Ordering::Relaxed);
            s.bytes.fetch_add(bytes, Ordering::Relaxed);
            s.written.fetch_add(bytes, Ordering::Relaxed);
            s.entries.fetch_add(u64::from(entries), Ordering::Relaxed);
            if trigger == Trigger::Full {
                s.full_flushes.fetch_add(1, Ordering::Relaxed);
            }
            let mut h = s.hist.lock();
            let h = h.get_or_insert_with(|| GroupHistograms {
                fill_us: histogram(),
                flush_us: histogram(),
            });
            h.fill_us.saturating_record((fill.as_micros() as u64).max(1));
            h.flush_us.saturating_record((took.as_micros() as u64).max(1));
        }
    }

    /// A snapshot of the counters.
    pub(crate) fn metrics(&self) -> GroupMetrics {
        let s = &self.stats;
        let h = s.hist.lock();
        GroupMetrics {
            group: self.id,
            flushes: s.flushes.load(Ordering::Relaxed),
            full_flushes: s.full_flushes.load(Ordering::Relaxed),
            bytes: s.bytes.load(Ordering::Relaxed),
            entries: s.entries.load(Ordering::Relaxed),
            room_waits: s.room_waits.load(Ordering::Relaxed),
            fill_us: h.as_ref().map_or_else(histogram, |h| h.fill_us.clone()),
            flush_us: h.as_ref().map_or_else(histogram, |h| h.flush_us.clone()),
        }
    }

    /// Zero the counters (benchmarks: after loading, before measuring).
    pub(crate) fn reset_metrics(&self) {
        let s = &self.stats;
        for c in [&s.flushes, &s.full_flushes, &s.bytes, &s.entries, &s.room_waits] {
            c.store(0, Ordering::Relaxed);
        }
        *s.hist.lock() = None;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    Full,
    Timeout,
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
        let csn = self.group.commit.next_csn.fetch_add(1, Ordering::SeqCst);
        self.csn = Some(csn);
        csn
    }

    fn push_entry(&mut self, csn: Csn) {
        let st = &mut *self.st;
        debug_assert!(st.active_entries == 0 || csn > st.active_last, "a group logs in CSN order");
        if st.active_entries == 0 {
            st.active_first = csn;
            st.active_since = Some(Instant::now());
            self.group.work.notify_one();
        }
        st.active_entries += 1;
        st.active_last = csn;
    }

    /// Log a commit entry: header, then the records encoded while the
    /// transaction ran; queue its ack.
    pub(crate) fn write_commit(mut self, dsn: Csn, records: u32, redo: &[u8]) -> Pending {
        let csn = self.csn.take().expect("take_csn first");
        record::encode_entry_header(&mut self.st.active, EntryKind::Commit, records, csn, dsn);
        self.st.active.extend_from_slice(redo);
        self.push_entry(csn);
        let p = Pending { csn, dsn, at: Instant::now() };
        self.st.queue.push(p);
        p
    }

    /// Log an abort entry for a CSN that will not commit (invariant 1).
    pub(crate) fn write_abort(mut self) {
        let csn = self.csn.take().expect("take_csn first");
        record::encode_entry_header(&mut self.st.active, EntryKind::Abort, 0, csn, 0);
        self.push_entry(csn);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        debug_assert!(self.csn.is_none(), "a CSN was taken but nothing was logged for it");
    }
}
