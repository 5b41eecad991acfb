//! Crash simulation: a bank workload on a store that fails the way object
//! stores fail (throttling, ambiguous writes that landed) and then
//! "crashes" at a seeded write: that write is dropped, lands but is
//! reported failed, or (an append) lands torn; every request after it is
//! refused, as if the process had died. The writes before the crash point
//! include log parts, fence parts, checkpoint chunks, manifest versions and
//! deletes, so crashes land between parts, mid-append, mid-checkpoint and
//! mid-manifest-update.
//!
//! Then the store image is recovered (`Database::open`, as the next writer)
//! and checked against the oracle:
//! - every transfer whose commit was acknowledged is in `history`;
//! - the accounts hold the bank's total (a consistent cut);
//! - recovery with 1 and with 4 threads gives the same state;
//! - recovering the recovered database again changes nothing;
//! - with a retention window (half the recovering writers), the past at
//!   the crashed epoch's last CSN (`Database::open_at`) is the state
//!   recovery rebuilt: the decision kept in the history is recovery's.
//!
//! Appends take a seeded random time (now and then a long one), and the
//! log runs 1 to 8 lanes per stream (paced or not), with one or two
//! groups in one stream or two: so parts are
//! in flight on several lanes at the crash, and a part can be lost at the
//! end of one lane while later parts of its group landed in another (a
//! hole in the group's CSNs, which the replay rule must respect). The
//! summary counts the seeds whose recovery met such a hole.
//!
//! Half the seeds commit autonomously (Autonomous Commit, `CommitProtocol::
//! Autonomous`): the workers write the log and acknowledge themselves.
//! Half the seeds' stores take appends asynchronously
//! (`ObjectStore::start_append`): a worker sends its append and finishes
//! it after a later transaction, so appends are in flight, unfinished, at
//! the crash too.
//!
//! A seed fixes the workload's choices, the fault and crash schedule, the
//! segment size, the lanes, the commit protocol and the thread counts; a failure prints it. Thread timing
//! is not controlled, so a seed replays the same schedule of store faults
//! against whatever interleaving the OS gives.
//!
//! `MILLISCALE_SIM_SEEDS` (default 200) and `MILLISCALE_SIM_FIRST_SEED`
//! (default 0) choose the seeds.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use milliscale::options::LOG_STREAMS_PER_GROUP;
use milliscale::{CommitProtocol, Database, DeliberateBug, Direction, Error, FlushPolicy, Options};
use objstore::{MemoryStore, ObjectStore};
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use milliscale_faults::crash_store::{CrashMode, CrashStore, Schedule};

const ACCOUNTS: u64 = 8;
const INITIAL: u64 = 1000;

