//! Replica simulation: a read replica follows a bank whose writers crash
//! and are replaced, while its own reads of the store fail now and then.
//!
//! Each seed:
//! 1. A clean writer creates the bank (accounts, and a history row per
//!    transfer naming from, to and amount) and closes; a replica opens.
//! 2. Two or three writers follow, each running transfers (with
//!    checkpoints that truncate the log) on a `CrashStore` until its seeded
//!    crash point: a write dropped, landed but unacknowledged, or torn, or
//!    an append overtaken on another lane. Each takes over from the last
//!    one either by recovery or, half the time, as a standby replica that
//!    followed it and is promoted (`Replica::promote`: the old log is
//!    sealed, not checkpointed), on its own crashing store.
//! 3. A final writer recovers cleanly (replaying sealed logs as their seals
//!    say) and runs a few more transfers.
//!
//! Meanwhile a reader takes snapshots of the replica over and over, and a
//! session thread reads at the token (CSN) of every acknowledged transfer.
//! The oracle:
//! - a read at an acknowledged transfer's token sees its history row;
//! - every snapshot is a consistent cut: the balances equal the initial
//!   ones plus exactly the transfers in its history;
//! - snapshots never go back: each one's history contains the one before;
//! - the replica never exposes a non-durable write: every history row any
//!   snapshot showed is in the final recovered database (history rows are
//!   never deleted, so a row missing there was taken back by a crash);
//! - at the end the replica's state equals the final writer's.
//!
//! `MILLISCALE_SIM_SEEDS` (default 200) and `MILLISCALE_SIM_FIRST_SEED`
//! (default 0) choose the seeds.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Bound, Range};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use milliscale::options::LOG_STREAMS_PER_GROUP;
use milliscale::{Database, Direction, Error, Options, Replica, ReplicaOptions, Table};
use milliscale_faults::crash_store::{CrashMode, CrashStore, Schedule};
use objstore::{Bytes, Hedge, MemoryStore, ObjectMeta, ObjectStore, Result, StoreError};
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const ACCOUNTS: u64 = 6;
const INITIAL: u64 = 1000;
/// How long a session waits for its token.
const TOKEN_WAIT: Duration = Duration::from_secs(5);

/// The replica's view of the store: reads fail now and then.
#[derive(Debug)]
struct FlakyReads {
    inner: Arc<MemoryStore>,
    rate: f64,
    rng: Mutex<SmallRng>,
}

impl FlakyReads {
    /// A hedged read, half the time: a second request after the first,
    /// whose answer wins if it succeeded and a coin says so, or if the
    /// first failed.
    fn race<T>(&self, read: impl Fn() -> Result<T>) -> (Result<T>, Hedge) {
        let first = read();
        if self.rng.lock().random_bool(0.5) {
            return (first, Hedge::NotSent);
        }
        let second = read();
        let second_first = self.rng.lock().random_bool(0.5);
        match (first, second) {
            (_, Ok(b)) if second_first => (Ok(b), Hedge::Won),
            (Ok(a), _) => (Ok(a), Hedge::Lost),
            (Err(_), b) => (b, Hedge::Won),
        }
    }

    fn read(&self) -> Result<()> {
        if self.rng.lock().random::<f64>() < self.rate {
            Err(StoreError::Throttled("slow down".into()))
        } else {
            Ok(())
        }
    }
}

impl ObjectStore for FlakyReads {
    fn put(&self, _: &str, _: Bytes) -> Result<ObjectMeta> {
        Err(StoreError::Fatal("a replica does not write".into()))
    }
    fn put_if_absent(&self, _: &str, _: Bytes) -> Result<ObjectMeta> {
        Err(StoreError::Fatal("a replica does not write".into()))
    }
    fn put_if_match(&self, _: &str, _: Bytes, _: &str) -> Result<ObjectMeta> {
        Err(StoreError::Fatal("a replica does not write".into()))
    }
    fn append(&self, _: &str, _: u64, _: Bytes) -> Result<ObjectMeta> {
        Err(StoreError::Fatal("a replica does not write".into()))
    }
    fn get(&self, key: &str) -> Result<Bytes> {
        self.read()?;
        self.inner.get(key)
    }
    fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        self.read()?;
        self.inner.get_range(key, range)
    }
    fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.read()?;
        self.inner.head(key)
    }
    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        self.read()?;
        self.inner.list(prefix)
    }
    fn delete(&self, _: &str) -> Result<()> {
        Err(StoreError::Fatal("a replica does not write".into()))
    }
    /// Two racing reads: the second is sent later, so it may see more of
    /// the log than the first; either may answer first, or fail.
    fn get_range_hedged(
        &self,
        key: &str,
        range: Range<u64>,
        _: Duration,
    ) -> Option<(Result<Bytes>, Hedge)> {
        Some(self.race(|| self.get_range(key, range.clone())))
    }
    fn head_hedged(&self, key: &str, _: Duration) -> Option<(Result<ObjectMeta>, Hedge)> {
        Some(self.race(|| self.head(key)))
    }
}

