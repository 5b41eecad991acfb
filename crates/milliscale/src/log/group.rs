//! Restricted decentralized logging (paper §4.2): worker threads are split
//! into groups of `log_group_size`, and each group shares one log buffer.
//!
//! **One step (invariant 1).** A worker pre-commits under its group's lock:
//! it waits for room, takes the CSN from the global counter, writes its
//! entry into the buffer and queues its ack, all before the lock is
//! released. So a group's buffer is in CSN order, and a CSN is pending in
//! its group from the moment it exists (invariant 2's first race).
//!
//! **Lanes: pipelined flushes.** A group writes through `log_lanes`
//! lanes, each a flusher thread with its own chain of segment objects
//! (`segment::Chain`). An S3 Express object takes one append at a time, so
//! one chain can have only one append in flight; several chains let the
//! group's next flush start while an earlier one is still out. A free
//! lane takes the *active* buffer that workers fill, seals it as the next
//! part and writes it; workers go on filling a fresh buffer. They wait
//! only when that one is full while every lane is busy.
//!
//! Parts are cut from the buffer in CSN order and numbered in that order
//! (`Pending::part`), but lanes finish in any order. The group keeps its
//! parts in flight in a queue: when a part lands on a quorum, the flusher
//! publishes that part as durable (`CommitState::publish_part_durable`, so
//! its own transactions can be acknowledged at once), and then pops the
//! durable parts at the front of the queue to advance the group's
//! contiguous mark `durable[g]`. gCSN still counts only the contiguous
//! prefix: the oldest CSN not durable in a group is the first CSN of its
//! oldest part in flight.
//!
//! **When to flush** (`FlushPolicy`). Adaptive (the default): a free lane
//! flushes as soon as the buffer holds data and `flush_min_interval` has
//! passed since the group's last flush, within the database's request
//! budget; the appends in flight pace the flushes, so a busy group sends
//! bigger parts and an idle one sends none. Timeout (the paper's): when the
//! buffer is full or `flush_timeout` after its first entry. Either way a
//! full buffer and data older than `flush_timeout` go out at once.
//!
//! The buffer is the part itself: it starts with room for the part header,
//! entries are appended as encoded, and the flusher seals the header and
//! checksum in place (`record::seal_part`) and hands the bytes to the
//! stores without another copy.
//!
//! **Segments are chosen here**, not by each store's writer: each lane's
//! part goes to its chain's current segment, which moves on after
//! `parts_max` parts or when a checkpoint asks for a fresh one
//! ([`LogGroup::mark_checkpoint`]). So every store holds the same parts in
//! the same segments, each chain's segments are consecutive, and a
//! checkpoint knows exactly which segments it makes obsolete.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use parking_lot::{Condvar, Mutex, MutexGuard};

use super::record::{self, EntryKind, PART_HEADER_BYTES};
use super::replica::ReplicaSet;
use crate::commit::dependency::{CommitState, Committer};
use crate::error::{Error, Result};
use crate::mvcc::Csn;
use crate::options::FlushPolicy;

/// A pre-committed transaction in a group's commit queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pending {
    pub(crate) csn: Csn,
    pub(crate) dsn: Csn,
    /// The number of the group's part its entry goes out in.
    pub(crate) part: u64,
    /// When it pre-committed.
    pub(crate) at: Instant,
}

/// How a group decides when to flush (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct FlushSettings {
    pub(crate) policy: FlushPolicy,
    pub(crate) timeout: Duration,
    pub(crate) min_interval: Duration,
    /// The database's request budget, shared by every group.
    pub(crate) budget: Option<Arc<RequestBudget>>,
}

