//! Log streams: the lanes that write the groups' parts.
//!
//! Groups (`group`) keep the paper's restricted decentralized logging: a
//! buffer per group of workers, so workers of different groups never
//! contend for one lock. A **stream** is what writes them. It owns
//! `log_lanes` **lanes**, each a flusher thread with its own chain of
//! segment objects (`keys::Chain`, named after the stream's first
//! group). An S3 Express object takes one append at a time, so one chain
//! can have only one append in flight; several lanes let the next flush
//! start while an earlier one is still out.
//!
//! A free lane that decides to flush cuts the active buffer of *every*
//! group of its stream that holds entries, seals each as that group's next
//! part (its own header, CSN range and checksum), and writes them all as
//! one append. So the appends a second follow the streams and the lanes,
//! not the groups: by default one stream carries every group
//! (`Options::log_streams`), and a database with four groups sends the
//! appends of one. And the groups of a stream become durable together,
//! append by append, so a slow append of one group no longer holds gCSN
//! for all the others while their own appends have landed. With one
//! stream per group (`LOG_STREAMS_PER_GROUP`) this is the paper's layout.
//!
//! **When to flush** (`FlushPolicy`). Target (the default) weighs an
//! append's dollars against the transactions waiting for it: the stream
//! starts an append once the last one is older than the economic gap for
//! its transaction rate (`pacing`'s module docs), held between the pace
//! below and `flush_max_wait` above. Adaptive is *paced*:
//! the stream starts an append every `interval`, the median latency of its
//! last 64 appends divided by `flush_pace` (at least `flush_min_interval`),
//! on any free lane, when a group holds data, within the database's
//! request budget. A transaction waits for the next cut half an interval
//! on average, and at most one interval, as long as a lane is free: the
//! lanes beyond the pace's two or three in flight are there so that a slow
//! append does not stretch the intervals behind it. (Letting every free
//! lane flush at once, without a pace, makes the lanes' own cycle the
//! pace: uneven, because appends land unevenly, and a transaction's wait
//! for its cut grows with the gaps' spread.) A busy stream sends bigger
//! parts at the same pace; an idle one sends none. Timeout (the paper's):
//! when a buffer is full or `flush_timeout` after the first entry that
//! found its buffer empty. Either way a full buffer and data older than
//! `flush_timeout` go out at once.
//!
//! Only one free lane, the *pacer*, sleeps until the next flush is due;
//! the others sleep until woken, so a stream with many spare lanes wakes
//! one thread per flush, not all of them.
//!
//! **Signals** are in `signal`.
//!
//! **Who flushes** (`CommitProtocol`). With pipelined commit only the
//! lanes' threads do. With autonomous commit a *worker* flushes its own
//! stream after a pre-commit ([`LogStream::flush_now`]): it takes a free
//! lane (`try_lock` on the lane's writer, and no append out on it), cuts
//! every group of the stream (its own buffer and its neighbours': log
//! stealing) and sends the append, without waiting for it where the store
//! has an asynchronous client (`ObjectStore::start_append`). A lane holds
//! at most one append out ([`Lane`]); whoever finishes it publishes its
//! parts and runs the committer's round ([`LogStream::complete`]): a worker
//! of the stream after its next transaction, a worker about to idle or
//! wait for an ack, a lane's thread, or the backstop. The lanes' threads
//! stay, under the timeout policy, as the backstop for what no worker
//! flushed or finished (ARCHITECTURE.md, "Autonomous commit"). Either way
//! a lane's writer is locked before its segment is picked, so a chain's
//! appends go out in the order their segments were chosen.
//!
//! **Segments are chosen here**, not by each store's writer: a lane's
//! append goes to its chain's current segment, which moves on after
//! `parts_max` appends or when a checkpoint asks for a fresh one
//! ([`LogStream::mark_checkpoint`]). A lane cuts first and picks the
//! segment after, under the stream's lock; so an append that goes to a
//! segment from before a checkpoint's mark holds only CSNs taken before
//! it. Every store holds the same appends in the same segments, each
//! chain's segments are consecutive, and a checkpoint knows exactly which
//! segments it makes obsolete.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use milliscale_seam::{Elapsed as _, cv_wait, cv_wait_for};
use parking_lot::Mutex;

use super::group::{Cut, CutResult, LogGroup};
use super::pacing::FlushSettings;
use super::quorum::{QuorumWriter, SentPart};
use super::signal::FlushSignal;
use crate::commit::CommitMarks;
use crate::commit::committer::Committer;
use crate::mvcc::Csn;
use crate::options::FlushPolicy;

