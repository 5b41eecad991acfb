//! Change feeds beside a benchmark's writer, in the same process and on the
//! same store handles (`bench ycsb --feeds N`, design record 0014).
//!
//! - **Catch-up**: each feed opens after the load and first delivers the
//!   log since the newest checkpoint; the first feed's changes a second
//!   until it has delivered what was durable at its open is "how many
//!   changes one consumer can take".
//! - **Lag**: every millisecond of the measured phase a probe reads the
//!   writer's gCSN (every CSN below it is durable); the time until every
//!   consumer's resolved point passes it is one sample (as
//!   `replica_bench` measures a replica's lag, so the two compare).
//! - **Cost to the writer**: the writer's throughput with feeds against
//!   without, in alternating runs (the feeds read the store, not the
//!   writer; on this 2-core machine they share its CPU).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use milliscale::Database;
use milliscale::feed::{Feed, FeedEvent, FeedFilter};
use parking_lot::Mutex;

use crate::replica_bench::{PASSIVE_CHECK, REPLICA_CORE, pin_current, probe_lag};

/// The consumers of `n` feeds and their lag probe.
pub struct FeedRun {
    feeds: Vec<Mutex<Feed>>,
    /// Each consumer's resolved point.
    resolved: Vec<AtomicU64>,
    delivered: Vec<AtomicU64>,
    changes: Vec<AtomicU64>,
    lag_us: Mutex<Histogram<u64>>,
    measuring: AtomicBool,
    stop: AtomicBool,
    /// The first feed's catch-up: changes, transactions and the time.
    catch_up: (u64, u64, Duration),
    /// (transactions delivered by all consumers, instant) at the start and
    /// end of the measured phase.
    marks: Mutex<Vec<(u64, Instant)>>,
    /// The feeds' threads (followers, consumers, probe) on the second core.
    pin: bool,
}

impl FeedRun {
    /// Open `n` feeds of `db` (from its newest checkpoint on) and let the
    /// first catch up with what is durable now. With `pin`, every thread
    /// of theirs runs on the second core (the writer's on the first).
    pub fn open(db: &Database, n: usize, pin: bool) -> Result<FeedRun, String> {
        // Opened on a thread of the feeds' core, so that their followers'
        // threads inherit it.
        let mut feeds = std::thread::scope(|s| {
            s.spawn(|| {
                if pin {
                    pin_current(REPLICA_CORE)?;
                }
                (0..n)
                    .map(|_| db.changes(None, FeedFilter::default()).map_err(|e| e.to_string()))
                    .collect::<Result<Vec<Feed>, String>>()
            })
            .join()
            .map_err(|_| "opening the feeds panicked".to_string())?
        })?;
        let target = db.durable_csn();
        let started = Instant::now();
        let (mut changes, mut txns) = (0u64, 0u64);
        let mut resolved = vec![0; n];
        if let Some(f) = feeds.first_mut() {
            while resolved[0] < target {
                if started.elapsed() > Duration::from_secs(600) {
                    return Err("the feed did not catch up with the load in 10 minutes".into());
                }
                match f.next_timeout(Duration::from_millis(50)).map_err(|e| e.to_string())? {
                    Some(FeedEvent::Commit(t)) => {
                        txns += 1;
                        changes += t.changes.len() as u64;
                    }
                    Some(FeedEvent::Resolved(r)) => resolved[0] = r,
                    None => {}
                }
            }
        }
        let catch_up = (changes, txns, started.elapsed());
        Ok(FeedRun {
            feeds: feeds.into_iter().map(Mutex::new).collect(),
            resolved: resolved.into_iter().map(AtomicU64::new).collect(),
            delivered: (0..n).map(|_| AtomicU64::new(0)).collect(),
            changes: (0..n).map(|_| AtomicU64::new(0)).collect(),
            lag_us: Mutex::new(Histogram::new_with_bounds(1, 600_000_000, 3).expect("bounds")),
            measuring: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            catch_up,
            marks: Mutex::new(Vec::new()),
            pin,
        })
    }

