//! Recovery: reading the log back and rebuilding the database (ARCHITECTURE.md,
//! invariants 3, 6 and 7).
//!
//! - [`fence`]: how a new writer stops the old one before it reads.
//! - [`scan_stores`] lists each store's live log (the manifest's
//!   [`LogRef`]: per group and lane, segments from `group_start`), fetches
//!   and decodes the objects in parallel, and walks each chain's parts (a
//!   chain is one lane of one group) in order until the first fence part.
//!   Damage at the very end of a chain (a torn last append) is truncated
//!   and reported. Damage with more of the chain after it, a missing
//!   segment or part, parts out of CSN order within a chain, or a part that
//!   names another group, is `Error::Corrupt` naming the object, unless
//!   another store holds that part and what follows intact: with several
//!   stores, each part is taken from whichever store has it. Chains of one
//!   group interleave in CSN order; a part lost at the end of one lane while
//!   later CSNs landed in another is a hole that the plan below handles.
//! - [`plan_replay`] applies the replay rule: with `P` the contiguous
//!   durable CSN prefix from the checkpoint on (every CSN from the
//!   checkpoint's up to `P` is in some group's log, commit or abort), a
//!   transaction is replayed iff its commit entry is in the log and its DSN
//!   is below `P`. That includes transactions above `P` that depended on
//!   nothing missing: record-level tracking may have acknowledged them.
//! - `replay` applies a plan on top of a checkpoint, in parallel by key,
//!   with the same result for any number of threads.

pub(crate) mod fence;
pub(crate) mod replay;
mod report;

pub use report::{PromotionReport, PromotionTimings, RecoveryReport, Timings, Truncated};

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use objstore::{ObjectStore, StoreError};

use crate::error::{Error, Result};
use crate::keys::{Chain, LOG_PREFIX, LogObject, parse_log_key};
use crate::log::decode::{DecodeError, decode_part};
use crate::log::record::{Entry, Part};
use crate::manifest::{LogRef, Manifest, ManifestStore, SealedLog};
use crate::mvcc::Csn;
use crate::parallel::parallel_map;

/// One chain (a lane of a log group) as found in the stores.
#[derive(Debug, Clone, Default)]
pub struct ChainLog {
    /// Its decoded parts, in log order, with the object each came from.
    pub parts: Vec<(String, Part)>,
    /// A torn tail that was cut off, if any.
    pub truncated: Option<Truncated>,
    /// The epoch of the first fence part found where no store had a part
    /// (the end of some store's copy), if any.
    pub fenced_by: Option<u64>,
}

/// Every chain's live log.
#[derive(Debug, Clone, Default)]
pub struct LogScan {
    /// By chain (group, then lane).
    pub chains: BTreeMap<Chain, ChainLog>,
    /// Objects read (all stores).
    pub objects: usize,
    /// Bytes read (all stores).
    pub bytes: u64,
    /// The first CSN the log must supply: the checkpoint covers the rest.
    pub from: Csn,
    /// Damage on one store that another store's copy covered.
    pub repaired: Vec<String>,
}

/// What recovery will replay.
#[derive(Debug, Clone, Default)]
pub struct ReplayPlan {
    /// Every CSN from the scan's `from` up to this is in the log: the
    /// contiguous durable prefix.
    pub prefix: Csn,
    /// The largest CSN found (0 if none).
    pub max_csn: Csn,
    /// Commit entries to replay, in CSN order.
    pub replay: Vec<Entry>,
    /// Commit entries found but not replayed (their DSN is not below the
    /// prefix: something they depend on may be lost), as (CSN, DSN).
    pub dropped: Vec<(Csn, Csn)>,
    /// Abort entries found.
    pub aborts: usize,
    /// Entries below `from`, already in the checkpoint.
    pub covered: usize,
}

fn corrupt(key: &str, what: impl std::fmt::Display) -> Error {
    Error::Corrupt(format!("{key}: {what}"))
}

