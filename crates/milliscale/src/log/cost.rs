//! What the log's writes cost: requests, bytes and dollars at the
//! stores' prices, per hour, per month and per transaction
//! ([`LogCost`], in [`super::LogMetrics`]).

use milliscale_seam::Elapsed as _;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::OpenStore;
use crate::options::Options;

/// Hours in a month, for the projection (365 × 24 / 12).
pub const HOURS_PER_MONTH: f64 = 730.0;

/// The log's writes since it started, or since the metrics were last
/// reset, and what they cost. Counted by the log itself from its flushes
/// (one request to each store per flush, its bytes to each store) and
/// priced at each store's table or `Options::append_price`; a store's own
/// accounting (`StoreStatus::accounting`, `sim://` and `s3://`) also sees
/// hedged and retried requests, reads and checkpoints.
#[derive(Debug, Clone, Default)]
pub struct LogCost {
    /// Over how long.
    pub elapsed: Duration,
    /// Write requests, over all stores.
    pub requests: u64,
    /// Bytes written, over all stores.
    pub bytes: u64,
    /// Transactions acknowledged.
    pub transactions: u64,
    /// Dollars of those requests and bytes; `None` when no store has a
    /// price (local directories and memory, without `append_price`).
    pub usd: Option<f64>,
}

impl LogCost {
    /// Dollars an hour at the measured rate.
    pub fn usd_per_hour(&self) -> Option<f64> {
        let secs = self.elapsed.as_secs_f64();
        self.usd.filter(|_| secs > 0.0).map(|u| u / secs * 3600.0)
    }

    /// Dollars a month ([`HOURS_PER_MONTH`]) if the measured rate went on.
    pub fn usd_per_month(&self) -> Option<f64> {
        self.usd_per_hour().map(|h| h * HOURS_PER_MONTH)
    }

    /// Write requests per acknowledged transaction.
    pub fn requests_per_txn(&self) -> Option<f64> {
        (self.transactions > 0).then(|| self.requests as f64 / self.transactions as f64)
    }
}

/// The log's prices and the start of its counting window.
pub(super) struct Pricing {
    /// Per store: dollars a request, dollars a byte (`None`: no price).
    stores: Vec<Option<(f64, f64)>>,
    since: Mutex<Instant>,
}

impl Pricing {
    pub(super) fn new(options: &Options, stores: &[OpenStore]) -> Pricing {
        let stores = stores
            .iter()
            .map(|s| {
                let table = s.store.prices();
                let request = options.append_price.or(table.map(|p| p.put_per_million / 1e6))?;
                Some((request, table.map_or(0.0, |p| p.upload_per_gb / 1e9)))
            })
            .collect();
        Pricing { stores, since: Mutex::new(milliscale_seam::now()) }
    }

    /// The dollars of one flush: one request to each store (a store
    /// without a price counts as free).
    pub(super) fn flush_usd(&self) -> f64 {
        self.stores.iter().flatten().map(|(r, _)| r).sum()
    }

    /// The cost of `flushes` flushes of `bytes` bytes that acknowledged
    /// `transactions`, since the window opened.
    pub(super) fn cost(&self, flushes: u64, bytes: u64, transactions: u64) -> LogCost {
        let n = self.stores.len() as u64;
        let priced = self.stores.iter().any(Option::is_some);
        let usd = priced.then(|| {
            self.stores.iter().flatten().map(|(r, b)| flushes as f64 * r + bytes as f64 * b).sum()
        });
        LogCost {
            elapsed: self.since.lock().elapsed_now(),
            requests: flushes * n,
            bytes: bytes * n,
            transactions,
            usd,
        }
    }

    /// Open a new window (with the metrics' reset).
    pub(super) fn reset(&self) {
        *self.since.lock() = milliscale_seam::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_follow_the_window() {
        let c = LogCost {
            elapsed: Duration::from_secs(10),
            requests: 1000,
            bytes: 0,
            transactions: 50_000,
            usd: Some(0.01),
        };
        assert!((c.usd_per_hour().expect("priced") - 3.6).abs() < 1e-9);
        assert!((c.usd_per_month().expect("priced") - 3.6 * 730.0).abs() < 1e-6);
        assert!((c.requests_per_txn().expect("transactions") - 0.02).abs() < 1e-12);
        let free = LogCost { usd: None, ..c.clone() };
        assert_eq!(free.usd_per_hour(), None);
        let empty = LogCost::default();
        assert_eq!(empty.requests_per_txn(), None);
        assert_eq!(LogCost { usd: Some(1.0), ..empty }.usd_per_hour(), None);
    }
}
