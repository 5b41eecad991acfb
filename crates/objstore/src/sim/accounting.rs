//! Request, byte and dollar accounting for any store.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use hdrhistogram::Histogram;

use super::model::Prices;

/// The kinds of requests counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Unconditional PUT.
    Put,
    /// PUT with `If-None-Match: *`.
    PutIfAbsent,
    /// PUT with `If-Match`.
    PutIfMatch,
    /// PUT with a write offset.
    Append,
    /// GET of a whole object.
    Get,
    /// GET with a range.
    GetRange,
    /// HEAD.
    Head,
    /// LIST.
    List,
    /// DELETE.
    Delete,
}

const KINDS: [Kind; 9] = [
    Kind::Put,
    Kind::PutIfAbsent,
    Kind::PutIfMatch,
    Kind::Append,
    Kind::Get,
    Kind::GetRange,
    Kind::Head,
    Kind::List,
    Kind::Delete,
];

impl Kind {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Put => "put",
            Kind::PutIfAbsent => "put_if_absent",
            Kind::PutIfMatch => "put_if_match",
            Kind::Append => "append",
            Kind::Get => "get",
            Kind::GetRange => "get_range",
            Kind::Head => "head",
            Kind::List => "list",
            Kind::Delete => "delete",
        }
    }

    /// Billed as a PUT-class request (S3 bills LIST as PUT-class).
    fn put_class(self) -> bool {
        matches!(self, Kind::Put | Kind::PutIfAbsent | Kind::PutIfMatch | Kind::Append | Kind::List)
    }

    fn get_class(self) -> bool {
        matches!(self, Kind::Get | Kind::GetRange | Kind::Head)
    }
}

/// Live counters. Every request is counted when it is sent, including those
/// that fail: a store bills failed requests too. Append requests also
/// record how long each took on its own (for `sim://`, the drawn latency of
/// every request, a hedge's loser included; for `s3://`, the wall time of
/// every request that answered): the store's floor that commit latency is
/// compared with.
#[derive(Debug, Default)]
pub struct Accounting {
    requests: [AtomicU64; 9],
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    faults: AtomicU64,
    append_us: parking_lot::Mutex<Option<Histogram<u64>>>,
    read_us: parking_lot::Mutex<Option<Histogram<u64>>>,
}

/// Percentiles of one request kind's latency, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LatencySummary {
    /// Requests measured.
    pub count: u64,
    /// Median.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// The slowest.
    pub max_us: u64,
}

impl LatencySummary {
    /// The summary of `h` (`None` when empty).
    pub fn of(h: &Histogram<u64>) -> Option<LatencySummary> {
        (!h.is_empty()).then(|| LatencySummary {
            count: h.len(),
            p50_us: h.value_at_quantile(0.5),
            p90_us: h.value_at_quantile(0.9),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        })
    }
}

/// A snapshot of the counters, priced.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AccountingReport {
    /// Requests by kind name.
    pub requests: BTreeMap<&'static str, u64>,
    /// PUT-class requests (put, conditional put, append, list).
    pub put_class: u64,
    /// GET-class requests (get, range get, head).
    pub get_class: u64,
    /// Payload bytes sent to the store.
    pub bytes_up: u64,
    /// Payload bytes received from the store.
    pub bytes_down: u64,
    /// Requests that failed by injected fault.
    pub injected_faults: u64,
    /// Latency of single append requests, if any were measured.
    pub append_latency: Option<LatencySummary>,
    /// Latency of single read requests (GET, ranged GET, HEAD, LIST), if
    /// any were measured (the simulator records each request it draws,
    /// both of a hedged pair).
    pub read_latency: Option<LatencySummary>,
    /// The price table used.
    pub prices: Prices,
    /// Total cost in US$.
    pub cost_usd: f64,
}

impl Accounting {
    /// Count one request of `kind` carrying `up` bytes to the store.
    pub fn request(&self, kind: Kind, up: u64) {
        self.requests[kind as usize].fetch_add(1, Ordering::Relaxed);
        self.bytes_up.fetch_add(up, Ordering::Relaxed);
    }

