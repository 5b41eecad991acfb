//! A read replica beside a benchmark's writer, in the same process and on
//! the same store handles (`bench ycsb --replica`).
//!
//! - **Lag**: every millisecond of the measured phase a probe reads the
//!   writer's gCSN (every CSN below it is durable, so acknowledged or about
//!   to be); the time until the replica has applied it is one sample. So
//!   the lag is sampled at a steady rate however far behind the replica
//!   is, and a stall shows in as many samples as it lasted.
//! - **Keeping up**: the replica's applied transactions per second against
//!   the writer's CSNs per second over the measured phase, and the replica's
//!   distance in CSNs at its end.
//! - **Reads**: after the writer's workers stop, reader threads run
//!   read-only transactions of the workload's key choice on the replica.
//! - **Cost**: the replica's own requests and dollars per hour. In this
//!   setup they also reach the writer's store accounting.
//!
//! On this 2-core machine the replica's threads compete with the writer's
//! for CPU, unless `pin` puts the writer on core 0 and the replica on core
//! 1 (two one-core machines sharing a store); the report says which.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use milliscale::{Database, Options, Replica, ReplicaOptions, Table};
use parking_lot::Mutex;

use crate::keys::KeyChooser;

/// How the benchmark runs its replica.
#[derive(Debug, Clone, Copy)]
pub struct ReplicaConfig {
    /// After the measured phase, this many reader threads read from the
    /// replica for `read_for` (0: no read phase).
    pub readers: usize,
    pub read_for: Duration,
    /// The replica's apply threads (`ReplicaOptions::apply_threads`).
    pub apply_threads: usize,
    /// `ReplicaOptions::hedge_reads`.
    pub hedge_reads: bool,
    /// The writer's threads on core 0, the replica's (and its readers') on
    /// core 1.
    pub pin: bool,
    /// The lag probe watches the applied CSN without asking for polls (a
    /// waiting reader's `wait_for` asks the tails to poll at once: read
    /// your writes on demand, which shortens the lag it measures), as a
    /// change feed's consumer watches its resolved point.
    pub passive_probe: bool,
}

/// The core the replica runs on when pinned: the second the process may
/// use.
pub const REPLICA_CORE: usize = 1;
/// The core the writer runs on when pinned: the first.
pub const WRITER_CORE: usize = 0;

/// The cores the process may use, as it started (a pinned thread sees only
/// its own core): call [`cores`] before pinning anything.
static CORES: std::sync::OnceLock<Vec<core_affinity::CoreId>> = std::sync::OnceLock::new();

/// The cores the process could use before any pinning.
pub fn cores() -> &'static [core_affinity::CoreId] {
    CORES.get_or_init(|| core_affinity::get_core_ids().unwrap_or_default())
}

/// Pin the calling thread (and the threads it starts later, which inherit
/// its affinity) to the process's `n`th core.
pub fn pin_current(n: usize) -> Result<(), String> {
    let id = *cores().get(n).ok_or_else(|| {
        format!("cannot pin to a core #{n}: the process has {} (pinning needs 2)", cores().len())
    })?;
    if core_affinity::set_for_current(id) {
        Ok(())
    } else {
        Err(format!("pinning a thread to core {} failed", id.id))
    }
}

/// How often a passive lag probe looks again at what it watches.
pub(crate) const PASSIVE_CHECK: Duration = Duration::from_micros(200);

/// Every millisecond while `measuring`, take the writer's gCSN (every CSN
/// below it is durable) as a sample, and record in `lag` the time until
/// `reached(csn, wait)` says the follower watched has passed it (waiting
/// at most `wait`, until the next sample is due), until `stop`. So the lag
/// is sampled at a steady rate however far behind the follower is, and a
/// stall shows in as many samples as it lasted. Returns the samples
/// recorded.
pub(crate) fn probe_lag(
    db: &Database,
    stop: &AtomicBool,
    measuring: &AtomicBool,
    lag: &Mutex<Histogram<u64>>,
    mut reached: impl FnMut(u64, Duration) -> bool,
) -> u64 {
    const EVERY: Duration = Duration::from_millis(1);
    // Samples taken and not yet reached: (when, the CSN to wait for).
    let mut waiting: std::collections::VecDeque<(Instant, u64)> = Default::default();
    let (mut next, mut recorded) = (Instant::now(), 0);
    while !stop.load(Ordering::Acquire) {
        let now = Instant::now();
        if now >= next {
            next = now + EVERY;
            let g = db.durable_csn();
            if g > 1 && measuring.load(Ordering::Acquire) {
                waiting.push_back((now, g - 1));
            }
        }
        match waiting.front().copied() {
            Some((at, csn)) => {
                if reached(csn, next.saturating_duration_since(Instant::now())) {
                    lag.lock().saturating_record(at.elapsed().as_micros().max(1) as u64);
                    recorded += 1;
                    waiting.pop_front();
                }
            }
            None => std::thread::sleep(next.saturating_duration_since(Instant::now())),
        }
    }
    recorded
}

