//! Applying the log to a replica's tables while readers read them.
//!
//! A replica is the only writer of its tables, and it applies committed
//! transactions in CSN order. Each record becomes a new committed version
//! at the head of its key's chain, stamped with the transaction's CSN; the
//! versions before it stay, so a reader at an older snapshot keeps seeing
//! what it saw (recovery's `replay::install` replaces a key's only version,
//! which is right only before anyone reads). Chains are trimmed at the
//! readers' horizon as the engine's writers trim them (`mvcc::gc`); a
//! chain still holding the version a record replaced is queued and trimmed
//! again once the horizon passes it ([`retrim_due`]), as on the writer.
//!
//! Invariant: versions are stamped before the CSN counter (the replica's
//! applied CSN, which snapshots are taken from) moves past them, so a
//! snapshot sees every version below it and none above.
//!
//! [`apply_batch`] applies a run of consecutive transactions on several
//! threads, partitioned by key: every record of a key goes to the same
//! thread, which applies them in CSN order, so each chain still has one
//! writer and a delta finds its base. The applied CSN moves only after the
//! whole run is in (the invariant above, for the run).
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
use crate::mvcc::gc::{Retrim, Retrims};
use crate::mvcc::oid_array::Rid;
use crate::mvcc::version::{Stamp, Version};
use crate::mvcc::{Csn, gc};
use crate::reclaim::{Doomed, Reclaimer};
use crate::table::TableInner;

/// One write in this many (by CSN) trims its chain with a full walk, as on
/// the writer (`mvcc::gc`).
const FULL_WALK_EVERY: u64 = gc::FULL_WALK_EVERY;

/// The whole value a delta record left, kept for a change feed's tap
/// (`tap::hand_over`) so that it need not look the row up again: the
/// `record`-th record of the `entry`-th entry of the run.
#[derive(Debug)]
pub(crate) struct Whole {
    pub(crate) entry: u32,
    pub(crate) record: u32,
    pub(crate) value: Vec<u8>,
}

/// Apply `entries`, consecutive transactions in CSN order, on `threads`
/// threads (the caller's and `threads - 1` more), partitioned by key; a
/// run of fewer than `parallel_min` records on the calling thread alone.
/// Returns the records applied and, with `wholes`, the whole value each
/// delta record left, in (entry, record) order; the records left holding
/// the version they replaced go to `retrims`. On an error some records of
/// the run may be in: the caller stops without moving its applied CSN past
/// the run, so no reader sees them.
pub(crate) fn apply_batch(
    tables: &[Arc<TableInner>],
    entries: &[Entry],
    horizon: Csn,
    threads: usize,
    parallel_min: usize,
    retrims: &Retrims,
    wholes: bool,
) -> Result<(u64, Vec<Whole>)> {
    let records: usize = entries
        .iter()
        .map(|e| match e {
            Entry::Commit { records, .. } => records.len(),
            Entry::Abort { .. } => 0,
        })
        .sum();
    let threads = threads.max(1);
    let mut out = if threads == 1 || records < parallel_min {
        apply_part(tables, entries, horizon, Partition::ALL, wholes)?
    } else {
        apply_partitioned(tables, entries, horizon, threads, wholes)?
    };
    retrims.cycle(&out.again, horizon, 0, &mut gc::Due::new());
    if let Some(w) = &mut out.wholes {
        w.sort_unstable_by_key(|w| (w.entry, w.record));
    }
    Ok((out.n, out.wholes.unwrap_or_default()))
}

/// What applying (part of) a run did.
#[derive(Debug)]
struct Applied {
    n: u64,
    /// Records whose chain still holds the version they replaced.
    again: Vec<Retrim>,
    /// Deltas' whole values, if asked for.
    wholes: Option<Vec<Whole>>,
}

impl Applied {
    fn extend(&mut self, other: Applied) {
        self.n += other.n;
        self.again.extend(other.again);
        if let (Some(w), Some(o)) = (&mut self.wholes, other.wholes) {
            w.extend(o);
        }
    }
}

/// Apply the records of `entries` whose keys `part` owns, in order.
fn apply_part(
    tables: &[Arc<TableInner>],
    entries: &[Entry],
    horizon: Csn,
    part: Partition,
    wholes: bool,
) -> Result<Applied> {
    let guard = crossbeam_epoch::pin();
    let mut out = Applied { n: 0, again: Vec::new(), wholes: wholes.then(Vec::new) };
    for (i, e) in entries.iter().enumerate() {
        let sink = out.wholes.as_mut().map(|w| (i as u32, w));
        out.n += apply_entry(tables, e, horizon, part, &mut out.again, sink, &guard)?;
    }
    Ok(out)
}

