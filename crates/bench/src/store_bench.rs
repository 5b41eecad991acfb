//! Store latency benchmark: is `sim://` faithful to its preset?
//!
//! Threads append `size`-byte parts to their own segments (rolling over to
//! a new object every `rollover` parts and deleting the old one, untimed),
//! and the append latencies go into a histogram. The expected quantiles
//! come from sampling the preset's model directly (no sleeping), so the
//! comparison measures what the simulator adds or loses: sleep accuracy,
//! scheduling, the inner store's own time.

use std::sync::Arc;
use std::time::Instant;

use hdrhistogram::Histogram;
use objstore::sim::model::{Catalog, OpClass};
use objstore::{Bytes, ObjectStore};
use rand::SeedableRng;
use serde::Serialize;

use crate::report::Environment;

#[derive(Debug, Clone)]
pub struct StoreBenchConfig {
    pub url: String,
    pub size: usize,
    pub count: u64,
    pub threads: usize,
    pub rollover: u64,
}

/// Latency quantiles in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Quantiles {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct StoreBenchReport {
    pub url: String,
    pub size_bytes: usize,
    pub appends: u64,
    pub threads: usize,
    pub measured: Quantiles,
    /// From the preset's model, if the URL is a sim preset.
    pub expected: Option<Quantiles>,
    /// measured / expected, per quantile.
    pub ratio: Option<Quantiles>,
    /// The model's own p99.9 over 200 draws of `appends` samples: its 5th
    /// and 95th percentile. A measured p99.9 inside this band is as close to
    /// the model as a sample of this size can show.
    pub model_p999_band_ms: Option<(f64, f64)>,
    pub appends_per_s: f64,
    pub env: Environment,
}

fn quantiles(h: &Histogram<u64>) -> Quantiles {
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1e6;
    Quantiles { p50_ms: ms(0.5), p99_ms: ms(0.99), p999_ms: ms(0.999) }
}

fn model_histogram(url: &str, size: usize, n: u64, seed: u64) -> Option<Histogram<u64>> {
    let rest = url.strip_prefix("sim://")?;
    let name = rest.split('?').next()?;
    let catalog = Catalog::builtin();
    let preset = catalog.preset(name).ok()?;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds");
    for _ in 0..n {
        let d = preset.sample(OpClass::Write, size as u64, &mut rng);
        let _ = h.record((d.as_nanos() as u64).max(1));
    }
    Some(h)
}

/// The preset's own quantiles for an append of `size` bytes (1M samples).
pub fn expected(url: &str, size: usize) -> Option<Quantiles> {
    model_histogram(url, size, 1_000_000, 1).map(|h| quantiles(&h))
}

/// The 5th and 95th percentile of the model's p99.9 over 200 samples of `n`.
pub fn p999_band(url: &str, size: usize, n: u64) -> Option<(f64, f64)> {
    let mut p: Vec<f64> = (0..200)
        .map(|seed| model_histogram(url, size, n, 100 + seed).map(|h| quantiles(&h).p999_ms))
        .collect::<Option<_>>()?;
    p.sort_by(f64::total_cmp);
    Some((p[10], p[189]))
}

pub fn run(cfg: &StoreBenchConfig) -> Result<StoreBenchReport, String> {
    if cfg.threads == 0 || cfg.count == 0 || cfg.size == 0 || cfg.rollover == 0 {
        return Err("threads, count, size and rollover must be positive".into());
    }
    let store = objstore::open(&cfg.url).map_err(|e| e.to_string())?;
    run_on(store, cfg)
}

/// [`run`] on a store already open; `cfg.url` names it in the report (and
/// selects the model to compare with, for `sim://` URLs).
pub fn run_on(
    store: Arc<dyn ObjectStore>,
    cfg: &StoreBenchConfig,
) -> Result<StoreBenchReport, String> {
    if cfg.threads == 0 || cfg.count == 0 || cfg.size == 0 || cfg.rollover == 0 {
        return Err("threads, count, size and rollover must be positive".into());
    }
    let body = Bytes::from(vec![0x5au8; cfg.size]);
    let per_thread = cfg.count.div_ceil(cfg.threads as u64);
    let t0 = Instant::now();
    let hists: Vec<Result<Histogram<u64>, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..cfg.threads)
            .map(|w| {
                let (store, body) = (&store, &body);
                s.spawn(move || thread_appends(&**store, w, per_thread, cfg.rollover, body))
            })
            .collect();
        hs.into_iter().map(|h| h.join().map_err(|_| "bench thread panicked".to_owned())?).collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    let mut all = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds");
    for h in hists {
        all.add(h?).map_err(|e| e.to_string())?;
    }
    let measured = quantiles(&all);
    let expected = expected(&cfg.url, cfg.size);
    let ratio = expected.map(|e| Quantiles {
        p50_ms: measured.p50_ms / e.p50_ms,
        p99_ms: measured.p99_ms / e.p99_ms,
        p999_ms: measured.p999_ms / e.p999_ms,
    });
    let model_p999_band_ms = p999_band(&cfg.url, cfg.size, all.len());
    Ok(StoreBenchReport {
        model_p999_band_ms,
        url: cfg.url.clone(),
        size_bytes: cfg.size,
        appends: all.len(),
        threads: cfg.threads,
        measured,
        expected,
        ratio,
        appends_per_s: all.len() as f64 / secs,
        env: Environment::detect(),
    })
}

fn thread_appends(
    store: &dyn ObjectStore,
    w: usize,
    n: u64,
    rollover: u64,
    body: &Bytes,
) -> Result<Histogram<u64>, String> {
    let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds");
    let (mut seg, mut offset, mut parts) = (0u64, 0u64, 0u64);
    for _ in 0..n {
        if parts == rollover {
            store.delete(&format!("bench/t{w}/s{seg}")).map_err(|e| e.to_string())?;
            (seg, offset, parts) = (seg + 1, 0, 0);
        }
        let key = format!("bench/t{w}/s{seg}");
        let t = Instant::now();
        let m = store.append(&key, offset, body.clone()).map_err(|e| format!("append: {e}"))?;
        let _ = h.record((t.elapsed().as_nanos() as u64).max(1));
        offset = m.size;
        parts += 1;
    }
    let _ = store.delete(&format!("bench/t{w}/s{seg}"));
    Ok(h)
}