/// A replica's (or standby's) options, drawn: polling, apply threads and
/// the parallel threshold, read hedging.
fn replica_options(rng: &mut SmallRng) -> ReplicaOptions {
    ReplicaOptions {
        poll_min: Duration::from_micros(rng.random_range(0..2000)),
        poll_max: Duration::from_millis(20),
        manifest_every: Duration::from_millis(rng.random_range(5..50)),
        millisecond_price: 10f64.powf(rng.random_range(-4.0..1.0)),
        apply_threads: rng.random_range(1..=3),
        apply_parallel_min: rng.random_range(0..64),
        hedge_reads: rng.random_bool(0.5),
    }
}

fn key(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

fn u64le(v: &[u8]) -> u64 {
    u64::from_le_bytes(v[..8].try_into().expect("8 bytes"))
}

/// A transfer as its history row records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Transfer {
    from: u64,
    to: u64,
    amount: u64,
}

impl Transfer {
    fn encode(&self) -> Vec<u8> {
        [self.from.to_le_bytes(), self.to.to_le_bytes(), self.amount.to_le_bytes()].concat()
    }
    fn decode(v: &[u8]) -> Transfer {
        Transfer { from: u64le(&v[0..8]), to: u64le(&v[8..16]), amount: u64le(&v[16..24]) }
    }
}

/// One snapshot of the bank.
#[derive(Debug, Clone, Default, PartialEq)]
struct Bank {
    snapshot: u64,
    balances: Vec<u64>,
    history: BTreeMap<u64, Transfer>,
}

fn read_bank(tx: &mut milliscale::Transaction<'_>, a: &Table, h: &Table) -> Bank {
    let all = |tx: &mut milliscale::Transaction<'_>, t: &Table| {
        tx.scan(t, Bound::Unbounded, Bound::Unbounded, Direction::Forward, usize::MAX)
            .expect("scan")
    };
    Bank {
        snapshot: tx.snapshot(),
        balances: all(tx, a).iter().map(|(_, v)| u64le(v)).collect(),
        history: all(tx, h)
            .iter()
            .map(|(k, v)| (u64::from_be_bytes(k[..8].try_into().expect("8")), Transfer::decode(v)))
            .collect(),
    }
}

/// The consistent-cut check: balances are the initial ones plus exactly
/// the transfers in the history.
fn consistent(b: &Bank) -> std::result::Result<(), String> {
    if b.balances.is_empty() {
        return if b.history.is_empty() { Ok(()) } else { Err("history without accounts".into()) };
    }
    let mut want = vec![INITIAL as i64; ACCOUNTS as usize];
    for t in b.history.values() {
        want[t.from as usize] -= t.amount as i64;
        want[t.to as usize] += t.amount as i64;
    }
    let got: Vec<i64> = b.balances.iter().map(|&x| x as i64).collect();
    if got == want {
        Ok(())
    } else {
        Err(format!("balances {got:?} but the history gives {want:?}"))
    }
}

fn options(store: Arc<dyn ObjectStore>, rng: &mut SmallRng) -> Options {
    let groups = rng.random_range(1..=2usize);
    Options::new()
        .add_store_handle(store)
        .workers(2)
        .log_group_size(2 / groups)
        .log_lanes([1, 2, 3, 8][rng.random_range(0..4)])
        .log_streams(if rng.random_bool(0.5) { 1 } else { LOG_STREAMS_PER_GROUP })
        .flush_timeout(Duration::from_millis(1))
        .flush_pace(rng.random_bool(0.5).then(|| rng.random_range(0.5..8.0)))
        // The target policy (the default) with a drawn price and bound.
        .append_price(rng.random_bool(0.8).then(|| 1.13e-6 * rng.random_range(0.1..10.0)))
        .millisecond_price(10f64.powf(rng.random_range(-4.0..1.0)))
        .flush_max_wait(Duration::from_micros(rng.random_range(1000..=5000)))
        .segment_parts_max(rng.random_range(2..8))
        .log_buffer_bytes(4096)
        .checkpoint_log_bytes(0)
        .checkpoint_chunk_bytes(4096)
        .store_deadline(Duration::from_millis(300))
        .recovery_threads(rng.random_range(1..4))
}