/// [`apply_batch`] on `threads` threads whatever the run's size.
fn apply_partitioned(
    tables: &[Arc<TableInner>],
    entries: &[Entry],
    horizon: Csn,
    threads: usize,
    wholes: bool,
) -> Result<Applied> {
    let part = |index: usize| {
        apply_part(tables, entries, horizon, Partition { index, of: threads }, wholes)
    };
    std::thread::scope(|s| {
        // A partition whose thread cannot start is applied here.
        let others: Vec<_> = (1..threads)
            .map(|i| {
                std::thread::Builder::new()
                    .name(format!("replica-apply-{i}"))
                    .spawn_scoped(s, move || part(i))
                    .map_err(|_| i)
            })
            .collect();
        let mut out = part(0)?;
        for h in others {
            out.extend(match h {
                Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?,
                Err(i) => part(i)?,
            });
        }
        Ok(out)
    })
}

/// The keys one apply thread owns: those whose hash is `index` modulo `of`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Partition {
    index: usize,
    of: usize,
}

impl Partition {
    /// Every key.
    pub(crate) const ALL: Partition = Partition { index: 0, of: 1 };

    fn owns(self, key: &[u8]) -> bool {
        self.of == 1 || crc32c::crc32c(key) as usize % self.of == self.index
    }
}

/// Apply the records of one committed entry whose keys `part` owns, as
/// versions at its CSN. Returns the records applied; those whose chain
/// still holds the version replaced go to `again`; with `wholes` (the
/// entry's place in its run and a sink), each delta's whole value goes to
/// the sink. `horizon` is the readers' GC horizon.
pub(crate) fn apply_entry(
    tables: &[Arc<TableInner>],
    entry: &Entry,
    horizon: Csn,
    part: Partition,
    again: &mut Vec<Retrim>,
    mut wholes: Option<(u32, &mut Vec<Whole>)>,
    guard: &Guard,
) -> Result<u64> {
    let Entry::Commit { csn, records, .. } = entry else { return Ok(0) };
    let csn = *csn;
    let mut n = 0;
    for (j, r) in records.refs().enumerate() {
        if !part.owns(r.key) {
            continue;
        }
        let table = tables.get(r.table as usize).ok_or_else(|| {
            Error::Corrupt(format!(
                "CSN {csn} writes table id {}, which the manifest does not name",
                r.table
            ))
        })?;
        if table.is_dropped() {
            continue;
        }
        let full = csn.is_multiple_of(FULL_WALK_EVERY);
        let kept = match r.op {
            OpRef::Insert(v) | OpRef::Update(v) => {
                push(table, r.key, Version::committed(csn, Some(v)), horizon, full, guard)?
            }
            OpRef::Delete => {
                push(table, r.key, Version::committed(csn, None), horizon, full, guard)?
            }
            OpRef::Delta { offset, bytes } => {
                // One index lookup for the base and the new head.
                let Some(rid) = table.index.get(r.key) else {
                    return Err(Error::Corrupt(format!(
                        "CSN {csn}: a delta on a key that has no value"
                    )));
                };
                let slot = table.records.slot(rid);
                let head = slot.load(Ordering::Acquire, guard);
                // SAFETY: pinned by `guard`; versions are freed through the
                // collector.
                let base = unsafe { head.as_ref() }.and_then(Version::value).ok_or_else(|| {
                    Error::Corrupt(format!("CSN {csn}: a delta on a key that has no value"))
                })?;
                let value = crate::log::record::patched(base, offset, bytes).ok_or_else(|| {
                    let (at, end) = (offset as usize, offset as usize + bytes.len());
                    Error::Corrupt(format!(
                        "CSN {csn}: a delta at {at}..{end} on a value of {} bytes",
                        base.len()
                    ))
                })?;
                let kept =
                    push_on(slot, Version::committed(csn, Some(&value)), horizon, full, guard)
                        .then_some(rid);
                if let Some((entry, sink)) = &mut wholes {
                    sink.push(Whole { entry: *entry, record: j as u32, value });
                }
                kept
            }
        };
        if let Some(rid) = kept {
            again.push(Retrim { table: r.table, rid, csn });
        }
        n += 1;
    }
    Ok(n)
}

