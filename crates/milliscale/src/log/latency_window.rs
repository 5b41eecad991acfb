//! The latencies of a client's recent requests of one kind, as a window
//! of the last [`LatencyWindow::KEEP`]: a segment writer's hedge delay
//! (`hedge`) and a stream's flush pace (`stream`) are quantiles of one.

use std::time::Duration;

/// Appends measured before the writer hedges at all (and before a stream
/// paces its flushes by the store's latency).
pub(crate) const HEDGE_WARMUP: usize = 16;

/// Latencies of recent appends that succeeded: for the hedge delay (per
/// writer), and for a stream's pace (`stream`). A hedged append counts
/// with the time it took (at least the delay), so the slow ones stay in
/// the sample and the quantile does not drift down.
#[derive(Debug, Default, Clone)]
pub(crate) struct LatencyWindow {
    micros: Vec<u32>,
    next: usize,
}

impl LatencyWindow {
    const KEEP: usize = 64;

    pub(crate) fn add(&mut self, d: Duration) {
        let us = d.as_micros().min(u128::from(u32::MAX)) as u32;
        if self.micros.len() < Self::KEEP {
            self.micros.push(us);
        } else {
            self.micros[self.next] = us;
            self.next = (self.next + 1) % Self::KEEP;
        }
    }

    /// The `q` quantile of the kept latencies; `None` until
    /// [`HEDGE_WARMUP`] appends were measured.
    pub(crate) fn quantile(&self, q: f64) -> Option<Duration> {
        if self.micros.len() < HEDGE_WARMUP {
            return None;
        }
        let mut v = self.micros.clone();
        let at = ((v.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
        let (_, m, _) = v.select_nth_unstable(at);
        Some(Duration::from_micros(u64::from(*m)))
    }
}
