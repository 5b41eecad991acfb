//! The bank workload and its auditor, for crash testing.
//!
//! - `accounts`: key = account id (u64, big-endian), value = balance (u64,
//!   little-endian). `accounts` accounts start at `initial_balance` each, so
//!   the total is always `accounts * initial_balance`.
//! - `history`: key = transfer id (u64, big-endian), value = from, to,
//!   amount (three u64, little-endian).
//!
//! Each worker loops: pick two accounts, move a random amount (at most the
//! source's balance) and record the transfer in `history`, commit, **wait
//! for the acknowledgment**, then append the transfer id to the client
//! journal (`acked_log`) and flush it before issuing the next transfer. So
//! the journal holds exactly the transfers a client was told are durable,
//! which is what a crash test checks after recovery. At the end, one
//! read-only transaction audits the total.
//!
//! A store that already holds a bank database is recovered and continued:
//! the accounts must match `--accounts`, transfer ids go on from the
//! largest in `history`, and the journal is appended to.
//!
//! **Standby** (`standby`): instead of recovering, the run opens a read
//! replica of the bank and follows its writer until a trigger file
//! appears (a supervisor creates it when the writer dies); then it
//! promotes the replica (`Replica::promote`) and runs the transfers as the
//! new writer. It reports the failover time: from the trigger file's
//! modification time to the first transfer the new writer acknowledged.

use std::collections::BTreeMap;
use std::io::Write;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use milliscale::{Database, Direction, Error, Isolation, Table};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use milliscale_bench::report::{Environment, KindStats, Percentiles, Report};
use milliscale_bench::variant::LogSettings;

#[derive(Debug, Clone)]
pub struct BankConfig {
    pub accounts: u64,
    pub initial_balance: u64,
    pub threads: usize,
    pub duration: Duration,
    pub log: LogSettings,
    pub isolation: Isolation,
    /// Where acknowledged transfer ids go, one decimal id per line.
    pub acked_log: Option<std::path::PathBuf>,
    pub seed: u64,
    /// Run as a standby that promotes itself when this file exists.
    pub standby: Option<std::path::PathBuf>,
}

/// What a standby's takeover took.
struct Failover {
    /// When the trigger file was written (the writer's death, as the
    /// supervisor saw it).
    died: Instant,
    report: milliscale::PromotionReport,
    /// The replica's applied CSN when the trigger was seen, and the CSN it
    /// had read up to.
    applied: u64,
    seen: u64,
}

/// Follow the bank as a replica until `trigger` exists, then promote.
fn standby(
    options: milliscale::Options,
    trigger: &std::path::Path,
) -> Result<(Database, Failover), String> {
    let r = milliscale::Replica::open(options).map_err(|e| e.to_string())?;
    eprintln!(
        "standby: following from CSN {}; promoting when {} exists",
        r.applied_csn(),
        trigger.display()
    );
    let modified = loop {
        if let Ok(meta) = std::fs::metadata(trigger) {
            break meta.modified().ok();
        }
        if let Some(e) = r.error() {
            return Err(format!("the standby stopped: {e}"));
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let now = Instant::now();
    let since = modified
        .and_then(|m| std::time::SystemTime::now().duration_since(m).ok())
        .unwrap_or_default();
    let died = now.checked_sub(since).unwrap_or(now);
    let m = r.metrics();
    let db = r.promote().map_err(|e| format!("promotion: {e}"))?;
    let report = db.promotion_report().cloned().unwrap_or_default();
    eprintln!(
        "standby: promoted in {:.1?} (epoch {} -> {}; applied {} of {} read, {} more on \
         promotion)",
        report.timings.total,
        report.old_epoch,
        report.new_epoch,
        m.applied_csn,
        m.seen_csn,
        report.applied
    );
    Ok((db, Failover { died, report, applied: m.applied_csn, seen: m.seen_csn }))
}

/// The key of account `id` and of transfer `id`.
pub fn key(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

/// A balance or a history value's fields.
pub fn decode_u64s(v: &[u8]) -> Vec<u64> {
    v.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8-byte chunks"))).collect()
}

fn validate(cfg: &BankConfig) -> Result<(), String> {
    if cfg.accounts < 2 {
        return Err(format!("--accounts must be at least 2, got {}", cfg.accounts));
    }
    if cfg.threads == 0 || cfg.threads > 1024 {
        return Err(format!("--threads must be in 1..=1024, got {}", cfg.threads));
    }
    if cfg.accounts.checked_mul(cfg.initial_balance).is_none() {
        return Err("--accounts × --initial-balance overflows a u64".into());
    }
    Ok(())
}

/// Open the journal for appending. A line that a crash cut short (no
/// newline) was never completely journaled, so it is cut off: appending
/// after it would merge it with the next id.
fn open_journal(p: &std::path::Path) -> Result<std::fs::File, String> {
    let err = |e: std::io::Error| format!("{}: {e}", p.display());
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(p)
        .map_err(err)?;
    let mut text = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut text).map_err(err)?;
    let whole = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    if whole < text.len() {
        f.set_len(whole as u64).map_err(err)?;
        f.sync_data().map_err(err)?;
    }
    std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0)).map_err(err)?;
    Ok(f)
}

