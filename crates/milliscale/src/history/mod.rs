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
//! - [`restore`]: that database written to empty stores as a new one.
//! - [`backup`]: the window's objects copied to other stores, incrementally;
//!   and their check.
//! - [`clone`]: a new database that starts from the parent's objects at a
//!   point, without copying them.

pub mod backup;
pub mod clone;
pub mod leases;
pub mod past;
pub mod restore;
pub mod times;

#[cfg(test)]
mod collect_sim;

use std::collections::BTreeMap;
use std::sync::Arc;

use objstore::ObjectStore;
use serde::{Deserialize, Serialize};

use crate::keys::{CHECKPOINT_PREFIX, Chain, LOG_PREFIX, checkpoint_prefix, parse_log_key};
use crate::manifest::{CheckpointRef, LogRef, Manifest, SealedLog};
use crate::mvcc::{CSN_FIRST, Csn};

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

/// The history a database with a retention window keeps in its manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// The window, in milliseconds.
    pub retention_ms: u64,
    /// The points the past is rebuilt from, oldest first; the last is the
    /// manifest's current checkpoint (or the empty database).
    pub bases: Vec<Base>,
    /// Earlier epochs' logs the window reaches, oldest first: each with its
    /// first segments (`group_start`), the segment where the next epoch's
    /// log starts, and the replay decision of the writer that took over.
    pub ended: Vec<SealedLog>,
    /// The current epoch's log's first segments (the manifest's `log`
    /// moves its starts forward at each checkpoint).
    pub live_first: Vec<u64>,
    /// By table id: the first CSN at which the table exists (0: before the
    /// history began). A table is created by a manifest write, before any
    /// transaction can write it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub created: Vec<Csn>,
    /// Dropped tables and the first CSN at which each is gone (0: before
    /// the history began), in the order they were dropped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped_at: Vec<(u32, Csn)>,
}

/// A point the past can be rebuilt from: a checkpoint, or the empty
/// database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Base {
    /// It holds every commit below this CSN (1 for the empty database).
    pub csn: Csn,
    /// Its checkpoint; `None` for the empty database.
    pub checkpoint: Option<CheckpointRef>,
    /// The epoch whose log follows it.
    pub epoch: u64,
    /// That log's first segment per chain after it (`LogRef::group_start`
    /// when it was published).
    pub starts: Vec<u64>,
    /// When it was published (ms since the Unix epoch), read after a time
    /// index sample that reaches `csn - 1`: a time at or after this
    /// resolves to a CSN the base reaches.
    pub at_ms: u64,
}

impl History {
    /// The oldest point the window reaches: a CSN and a time.
    pub fn oldest(&self) -> (Csn, u64) {
        self.bases.first().map_or((0, 0), |b| (b.csn.saturating_sub(1), b.at_ms))
    }

    /// The newest base that can rebuild the database at CSN `n`.
    pub fn base_for(&self, n: Csn) -> Option<&Base> {
        self.bases.iter().rev().find(|b| b.csn <= n + 1)
    }

    /// The table ids that are not there at CSN `n` of a database whose
    /// manifest names `tables` and drops `dropped`: created after `n`, or
    /// dropped at or before it.
    pub fn dropped_at_csn(&self, tables: usize, dropped: &[u32], n: Csn) -> Vec<u32> {
        (0..tables as u32)
            .filter(|&id| {
                let created = self.created.get(id as usize).copied().unwrap_or(0);
                let gone = match self.dropped_at.iter().find(|(d, _)| *d == id) {
                    Some((_, at)) => *at <= n,
                    // Dropped before the history began.
                    None => dropped.contains(&id),
                };
                created > n || gone
            })
            .collect()
    }

