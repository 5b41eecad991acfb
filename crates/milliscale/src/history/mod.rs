//! Time (design record 0012): a retention window, and the past read back.
//!
//! - [`History`], in the manifest of a database with a window
//!   (`Options::retention`): the **bases** (checkpoints, or the empty
//!   database) the past can be rebuilt from, and the **ended logs**
//!   (earlier epochs' logs with their replay decisions). `on_publish`
//!   keeps it as each manifest version is written: a new checkpoint is a
//!   new base, a new epoch ends the old one's log, and what is older than
//!   the window goes.
//! - `truncate`: what a checkpoint lets go, by the history when there is
//!   one (the window's objects stay), else everything the newest
//!   checkpoint covers.
//! - [`times`]: the time index, which CSN a millisecond stands for.
//! - [`past`]: the database at a point of the window (`At`), read-only.
//! - restore (`crate::db::restore`, above the database it opens): that
//!   database written to empty stores as a new one.
//! - [`backup`]: the window's objects copied to other stores, incrementally;
//!   and their check.
//! - [`changes`]: the log's committed changes between two points, row
//!   by row, for readers outside the engine (a cluster's past).
//! - [`clone`]: a new database that starts from the parent's objects at a
//!   point, without copying them.

pub mod backup;
pub mod changes;
pub mod clone;
mod collect;
pub mod leases;
pub mod past;
pub mod times;

#[cfg(test)]
mod collect_sim;

use std::sync::Arc;

use objstore::ObjectStore;

use crate::keys::checkpoint_prefix;
pub use crate::manifest::history::{Base, History};
use crate::manifest::{CheckpointRef, LogRef, Manifest, SealedLog};
use crate::mvcc::{CSN_FIRST, Csn};
pub(crate) use collect::{Needed, truncate};
pub use collect::{
    S3_EXPRESS_USD_PER_GB_MONTH, S3_STANDARD_USD_PER_GB_MONTH, WindowBytes, window_bytes,
};

/// A point of a database's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// Every committed transaction with a CSN at or below this, none above.
    Csn(Csn),
    /// Every transaction acknowledged before this time, and none that
    /// pre-committed after it, to the millisecond (design record 0012).
    Time(std::time::SystemTime),
}

impl At {
    /// Parse `csn:N`, a bare number (a CSN), or an RFC 3339 time
    /// (`2026-12-07T06:30:00.250Z`), as the `--at` flags take them.
    pub fn parse(s: &str) -> crate::Result<At> {
        let s = s.trim();
        if let Some(n) =
            s.strip_prefix("csn:").or(s.chars().all(|c| c.is_ascii_digit()).then_some(s))
        {
            return n
                .parse()
                .map(At::Csn)
                .map_err(|_| crate::Error::InvalidArgument(format!("--at {s}: not a CSN")));
        }
        let bad = |e: &dyn std::fmt::Display| {
            crate::Error::InvalidArgument(format!(
                "--at {s}: {e}; give a CSN (csn:N) or an RFC 3339 time (2026-12-07T06:30:00Z, \
                 or with an offset: 2026-12-07T07:30:00+01:00)"
            ))
        };
        // An offset (`+01:00`, as Python's isoformat writes one) is taken
        // off; humantime reads the rest as UTC.
        let (local, offset_s) = match s.len().checked_sub(6).map(|i| s.split_at(i)) {
            Some((head, tail))
                if head.contains('T')
                    && (tail.starts_with('+') || tail.starts_with('-'))
                    && tail.as_bytes()[3] == b':' =>
            {
                let h: i64 = tail[1..3].parse().map_err(|_| bad(&"a bad offset"))?;
                let m: i64 = tail[4..6].parse().map_err(|_| bad(&"a bad offset"))?;
                let sign = if tail.starts_with('-') { -1 } else { 1 };
                (head, sign * (h * 3600 + m * 60))
            }
            _ => (s, 0),
        };
        let t = humantime::parse_rfc3339_weak(local.trim_end_matches('Z')).map_err(|e| bad(&e))?;
        let shifted = if offset_s >= 0 {
            t.checked_sub(std::time::Duration::from_secs(offset_s as u64))
        } else {
            t.checked_add(std::time::Duration::from_secs(offset_s.unsigned_abs()))
        };
        shifted.map(At::Time).ok_or_else(|| bad(&"out of range"))
    }
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            At::Csn(n) => write!(f, "CSN {n}"),
            At::Time(t) => write!(f, "{}", humantime::format_rfc3339_millis(*t)),
        }
    }
}