/// How long a lane waits before it tries again a group whose buffer lock
/// was busy, when it had nothing else to write.
const SKIPPED_RETRY: Duration = Duration::from_micros(200);

/// One append a lane is about to write: a part of each group that had
/// entries.
struct Flush {
    cuts: Vec<(Arc<LogGroup>, Cut)>,
    segment: u64,
}

/// One lane's writers, and the append it has out.
pub(crate) struct Lane {
    writer: QuorumWriter,
    /// Sent and not yet finished: nothing else goes out on the lane (one
    /// append at a time per chain) until someone finishes it.
    out: Option<(SentPart, Landing)>,
}

/// What an append in flight publishes when it lands.
struct Landing {
    cuts: Vec<(Arc<LogGroup>, Cut)>,
    sizes: Vec<u64>,
    sent: Instant,
    /// The `flush` span: opened when the append is sent, closed when its
    /// answer is in, so its duration is the append's round trip.
    span: tracing::Span,
}

/// How [`LogStream::complete`] waits for a lane's append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Not at all: finish it only if its answer is in.
    No,
    /// Poll until this instant (see [`spin_budget`]); if the answer is
    /// not in by then, leave the append out.
    Spin(Instant),
    /// Block until the answer.
    Block,
}

/// How long a worker about to idle polls for the stream's appends, given
/// the median of its recent ones: twice that, if it is under [`SPIN_MAX`];
/// else not at all (a lane's thread waits for them).
fn spin_budget(median: Option<Duration>) -> Duration {
    median.filter(|m| *m <= SPIN_MAX).map_or(Duration::ZERO, |m| m * 2)
}

/// What a flushing worker does about the appends out after its own
/// ([`LogStream::flush_now`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finish {
    /// Nothing now: it finishes them after a later transaction.
    Later,
    /// It expects to be idle for about this long: poll briefly if that
    /// is long enough, then hand them to a lane.
    Idle(Duration),
    /// It waits for an ack: wait for them.
    Wait,
}

/// What [`LogStream::wait_due`] woke a lane's thread for.
enum Due {
    /// Flush; `true`: wait for busy buffers (at close nothing may stay).
    Flush(bool),
    /// Finish appends workers left in flight: those whose answer is in,
    /// and those out longer than `flush_timeout`.
    Reap,
    /// Wait for every append out (a worker about to idle asked).
    FinishOut,
}

/// The longest a worker about to idle polls for its own append: on a
/// device this fast, a sleep's wake-up (tens of microseconds here) costs
/// as much as the write, so polling is worth a core's time; on slower
/// ones it is not (Linux's hybrid polling makes the same trade), and a
/// lane's thread waits for the append instead.
const SPIN_MAX: Duration = Duration::from_micros(250);

/// What one log stream did; see [`crate::Database::log_metrics`].
#[derive(Debug, Clone, Default)]
pub struct StreamMetrics {
    /// The stream.
    pub stream: u32,
    /// Its groups.
    pub groups: u32,
    /// Its lanes (appends it may keep in flight at once).
    pub lanes: u32,
    /// Appends written (to each store; each carries one part of each group
    /// that had entries).
    pub appends: u64,
    /// Of those, started while another lane of the stream was still
    /// writing: the flushes that one lane would have made wait.
    pub overlapped: u64,
    /// Of the appends, written by a worker (autonomous commit) rather
    /// than by a lane's thread.
    pub worker_flushes: u64,
    /// The least time between two flushes at the end: the target's gap
    /// (`FlushPolicy::Target`), else the pace's interval or
    /// `flush_min_interval`.
    pub interval: Duration,
    /// The transactions a second the stream was logging at the end (the
    /// target's estimate, decaying over about half a second).
    pub txn_per_s: f64,
}

/// One log stream: its groups and the state its lanes share.
pub(crate) struct LogStream {
    /// The stream's number.
    pub(crate) id: u32,
    groups: Vec<Arc<LogGroup>>,
    lanes: u32,
    /// Each lane's writers (one per store) and its append in flight,
    /// locked by whoever writes on the lane; `None` once the stream has
    /// shut down.
    writers: Vec<Mutex<Option<Lane>>>,
    /// Lanes with an append in flight that a worker left (autonomous
    /// commit), so a worker can skip looking when there are none.
    out: AtomicU32,
    signal: Arc<FlushSignal>,
    flush: FlushSettings,
    parts_max: u32,
    commit: Arc<CommitMarks>,
    appends: AtomicU64,
    overlapped: AtomicU64,
    worker_flushes: AtomicU64,
}