/// Run transfers on `db` until its store crashes (or `transfers` each);
/// acknowledged transfers go to `acked` as (id, CSN). Ids start at `base`.
fn transfers(
    db: &Database,
    seed: u64,
    base: u64,
    transfers: u64,
    checkpoints: u64,
    acked: &crossbeam_channel::Sender<(u64, u64)>,
) {
    let (Ok(accounts), Ok(history)) = (db.open_table("accounts"), db.open_table("history")) else {
        return;
    };
    std::thread::scope(|s| {
        for w in 0..2u64 {
            let (accounts, history) = (&accounts, &history);
            let mut rng = SmallRng::seed_from_u64(seed * 31 + w + base);
            s.spawn(move || {
                let mut pending = Vec::new();
                for n in 0..transfers {
                    let id = base + n * 2 + w;
                    let r = (|| -> milliscale::Result<milliscale::CommitAck> {
                        let mut tx = db.begin()?;
                        let from = rng.random_range(0..ACCOUNTS);
                        let to = (from + rng.random_range(1..ACCOUNTS)) % ACCOUNTS;
                        let bf = u64le(&tx.get(accounts, &key(from))?.ok_or(Error::NotFound)?);
                        let bt = u64le(&tx.get(accounts, &key(to))?.ok_or(Error::NotFound)?);
                        let amount = rng.random_range(0..=bf.min(100));
                        tx.update_range(accounts, &key(from), 0, &(bf - amount).to_le_bytes())?;
                        tx.update_range(accounts, &key(to), 0, &(bt + amount).to_le_bytes())?;
                        tx.put(history, &key(id), &Transfer { from, to, amount }.encode())?;
                        tx.commit()
                    })();
                    match r {
                        Ok(ack) => pending.push((id, ack)),
                        Err(Error::Conflict(_)) => continue,
                        Err(_) => break,
                    }
                    if rng.random_bool(0.2) {
                        for (id, ack) in pending.drain(..) {
                            if let Ok(info) = ack.wait() {
                                let _ = acked.send((id, info.csn.expect("a write")));
                            }
                        }
                    }
                }
                for (id, ack) in pending {
                    if let Ok(info) = ack.wait() {
                        let _ = acked.send((id, info.csn.expect("a write")));
                    }
                }
            });
        }
        s.spawn(move || {
            for _ in 0..checkpoints {
                std::thread::sleep(Duration::from_millis(3));
                if db.checkpoint().is_err() {
                    break;
                }
            }
        });
    });
}

/// A writer's store: the shared image behind a seeded crash schedule.
fn crash_store(inner: &Arc<MemoryStore>, seed: u64, e: u64, rng: &mut SmallRng) -> Arc<CrashStore> {
    let mode = match rng.random_range(0..5) {
        0 => CrashMode::Dropped,
        1 => CrashMode::Landed,
        2 => CrashMode::Torn,
        _ => CrashMode::Overtaken,
    };
    Arc::new(CrashStore {
        inner: Arc::clone(inner),
        s: Mutex::new(Schedule {
            writes: 0,
            crash_at: rng.random_range(10..160),
            mode,
            crashed: false,
            rng: SmallRng::seed_from_u64(seed ^ (0x5eed + e)),
            throttle: if rng.random_bool(0.5) { 0.03 } else { 0.0 },
            ambiguous: if rng.random_bool(0.5) { 0.03 } else { 0.0 },
            append_us: rng.random_range(0..1500),
            slow_appends: rng.random_bool(0.5),
            holding: None,
            held_once: false,
            // Half the seeds (by a draw of their own, so the others are
            // unchanged) send appends asynchronously.
            asynchronous: SmallRng::seed_from_u64(seed ^ 0xa5a5_a5a5).random_bool(0.5),
        }),
    })
}

#[derive(Default)]
struct Tally {
    acked: u64,
    snapshots: u64,
    tokens: u64,
    catch_ups: u64,
    epochs: u64,
    promotions: u64,
}

