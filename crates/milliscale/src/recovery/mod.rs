//! Recovery: reading the log back and rebuilding the database (DESIGN.md
//! invariants 3, 6 and 7).
//!
//! - [`fence`]: how a new writer stops the old one before it reads.
//! - [`scan_stores`] lists each store's live log (the manifest's
//!   [`LogRef`]: per group, segments from `group_start`), fetches and
//!   decodes the objects in parallel, and walks each group's parts in order
//!   until the first fence part. Damage at the very end of a group's log (a
//!   torn last append) is truncated and reported. Damage with more log
//!   after it, a missing segment or part, parts out of CSN order, or a part
//!   that names another group, is `Error::Corrupt` naming the object,
//!   unless another store holds that part and what follows intact: with
//!   several stores, each part is taken from whichever store has it.
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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use objstore::{ObjectStore, StoreError};

use crate::error::{Error, Result};
use crate::log::record::{DecodeError, Entry, Part, decode_part, decode_segment};
use crate::manifest::{LogRef, Manifest, ManifestStore};
use crate::mvcc::Csn;

/// Where a group's log was cut, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Truncated {
    /// The object holding the damaged bytes.
    pub key: String,
    /// Byte offset of the first dropped byte in that object.
    pub offset: u64,
    /// Bytes dropped.
    pub bytes: u64,
    /// What was wrong with them.
    pub error: DecodeError,
}

/// One log group as found in the stores.
#[derive(Debug, Clone, Default)]
pub struct GroupLog {
    /// Its decoded parts, in log order, with the object each came from.
    pub parts: Vec<(String, Part)>,
    /// A torn tail that was cut off, if any.
    pub truncated: Option<Truncated>,
    /// The epoch of the writer whose fence part ended this log, if any.
    pub fenced_by: Option<u64>,
}

/// Every group's live log.
#[derive(Debug, Clone, Default)]
pub struct LogScan {
    /// By group id.
    pub groups: BTreeMap<u32, GroupLog>,
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

/// Which object of a group's log a key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LogObject {
    /// `log/gGGGG/sSSSSSSSS`: an appended segment.
    Segment { group: u32, segment: u64 },
    /// `log/gGGGG/sSSSSSSSS/pPPPPP`: one part in put mode.
    Part { group: u32, segment: u64, part: u32 },
}

impl LogObject {
    pub(crate) fn segment(&self) -> u64 {
        match self {
            LogObject::Segment { segment, .. } | LogObject::Part { segment, .. } => *segment,
        }
    }

    pub(crate) fn group(&self) -> u32 {
        match self {
            LogObject::Segment { group, .. } | LogObject::Part { group, .. } => *group,
        }
    }
}

pub(crate) fn parse_key(key: &str) -> Option<LogObject> {
    let rest = key.strip_prefix("log/g")?;
    let (g, rest) = rest.split_once("/s")?;
    let group = g.parse().ok()?;
    match rest.split_once("/p") {
        None => Some(LogObject::Segment { group, segment: rest.parse().ok()? }),
        Some((s, p)) => {
            Some(LogObject::Part { group, segment: s.parse().ok()?, part: p.parse().ok()? })
        }
    }
}

fn corrupt(key: &str, what: impl std::fmt::Display) -> Error {
    Error::Corrupt(format!("{key}: {what}"))
}

fn store_error(name: &str, key: &str, e: StoreError) -> Error {
    Error::Store(format!("{name}: reading {key}: {e}"))
}

/// Read one store's manifest and scan its live log: what `milliscale
/// inspect` and tests use on a single store.
pub fn scan_log(store: &Arc<dyn ObjectStore>) -> Result<(Manifest, LogScan)> {
    let stores = vec![("store".to_owned(), Arc::clone(store))];
    let ms = ManifestStore::new(stores.clone(), 1, std::time::Duration::from_secs(30));
    let m = ms.read_latest()?.ok_or_else(|| {
        Error::InvalidArgument("the store holds no database (no manifest/ objects)".into())
    })?;
    let scan = scan_stores(&stores, 1, &m.log, m.replay_from(), 4)?;
    Ok((m, scan))
}

/// A part's place in a group's log: (segment, part number in the segment).
type Pos = (u64, u32);

/// Damage found on one store.
#[derive(Debug, Clone)]
struct Damage {
    truncated: Truncated,
    /// Nothing but fence parts follows it.
    at_tail: bool,
}

#[derive(Debug, Default)]
struct StoreGroup {
    parts: Vec<(Pos, String, Part)>,
    damage: Option<Damage>,
    fenced_by: Option<u64>,
}