impl LogStream {
    /// A stream whose lanes start at `first_segments` (one per lane). Its
    /// groups are made with [`LogStream::signal`] and added with
    /// [`LogStream::add_group`].
    pub(crate) fn new(
        id: u32,
        flush: FlushSettings,
        (first_segments, parts_max): (&[u64], u32),
        commit: Arc<CommitMarks>,
    ) -> LogStream {
        LogStream {
            id,
            groups: Vec::new(),
            lanes: first_segments.len() as u32,
            writers: Vec::new(),
            signal: Arc::new(
                FlushSignal::new(first_segments, flush.min_interval).quiet(flush.reap),
            ),
            flush,
            parts_max: parts_max.max(1),
            commit,
            appends: AtomicU64::new(0),
            overlapped: AtomicU64::new(0),
            worker_flushes: AtomicU64::new(0),
            out: AtomicU32::new(0),
        }
    }

    /// A snapshot of the counters.
    pub(crate) fn metrics(&self) -> StreamMetrics {
        let (interval, txn_per_s) = {
            let st = self.signal.state.lock();
            (st.gap.unwrap_or(st.interval), st.txn_rate.at(milliscale_seam::now()))
        };
        StreamMetrics {
            stream: self.id,
            groups: self.groups.len() as u32,
            lanes: self.lanes,
            appends: self.appends.load(Ordering::Relaxed),
            overlapped: self.overlapped.load(Ordering::Relaxed),
            worker_flushes: self.worker_flushes.load(Ordering::Relaxed),
            interval,
            txn_per_s,
        }
    }

    /// Zero the counters (benchmarks: after loading, before measuring).
    pub(crate) fn reset_metrics(&self) {
        self.appends.store(0, Ordering::Relaxed);
        self.overlapped.store(0, Ordering::Relaxed);
        self.worker_flushes.store(0, Ordering::Relaxed);
    }

    /// What a group of this stream signals.
    pub(crate) fn signal(&self) -> Arc<FlushSignal> {
        Arc::clone(&self.signal)
    }

    pub(crate) fn add_group(&mut self, group: Arc<LogGroup>) {
        self.groups.push(group);
    }

    /// Give the stream its lanes' writers, lane by lane.
    pub(crate) fn set_writers(&mut self, writers: Vec<QuorumWriter>) {
        debug_assert_eq!(writers.len(), self.lanes as usize);
        self.writers = writers
            .into_iter()
            .map(|writer| Mutex::new(Some(Lane { writer, out: None })))
            .collect();
    }

    /// Finish what is in flight and drop the lanes' writers (after the
    /// lanes' threads stopped): their per-store threads finish and exit.
    pub(crate) fn close_writers(&self, committer: &Mutex<Committer>) {
        for w in &self.writers {
            let mut w = w.lock();
            if let Some(lane) = w.as_mut() {
                self.complete(lane, committer, Wait::Block);
            }
            w.take();
        }
    }

    /// Write what the groups hold and stop (after the groups are closed).
    pub(crate) fn close(&self) {
        self.signal.state.lock().closing = true;
        self.signal.work.notify_all();
    }

    /// Wake the lanes (after poisoning).
    pub(crate) fn wake_all(&self) {
        let _st = self.signal.state.lock();
        self.signal.work.notify_all();
    }

    /// Checkpoint: start a fresh segment in every lane for everything
    /// logged from now on (the next segment number of each lane's chain,
    /// so a chain's segments stay consecutive). Returns those segments,
    /// lane by lane, and a CSN bound: every CSN logged from now on is at
    /// least the bound, and goes to one of those segments or a later one
    /// (lanes cut before they pick a segment; see the module docs).
    pub(crate) fn mark_checkpoint(&self) -> (Vec<u64>, Csn) {
        let mut st = self.signal.state.lock();
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
        (starts, self.commit.next_csn.load(Ordering::SeqCst))
    }