/// Read one store's manifest and scan its live log: what `milliscale
/// inspect` and tests use on a single store.
pub fn scan_log(store: &Arc<dyn ObjectStore>) -> Result<(Manifest, LogScan)> {
    let stores = vec![("the store".to_owned(), Arc::clone(store))];
    let ms = ManifestStore::new(stores.clone(), 1, std::time::Duration::from_secs(30));
    let m = ms.read_latest()?.ok_or_else(|| Error::NoDatabase(stores[0].0.clone()))?;
    let scan =
        scan_stores(&stores, 1, &m.log, m.replay_from(), 4, std::time::Duration::from_secs(30))?;
    Ok((m, scan))
}

/// One log object, with its copy on each store that has it.
struct Copies {
    key: String,
    /// (store name, bytes).
    copies: Vec<(usize, Bytes)>,
}

/// Scan the live log `log` on `stores`, merging them; at least `needed`
/// stores must answer (each request is retried until `deadline`). `from`
/// is the checkpoint's CSN. `threads` fetch objects in parallel.
///
/// Every store holds the same parts at the same places (the group chooses
/// segments; a store's segment is a prefix of the same byte string, plus
/// maybe a fence part at its own end). So the merge walks each object
/// by offset and takes, at each offset, a part that some copy holds intact.
/// A valid part with entries wins over a fence part at the same place (a
/// lagging store was fenced earlier in the log than the others).
pub fn scan_stores(
    stores: &[(String, Arc<dyn ObjectStore>)],
    needed: usize,
    log: &LogRef,
    from: Csn,
    threads: usize,
    deadline: std::time::Duration,
) -> Result<LogScan> {
    scan_bounded(stores, needed, log, u64::MAX, from, threads, deadline)
}

/// [`scan_stores`] for a sealed log: from `seal.from`, and only segments
/// below `seal.end_segment` (the next epoch's log shares the chains'
/// names).
pub fn scan_sealed(
    stores: &[(String, Arc<dyn ObjectStore>)],
    needed: usize,
    seal: &SealedLog,
    threads: usize,
    deadline: std::time::Duration,
) -> Result<LogScan> {
    scan_bounded(stores, needed, &seal.log, seal.end_segment, seal.from, threads, deadline)
}

/// [`scan_stores`], reading only segments below `end_segment`.
fn scan_bounded(
    stores: &[(String, Arc<dyn ObjectStore>)],
    needed: usize,
    log: &LogRef,
    end_segment: u64,
    from: Csn,
    threads: usize,
    deadline: std::time::Duration,
) -> Result<LogScan> {
    let mut scan = LogScan { from, ..LogScan::default() };
    // List every store; then fetch every (store, object) in parallel.
    let mut wanted: Vec<(usize, String, u64)> = Vec::new();
    let mut objects: BTreeMap<LogObject, Copies> = BTreeMap::new();
    let mut errors = Vec::new();
    let mut answered = 0;
    for (i, (name, store)) in stores.iter().enumerate() {
        let listed = match crate::retry::retry(deadline, || store.list(LOG_PREFIX)) {
            Ok(l) => l,
            Err(e) => {
                errors.push(format!("{name}: {e}"));
                continue;
            }
        };
        answered += 1;
        for o in listed {
            let parsed =
                parse_log_key(&o.key).ok_or_else(|| corrupt(&o.key, "not a log object name"))?;
            if log.start(parsed.chain()).is_some_and(|start| parsed.segment() >= start)
                && parsed.segment() < end_segment
            {
                objects
                    .entry(parsed)
                    .or_insert_with(|| Copies { key: o.key.clone(), copies: Vec::new() });
                wanted.push((i, o.key, o.size));
            }
        }
    }
    if answered < needed.max(1) {
        return Err(Error::StoreUnavailable(format!(
            "reading the log: {answered} of {} stores answered, {needed} needed: {}",
            stores.len(),
            errors.join("; ")
        )));
    }
    let fetched = fetch_all(stores, &wanted, threads.max(1), deadline);
    for ((i, key, _), got) in wanted.iter().zip(fetched) {
        match got {
            Ok(b) => {
                scan.objects += 1;
                scan.bytes += b.len() as u64;
                let obj = parse_log_key(key).expect("parsed above");
                if let Some(c) = objects.get_mut(&obj) {
                    c.copies.push((*i, b));
                }
            }
            // Listed but gone or unreadable here: other copies may serve.
            Err(e) => scan.repaired.push(format!("{}: {key}: {e}", stores[*i].0)),
        }
    }
    let objects: Vec<(LogObject, Copies)> = objects.into_iter().collect();
    // Each chain's objects (sorted by chain, then segment), walked
    // (decoded) in parallel.
    let mut ranges = Vec::new();
    let mut i = 0;
    while i < objects.len() {
        let c = objects[i].0.chain();
        let end = i + objects[i..].iter().take_while(|(o, _)| o.chain() == c).count();
        ranges.push((c, i..end));
        i = end;
    }
    let walked = parallel_map(&ranges, threads, |(c, range)| {
        let mut repaired = Vec::new();
        let start = log.start(*c).expect("a chain of the log");
        let groups = log.chain_groups(*c);
        walk_chain(start, groups, &objects[range.clone()], stores, &mut repaired)
            .map(|l| (l, repaired))
    });
    for ((c, _), w) in ranges.iter().zip(walked) {
        let (chain, repaired) = w?;
        scan.repaired.extend(repaired);
        scan.chains.insert(*c, chain);
    }
    for c in log.chains() {
        scan.chains.entry(c).or_default();
    }
    Ok(scan)
}

