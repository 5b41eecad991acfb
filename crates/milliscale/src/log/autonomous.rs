//! Autonomous commit (Nguyen, Ziegler, Alhomssi, Leis, "Moving on From
//! Group Commit", SIGMOD 2025), on this engine's log: the workers flush and
//! acknowledge, and the lanes' threads are only the backstop.
//!
//! The paper's mechanisms and where they are:
//! - **Autonomous log flush**: after a pre-commit, a worker flushes its
//!   group's stream itself once the buffer holds a flush unit
//!   ([`Autonomous::after_commit`] → `LogStream::flush_now`). It sends the
//!   append without waiting for it where the store has an asynchronous
//!   client, and it or a neighbour finishes it after a later transaction
//!   (`LogStream::finish_landed`).
//! - **Log stealing**: a flush cuts every group of the stream, its
//!   neighbours' buffers too (`LogStream::cut_for`).
//! - **Autonomous acknowledgment**: after a transaction it did not flush,
//!   a worker runs the committer's round with probability 1/log2(workers).
//! - **Force commit**: a worker that expects to idle (its average idle
//!   time against a random share of `max_idle`, [`IdleClock`]) flushes
//!   now; one that waits for an ack flushes its stream first
//!   ([`WaiterFlush`], the commit path's [`ForceFlush`]).
//! - The paper's lock-free per-worker queues and GSNs are not needed here:
//!   acks decide by the CSN marks (`commit::marks`), and the buffers are
//!   the groups' (`group`).

use milliscale_seam::Elapsed as _;
use std::cell::Cell;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::group::LogGroup;
use super::stream::{Finish, LogStream};
use crate::commit::ForceFlush;
use crate::commit::committer::Committer;
use crate::options::{FLUSH_UNIT_DEFAULT, OBJECT_FLUSH_UNIT_DEFAULT, Options};

/// Autonomous commit's settings (see [`crate::CommitProtocol`]).
pub(crate) struct Autonomous {
    flush_unit: usize,
    max_idle: Duration,
    /// The chance that a worker runs the committer's round after a
    /// transaction it did not flush: 1/log2(workers), the paper's rule.
    ack_chance: f64,
}

thread_local! {
    /// This worker's idle clock.
    static IDLE: Cell<IdleClock> = const { Cell::new(IdleClock { last_commit: None, avg_idle_ns: 0 }) };
}

/// How long a worker stays idle between transactions, to predict whether
/// it will be idle after this one (force commit).
#[derive(Clone, Copy)]
struct IdleClock {
    /// When its last pre-commit returned (`None`: it has begun since).
    last_commit: Option<Instant>,
    /// Moving average (1/8 weight) of the gaps from a pre-commit to the
    /// next begin.
    avg_idle_ns: u64,
}

impl Autonomous {
    /// The settings of `options`; `object_store`: some store is an object
    /// store (the flush unit's default is larger there).
    pub(crate) fn new(options: &Options, object_store: bool) -> Autonomous {
        let workers = options.workers.max(2) as f64;
        let unit_default =
            if object_store { OBJECT_FLUSH_UNIT_DEFAULT } else { FLUSH_UNIT_DEFAULT };
        Autonomous {
            flush_unit: options.flush_unit.unwrap_or(unit_default).min(options.log_buffer_bytes),
            max_idle: options.max_idle,
            ack_chance: 1.0 / workers.log2(),
        }
    }

    /// A transaction begins on this thread: the time since this worker's
    /// last pre-commit was idle time.
    pub(crate) fn note_begin(&self) {
        let mut c = IDLE.get();
        if let Some(at) = c.last_commit.take() {
            let gap = at.elapsed_now().as_nanos().min(u128::from(u64::MAX / 8)) as u64;
            c.avg_idle_ns = c.avg_idle_ns - c.avg_idle_ns / 8 + gap / 8;
            IDLE.set(c);
        }
    }

    /// After a worker pre-committed into `group` of `stream`, whose buffer
    /// now holds `buffered` bytes: flush the stream if the buffer holds a
    /// flush unit or the worker expects to be idle (force commit); else,
    /// with probability 1/log2(workers), run the committer's round
    /// (autonomous acknowledgment).
    pub(crate) fn after_commit(
        &self,
        stream: &LogStream,
        committer: &Mutex<Committer>,
        buffered: usize,
    ) {
        let mut clock = IDLE.get();
        let idle = !self.max_idle.is_zero()
            && Duration::from_nanos(clock.avg_idle_ns)
                >= self.max_idle.mul_f64(rand::random::<f64>());
        // Finish the stream's appends that have landed since (they
        // acknowledge their transactions).
        stream.finish_landed(committer);
        if buffered >= self.flush_unit || idle {
            let then = if idle {
                Finish::Idle(Duration::from_nanos(clock.avg_idle_ns))
            } else {
                Finish::Later
            };
            stream.flush_now(committer, then);
        } else if rand::random::<f64>() < self.ack_chance
            && let Some(mut c) = committer.try_lock()
        {
            c.round();
        }
        clock.last_commit = Some(milliscale_seam::now());
        IDLE.set(clock);
    }
}

/// Force commit on wait: a worker that waits for an ack is idle, so it
/// flushes its own stream first. Weak references: the streams and the
/// committer hold the commit marks, which hold this.
pub(crate) struct WaiterFlush {
    pub(crate) streams: Vec<Weak<LogStream>>,
    pub(crate) committer: Weak<Mutex<Committer>>,
    pub(crate) groups_per_stream: usize,
}

impl ForceFlush for WaiterFlush {
    fn flush_for_waiter(&self, group: usize, within: Option<Duration>) {
        let stream = self.streams.get(group / self.groups_per_stream).and_then(Weak::upgrade);
        if let (Some(stream), Some(c)) = (stream, self.committer.upgrade()) {
            stream.flush_now(&c, within.map_or(Finish::Wait, Finish::Idle));
        }
    }
}

/// The stream of `group` among `streams`.
pub(crate) fn stream_of<'s>(
    streams: &'s [Arc<LogStream>],
    group: &LogGroup,
    groups_per_stream: usize,
) -> &'s LogStream {
    &streams[group.id as usize / groups_per_stream]
}