    /// Wait until a flush is due and clear the signal (under the stream's
    /// lock, as the decision); `None` when the lane should stop (closing
    /// with nothing left, or poisoned). With `reap`, also wake every
    /// `timeout` while workers have appends in flight, to finish those
    /// they left.
    fn wait_due(&self, lane: usize) -> Option<Due> {
        let mut st = self.signal.state.lock();
        loop {
            if self.commit.is_poisoned() {
                return None;
            }
            if std::mem::take(&mut st.finish_out) {
                return Some(Due::FinishOut);
            }
            let Some(since) = st.data_since else {
                if st.closing {
                    return None;
                }
                if self.flush.reap {
                    // Timed: a worker sends without waking anyone.
                    let timed_out = cv_wait_for(&self.signal.work, &mut st, self.flush.timeout);
                    if timed_out && st.data_since.is_none() && self.out.load(Ordering::SeqCst) > 0 {
                        return Some(Due::Reap);
                    }
                } else {
                    cv_wait(&self.signal.work, &mut st);
                }
                continue;
            };
            let now = milliscale_seam::now();
            let age = now.saturating_duration_since(since);
            let due = match self.flush.policy {
                FlushPolicy::Timeout => self.flush.timeout.saturating_sub(age),
                FlushPolicy::Adaptive => {
                    let since = st.last_flush.map_or(Duration::MAX, |t| now - t);
                    st.interval.saturating_sub(since).min(self.flush.timeout.saturating_sub(age))
                }
                FlushPolicy::Target => {
                    let since = st.last_flush.map_or(Duration::MAX, |t| now - t);
                    let target = &self.flush.target;
                    let gap = target.gap(st.txn_rate.at(now), st.interval);
                    st.gap = Some(gap);
                    gap.saturating_sub(since).min(target.max_wait.saturating_sub(age))
                }
            };
            let wait = if st.full || st.closing || due.is_zero() {
                match &self.flush.budget {
                    Some(budget) if !st.closing => budget.take().err(),
                    _ => None,
                }
            } else {
                Some(due)
            };
            let Some(wait) = wait else {
                st.data_since = None;
                st.full = false;
                return Some(Due::Flush(st.closing));
            };
            // One lane, the pacer, sleeps until the flush is due; the
            // others until woken (new data, a full buffer, a busy group
            // left behind, closing). The pacer keeps the role only while
            // it sleeps, so it never sleeps untimed with it.
            if st.pacer.is_some() {
                if self.flush.reap {
                    cv_wait_for(&self.signal.work, &mut st, self.flush.timeout);
                } else {
                    cv_wait(&self.signal.work, &mut st);
                }
            } else {
                st.pacer = Some(lane);
                cv_wait_for(&self.signal.work, &mut st, wait);
                st.pacer = None;
            }
        }
    }

    /// Cut the groups' buffers for an append on lane `lane` (whose writer
    /// the caller holds) and pick its segment; `None` if there was nothing
    /// to cut. Unless `wait`, a group whose buffer lock is busy is left
    /// for the next flush.
    fn cut_for(&self, lane: usize, wait: bool) -> Option<Flush> {
        let now = milliscale_seam::now();
        let mut skipped = false;
        let mut cuts: Vec<(Arc<LogGroup>, Cut)> = Vec::new();
        for g in &self.groups {
            match g.cut(now, wait) {
                CutResult::Part(c) => cuts.push((Arc::clone(g), c)),
                CutResult::Empty => {}
                CutResult::Skipped => skipped = true,
            }
        }
        let mut st = self.signal.state.lock();
        if skipped {
            // A busy group still holds entries: the next flush takes them.
            // Wake a free lane to pace it.
            st.data_since.get_or_insert(now);
            self.signal.work.notify_one();
        }
        if cuts.is_empty() {
            if skipped {
                // Do not spin on a lock whose holder waits for a core.
                cv_wait_for(&self.signal.work, &mut st, SKIPPED_RETRY);
            }
            // Else another lane took it all.
            return None;
        }
        st.last_flush = Some(now);
        st.txn_rate.add(now, cuts.iter().map(|(_, c)| c.txns.len()).sum());
        if st.writing > 0 {
            self.overlapped.fetch_add(1, Ordering::Relaxed);
        }
        st.writing += 1;
        let parts_max = self.parts_max;
        let l = &mut st.lanes[lane];
        if l.segment_parts >= parts_max {
            l.segment += 1;
            l.segment_parts = 0;
        }
        l.segment_parts += 1;
        Some(Flush { cuts, segment: l.segment })
    }

