//! Applying a replay plan to the tables, in parallel by key.
//!
//! The plan's records are scattered by key; then the checkpoint is loaded
//! (`checkpoint::load`: one committed version per key), less the keys the
//! plan deletes; then the records are folded into one final value per key
//! (a delta patches the value before it) and installed.
//!
//! The fold is a radix-partitioned hash aggregation, because one hash map
//! per thread over millions of keys is bound by cache misses:
//! 1. **Scatter.** Each thread takes a contiguous run of the plan's
//!    entries (in CSN order) and copies each record, with its CSN, into one
//!    of [`BUCKETS`] byte buffers chosen by the key's hash: sequential
//!    writes. It notes the keys deleted ([`Deleted`]).
//! 2. **Load** the checkpoint, skipping the rows of deleted keys: whatever
//!    such a key held before its deletion is replaced, and its row would
//!    cost an insert into the index and a removal (a shard's forgotten
//!    decisions are many of them).
//! 3. **Fold.** One thread folds a bucket (a few thousand keys) with a
//!    small map that stays in cache, reading the scatter runs' buffers for
//!    that bucket in run order, which is CSN order: sequential reads.
//! 4. **Install** the bucket's final values.
//!
//! A key's records are folded in CSN order whatever the number of threads,
//! so the result is the same for any number; only record ids (internal)
//! differ.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::log::record::{Entry, OpRef, RecordRef};
use crate::mvcc::Csn;
use crate::mvcc::oid_array::Rid;
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

/// Buckets of the scatter step: enough that a bucket's keys and values
/// fit in a core's cache for logs of millions of keys.
pub const BUCKETS: usize = 1024;

fn key_hash(table: u32, key: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    std::hash::Hasher::write_u32(&mut h, table);
    std::hash::Hasher::write(&mut h, key);
    std::hash::Hasher::finish(&h)
}

fn bucket_of(table: u32, key: &[u8]) -> usize {
    (key_hash(table, key) >> 32) as usize % BUCKETS
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
/// Under it, the checkpoint is loaded by `load`, once the plan is
/// scattered, given a test of the rows to skip: keys the plan deletes.
pub(crate) fn apply(
    plan: &ReplayPlan,
    tables: &[Arc<TableInner>],
    threads: usize,
    load: impl FnOnce(&(dyn Fn(u32, &[u8]) -> bool + Sync)) -> Result<()>,
) -> Result<ReplayStats> {
    let threads = threads.max(1);
    let entries = &plan.replay;
    // 1. Scatter: runs of entries, in CSN order, one per thread.
    let runs: Vec<std::ops::Range<usize>> = (0..threads)
        .map(|t| entries.len() * t / threads..entries.len() * (t + 1) / threads)
        .collect();
    type Run<'p> = (Vec<Vec<u8>>, Vec<(u32, &'p [u8])>);
    let scattered: Vec<Run<'_>> = crate::parallel::parallel_map(&runs, threads, |run| {
        // Sized for an even spread (plus slack), so the buffers rarely grow:
        // growing copies them and touches fresh pages twice.
        let bytes: usize = entries[run.clone()]
            .iter()
            .map(|e| match e {
                Entry::Commit { records, .. } => e.encoded_len() + records.len() * 8,
                Entry::Abort { .. } => 0,
            })
            .sum();
        let each = bytes / BUCKETS + bytes / BUCKETS / 8 + 64;
        let mut buckets: Vec<Vec<u8>> = (0..BUCKETS).map(|_| Vec::with_capacity(each)).collect();
        let mut deletes = Vec::new();
        for e in &entries[run.clone()] {
            let Entry::Commit { csn, records, .. } = e else { continue };
            for r in records.refs() {
                scatter(&mut buckets[bucket_of(r.table, r.key)], *csn, &r);
                if matches!(r.op, OpRef::Delete) {
                    deletes.push((r.table, r.key));
                }
            }
        }
        (buckets, deletes)
    });
    // 2. The checkpoint, less every key the plan deletes: whatever such a
    //    key held before its deletion is replaced, so its row would only
    //    cost an insert into the index now and a removal below.
    let deleted = Deleted::of(scattered.iter().flat_map(|(_, d)| d.iter().copied()));
    load(&|table, key| deleted.has(table, key))?;
    // 3 and 4. Fold and install each bucket.
    let buckets: Vec<usize> = (0..BUCKETS).collect();
    let results = crate::parallel::parallel_map(&buckets, threads, |&b| {
        fold_bucket(tables, &deleted, scattered.iter().map(|run| run.0[b].as_slice()))
    });
    let mut total = ReplayStats::default();
    for r in results {
        let r = r?;
        total.records += r.records;
        total.keys += r.keys;
    }
    Ok(total)
}