/// Scan the live log `log` on `stores`, merging them; at least `needed`
/// stores must answer. `from` is the checkpoint's CSN. `threads` fetch and
/// decode objects in parallel.
pub fn scan_stores(
    stores: &[(String, Arc<dyn ObjectStore>)],
    needed: usize,
    log: &LogRef,
    from: Csn,
    threads: usize,
) -> Result<LogScan> {
    let mut scan = LogScan { from, ..LogScan::default() };
    let mut per_store = Vec::new();
    let mut errors = Vec::new();
    for (name, store) in stores {
        match scan_store(name, store.as_ref(), log, threads.max(1), &mut scan) {
            Ok(groups) => per_store.push((name.clone(), groups)),
            Err(e @ Error::Corrupt(_)) => return Err(e),
            Err(e) => errors.push(e.to_string()),
        }
    }
    if per_store.len() < needed.max(1) {
        return Err(Error::StoreUnavailable(format!(
            "reading the log: {} of {} stores answered, {} needed: {}",
            per_store.len(),
            stores.len(),
            needed,
            errors.join("; ")
        )));
    }
    for g in 0..log.groups {
        let mut views: Vec<(&str, StoreGroup)> = per_store
            .iter_mut()
            .map(|(n, groups)| (n.as_str(), groups.remove(&g).unwrap_or_default()))
            .collect();
        scan.groups.insert(g, merge_group(&mut views, &mut scan.repaired)?);
    }
    Ok(scan)
}

/// Merge one group's views: each store holds a prefix of the same parts.
fn merge_group(views: &mut [(&str, StoreGroup)], repaired: &mut Vec<String>) -> Result<GroupLog> {
    let longest = (0..views.len()).max_by_key(|&i| views[i].1.parts.len()).unwrap_or(0);
    let Some((_, best)) = views.get(longest) else { return Ok(GroupLog::default()) };
    let n = best.parts.len();
    for (name, v) in views.iter() {
        for (i, (pos, key, p)) in v.parts.iter().enumerate() {
            let (bpos, _, bp) = &best.parts[i];
            if pos != bpos || p != bp {
                return Err(corrupt(key, format!("on {name} differs from the other stores' part")));
            }
        }
        if let Some(d) = &v.damage
            && !d.at_tail
        {
            if v.parts.len() >= n {
                let t = &d.truncated;
                return Err(corrupt(
                    &t.key,
                    format!("damaged at offset {} with log after it: {}", t.offset, t.error),
                ));
            }
            repaired.push(format!("{name}: {}: {}", d.truncated.key, d.truncated.error));
        }
    }
    let best = std::mem::take(&mut views[longest].1);
    // The longest view's tail damage is what this group lost; shorter
    // stores' damage was covered by it.
    for (name, v) in views.iter() {
        if let Some(d) = &v.damage
            && d.at_tail
            && v.parts.len() < n
        {
            repaired.push(format!("{name}: {}: {}", d.truncated.key, d.truncated.error));
        }
    }
    Ok(GroupLog {
        parts: best.parts.into_iter().map(|(_, k, p)| (k, p)).collect(),
        truncated: best.damage.map(|d| d.truncated),
        fenced_by: best.fenced_by,
    })
}

/// List, fetch (in parallel) and walk one store's live log.
fn scan_store(
    name: &str,
    store: &dyn ObjectStore,
    log: &LogRef,
    threads: usize,
    scan: &mut LogScan,
) -> Result<BTreeMap<u32, StoreGroup>> {
    let mut objects: Vec<(LogObject, String)> = Vec::new();
    for o in store.list("log/").map_err(|e| store_error(name, "log/", e))? {
        let parsed = parse_key(&o.key).ok_or_else(|| corrupt(&o.key, "not a log object name"))?;
        let g = parsed.group();
        if g < log.groups && parsed.segment() >= log.group_start[g as usize] {
            objects.push((parsed, o.key));
        }
    }
    objects.sort();
    let fetched = fetch_all(name, store, &objects, threads)?;
    scan.objects += fetched.len();
    scan.bytes += fetched.iter().map(|b| b.len() as u64).sum::<u64>();

    let mut groups: BTreeMap<u32, StoreGroup> = BTreeMap::new();
    let mut i = 0;
    while i < objects.len() {
        let g = objects[i].0.group();
        let end = i + objects[i..].iter().take_while(|(o, _)| o.group() == g).count();
        let sg = walk_group(g, log.group_start[g as usize], &objects[i..end], &fetched[i..end]);
        groups.insert(g, sg);
        i = end;
    }
    Ok(groups)
}