/// A replica and its lag probe.
pub struct ReplicaRun {
    pub replica: Replica,
    lag_us: Mutex<Histogram<u64>>,
    pin: bool,
    passive: bool,
    /// The store handles (shared with the writer): their accounting has
    /// the single read requests' latencies.
    stores: Vec<std::sync::Arc<dyn objstore::ObjectStore>>,
    measuring: AtomicBool,
    stop: AtomicBool,
    /// (writer next CSN, replica entries applied, replica applied CSN,
    /// instant) at the start and end of the measured phase.
    marks: Mutex<Vec<(u64, u64, u64, Instant)>>,
    probes: AtomicU64,
    caught_up_in: Duration,
}

impl ReplicaRun {
    /// Open a replica on `db`'s stores (`writer` must have been through
    /// [`Options::open_stores`]) and wait until it has applied what the
    /// writer has made durable so far.
    pub fn open(db: &Database, writer: &Options, rc: &ReplicaConfig) -> Result<ReplicaRun, String> {
        let mut o = Options::new();
        let mut stores = Vec::new();
        for s in writer.stores() {
            let h = s.open().map_err(|e| e.to_string())?;
            stores.push(std::sync::Arc::clone(&h));
            o = o.add_store_handle(h);
        }
        let started = Instant::now();
        let opts = ReplicaOptions {
            apply_threads: rc.apply_threads,
            hedge_reads: rc.hedge_reads,
            ..ReplicaOptions::default()
        };
        // Opened on a thread of its own core, so its follower, tail and
        // apply threads inherit the core.
        let pin = rc.pin;
        let replica = std::thread::spawn(move || {
            if pin {
                pin_current(REPLICA_CORE)?;
            }
            Replica::open_with(o, opts).map_err(|e| e.to_string())
        })
        .join()
        .map_err(|_| "opening the replica panicked".to_string())??;
        let target = db.durable_csn().saturating_sub(1);
        replica
            .wait_for(target, Duration::from_secs(600))
            .map_err(|e| format!("the replica did not catch up with the load: {e}"))?;
        Ok(ReplicaRun {
            replica,
            lag_us: Mutex::new(Histogram::new_with_bounds(1, 600_000_000, 3).expect("bounds")),
            pin,
            passive: rc.passive_probe,
            stores,
            measuring: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            marks: Mutex::new(Vec::new()),
            probes: AtomicU64::new(0),
            caught_up_in: started.elapsed(),
        })
    }

    /// The probe loop; run it on its own thread until [`ReplicaRun::stop`].
    pub fn probe(&self, db: &Database) {
        // On the replica's core: on the writer's saturated core the probe
        // itself would wait for CPU and add that to the lag.
        if self.pin
            && let Err(e) = pin_current(REPLICA_CORE)
        {
            eprintln!("the lag probe runs unpinned: {e}");
        }
        let n = probe_lag(db, &self.stop, &self.measuring, &self.lag_us, |csn, left| {
            if self.passive {
                let applied = self.replica.applied_csn() > csn;
                if !applied {
                    std::thread::sleep(left.min(PASSIVE_CHECK));
                }
                applied
            } else {
                self.replica.wait_for(csn, left).is_ok()
            }
        });
        self.probes.fetch_add(n, Ordering::Relaxed);
    }

