//! When a stream flushes: its settings (`FlushPolicy`, the pace, the
//! minimum interval, the request budget, the target's price of a
//! millisecond) and the target's economic gap between flushes, from the
//! stream's transaction rate (an `EventRate` in its state, `signal`). The
//! decision itself is `stream`'s `LogStream::wait_due`; see `stream`'s
//! module docs, "When to flush".
//!
//! **The target** (`FlushPolicy::Target`, the default). An append costs
//! dollars (`a`, one request to each store); every transaction waiting
//! for it costs time, which the user values at `λ` dollars per
//! transaction-second (`Options::millisecond_price`). A stream that
//! flushes every `I` seconds while `R` transactions a second arrive pays
//! `a / I` dollars a second for appends and `λ R I / 2` for the waiting
//! (each transaction waits half a gap on average). The sum is least at
//!
//! ```text
//! I* = sqrt(2 a / (λ R))
//! ```
//!
//! (the economic order quantity of inventory theory, with an append as
//! the order and a waiting transaction as the stock held). So appends a
//! second grow with the square root of the load, and the dollars per
//! transaction fall with it: at low load a transaction waits longer for
//! company, at high load many share each append at once. `I*` is held
//! between the pace (`flush_pace` appends per store round trip, below
//! which a shorter gap buys no latency: the appends in flight would only
//! queue) and `flush_max_wait` (the latency bound: no transaction waits
//! longer for its append to start). A stream whose last flush is older
//! than the gap flushes at once, so at very low load every transaction
//! gets its own append with no wait. A store without prices (a local
//! directory) makes appends free: the stream flushes at the pace.

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
    /// [`FlushPolicy::Target`]'s prices (see the module docs).
    pub(crate) target: Target,
}

/// The target policy's prices and bound (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target {
    /// Dollars of one flush: one request to each store (0: free).
    pub(crate) append_usd: f64,
    /// What one transaction's second of waiting is worth, in dollars (λ).
    pub(crate) wait_usd_per_s: f64,
    /// The longest gap between flushes while data waits.
    pub(crate) max_wait: Duration,
}

impl Target {
    /// `Options::millisecond_price` is dollars an hour for one
    /// millisecond off every commit of 1,000 transactions a second: an
    /// hour of that load is 3.6 million transactions, each a millisecond,
    /// so 3,600 transaction-seconds.
    pub(crate) fn new(append_usd: f64, millisecond_price: f64, max_wait: Duration) -> Target {
        Target { append_usd, wait_usd_per_s: millisecond_price / 3600.0, max_wait }
    }

    /// The gap between flushes that costs least at `rate` transactions a
    /// second, within `[floor, max_wait]` (`max_wait` wins).
    pub(crate) fn gap(&self, rate: f64, floor: Duration) -> Duration {
        let economic = if self.append_usd <= 0.0 {
            Duration::ZERO
        } else if self.wait_usd_per_s <= 0.0 || rate <= 0.0 {
            self.max_wait
        } else {
            let secs = (2.0 * self.append_usd / (self.wait_usd_per_s * rate)).sqrt();
            Duration::try_from_secs_f64(secs).unwrap_or(self.max_wait)
        };
        economic.max(floor).min(self.max_wait)
    }
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
        RequestBudget { per_s, burst, state: Mutex::new((burst, milliscale_seam::now())) }
    }

    /// Take one token, or say how long until one is there.
    pub(super) fn take(&self) -> std::result::Result<(), Duration> {
        let mut st = self.state.lock();
        let now = milliscale_seam::now();
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

#[cfg(test)]
mod tests {
    use super::*;

    const S3X_APPEND: f64 = 1.13e-6;

    #[test]
    fn the_gap_is_the_economic_one_within_its_bounds() {
        let floor = Duration::from_millis(3);
        let t = Target::new(S3X_APPEND, 0.01, Duration::from_millis(40));
        // sqrt(2 * 1.13e-6 / (0.01 / 3600 * 1000)) = 28.5 ms.
        let g = t.gap(1000.0, floor).as_secs_f64() * 1e3;
        assert!((g - 28.5).abs() < 0.1, "{g}");
        // Nine times the load: a third of the gap.
        let g9 = t.gap(9000.0, floor).as_secs_f64() * 1e3;
        assert!((g9 - 28.5 / 3.0).abs() < 0.1, "{g9}");
        // Saturation: the pace's floor; no load: the bound.
        assert_eq!(t.gap(1e7, floor), floor);
        assert_eq!(t.gap(0.0, floor), Duration::from_millis(40));
        assert_eq!(t.gap(1.0, floor), Duration::from_millis(40));
        // Free appends: the floor; a floor above the bound: the bound.
        assert_eq!(Target::new(0.0, 0.01, Duration::from_millis(40)).gap(10.0, floor), floor);
        assert_eq!(t.gap(1e7, Duration::from_millis(50)), Duration::from_millis(40));
        // Latency worth nothing: flush at the bound.
        assert_eq!(
            Target::new(S3X_APPEND, 0.0, Duration::from_millis(40)).gap(1e6, floor),
            Duration::from_millis(40)
        );
    }
}