    /// Autonomous commit: the calling worker flushes the stream itself on
    /// a free lane: it cuts every group of the stream and sends the append
    /// without waiting for it (the worker finishes it later, see
    /// [`LogStream::finish_landed`]). Then, as `then` says:
    /// - [`Finish::Later`]: nothing more (the worker goes on to its next
    ///   transaction);
    /// - [`Finish::Idle`] (force commit: the worker expects to be idle for
    ///   about the time given): no append of the stream should stay out
    ///   while it idles, and none should hold it up when work comes. If it
    ///   expects to idle at least [`spin_budget`], it polls them for up to
    ///   that long (time it would idle anyway); if it expects to idle past
    ///   the appends' median latency, whatever is still out goes to a
    ///   lane's thread, which waits for it; else the worker, back first,
    ///   finishes them after its next transaction;
    /// - [`Finish::Wait`] (the worker waits for an ack): it waits for every
    ///   append of the stream out.
    ///
    /// False if every lane was busy (their appends will be followed by the
    /// backstop's), there was nothing to cut, or the log stopped.
    pub(crate) fn flush_now(&self, committer: &Mutex<Committer>, then: Finish) -> bool {
        let mut flushed = false;
        for (lane, writer) in self.writers.iter().enumerate() {
            let Some(mut w) = writer.try_lock() else { continue };
            let Some(l) = w.as_mut() else { return false };
            if self.commit.is_poisoned() {
                return false;
            }
            if !self.complete(l, committer, Wait::No) {
                continue;
            }
            {
                // Clear the signal before cutting, as a lane does.
                let mut st = self.signal.state.lock();
                st.data_since = None;
                st.full = false;
            }
            if let Some(flush) = self.cut_for(lane, false) {
                self.worker_flushes.fetch_add(1, Ordering::Relaxed);
                self.send(flush, l);
                // A store without an asynchronous client has answered
                // already: publish it now.
                self.complete(l, committer, Wait::No);
                flushed = true;
            }
            break;
        }
        match then {
            Finish::Later => {}
            Finish::Idle(expected) => {
                let median = self.signal.state.lock().recent.quantile(0.5);
                let budget = spin_budget(median);
                if !budget.is_zero() && expected >= budget {
                    self.finish_all(committer, Wait::Spin(milliscale_seam::now() + budget));
                }
                // Back before its appends land, the worker finishes them
                // itself; else a lane's thread waits for them.
                if self.out.load(Ordering::SeqCst) > 0 && median.is_none_or(|m| expected >= m) {
                    let mut st = self.signal.state.lock();
                    st.finish_out = true;
                    self.signal.work.notify_one();
                }
            }
            Finish::Wait => self.finish_all(committer, Wait::Block),
        }
        flushed
    }

    /// Finish the appends in flight on this stream whose answers are in
    /// (a worker between transactions: Autonomous Commit's workers poll their
    /// completions). Costs one atomic load when none is out.
    pub(crate) fn finish_landed(&self, committer: &Mutex<Committer>) {
        if self.out.load(Ordering::SeqCst) > 0 {
            self.finish_all(committer, Wait::No);
        }
    }

    /// Finish the appends in flight on every lane not locked by someone
    /// else, waiting for each as `wait` says.
    fn finish_all(&self, committer: &Mutex<Committer>, wait: Wait) {
        for writer in &self.writers {
            if self.out.load(Ordering::SeqCst) == 0 {
                return;
            }
            if let Some(mut w) = writer.try_lock()
                && let Some(l) = w.as_mut()
            {
                self.complete(l, committer, wait);
            }
        }
    }

    /// One lane's flusher loop: wait, take the lane's writer, finish what
    /// a worker left on it, cut, seal, write to a quorum, publish. After
    /// each append the lane runs the committer's round itself (raise gCSN,
    /// release, wake the ack waiters, record latencies), so an ack needs
    /// no hop through another thread, which costs milliseconds when the
    /// cores are busy.
    pub(crate) fn run_lane(&self, lane: usize, committer: &Mutex<Committer>) {
        while let Some(due) = self.wait_due(lane) {
            let wait = match due {
                Due::Flush(wait) => wait,
                Due::Reap => {
                    self.reap(committer, false);
                    continue;
                }
                Due::FinishOut => {
                    self.reap(committer, true);
                    continue;
                }
            };
            let mut w = self.writers[lane].lock();
            let Some(l) = w.as_mut() else { return };
            self.complete(l, committer, Wait::Block);
            if self.commit.is_poisoned() {
                return;
            }
            let Some(flush) = self.cut_for(lane, wait) else { continue };
            self.send(flush, l);
            self.complete(l, committer, Wait::Block);
            if self.commit.is_poisoned() {
                return;
            }
        }
        if let Some(l) = self.writers[lane].lock().as_mut() {
            self.complete(l, committer, Wait::Block);
        }
    }

