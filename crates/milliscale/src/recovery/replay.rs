//! Applying a replay plan to the tables, in parallel by key.
//!
//! The checkpoint is installed first (`checkpoint::load`): one committed
//! version per key. Then each replay thread owns the keys whose hash falls
//! in its partition, walks the plan's entries in CSN order, and folds its
//! keys' records into a final value per key (a delta patches the value
//! before it). Last, it installs those values. A key's records are applied
//! in CSN order whatever the partitioning, so the result is the same for
//! any number of threads; only record ids (internal) differ.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::log::record::{Entry, Op};
use crate::mvcc::Csn;
use crate::mvcc::version::Version;
use crate::recovery::ReplayPlan;
use crate::table::TableInner;

/// What replay did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Records applied.
    pub records: u64,
    /// Keys whose version was installed or replaced.
    pub keys: u64,
}

fn partition(table: u32, key: &[u8], parts: usize) -> usize {
    (crc32c::crc32c_append(table, key) as usize) % parts
}

/// Apply `plan` to `tables` (indexed by table id) with `threads` threads.
pub(crate) fn apply(
    plan: &ReplayPlan,
    tables: &[Arc<TableInner>],
    threads: usize,
) -> Result<ReplayStats> {
    let threads = threads.max(1);
    let results: Vec<Result<ReplayStats>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|me| s.spawn(move || apply_partition(plan, tables, me, threads)))
            .collect();
        handles.into_iter().map(|h| h.join().expect("a replay thread panicked")).collect()
    });
    let mut total = ReplayStats::default();
    for r in results {
        let r = r?;
        total.records += r.records;
        total.keys += r.keys;
    }
    Ok(total)
}

/// The state of one key while folding: last writer's CSN and value
/// (`None`: deleted).
type KeyState = (Csn, Option<Vec<u8>>);

fn apply_partition(
    plan: &ReplayPlan,
    tables: &[Arc<TableInner>],
    me: usize,
    parts: usize,
) -> Result<ReplayStats> {
    let mut state: HashMap<(u32, &[u8]), KeyState> = HashMap::new();
    let mut stats = ReplayStats::default();
    for e in &plan.replay {
        let Entry::Commit { csn, records, .. } = e else { continue };
        for r in records {
            if partition(r.table, &r.key, parts) != me {
                continue;
            }
            let table = tables.get(r.table as usize).ok_or_else(|| {
                Error::Corrupt(format!(
                    "CSN {csn} writes table id {}, which the manifest does not name",
                    r.table
                ))
            })?;
            stats.records += 1;
            let slot =
                state.entry((r.table, &r.key[..])).or_insert_with(|| (0, current(table, &r.key)));
            slot.0 = *csn;
            match &r.op {
                Op::Insert(v) | Op::Update(v) => slot.1 = Some(v.to_vec()),
                Op::Delete => slot.1 = None,
                Op::Delta { offset, bytes } => {
                    let value = slot.1.as_mut().ok_or_else(|| {
                        Error::Corrupt(format!("CSN {csn}: a delta on a key that has no value"))
                    })?;
                    let at = *offset as usize;
                    let end = at + bytes.len();
                    if end > value.len() {
                        return Err(Error::Corrupt(format!(
                            "CSN {csn}: a delta at {at}..{end} on a value of {} bytes",
                            value.len()
                        )));
                    }
                    value[at..end].copy_from_slice(bytes);
                }
            }
        }
    }
    for ((table, key), (csn, value)) in state {
        install(&tables[table as usize], key, csn, value.as_deref())?;
        stats.keys += 1;
    }
    Ok(stats)
}

/// The value installed for `key` so far (from the checkpoint), if any.
fn current(table: &TableInner, key: &[u8]) -> Option<Vec<u8>> {
    let rid = table.index.get(key)?;
    let guard = crossbeam_epoch::pin();
    let head = table.records.slot(rid).load(std::sync::atomic::Ordering::Acquire, &guard);
    // SAFETY: recovery runs before the database is shared; versions are
    // only replaced under the guard and freed after it.
    unsafe { head.as_ref() }.and_then(|v| v.value().map(<[u8]>::to_vec))
}

/// Make a committed version at `csn` the only version of `key`. Called
/// before the database is shared, once per key per phase.
pub(crate) fn install(
    table: &TableInner,
    key: &[u8],
    csn: Csn,
    value: Option<&[u8]>,
) -> Result<()> {
    let guard = crossbeam_epoch::pin();
    let rid = match table.index.get(key) {
        Some(rid) => rid,
        None if value.is_none() => return Ok(()),
        None => {
            let rid = table.records.allocate()?;
            table
                .index
                .insert(key, rid)
                .map_err(|_| Error::Corrupt("a key was installed twice by recovery".into()))?;
            rid
        }
    };
    let old = table.records.slot(rid).swap(
        Version::committed(csn, value),
        std::sync::atomic::Ordering::AcqRel,
        &guard,
    );
    if !old.is_null() {
        // SAFETY: `old` was unlinked by the swap; nobody else can reach it
        // once the guards of concurrent readers (other replay threads never
        // read this key) are gone.
        unsafe { guard.defer_destroy(old) };
    }
    Ok(())
}