    /// How many feeds.
    pub fn len(&self) -> usize {
        self.feeds.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.feeds.is_empty()
    }

    /// Consumer `i`'s loop; run it on its own thread until [`Self::stop`].
    pub fn consume(&self, i: usize) -> Result<(), String> {
        if self.pin {
            pin_current(REPLICA_CORE)?;
        }
        let mut f = self.feeds[i].lock();
        while !self.stop.load(Ordering::Acquire) {
            match f.next_timeout(Duration::from_millis(20)).map_err(|e| e.to_string())? {
                Some(FeedEvent::Commit(t)) => {
                    self.delivered[i].fetch_add(1, Ordering::Relaxed);
                    self.changes[i].fetch_add(t.changes.len() as u64, Ordering::Relaxed);
                    std::hint::black_box(&t);
                }
                Some(FeedEvent::Resolved(r)) => self.resolved[i].store(r, Ordering::Release),
                None => {}
            }
        }
        Ok(())
    }

    fn slowest(&self) -> u64 {
        self.resolved.iter().map(|r| r.load(Ordering::Acquire)).min().unwrap_or(0)
    }

    /// The probe loop (`replica_bench::probe_lag`, to every consumer's
    /// resolved point); run it on its own thread until [`Self::stop`].
    pub fn probe(&self, db: &Database) {
        if self.pin
            && let Err(e) = pin_current(REPLICA_CORE)
        {
            eprintln!("the feeds' lag probe runs unpinned: {e}");
        }
        probe_lag(db, &self.stop, &self.measuring, &self.lag_us, |csn, left| {
            let passed = self.slowest() > csn;
            if !passed {
                std::thread::sleep(left.min(PASSIVE_CHECK));
            }
            passed
        });
    }

    /// Mark the start (`start = true`) or end of the measured phase.
    pub fn mark(&self, start: bool) {
        self.measuring.store(start, Ordering::Release);
        let n = self.delivered.iter().map(|d| d.load(Ordering::Relaxed)).sum();
        self.marks.lock().push((n, Instant::now()));
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// The report's figures (`feed_*`), and a note.
    pub fn report(&self) -> (BTreeMap<String, f64>, String) {
        let mut x = BTreeMap::new();
        let h = self.lag_us.lock();
        let ms = |us: u64| us as f64 / 1000.0;
        if !h.is_empty() {
            x.insert("feed_lag_p50_ms".into(), ms(h.value_at_quantile(0.5)));
            x.insert("feed_lag_p99_ms".into(), ms(h.value_at_quantile(0.99)));
            x.insert("feed_lag_max_ms".into(), ms(h.max()));
        }
        let (changes, txns, took) = self.catch_up;
        let secs = took.as_secs_f64().max(1e-9);
        x.insert("feed_catch_up_changes_per_s".into(), changes as f64 / secs);
        x.insert("feed_catch_up_txn_per_s".into(), txns as f64 / secs);
        if let [(d0, t0), (d1, t1), ..] = self.marks.lock().as_slice() {
            let s = (*t1 - *t0).as_secs_f64().max(1e-9);
            x.insert("feed_delivered_txn_per_s".into(), (d1 - d0) as f64 / s);
        }
        let m = self.feeds.first().map(|f| f.lock().replica().metrics());
        if let Some(m) = &m {
            x.insert("feed_replica_lag_p50_ms".into(), m.lag_p50.as_secs_f64() * 1e3);
            x.insert("feed_replica_lag_p99_ms".into(), m.lag_p99.as_secs_f64() * 1e3);
        }
        let cores = if self.pin { "on core 1, the writer on core 0" } else { "on these cores" };
        let note = format!(
            "feeds: {} consumers (each a follower with a replica's copy, {cores}); the \
             first caught up with the load's log ({changes} changes in {txns} transactions) in \
             {took:.2?}; {} lag probes (writer gCSN to every consumer's resolved point)",
            self.feeds.len(),
            h.len()
        );
        (x, note)
    }
}