/// A token bucket of parts per second, shared by a database's groups.
#[derive(Debug)]
pub(crate) struct RequestBudget {
    per_s: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl RequestBudget {
    /// `per_s` parts a second, up to 100 ms of them at once.
    pub(crate) fn new(per_s: u32) -> RequestBudget {
        let per_s = f64::from(per_s.max(1));
        let burst = (per_s / 10.0).max(1.0);
        RequestBudget { per_s, burst, state: Mutex::new((burst, Instant::now())) }
    }

    /// Take one token, or say how long until one is there.
    fn take(&self) -> std::result::Result<(), Duration> {
        let mut st = self.state.lock();
        let now = Instant::now();
        let (tokens, at) = *st;
        let tokens = (tokens + now.duration_since(at).as_secs_f64() * self.per_s).min(self.burst);
        if tokens >= 1.0 {
            *st = (tokens - 1.0, now);
            Ok(())
        } else {
            *st = (tokens, now);
            Err(Duration::from_secs_f64((1.0 - tokens) / self.per_s))
        }
    }
}

/// One log group: a buffer, its lanes' state, and its commit queue.
pub(crate) struct LogGroup {
    pub(crate) id: u32,
    capacity: usize,
    flush: FlushSettings,
    parts_max: u32,
    state: Mutex<GroupState>,
    /// Workers wait here for room in the active buffer.
    room: Condvar,
    /// Free lanes wait here for something to flush.
    work: Condvar,
    commit: Arc<CommitState>,
    pub(crate) stats: GroupStats,
}

/// A part cut from the buffer and not yet popped as durable.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    part: u64,
    first: Csn,
    last: Csn,
    durable: bool,
}

/// Where a lane's next part goes.
#[derive(Debug, Clone, Copy)]
struct LaneState {
    segment: u64,
    segment_parts: u32,
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
    /// Parts cut and not yet popped, in part (and CSN) order; the front,
    /// if any, is not durable.
    in_flight: VecDeque<InFlight>,
    /// When the group last started a flush.
    last_flush: Option<Instant>,
    /// A worker found no room: flush without waiting.
    full: bool,
    closing: bool,
    lanes: Vec<LaneState>,
    /// Pre-committed transactions of the active and in-flight parts, and
    /// of parts made durable since the committer last looked, in CSN order.
    queue: Vec<Pending>,
}