/// Queue for reclamation (`reclaim`) the keys `entries` deleted,
/// once they are applied. The reclaimer drains the queue on the thread
/// that applies (`Follower::advance`), between runs, so that it never
/// races an apply thread, which writes its chains without a CAS.
pub(crate) fn queue_deletes(tables: &[Arc<TableInner>], entries: &[Entry], reclaim: &Reclaimer) {
    let mut doomed = Vec::new();
    for e in entries {
        let Entry::Commit { csn, records, .. } = e else { continue };
        for r in records.refs() {
            let Some(table) = tables.get(r.table as usize) else { continue };
            if matches!(r.op, OpRef::Delete)
                && !table.is_dropped()
                && let Some(rid) = table.index.get(r.key)
            {
                doomed.push(Doomed { table: Arc::clone(table), key: r.key.into(), rid, csn: *csn });
            }
        }
    }
    if !doomed.is_empty() {
        reclaim.push(doomed);
    }
}

/// The latest value of `key` (`None` if absent or deleted).
fn latest<'g>(table: &TableInner, key: &[u8], guard: &'g Guard) -> Option<&'g [u8]> {
    let rid = table.index.get(key)?;
    let head = table.records.slot(rid).load(Ordering::Acquire, guard);
    // SAFETY: pinned by `guard`; versions are freed through the collector.
    unsafe { head.as_ref() }.and_then(Version::value)
}

/// Put `version` at the head of `key`'s chain (creating the key), then
/// trim the chain at `horizon`. The key's RID if the chain still holds a
/// version below the new one.
fn push(
    table: &TableInner,
    key: &[u8],
    version: Owned<Version>,
    horizon: Csn,
    full: bool,
    guard: &Guard,
) -> Result<Option<Rid>> {
    let rid = match table.index.get(key) {
        Some(rid) => rid,
        None if version.is_tombstone() => return Ok(None),
        None => {
            // A RID freed below the readers' horizon is no reader's.
            let rid = table.records.allocate(horizon)?;
            table
                .index
                .insert(key, rid)
                .map_err(|_| Error::Corrupt("a replica's key was inserted twice".into()))?;
            rid
        }
    };
    Ok(push_on(table.records.slot(rid), version, horizon, full, guard).then_some(rid))
}

/// Put `version` at the head of the chain in `slot`, then trim it.
/// Whether the chain still holds a version below the new one.
fn push_on(
    slot: &crossbeam_epoch::Atomic<Version>,
    version: Owned<Version>,
    horizon: Csn,
    full: bool,
    guard: &Guard,
) -> bool {
    // The replica applies each chain on one thread: no race on the head.
    let head = slot.load(Ordering::Acquire, guard);
    version.next.store(head, Ordering::Relaxed);
    slot.store(version, Ordering::Release);
    gc::trim_chain(slot, horizon, full, guard);
    gc::holds_older(slot, guard)
}

