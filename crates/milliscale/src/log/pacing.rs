//! When a stream flushes: its settings (`FlushPolicy`, the pace, the
//! minimum interval, the request budget). The pacing itself (an append
//! every median round trip / `flush_pace`) is `stream`'s
//! `LogStream::wait_due`; see `stream`'s module docs, "When to flush".

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::options::FlushPolicy;

/// How a stream decides when to flush (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct FlushSettings {
    pub(crate) policy: FlushPolicy,
    pub(crate) timeout: Duration,
    pub(crate) min_interval: Duration,
    /// Appends per store round trip (`Options::flush_pace`).
    pub(crate) pace: Option<f64>,
    /// The database's request budget, shared by every stream.
    pub(crate) budget: Option<Arc<RequestBudget>>,
    /// Autonomous commit: workers leave appends in flight, and the lanes'
    /// threads look every `timeout` for ones nobody finished.
    pub(crate) reap: bool,
}

/// A token bucket of appends per second, shared by a database's streams.
#[derive(Debug)]
pub(crate) struct RequestBudget {
    per_s: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl RequestBudget {
    /// `per_s` appends a second, up to 100 ms of them at once.
    pub(crate) fn new(per_s: u32) -> RequestBudget {
        let per_s = f64::from(per_s.max(1));
        let burst = (per_s / 10.0).max(1.0);
        RequestBudget { per_s, burst, state: Mutex::new((burst, Instant::now())) }
    }

    /// Take one token, or say how long until one is there.
    pub(super) fn take(&self) -> std::result::Result<(), Duration> {
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
