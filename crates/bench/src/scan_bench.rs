//! Does iterating a large table keep memory flat? `milliscale bench scan`
//! loads `keys` rows into a database without a log, then reads every row
//! through `Transaction::range` (or `prefix`) in one read-only
//! transaction, sampling the resident set every 100,000 rows. The growth
//! is the largest sample minus the resident set before the iteration.

use std::ops::Bound;
use std::time::{Duration, Instant};

use milliscale::{Database, Direction, Options, TxnOptions};

use crate::rss::rss_mib;

/// What to load and how to read it.
#[derive(Debug, Clone, Copy)]
pub struct ScanConfig {
    /// Rows in the table (8-byte big-endian keys).
    pub keys: u64,
    /// Bytes per value.
    pub value_bytes: usize,
    /// Read in descending key order.
    pub backward: bool,
}

/// What the iteration measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScanReport {
    pub keys: u64,
    pub value_bytes: usize,
    pub direction: &'static str,
    pub load_s: f64,
    pub scan_s: f64,
    pub rows: u64,
    pub rows_per_s: f64,
    pub rss_mib_before: f64,
    pub rss_mib_max_during: f64,
    pub rss_mib_after: f64,
    /// The largest sample during the iteration minus the resident set
    /// before it.
    pub rss_mib_growth: f64,
}

/// Rows between resident-set samples.
const SAMPLE_EVERY: u64 = 100_000;
/// Rows per loading transaction.
const LOAD_BATCH: u64 = 10_000;

pub fn run(cfg: &ScanConfig, progress: impl Fn(&str)) -> Result<ScanReport, String> {
    if cfg.keys == 0 || cfg.value_bytes > milliscale::limits::VALUE_BYTES_MAX {
        return Err("keys must be positive and values at most 256 KiB".into());
    }
    let e = |e: milliscale::Error| e.to_string();
    let db = Database::open(Options::new()).map_err(e)?;
    let t = db.create_table("scan").map_err(e)?;
    let started = Instant::now();
    let value = vec![0x5a; cfg.value_bytes];
    let mut id = 0;
    while id < cfg.keys {
        let mut tx = db.begin().map_err(e)?;
        for k in id..(id + LOAD_BATCH).min(cfg.keys) {
            tx.put(&t, &k.to_be_bytes(), &value).map_err(e)?;
        }
        tx.commit_and_wait().map_err(e)?;
        id += LOAD_BATCH;
        if id.is_multiple_of(LOAD_BATCH * 100) {
            progress(&format!("loaded {id} rows"));
        }
    }
    let load_s = started.elapsed().as_secs_f64();
    let rss = || rss_mib().ok_or("no /proc/self/statm: cannot measure memory".to_string());
    let before = rss()?;
    let mut max = before;
    let mut rows = 0u64;
    let started = Instant::now();
    {
        let mut tx = db.begin_with(TxnOptions::read_only()).map_err(e)?;
        let direction = if cfg.backward { Direction::Backward } else { Direction::Forward };
        for row in tx.range(&t, Bound::Unbounded, Bound::Unbounded, direction) {
            let (k, v) = row.map_err(e)?;
            std::hint::black_box((&k, &v));
            rows += 1;
            if rows.is_multiple_of(SAMPLE_EVERY) {
                max = max.max(rss()?);
            }
        }
    }
    let scan = started.elapsed().max(Duration::from_nanos(1));
    let after = rss()?;
    if rows != cfg.keys {
        return Err(format!("the iteration returned {rows} rows of {}", cfg.keys));
    }
    Ok(ScanReport {
        keys: cfg.keys,
        value_bytes: cfg.value_bytes,
        direction: if cfg.backward { "backward" } else { "forward" },
        load_s,
        scan_s: scan.as_secs_f64(),
        rows,
        rows_per_s: rows as f64 / scan.as_secs_f64(),
        rss_mib_before: before,
        rss_mib_max_during: max,
        rss_mib_after: after,
        rss_mib_growth: max.max(after) - before,
    })
}