    /// Offer a checkpoint whenever the writer wants one (it marked its log
    /// and published the mark: `Replica::offer_if_wanted`), checking every
    /// 20 ms until [`ReplicaRun::stop`]. Returns the offers made and the
    /// time they took.
    pub fn offer_loop(&self) -> (u64, Duration) {
        let (mut n, mut busy) = (0, Duration::ZERO);
        if self.pin
            && let Err(e) = pin_current(REPLICA_CORE)
        {
            eprintln!("the replica's offer loop runs unpinned: {e}");
        }
        while !self.stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(20));
            let t0 = Instant::now();
            match self.replica.offer_if_wanted() {
                Ok(Some(_)) => {
                    n += 1;
                    busy += t0.elapsed();
                }
                Ok(None) => {}
                Err(e) => eprintln!("the replica's checkpoint offer failed: {e}"),
            }
        }
        (n, busy)
    }

    /// Mark the start (`start = true`) or end of the measured phase.
    pub fn mark(&self, db: &Database, start: bool) {
        self.measuring.store(start, Ordering::Release);
        if start {
            self.replica.reset_lag();
        }
        let m = self.replica.metrics();
        let at = (db.stats().next_csn, m.entries_applied, m.applied_csn, Instant::now());
        self.marks.lock().push(at);
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Run `threads` readers of `ops` keys per transaction on the replica
    /// for `duration`; returns transactions per second.
    pub fn read_throughput(
        &self,
        chooser: &KeyChooser,
        ops: usize,
        threads: usize,
        duration: Duration,
        seed: u64,
        key_bytes: impl Fn(u64) -> Vec<u8> + Sync,
    ) -> Result<f64, String> {
        use rand::SeedableRng;
        let table: Table = self.replica.open_table("usertable").map_err(|e| e.to_string())?;
        let done = AtomicBool::new(false);
        let count = AtomicU64::new(0);
        let started = Instant::now();
        std::thread::scope(|s| {
            let mut workers = Vec::new();
            for w in 0..threads {
                let (table, done, count, key_bytes) = (&table, &done, &count, &key_bytes);
                workers.push(s.spawn(move || -> Result<(), String> {
                    if self.pin {
                        pin_current(REPLICA_CORE)?;
                    }
                    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed ^ (w as u64 + 77));
                    let mut n = 0u64;
                    while !done.load(Ordering::Relaxed) {
                        let mut tx = self.replica.begin().map_err(|e| e.to_string())?;
                        for _ in 0..ops {
                            let k = key_bytes(chooser.next(&mut rng));
                            let found = tx
                                .get_with(table, &k, |v| {
                                    std::hint::black_box(v.len());
                                })
                                .map_err(|e| e.to_string())?;
                            if found.is_none() {
                                return Err("a record is missing on the replica".into());
                            }
                        }
                        n += 1;
                    }
                    count.fetch_add(n, Ordering::Relaxed);
                    Ok(())
                }));
            }
            std::thread::sleep(duration);
            done.store(true, Ordering::Relaxed);
            workers.into_iter().try_for_each(|h| h.join().expect("a reader panicked"))
        })?;
        Ok(count.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
    }

    /// The report's figures (`replica_*`), and a note.
    pub fn report(
        &self,
        db: &Database,
        read_txn_per_s: Option<f64>,
    ) -> (BTreeMap<String, f64>, String) {
        let mut x = BTreeMap::new();
        let h = self.lag_us.lock();
        let ms = |us: u64| us as f64 / 1000.0;
        if !h.is_empty() {
            x.insert("replica_lag_p50_ms".into(), ms(h.value_at_quantile(0.5)));
            x.insert("replica_lag_p99_ms".into(), ms(h.value_at_quantile(0.99)));
            x.insert("replica_lag_max_ms".into(), ms(h.max()));
        }
        let m = self.replica.metrics();
        let marks = self.marks.lock();
        if let [(c0, a0, _, t0), (c1, a1, p1, t1), ..] = marks.as_slice() {
            let s = (*t1 - *t0).as_secs_f64().max(1e-9);
            x.insert("writer_csn_per_s".into(), (c1 - c0) as f64 / s);
            x.insert("replica_applied_per_s".into(), (a1 - a0) as f64 / s);
            // At the end of the measured phase (the writer's next CSN
            // against the replica's applied CSN).
            x.insert("replica_behind_csns_at_end".into(), c1.saturating_sub(*p1) as f64);
        }
        // The store's own single reads over the measured phase (writer's
        // and replica's; the writer reads nothing while it runs).
        if let Some(r) =
            self.stores.first().and_then(|s| s.accounting()).and_then(|a| a.read_latency)
        {
            x.insert("store_read_p50_ms".into(), r.p50_us as f64 / 1e3);
            x.insert("store_read_p99_ms".into(), r.p99_us as f64 / 1e3);
            x.insert("store_read_p999_ms".into(), r.p999_us as f64 / 1e3);
            x.insert("store_read_max_ms".into(), r.max_us as f64 / 1e3);
        }
        x.insert("replica_store_lag_p50_ms".into(), m.lag_p50.as_secs_f64() * 1e3);
        x.insert("replica_store_lag_p99_ms".into(), m.lag_p99.as_secs_f64() * 1e3);
        x.insert("replica_requests_per_hour".into(), m.requests_per_hour());
        x.insert("replica_reads_hedged".into(), m.reads_hedged as f64);
        x.insert("replica_reads_hedges_won".into(), m.reads_hedges_won as f64);
        if let Some(u) = m.usd_per_hour() {
            x.insert("replica_usd_per_hour".into(), u);
        }
        if let Some(r) = read_txn_per_s {
            x.insert("replica_read_txn_per_s".into(), r);
        }
        let note = format!(
            "replica: caught up with the load in {:.2?}; {} lag probes (writer gCSN to replica \
             visibility); it applied {} transactions, {} records, with {} GET-class and {} \
             PUT-class requests of its own (they also count in the store's accounting above); \
             {}; writer durable CSN {}",
            self.caught_up_in,
            self.probes.load(Ordering::Relaxed),
            m.entries_applied,
            m.records_applied,
            m.get_requests,
            m.put_requests,
            if self.pin {
                "the writer runs on core 0 and the replica (and its readers) on core 1"
            } else {
                "it shares this machine's 2 cores with the writer"
            },
            db.durable_csn()
        );
        (x, note)
    }
}
