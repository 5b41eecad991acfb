//! The flush signal: what a stream's groups signal and its lanes wait on.
//!
//! A worker signals its stream when its entry is the first in an empty
//! buffer, just after it releases its group's lock (see `group` for why
//! not under it), and when it finds no room. A lane clears the signal
//! under the stream's lock, releases it, then cuts the groups (it never
//! holds both locks). So every entry in a buffer after a cut either
//! signalled after the clear, or sits in a group the lane skipped because
//! a worker held its lock (the lane then signals again itself), or was put
//! in after its buffer's first entry, which signalled. A signal whose
//! entry a cut already took only costs a lane a look at empty buffers.
//!
//! The same lock keeps the stream's pacing state (`StreamState`): when it
//! last flushed, its lanes' segments, its recent append latencies.

use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::latency_window::LatencyWindow;
use crate::rate::EventRate;

/// How fast a stream's transaction rate (the target policy's `R`) follows
/// the load: long against the gaps it sets (at most `flush_max_wait`), so
/// one cut moves it little, short enough that a change shows within a
/// second.
const TXN_RATE_TAU: Duration = Duration::from_millis(500);

/// Where a lane's next append goes.
#[derive(Debug, Clone, Copy)]
pub(super) struct LaneState {
    pub(super) segment: u64,
    pub(super) segment_parts: u32,
}

pub(super) struct StreamState {
    /// Since when some group of the stream has held entries no lane has
    /// cut (`None`: every buffer was empty at the last cut, and no entry
    /// has signalled since).
    pub(super) data_since: Option<Instant>,
    /// A worker found no room: flush without waiting.
    pub(super) full: bool,
    pub(super) closing: bool,
    /// When the stream last started a flush.
    pub(super) last_flush: Option<Instant>,
    pub(super) lanes: Vec<LaneState>,
    /// Lanes writing an append now.
    pub(super) writing: u32,
    /// The free lane that sleeps until the next flush is due (the others
    /// sleep until woken).
    pub(super) pacer: Option<usize>,
    /// Latencies of the stream's recent appends (to a quorum).
    pub(super) recent: LatencyWindow,
    /// The pace: the least time between two flushes now.
    pub(super) interval: Duration,
    /// The target policy: the transactions a second the stream's cuts
    /// take, and the gap between flushes it chose last.
    pub(super) txn_rate: EventRate,
    pub(super) gap: Option<Duration>,
    /// A worker about to idle left appends out: a lane's thread should
    /// wait for them now (see [`LogStream::flush_now`]).
    pub(super) finish_out: bool,
}

/// What a stream's groups signal and its lanes wait on.
pub(crate) struct FlushSignal {
    pub(super) state: Mutex<StreamState>,
    pub(super) work: Condvar,
    /// Autonomous commit: the workers flush, so new data does not wake a
    /// lane (the lanes look every `flush_timeout` on their own); a full
    /// buffer still does.
    quiet: bool,
}

impl FlushSignal {
    pub(crate) fn new(first_segments: &[u64], interval: Duration) -> FlushSignal {
        FlushSignal {
            state: Mutex::new(StreamState {
                data_since: None,
                full: false,
                closing: false,
                last_flush: None,
                writing: 0,
                pacer: None,
                recent: LatencyWindow::default(),
                interval,
                txn_rate: EventRate::new(TXN_RATE_TAU),
                gap: None,
                finish_out: false,
                lanes: first_segments
                    .iter()
                    .map(|&segment| LaneState { segment, segment_parts: 0 })
                    .collect(),
            }),
            work: Condvar::new(),
            quiet: false,
        }
    }

    /// New data does not wake a lane (see `quiet`).
    pub(crate) fn quiet(mut self, quiet: bool) -> FlushSignal {
        self.quiet = quiet;
        self
    }

    /// An entry went into an empty buffer.
    pub(crate) fn data(&self) {
        let mut st = self.state.lock();
        st.data_since.get_or_insert_with(milliscale_seam::now);
        if !self.quiet {
            self.work.notify_one();
        }
    }

    /// A worker found no room in its buffer.
    pub(crate) fn full(&self) {
        let mut st = self.state.lock();
        st.data_since.get_or_insert_with(milliscale_seam::now);
        st.full = true;
        self.work.notify_one();
    }
}

/// The `flush` span of one append (debug level): opened as it is sent,
/// its outcome (`ok`) recorded and the span closed when its answer is in.
pub(super) fn flush_span(segment: u64, bytes: usize, parts: usize, txns: usize) -> tracing::Span {
    tracing::debug_span!(
        "flush",
        segment,
        bytes,
        parts,
        transactions = txns,
        ok = tracing::field::Empty,
    )
}
