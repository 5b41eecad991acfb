//! Choosing the ordered index by measurement: the same key set, inserted,
//! looked up and scanned through each candidate with the same threads.
//!
//! Keys are 8-byte big-endian integers stored as `IndexKey` (the engine's
//! key type, inline up to 16 bytes) in both candidates, so the comparison is
//! of the structures, not of key representations.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use milliscale::internals::{IndexKey, KeyQuery};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::rss::rss_mib;

/// An index under test.
pub trait Candidate: Sync {
    fn name(&self) -> &'static str;
    fn insert(&self, key: &[u8], value: u64) -> bool;
    fn get(&self, key: &[u8]) -> Option<u64>;
    /// Visit `n` entries from `from` onwards; returns a checksum.
    fn scan(&self, from: &[u8], n: usize) -> u64;
}

pub struct SccTree(pub scc::TreeIndex<IndexKey, u64>);
pub struct SkipList(pub crossbeam_skiplist::SkipMap<IndexKey, u64>);

impl Candidate for SccTree {
    fn name(&self) -> &'static str {
        "scc::TreeIndex"
    }
    fn insert(&self, key: &[u8], value: u64) -> bool {
        self.0.insert_sync(IndexKey::from_slice(key), value).is_ok()
    }
    fn get(&self, key: &[u8]) -> Option<u64> {
        let guard = scc::Guard::new();
        self.0.peek(&KeyQuery(key), &guard).copied()
    }
    fn scan(&self, from: &[u8], n: usize) -> u64 {
        let guard = scc::Guard::new();
        self.0
            .range((std::ops::Bound::Included(KeyQuery(from)), std::ops::Bound::Unbounded), &guard)
            .take(n)
            .fold(0, |acc, (_, v)| acc ^ v)
    }
}

/// scc::TreeIndex with plain byte-string keys (`memcmp` on every compare),
/// to measure what `IndexKey`'s integer comparison buys.
pub struct SccTreeBytes(pub scc::TreeIndex<smallvec::SmallVec<[u8; 16]>, u64>);

impl Candidate for SccTreeBytes {
    fn name(&self) -> &'static str {
        "scc::TreeIndex (memcmp keys)"
    }
    fn insert(&self, key: &[u8], value: u64) -> bool {
        self.0.insert_sync(smallvec::SmallVec::from_slice(key), value).is_ok()
    }
    fn get(&self, key: &[u8]) -> Option<u64> {
        let guard = scc::Guard::new();
        self.0.peek(key, &guard).copied()
    }
    fn scan(&self, from: &[u8], n: usize) -> u64 {
        let guard = scc::Guard::new();
        self.0
            .range::<[u8], _>((std::ops::Bound::Included(from), std::ops::Bound::Unbounded), &guard)
            .take(n)
            .fold(0, |acc, (_, v)| acc ^ v)
    }
}

impl Candidate for SkipList {
    fn name(&self) -> &'static str {
        "crossbeam_skiplist::SkipMap"
    }
    fn insert(&self, key: &[u8], value: u64) -> bool {
        let k = IndexKey::from_slice(key);
        let e = self.0.get_or_insert(k, value);
        *e.value() == value
    }
    fn get(&self, key: &[u8]) -> Option<u64> {
        self.0.get(&IndexKey::from_slice(key)).map(|e| *e.value())
    }
    fn scan(&self, from: &[u8], n: usize) -> u64 {
        self.0
            .range((
                std::ops::Bound::Included(IndexKey::from_slice(from)),
                std::ops::Bound::Unbounded,
            ))
            .take(n)
            .fold(0, |acc, e| acc ^ *e.value())
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct IndexResult {
    pub candidate: String,
    pub keys: u64,
    pub threads: usize,
    pub insert_mops: f64,
    pub lookup_mops: f64,
    pub scan100_kops: f64,
    /// Resident memory growth while inserting (the structure's footprint,
    /// plus allocator slack; memory freed by an earlier candidate may be reused).
    pub rss_mib_growth: f64,
}

#[derive(Debug, Clone)]
pub struct IndexBenchConfig {
    pub keys: Vec<u64>,
    pub threads: usize,
    pub phase_duration: Duration,
    pub seed: u64,
}

/// Run every candidate at every key count.
pub fn run(cfg: &IndexBenchConfig, mut on_result: impl FnMut(&IndexResult)) -> Vec<IndexResult> {
    let mut out = Vec::new();
    for &n in &cfg.keys {
        let r = measure(&SccTree(scc::TreeIndex::new()), n, cfg);
        on_result(&r);
        out.push(r);
        let r = measure(&SccTreeBytes(scc::TreeIndex::new()), n, cfg);
        on_result(&r);
        out.push(r);
        let r = measure(&SkipList(crossbeam_skiplist::SkipMap::new()), n, cfg);
        on_result(&r);
        out.push(r);
    }
    out
}

fn measure(c: &dyn Candidate, n: u64, cfg: &IndexBenchConfig) -> IndexResult {
    let mut order: Vec<u64> = (0..n).collect();
    order.shuffle(&mut SmallRng::seed_from_u64(cfg.seed));
    let rss_before = rss_mib().unwrap_or(0.0);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for w in 0..cfg.threads {
            let order = &order;
            s.spawn(move || {
                for &k in order.iter().skip(w).step_by(cfg.threads) {
                    assert!(c.insert(&k.to_be_bytes(), k), "fresh key");
                }
            });
        }
    });
    let insert_secs = t0.elapsed().as_secs_f64();
    drop(order);
    let rss_growth = rss_mib().unwrap_or(0.0) - rss_before;
    let lookups = timed(cfg, |rng| {
        let k = rng.random_range(0..n);
        assert_eq!(c.get(&k.to_be_bytes()), Some(k), "lookup of a present key");
    });
    let scans = timed(cfg, |rng| {
        let k = rng.random_range(0..n);
        std::hint::black_box(c.scan(&k.to_be_bytes(), 100));
    });
    IndexResult {
        candidate: c.name().into(),
        keys: n,
        threads: cfg.threads,
        insert_mops: n as f64 / insert_secs / 1e6,
        lookup_mops: lookups / 1e6,
        scan100_kops: scans / 1e3,
        rss_mib_growth: rss_growth,
    }
}

/// Run `op` on every thread for the phase duration; operations per second.
fn timed(cfg: &IndexBenchConfig, op: impl Fn(&mut SmallRng) + Sync) -> f64 {
    let stop = AtomicBool::new(false);
    let count = AtomicU64::new(0);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for w in 0..cfg.threads {
            let (stop, count, op) = (&stop, &count, &op);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(cfg.seed ^ (w as u64 + 1));
                let mut local = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..64 {
                        op(&mut rng);
                    }
                    local += 64;
                }
                count.fetch_add(local, Ordering::Relaxed);
            });
        }
        std::thread::sleep(cfg.phase_duration);
        stop.store(true, Ordering::Relaxed);
    });
    count.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64()
}
