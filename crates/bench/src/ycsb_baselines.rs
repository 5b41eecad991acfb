//! YCSB on the baselines that are not the engine's log: the page-at-commit
//! protocols (`pages`) and the raw ordered index.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use milliscale::{Database, Error, Table, TxnOptions};
use rand::Rng;

use crate::harness::{PHASE_MEASURE, drive};
use crate::keys::KeyChooser;
use crate::report::Percentiles;
use crate::variant::LogSettings;
use crate::ycsb_workload::*;

/// `--variant naive-pages|atomic-pages`: the transactions run in the
/// engine's memory with no log; each read-write transaction is made
/// durable by `crate::pages` on the first store, by the committing
/// worker (Database on S3: the commit is complete when its PUTs are). Returns
/// the workers' stats, the cost split and the commit latency of read-write
/// transactions (pre-commit to the last PUT's answer).
#[allow(clippy::type_complexity)]
#[allow(
    clippy::too_many_lines,
    reason = "one page-baseline run read in order: load the pages, the phases, the report"
)]
pub(crate) fn run_pages(
    cfg: &YcsbConfig,
    chooser: &KeyChooser,
    phase: &AtomicU8,
    notes: &mut Vec<String>,
) -> Result<
    (
        Vec<WorkerStats>,
        (Duration, Option<crate::report::MemoryReport>),
        BTreeMap<String, f64>,
        Percentiles,
    ),
    String,
