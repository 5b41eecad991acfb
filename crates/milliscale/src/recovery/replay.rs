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
use crate::log::record::{Entry, OpRef};
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
    let mut h = FxHasher::default();
    std::hash::Hasher::write_u32(&mut h, table);
    std::hash::Hasher::write(&mut h, key);
    std::hash::Hasher::finish(&h) as usize % parts
}

/// The replay map's hash: the multiply-rotate word hash of rustc and
/// Firefox ("FxHash"). SipHash and CRC32C (a call per key) were each a
/// visible share of replay time; keys here come from our own log, not from
/// an adversary, so a fast non-keyed hash is enough.
#[derive(Default)]
struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    fn finish(&self) -> u64 {
        // The multiply leaves the low bits weak, and the table picks
        // buckets by them: finish with a full avalanche (MurmurHash3's).
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h
    }
}

type FxMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<FxHasher>>;

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
    // Keys are copied in: comparing against a slice of the log would touch
    // a random place of a large buffer on every probe.
    let mut state: FxMap<(u32, smallvec::SmallVec<[u8; 24]>), KeyState> = FxMap::default();
    let mut stats = ReplayStats::default();
    for e in &plan.replay {
        let Entry::Commit { csn, records, .. } = e else { continue };
        for r in records.refs() {
            if partition(r.table, r.key, parts) != me {
                continue;
            }
            let table = tables.get(r.table as usize).ok_or_else(|| {
                Error::Corrupt(format!(
                    "CSN {csn} writes table id {}, which the manifest does not name",
                    r.table
                ))
            })?;
            stats.records += 1;
            // The installed (checkpoint) value is looked up only if the
            // key's first record here is a delta: an index lookup per key
            // was a visible share of replay time.
            let slot = state
                .entry((r.table, smallvec::SmallVec::from_slice(r.key)))
                .or_insert_with(|| match r.op {
                    OpRef::Delta { .. } => (0, current(table, r.key)),
                    _ => (0, None),
                });
            slot.0 = *csn;
            match r.op {
                OpRef::Insert(v) | OpRef::Update(v) => slot.1 = Some(v.to_vec()),
                OpRef::Delete => slot.1 = None,
                OpRef::Delta { offset, bytes } => {
                    let value = slot.1.as_mut().ok_or_else(|| {
                        Error::Corrupt(format!("CSN {csn}: a delta on a key that has no value"))
                    })?;
                    let at = offset as usize;
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
        install(&tables[table as usize], &key, csn, value.as_deref())?;
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