/// The transfer ids a journal holds: whole lines only (a crash may cut
/// the last one, which was then never acknowledged to the client).
pub fn journaled_ids(p: &std::path::Path) -> std::collections::BTreeSet<u64> {
    let text = std::fs::read_to_string(p).unwrap_or_default();
    text.split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .map(|l| l.trim().parse().expect("a journal line is an id"))
        .collect()
}

/// The oracle after a crash: in the database `db` (just recovered or
/// promoted), every transfer of `acked` is in `history`, and the accounts
/// hold exactly `accounts * initial` (a consistent cut: no transfer is half
/// there). With `tables_may_be_missing`, a database that never got as far
/// as creating its tables passes when nothing was acknowledged. `name`
/// labels the failure.
pub fn check_recovered(
    name: &str,
    db: &Database,
    acked: &std::collections::BTreeSet<u64>,
    accounts: u64,
    initial: u64,
    tables_may_be_missing: bool,
) {
    let (accounts_t, history) = match (db.open_table("accounts"), db.open_table("history")) {
        (Ok(a), Ok(h)) => (a, h),
        (Err(Error::TableNotFound(_)), _) | (_, Err(Error::TableNotFound(_)))
            if tables_may_be_missing =>
        {
            assert!(acked.is_empty(), "{name}: transfers acknowledged but the tables are gone");
            return;
        }
        (Err(e), _) | (_, Err(e)) => panic!("{name}: {e}"),
    };
    let mut tx = db.begin().expect("begin");
    for id in acked {
        assert!(
            tx.get(&history, &id.to_be_bytes()).expect("get").is_some(),
            "{name}: transfer {id} was acknowledged but is not recovered ({:?})",
            db.recovery_report()
        );
    }
    let rows = tx
        .scan(&accounts_t, Bound::Unbounded, Bound::Unbounded, Direction::Forward, usize::MAX)
        .expect("scan");
    if !acked.is_empty() || !tables_may_be_missing {
        assert_eq!(rows.len() as u64, accounts, "{name}: every account is there");
    }
    if !rows.is_empty() {
        assert_eq!(rows.len() as u64, accounts, "{name}: all accounts or none (one transaction)");
        let total: u64 =
            rows.iter().map(|(_, v)| u64::from_le_bytes(v[..8].try_into().expect("8"))).sum();
        assert_eq!(total, accounts * initial, "{name}: the total");
    }
}

/// One worker's transfers, conflicts and latency histogram (µs).
type WorkerResult = (u64, u64, Histogram<u64>);