> {
    use crate::pages::{PageProtocol, PageStore};
    let protocol = cfg.log.pages.expect("a page variant");
    let mut log = cfg.log.clone();
    log.seed_sims(cfg.seed);
    let url = log.stores.first().ok_or("the page variants need a store (--store)")?;
    let store = objstore::open(url).map_err(|e| format!("{url}: {e}"))?;
    // The fourth paper's pages were 100 KB.
    const PAGE_BYTES: u64 = 100 * 1024;
    let entry = (8 + 14 + RECORD_BYTES) as u64;
    let page_count = u32::try_from((cfg.records * entry).div_ceil(PAGE_BYTES).max(1))
        .map_err(|_| "too many records for the page store")?;
    let pages =
        PageStore::new(store.clone(), protocol, page_count, "bench").map_err(|e| e.to_string())?;
    let db = Database::open(
        LogSettings { stores: vec!["none".into()], ..LogSettings::default() }
            .options(cfg.threads)
            .isolation(cfg.isolation),
    )
    .map_err(|e| e.to_string())?;
    let table = db.create_table("usertable").map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    load(&db, &table, cfg).map_err(|e| format!("load failed: {e}"))?;
    pages
        .load((0..cfg.records).map(|id| (key_bytes(id).to_vec(), initial_record(id).to_vec())), 32)
        .map_err(|e| format!("page load failed: {e}"))?;
    notes.push(format!(
        "page-at-commit ({protocol}, Database on S3): no log; {} records on {page_count} pages of \
         about {} KB in {url}, loaded in {:.2} s; the client caches every page, so a naive \
         commit is PUTs only, sent one after the other as in the paper",
        cfg.records,
        PAGE_BYTES / 1024,
        t0.elapsed().as_secs_f64()
    ));
    let interval = cfg.log.checkpoint_interval;
    let commit_ns = parking_lot::Mutex::new(new_histogram());
    let window = parking_lot::Mutex::new(Vec::new());
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (driven, checkpoint_failures) = std::thread::scope(|s| {
        let checkpointer = (protocol == PageProtocol::Atomic).then(|| {
            s.spawn(|| -> (u64, Option<String>) {
                let every = interval.unwrap_or(Duration::from_secs(15));
                let mut next = Instant::now() + every;
                let (mut failed, mut last) = (0, None);
                while !stop.load(Ordering::Relaxed) {
                    if Instant::now() >= next {
                        if let Err(e) = pages.checkpoint() {
                            failed += 1;
                            last = Some(e.to_string());
                        }
                        next += every;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                (failed, last)
            })
        });
        let out = drive(
            &cfg.shape(),
            phase,
            |w| pages_worker(&db, &table, &pages, cfg, chooser, phase, &commit_ns, w),
            |p| {
                if p == PHASE_MEASURE {
                    pages.reset_latency();
                }
                window.lock().push(pages.stats());
            },
        );
        stop.store(true, Ordering::Relaxed);
        let failed = checkpointer.map(|c| c.join().expect("checkpointer panicked"));
        (out, failed)
    });
    let (stats, measured) = driven?;
    if let Some((n, Some(last))) = checkpoint_failures {
        notes.push(format!(
            "{n} page checkpoints failed, each retried at the next interval; the last: {last}"
        ));
    }
    let committed: u64 = stats.iter().map(|s| s.committed[0] + s.committed[1]).sum();
    let mut extra = BTreeMap::new();
    if let [before, after] = window.lock().as_slice() {
        let per_1000 =
            |usd: f64| if committed == 0 { 0.0 } else { usd / committed as f64 * 1000.0 };
        let fg = per_1000(after.foreground.cost_usd - before.foreground.cost_usd);
        let bg = per_1000(after.background.cost_usd - before.background.cost_usd);
        extra.insert("foreground_usd_per_1000_txn".to_owned(), fg);
        extra.insert("background_usd_per_1000_txn".to_owned(), bg);
        extra.insert("usd_per_1000_txn".to_owned(), fg + bg);
        let reqs =
            |r: &objstore::sim::accounting::AccountingReport| (r.put_class + r.get_class) as f64;
        extra.insert(
            "foreground_requests_per_txn".to_owned(),
            (reqs(&after.foreground) - reqs(&before.foreground)) / committed.max(1) as f64,
        );
        extra.insert(
            "background_requests_per_txn".to_owned(),
            (reqs(&after.background) - reqs(&before.background)) / committed.max(1) as f64,
        );
        extra.insert("checkpoints".to_owned(), (after.checkpoints - before.checkpoints) as f64);
        if let Some(w) = after.commit_writes {
            extra.insert("store_write_p50_us".to_owned(), w.p50_us as f64);
            extra.insert("store_write_p99_us".to_owned(), w.p99_us as f64);
            extra.insert("store_write_p999_us".to_owned(), w.p999_us as f64);
            notes.push(format!(
                "the store's own commit writes: {} requests, p50 {:.1} ms, p99 {:.1} ms, p99.9 \
                 {:.1} ms, max {:.1} ms",
                w.count,
                w.p50_us as f64 / 1e3,
                w.p99_us as f64 / 1e3,
                w.p999_us as f64 / 1e3,
                w.max_us as f64 / 1e3
            ));
        }
        let p = after.foreground.prices;
        notes.push(format!(
            "$ per 1,000 transactions: {:.6} foreground (commits) + {:.6} background \
             (checkpoints) = {:.6}, at ${}/M PUT, ${}/M GET, ${}/GB up, ${}/GB down",
            fg,
            bg,
            fg + bg,
            p.put_per_million,
            p.get_per_million,
            p.upload_per_gb,
            p.download_per_gb
        ));
    }
    let latency = Percentiles::from_nanos(&commit_ns.into_inner());
    notes.push(
        "commit latency: read-write transactions, pre-commit to the answer of the commit's last \
         PUT (the worker waits: the commit protocol is synchronous)"
            .into(),
    );
    Ok((stats, measured, extra, latency))
}

#[allow(clippy::too_many_arguments)]
fn pages_worker(
    db: &Database,
    table: &Table,
    pages: &crate::pages::PageStore,
    cfg: &YcsbConfig,
    chooser: &KeyChooser,
    phase: &AtomicU8,
    commit_ns: &parking_lot::Mutex<Histogram<u64>>,
    w: u64,
) -> Result<WorkerStats, String> {
    let read_fraction = cfg.workload.read_fraction();
    let mut keys = vec![0u64; cfg.ops_per_txn];
    let mut mine = new_histogram();
    let out = run_worker(cfg, phase, w, |rng| {
        let rmw = rng.random::<f64>() >= read_fraction;
        for k in keys.iter_mut() {
            *k = chooser.next(rng);
        }
        let kind = usize::from(rmw);
        let started = Instant::now();
        let opts =
            TxnOptions { isolation: Some(cfg.isolation), read_only: !rmw, ..Default::default() };
        type Writes = Vec<(Vec<u8>, Vec<u8>)>;
        let mut run = || -> Result<(Instant, Writes, Option<u64>), Error> {
            let mut tx = db.begin_with(opts)?;
            let mut writes = Vec::new();
            for &id in &keys {
                let key = key_bytes(id);
                let mut record = [0u8; RECORD_BYTES];
                if tx.get_with(table, &key, |v| record.copy_from_slice(v))?.is_none() {
                    return Err(Error::InvalidArgument(format!("record {id} is missing")));
                }
                if rmw {
                    let field = rng.random_range(1..FIELDS);
                    let value: u64 = rng.random();
                    tx.update_range(table, &key, field * FIELD_BYTES, &value.to_le_bytes())?;
                    record[field * FIELD_BYTES..][..FIELD_BYTES]
                        .copy_from_slice(&value.to_le_bytes());
                    writes.push((key.to_vec(), record.to_vec()));
                }
            }
            let precommit = Instant::now();
            let info = tx.commit()?.wait()?; // no log: resolved at once
            Ok((precommit, writes, info.csn))
        };
        match run() {
            Ok((precommit, writes, csn)) => {
                if let Some(csn) = csn {
                    pages.commit(csn, &writes).map_err(|e| format!("page commit failed: {e}"))?;
                    if phase.load(Ordering::Relaxed) == PHASE_MEASURE {
                        let _ = mine.record(precommit.elapsed().as_nanos().max(1) as u64);
                    }
                }
                Ok(Step::Committed { kind, started, precommit, ack: None })
            }
            Err(Error::Conflict(_)) => Ok(Step::Aborted { kind }),
            Err(e) => Err(format!("transaction failed: {e}")),
        }
    });
    commit_ns.lock().add(&mine).expect("same bounds");
    out
}

pub(crate) fn raw_worker(
    tree: &scc::TreeIndex<milliscale::internals::IndexKey, u64>,
    cfg: &YcsbConfig,
    chooser: &KeyChooser,
    phase: &AtomicU8,
    w: u64,
) -> Result<WorkerStats, String> {
    run_worker(cfg, phase, w, |rng| {
        let started = Instant::now();
        for _ in 0..cfg.ops_per_txn {
            let key = key_bytes(chooser.next(rng));
            let guard = scc::Guard::new();
            let v = tree.peek(&milliscale::internals::KeyQuery(&key), &guard).copied();
            if v.is_none() {
                return Err("raw index lost a key".into());
            }
            std::hint::black_box(v);
        }
        // No commit: "pre-commit" is the end of the lookups.
        Ok(Step::Committed { kind: 0, started, precommit: Instant::now(), ack: None })
    })
}
