//! Applying the log to a replica's tables while readers read them.
//!
//! A replica is the only writer of its tables, and it applies committed
//! transactions in CSN order. Each record becomes a new committed version
//! at the head of its key's chain, stamped with the transaction's CSN; the
//! versions before it stay, so a reader at an older snapshot keeps seeing
//! what it saw (recovery's `replay::install` replaces a key's only version,
//! which is right only before anyone reads). Chains are trimmed at the
//! readers' horizon as the engine's writers trim them (`mvcc::gc`).
//!
//! Invariant: versions are stamped before the CSN counter (the replica's
//! applied CSN, which snapshots are taken from) moves past them, so a
//! snapshot sees every version below it and none above.
//!
//! [`catch_up`] moves a replica that fell behind the log's truncation (or
//! across a change of writer) to a checkpoint: every key whose value at
//! the checkpoint differs from the replica's gets a version at the
//! checkpoint's CSN minus one (a tombstone if the checkpoint lacks it).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use crossbeam_epoch::{Guard, Owned};

use crate::error::{Error, Result};
use crate::log::record::{Entry, OpRef};
use crate::mvcc::version::{Stamp, Version};
use crate::mvcc::{Csn, gc};
use crate::table::TableInner;

/// One write in this many (by CSN) trims its chain with a full walk, as on
/// the writer (`mvcc::gc`).
const FULL_WALK_EVERY: u64 = gc::FULL_WALK_EVERY;

/// Apply one committed entry's records as versions at its CSN. Returns the
/// records applied. `horizon` is the readers' GC horizon.
pub(crate) fn apply_entry(
    tables: &[Arc<TableInner>],
    entry: &Entry,
    horizon: Csn,
    guard: &Guard,
) -> Result<u64> {
    let Entry::Commit { csn, records, .. } = entry else { return Ok(0) };
    let csn = *csn;
    let mut n = 0;
    for r in records.refs() {
        let table = tables.get(r.table as usize).ok_or_else(|| {
            Error::Corrupt(format!(
                "CSN {csn} writes table id {}, which the manifest does not name",
                r.table
            ))
        })?;
        let version = match r.op {
            OpRef::Insert(v) | OpRef::Update(v) => Version::committed(csn, Some(v)),
            OpRef::Delete => Version::committed(csn, None),
            OpRef::Delta { offset, bytes } => {
                let base = latest(table, r.key, guard).ok_or_else(|| {
                    Error::Corrupt(format!("CSN {csn}: a delta on a key that has no value"))
                })?;
                let (at, end) = (offset as usize, offset as usize + bytes.len());
                if end > base.len() {
                    return Err(Error::Corrupt(format!(
                        "CSN {csn}: a delta at {at}..{end} on a value of {} bytes",
                        base.len()
                    )));
                }
                let mut value = base.to_vec();
                value[at..end].copy_from_slice(bytes);
                Version::committed(csn, Some(&value))
            }
        };
        push(table, r.key, version, horizon, csn.is_multiple_of(FULL_WALK_EVERY), guard)?;
        n += 1;
    }
    Ok(n)
}

/// The latest value of `key` (`None` if absent or deleted).
fn latest<'g>(table: &TableInner, key: &[u8], guard: &'g Guard) -> Option<&'g [u8]> {
    let rid = table.index.get(key)?;
    let head = table.records.slot(rid).load(Ordering::Acquire, guard);
    // SAFETY: pinned by `guard`; versions are freed through the collector.
    unsafe { head.as_ref() }.and_then(Version::value)
}

/// Put `version` at the head of `key`'s chain (creating the key), then
/// trim the chain at `horizon`.
fn push(
    table: &TableInner,
    key: &[u8],
    version: Owned<Version>,
    horizon: Csn,
    full: bool,
    guard: &Guard,
) -> Result<()> {
    let rid = match table.index.get(key) {
        Some(rid) => rid,
        None if version.is_tombstone() => return Ok(()),
        None => {
            let rid = table.records.allocate()?;
            table
                .index
                .insert(key, rid)
                .map_err(|_| Error::Corrupt("a replica's key was inserted twice".into()))?;
            rid
        }
    };
    let slot = table.records.slot(rid);
    // The replica is this chain's only writer: no race on the head.
    let head = slot.load(Ordering::Acquire, guard);
    version.next.store(head, Ordering::Relaxed);
    slot.store(version, Ordering::Release);
    gc::trim_chain(slot, horizon, full, guard);
    Ok(())
}

/// What a catch-up changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CatchUp {
    /// Rows read from the checkpoint.
    pub rows: u64,
    /// Keys given a new version (a changed or new value).
    pub changed: u64,
    /// Keys deleted (the checkpoint does not have them).
    pub deleted: u64,
}

/// Move `tables` to the checkpoint at `csn` given as `chunks` (table id and
/// rows, every chunk of the checkpoint): each key whose latest value
/// differs gets a version at `csn - 1`. The caller has applied only CSNs
/// below `csn - 1` (its applied CSN is below `csn`), so the new versions
/// go on top.
pub(crate) fn catch_up(
    tables: &[Arc<TableInner>],
    csn: Csn,
    chunks: &[(u32, Vec<(Bytes, Bytes)>)],
    horizon: Csn,
) -> Result<CatchUp> {
    let at = csn.saturating_sub(1);
    let mut out = CatchUp::default();
    let guard = crossbeam_epoch::pin();
    for (t, table) in tables.iter().enumerate() {
        let mut keys: HashSet<&[u8]> = HashSet::new();
        for (_, rows) in chunks.iter().filter(|(id, _)| *id as usize == t) {
            for (k, v) in rows {
                out.rows += 1;
                keys.insert(k);
                if latest(table, k, &guard) != Some(&v[..]) {
                    push(table, k, Version::committed(at, Some(v)), horizon, true, &guard)?;
                    out.changed += 1;
                }
            }
        }
        let mut gone = Vec::new();
        table.index.scan(
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
            crate::index::Direction::Forward,
            |k, rid| {
                let head = table.records.slot(rid).load(Ordering::Acquire, &guard);
                // SAFETY: pinned by `guard`.
                let live = unsafe { head.as_ref() }.is_some_and(|v| {
                    debug_assert!(matches!(v.stamp(), Stamp::Committed(_)));
                    !v.is_tombstone()
                });
                if live && !keys.contains(k) {
                    gone.push(k.to_vec());
                }
                true
            },
        );
        for k in gone {
            push(table, &k, Version::committed(at, None), horizon, true, &guard)?;
            out.deleted += 1;
        }
    }
    if let Some((id, _)) = chunks.iter().find(|(id, _)| *id as usize >= tables.len()) {
        return Err(Error::Corrupt(format!("the checkpoint at CSN {csn} names table id {id}")));
    }
    Ok(out)
}