#[allow(
    clippy::too_many_lines,
    reason = "one seeded scenario read in order: writers, crashes, replacements, then every check"
)]
fn run_seed(seed: u64, tally: &mut Tally) {
    let fail = |what: String| -> ! { panic!("seed {seed}: {what}") };
    let mut rng = SmallRng::seed_from_u64(seed);
    let inner = Arc::new(MemoryStore::new());
    let image: Arc<dyn ObjectStore> = inner.clone();
    // 1. The bank, by a clean writer.
    {
        let db = Database::open(options(Arc::clone(&image), &mut rng)).expect("create");
        let a = db.create_table("accounts").expect("table");
        db.create_table("history").expect("table");
        let mut tx = db.begin().expect("begin");
        for i in 0..ACCOUNTS {
            tx.put(&a, &key(i), &INITIAL.to_le_bytes()).expect("put");
        }
        tx.commit_and_wait().expect("commit");
        db.close().expect("close");
    }
    let flaky = Arc::new(FlakyReads {
        inner: Arc::clone(&inner),
        rate: if rng.random_bool(0.5) { 0.05 } else { 0.0 },
        rng: Mutex::new(SmallRng::seed_from_u64(seed ^ 0xf1a4)),
    });
    let poll = replica_options(&mut rng);
    let replica =
        Replica::open_with(Options::new().add_store_handle(flaky).recovery_threads(2), poll)
            .unwrap_or_else(|e| fail(format!("replica open: {e}")));
    let running = AtomicBool::new(true);
    let (ack_tx, ack_rx) = crossbeam_channel::unbounded::<(u64, u64)>();
    let snapshots: Mutex<Vec<Bank>> = Mutex::new(Vec::new());
    let problems: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let (final_db, acked_count, tokens, promotions) = std::thread::scope(|s| {
        // The reader: snapshots, checked as they come.
        s.spawn(|| {
            let (a, h) = loop {
                if let (Ok(a), Ok(h)) =
                    (replica.open_table("accounts"), replica.open_table("history"))
                {
                    break (a, h);
                }
                std::thread::sleep(Duration::from_millis(1));
            };
            let mut last: Option<Bank> = None;
            while running.load(Ordering::Acquire) {
                let mut tx = replica.begin().expect("begin");
                let b = read_bank(&mut tx, &a, &h);
                drop(tx);
                if let Err(e) = consistent(&b) {
                    problems.lock().push(format!("snapshot {}: {e}", b.snapshot));
                }
                if let Some(l) = &last {
                    if b.snapshot < l.snapshot {
                        problems
                            .lock()
                            .push(format!("snapshot {} after {}", b.snapshot, l.snapshot));
                    }
                    if let Some(id) = l.history.keys().find(|id| !b.history.contains_key(id)) {
                        problems.lock().push(format!(
                            "transfer {id} seen at snapshot {} is gone at snapshot {}",
                            l.snapshot, b.snapshot
                        ));
                    }
                }
                if last.as_ref().is_none_or(|l| l.snapshot != b.snapshot) {
                    snapshots.lock().push(b.clone());
                }
                last = Some(b);
                std::thread::sleep(Duration::from_micros(300));
            }
        });
        // The sessions: read at each acknowledged transfer's token.
        let sessions = s.spawn(|| {
            let mut n = 0u64;
            let h = loop {
                if let Ok(h) = replica.open_table("history") {
                    break h;
                }
                std::thread::sleep(Duration::from_millis(1));
            };
            for (id, csn) in ack_rx.iter() {
                n += 1;
                match replica.begin_at(csn, TOKEN_WAIT) {
                    Ok(mut tx) => {
                        if tx.get(&h, &key(id)).expect("get").is_none() {
                            problems.lock().push(format!(
                                "a read at token {csn} (snapshot {}) misses transfer {id}",
                                tx.snapshot()
                            ));
                        }
                    }
                    Err(e) => {
                        problems.lock().push(format!(
                            "token {csn} of transfer {id}: {e}; {:?}",
                            replica.metrics()
                        ));
                        break;
                    }
                }
            }
            n
        });
        // 2. Writers that crash.
        let mut acked_count = 0u64;
        let counter = crossbeam_channel::unbounded::<(u64, u64)>();
        let epochs = rng.random_range(2..=3u64);
        let mut promotions = 0u64;
        // The next writer's store and options, and its standby if it takes
        // over by promotion.
        let mut next: Option<(Arc<CrashStore>, Options, Replica)> = None;
        for e in 0..epochs {
            let (store, db) = match next.take() {
                Some((store, _, standby)) => match standby.promote() {
                    Ok(db) => {
                        promotions += 1;
                        (store, Ok(db))
                    }
                    // Its own store crashed during the promotion, or the
                    // faults outlasted the deadline: the next writer
                    // recovers as usual.
                    Err(err) => (store, Err(err)),
                },
                None => {
                    let store = crash_store(&inner, seed, e, &mut rng);
                    let opts = options(store.clone(), &mut rng);
                    let db = Database::open(opts);
                    (store, db)
                }
            };
            if e + 1 < epochs && rng.random_bool(0.5) {
                let store = crash_store(&inner, seed, e + 1, &mut rng);
                let opts = options(store.clone(), &mut rng);
                let poll = replica_options(&mut rng);
                if let Ok(standby) = Replica::open_with(opts.clone(), poll) {
                    next = Some((store, opts, standby));
                }
            }
            let n = rng.random_range(20..80);
            let cps = rng.random_range(0..3);
            if let Ok(db) = db {
                transfers(&db, seed, (e + 1) * 1_000_000, n, cps, &counter.0);
                store.s.lock().crashed = true;
                drop(db);
            }
            store.s.lock().crashed = true;
            for a in counter.1.try_iter() {
                acked_count += 1;
                ack_tx.send(a).expect("sessions run");
            }
        }
        drop(next);
        // 3. The final writer.
        let db = Database::open(options(Arc::clone(&image), &mut rng))
            .unwrap_or_else(|e| fail(format!("final recovery: {e}")));
        transfers(&db, seed, 9_000_000, 10, 0, &counter.0);
        for a in counter.1.try_iter() {
            acked_count += 1;
            ack_tx.send(a).expect("sessions run");
        }
        drop(ack_tx);
        let tokens = sessions.join().expect("sessions");
        // The replica catches up with the final writer.
        let end = db.durable_csn();
        if let Err(e) = replica.wait_for(end - 1, TOKEN_WAIT) {
            problems.lock().push(format!("the replica did not reach the final writer: {e}"));
        }
        running.store(false, Ordering::Release);
        (db, acked_count, tokens, promotions)
    });
    let problems = problems.into_inner();
    if !problems.is_empty() {
        fail(format!("{} problems, first: {}", problems.len(), problems[0]));
    }
    // The final state, and the replica's.
    let a = final_db.open_table("accounts").expect("accounts");
    let h = final_db.open_table("history").expect("history");
    let fin = read_bank(&mut final_db.begin().expect("begin"), &a, &h);
    if let Err(e) = consistent(&fin) {
        fail(format!("the final writer: {e}"));
    }
    let ra = replica.open_table("accounts").expect("accounts");
    let rh = replica.open_table("history").expect("history");
    let mine = read_bank(&mut replica.begin().expect("begin"), &ra, &rh);
    if (&mine.balances, &mine.history) != (&fin.balances, &fin.history) {
        fail(format!(
            "the replica ({} transfers at {}) differs from the final writer ({} transfers)",
            mine.history.len(),
            mine.snapshot,
            fin.history.len()
        ));
    }
    // Nothing a snapshot showed was taken back by a crash.
    let snapshots = snapshots.into_inner();
    let shown: BTreeSet<u64> = snapshots.iter().flat_map(|b| b.history.keys().copied()).collect();
    if let Some(id) = shown.iter().find(|id| !fin.history.contains_key(id)) {
        fail(format!(
            "the replica showed transfer {id}, which recovery did not keep (replica {:?})",
            replica.metrics()
        ));
    }
    if let Some(e) = replica.error() {
        fail(format!("the replica stopped: {e}"));
    }
    let m = replica.metrics();
    tally.acked += acked_count;
    tally.snapshots += snapshots.len() as u64;
    tally.tokens += tokens;
    tally.catch_ups += m.catch_ups;
    tally.epochs += m.epochs_followed;
    tally.promotions += promotions;
}

#[test]
fn a_replica_never_exposes_a_write_a_crash_takes_back() {
    let seeds = milliscale_faults::seeds_from_env(200);
    let (first, n) = (seeds.start, seeds.end - seeds.start);
    let started = std::time::Instant::now();
    let mut tally = Tally::default();
    for seed in seeds {
        run_seed(seed, &mut tally);
        if (seed - first + 1).is_multiple_of(100) {
            eprintln!("{} seeds, {:?}", seed - first + 1, started.elapsed());
        }
    }
    eprintln!(
        "{n} seeds in {:?}: {} acknowledged transfers read at their tokens ({} sessions), \
         {} distinct snapshots checked, {} new writers followed ({} promoted standbys), {} \
         catch-ups from a checkpoint",
        started.elapsed(),
        tally.acked,
        tally.tokens,
        tally.snapshots,
        tally.epochs,
        tally.promotions,
        tally.catch_ups
    );
    assert!(tally.tokens > 0 && tally.snapshots > n, "the simulation checked nothing");
}