/// Keep the manifest's history as version `next` follows `cur` (called by
/// every manifest write of a writer, `Engine::publish`). `retention_ms`:
/// the writer's window (`None`: no history, and truncation goes back to
/// what the newest checkpoint covers). `now`: a time index sample taken
/// just before (every CSN handed out so far, and the time after).
/// `decision`: when `next` starts a new epoch, the replay decision that
/// ended the old one (a recovery's), unless `next.sealed` holds it (a
/// promotion's).
pub(crate) fn on_publish(
    cur: &Manifest,
    next: &mut Manifest,
    retention_ms: Option<u64>,
    now: times::Sample,
    decision: Option<&SealedLog>,
) -> Vec<CheckpointRef> {
    let Some(retention_ms) = retention_ms else {
        next.history = None;
        return Vec::new();
    };
    let mut listed = Vec::new();
    let now_ms = now.ms;
    if cur.parent.is_some() && next.parent.is_none() {
        // A clone's first own checkpoint: its past starts here (before it,
        // the objects are its parent's).
        next.history = None;
        let mut fresh = next.clone();
        fresh.sealed.clear();
        listed.extend(next.checkpoint.clone());
        let mut h = start(&fresh, now_ms);
        h.retention_ms = retention_ms;
        next.history = Some(h);
        return listed;
    }
    let mut h = match next.history.take() {
        Some(h) => h,
        None => {
            listed.extend(cur.checkpoint.clone());
            start(cur, now_ms)
        }
    };
    h.retention_ms = retention_ms;
    // Tables created or dropped now: every CSN handed out so far is
    // before it, the next one after.
    for id in cur.tables.len()..next.tables.len() {
        h.created.resize(id, 0);
        h.created.push(now.csn + 1);
    }
    for &id in next.dropped.iter().filter(|id| !cur.dropped.contains(id)) {
        h.dropped_at.push((id, now.csn + 1));
    }
    if next.log.epoch != cur.log.epoch {
        // The old epoch's log ends here, with the decision that ended it.
        let seal = decision
            .cloned()
            .or_else(|| next.sealed.iter().find(|s| s.log.epoch == cur.log.epoch).cloned());
        if let Some(mut seal) = seal
            && h.ended_log(cur.log.epoch).is_none()
        {
            seal.log.group_start = h.live_first.clone();
            seal.from = seal.log.base_csn;
            h.ended.push(seal);
        }
        h.live_first = next.log.group_start.clone();
    }
    let new_checkpoint = next.checkpoint.as_ref().map(|c| c.csn);
    if new_checkpoint != cur.checkpoint.as_ref().map(|c| c.csn)
        && let Some(c) = &next.checkpoint
        && h.bases.last().is_none_or(|b| b.csn < c.csn)
    {
        listed.push(c.clone());
        h.bases.push(Base {
            csn: c.csn,
            checkpoint: Some(without_chunks(c)),
            epoch: next.log.epoch,
            starts: next.log.group_start.clone(),
            at_ms: now_ms,
        });
    }
    trim(&mut h, now_ms);
    next.history = Some(h);
    listed
}

/// A base's checkpoint as the history keeps it: without its chunk list,
/// which is an object of its own ([`chunk_list_key`]): a checkpoint of 10
/// GB has 1,250 chunks, and a week's bases would make every manifest
/// version megabytes.
fn without_chunks(c: &CheckpointRef) -> CheckpointRef {
    CheckpointRef { chunks: Vec::new(), ..c.clone() }
}

/// Where a base's chunk list lives: beside its chunks, so that it goes
/// with them.
pub fn chunk_list_key(csn: Csn) -> String {
    format!("{}list", checkpoint_prefix(csn))
}

/// Write the chunk lists of the checkpoints that became bases (what
/// `on_publish` returned) on a quorum of `stores`, before the manifest
/// that names them. Returns the requests made.
pub(crate) fn put_chunk_lists(
    stores: &[(String, Arc<dyn ObjectStore>)],
    needed: usize,
    deadline: std::time::Duration,
    lists: &[CheckpointRef],
) -> crate::Result<u64> {
    let mut requests = 0;
    for c in lists {
        let key = chunk_list_key(c.csn);
        let body = crate::checkpoint::encode_offer(c);
        let mut ok = 0;
        let mut errors = Vec::new();
        for (name, s) in stores {
            requests += 1;
            match crate::retry::retry(deadline, || s.put(&key, body.clone())) {
                Ok(_) => ok += 1,
                Err(e) => errors.push(format!("{name}: {e}")),
            }
        }
        if ok < needed {
            return Err(crate::Error::StoreUnavailable(format!(
                "writing {key}: {}",
                errors.join("; ")
            )));
        }
    }
    Ok(requests)
}