fn key(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

fn u64le(v: &[u8]) -> u64 {
    u64::from_le_bytes(v[..8].try_into().expect("8 bytes"))
}

/// Rows of a table, in key order.
type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// Every table's rows (for comparing recoveries).
fn dump(db: &Database) -> BTreeMap<String, Rows> {
    let mut out = BTreeMap::new();
    let mut tx = db.begin().expect("begin");
    for name in db.table_names() {
        let t = db.open_table(&name).expect("table");
        let rows = tx
            .scan(&t, Bound::Unbounded, Bound::Unbounded, Direction::Forward, usize::MAX)
            .expect("scan");
        out.insert(name, rows);
    }
    out
}

/// The workload until the crash (or its end), with one log group of two
/// workers or two groups of one (sharing one stream's lanes, or each with
/// its own), committing pipelined or autonomously. Returns acknowledged
/// ids, and whether the commits were autonomous.
fn workload(
    seed: u64,
    store: Arc<CrashStore>,
    rng: &mut SmallRng,
    groups: usize,
    bug: Option<DeliberateBug>,
) -> (BTreeSet<u64>, bool) {
    let lanes = [1, 2, 2, 3, 8][rng.random_range(0..5)];
    let opts = Options::new()
        .add_store_handle(store.clone())
        .workers(2)
        .log_group_size(2 / groups)
        .log_lanes(lanes)
        .log_streams(if rng.random_bool(0.5) { 1 } else { LOG_STREAMS_PER_GROUP })
        .flush_timeout(Duration::from_millis(1))
        .flush_min_interval(Duration::from_micros(rng.random_range(0..=1000)))
        .flush_pace(rng.random_bool(0.5).then(|| rng.random_range(0.5..8.0)))
        // The flush policy: the target (the default), weighing a drawn
        // append price against a drawn millisecond price within a drawn
        // bound; the fixed pace; or the paper's timeout.
        .flush_policy(
            [FlushPolicy::Target, FlushPolicy::Target, FlushPolicy::Adaptive, FlushPolicy::Timeout]
                [rng.random_range(0..4)],
        )
        .append_price(rng.random_bool(0.8).then(|| 1.13e-6 * rng.random_range(0.1..10.0)))
        .millisecond_price(10f64.powf(rng.random_range(-4.0..1.0)))
        .flush_max_wait(Duration::from_micros(rng.random_range(1000..=5000)))
        .segment_parts_max(rng.random_range(2..8))
        .log_buffer_bytes(4096)
        .checkpoint_log_bytes(0)
        .checkpoint_chunk_bytes(4096)
        .store_deadline(Duration::from_millis(300))
        // Half the seeds send appends through the hedging path (a helper
        // thread per append, a second copy when one is slow).
        .hedge_appends(rng.random_bool(0.5))
        .recovery_threads(rng.random_range(1..4));
    // Half the seeds commit autonomously (Autonomous Commit): workers flush and
    // acknowledge themselves, a neighbour's buffer goes out with theirs,
    // and the lanes' threads are the backstop. The layout stays the one
    // drawn above.
    let autonomous = rng.random_bool(0.5);
    let opts = if autonomous {
        opts.commit_protocol(CommitProtocol::Autonomous)
            .steal_group(rng.random_range(1..=2))
            .flush_unit(rng.random_range(64..=4096))
            .max_idle(Duration::from_micros(rng.random_range(0..=200)))
            .log_group_size(2 / groups)
            .log_lanes(lanes)
    } else {
        opts
    };
    let opts = match bug {
        Some(bug) => opts.deliberate_bug(bug),
        None => opts,
    };
    // The process ends wherever the workload stops: at open or set-up
    // too (a store that keeps failing past the deadline makes open give
    // up, with nothing acknowledged).
    let end = || store.s.lock().crashed = true;
    let Ok(db) = Database::open(opts) else {
        end();
        return (BTreeSet::new(), autonomous);
    };
    let setup = || -> milliscale::Result<(milliscale::Table, milliscale::Table)> {
        let a = db.create_table("accounts")?;
        let h = db.create_table("history")?;
        let mut tx = db.begin()?;
        for i in 0..ACCOUNTS {
            tx.put(&a, &key(i), &INITIAL.to_le_bytes())?;
        }
        tx.commit_and_wait()?;
        Ok((a, h))
    };
    let Ok((accounts, history)) = setup() else {
        end();
        return (BTreeSet::new(), autonomous);
    };
    let acked = Mutex::new(BTreeSet::new());
    let transfers: u64 = rng.random_range(20..80);
    let checkpoints: u64 = rng.random_range(0..4);
    std::thread::scope(|s| {
        for w in 0..2u64 {
            let (db, accounts, history, acked) = (&db, &accounts, &history, &acked);
            let mut rng = SmallRng::seed_from_u64(seed * 31 + w);
            s.spawn(move || {
                let mut pending = Vec::new();
                for n in 0..transfers {
                    let id = n * 2 + w + 1;
                    let r = (|| -> milliscale::Result<milliscale::CommitAck> {
                        let mut tx = db.begin()?;
                        let from = rng.random_range(0..ACCOUNTS);
                        let to = (from + rng.random_range(1..ACCOUNTS)) % ACCOUNTS;
                        let bf = u64le(&tx.get(accounts, &key(from))?.ok_or(Error::NotFound)?);
                        let bt = u64le(&tx.get(accounts, &key(to))?.ok_or(Error::NotFound)?);
                        let x = rng.random_range(0..=bf.min(100));
                        tx.update_range(accounts, &key(from), 0, &(bf - x).to_le_bytes())?;
                        tx.update_range(accounts, &key(to), 0, &(bt + x).to_le_bytes())?;
                        tx.put(
                            history,
                            &key(id),
                            &[from.to_le_bytes(), to.to_le_bytes()].concat(),
                        )?;
                        tx.commit()
                    })();
                    match r {
                        Ok(ack) => pending.push((id, ack)),
                        Err(Error::Conflict(_)) => continue,
                        Err(_) => break,
                    }
                    // Wait now and then, so that acks and new commits overlap.
                    if rng.random_bool(0.15) {
                        for (id, ack) in pending.drain(..) {
                            if ack.wait().is_ok() {
                                acked.lock().insert(id);
                            }
                        }
                    }
                }
                for (id, ack) in pending {
                    if ack.wait().is_ok() {
                        acked.lock().insert(id);
                    }
                }
            });
        }
        let db = &db;
        s.spawn(move || {
            for _ in 0..checkpoints {
                std::thread::sleep(Duration::from_millis(3));
                if db.checkpoint().is_err() {
                    break;
                }
            }
        });
    });
    // The process dies here (if the schedule has not crashed it yet):
    // nothing more reaches the store.
    end();
    drop(db);
    (acked.into_inner(), autonomous)
}

/// How the recovering writer takes its checkpoints, which decides how its
/// recovery pins what it replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Checkpoints {
    /// None on its own: recovery writes a checkpoint.
    None,
    /// Left to replicas (`checkpoint_offload`): recovery seals the old log
    /// with its decision, and every later recovery replays the seal.
    Offload,
    /// In the background (`checkpoint_log_ratio`, as a shard): recovery
    /// seals the old log, and the checkpointer writes a checkpoint at once,
    /// while the checks below read and recover again.
    Background,
}

