//! The one report format shared by every benchmark: a human table, JSON,
//! and a CSV row. Later benchmarks (TPC-C, sweeps, store accounting) add
//! fields here rather than inventing their own output.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latency percentiles, in microseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub p9999_us: f64,
    pub max_us: f64,
}

impl Percentiles {
    /// From a histogram recorded in nanoseconds.
    pub fn from_nanos(h: &Histogram<u64>) -> Percentiles {
        let us = |v: u64| v as f64 / 1_000.0;
        Percentiles {
            count: h.len(),
            mean_us: h.mean() / 1_000.0,
            p50_us: us(h.value_at_quantile(0.50)),
            p90_us: us(h.value_at_quantile(0.90)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            p9999_us: us(h.value_at_quantile(0.9999)),
            max_us: us(h.max()),
        }
    }
}

impl Percentiles {
    /// From a histogram recorded in microseconds.
    pub fn from_micros(h: &Histogram<u64>) -> Percentiles {
        Percentiles {
            count: h.len(),
            mean_us: h.mean(),
            p50_us: h.value_at_quantile(0.50) as f64,
            p90_us: h.value_at_quantile(0.90) as f64,
            p99_us: h.value_at_quantile(0.99) as f64,
            p999_us: h.value_at_quantile(0.999) as f64,
            p9999_us: h.value_at_quantile(0.9999) as f64,
            max_us: h.max() as f64,
        }
    }
}

/// Aborted over attempted (0 when nothing was attempted).
pub fn abort_rate(committed: u64, aborted: u64) -> f64 {
    if committed + aborted == 0 { 0.0 } else { aborted as f64 / (committed + aborted) as f64 }
}

/// A dollar figure with four significant digits, however small
/// (`0.000001235`, not `0.00`).
pub fn usd(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let digits = (3 - v.abs().log10().floor() as i32).clamp(0, 12) as usize;
    format!("{v:.digits$}")
}

/// What the log did during the measured phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LogReport {
    /// Log groups (= buffers).
    pub groups: usize,
    /// Log streams (sets of lanes; each flush of a stream is one append
    /// carrying a part of each of its groups that had entries).
    pub streams: usize,
    /// Lanes per stream (appends a stream may keep in flight).
    pub lanes: usize,
    /// Flushes that started while another lane of their stream was still
    /// writing.
    pub overlapped_fraction: f64,
    /// Group parts per flush (per append).
    pub parts_per_flush: f64,
    /// Groups a flush left for the next one because a worker held the
    /// group's buffer lock, per second.
    pub busy_skips_per_s: f64,
    /// Adaptive flushing: the least time between two flushes of the first
    /// stream at the end of the run (the pace's interval), milliseconds.
    pub flush_interval_ms: f64,
    /// Parts that landed before an earlier part of their group.
    pub out_of_order_parts: u64,
    /// Stores, with the mode the probe chose ("append" or "put").
    pub stores: Vec<String>,
    /// Flushes (appends written to each store) per second, all streams.
    pub flushes_per_s: f64,
    /// Fraction of group parts cut because a buffer was full (the rest
    /// by the flush policy).
    pub full_flush_fraction: f64,
    pub bytes_per_flush: f64,
    /// Log bytes per logged (writing) transaction.
    pub bytes_per_logged_txn: f64,
    /// Buffer fill time: first entry to flush.
    pub fill: Percentiles,
    /// One flush: to a quorum of stores.
    pub flush: Percentiles,
    /// Pre-commits that waited for room in a full buffer.
    pub room_waits: u64,
    /// Writing transactions the committer released.
    pub released: u64,
    /// Of those, how many waited on dependencies after their own records
    /// were durable, and for how long.
    pub dependency_waited: u64,
    pub dependency_wait: Percentiles,
    /// Log appends sent a second time because the first was slow, per
    /// second (their requests are counted in `requests_per_s` too).
    pub hedged_appends_per_s: f64,
    /// Of those, the ones whose second request answered first.
    pub hedges_won_per_s: f64,
    /// Log write requests (appends, or part objects) per committed
    /// transaction, summed over stores.
    pub log_requests_per_txn: f64,
    /// The first store's own single append requests in the same window
    /// (client side): the floor commit latency is compared with.
    pub store_append: Option<objstore::sim::accounting::LatencySummary>,
    /// Commit latency over the store's single-append latency, at p50, p99
    /// and p99.9.
    pub commit_over_store: Option<[f64; 3]>,
    /// Store requests per second by kind, summed over stores.
    pub requests_per_s: BTreeMap<String, f64>,
    /// Store cost of the measured phase per 1,000 committed transactions.
    pub usd_per_1000_txn: f64,
    /// The same cost per hour at the measured rate.
    pub usd_per_hour: f64,
    /// The same cost per month ([`milliscale::HOURS_PER_MONTH`]) if the
    /// measured rate went on.
    pub usd_per_month: f64,
    /// Store requests of every kind (writes, reads, lists, hedges) per
    /// committed transaction, summed over stores.
    pub requests_per_txn: f64,
}