/// A base's checkpoint with its chunks, from its chunk list on whichever
/// of `stores` holds it intact.
pub(crate) fn base_checkpoint(
    stores: &[(String, Arc<dyn ObjectStore>)],
    c: &CheckpointRef,
    deadline: std::time::Duration,
) -> crate::Result<CheckpointRef> {
    if !c.chunks.is_empty() {
        return Ok(c.clone());
    }
    let key = chunk_list_key(c.csn);
    let mut last = None;
    for (name, s) in stores {
        let got = crate::retry::retry(deadline, || s.get(&key))
            .map_err(|e| crate::Error::Corrupt(format!("{name}: reading {key}: {e}")))
            .and_then(|b| crate::checkpoint::decode_ref(&key, &b));
        match got {
            Ok(full) if without_chunks(&full) == *c => return Ok(full),
            Ok(_) => {
                last = Some(crate::Error::Corrupt(format!(
                    "{name}: {key} describes another checkpoint than the history's"
                )));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| crate::Error::Store("no stores".into())))
}

/// The history of a database that had none: what its current manifest
/// reaches (its checkpoint, or the empty database if its log starts at the
/// first CSN), from now on.
fn start(cur: &Manifest, now_ms: u64) -> History {
    // Sealed logs (of writers a promoted replica replaced) follow the
    // checkpoint: the base is in the first one's epoch, from its starts.
    let (epoch, starts) = match cur.sealed.first() {
        Some(s) => (s.log.epoch, s.log.group_start.clone()),
        None => (cur.log.epoch, cur.log.group_start.clone()),
    };
    let base = Base {
        csn: cur.checkpoint.as_ref().map_or(cur.replay_from(), |c| c.csn),
        checkpoint: cur.checkpoint.as_ref().map(without_chunks),
        epoch,
        starts,
        at_ms: now_ms,
    };
    debug_assert!(base.checkpoint.is_some() || base.csn >= CSN_FIRST);
    History {
        retention_ms: 0,
        bases: vec![base],
        ended: cur.sealed.clone(),
        live_first: cur.log.group_start.clone(),
        created: Vec::new(),
        dropped_at: Vec::new(),
    }
}

/// Drop what the window no longer reaches: bases before the newest one
/// published at or before the window's start, and ended logs of epochs
/// before that base's.
fn trim(h: &mut History, now_ms: u64) {
    let start = now_ms.saturating_sub(h.retention_ms);
    let keep = h.bases.iter().rposition(|b| b.at_ms <= start).unwrap_or(0);
    h.bases.drain(..keep);
    if let Some(first) = h.bases.first() {
        let epoch = first.epoch;
        h.ended.retain(|s| s.log.epoch >= epoch);
    }
}

/// Every log manifest `m`'s window reads, each from the first segment it
/// needs, with the first CSN it supplies there: the ended logs (with their
/// decisions) and the live one. Without a window: its sealed logs and its
/// live log, from the current checkpoint on.
pub(crate) fn window_logs(m: &Manifest) -> (Vec<SealedLog>, (LogRef, Csn)) {
    let Some(h) = &m.history else {
        return (m.sealed.clone(), (m.log.clone(), m.log_from()));
    };
    let first = h.bases.first();
    let mut ended = Vec::new();
    for s in &h.ended {
        let mut seal = s.clone();
        if let Some(b) = first.filter(|b| b.epoch == s.log.epoch) {
            seal.log.group_start = b.starts.clone();
            seal.from = b.csn;
        }
        ended.push(seal);
    }
    let mut live = m.log.clone();
    let from = match first {
        Some(b) if b.epoch == m.log.epoch => {
            live.group_start = b.starts.clone();
            b.csn
        }
        _ => {
            live.group_start = h.live_first.clone();
            m.log.base_csn
        }
    };
    (ended, (live, from))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::ChunkRef;

    fn checkpoint(csn: Csn) -> CheckpointRef {
        CheckpointRef {
            csn,
            chunks: vec![ChunkRef {
                key: format!("{}0000/000000", checkpoint_prefix(csn)),
                bytes: 1,
                crc: 0,
            }],
            rows: 1,
            bytes: 1,
        }
    }

    #[test]
    fn checkpoints_become_bases_and_the_window_keeps_one_before_its_start() {
        let mut m = Manifest::initial(1, 2, 1, 1, 100);
        let day = 86_400_000;
        let publish = |m: &mut Manifest, csn: Csn, starts: u64, now: u64| {
            let cur = m.clone();
            m.checkpoint = Some(checkpoint(csn));
            m.log.group_start = vec![starts; 2];
            m.version += 1;
            on_publish(&cur, m, Some(day), times::Sample { ms: now, csn }, None);
        };
        publish(&mut m, 100, 3, 1_000);
        let h = m.history.clone().expect("a history");
        assert_eq!(h.bases.len(), 2, "the empty database, then the checkpoint");
        assert_eq!((h.bases[0].csn, h.bases[0].checkpoint.is_none()), (1, true));
        assert_eq!(h.live_first, vec![0, 0]);
        publish(&mut m, 200, 5, day / 2);
        publish(&mut m, 300, 7, day + 2_000);
        let h = m.history.clone().expect("a history");
        // The window starts at day + 2,000 - day = 2,000: the newest base at or
        // before it is the checkpoint at 100 (published at 1,000).
        let csns: Vec<Csn> = h.bases.iter().map(|b| b.csn).collect();
        assert_eq!(csns, [100, 200, 300]);
        assert_eq!(h.oldest(), (99, 1_000));
        assert_eq!(h.base_for(150).map(|b| b.csn), Some(100));
        assert_eq!(
            h.base_for(199).map(|b| b.csn),
            Some(200),
            "a base at c holds every CSN below c"
        );
        let needed = Needed::of(&m);
        assert_eq!(needed.chains.values().copied().collect::<Vec<_>>(), [3, 3]);
        assert!(needed.keeps_log_object("log/g0001/s00000003"));
        assert!(!needed.keeps_log_object("log/g0001/s00000002"));
        assert!(!needed.keeps_log_object("log/g0007/s00000009"), "a chain of no kept log");
        assert_eq!(needed.checkpoints.len(), 4, "the current one, and each base's");
        // Without a window, the history goes and only the newest checkpoint is needed.
        let cur = m.clone();
        m.version += 1;
        on_publish(&cur, &mut m, None, times::Sample { ms: day * 2, csn: 300 }, None);
        assert!(m.history.is_none());
        assert_eq!(Needed::of(&m).chains.values().copied().collect::<Vec<_>>(), [7, 7]);
    }

    #[test]
    fn a_new_epoch_ends_the_old_log_with_its_decision() {
        let mut m = Manifest::initial(1, 1, 1, 1, 100);
        let cur = m.clone();
        m.version += 1;
        m.checkpoint = Some(checkpoint(50));
        m.log.group_start = vec![4];
        on_publish(&cur, &mut m, Some(1_000_000), times::Sample { ms: 10, csn: 50 }, None);
        // A recovery: a new epoch's log from segment 9, and its decision.
        let cur = m.clone();
        let decision = SealedLog {
            log: cur.log.clone(),
            end_segment: 9,
            from: 50,
            prefix: 70,
            above: vec![72],
            max_csn: 72,
        };
        m.version += 1;
        m.log.epoch = 2;
        m.log.base_csn = 73;
        m.log.group_start = vec![9];
        m.checkpoint = Some(checkpoint(73));
        on_publish(
            &cur,
            &mut m,
            Some(1_000_000),
            times::Sample { ms: 20, csn: 72 },
            Some(&decision),
        );
        let h = m.history.clone().expect("a history");
        assert_eq!(h.ended.len(), 1);
        let ended = &h.ended[0];
        assert_eq!(ended.log.group_start, vec![0], "from the epoch's first segment");
        assert_eq!((ended.from, ended.prefix, ended.above.clone()), (1, 70, vec![72]));
        assert_eq!(h.live_first, vec![9]);
        assert_eq!(
            h.bases.iter().map(|b| (b.csn, b.epoch)).collect::<Vec<_>>(),
            [(1, 1), (50, 1), (73, 2)]
        );
        let needed = Needed::of(&m);
        assert_eq!(
            needed.chains.values().copied().collect::<Vec<_>>(),
            [0],
            "the window reaches the first base"
        );
    }

    #[test]
    fn at_parses_csns_and_times() {
        assert_eq!(At::parse("csn:42").expect("csn"), At::Csn(42));
        assert_eq!(At::parse("42").expect("csn"), At::Csn(42));
        let t = At::parse("2026-12-07T06:30:00.250Z").expect("a time");
        let At::Time(t) = t else { panic!("a time") };
        let ms = t.duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_millis();
        assert_eq!(ms % 1000, 250);
        assert!(At::parse("yesterday").is_err());
        // Python's isoformat: microseconds and an offset.
        let utc = At::parse("2026-12-07T06:30:00.123456+00:00").expect("an offset");
        let plus_one = At::parse("2026-12-07T07:30:00.123456+01:00").expect("an offset");
        let z = At::parse("2026-12-07T06:30:00.123456Z").expect("Z");
        assert_eq!(utc, plus_one);
        assert_eq!(utc, z);
        assert!(At::parse("2026-12-07T06:30:00+0x:00").is_err());
    }
}
