//! Hybrid clocks at the clients, with an uncertainty bound ε.
//!
//! A client's clock reads its physical time plus its skew (in tests and
//! the simulation, drawn from [-ε/2, ε/2], so two clients differ by at
//! most ε), and never returns a timestamp at or below one it returned or
//! observed before: `max(physical + skew, last + 1)`. Observing the
//! versions a transaction read keeps its commit timestamp above them.
//! Skew never breaks correctness in MILANA; it costs aborts (a write
//! stamped below a key's latest read fails validation), which is what the
//! ε sweep measures.

use crate::types::Timestamp;

/// One client's clock.
#[derive(Debug, Clone)]
pub struct HybridClock {
    skew: i64,
    last: Timestamp,
}

impl HybridClock {
    /// A clock `skew` microseconds off the physical time (either way).
    pub fn new(skew: i64) -> HybridClock {
        HybridClock { skew, last: 0 }
    }

    /// The time now, given the physical time: strictly above everything
    /// this clock returned or observed.
    pub fn now(&mut self, physical: Timestamp) -> Timestamp {
        let local = (physical as i64).saturating_add(self.skew).max(0) as Timestamp;
        self.last = local.max(self.last + 1);
        self.last
    }

    /// Take note of a timestamp seen in a message (a version read).
    pub fn observe(&mut self, ts: Timestamp) {
        self.last = self.last.max(ts);
    }

    /// The highest timestamp returned or observed so far: every later
    /// reading is above it.
    pub fn last(&self) -> Timestamp {
        self.last
    }

    /// The skew.
    pub fn skew(&self) -> i64 {
        self.skew
    }
}

/// A skew drawn from [-ε/2, ε/2] (`epsilon` in microseconds).
pub fn draw_skew(epsilon: Timestamp, rng: &mut impl rand::Rng) -> i64 {
    let half = (epsilon / 2) as i64;
    if half == 0 { 0 } else { rng.random_range(-half..=half) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_never_goes_back_and_stays_above_what_it_observed() {
        let mut c = HybridClock::new(-50);
        assert_eq!(c.now(1_000), 950);
        assert_eq!(c.now(900), 951, "the physical clock went back; this one does not");
        c.observe(5_000);
        assert_eq!(c.now(1_100), 5_001);
        let mut ahead = HybridClock::new(30);
        assert_eq!(ahead.now(1_000), 1_030);
    }
}