fn fetch_all(
    name: &str,
    store: &dyn ObjectStore,
    objects: &[(LogObject, String)],
    threads: usize,
) -> Result<Vec<Bytes>> {
    let next = AtomicUsize::new(0);
    let results: Vec<parking_lot::Mutex<Option<Result<Bytes>>>> =
        (0..objects.len()).map(|_| parking_lot::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads.min(objects.len()) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((_, key)) = objects.get(i) else { break };
                    let r = crate::manifest::retry(std::time::Duration::from_secs(30), || {
                        store.get(key)
                    })
                    .map_err(|e| store_error(name, key, e));
                    *results[i].lock() = Some(r);
                }
            });
        }
    });
    results.into_iter().map(|m| m.into_inner().expect("every object fetched")).collect()
}

/// Walk one group's objects on one store, in order, up to a fence part or
/// the first damage.
fn walk_group(
    group: u32,
    start: u64,
    objects: &[(LogObject, String)],
    bytes: &[Bytes],
) -> StoreGroup {
    let mut sg = StoreGroup::default();
    let mut prev: Option<LogObject> = None;
    for (idx, ((obj, key), data)) in objects.iter().zip(bytes).enumerate() {
        let rest_is_fences = || bytes[idx + 1..].iter().all(only_fences);
        let damage = |offset: usize, error: DecodeError, at_tail: bool| Damage {
            truncated: Truncated {
                key: key.clone(),
                offset: offset as u64,
                bytes: (data.len() - offset) as u64,
                error,
            },
            at_tail,
        };
        if !follows(prev, *obj, start) {
            sg.damage = Some(damage(
                0,
                DecodeError::Malformed("a log object before it is missing".into()),
                false,
            ));
            return sg;
        }
        prev = Some(*obj);
        let (parts, bad) = match obj {
            LogObject::Segment { .. } => decode_segment(data),
            LogObject::Part { .. } => match decode_part(data) {
                Ok((p, n)) if n == data.len() => (vec![p], None),
                Ok((p, n)) => {
                    (vec![p], Some((n, DecodeError::Malformed("bytes after the part".into()))))
                }
                Err(e) => (vec![], Some((0, e))),
            },
        };
        let first_ordinal = match obj {
            LogObject::Part { part, .. } => *part,
            LogObject::Segment { .. } => 0,
        };
        for (k, p) in parts.into_iter().enumerate() {
            if p.fence.is_some() {
                sg.fenced_by = p.fence;
                return sg;
            }
            if p.group != group {
                let e = DecodeError::Malformed(format!("holds a part of group {}", p.group));
                sg.damage = Some(damage(0, e, false));
                return sg;
            }
            let last = sg.parts.last().and_then(|(_, _, q)| q.entries.last()).map(Entry::csn);
            if let (Some(last), Some(first)) = (last, p.entries.first().map(Entry::csn))
                && first <= last
            {
                let e = DecodeError::Malformed(format!("CSN {first} after CSN {last}"));
                sg.damage = Some(damage(0, e, false));
                return sg;
            }
            sg.parts.push(((obj.segment(), first_ordinal + k as u32), key.clone(), p));
        }
        if let Some((offset, error)) = bad {
            let at_tail = fences_after(&data[offset..]) && rest_is_fences();
            sg.damage = Some(damage(offset, error, at_tail));
            return sg;
        }
    }
    sg
}

/// Bytes that are whole fence parts, and nothing else.
fn only_fences(b: &Bytes) -> bool {
    let mut at = 0;
    while at < b.len() {
        match decode_part(&b.slice(at..)) {
            Ok((p, n)) if p.fence.is_some() => at += n,
            _ => return false,
        }
    }
    true
}

/// Damaged bytes followed by nothing but fence parts: a torn last append,
/// after which a new writer may have appended its fence. The fence parts
/// are found from the end.
fn fences_after(damaged: &[u8]) -> bool {
    let fence_len = crate::log::record::fence_part(0, 0).len();
    let mut end = damaged.len();
    while end >= fence_len {
        let tail = Bytes::copy_from_slice(&damaged[end - fence_len..end]);
        match decode_part(&tail) {
            Ok((p, n)) if n == fence_len && p.fence.is_some() => end -= fence_len,
            _ => break,
        }
    }
    // Whatever is left is the torn part; it cannot be a whole valid part.
    end == damaged.len() || decode_part(&Bytes::copy_from_slice(&damaged[..end])).is_err()
}

