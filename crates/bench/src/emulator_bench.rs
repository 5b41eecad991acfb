//! Is the emulator fast enough to stand in for S3 Express in tests and
//! benchmarks? Over loopback, with preset `none`:
//!
//! 1. throughput: `clients` threads append `size`-byte parts (64 KiB by
//!    default) through the `s3` backend (aws-sdk-s3, SigV4, HTTP/1.1);
//! 2. overhead: 1 MiB appends, one at a time, directly on a memory store and
//!    through the emulator; the difference of the p50s is what the emulator
//!    (with the HTTP client) adds.
//!
//! The emulator runs in this process on its own runtime, so client and
//! server share the machine's cores, as they would on one test machine.

use std::sync::Arc;

use emulator::{DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY, Emulator, EmulatorOptions};
use objstore::{MemoryStore, ObjectStore, S3Store};
use serde::Serialize;

use crate::report::Environment;
use crate::store_bench::{self, Quantiles, StoreBenchConfig};

#[derive(Debug, Clone)]
pub struct EmulatorBenchConfig {
    pub clients: usize,
    pub size: usize,
    pub count: u64,
    pub big_size: usize,
    pub big_count: u64,
}

impl Default for EmulatorBenchConfig {
    fn default() -> Self {
        EmulatorBenchConfig {
            clients: 8,
            size: 64 << 10,
            count: 10_000,
            big_size: 1 << 20,
            big_count: 500,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct EmulatorBenchReport {
    pub clients: usize,
    pub size_bytes: usize,
    pub appends: u64,
    pub appends_per_s: f64,
    pub latency: Quantiles,
    pub big_size_bytes: usize,
    pub big_appends: u64,
    pub big_direct: Quantiles,
    pub big_http: Quantiles,
    /// p50 through the emulator minus p50 directly on memory.
    pub big_added_p50_ms: f64,
    pub env: Environment,
}

fn s3_store(e: &Emulator, bucket: &str) -> Result<Arc<dyn ObjectStore>, String> {
    let url = format!("s3://{bucket}?endpoint={}", e.endpoint());
    let s = S3Store::with_credentials(&url, DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY)
        .map_err(|e| e.to_string())?;
    s.create_bucket().map_err(|e| e.to_string())?;
    Ok(Arc::new(s))
}

pub fn run(cfg: &EmulatorBenchConfig) -> Result<EmulatorBenchReport, String> {
    if cfg.clients == 0
        || cfg.size == 0
        || cfg.count == 0
        || cfg.big_size == 0
        || cfg.big_count == 0
    {
        return Err("clients, sizes and counts must be positive".into());
    }
    let e = Emulator::start(EmulatorOptions::default()).map_err(|e| e.to_string())?;
    let throughput = store_bench::run_on(
        s3_store(&e, "throughput")?,
        &StoreBenchConfig {
            url: format!("{}/throughput", e.endpoint()),
            size: cfg.size,
            count: cfg.count,
            threads: cfg.clients,
            rollover: 100,
        },
    )?;
    let big = |store: Arc<dyn ObjectStore>, url: String| {
        store_bench::run_on(
            store,
            &StoreBenchConfig {
                url,
                size: cfg.big_size,
                count: cfg.big_count,
                threads: 1,
                rollover: 20,
            },
        )
    };
    let direct = big(Arc::new(MemoryStore::new()), "memory://".into())?;
    let http = big(s3_store(&e, "big")?, format!("{}/big", e.endpoint()))?;
    e.stop();
    Ok(EmulatorBenchReport {
        clients: cfg.clients,
        size_bytes: cfg.size,
        appends: throughput.appends,
        appends_per_s: throughput.appends_per_s,
        latency: throughput.measured,
        big_size_bytes: cfg.big_size,
        big_appends: http.appends,
        big_added_p50_ms: http.measured.p50_ms - direct.measured.p50_ms,
        big_direct: direct.measured,
        big_http: http.measured,
        env: Environment::detect(),
    })
}