/// Bytes per ranged GET when recovery reads a log object.
pub const FETCH_RANGE_BYTES: u64 = 8 << 20;

/// Fetch every (store, object) in ranges of [`FETCH_RANGE_BYTES`], many at
/// a time: a segment can hold gigabytes, and an object store serves one
/// connection at a fraction of its bandwidth. GETs wait on the network,
/// so `threads * 8` (at most 64) run at once.
fn fetch_all(
    stores: &[(String, Arc<dyn ObjectStore>)],
    wanted: &[(usize, String, u64)],
    threads: usize,
    deadline: std::time::Duration,
) -> Vec<std::result::Result<Bytes, StoreError>> {
    let mut ranges: Vec<(usize, std::ops::Range<u64>)> = Vec::new();
    for (w, (store, _, size)) in wanted.iter().enumerate() {
        if !stores[*store].1.prefers_ranged_reads() {
            ranges.push((w, 0..*size));
            continue;
        }
        let mut at = 0;
        loop {
            let end = (at + FETCH_RANGE_BYTES).min(*size);
            ranges.push((w, at..end));
            at = end;
            if at >= *size {
                break;
            }
        }
    }
    let got = parallel_map(&ranges, (threads * 8).clamp(1, 64), |(w, range)| {
        let (store, key, size) = &wanted[*w];
        let whole = range.start == 0 && range.end == *size;
        let r = crate::retry::retry(deadline, || {
            if whole {
                stores[*store].1.get(key)
            } else {
                stores[*store].1.get_range(key, range.clone())
            }
        });
        // The object is frozen (its writer is fenced): a range that comes
        // back short means it changed.
        r.and_then(|b| {
            if whole || b.len() as u64 == range.end - range.start {
                Ok(b)
            } else {
                Err(StoreError::Transient(format!("{key}: a short range read")))
            }
        })
    });
    // Reassemble each object from its ranges.
    let mut out: Vec<std::result::Result<Vec<Bytes>, StoreError>> =
        wanted.iter().map(|_| Ok(Vec::new())).collect();
    for ((w, _), r) in ranges.iter().zip(got) {
        match (&mut out[*w], r) {
            (Ok(parts), Ok(b)) => parts.push(b),
            (slot @ Ok(_), Err(e)) => *slot = Err(e),
            (Err(_), _) => {}
        }
    }
    out.into_iter()
        .map(|r| {
            r.map(|mut parts| {
                if parts.len() == 1 {
                    parts.pop().expect("one")
                } else {
                    Bytes::from(parts.concat())
                }
            })
        })
        .collect()
}

/// What is at one place of the log, across the copies.
enum AtPlace {
    Part(Part, usize),
    Fence(u64),
    End,
    Damage(DecodeError),
}