/// A group's objects must follow each other without gaps, from its start
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
    let mut by_csn: BTreeMap<Csn, &Entry> = BTreeMap::new();
    let mut covered = 0;
    for (key, part) in scan.groups.values().flat_map(|g| &g.parts) {
        for e in &part.entries {
            if e.csn() < scan.from {
                covered += 1;
                continue;
            }
            if by_csn.insert(e.csn(), e).is_some() {
                return Err(corrupt(key, format!("CSN {} is logged twice", e.csn())));
            }
        }
    }
    let mut prefix = scan.from;
    while by_csn.contains_key(&prefix) {
        prefix += 1;
    }
    let mut plan = ReplayPlan {
        prefix,
        max_csn: by_csn.last_key_value().map_or(0, |(c, _)| *c),
        covered,
        ..ReplayPlan::default()
    };
    for (csn, e) in by_csn {
        match e {
            Entry::Abort { .. } => plan.aborts += 1,
            Entry::Commit { dsn, .. } if *dsn < prefix => plan.replay.push(e.clone()),
            Entry::Commit { dsn, .. } => plan.dropped.push((csn, *dsn)),
        }
    }
    Ok(plan)
}

/// How long each step of recovery took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    /// Taking over and fencing the old writer.
    pub fence: std::time::Duration,
    /// Listing, fetching and decoding the log, and planning.
    pub scan: std::time::Duration,
    /// Loading the checkpoint.
    pub load_checkpoint: std::time::Duration,
    /// Replaying the log.
    pub replay: std::time::Duration,
    /// Writing the new checkpoint and publishing the manifest.
    pub checkpoint_and_publish: std::time::Duration,
    /// All of it.
    pub total: std::time::Duration,
}

/// What recovery found and did when it opened an existing database.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// The manifest version and epoch it found.
    pub found_version: u64,
    /// The epoch of the writer it took over from.
    pub old_epoch: u64,
    /// The epoch it writes as.
    pub new_epoch: u64,
    /// The checkpoint it loaded: CSN, chunks, rows.
    pub checkpoint: Option<(Csn, usize, u64)>,
    /// Rows loaded from it.
    pub checkpoint_rows_loaded: u64,
    /// Log objects and bytes read (all stores).
    pub log_objects: usize,
    /// Log bytes read (all stores).
    pub log_bytes: u64,
    /// Per group: parts found, and a torn tail cut off, if any.
    pub groups: Vec<(u32, usize, Option<Truncated>)>,
    /// Damage on one store that another store's copy covered.
    pub repaired: Vec<String>,
    /// The contiguous durable CSN prefix.
    pub prefix: Csn,
    /// The largest CSN in the log.
    pub max_csn: Csn,
    /// Transactions replayed.
    pub replayed: usize,
    /// Transactions found but not replayed (DSN not below the prefix), as
    /// (CSN, DSN).
    pub dropped: Vec<(Csn, Csn)>,
    /// Abort entries found.
    pub aborts: usize,
    /// Records applied and keys installed by replay.
    pub records_applied: u64,
    /// Keys installed by replay.
    pub keys_installed: u64,
    /// The checkpoint recovery wrote, if the log held anything.
    pub new_checkpoint_csn: Option<Csn>,
    /// Requests spent deleting what the new checkpoint superseded.
    pub cleanup_requests: u64,
    /// Threads used.
    pub threads: usize,
    /// Time per step.
    pub timings: Timings,
}

impl RecoveryReport {
    pub(crate) fn new(
        old: &Manifest,
        claim: &Manifest,
        scan: &LogScan,
        plan: &ReplayPlan,
        threads: usize,
    ) -> RecoveryReport {
        RecoveryReport {
            found_version: old.version,
            old_epoch: old.epoch,
            new_epoch: claim.epoch,
            checkpoint: old.checkpoint.as_ref().map(|c| (c.csn, c.chunks.len(), c.rows)),
            log_objects: scan.objects,
            log_bytes: scan.bytes,
            groups: scan
                .groups
                .iter()
                .map(|(g, l)| (*g, l.parts.len(), l.truncated.clone()))
                .collect(),
            repaired: scan.repaired.clone(),
            prefix: plan.prefix,
            max_csn: plan.max_csn,
            replayed: plan.replay.len(),
            dropped: plan.dropped.clone(),
            aborts: plan.aborts,
            threads,
            ..RecoveryReport::default()
        }
    }
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
) -> Result<u64> {
    let mut next = log.group_start.iter().max().copied().unwrap_or(0);
    for (_, s) in stores {
        if let Ok(list) = crate::manifest::retry(deadline, || s.list("log/")) {
            for o in list {
                if let Some(obj) = parse_key(&o.key) {
                    next = next.max(obj.segment() + 1);
                }
            }
        }
    }
    Ok(next)
}