/// The keys a plan deletes (anywhere in it), by their 64-bit hash, to be
/// checked while a checkpoint loads: a miss costs a probe of a table of
/// hashes, not of the fold's maps.
struct Deleted<'a> {
    by_hash: FxMap<u64, (u32, &'a [u8])>,
    /// Keys whose hash another key had already (checked in full).
    collided: Vec<(u64, u32, &'a [u8])>,
}

impl<'a> Deleted<'a> {
    fn of(keys: impl Iterator<Item = (u32, &'a [u8])>) -> Deleted<'a> {
        let mut d = Deleted { by_hash: FxMap::default(), collided: Vec::new() };
        for (table, key) in keys {
            let h = key_hash(table, key);
            match d.by_hash.get(&h) {
                Some(first) if *first == (table, key) => {}
                Some(_) => d.collided.push((h, table, key)),
                None => {
                    d.by_hash.insert(h, (table, key));
                }
            }
        }
        d
    }

    fn has(&self, table: u32, key: &[u8]) -> bool {
        if self.by_hash.is_empty() {
            return false;
        }
        let h = key_hash(table, key);
        self.by_hash.get(&h).is_some_and(|(t, k)| *t == table && *k == key)
            || self.collided.iter().any(|(c, t, k)| *c == h && *t == table && *k == key)
    }
}

/// Bytes of a scattered record's header: CSN, table, op, key length,
/// payload length, delta offset.
const SCATTERED_HEADER: usize = 8 + 4 + 1 + 2 + 4 + 4;

fn scatter(out: &mut Vec<u8>, csn: Csn, r: &RecordRef<'_>) {
    let (op, offset, payload): (u8, u32, &[u8]) = match r.op {
        OpRef::Insert(v) => (1, 0, v),
        OpRef::Update(v) => (2, 0, v),
        OpRef::Delta { offset, bytes } => (3, offset, bytes),
        OpRef::Delete => (4, 0, &[]),
    };
    out.extend_from_slice(&csn.to_le_bytes());
    out.extend_from_slice(&r.table.to_le_bytes());
    out.push(op);
    out.extend_from_slice(&(r.key.len() as u16).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(r.key);
    out.extend_from_slice(payload);
}

/// Read back what [`scatter`] wrote.
fn gather(b: &[u8]) -> impl Iterator<Item = (Csn, RecordRef<'_>)> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= b.len() {
            return None;
        }
        let h = &b[at..at + SCATTERED_HEADER];
        let csn = u64::from_le_bytes(h[0..8].try_into().expect("8"));
        let table = u32::from_le_bytes(h[8..12].try_into().expect("4"));
        let key_len = usize::from(u16::from_le_bytes([h[13], h[14]]));
        let len = u32::from_le_bytes(h[15..19].try_into().expect("4")) as usize;
        let offset = u32::from_le_bytes(h[19..23].try_into().expect("4"));
        let k = at + SCATTERED_HEADER;
        let (key, payload) = (&b[k..k + key_len], &b[k + key_len..k + key_len + len]);
        at = k + key_len + len;
        let op = match h[12] {
            1 => OpRef::Insert(payload),
            2 => OpRef::Update(payload),
            3 => OpRef::Delta { offset, bytes: payload },
            _ => OpRef::Delete,
        };
        Some((csn, RecordRef { table, key, op }))
    })
}

/// A key's value while folding.
enum Held {
    Value(Vec<u8>),
    Deleted,
    /// Its checkpoint row was not loaded (the plan deletes the key later):
    /// the deltas before that deletion patch a value nobody reads.
    Skipped,
}

/// The state of one key while folding: last writer's CSN, its value, and
/// its record id if the fold looked the key up (its first record here was
/// a delta on the checkpoint's value), so that installing it does not
/// search the index again.
type KeyState = (Csn, Held, Option<Rid>);

/// Fold one bucket's records (one buffer per scatter run, runs in CSN
/// order) into final values, and install them over the checkpoint, which
/// was loaded less the keys in `deleted`.
fn fold_bucket<'a>(
    tables: &[Arc<TableInner>],
    deleted: &Deleted<'_>,
    runs: impl Iterator<Item = &'a [u8]>,
) -> Result<ReplayStats> {
    let runs: Vec<&'a [u8]> = runs.collect();
    // Sized for a record per key: rehashing as it grows was a visible
    // share of a bucket's fold.
    let bytes: usize = runs.iter().map(|r| r.len()).sum();
    let mut state: FxMap<(u32, &'a [u8]), KeyState> =
        FxMap::with_capacity_and_hasher(bytes / (SCATTERED_HEADER + 64) + 16, Default::default());
    let mut stats = ReplayStats::default();
    for (csn, r) in runs.into_iter().flat_map(gather) {
        let table = tables.get(r.table as usize).ok_or_else(|| {
            Error::Corrupt(format!(
                "CSN {csn} writes table id {}, which the manifest does not name",
                r.table
            ))
        })?;
        if table.is_dropped() {
            continue;
        }
        stats.records += 1;
        // The installed (checkpoint) value is looked up only if the key's
        // first record here is a delta, and the load did not skip it.
        let slot = state.entry((r.table, r.key)).or_insert_with(|| match r.op {
            OpRef::Delta { .. } if deleted.has(r.table, r.key) => (0, Held::Skipped, None),
            OpRef::Delta { .. } => match current(table, r.key) {
                Some((rid, Some(value))) => (0, Held::Value(value), Some(rid)),
                Some((rid, None)) => (0, Held::Deleted, Some(rid)),
                None => (0, Held::Deleted, None),
            },
            _ => (0, Held::Deleted, None),
        });
        slot.0 = csn;
        match (r.op, &mut slot.1) {
            (OpRef::Insert(v) | OpRef::Update(v), held) => *held = Held::Value(v.to_vec()),
            (OpRef::Delete, held) => *held = Held::Deleted,
            (OpRef::Delta { .. }, Held::Skipped) => {}
            (OpRef::Delta { .. }, Held::Deleted) => {
                return Err(Error::Corrupt(format!(
                    "CSN {csn}: a delta on a key that has no value"
                )));
            }
            (OpRef::Delta { offset, bytes }, Held::Value(value)) => {
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
    for ((table, key), (csn, held, rid)) in state {
        let table = &tables[table as usize];
        match (held, rid) {
            (Held::Value(v), rid) => install(table, key, rid, csn, Some(&v))?,
            (Held::Deleted, Some(rid)) => install(table, key, Some(rid), csn, None)?,
            // A deletion is in `deleted`, so the load skipped the key: it
            // is not in the index.
            (Held::Deleted, None) => {}
            (Held::Skipped, _) => {
                return Err(Error::Corrupt(format!(
                    "CSN {csn}: deltas on a key whose checkpoint value was skipped for a \
                     deletion that never came"
                )));
            }
        }
        stats.keys += 1;
    }
    Ok(stats)
}

/// The record id of `key` and the value installed for it so far (from the
/// checkpoint), if the key is there.
fn current(table: &TableInner, key: &[u8]) -> Option<(Rid, Option<Vec<u8>>)> {
    let rid = table.index.get(key)?;
    let guard = crossbeam_epoch::pin();
    let head = table.records.slot(rid).load(std::sync::atomic::Ordering::Acquire, &guard);
    // SAFETY: recovery runs before the database is shared; versions are
    // only replaced under the guard and freed after it.
    Some((rid, unsafe { head.as_ref() }.and_then(|v| v.value().map(<[u8]>::to_vec))))
}

/// Make a committed version at `csn` the only version of `key`; for a
/// deletion, remove the key (its entry and its record id, as
/// `reclaim` would once every snapshot saw the deletion: none runs
/// yet). Called before the database is shared, once per key per phase.
///
/// A put inserts the key first and looks it up only if it is there: most
/// keys recovery installs are new (every key of a checkpoint, and a
/// shard's version and outcome rows in the log), and a lookup that misses
/// costs a descent of the index as an insert does. Measured: the lookups
/// were half of a shard's replay (BENCHMARKS.md, "Does a shard's state
/// stay bounded"). A key the fold already looked up comes with its record
/// id (`known`), and the index is not searched again.
pub(crate) fn install(
    table: &TableInner,
    key: &[u8],
    known: Option<Rid>,
    csn: Csn,
    value: Option<&[u8]>,
) -> Result<()> {
    let guard = crossbeam_epoch::pin();
    let Some(value) = value else {
        // Out of the index first (one descent), then the record.
        let removed = match known {
            Some(rid) => table.index.remove_if(key, rid).then_some(rid),
            None => table.index.remove(key),
        };
        if let Some(rid) = removed {
            let old = table.records.slot(rid).swap(
                crossbeam_epoch::Shared::null(),
                std::sync::atomic::Ordering::AcqRel,
                &guard,
            );
            if !old.is_null() {
                // SAFETY: unlinked by the swap; see below.
                unsafe { guard.defer_destroy(old) };
            }
            // No transaction runs yet: the RID may be handed out at once.
            table.records.free(rid, 0);
        }
        return Ok(());
    };
    let rid = match known {
        Some(rid) => rid,
        None => {
            // Every RID recovery freed may be handed out again.
            let fresh = table.records.allocate(u64::MAX)?;
            match table.index.insert(key, fresh) {
                Ok(()) => fresh,
                Err(existing) => {
                    // Its slot was never set: hand it back as the deletions do.
                    table.records.free(fresh, 0);
                    existing
                }
            }
        }
    };
    let old = table.records.slot(rid).swap(
        Version::committed(csn, Some(value)),
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