/// Decode the part at `offset` of each copy; prefer a part with entries.
fn part_at(
    key: &str,
    copies: &[(usize, Bytes)],
    offset: usize,
    stores: &[(String, Arc<dyn ObjectStore>)],
    repaired: &mut Vec<String>,
) -> Result<AtPlace> {
    let mut fence = None;
    let mut good: Option<(Part, usize)> = None;
    let mut bad = Vec::new();
    let mut any = false;
    for (store, bytes) in copies {
        if bytes.len() <= offset {
            continue;
        }
        any = true;
        match decode_part(&bytes.slice(offset..)) {
            Ok((p, _)) if p.fence.is_some() => fence = p.fence,
            Ok((p, n)) => match &good {
                Some((q, m)) if *q != p || *m != n => {
                    return Err(corrupt(
                        key,
                        format!("stores hold different parts at offset {offset}"),
                    ));
                }
                Some(_) => {}
                None => good = Some((p, n)),
            },
            Err(e) => bad.push((*store, e)),
        }
    }
    Ok(match (good, fence) {
        (Some((p, n)), _) => {
            for (store, e) in bad {
                repaired.push(format!("{}: {key} at offset {offset}: {e}", stores[store].0));
            }
            AtPlace::Part(p, n)
        }
        // Damage wins over a fence: a fence only ends the copy it is in.
        (None, _) if !bad.is_empty() => AtPlace::Damage(bad.swap_remove(0).1),
        (None, Some(epoch)) => AtPlace::Fence(epoch),
        (None, None) => {
            debug_assert!(!any);
            AtPlace::End
        }
    })
}

/// Walk one chain's objects in order, merging the stores' copies, up to a
/// fence part or a torn tail. The chain holds parts of `groups` (its
/// stream's), each group's in CSN order.
fn walk_chain(
    start: u64,
    groups: std::ops::Range<u32>,
    objects: &[(LogObject, Copies)],
    stores: &[(String, Arc<dyn ObjectStore>)],
    repaired: &mut Vec<String>,
) -> Result<ChainLog> {
    let mut out = ChainLog::default();
    // Per group of the stream, the last CSN seen in this chain.
    let mut last_csn: BTreeMap<u32, Csn> = BTreeMap::new();
    let mut prev: Option<LogObject> = None;
    for (idx, (obj, c)) in objects.iter().enumerate() {
        let key = &c.key;
        if c.copies.is_empty() {
            return Err(corrupt(key, "listed, but no store could read it"));
        }
        if !follows(prev, *obj, start) {
            return Err(corrupt(key, "a log object before it is missing"));
        }
        prev = Some(*obj);
        let later_valid = || {
            objects[idx + 1..].iter().any(|(_, c)| {
                c.copies.iter().any(|(_, b)| {
                    matches!(decode_part(b), Ok((p, _)) if p.fence.is_none())
                        || !nothing_valid_after(b)
                })
            })
        };
        let mut offset = 0;
        loop {
            match part_at(key, &c.copies, offset, stores, repaired)? {
                AtPlace::End => break,
                // This store's copy was fenced here. Another store may
                // have been fenced later in the log (this one lagged), so
                // the walk goes on to the next object; the log ends where
                // no store has a part.
                AtPlace::Fence(epoch) => {
                    out.fenced_by.get_or_insert(epoch);
                    break;
                }
                AtPlace::Part(p, n) => {
                    if !groups.contains(&p.group) {
                        return Err(corrupt(key, format!("holds a part of group {}", p.group)));
                    }
                    let last = last_csn.get(&p.group).copied();
                    if let (Some(last), Some(first)) = (last, p.entries.first().map(Entry::csn))
                        && first <= last
                    {
                        return Err(corrupt(
                            key,
                            format!("CSN {first} after CSN {last} of group {}", p.group),
                        ));
                    }
                    if let Some(e) = p.entries.last() {
                        last_csn.insert(p.group, e.csn());
                    }
                    out.parts.push((key.clone(), p));
                    offset += n;
                }
                AtPlace::Damage(error) => {
                    let tail =
                        c.copies.iter().all(|(_, b)| {
                            b.len() <= offset || nothing_valid_after(&b.slice(offset..))
                        }) && !later_valid();
                    let len = c.copies.iter().map(|(_, b)| b.len()).max().unwrap_or(0);
                    if !tail {
                        return Err(corrupt(
                            key,
                            format!("damaged at offset {offset} with log after it: {error}"),
                        ));
                    }
                    out.truncated = Some(Truncated {
                        key: key.clone(),
                        offset: offset as u64,
                        bytes: (len - offset) as u64,
                        error,
                    });
                    return Ok(out);
                }
            }
        }
    }
    Ok(out)
}

