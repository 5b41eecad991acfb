//! Failover against cold recovery: how long from a writer's
//! death to the first commit acknowledged by its successor, when the
//! successor is a hot standby (`Replica::promote`) and when it is a cold
//! `Database::open` of the same database.
//!
//! 1. A writer loads `records` rows and then updates them (whole values,
//!    `ops` rows per transaction, from `threads` threads) until its live
//!    log holds `log_bytes`; it takes no checkpoint, so all of it is live.
//!    A standby replica follows it from the start, on the same stores.
//! 2. The writer stops (its last flush lands) and is dropped: its death.
//!    The standby promotes and commits one transaction: the failover time.
//!    Its checkpointer is off, so the old log stays live (sealed).
//! 3. The promoted writer stops; a cold `Database::open` of the same
//!    stores recovers (fence, read the whole live log, replay, write a
//!    checkpoint) and commits one transaction: the cold time.
//!
//! Beside them it measures the store's own round trip (a HEAD of the
//! manifest, `probes` times), the floor any failover pays a few times.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use milliscale::{Database, Options, Replica};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::report::{Environment, Percentiles, Report};
use crate::variant::LogSettings;

#[derive(Debug, Clone)]
pub struct FailoverConfig {
    pub log: LogSettings,
    /// Live log to build before the writer dies.
    pub log_bytes: u64,
    pub records: u64,
    pub value_bytes: usize,
    /// Rows updated per transaction.
    pub ops: usize,
    pub threads: usize,
    pub seed: u64,
}