impl LogReport {
    /// Fill the per-hour, per-month, per-transaction figures from the
    /// window's dollars and requests.
    pub fn priced(mut self, usd: f64, secs: f64, committed: u64) -> LogReport {
        let requests: f64 = self.requests_per_s.values().sum::<f64>() * secs;
        self.usd_per_1000_txn = if committed == 0 { 0.0 } else { usd / committed as f64 * 1000.0 };
        self.usd_per_hour = if secs > 0.0 { usd / secs * 3600.0 } else { 0.0 };
        self.usd_per_month = self.usd_per_hour * milliscale::HOURS_PER_MONTH;
        self.requests_per_txn = if committed == 0 { 0.0 } else { requests / committed as f64 };
        self
    }
}

/// Counts per transaction type (YCSB: read-only / read-modify-write).
#[derive(Debug, Clone, Default, Serialize)]
pub struct KindStats {
    pub committed: u64,
    pub aborted: u64,
}

/// Resident memory over the run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MemoryReport {
    /// (seconds since the measured phase began, resident MiB), one sample per second.
    pub rss_mib_samples: Vec<(f64, f64)>,
    pub rss_mib_at_10s: Option<f64>,
    pub rss_mib_end: f64,
    pub rss_mib_max: f64,
}

/// Where and what was measured.
#[derive(Debug, Clone, Serialize)]
pub struct Environment {
    pub cores: usize,
    pub cpu: String,
    pub os: String,
    pub commit: String,
}

impl Environment {
    pub fn detect() -> Environment {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|m| m.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".into());
        // The commit the binary was built from (build.rs); a build outside
        // a git checkout (a packaged crate) says its version instead.
        let commit = match env!("MILLISCALE_BUILD_COMMIT") {
            "" => format!("v{} (not built from a git checkout)", env!("CARGO_PKG_VERSION")),
            c => c.to_owned(),
        };
        Environment {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu,
            os: std::env::consts::OS.into(),
            commit,
        }
    }
}

/// The result of one benchmark run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub benchmark: String,
    pub engine: String,
    /// Every knob, as given on the command line (after defaults).
    pub config: BTreeMap<String, String>,
    pub env: Environment,
    pub threads: usize,
    pub duration_s: f64,
    pub committed: u64,
    pub aborted: u64,
    pub operations: u64,
    pub txn_per_s: f64,
    pub ops_per_s: f64,
    pub abort_rate: f64,
    /// Committed transactions, from `begin` (or, open loop, from their
    /// arrival) to where the worker is done with them: the acknowledgment
    /// where it waits for it or tracks it (TPC-C, bank, SlateDB, open
    /// loop), pre-commit where it goes on (closed-loop YCSB with a log;
    /// `commit_latency` then has the rest). The notes say which.
    pub txn_latency: Percentiles,
    /// From pre-commit (`commit()`) to acknowledgment.
    pub commit_latency: Percentiles,
    pub by_kind: BTreeMap<String, KindStats>,
    /// Latency per transaction type, where the benchmark measures it.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub latency_by_kind: BTreeMap<String, Percentiles>,
    /// Benchmark-specific figures (e.g. TPC-C's tpmC), by name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, f64>,
    pub memory: Option<MemoryReport>,
    /// The log, when there is one.
    pub log: Option<LogReport>,
    /// Free-form remarks the run wants a reader to see (e.g. "no log").
    pub notes: Vec<String>,
    /// Committed transactions per second, each second of the measured
    /// time, where the benchmark samples them (YCSB through a server or a
    /// cluster): a dip shows here.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<f64>,
}