/// Run the workload; the report's notes carry the audit.
#[allow(
    clippy::too_many_lines,
    reason = "the bank run read in order: open, recover or promote, the workers, the audit, the report"
)]
pub fn run(cfg: &BankConfig) -> Result<Report, String> {
    validate(cfg)?;
    let mut log = cfg.log.clone();
    log.seed_sims(cfg.seed);
    let options = log.options(cfg.threads).isolation(cfg.isolation);
    let (db, failover) = match &cfg.standby {
        None => (Database::open(options).map_err(|e| e.to_string())?, None),
        Some(trigger) => {
            let (db, f) = standby(options, trigger)?;
            (db, Some(f))
        }
    };
    // A database that already exists (a store that held one) is continued:
    // its accounts must be the ones asked for, and transfer ids go on from
    // the largest in its history.
    let open_or_create = |name: &str| match db.open_table(name) {
        Ok(t) => Ok(t),
        Err(Error::TableNotFound(_)) => db.create_table(name),
        Err(e) => Err(e),
    };
    let accounts = open_or_create("accounts").map_err(|e| e.to_string())?;
    let history = open_or_create("history").map_err(|e| e.to_string())?;
    let (existing, last_id) = {
        let mut tx = db.begin().map_err(|e| e.to_string())?;
        let n = tx
            .scan(&accounts, Bound::Unbounded, Bound::Unbounded, Direction::Forward, usize::MAX)
            .map_err(|e| e.to_string())?
            .len() as u64;
        let last = tx
            .scan(&history, Bound::Unbounded, Bound::Unbounded, Direction::Backward, 1)
            .map_err(|e| e.to_string())?
            .first()
            .map_or(0, |(k, _)| u64::from_be_bytes(k[..8].try_into().expect("8-byte keys")));
        (n, last)
    };
    if existing != 0 && existing != cfg.accounts {
        return Err(format!(
            "the database holds {existing} accounts, not {} (--accounts)",
            cfg.accounts
        ));
    }
    let to_load = if existing == 0 { cfg.accounts } else { 0 };
    for chunk in (0..to_load).collect::<Vec<_>>().chunks(10_000) {
        let mut tx = db.begin().map_err(|e| e.to_string())?;
        for &a in chunk {
            tx.put(&accounts, &key(a), &cfg.initial_balance.to_le_bytes())
                .map_err(|e| e.to_string())?;
        }
        tx.commit_and_wait().map_err(|e| format!("loading the accounts: {e}"))?;
    }
    let journal = match &cfg.acked_log {
        Some(p) => Some(parking_lot::Mutex::new(open_journal(p)?)),
        None => None,
    };
    let next_id = AtomicU64::new(last_id + 1);
    let stop = AtomicBool::new(false);
    let first_ack: parking_lot::Mutex<Option<Instant>> = parking_lot::Mutex::new(None);
    let started = Instant::now();
    let results: Vec<Result<WorkerResult, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..cfg.threads as u64)
            .map(|w| {
                let (db, accounts, history) = (&db, &accounts, &history);
                let (journal, next_id, stop, first_ack) = (&journal, &next_id, &stop, &first_ack);
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(cfg.seed ^ ((w + 1) * 0x9E37_79B9));
                    let mut h = Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("bounds");
                    let (mut done, mut conflicts) = (0u64, 0u64);
                    while !stop.load(Ordering::Relaxed) {
                        let id = next_id.fetch_add(1, Ordering::Relaxed);
                        let t0 = Instant::now();
                        match transfer(db, accounts, history, cfg, id, &mut rng) {
                            Ok(()) => {}
                            Err(Error::Conflict(_)) => {
                                conflicts += 1;
                                continue;
                            }
                            Err(e) => {
                                // Stop the run: the database refuses work
                                // (poisoned, fenced, closed).
                                stop.store(true, Ordering::Relaxed);
                                return Err(format!("transfer {id}: {e}"));
                            }
                        }
                        let _ = h.record((t0.elapsed().as_micros() as u64).max(1));
                        first_ack.lock().get_or_insert_with(Instant::now);
                        done += 1;
                        if let Some(j) = journal {
                            let mut f = j.lock();
                            // One write per line: a kill leaves a whole line
                            // or a partial one, never two lines merged.
                            f.write_all(format!("{id}\n").as_bytes())
                                .and_then(|_| f.flush())
                                .map_err(|e| e.to_string())?;
                            f.sync_data().map_err(|e| e.to_string())?;
                        }
                    }
                    Ok((done, conflicts, h))
                })
            })
            .collect();
        while started.elapsed() < cfg.duration && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(10).min(cfg.duration));
        }
        stop.store(true, Ordering::Relaxed);
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("panic".into()))).collect()
    });
    let secs = started.elapsed().as_secs_f64();
    let mut lat = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("bounds");
    let (mut committed, mut aborted) = (0, 0);
    for r in results {
        let (d, c, h) = r?;
        committed += d;
        aborted += c;
        lat.add(&h).expect("same bounds");
    }
    let total = audit(&db, &accounts)?;
    let expected = cfg.accounts * cfg.initial_balance;
    if total != expected {
        return Err(format!("audit failed: the accounts hold {total}, expected {expected}"));
    }
    let mut config = std::collections::BTreeMap::new();
    config.insert("accounts".into(), cfg.accounts.to_string());
    config.insert("initial_balance".into(), cfg.initial_balance.to_string());
    config.insert("store".into(), cfg.log.stores.join(" + "));
    config.insert("seed".into(), cfg.seed.to_string());
    let latency = Percentiles::from_micros(&lat);
    let mut notes = vec![format!(
        "audit: the {} accounts hold {total} = {} × {}",
        cfg.accounts, cfg.accounts, cfg.initial_balance
    )];
    let mut extra = BTreeMap::new();
    if let Some(f) = failover {
        let t = f.report.timings;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let first = first_ack.into_inner().map(|a| a.saturating_duration_since(f.died));
        if let Some(d) = first {
            extra.insert("failover_ms".to_owned(), ms(d));
        }
        extra.insert("promotion_ms".to_owned(), ms(t.total));
        notes.push(format!(
            "failover: {} from the trigger file to the first acknowledged transfer; promotion \
             {:.1} ms (catch-up {:.1}, claim {:.1}, fence {:.1}, drain {:.1}, apply {:.1}, \
             publish {:.1}); the replica had applied CSN {} of {} read, and applied {} more",
            first.map_or("no transfer acknowledged".to_owned(), |d| format!("{:.1} ms", ms(d))),
            ms(t.total),
            ms(t.catch_up),
            ms(t.claim),
            ms(t.fence),
            ms(t.drain),
            ms(t.apply),
            ms(t.publish),
            f.applied,
            f.seen,
            f.report.applied
        ));
    }
    Ok(Report {
        benchmark: "bank".into(),
        engine: "milliscale".into(),
        config,
        env: Environment::detect(),
        threads: cfg.threads,
        duration_s: secs,
        committed,
        aborted,
        operations: committed,
        txn_per_s: committed as f64 / secs,
        ops_per_s: committed as f64 / secs,
        abort_rate: milliscale_bench::report::abort_rate(committed, aborted),
        txn_latency: latency.clone(),
        commit_latency: latency,
        by_kind: [("transfer".to_owned(), KindStats { committed, aborted })].into(),
        latency_by_kind: Default::default(),
        extra,
        memory: None,
        log: None,
        notes,
        timeline: Vec::new(),
    })
}