fn key(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

fn commit_one(db: &Database, seed: u64) -> Result<Duration, String> {
    let t0 = Instant::now();
    let t = db.open_table("usertable").map_err(|e| e.to_string())?;
    let mut tx = db.begin().map_err(|e| e.to_string())?;
    tx.put(&t, &key(seed), b"after the failover").map_err(|e| e.to_string())?;
    tx.commit_and_wait().map_err(|e| e.to_string())?;
    Ok(t0.elapsed())
}

/// Round trips of the store: `n` HEADs of the current manifest.
fn store_round_trips(options: &Options, n: usize) -> Result<Histogram<u64>, String> {
    let mut h = Histogram::new_with_bounds(1, 60_000_000, 3).expect("bounds");
    let store = options.stores()[0].open().map_err(|e| e.to_string())?;
    let key = store
        .list("manifest/")
        .map_err(|e| e.to_string())?
        .last()
        .map(|o| o.key.clone())
        .ok_or("no manifest")?;
    for _ in 0..n {
        let t0 = Instant::now();
        store.head(&key).map_err(|e| e.to_string())?;
        h.record(t0.elapsed().as_micros().max(1) as u64).expect("in range");
    }
    Ok(h)
}

#[allow(
    clippy::too_many_lines,
    reason = "one failover run read in order: the writer, the standby, the kill, promotion, cold recovery"
)]
pub fn run(cfg: &FailoverConfig) -> Result<Report, String> {
    if cfg.records == 0 || cfg.ops == 0 || cfg.threads == 0 || cfg.value_bytes == 0 {
        return Err("--records, --ops, --threads and --value-bytes must be above 0".into());
    }
    let mut log = cfg.log.clone();
    log.seed_sims(cfg.seed);
    log.checkpoint_log_bytes = 0;
    // One handle per store for the writer, the standby and the cold
    // recovery (a `sim://` URL opened twice is two stores).
    let options = log
        .options(cfg.threads)
        .checkpoint_log_bytes(0)
        .create_if_missing(true)
        .open_stores()
        .map_err(|e| e.to_string())?;
    // 1. The writer and its standby.
    let db = Database::open(options.clone()).map_err(|e| e.to_string())?;
    if db.recovery_report().is_some() {
        return Err("the store already holds a database: give an empty one".into());
    }
    let t = db.create_table("usertable").map_err(|e| e.to_string())?;
    let mut rng = SmallRng::seed_from_u64(cfg.seed);
    let value =
        |rng: &mut SmallRng| -> Vec<u8> { (0..cfg.value_bytes).map(|_| rng.random()).collect() };
    for chunk in (0..cfg.records).collect::<Vec<_>>().chunks(1000) {
        let mut tx = db.begin().map_err(|e| e.to_string())?;
        for &i in chunk {
            tx.put(&t, &key(i), &value(&mut rng)).map_err(|e| e.to_string())?;
        }
        tx.commit_and_wait().map_err(|e| e.to_string())?;
    }
    // A hot standby: it has followed the writer for a while, so it starts
    // the measured phase caught up.
    let standby = Replica::open(options.clone()).map_err(|e| e.to_string())?;
    standby
        .wait_for(db.durable_csn() - 1, Duration::from_secs(600))
        .map_err(|e| format!("the standby did not catch up with the load: {e}"))?;
    let started = Instant::now();
    let stop = AtomicBool::new(false);
    let committed = AtomicU64::new(0);
    let log_bytes =
        || db.log_metrics().map_or(0, |m| m.groups.iter().map(|g| g.bytes).sum::<u64>());
    std::thread::scope(|s| {
        for w in 0..cfg.threads as u64 {
            let (db, t, stop, committed) = (&db, &t, &stop, &committed);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(cfg.seed ^ ((w + 1) * 0x9E37_79B9));
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut tx) = db.begin() else { return };
                    for _ in 0..cfg.ops {
                        let k = rng.random_range(0..cfg.records);
                        let v: Vec<u8> = (0..cfg.value_bytes).map(|_| rng.random()).collect();
                        if tx.put(t, &key(k), &v).is_err() {
                            break;
                        }
                    }
                    if tx.commit().is_ok() {
                        committed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        let mut last = Instant::now();
        while log_bytes() < cfg.log_bytes {
            std::thread::sleep(Duration::from_millis(50));
            if last.elapsed() >= Duration::from_secs(5) {
                let m = standby.metrics();
                eprintln!(
                    "{:.0} MB of {:.0} MB of live log; standby at CSN {} (read {})",
                    log_bytes() as f64 / 1e6,
                    cfg.log_bytes as f64 / 1e6,
                    m.applied_csn,
                    m.seen_csn
                );
                last = Instant::now();
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let build = started.elapsed();
    let live = log_bytes();
    let last_csn = db.durable_csn();
    // 2. The writer dies (after its last flush); the standby takes over.
    drop(db);
    let died = Instant::now();
    let behind = standby.metrics();
    let promoted = standby.promote().map_err(|e| format!("promotion: {e}"))?;
    let first = commit_one(&promoted, cfg.records + 1)?;
    let failover = died.elapsed();
    let promotion = promoted.promotion_report().cloned().unwrap_or_default();
    let rtt = store_round_trips(&options, 50)?;
    drop(promoted);
    // 3. Cold recovery of the same database.
    let cold_started = Instant::now();
    let cold_db = Database::open(options.clone()).map_err(|e| format!("cold recovery: {e}"))?;
    commit_one(&cold_db, cfg.records + 2)?;
    let cold = cold_started.elapsed();
    let rr = cold_db.recovery_report().cloned().unwrap_or_default();
    drop(cold_db);

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let rtt_p50 = Duration::from_micros(rtt.value_at_quantile(0.5));
    let mut extra = BTreeMap::new();
    extra.insert("live_log_mb".to_owned(), live as f64 / 1e6);
    extra.insert("failover_ms".to_owned(), ms(failover));
    extra.insert("cold_recovery_ms".to_owned(), ms(cold));
    extra.insert("cold_over_failover".to_owned(), cold.as_secs_f64() / failover.as_secs_f64());
    extra.insert("store_rtt_p50_ms".to_owned(), ms(rtt_p50));
    extra.insert("store_rtt_p99_ms".to_owned(), rtt.value_at_quantile(0.99) as f64 / 1e3);
    extra.insert(
        "standby_behind_csns".to_owned(),
        last_csn.saturating_sub(behind.applied_csn) as f64,
    );
    let p = promotion.timings;
    let notes = vec![
        format!(
            "built {:.0} MB of live log in {:.1} s ({} transactions, last durable CSN {last_csn}); \
             the standby had applied CSN {} at the writer's death",
            live as f64 / 1e6,
            build.as_secs_f64(),
            committed.load(Ordering::Relaxed),
            behind.applied_csn
        ),
        format!(
            "failover {:.1} ms to the first acknowledged commit ({:.1} ms of it the commit): \
             promotion {:.1} ms = catch-up {:.1} + claim {:.1} + fence {:.1} + drain {:.1} + \
             apply {:.1} ({} transactions) + publish {:.1}",
            ms(failover),
            ms(first),
            ms(p.total),
            ms(p.catch_up),
            ms(p.claim),
            ms(p.fence),
            ms(p.drain),
            ms(p.apply),
            promotion.applied,
            ms(p.publish)
        ),
        format!(
            "cold recovery {:.1} ms to the first acknowledged commit: fence {:.1}, scan {:.1} \
             ({:.0} MB in {} objects), load checkpoint {:.1}, replay {:.1} ({} transactions), \
             checkpoint and publish {:.1}",
            ms(cold),
            ms(rr.timings.fence),
            ms(rr.timings.scan),
            rr.log_bytes as f64 / 1e6,
            rr.log_objects,
            ms(rr.timings.load_checkpoint),
            ms(rr.timings.replay),
            rr.replayed,
            ms(rr.timings.checkpoint_and_publish)
        ),
        format!(
            "store round trip (HEAD): p50 {:.2} ms, p99 {:.2} ms; goal: failover under 1 s + one \
             round trip ({:.1} ms) and cold/failover >= 10 (measured {:.1})",
            ms(rtt_p50),
            rtt.value_at_quantile(0.99) as f64 / 1e3,
            1000.0 + ms(rtt_p50),
            cold.as_secs_f64() / failover.as_secs_f64()
        ),
    ];
    let mut config = BTreeMap::new();
    config.insert("store".into(), log.stores.join(" + "));
    config.insert("records".into(), cfg.records.to_string());
    config.insert("value_bytes".into(), cfg.value_bytes.to_string());
    config.insert("ops".into(), cfg.ops.to_string());
    config.insert("log_bytes".into(), cfg.log_bytes.to_string());
    config.insert("seed".into(), cfg.seed.to_string());
    let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("bounds");
    h.record(failover.as_micros().max(1) as u64).expect("in range");
    let lat = Percentiles::from_micros(&h);
    Ok(Report {
        benchmark: "failover".into(),
        engine: "milliscale".into(),
        config,
        env: Environment::detect(),
        threads: cfg.threads,
        duration_s: build.as_secs_f64(),
        committed: committed.load(Ordering::Relaxed),
        aborted: 0,
        operations: committed.load(Ordering::Relaxed) * cfg.ops as u64,
        txn_per_s: committed.load(Ordering::Relaxed) as f64 / build.as_secs_f64(),
        ops_per_s: (committed.load(Ordering::Relaxed) * cfg.ops as u64) as f64
            / build.as_secs_f64(),
        abort_rate: 0.0,
        txn_latency: lat.clone(),
        commit_latency: lat,
        by_kind: Default::default(),
        latency_by_kind: Default::default(),
        extra,
        memory: None,
        log: None,
        notes,
        timeline: Vec::new(),
    })
}