    /// Count bytes received.
    pub fn download(&self, bytes: u64) {
        self.bytes_down.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Count an injected fault.
    pub fn fault(&self) {
        self.faults.fetch_add(1, Ordering::Relaxed);
    }

    /// Forget the recorded latencies.
    pub fn reset_latency(&self) {
        *self.append_us.lock() = None;
        *self.read_us.lock() = None;
    }

    /// Record how long one read request took on its own.
    pub fn read_latency(&self, d: std::time::Duration) {
        record(&self.read_us, d);
    }

    /// Record how long one append request took on its own (for a hedged
    /// request that was cancelled when its twin answered: how long it had
    /// taken until then).
    pub fn append_latency(&self, d: std::time::Duration) {
        record(&self.append_us, d);
    }

    /// The counters now, priced with `prices`.
    pub fn report(&self, prices: Prices) -> AccountingReport {
        let mut requests = BTreeMap::new();
        let (mut put_class, mut get_class) = (0, 0);
        for k in KINDS {
            let n = self.requests[k as usize].load(Ordering::Relaxed);
            requests.insert(k.name(), n);
            if k.put_class() {
                put_class += n;
            } else if k.get_class() {
                get_class += n;
            }
        }
        let bytes_up = self.bytes_up.load(Ordering::Relaxed);
        let bytes_down = self.bytes_down.load(Ordering::Relaxed);
        let gb = |b: u64| b as f64 / 1e9;
        let cost_usd = put_class as f64 / 1e6 * prices.put_per_million
            + get_class as f64 / 1e6 * prices.get_per_million
            + gb(bytes_up) * prices.upload_per_gb
            + gb(bytes_down) * prices.download_per_gb;
        AccountingReport {
            requests,
            put_class,
            get_class,
            bytes_up,
            bytes_down,
            injected_faults: self.faults.load(Ordering::Relaxed),
            append_latency: self.append_us.lock().as_ref().and_then(LatencySummary::of),
            read_latency: self.read_us.lock().as_ref().and_then(LatencySummary::of),
            prices,
            cost_usd,
        }
    }
}

/// Record `d` in the histogram `h` (made on first use).
fn record(h: &parking_lot::Mutex<Option<Histogram<u64>>>, d: std::time::Duration) {
    let mut h = h.lock();
    let h = h.get_or_insert_with(|| {
        Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
    });
    h.saturating_record((d.as_micros() as u64).max(1));
}

impl AccountingReport {
    /// A small human-readable table.
    pub fn to_human(&self) -> String {
        let mut s = String::new();
        for (k, n) in self.requests.iter().filter(|(_, n)| **n > 0) {
            let _ = writeln!(s, "  {k:<16}{n:>12}");
        }
        let _ = writeln!(s, "  {:<16}{:>12}", "bytes up", self.bytes_up);
        let _ = writeln!(s, "  {:<16}{:>12}", "bytes down", self.bytes_down);
        let _ = writeln!(s, "  {:<16}{:>12}", "injected faults", self.injected_faults);
        let _ = writeln!(s, "  {:<16}{:>12.6}", "cost US$", self.cost_usd);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_follow_the_table() {
        let a = Accounting::default();
        for _ in 0..1_000_000 {
            a.request(Kind::Append, 0);
        }
        a.request(Kind::Put, 1_000_000_000);
        a.request(Kind::Head, 0);
        a.request(Kind::Delete, 0);
        a.download(2_000_000_000);
        let p = Prices {
            put_per_million: 1.13,
            get_per_million: 0.03,
            upload_per_gb: 0.0032,
            download_per_gb: 0.0006,
        };
        let r = a.report(p);
        assert_eq!((r.put_class, r.get_class), (1_000_001, 1));
        assert_eq!(r.requests["delete"], 1, "deletes are counted, not billed");
        let want = 1_000_001.0 / 1e6 * 1.13 + 1.0 / 1e6 * 0.03 + 1.0 * 0.0032 + 2.0 * 0.0006;
        assert!((r.cost_usd - want).abs() < 1e-9, "{} vs {want}", r.cost_usd);
    }
}
