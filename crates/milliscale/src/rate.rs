//! [`EventRate`]: how many events a second, from a count that decays
//! exponentially: a log stream's logging transactions (the target flush
//! policy's `R`), a replica's appends found (its polling interval).

use std::time::{Duration, Instant};

/// Events a second: each event adds `1 / tau` and the sum decays by
/// `e^(-t / tau)`, so a steady rate `r` reads `r` (plus or minus the share
/// of one batch in `tau`), and a rate that stops fades within a few `tau`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EventRate {
    per_s: f64,
    at: Option<Instant>,
    tau: f64,
}

impl EventRate {
    /// A rate that decays with time constant `tau` (long against the gaps
    /// between batches of events, so one batch moves it little; short
    /// enough that a change of load shows within a few of it).
    pub(crate) fn new(tau: Duration) -> EventRate {
        EventRate { per_s: 0.0, at: None, tau: tau.as_secs_f64().max(1e-3) }
    }

    /// `n` events happened at `now`.
    pub(crate) fn add(&mut self, now: Instant, n: usize) {
        self.per_s = self.at(now) + n as f64 / self.tau;
        self.at = Some(now);
    }

    /// `n` events happened at `now`, over the last `over`: when that says
    /// more than the decayed count (a rate that just rose, seen by one
    /// look after a long gap), take it, so the estimate does not need
    /// several `tau` to catch up.
    pub(crate) fn add_over(&mut self, now: Instant, n: usize, over: Duration) {
        self.add(now, n);
        let seen = n as f64 / over.as_secs_f64().max(1e-6);
        if over.as_secs_f64() < self.tau && seen > self.per_s {
            self.per_s = seen;
        }
    }

    /// Events a second, as of `now`.
    pub(crate) fn at(&self, now: Instant) -> f64 {
        self.at.map_or(0.0, |t| {
            self.per_s * (-now.saturating_duration_since(t).as_secs_f64() / self.tau).exp()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_follows_the_events() {
        let t0 = milliscale_seam::now();
        let mut r = EventRate::new(Duration::from_millis(500));
        assert_eq!(r.at(t0), 0.0);
        // 5,000 events a second, in batches of 20 every 4 ms, for 3 s.
        for i in 1..=750u32 {
            r.add(t0 + Duration::from_millis(4) * i, 20);
        }
        let est = r.at(t0 + Duration::from_millis(3000));
        assert!((est - 5000.0).abs() < 5000.0 * 0.05, "{est}");
        // Then nothing for 2 s: it fades.
        assert!(r.at(t0 + Duration::from_millis(5000)) < 5000.0 * 0.02);
    }

    #[test]
    fn a_rise_seen_at_once_is_taken_at_once() {
        let t0 = milliscale_seam::now();
        let mut r = EventRate::new(Duration::from_secs(1));
        // 40 events found by one look 200 ms after the last: 200 a second.
        r.add_over(t0, 40, Duration::from_millis(200));
        assert!((r.at(t0) - 200.0).abs() < 1e-9, "{}", r.at(t0));
        // A look after longer than tau says nothing sharper than the count.
        let mut slow = EventRate::new(Duration::from_secs(1));
        slow.add_over(t0, 40, Duration::from_secs(5));
        assert!((slow.at(t0) - 40.0).abs() < 1e-9);
    }
}