/// Trim the queued chains whose record's CSN the readers' `horizon` has
/// passed, up to `max`; on the thread that applies, between runs (as
/// the reclaimer: an apply thread writes its chains' heads without a
/// CAS). Returns the versions retired.
pub(crate) fn retrim_due(
    tables: &[Arc<TableInner>],
    retrims: &Retrims,
    horizon: Csn,
    max: usize,
    guard: &Guard,
) -> usize {
    let mut due = gc::Due::new();
    retrims.cycle(&[], horizon, max, &mut due);
    crate::table::trim_due(tables, &due, horizon, guard)
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

#[cfg(test)]
pub(crate) mod tests {
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::index::OrderedIndex;
    use crate::log::record::{Op, Record, Records, patched};
    use crate::mvcc::oid_array::OidArray;
    use std::collections::HashMap;

    pub(crate) fn tables(n: u32) -> Vec<Arc<TableInner>> {
        (0..n)
            .map(|id| {
                Arc::new(TableInner {
                    id,
                    name: format!("t{id}"),
                    db_id: 1,
                    index: OrderedIndex::new(true),
                    records: OidArray::new(),
                    dropped: Default::default(),
                })
            })
            .collect()
    }

    /// Every key's chain, newest first: (CSN, value).
    type Chains = Vec<(u32, Vec<u8>, Vec<(Csn, Option<Vec<u8>>)>)>;

    fn chains(tables: &[Arc<TableInner>]) -> Chains {
        let guard = crossbeam_epoch::pin();
        let mut out = Vec::new();
        for t in tables {
            t.index.scan(
                std::ops::Bound::Unbounded,
                std::ops::Bound::Unbounded,
                crate::index::Direction::Forward,
                |k, rid| {
                    let mut chain = Vec::new();
                    let mut at = t.records.slot(rid).load(Ordering::Acquire, &guard);
                    // SAFETY: pinned by `guard`.
                    while let Some(v) = unsafe { at.as_ref() } {
                        let Stamp::Committed(csn) = v.stamp() else { panic!("uncommitted") };
                        chain.push((csn, v.value().map(<[u8]>::to_vec)));
                        at = v.next.load(Ordering::Acquire, &guard);
                    }
                    out.push((t.id, k.to_vec(), chain));
                    true
                },
            );
        }
        out
    }

    /// Random transactions over a few keys of two tables: inserts, whole
    /// updates, deltas on live values, deletes, aborts.
    pub(crate) fn workload(seed: u64, n: u64) -> Vec<Entry> {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let mut live: std::collections::HashMap<(u32, u8), usize> = Default::default();
        (1..=n)
            .map(|csn| {
                if rng.random_bool(0.05) {
                    return Entry::Abort { csn };
                }
                let mut records = Vec::new();
                for _ in 0..rng.random_range(1..6) {
                    let (table, k) = (rng.random_range(0..2u32), rng.random_range(0..40u8));
                    let key = Bytes::from(vec![b'k', k]);
                    let op = match (live.get(&(table, k)).copied(), rng.random_range(0..4)) {
                        (Some(len), 0) => {
                            let offset = rng.random_range(0..len) as u32;
                            let bytes =
                                vec![csn as u8; rng.random_range(0..=len - offset as usize)];
                            Op::Delta { offset, bytes: Bytes::from(bytes) }
                        }
                        (Some(_), 1) => {
                            live.remove(&(table, k));
                            Op::Delete
                        }
                        (was, _) => {
                            let len = rng.random_range(1..20);
                            live.insert((table, k), len);
                            let v = Bytes::from(vec![(csn >> 3) as u8; len]);
                            if was.is_some() { Op::Update(v) } else { Op::Insert(v) }
                        }
                    };
                    records.push(Record { table, key, op });
                }
                Entry::Commit { csn, dsn: 0, records: Records::new(&records) }
            })
            .collect()
    }

    #[test]
    fn partitioned_runs_build_the_chains_one_thread_builds() {
        for seed in 0..20 {
            let entries = workload(seed, 400);
            let one = tables(2);
            apply_partitioned(&one, &entries, 0, 1, false).expect("one thread");
            let many = tables(2);
            // In runs of varying length, as the follower applies them.
            let mut at = 0;
            let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
            while at < entries.len() {
                let end = (at + rng.random_range(1..120)).min(entries.len());
                apply_partitioned(&many, &entries[at..end], 0, 3, false).expect("three threads");
                at = end;
            }
            let (a, b) = (chains(&one), chains(&many));
            assert!(a.iter().any(|(_, _, c)| c.len() > 3), "seed {seed}: chains too short to test");
            assert_eq!(a, b, "seed {seed}");
        }
    }

    /// The whole values kept for a feed's tap are, record by record, what
    /// the deltas leave: checked against the rows rebuilt op by op.
    #[test]
    fn the_wholes_kept_for_a_tap_are_each_deltas_value_on_any_thread() {
        for seed in 0..20 {
            let entries = workload(seed, 400);
            let mut rows: HashMap<(u32, Bytes), Vec<u8>> = HashMap::new();
            let mut expected = Vec::new();
            for (i, e) in entries.iter().enumerate() {
                let Entry::Commit { records, .. } = e else { continue };
                for (j, r) in records.refs().enumerate() {
                    let id = (r.table, Bytes::copy_from_slice(r.key));
                    match r.op {
                        OpRef::Insert(v) | OpRef::Update(v) => {
                            rows.insert(id, v.to_vec());
                        }
                        OpRef::Delete => {
                            rows.remove(&id);
                        }
                        OpRef::Delta { offset, bytes } => {
                            let v = patched(&rows[&id], offset, bytes).expect("in bounds");
                            expected.push((i as u32, j as u32, v.clone()));
                            rows.insert(id, v);
                        }
                    }
                }
            }
            assert!(expected.len() > 50, "seed {seed}: too few deltas to test");
            for threads in [1, 3] {
                let (_, wholes) =
                    apply_batch(&tables(2), &entries, 0, threads, 1, &Retrims::default(), true)
                        .expect("applied");
                let got: Vec<_> =
                    wholes.into_iter().map(|w| (w.entry, w.record, w.value)).collect();
                assert_eq!(got, expected, "seed {seed}, {threads} threads");
            }
        }
    }

    #[test]
    fn a_delta_on_a_missing_key_is_corrupt_on_any_thread() {
        let delta = Record {
            table: 0,
            key: Bytes::from_static(b"nope"),
            op: Op::Delta { offset: 0, bytes: Bytes::from_static(b"x") },
        };
        let entries = vec![Entry::Commit { csn: 1, dsn: 0, records: Records::new(&[delta]) }];
        for threads in [1, 3] {
            let err =
                apply_partitioned(&tables(1), &entries, 0, threads, true).expect_err("corrupt");
            assert!(matches!(err, Error::Corrupt(_)), "{err}");
        }
    }
}