    /// Finish the appends workers left out: wait for each if `all`, else
    /// (the backstop) take those whose answers are in and wait for those
    /// out longer than the flush timeout (their worker went idle without
    /// finishing them).
    fn reap(&self, committer: &Mutex<Committer>, all: bool) {
        for writer in &self.writers {
            let mut w = writer.lock();
            let Some(l) = w.as_mut() else { continue };
            let stale = all
                || l.out
                    .as_ref()
                    .is_some_and(|(_, landing)| landing.sent.elapsed_now() >= self.flush.timeout);
            self.complete(l, committer, if stale { Wait::Block } else { Wait::No });
        }
    }

    /// Seal the cut parts and send them as one append on `lane` (which
    /// must have none out); [`LogStream::complete`] finishes it.
    fn send(&self, Flush { mut cuts, segment }: Flush, lane: &mut Lane) {
        debug_assert!(lane.out.is_none(), "one append at a time per lane");
        for (g, c) in &mut cuts {
            g.seal(c);
        }
        let bytes = if let [(_, c)] = &mut cuts[..] {
            // One part: hand the buffer itself to the stores. A store may
            // keep the bytes (the memory store does): do not let a small
            // part pin a whole buffer's allocation.
            let mut b = std::mem::take(&mut c.bytes);
            if b.capacity() > 2 * b.len() {
                b.shrink_to_fit();
            }
            b
        } else {
            let mut b = Vec::with_capacity(cuts.iter().map(|(_, c)| c.bytes.len()).sum());
            for (_, c) in &cuts {
                b.extend_from_slice(&c.bytes);
            }
            b
        };
        let sizes: Vec<u64> = if cuts.len() == 1 {
            vec![bytes.len() as u64]
        } else {
            cuts.iter().map(|(_, c)| c.bytes.len() as u64).collect()
        };
        let txns = cuts.iter().map(|(_, c)| c.txns.len()).sum();
        let span = super::signal::flush_span(segment, bytes.len(), cuts.len(), txns);
        let sent = milliscale_seam::now();
        let part = span.in_scope(|| lane.writer.send(segment, Bytes::from(bytes)));
        lane.out = Some((part, Landing { cuts, sizes, sent, span }));
        self.out.fetch_add(1, Ordering::SeqCst);
    }

    /// Finish the append `lane` has out, if any: once its answer is in
    /// (waiting as `wait` says), publish its parts durable and run the
    /// committer's round; if it failed, poison the database and wake
    /// everyone waiting. Returns whether the lane is free now (false: its
    /// append is still out, with [`Wait::No`]).
    fn complete(&self, lane: &mut Lane, committer: &Mutex<Committer>, wait: Wait) -> bool {
        let Some((mut part, landing)) = lane.out.take() else { return true };
        let spin_until = match wait {
            Wait::Spin(until) => Some(until),
            _ => None,
        };
        let result = loop {
            if let Some(r) = lane.writer.poll(&mut part) {
                break r;
            }
            match (wait, spin_until) {
                (Wait::Spin(_), Some(until)) if milliscale_seam::now() < until => {
                    milliscale_seam::spin_loop();
                }
                (Wait::No | Wait::Spin(_), _) => {
                    lane.out = Some((part, landing));
                    return false;
                }
                (Wait::Block, _) => break lane.writer.wait(part),
            }
        };
        self.out.fetch_sub(1, Ordering::SeqCst);
        let Landing { mut cuts, sizes, sent, span } = landing;
        span.record("ok", result.is_ok());
        let _in_flush = span.enter();
        if let Err(e) = result {
            self.commit.poison(e);
            for g in &self.groups {
                g.wake_all();
            }
            self.wake_all();
            return true;
        }
        let took = sent.elapsed_now();
        {
            let mut st = self.signal.state.lock();
            st.writing -= 1;
            st.recent.add(took);
            if let Some(pace) = self.flush.pace
                && let Some(median) = st.recent.quantile(0.5)
            {
                st.interval = median.div_f64(pace).max(self.flush.min_interval);
            }
        }
        self.appends.fetch_add(1, Ordering::Relaxed);
        for (g, c) in &mut cuts {
            g.landed(c.part, std::mem::take(&mut c.txns));
        }
        committer.lock().round();
        for ((g, c), size) in cuts.iter().zip(sizes) {
            g.record_flush(c, size, took);
        }
        true
    }
}