/// One transfer, committed and acknowledged.
fn transfer(
    db: &Database,
    accounts: &Table,
    history: &Table,
    cfg: &BankConfig,
    id: u64,
    rng: &mut SmallRng,
) -> milliscale::Result<()> {
    let from = rng.random_range(0..cfg.accounts);
    let to = (from + rng.random_range(1..cfg.accounts)) % cfg.accounts;
    let mut tx = db.begin()?;
    let balance = |tx: &mut milliscale::Transaction<'_>, a: u64| -> milliscale::Result<u64> {
        let v = tx.get(accounts, &key(a))?.ok_or(Error::NotFound)?;
        Ok(decode_u64s(&v)[0])
    };
    let (bf, bt) = (balance(&mut tx, from)?, balance(&mut tx, to)?);
    let amount = if bf == 0 { 0 } else { rng.random_range(0..=bf.min(1000)) };
    tx.update_range(accounts, &key(from), 0, &(bf - amount).to_le_bytes())?;
    tx.update_range(accounts, &key(to), 0, &(bt + amount).to_le_bytes())?;
    let mut h = [0u8; 24];
    for (i, v) in [from, to, amount].into_iter().enumerate() {
        h[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    tx.put(history, &key(id), &h)?;
    tx.commit_and_wait().map(|_| ())
}

/// The sum of all balances, read in one snapshot.
pub fn audit(db: &Database, accounts: &Table) -> Result<u64, String> {
    let mut tx = db.begin().map_err(|e| e.to_string())?;
    let rows = tx
        .scan(
            accounts,
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
            milliscale::Direction::Forward,
            usize::MAX,
        )
        .map_err(|e| e.to_string())?;
    Ok(rows.iter().map(|(_, v)| decode_u64s(v)[0]).sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_line_cut_by_a_crash_is_dropped_before_appending() {
        let p = std::env::temp_dir().join(format!("milliscale-journal-{}", std::process::id()));
        std::fs::write(&p, "1\n2\n3").expect("write");
        let mut f = open_journal(&p).expect("open");
        f.write_all(b"45\n").expect("append");
        drop(f);
        assert_eq!(std::fs::read_to_string(&p).expect("read"), "1\n2\n45\n");
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn transfers_keep_the_total_and_the_journal_lists_them() {
        let dir = std::env::temp_dir().join(format!("milliscale-bank-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let journal = dir.join("acked.log");
        let _ = std::fs::remove_file(&journal);
        let cfg = BankConfig {
            accounts: 50,
            initial_balance: 1000,
            threads: 4,
            // Each acknowledged transfer fsyncs the journal under one
            // lock, so a slow disk serializes the run: it ran 4 transfers
            // in 400 ms once in CI (700 locally). Long enough to get past
            // a slow moment.
            duration: Duration::from_millis(1500),
            log: LogSettings { stores: vec!["memory://".into()], ..LogSettings::default() },
            isolation: Isolation::Snapshot,
            acked_log: Some(journal.clone()),
            seed: 1,
            standby: None,
        };
        let r = run(&cfg).expect("run");
        assert!(r.committed > 10, "{} transfers", r.committed);
        let ids: Vec<u64> = std::fs::read_to_string(&journal)
            .expect("journal")
            .lines()
            .map(|l| l.parse().expect("an id per line"))
            .collect();
        assert_eq!(ids.len() as u64, r.committed, "one journal line per acknowledged transfer");
        let unique: std::collections::BTreeSet<_> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len(), "ids are unique");
        let _ = std::fs::remove_dir_all(&dir);
        let bad = BankConfig { accounts: 1, ..cfg };
        assert!(run(&bad).is_err());
    }
}