impl GroupState {
    /// The first CSN of the oldest part in flight, else of the active one.
    fn oldest_not_durable(&self) -> Option<Csn> {
        if let Some(p) = self.in_flight.front() {
            Some(p.first)
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
    overlapped: AtomicU64,
    out_of_order: AtomicU64,
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
    /// Its lanes (appends it may keep in flight at once).
    pub lanes: u32,
    /// Parts written (flushes).
    pub flushes: u64,
    /// Of those, flushed because the buffer was full (the rest by the
    /// flush policy or at close).
    pub full_flushes: u64,
    /// Of those, started while another lane of the group was still
    /// writing: the flushes that one lane would have made wait.
    pub overlapped: u64,
    /// Parts that landed before an earlier part of the group did.
    pub out_of_order: u64,
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

/// A part a lane took from the buffer, to write.
struct Cut {
    bytes: Vec<u8>,
    part: u64,
    first: Csn,
    last: Csn,
    entries: u32,
    segment: u64,
    fill: Duration,
    full: bool,
}

impl LogGroup {
    pub(crate) fn new(
        id: u32,
        capacity: usize,
        flush: FlushSettings,
        (first_segments, parts_max): (&[u64], u32),
        commit: Arc<CommitState>,
    ) -> LogGroup {
        LogGroup {
            id,
            capacity,
            flush,
            parts_max: parts_max.max(1),
            state: Mutex::new(GroupState {
                active: new_buffer(capacity),
                active_entries: 0,
                active_first: 0,
                active_last: 0,
                active_since: None,
                active_part: 0,
                in_flight: VecDeque::new(),
                last_flush: None,
                full: false,
                closing: false,
                lanes: first_segments
                    .iter()
                    .map(|&segment| LaneState { segment, segment_parts: 0 })
                    .collect(),
                queue: Vec::new(),
            }),
            room: Condvar::new(),
            work: Condvar::new(),
            commit,
            stats: GroupStats::default(),
        }
    }

    /// The group's lanes.
    pub(crate) fn lanes(&self) -> usize {
        self.state.lock().lanes.len()
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

    /// Committer: take the queued transactions whose own records are
    /// durable (their part landed, whatever happened to earlier parts):
    /// the contiguous prefix up to `durable[g]`, and, only when parts have
    /// landed out of order, those of the landed parts after it.
    pub(crate) fn drain_durable(&self) -> Vec<Pending> {
        let mut st = self.state.lock();
        let id = self.id as usize;
        let durable = self.commit.durable[id].load(Ordering::SeqCst);
        let n = st.queue.partition_point(|p| p.csn <= durable);
        let mut out: Vec<Pending> = st.queue.drain(..n).collect();
        if st.in_flight.iter().any(|p| p.durable) {
            st.queue.retain(|p| {
                let own = crate::commit::dependency::OwnPart { group: id, part: p.part };
                if self.commit.own_records_durable(p.csn, own) {
                    out.push(*p);
                    false
                } else {
                    true
                }
            });
        }
        out
    }

    /// The oldest CSN of this group that is not yet durable, if any.
    pub(crate) fn oldest_not_durable(&self) -> Option<Csn> {
        self.state.lock().oldest_not_durable()
    }

    /// Checkpoint: start a fresh segment in every lane for everything
    /// logged from now on (the next segment number of each lane's chain, so
    /// a chain's segments stay consecutive). Returns those segments, lane
    /// by lane, and a CSN bound: every CSN this group logs from now on is
    /// at least the bound, and goes to one of those segments or a later one.
    pub(crate) fn mark_checkpoint(&self) -> (Vec<u64>, Csn) {
        let mut st = self.state.lock();
        let starts = st
            .lanes
            .iter_mut()
            .map(|l| {
                if l.segment_parts > 0 {
                    l.segment += 1;
                    l.segment_parts = 0;
                }
                l.segment
            })
            .collect();
        // CSNs are taken under this lock (`Reservation::take_csn`).
        (starts, self.commit.next_csn.load(Ordering::SeqCst))
    }

    /// Part bytes written since the group started.
    pub(crate) fn bytes_written(&self) -> u64 {
        self.stats.written.load(Ordering::Relaxed)
    }

    /// Ask the lanes to write what they have and stop.
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

    /// Wait until lane `lane` should flush, and cut the part; `None` when
    /// the lane should stop (closing with nothing left, or poisoned).
    fn next_cut(&self, lane: usize) -> Option<Cut> {
        let mut st = self.state.lock();
        let full = loop {
            if self.commit.is_poisoned() {
                return None;
            }
            if st.active_entries == 0 {
                if st.closing {
                    return None;
                }
                self.work.wait(&mut st);
                continue;
            }
            let now = Instant::now();
            let age = st.active_since.map_or(Duration::ZERO, |t| now - t);
            let due = match self.flush.policy {
                FlushPolicy::Timeout => self.flush.timeout.saturating_sub(age),
                FlushPolicy::Adaptive => {
                    let since = st.last_flush.map_or(Duration::MAX, |t| now - t);
                    self.flush
                        .min_interval
                        .saturating_sub(since)
                        .min(self.flush.timeout.saturating_sub(age))
                }
            };
            if !(st.full || st.closing || due.is_zero()) {
                self.work.wait_for(&mut st, due);
                continue;
            }
            if !st.closing
                && let Some(budget) = &self.flush.budget
                && let Err(wait) = budget.take()
            {
                self.work.wait_for(&mut st, wait);
                continue;
            }
            break st.full;
        };
        let bytes = std::mem::replace(&mut st.active, new_buffer(self.capacity));
        let now = Instant::now();
        let cut = Cut {
            bytes,
            part: st.active_part,
            first: st.active_first,
            last: st.active_last,
            entries: st.active_entries,
            segment: 0,
            fill: st.active_since.map_or(Duration::ZERO, |t| now - t),
            full,
        };
        if !st.in_flight.is_empty() {
            self.stats.overlapped.fetch_add(1, Ordering::Relaxed);
        }
        st.in_flight.push_back(InFlight {
            part: cut.part,
            first: cut.first,
            last: cut.last,
            durable: false,
        });
        st.active_part += 1;
        st.active_entries = 0;
        st.active_first = 0;
        st.active_since = None;
        st.full = false;
        st.last_flush = Some(now);
        let parts_max = self.parts_max;
        let l = &mut st.lanes[lane];
        if l.segment_parts >= parts_max {
            l.segment += 1;
            l.segment_parts = 0;
        }
        l.segment_parts += 1;
        let segment = l.segment;
        drop(st);
        self.room.notify_all();
        Some(Cut { segment, ..cut })
    }

    /// Part `part` is on a quorum: publish it, then pop the durable parts
    /// at the front of the queue and advance the contiguous mark. One step
    /// under the lock: whoever sees the part durable (an ack) and then
    /// scans the groups for gCSN (`CommitState::publish_gcsn`) finds the
    /// queue already updated.
    fn landed(&self, part: u64) {
        let mut st = self.state.lock();
        let id = self.id as usize;
        self.commit.publish_part_durable(id, part);
        if st.in_flight.front().is_some_and(|p| p.part != part) {
            self.stats.out_of_order.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(p) = st.in_flight.iter_mut().find(|p| p.part == part) {
            p.durable = true;
        }
        let mut contiguous = None;
        while st.in_flight.front().is_some_and(|p| p.durable) {
            contiguous = st.in_flight.pop_front().map(|p| p.last);
        }
        if let Some(last) = contiguous {
            self.commit.durable[id].store(last, Ordering::SeqCst);
        }
    }

    /// One lane's flusher loop: wait, cut, seal, write to a quorum,
    /// publish. After each part the lane runs the committer's round itself
    /// (raise gCSN, release, wake the ack waiters, record latencies), so an
    /// ack needs no hop through another thread, which costs milliseconds
    /// when the cores are busy.
    pub(crate) fn run_lane(
        &self,
        lane: usize,
        mut replicas: ReplicaSet,
        committer: &Mutex<Committer>,
    ) {
        while let Some(cut) = self.next_cut(lane) {
            let Cut { mut bytes, part, first, last: _, entries, segment, fill, full } = cut;
            record::seal_part(&mut bytes, self.id, first, entries);
            // A store may keep the bytes (the memory store does): do not
            // let a small part pin a whole buffer's allocation.
            if bytes.capacity() > 2 * bytes.len() {
                bytes.shrink_to_fit();
            }
            let size = bytes.len() as u64;
            let started = Instant::now();
            if let Err(e) = replicas.write(segment, Bytes::from(bytes)) {
                self.commit.poison(e);
                self.wake_all();
                return;
            }
            let took = started.elapsed();
            self.landed(part);
            self.room.notify_all();
            committer.lock().round();

            let s = &self.stats;
            s.flushes.fetch_add(1, Ordering::Relaxed);
            s.bytes.fetch_add(size, Ordering::Relaxed);
            s.written.fetch_add(size, Ordering::Relaxed);
            s.entries.fetch_add(u64::from(entries), Ordering::Relaxed);
            if full {
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
            lanes: self.lanes() as u32,
            flushes: s.flushes.load(Ordering::Relaxed),
            full_flushes: s.full_flushes.load(Ordering::Relaxed),
            overlapped: s.overlapped.load(Ordering::Relaxed),
            out_of_order: s.out_of_order.load(Ordering::Relaxed),
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
        for c in [
            &s.flushes,
            &s.full_flushes,
            &s.overlapped,
            &s.out_of_order,
            &s.bytes,
            &s.entries,
            &s.room_waits,
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
        let p = Pending { csn, dsn, part: self.st.active_part, at: Instant::now() };
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
