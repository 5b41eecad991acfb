//! Collection: what a manifest and the readers' registrations need on the
//! stores (`Needed`), and deleting the rest (`truncate`), by reachability
//! (design record 0012, "Collection by reachability").

use std::collections::BTreeMap;
use std::sync::Arc;

use objstore::ObjectStore;

use super::{leases, times};
use crate::keys::{CHECKPOINT_PREFIX, Chain, LOG_PREFIX, checkpoint_prefix, parse_log_key};
use crate::manifest::{LogRef, Manifest};

/// What the window needs on the stores: checkpoint prefixes, and per
/// chain the first segment to keep (chains not listed: none).
#[derive(Debug, Default)]
pub(crate) struct Needed {
    pub(super) checkpoints: Vec<String>,
    pub(super) chains: BTreeMap<Chain, u64>,
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

    pub(super) fn keeps_log_object(&self, key: &str) -> bool {
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
    bugs: crate::bugs::Bugs,
) -> (u64, u64) {
    match collection_needs(stores, quorum, m, times::now_ms()) {
        (Some(mut needed), lists) => {
            if bugs.on(crate::DeliberateBug::TruncatePastCheckpoint) {
                for start in needed.chains.values_mut() {
                    *start += 1;
                }
            }
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

/// Steps 2 and 3 of the protocol: register `r`, then check that the
/// newest manifest still needs all of it. `Ok(None)`: it does not (the
/// window moved past it meanwhile); the registration is withdrawn.
pub(crate) fn hold(
    stores: &[(String, Arc<dyn ObjectStore>)],
    needed: usize,
    deadline: std::time::Duration,
    r: leases::Registration,
) -> crate::Result<Option<(leases::Lease, Manifest)>> {
    let lease = leases::register(stores, needed, deadline, r.clone())?;
    let m = crate::manifest::ManifestStore::new(stores.to_vec(), needed, deadline)
        .read_latest()?
        .ok_or_else(|| crate::Error::NoDatabase("the manifest is gone".into()))?;
    if Needed::of(&m).covers(&r) {
        Ok(Some((lease, m)))
    } else {
        drop(lease);
        Ok(None)
    }
}