/// Recover `image` and check it (a hole: a CSN missing below one that is
/// there), by a writer that takes `checkpoints` as said.
/// Returns whether recovery met a hole and whether it sealed.
fn check(
    seed: u64,
    image: Arc<dyn ObjectStore>,
    acked: &BTreeSet<u64>,
    threads: usize,
    checkpoints: Checkpoints,
    window: bool,
) -> (bool, bool, bool) {
    let fail = |what: String| -> ! { panic!("seed {seed}: {what}") };
    let mut past_checked = false;
    let seal = checkpoints != Checkpoints::None;
    let writer = || {
        Options::new()
            .add_store_handle(Arc::clone(&image))
            .recovery_threads(threads)
            .checkpoint_log_bytes(0)
            .checkpoint_log_ratio(if checkpoints == Checkpoints::Background { 0.125 } else { 0.0 })
            .checkpoint_chunk_bytes(4096)
            .checkpoint_offload(checkpoints == Checkpoints::Offload)
            .retention(window.then_some(Duration::from_secs(3600)))
    };
    let db = Database::open(writer()).unwrap_or_else(|e| fail(format!("recovery failed: {e}")));
    let sealed = db.recovery_report().is_some_and(|r| r.sealed_old_log);
    if let Some(r) = db.recovery_report() {
        // Sealing writes no checkpoint; a writer that takes none on its
        // own seals nothing; a seal is in the manifest (until a background
        // checkpoint, which may already have run, drops it).
        let in_manifest = db.manifest().is_some_and(|m| !m.sealed.is_empty());
        let wrote =
            r.new_checkpoint_csn.is_some() && r.new_checkpoint_csn != r.checkpoint.map(|c| c.0);
        let listed = sealed == in_manifest || checkpoints == Checkpoints::Background;
        if (seal && wrote) || (!seal && sealed) || !listed {
            fail(format!("{checkpoints:?}, sealed {sealed}, in manifest {in_manifest}: {r:?}"));
        }
    }
    let state = dump(&db);
    let hole = db.recovery_report().is_some_and(|r| r.prefix < r.max_csn);
    if window {
        // The recovering writer kept the crashed epoch's log and its
        // decision in its history: the past at that epoch's last CSN is
        // exactly the state it recovered.
        let m = db.manifest().unwrap_or_else(|| fail("no manifest".into()));
        // A store the crash left without a database: created now, with
        // no manifest write after its first, so no history yet.
        let h = match (m.history, db.recovery_report()) {
            (Some(h), _) => h,
            (None, None) => Default::default(),
            (None, Some(_)) => fail("a window, but no history after a recovery".into()),
        };
        if let Some(ended) = h.ended.last() {
            let at = milliscale::At::Csn(ended.max_csn);
            let past = Database::open_at(Options::new().add_store_handle(Arc::clone(&image)), at)
                .unwrap_or_else(|e| fail(format!("the past at {at}: {e}")));
            if dump(&past) != state {
                fail(format!("the past at {at} is not the state recovery rebuilt"));
            }
            past_checked = true;
        }
    }
    match (state.get("accounts"), state.get("history")) {
        (Some(accounts), Some(history)) if !accounts.is_empty() => {
            if accounts.len() as u64 != ACCOUNTS {
                fail(format!("{} accounts", accounts.len()));
            }
            let total: u64 = accounts.iter().map(|(_, v)| u64le(v)).sum();
            if total != ACCOUNTS * INITIAL {
                fail(format!("the accounts hold {total}, not {}", ACCOUNTS * INITIAL));
            }
            let ids: BTreeSet<u64> = history
                .iter()
                .map(|(k, _)| u64::from_be_bytes(k[..8].try_into().expect("8")))
                .collect();
            let lost: Vec<_> = acked.difference(&ids).collect();
            if !lost.is_empty() {
                fail(format!("acknowledged but lost: {lost:?}; {:?}", db.recovery_report()));
            }
        }
        _ => {
            if !acked.is_empty() {
                fail(format!("{} transfers acknowledged, but no accounts", acked.len()));
            }
        }
    }
    let _ = db.close(); // the store may still inject faults; the check above is what counts
    drop(db);
    // Recovering again, read-only, with another thread count, gives the
    // same state: recovery decided once, and threads do not matter.
    let again = Database::open_read_only(
        Options::new().add_store_handle(Arc::clone(&image)).recovery_threads(5 - threads.min(4)),
    )
    .unwrap_or_else(|e| fail(format!("second recovery failed: {e}")));
    if dump(&again) != state {
        fail("a second recovery found a different state".into());
    }
    drop(again);
    if seal && state.contains_key("history") {
        // A writer on top of the seal: its commits and the sealed log's
        // decision both survive the next recovery.
        let db = Database::open(writer()).unwrap_or_else(|e| fail(format!("reopen: {e}")));
        let h = db.open_table("history").unwrap_or_else(|e| fail(format!("history: {e}")));
        let mut more = BTreeSet::new();
        for id in 900_000..900_005u64 {
            let mut tx = db.begin().unwrap_or_else(|e| fail(format!("begin: {e}")));
            tx.put(&h, &key(id), b"after the seal").unwrap_or_else(|e| fail(format!("put: {e}")));
            tx.commit_and_wait().unwrap_or_else(|e| fail(format!("commit: {e}")));
            more.insert(id);
        }
        drop(db);
        let last = Database::open_read_only(Options::new().add_store_handle(Arc::clone(&image)))
            .unwrap_or_else(|e| fail(format!("third recovery failed: {e}")));
        let after = dump(&last);
        if after.get("accounts") != state.get("accounts") {
            fail("the accounts changed across a sealed recovery".into());
        }
        let ids: BTreeSet<u64> = after["history"]
            .iter()
            .map(|(k, _)| u64::from_be_bytes(k[..8].try_into().expect("8")))
            .collect();
        let lost: Vec<_> = acked.union(&more).filter(|id| !ids.contains(id)).collect();
        if !lost.is_empty() {
            fail(format!("lost across a sealed recovery: {lost:?}"));
        }
    }
    (hole, sealed, past_checked)
}

