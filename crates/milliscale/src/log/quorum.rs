//! The store quorum: every part of a chain (one lane of a log group) goes to
//! every store, and it is durable once a quorum of them holds it.
//!
//! Each (chain, store) pair has a writer thread that owns a
//! [`SegmentWriter`] and writes the chain's parts to that store in order.
//! The lane's flusher hands each part to all live writers at once and
//! waits until `needed` of them report it written; a slower store keeps
//! writing its queue in the background and catches up. A store whose
//! writer gives up (the store stayed unavailable past the deadline, or
//! someone else wrote its segment) or that falls `LAG_PARTS_MAX` parts
//! behind is dropped from the set and reported. When fewer live stores
//! remain than a quorum needs, the write fails and the database is
//! poisoned: nothing more is acknowledged.

use milliscale_seam::JoinHandle;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender, TrySendError};
use objstore::ObjectStore;

use std::time::Instant;

use objstore::PendingAppend;

use super::segment::{
    PartLocation, RetryPolicy, SegmentError, SegmentWriter, StartedPart, WriteMode,
};
use crate::error::Error;
use crate::keys::Chain;

/// Parts a store may be behind the quorum before it is dropped.
pub const LAG_PARTS_MAX: usize = 256;

/// What one store of the log is doing, shared with monitoring.
#[derive(Debug)]
pub(crate) struct StoreHealth {
    pub(crate) name: String,
    pub(crate) mode: WriteMode,
    /// Parts written to this store, all groups.
    pub(crate) parts: AtomicU64,
    /// Appends sent a second time because the first was slow.
    pub(crate) hedged: AtomicU64,
    /// Of those, the ones whose second request answered first.
    pub(crate) hedges_won: AtomicU64,
    /// Groups that dropped this store.
    pub(crate) dropped: AtomicU64,
    pub(crate) last_error: parking_lot::Mutex<Option<String>>,
    /// Another writer changed one of this store's segments.
    pub(crate) foreign: std::sync::atomic::AtomicBool,
}

