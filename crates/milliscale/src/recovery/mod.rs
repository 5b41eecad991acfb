//! Reading a log back: the first half of recovery (DESIGN.md invariants 3
//! and 7).
//!
//! [`scan_log`] lists a store's `log/` objects, groups them by log group,
//! and decodes every part in order. Damage at the very end of a group's log
//! (a torn last append) is truncated and reported; damage anywhere else
//! (a bad part followed by more parts, a missing segment or part, parts out
//! of CSN order, a part that names another group) is `Error::Corrupt`,
//! naming the object: the log cannot be trusted past it, and guessing would
//! load wrong data.
//!
//! [`plan_replay`] applies the replay rule: with `P` the contiguous durable
//! CSN prefix (every CSN below `P` is in some group's log, commit or abort),
//! a transaction is replayed iff its commit entry is in the log and its DSN
//! is below `P`. That includes transactions above `P` that depended on
//! nothing missing: record-level tracking may have acknowledged them.
//!
//! Not yet: the manifest (which records what a recovery included, so that
//! later recoveries replay exactly the same prefix), checkpoints, merging
//! several stores, and applying the plan to a database (issue 5).

use std::collections::BTreeMap;

use objstore::{ObjectStore, StoreError};

use crate::error::{Error, Result};
use crate::log::record::{DecodeError, Entry, Part, decode_part, decode_segment};
use crate::mvcc::{CSN_FIRST, Csn};

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

/// One log group as found in the store.
#[derive(Debug, Clone, Default)]
pub struct GroupLog {
    /// Its decoded parts, in log order, with the object each came from.
    pub parts: Vec<(String, Part)>,
    /// A torn tail that was cut off, if any.
    pub truncated: Option<Truncated>,
}

/// Every group's log in a store.
#[derive(Debug, Clone, Default)]
pub struct LogScan {
    /// By group id.
    pub groups: BTreeMap<u32, GroupLog>,
    /// Objects read.
    pub objects: usize,
    /// Bytes read.
    pub bytes: u64,
}

/// What recovery will replay.
#[derive(Debug, Clone, Default)]
pub struct ReplayPlan {
    /// Every CSN below this is in the log: the contiguous durable prefix.
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
}

/// Which object of a group's log a key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum LogObject {
    /// `log/gGGGG/sSSSSSSSS`: an appended segment.
    Segment { group: u32, segment: u64 },
    /// `log/gGGGG/sSSSSSSSS/pPPPPP`: one part in put mode.
    Part { group: u32, segment: u64, part: u32 },
}

fn parse_key(key: &str) -> Option<LogObject> {
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

fn store_error(key: &str, e: StoreError) -> Error {
    Error::Store(format!("reading {key}: {e}"))
}

/// Read and decode every group's log in `store`. See the module docs.
pub fn scan_log(store: &dyn ObjectStore) -> Result<LogScan> {
    let mut objects: BTreeMap<LogObject, String> = BTreeMap::new();
    for o in store.list("log/").map_err(|e| store_error("log/", e))? {
        let parsed = parse_key(&o.key).ok_or_else(|| corrupt(&o.key, "not a log object name"))?;
        objects.insert(parsed, o.key);
    }
    let mut scan = LogScan::default();
    // Where the previous object of the current group ended, for gap checks.
    let mut prev: Option<LogObject> = None;
    for (obj, key) in objects {
        let group = group_of(obj);
        let log = scan.groups.entry(group).or_default();
        if let Some(t) = &log.truncated {
            return Err(corrupt(
                &key,
                format!("found after damage in {} at offset {}: {}", t.key, t.offset, t.error),
            ));
        }
        check_follows(prev, obj, &key)?;
        prev = Some(obj);
        let bytes = store.get(&key).map_err(|e| store_error(&key, e))?;
        scan.objects += 1;
        scan.bytes += bytes.len() as u64;
        let (parts, damage) = match obj {
            LogObject::Segment { .. } => decode_segment(&bytes),
            LogObject::Part { .. } => match decode_part(&bytes) {
                Ok((p, n)) if n == bytes.len() => (vec![p], None),
                Ok((p, n)) => {
                    (vec![p], Some((n, DecodeError::Malformed("bytes after the part".into()))))
                }
                Err(e) => (vec![], Some((0, e))),
            },
        };
        for p in parts {
            if p.group != group {
                return Err(corrupt(&key, format!("holds a part of group {}", p.group)));
            }
            let last = log.parts.last().and_then(|(_, q)| q.entries.last()).map(Entry::csn);
            if let (Some(last), Some(first)) = (last, p.entries.first().map(Entry::csn))
                && first <= last
            {
                return Err(corrupt(&key, format!("CSN {first} after CSN {last}")));
            }
            log.parts.push((key.clone(), p));
        }
        if let Some((offset, error)) = damage {
            log.truncated = Some(Truncated {
                key: key.clone(),
                offset: offset as u64,
                bytes: (bytes.len() - offset) as u64,
                error,
            });
        }
    }
    Ok(scan)
}

/// A group's objects must follow each other without gaps: segments by one,
/// parts by one within a segment, a new segment at part 0.
fn check_follows(prev: Option<LogObject>, next: LogObject, key: &str) -> Result<()> {
    use LogObject::{Part, Segment};
    let ok = match (prev, next) {
        (None, _) => true,
        (Some(p), n) if group_of(p) != group_of(n) => true,
        (Some(Segment { segment: s, .. }), Segment { segment: t, .. }) => t == s + 1,
        (Some(Part { segment: s, part: p, .. }), Part { segment: t, part: q, .. }) => {
            (t == s && q == p + 1) || (t == s + 1 && q == 0)
        }
        _ => false,
    };
    if ok { Ok(()) } else { Err(corrupt(key, "a log object before it is missing")) }
}

fn group_of(o: LogObject) -> u32 {
    match o {
        LogObject::Segment { group, .. } | LogObject::Part { group, .. } => group,
    }
}

/// Apply the replay rule to a scanned log. Fails with `Corrupt` if two
/// entries carry one CSN (invariant 1 says each CSN is logged once).
pub fn plan_replay(scan: &LogScan) -> Result<ReplayPlan> {
    let mut by_csn: BTreeMap<Csn, &Entry> = BTreeMap::new();
    for (key, part) in scan.groups.values().flat_map(|g| &g.parts) {
        for e in &part.entries {
            if by_csn.insert(e.csn(), e).is_some() {
                return Err(corrupt(key, format!("CSN {} is logged twice", e.csn())));
            }
        }
    }
    let mut prefix = CSN_FIRST;
    while by_csn.contains_key(&prefix) {
        prefix += 1;
    }
    let mut plan = ReplayPlan {
        prefix,
        max_csn: by_csn.last_key_value().map_or(0, |(c, _)| *c),
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