    /// The ended log of `epoch`, if the window holds it.
    pub fn ended_log(&self, epoch: u64) -> Option<&SealedLog> {
        self.ended.iter().find(|s| s.log.epoch == epoch)
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

/// Keep a time index on `commit` from now on if `options` keep a window:
/// writer `epoch`'s samples start at the stores' last one (whose clock may
/// have run ahead of this machine's).
pub(crate) fn start_time_index(
    options: &crate::options::Options,
    stores: &[(String, Arc<dyn ObjectStore>)],
    epoch: u64,
    commit: &crate::commit::CommitMarks,
) {
    if options.retention.is_none() {
        return;
    }
    let floor = stores
        .iter()
        .filter_map(|(_, s)| times::last_sample(s, options.store_deadline))
        .max()
        .unwrap_or_default();
    commit.set_time_index(Arc::new(times::TimeIndex::new(epoch, floor)));
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

/// What the window needs on the stores: checkpoint prefixes, and per
/// chain the first segment to keep (chains not listed: none).
#[derive(Debug, Default)]
pub(crate) struct Needed {
    checkpoints: Vec<String>,
    chains: BTreeMap<Chain, u64>,
    /// Time index objects from this millisecond on.
    times_from: u64,
}

impl Needed {
    /// What manifest `m` needs: its history's when it has one, else its
    /// checkpoint and its live log from its starts (and its sealed logs).
    pub(crate) fn of(m: &Manifest) -> Needed {
        let mut n = Needed::default();
        let add_log = |n: &mut Needed, log: &LogRef, starts: &[u64]| {
            let mut l = log.clone();
            l.group_start = starts.to_vec();
            for c in l.chains() {
                let s = l.start(c).expect("a chain of the log");
                let e = n.chains.entry(c).or_insert(s);
                *e = (*e).min(s);
            }
        };
        n.checkpoints.extend(m.checkpoint.iter().map(|c| checkpoint_prefix(c.csn)));
        for s in &m.sealed {
            add_log(&mut n, &s.log, &s.log.group_start);
        }
        add_log(&mut n, &m.log, &m.log.group_start);
        n.times_from = u64::MAX;
        let Some(h) = &m.history else { return n };
        let Some(first) = h.bases.first() else { return n };
        n.times_from = first.at_ms;
        n.checkpoints.extend(
            h.bases.iter().filter_map(|b| b.checkpoint.as_ref()).map(|c| checkpoint_prefix(c.csn)),
        );
        for s in &h.ended {
            let starts =
                if s.log.epoch == first.epoch { &first.starts } else { &s.log.group_start };
            add_log(&mut n, &s.log, starts);
        }
        if m.log.epoch == first.epoch {
            add_log(&mut n, &m.log, &first.starts);
        } else {
            add_log(&mut n, &m.log, &h.live_first);
        }
        n
    }

    /// Also keep what registration `r` reads.
    pub(crate) fn add(&mut self, r: &leases::Registration) {
        self.checkpoints.extend(r.checkpoints.iter().map(|c| checkpoint_prefix(*c)));
        for log in &r.logs {
            for c in log.chains() {
                let s = log.start(c).expect("a chain of the log");
                let e = self.chains.entry(c).or_insert(s);
                *e = (*e).min(s);
            }
        }
    }

    /// Whether this keeps everything registration `r` reads.
    pub(crate) fn covers(&self, r: &leases::Registration) -> bool {
        r.checkpoints.iter().all(|c| self.checkpoints.contains(&checkpoint_prefix(*c)))
            && r.logs.iter().all(|log| {
                log.chains().all(|c| {
                    let s = log.start(c).expect("a chain of the log");
                    self.chains.get(&c).is_some_and(|&kept| kept <= s)
                })
            })
    }

    /// Whether the window needs the object `key` (a checkpoint's, a log
    /// object, or a time index object: all of those are kept).
    pub(crate) fn keeps(&self, key: &str) -> bool {
        if key.starts_with(CHECKPOINT_PREFIX) {
            self.checkpoints.iter().any(|p| key.starts_with(p.as_str()))
        } else if key.starts_with(LOG_PREFIX) {
            self.keeps_log_object(key)
        } else {
            key.starts_with(times::TIME_PREFIX)
        }
    }

    fn keeps_log_object(&self, key: &str) -> bool {
        match parse_log_key(key) {
            Some(o) => self.chains.get(&o.chain()).is_some_and(|&from| o.segment() >= from),
            // Not a log object name: not ours to delete.
            None => true,
        }
    }
}

/// S3 Express One Zone's storage price, dollars per GB-month
/// (docs/latency-model.md): what `milliscale inspect` prices a window at.
pub const S3_EXPRESS_USD_PER_GB_MONTH: f64 = 0.11;
/// S3 Standard's storage price, dollars per GB-month.
pub const S3_STANDARD_USD_PER_GB_MONTH: f64 = 0.023;

/// What a database's objects on one store hold, by why they are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowBytes {
    /// Bytes the present needs (the current checkpoint and the live log
    /// from its starts): what a database without a window keeps.
    pub present: u64,
    /// Bytes kept only for the window: older checkpoints and log.
    pub window: u64,
    /// Bytes of the time index.
    pub time_index: u64,
    /// Bytes no manifest needs (left for the next truncation).
    pub garbage: u64,
    /// Objects counted.
    pub objects: u64,
}

/// Count `store`'s checkpoint, log and time index objects by what manifest
/// `m` keeps them for (`milliscale inspect`).
pub fn window_bytes(store: &Arc<dyn ObjectStore>, m: &Manifest) -> crate::Result<WindowBytes> {
    let mut present_m = m.clone();
    present_m.history = None;
    let (all, present) = (Needed::of(m), Needed::of(&present_m));
    let mut w = WindowBytes::default();
    let list =
        |p: &str| store.list(p).map_err(|e| crate::Error::Store(format!("listing {p}: {e}")));
    for o in list(CHECKPOINT_PREFIX)? {
        w.objects += 1;
        let kept = |n: &Needed| n.checkpoints.iter().any(|p| o.key.starts_with(p.as_str()));
        match (kept(&present), kept(&all)) {
            (true, _) => w.present += o.size,
            (false, true) => w.window += o.size,
            (false, false) => w.garbage += o.size,
        }
    }
    for o in list(LOG_PREFIX)? {
        w.objects += 1;
        match (present.keeps_log_object(&o.key), all.keeps_log_object(&o.key)) {
            (true, _) => w.present += o.size,
            (false, true) => w.window += o.size,
            (false, false) => w.garbage += o.size,
        }
    }
    for o in list(times::TIME_PREFIX)? {
        w.objects += 1;
        w.time_index += o.size;
    }
    Ok(w)
}

/// Delete what manifest `m` (just published) no longer needs: checkpoint
/// objects (and offers) of no kept checkpoint, log segments before their
/// chain's first kept one, time index objects older than the window (the
/// one the window's first base falls in stays). Best effort: what is left
/// is deleted next time. Returns the requests made: (lists, deletes).
/// Objects go in key order (a listing's), so a segment's part objects go
/// first to last: a replica's tail (`replica::tail`) tells a deleted
/// segment from a short one by that.
pub(crate) fn truncate(
    stores: &[(String, Arc<dyn ObjectStore>)],
    quorum: usize,
    m: &Manifest,
) -> (u64, u64) {
    match collection_needs(stores, quorum, m, times::now_ms()) {
        (Some(needed), lists) => {
            let (more, deletes) = delete_unneeded(stores, &needed, m);
            (lists + more, deletes)
        }
        (None, lists) => {
            tracing::warn!("truncation skipped: the readers' registrations could not all be read");
            (lists, 0)
        }
    }
}

/// The first half of a collection: what manifest `m` (published) needs,
/// and what every live registration reads, listed now (after `m`: the
/// fence, `leases`). `None` if the registrations could not all be read:
/// then nothing may be deleted. Returns the requests made too.
pub(crate) fn collection_needs(
    stores: &[(String, Arc<dyn ObjectStore>)],
    quorum: usize,
    m: &Manifest,
    now_ms: u64,
) -> (Option<Needed>, u64) {
    let mut needed = Needed::of(m);
    let (registrations, lists) = leases::live(stores, quorum, now_ms);
    let Some(registrations) = registrations else { return (None, lists) };
    for r in &registrations {
        needed.add(r);
    }
    (Some(needed), lists)
}

/// The second half: delete what `needed` does not keep. Returns the
/// requests made: (lists, deletes).
pub(crate) fn delete_unneeded(
    stores: &[(String, Arc<dyn ObjectStore>)],
    needed: &Needed,
    m: &Manifest,
) -> (u64, u64) {
    let (mut lists, mut deletes) = (0, 0);
    for (_, s) in stores {
        lists += 2;
        if let Ok(list) = s.list(CHECKPOINT_PREFIX) {
            for o in list {
                if !needed.checkpoints.iter().any(|p| o.key.starts_with(p.as_str())) {
                    deletes += 1;
                    let _ = s.delete(&o.key);
                }
            }
        }
        if let Ok(list) = s.list(LOG_PREFIX) {
            for o in list {
                if !needed.keeps_log_object(&o.key) {
                    deletes += 1;
                    let _ = s.delete(&o.key);
                }
            }
        }
        if needed.times_from == u64::MAX && m.history.is_none() {
            // No window: the index is not kept at all.
            lists += 1;
            if let Ok(list) = s.list(times::TIME_PREFIX) {
                for o in list {
                    deletes += 1;
                    let _ = s.delete(&o.key);
                }
            }
            continue;
        }
        lists += 1;
        if let Ok(list) = s.list(times::TIME_PREFIX) {
            let mut keys: Vec<((u64, u64), String)> = list
                .into_iter()
                .filter_map(|o| times::parse_time_key(&o.key).map(|k| (k, o.key)))
                .collect();
            keys.sort();
            // The object holding the window's first sample is the last
            // one that starts at or before it.
            let first_kept = keys.partition_point(|((ms, _), _)| *ms <= needed.times_from);
            for (_, key) in keys.iter().take(first_kept.saturating_sub(1)) {
                deletes += 1;
                let _ = s.delete(key);
            }
        }
    }
    (lists, deletes)
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