impl StoreHealth {
    /// A chain stopped writing to this store.
    fn gave_up(&self, chain: Chain, e: &SegmentError) {
        tracing::warn!("log {chain}: store {} dropped from replication: {e}", self.name);
        if matches!(e, SegmentError::Foreign { .. }) {
            self.foreign.store(true, Ordering::Relaxed);
        }
        *self.last_error.lock() = Some(e.to_string());
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn new(name: String, mode: WriteMode) -> StoreHealth {
        StoreHealth {
            name,
            mode,
            parts: AtomicU64::new(0),
            hedged: AtomicU64::new(0),
            hedges_won: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            last_error: parking_lot::Mutex::new(None),
            foreign: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

struct StoreWriter {
    to_writer: Option<Sender<(u64, u64, Bytes)>>,
    thread: Option<JoinHandle<()>>,
    /// Highest part sequence number this store reported written.
    done: u64,
    health: Arc<StoreHealth>,
}

/// One chain's writers (a lane of a log group), one per store.
///
/// With a single store there is nothing to overlap: the flusher writes the
/// part itself, saving two thread hand-offs per flush (each a scheduler
/// wake-up, which costs milliseconds when workers keep the cores busy).
pub(crate) enum QuorumWriter {
    Single(Box<SingleWriter>),
    Many(StoreWriters),
}

pub(crate) struct SingleWriter {
    writer: SegmentWriter,
    health: Arc<StoreHealth>,
}

impl QuorumWriter {
    pub(crate) fn start(chain: Chain, mut stores: Vec<StoreConfig>, needed: usize) -> QuorumWriter {
        if stores.len() == 1 && needed == 1 {
            let c = stores.pop().expect("one store");
            let writer = SegmentWriter::new(c.store, chain, c.health.mode, c.parts_max, 0, c.retry);
            // The first part's segment (chosen by the group) places it.
            return QuorumWriter::Single(Box::new(SingleWriter { writer, health: c.health }));
        }
        QuorumWriter::Many(StoreWriters::start(chain, stores, needed))
    }

    /// Send `part` to `segment` and return without waiting for a quorum
    /// (one store: its asynchronous append, if it has one; several: the
    /// stores' writer threads). Then [`QuorumWriter::poll`] or
    /// [`QuorumWriter::wait`]; one part at a time.
    pub(crate) fn send(&mut self, segment: u64, part: Bytes) -> SentPart {
        match self {
            QuorumWriter::Many(r) => SentPart::Quorum { seq: r.send(segment, part) },
            QuorumWriter::Single(s) => match s.writer.start_at(segment, &part) {
                StartedPart::Written(r) => SentPart::Answered(s.result(r)),
                StartedPart::Sent { pending, sent } => SentPart::Single { pending, sent, part },
            },
        }
    }

    /// The outcome of a part in flight if it is known, without blocking
    /// (`None`: still in flight). Once it returned the outcome, the part is
    /// done with: do not poll or wait for it again.
    pub(crate) fn poll(&mut self, part: &mut SentPart) -> Option<Result<(), Error>> {
        match (self, part) {
            (_, SentPart::Answered(r)) => Some(std::mem::replace(r, Ok(()))),
            (QuorumWriter::Single(s), SentPart::Single { pending, sent, part }) => {
                let answer = pending.poll()?;
                let r = s.writer.finish(part, *sent, answer);
                Some(s.result(r))
            }
            (QuorumWriter::Many(r), SentPart::Quorum { seq }) => r.poll(*seq),
            _ => unreachable!("a part is polled on the set that sent it"),
        }
    }

    /// The outcome of a part in flight, blocking until it is known.
    pub(crate) fn wait(&mut self, part: SentPart) -> Result<(), Error> {
        match (self, part) {
            (_, SentPart::Answered(r)) => r,
            (QuorumWriter::Single(s), SentPart::Single { pending, sent, part }) => {
                let r = s.writer.finish(&part, sent, pending.wait());
                s.result(r)
            }
            (QuorumWriter::Many(r), SentPart::Quorum { seq }) => r.wait(seq),
            _ => unreachable!("a part is waited for on the set that sent it"),
        }
    }
}

/// A part a lane sent and has not heard the outcome of
/// ([`QuorumWriter::send`]).
#[derive(Debug)]
pub(crate) enum SentPart {
    /// Known already (the store wrote it synchronously, or failed).
    Answered(Result<(), Error>),
    /// One store's asynchronous append.
    Single { pending: PendingAppend, sent: Instant, part: Bytes },
    /// With the stores' writer threads: its sequence number.
    Quorum { seq: u64 },
}

impl SingleWriter {
    /// Count a written part, or report why the store failed.
    fn result(&mut self, r: Result<PartLocation, SegmentError>) -> Result<(), Error> {
        match r {
            Ok(_) => {
                self.health.parts.fetch_add(1, Ordering::Relaxed);
                self.health.hedged.fetch_add(self.writer.take_hedged(), Ordering::Relaxed);
                self.health.hedges_won.fetch_add(self.writer.take_hedges_won(), Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                let msg = format!("{}: {e}", self.health.name);
                self.health.gave_up(self.writer.chain(), &e);
                Err(match e {
                    SegmentError::Foreign { .. } => Error::Fenced(msg),
                    _ => Error::StoreUnavailable(msg),
                })
            }
        }
    }
}

/// Writer threads, one per store.
pub(crate) struct StoreWriters {
    chain: Chain,
    writers: Vec<StoreWriter>,
    needed: usize,
    results: Receiver<(usize, u64, Result<(), SegmentError>)>,
    seq: u64,
}

/// Where and how one chain writes to one store.
pub(crate) struct StoreConfig {
    pub(crate) store: Arc<dyn ObjectStore>,
    pub(crate) health: Arc<StoreHealth>,
    pub(crate) parts_max: u32,
    pub(crate) retry: RetryPolicy,
    /// The scheduler slice its writer thread asks for (`crate::sched`).
    pub(crate) slice: Option<std::time::Duration>,
}

impl StoreWriters {
    fn start(chain: Chain, stores: Vec<StoreConfig>, needed: usize) -> StoreWriters {
        let (result_tx, results) = crossbeam_channel::unbounded();
        let writers = stores
            .into_iter()
            .enumerate()
            .map(|(index, c)| {
                let (tx, rx) = crossbeam_channel::bounded::<(u64, u64, Bytes)>(LAG_PARTS_MAX);
                let mut w =
                    SegmentWriter::new(c.store, chain, c.health.mode, c.parts_max, 0, c.retry);
                let result_tx = result_tx.clone();
                let health = Arc::clone(&c.health);
                let slice = c.slice;
                let thread = milliscale_seam::spawn(
                    format!("ms-log-g{}-l{}-s{index}", chain.group, chain.lane),
                    move || {
                        crate::sched::request_slice(slice);
                        for (seq, segment, part) in rx {
                            let r = w.write_at(segment, &part).map(|_| ());
                            match &r {
                                Ok(()) => {
                                    health.parts.fetch_add(1, Ordering::Relaxed);
                                    health.hedged.fetch_add(w.take_hedged(), Ordering::Relaxed);
                                    health
                                        .hedges_won
                                        .fetch_add(w.take_hedges_won(), Ordering::Relaxed);
                                }
                                // Report at once: the flusher only reads
                                // results while it writes, and the log may
                                // be idle now.
                                Err(e) => health.gave_up(chain, e),
                            }
                            let failed = r.is_err();
                            // A part on a store, for a simulation's trace.
                            milliscale_seam::trace(&[
                                &b"part"[..],
                                &chain.group.to_le_bytes(),
                                &chain.lane.to_le_bytes(),
                                &(index as u32).to_le_bytes(),
                                &seq.to_le_bytes(),
                                &[u8::from(failed)],
                            ]);
                            if result_tx.send((index, seq, r)).is_err() || failed {
                                return;
                            }
                        }
                    },
                )
                .expect("spawn a log writer thread");
                StoreWriter { to_writer: Some(tx), thread: Some(thread), done: 0, health: c.health }
            })
            .collect();
        StoreWriters { chain, writers, needed, results, seq: 0 }
    }

    fn live(&self) -> usize {
        self.writers.iter().filter(|r| r.to_writer.is_some()).count()
    }

    /// Stop sending to store `index`. `why` is `Some` when the flusher
    /// decided it (the store fell behind); a writer that gave up has
    /// already reported itself.
    fn drop_replica(&mut self, index: usize, why: Option<String>) {
        let r = &mut self.writers[index];
        if r.to_writer.take().is_some()
            && let Some(why) = why
        {
            tracing::warn!(
                "log {}: store {} dropped from replication: {why}",
                self.chain,
                r.health.name
            );
            r.health.dropped.fetch_add(1, Ordering::Relaxed);
            *r.health.last_error.lock() = Some(why);
        }
    }

    /// Send `part` to every live store; returns its sequence number.
    fn send(&mut self, segment: u64, part: Bytes) -> u64 {
        self.seq += 1;
        let seq = self.seq;
        for i in 0..self.writers.len() {
            let Some(tx) = &self.writers[i].to_writer else { continue };
            match tx.try_send((seq, segment, part.clone())) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => self.drop_replica(
                    i,
                    Some(format!(
                        "fell {LAG_PARTS_MAX} parts behind the quorum; it is not caught up"
                    )),
                ),
                // The writer gave up and said why.
                Err(TrySendError::Disconnected(_)) => self.drop_replica(i, None),
            }
        }
        seq
    }

    /// Whether part `seq` is at a quorum (`Ok`), can no longer get there
    /// (`Err`), or is still on its way (`None`), by the results read so far.
    fn outcome(&self, seq: u64) -> Option<Result<(), Error>> {
        let have = self.writers.iter().filter(|r| r.done >= seq).count();
        if have >= self.needed {
            return Some(Ok(()));
        }
        if self.live() >= self.needed {
            return None;
        }
        let errors: Vec<String> = self
            .writers
            .iter()
            .filter_map(|r| {
                r.health.last_error.lock().as_ref().map(|e| format!("{}: {e}", r.health.name))
            })
            .collect();
        let msg = format!(
            "log {}: {} of {} stores left, a quorum needs {}; {}",
            self.chain,
            self.live(),
            self.writers.len(),
            self.needed,
            errors.join("; ")
        );
        let fenced = self.writers.iter().any(|r| r.health.foreign.load(Ordering::Relaxed));
        Some(Err(if fenced { Error::Fenced(msg) } else { Error::StoreUnavailable(msg) }))
    }

    /// Take in one writer's report.
    fn absorb(&mut self, (index, done, result): (usize, u64, Result<(), SegmentError>)) {
        match result {
            Ok(()) => self.writers[index].done = self.writers[index].done.max(done),
            Err(_) => self.drop_replica(index, None),
        }
    }

    /// [`StoreWriters::wait`] without blocking: `None` while part `seq` is on
    /// its way.
    fn poll(&mut self, seq: u64) -> Option<Result<(), Error>> {
        loop {
            if let Some(r) = self.outcome(seq) {
                return Some(r);
            }
            match self.results.try_recv() {
                Ok(report) => self.absorb(report),
                Err(crossbeam_channel::TryRecvError::Empty) => return None,
                Err(crossbeam_channel::TryRecvError::Disconnected) => {
                    return Some(Err(Error::StoreUnavailable("every log writer stopped".into())));
                }
            }
        }
    }

    /// Block until part `seq` is at a quorum, or cannot get there.
    fn wait(&mut self, seq: u64) -> Result<(), Error> {
        loop {
            if let Some(r) = self.outcome(seq) {
                return r;
            }
            let Ok(report) = milliscale_seam::recv(&self.results) else {
                return Err(Error::StoreUnavailable("every log writer stopped".into()));
            };
            self.absorb(report);
        }
    }
}

impl Drop for StoreWriters {
    fn drop(&mut self) {
        for r in &mut self.writers {
            r.to_writer = None;
        }
        for r in &mut self.writers {
            if let Some(t) = r.thread.take() {
                let _ = t.join();
            }
        }
    }
}