impl Report {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report always serializes")
    }

    pub const CSV_HEADER: &'static str = "benchmark,engine,workload,dist,records,threads,duration_s,committed,aborted,txn_per_s,ops_per_s,abort_rate,commit_p50_us,commit_p99_us,commit_p999_us,commit_p9999_us,txn_p50_us,txn_p99_us,commit";

    pub fn csv_row(&self) -> String {
        let c = |k: &str| self.config.get(k).cloned().unwrap_or_default();
        format!(
            "{},{},{},{},{},{},{:.3},{},{},{:.1},{:.1},{:.5},{:.2},{:.2},{:.2},{:.2},{:.2},{:.2},{}",
            self.benchmark,
            self.engine,
            c("workload"),
            c("dist"),
            c("records"),
            self.threads,
            self.duration_s,
            self.committed,
            self.aborted,
            self.txn_per_s,
            self.ops_per_s,
            self.abort_rate,
            self.commit_latency.p50_us,
            self.commit_latency.p99_us,
            self.commit_latency.p999_us,
            self.commit_latency.p9999_us,
            self.txn_latency.p50_us,
            self.txn_latency.p99_us,
            self.env.commit,
        )
    }

    #[allow(
        clippy::too_many_lines,
        reason = "one table, one line per measure, in the order it prints"
    )]
    pub fn to_human(&self) -> String {
        let mut s = String::new();
        let cfg: Vec<String> = self.config.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(s, "{} on {} — {}", self.benchmark, self.engine, cfg.join(" "));
        let _ = writeln!(
            s,
            "machine: {} cores, {} ({}), commit {}",
            self.env.cores, self.env.cpu, self.env.os, self.env.commit
        );
        let _ = writeln!(s, "{:<22}{:>16}", "threads", self.threads);
        let _ = writeln!(s, "{:<22}{:>16.2}", "measured seconds", self.duration_s);
        let _ = writeln!(s, "{:<22}{:>16}", "committed txns", self.committed);
        let _ = writeln!(s, "{:<22}{:>16}", "aborted txns", self.aborted);
        let _ = writeln!(s, "{:<22}{:>16.4}", "abort rate", self.abort_rate);
        let _ = writeln!(s, "{:<22}{:>16.0}", "throughput txn/s", self.txn_per_s);
        let _ = writeln!(s, "{:<22}{:>16.0}", "throughput ops/s", self.ops_per_s);
        for (kind, k) in &self.by_kind {
            let _ = writeln!(
                s,
                "  {:<20}{:>16} committed {:>10} aborted",
                kind, k.committed, k.aborted
            );
        }
        let _ = writeln!(
            s,
            "latency µs            {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "mean", "p50", "p90", "p99", "p99.9", "p99.99", "max"
        );
        for (name, p) in
            [("txn (see notes)", &self.txn_latency), ("commit (pre→ack)", &self.commit_latency)]
        {
            let _ = writeln!(
                s,
                "  {:<20}{:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                name, p.mean_us, p.p50_us, p.p90_us, p.p99_us, p.p999_us, p.p9999_us, p.max_us
            );
        }
        for (kind, p) in &self.latency_by_kind {
            let _ = writeln!(
                s,
                "  {:<20}{:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                kind, p.mean_us, p.p50_us, p.p90_us, p.p99_us, p.p999_us, p.p9999_us, p.max_us
            );
        }
        for (name, v) in &self.extra {
            let v = if name.contains("usd") { usd(*v) } else { format!("{v:.2}") };
            let _ = writeln!(s, "{name:<22}{v:>16}");
        }
        if let Some(l) = self.log.as_ref().filter(|l| l.groups == 0) {
            // A peer engine: only the store's side is known.
            let reqs: Vec<String> =
                l.requests_per_s.iter().map(|(k, v)| format!("{k} {v:.1}")).collect();
            let _ = writeln!(s, "store: {}", l.stores.join(", "));
            let _ = writeln!(s, "  store requests/s: {}", reqs.join(", "));
            cost_lines(&mut s, l);
        }
        if let Some(l) = self.log.as_ref().filter(|l| l.groups > 0) {
            let _ = writeln!(
                s,
                "log: {} groups in {} streams x {} lanes, stores {}",
                l.groups,
                l.streams,
                l.lanes,
                l.stores.join(", ")
            );
            let _ = writeln!(
                s,
                "  flushes/s {:.1} (gap {:.2} ms, {:.2} parts each, {:.0}% full), {:.0} \
                 B/flush, {:.0} B/logged txn, {} room waits, {:.1} busy skips/s",
                l.flushes_per_s,
                l.flush_interval_ms,
                l.parts_per_flush,
                l.full_flush_fraction * 100.0,
                l.bytes_per_flush,
                l.bytes_per_logged_txn,
                l.room_waits,
                l.busy_skips_per_s
            );
            for (name, p) in [
                ("  buffer fill", &l.fill),
                ("  flush (quorum)", &l.flush),
                ("  dependency wait", &l.dependency_wait),
            ] {
                let _ = writeln!(
                    s,
                    "{:<22}{:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                    name, p.mean_us, p.p50_us, p.p90_us, p.p99_us, p.p999_us, p.p9999_us, p.max_us
                );
            }
            if let Some(a) = &l.store_append {
                let _ = writeln!(
                    s,
                    "{:<22}{:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}   ({} requests)",
                    "  store: one append",
                    "",
                    a.p50_us,
                    a.p90_us,
                    a.p99_us,
                    a.p999_us,
                    "",
                    a.max_us,
                    a.count
                );
            }
            if let Some([p50, p99, p999]) = l.commit_over_store {
                let _ = writeln!(
                    s,
                    "  commit / one append: p50 {p50:.2}x, p99 {p99:.2}x, p99.9 {p999:.2}x"
                );
            }
            let _ = writeln!(
                s,
                "  lanes: {:.0}% of flushes overlapped another in flight, {} parts landed out of \
                 order; {:.4} log requests per committed txn",
                l.overlapped_fraction * 100.0,
                l.out_of_order_parts,
                l.log_requests_per_txn
            );
            let _ = writeln!(
                s,
                "  released {} txns; {} waited on dependencies after their own records were durable",
                l.released, l.dependency_waited
            );
            let reqs: Vec<String> =
                l.requests_per_s.iter().map(|(k, v)| format!("{k} {v:.1}")).collect();
            let _ = writeln!(s, "  store requests/s: {}", reqs.join(", "));
            let _ = writeln!(
                s,
                "  hedged appends/s: {:.2} ({:.2} won by the second request)",
                l.hedged_appends_per_s, l.hedges_won_per_s
            );
            cost_lines(&mut s, l);
        }
        if let Some(m) = &self.memory {
            let at10 = m.rss_mib_at_10s.map_or("n/a".to_owned(), |v| format!("{v:.1}"));
            let _ = writeln!(
                s,
                "resident MiB          at 10 s {at10}, end {:.1}, max {:.1}",
                m.rss_mib_end, m.rss_mib_max
            );
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        s
    }
}

/// What the store cost over the window: per transaction, per hour, per
/// month at this rate, and requests per transaction.
fn cost_lines(s: &mut String, l: &LogReport) {
    let _ = writeln!(s, "  $ per 1,000 committed txns: {}", usd(l.usd_per_1000_txn));
    let _ = writeln!(
        s,
        "  $ per hour: {} ({} a month at this rate); {:.4} store requests per committed txn",
        usd(l.usd_per_hour),
        usd(l.usd_per_month),
        l.requests_per_txn
    );
}