/// What one seed did, for the summary.
#[derive(Default)]
struct Tally {
    acked: u64,
    seeds_with_acks: u64,
    writes_before_crash: u64,
    /// Seeds with one log group whose recovery found a CSN missing below
    /// one that landed: a part lost at the end of one lane while a later
    /// part of the group landed in another.
    lane_holes: u64,
    /// Seeds whose recovery sealed the old log instead of checkpointing,
    /// by a writer that offloads its checkpoints, and by one that takes
    /// them in the background.
    sealed: u64,
    sealed_background: u64,
    /// Seeds whose recovering writer kept a window, and whose past at the
    /// crashed epoch's end was read and matched.
    past_checked: u64,
    /// Acknowledged transfers committed autonomously.
    autonomous_acked: u64,
    /// Of those, on a store that took appends asynchronously (the workers
    /// sent them and finished them later).
    sent_acked: u64,
}

/// One seed: the workload (with `bug`, the engine's deliberate bug) until
/// the crash, then the recovery and its checks.
fn run_seed(seed: u64, tally: &mut Tally, bug: Option<DeliberateBug>) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let inner = Arc::new(MemoryStore::new());
    let mode = match rng.random_range(0..5) {
        0 => CrashMode::Dropped,
        1 => CrashMode::Landed,
        2 => CrashMode::Torn,
        _ => CrashMode::Overtaken,
    };
    let store = Arc::new(CrashStore {
        inner: Arc::clone(&inner),
        s: Mutex::new(Schedule {
            writes: 0,
            crash_at: rng.random_range(1..160),
            mode,
            crashed: false,
            rng: SmallRng::seed_from_u64(seed ^ 0x5eed),
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
    });
    // `Overtaken` aims at lanes of one group.
    let groups = if matches!(mode, CrashMode::Overtaken) { 1 } else { rng.random_range(1..=2) };
    let (acked, autonomous) = workload(seed, Arc::clone(&store), &mut rng, groups, bug);
    if autonomous {
        tally.autonomous_acked += acked.len() as u64;
        if store.s.lock().asynchronous {
            tally.sent_acked += acked.len() as u64;
        }
    }
    assert!(store.crashed());
    tally.acked += acked.len() as u64;
    tally.seeds_with_acks += u64::from(!acked.is_empty());
    tally.writes_before_crash += store.s.lock().writes;
    let image: Arc<dyn ObjectStore> = inner;
    let threads = rng.random_range(1..5);
    // Half the recoveries seal; of those, half (by a draw of their own, so
    // the other draws are unchanged) checkpoint in the background.
    let checkpoints = match rng.random_bool(0.5) {
        false => Checkpoints::None,
        true if SmallRng::seed_from_u64(seed ^ 0xc4ec).random_bool(0.5) => Checkpoints::Background,
        true => Checkpoints::Offload,
    };
    // Half the recovering writers keep a retention window (by a draw of
    // their own, so the other draws are unchanged).
    let window = SmallRng::seed_from_u64(seed ^ 0x71_3e).random_bool(0.5);
    let (hole, sealed, past) = check(seed, image, &acked, threads, checkpoints, window);
    tally.past_checked += u64::from(past);
    tally.lane_holes += u64::from(hole && groups == 1);
    tally.sealed += u64::from(sealed && checkpoints == Checkpoints::Offload);
    tally.sealed_background += u64::from(sealed && checkpoints == Checkpoints::Background);
}

#[test]
fn crashes_at_random_writes_lose_no_acknowledged_transfer() {
    let seeds = milliscale_faults::seeds_from_env(200);
    let (first, n) = (seeds.start, seeds.end - seeds.start);
    let started = std::time::Instant::now();
    let mut tally = Tally::default();
    for seed in seeds {
        run_seed(seed, &mut tally, None);
        if (seed - first + 1).is_multiple_of(500) {
            eprintln!("{} seeds in {:.0?}", seed - first + 1, started.elapsed());
        }
    }
    eprintln!(
        "{n} seeds from {first} passed in {:.1?}: {} acknowledged transfers checked, {} seeds \
         with acks, {:.1} writes per seed before the crash, {} seeds recovered across a hole \
         between lanes, {} recoveries sealed the old log (and {} more, then checkpointed at \
         once), {} of the transfers committed autonomously ({} with appends in flight while \
         the workers went on), {} seeds read the crashed epoch's past",
        started.elapsed(),
        tally.acked,
        tally.seeds_with_acks,
        tally.writes_before_crash as f64 / n as f64,
        tally.lane_holes,
        tally.sealed,
        tally.sealed_background,
        tally.autonomous_acked,
        tally.sent_acked,
        tally.past_checked
    );
    assert!(tally.seeds_with_acks * 2 > n, "most seeds must get as far as an acknowledgment");
    if n >= 100 {
        assert!(tally.lane_holes > 0, "no seed lost a part behind a later one of its group");
        assert!(tally.sealed > 0, "no offloading recovery sealed the old log");
        assert!(tally.sealed_background > 0, "no recovery sealed, then checkpointed");
        assert!(tally.autonomous_acked > 0, "no transfer was committed autonomously");
        assert!(tally.sent_acked > 0, "no autonomous seed sent its appends asynchronously");
        assert!(tally.past_checked > 0, "no seed read the crashed epoch's past");
    }
}

/// Truncation past what the newest checkpoint covers (the engine's
/// deliberate bug): the first seed of 0..20 whose recovery fails a check.
#[test]
fn truncating_past_the_checkpoint_is_caught() {
    let caught = (0..20).find_map(|seed| {
        let run =
            || run_seed(seed, &mut Tally::default(), Some(DeliberateBug::TruncatePastCheckpoint));
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).err().map(|e| (seed, e))
    });
    let (seed, e) = caught.expect("the bug is caught within 20 seeds");
    let why = e.downcast_ref::<String>().cloned().unwrap_or_default();
    eprintln!("caught at seed {seed}: {why}");
}