/// Is the damage at `damaged[0]` a torn tail: is there no valid part with
/// entries anywhere after it? (A new writer may have appended fence parts
/// after a torn append.) A corrupt length field hides where the next part
/// starts, so every later occurrence of the part magic is tried.
fn nothing_valid_after(damaged: &Bytes) -> bool {
    let magic = crate::log::record::PART_MAGIC;
    (1..damaged.len().saturating_sub(3))
        .filter(|&i| damaged[i..i + 4] == magic)
        .all(|i| !matches!(decode_part(&damaged.slice(i..)), Ok((p, _)) if p.fence.is_none()))
}

/// A chain's objects must follow each other without gaps, from its start
/// segment: segments by one, parts by one within a segment, a new segment
/// at part 0.
fn follows(prev: Option<LogObject>, next: LogObject, start: u64) -> bool {
    use LogObject::{Part, Segment};
    match (prev, next) {
        (None, Segment { segment, .. }) => segment == start,
        (None, Part { segment, part, .. }) => segment == start && part == 0,
        (Some(Segment { segment: s, .. }), Segment { segment: t, .. }) => t == s + 1,
        (Some(Part { segment: s, part: p, .. }), Part { segment: t, part: q, .. }) => {
            (t == s && q == p + 1) || (t == s + 1 && q == 0)
        }
        _ => false,
    }
}

/// Apply the replay rule to a scanned log. Fails with `Corrupt` if two
/// entries carry one CSN (invariant 1 says each CSN is logged once).
pub fn plan_replay(scan: &LogScan) -> Result<ReplayPlan> {
    plan_replay_owned(scan.clone())
}

/// [`plan_replay`], taking the scan so that entries move into the plan
/// instead of being copied (recovery of a large log).
pub fn plan_replay_owned(scan: LogScan) -> Result<ReplayPlan> {
    let from = scan.from;
    let (entries, covered) = entries_by_csn(scan)?;
    let mut prefix = from;
    for e in &entries {
        if e.csn() != prefix {
            break;
        }
        prefix += 1;
    }
    let mut plan = ReplayPlan {
        prefix,
        max_csn: entries.last().map_or(0, Entry::csn),
        covered,
        replay: Vec::with_capacity(entries.len()),
        ..ReplayPlan::default()
    };
    for e in entries {
        match e {
            Entry::Abort { .. } => plan.aborts += 1,
            Entry::Commit { dsn, .. } if dsn < prefix => plan.replay.push(e),
            Entry::Commit { csn, dsn, .. } => plan.dropped.push((csn, dsn)),
        }
    }
    Ok(plan)
}

/// Plan the replay of a sealed log (scanned from `seal.from`) as its seal
/// decided. Fails with `Corrupt` if the log no longer holds what the
/// decision was made on: a CSN below the seal's prefix, or a listed commit
/// above it, is missing.
pub fn plan_sealed(scan: LogScan, seal: &SealedLog) -> Result<ReplayPlan> {
    let (entries, covered) = entries_by_csn(scan)?;
    let mut plan = ReplayPlan { covered, ..ReplayPlan::default() };
    let mut next = seal.from;
    for e in entries {
        let csn = e.csn();
        if csn < seal.prefix {
            if csn != next {
                break;
            }
            next += 1;
        }
        if !seal.includes(csn) {
            if let Entry::Commit { dsn, .. } = e {
                plan.dropped.push((csn, dsn));
            }
            continue;
        }
        match e {
            Entry::Abort { .. } => plan.aborts += 1,
            Entry::Commit { .. } => plan.replay.push(e),
        }
    }
    if next < seal.prefix {
        return Err(Error::Corrupt(format!(
            "the sealed log of epoch {}: CSN {next} is missing, but the seal says every CSN \
             from {} to {} is there",
            seal.log.epoch,
            seal.from,
            seal.prefix - 1
        )));
    }
    let found: std::collections::BTreeSet<Csn> =
        plan.replay.iter().map(Entry::csn).filter(|c| *c >= seal.prefix).collect();
    if let Some(missing) = seal.above.iter().find(|c| !found.contains(c)) {
        return Err(Error::Corrupt(format!(
            "the sealed log of epoch {}: commit {missing} is missing, but the seal replays it",
            seal.log.epoch
        )));
    }
    plan.prefix = seal.prefix;
    plan.max_csn = seal.max_csn;
    Ok(plan)
}

/// Every entry of `scan` at or above its `from`, sorted by CSN, and the
/// number below it. Fails with `Corrupt` if two entries carry one CSN
/// (invariant 1 says each CSN is logged once).
fn entries_by_csn(scan: LogScan) -> Result<(Vec<Entry>, usize)> {
    let from = scan.from;
    let mut covered = 0;
    // Object keys, for error messages; entries point into them.
    let mut keys: Vec<String> = Vec::new();
    // Sized once: the entries are moved, not copied again as it grows.
    let n = scan.chains.values().flat_map(|c| &c.parts).map(|(_, p)| p.entries.len()).sum();
    let mut entries: Vec<(Entry, usize)> = Vec::with_capacity(n);
    // Every chain's entries, merged by CSN: lanes of one group interleave.
    for c in scan.chains.into_values() {
        for (key, part) in c.parts {
            if keys.last() != Some(&key) {
                keys.push(key);
            }
            let k = keys.len() - 1;
            for e in part.entries {
                if e.csn() < from {
                    covered += 1;
                } else {
                    entries.push((e, k));
                }
            }
        }
    }
    // Each chain's entries are in CSN order already: a stable sort merges
    // those runs instead of sorting from scratch.
    entries.sort_by_key(|(e, _)| e.csn());
    if let Some(w) = entries.windows(2).find(|w| w[0].0.csn() == w[1].0.csn()) {
        return Err(corrupt(&keys[w[1].1], format!("CSN {} is logged twice", w[1].0.csn())));
    }
    Ok((entries.into_iter().map(|(e, _)| e).collect(), covered))
}

/// Fence `log` on every store that answers (`fence`); a quorum must be
/// fenced, or the old writer could still reach one.
pub(crate) fn fence_stores(
    stores: &[(String, Arc<dyn ObjectStore>)],
    modes: &[crate::log::segment::WriteMode],
    needed: usize,
    log: &LogRef,
    epoch: u64,
    deadline: std::time::Duration,
) -> Result<()> {
    let mut fenced = 0;
    let mut errors = Vec::new();
    for ((name, s), mode) in stores.iter().zip(modes) {
        match fence::fence_store(s, *mode, log, epoch, deadline) {
            Ok(()) => fenced += 1,
            Err(e) => errors.push(format!("{name}: {e}")),
        }
    }
    if fenced < needed {
        return Err(Error::StoreUnavailable(format!(
            "fencing the old writer: {fenced} of {} stores fenced, {needed} needed: {}",
            stores.len(),
            errors.join("; ")
        )));
    }
    Ok(())
}

/// The first segment number above every log object on every store that
/// answers, and above `log`'s starts: where a new epoch's groups start.
pub(crate) fn next_free_segment(
    stores: &[(String, Arc<dyn ObjectStore>)],
    log: &LogRef,
    deadline: std::time::Duration,
) -> u64 {
    let mut next = log.group_start.iter().max().copied().unwrap_or(0);
    for (_, s) in stores {
        if let Ok(list) = crate::retry::retry(deadline, || s.list(LOG_PREFIX)) {
            for o in list {
                if let Some(obj) = parse_log_key(&o.key) {
                    next = next.max(obj.segment() + 1);
                }
            }
        }
    }
    next
}
