//! The log's committed changes between two points of the window, as the
//! log holds them: each transaction's writes with its CSN, in CSN order,
//! with the names of the tables they write. What a reader outside the
//! engine needs to follow a database's history row by row (a cluster's
//! past, where a shard's state at a commit timestamp is not a CSN cut:
//! design record 0012, "A cluster's past").
//!
//! It reads what the past at `to` reads (the logs from the base at or
//! below `from`, registered against collection while they are read) but
//! loads no checkpoint and builds no tables: the changes are handed over
//! as the log's records, a delta as its bytes and offset.

use milliscale_seam::Elapsed as _;
use std::sync::Arc;
use std::time::Duration;

use objstore::ObjectStore;

use super::At;
use super::past::{PastReport, choose, history_of, hold, logs_after, scan_logs};
use crate::error::{Error, Result};
use crate::log::record::{Entry, OpRef};
use crate::mvcc::Csn;
use crate::options::Options;

/// What a change did to its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeOp<'a> {
    /// The row's whole new value (an insert or an update).
    Put(&'a [u8]),
    /// `bytes` written at `offset` in the row's value before it (delta
    /// logging: a value of the same length, a few bytes changed).
    Delta {
        /// Where in the value.
        offset: u32,
        /// What is written there.
        bytes: &'a [u8],
    },
    /// The row is gone.
    Delete,
}

impl ChangeOp<'_> {
    /// The row's value after this change, given its value before
    /// (`None`: no row). A delta on no row, or past its end, is corrupt.
    pub fn apply(&self, before: Option<&[u8]>) -> Result<Option<Vec<u8>>> {
        match *self {
            ChangeOp::Put(v) => Ok(Some(v.to_vec())),
            ChangeOp::Delete => Ok(None),
            ChangeOp::Delta { offset, bytes } => {
                let before = before.ok_or_else(|| {
                    Error::Corrupt("a delta in the log for a row that has no value".into())
                })?;
                let out = crate::log::record::patched(before, offset, bytes).ok_or_else(|| {
                    let (at, end) = (offset as usize, offset as usize + bytes.len());
                    Error::Corrupt(format!(
                        "a delta at {at}..{end} in the log for a value of {} bytes",
                        before.len()
                    ))
                })?;
                Ok(Some(out))
            }
        }
    }
}

/// One write of a committed transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change<'a> {
    /// The transaction's CSN.
    pub csn: Csn,
    /// The table's id (a name dropped and created again has a new one).
    pub table_id: u32,
    /// The table's name.
    pub table: &'a str,
    /// The row's key.
    pub key: &'a [u8],
    /// What happened to it.
    pub op: ChangeOp<'a>,
}

/// The committed changes of `(from, to]` ([`read_changes`]).
pub struct Changes {
    /// Changes above this CSN.
    pub from: Csn,
    /// Changes up to this CSN (the newest durable point when no end was
    /// given).
    pub to: Csn,
    /// What was read: the logs, objects and bytes, the window (its `time`:
    /// how `from` resolved, when it was a time).
    pub report: PastReport,
    tables: Vec<String>,
    created: Vec<Csn>,
    dropped_at: Vec<(u32, Csn)>,
    dropped_before: Vec<u32>,
    entries: Vec<Entry>,
}

impl std::fmt::Debug for Changes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Changes")
            .field("from", &self.from)
            .field("to", &self.to)
            .field("transactions", &self.entries.len())
            .finish()
    }
}

impl Changes {
    /// Every write, transaction by transaction in CSN order, each
    /// transaction's writes in the order it made them.
    pub fn iter(&self) -> impl Iterator<Item = Change<'_>> + '_ {
        self.entries.iter().flat_map(move |e| {
            let (csn, records) = match e {
                Entry::Commit { csn, records, .. } => (*csn, Some(records)),
                Entry::Abort { csn } => (*csn, None),
            };
            records.into_iter().flat_map(|r| r.refs()).map(move |r| Change {
                csn,
                table_id: r.table,
                table: self.tables.get(r.table as usize).map_or("", String::as_str),
                key: r.key,
                op: match r.op {
                    OpRef::Insert(v) | OpRef::Update(v) => ChangeOp::Put(v),
                    OpRef::Delta { offset, bytes } => ChangeOp::Delta { offset, bytes },
                    OpRef::Delete => ChangeOp::Delete,
                },
            })
        })
    }

    /// How many committed transactions.
    pub fn transactions(&self) -> usize {
        self.entries.len()
    }

    /// The tables that exist at CSN `n` (created at or below it, not
    /// dropped at or below it), as ids and names.
    pub fn tables_at(&self, n: Csn) -> Vec<(u32, &str)> {
        (0..self.tables.len() as u32)
            .filter(|&id| {
                let created = self.created.get(id as usize).copied().unwrap_or(0);
                let gone = match self.dropped_at.iter().find(|(d, _)| *d == id) {
                    Some((_, at)) => *at <= n,
                    None => self.dropped_before.contains(&id),
                };
                created <= n && !gone
            })
            .map(|id| (id, self.tables[id as usize].as_str()))
            .collect()
    }
}

/// The CSN `at` stands for in the database on `options`' stores, without
/// reading its log: a time through the time index. Refused outside the
/// window, as [`crate::Database::open_at`] refuses it.
pub fn point_of(options: &Options, at: At) -> Result<Csn> {
    options.validate()?;
    let (named, _, m) = crate::manifest::read_manifest_unprobed(options)?;
    Ok(choose(&named, &m, at, options.store_deadline)?.n)
}

/// The oldest point of the window of the database on `options`'
/// stores: its CSN and its time (ms since the Unix epoch).
pub fn oldest_point(options: &Options) -> Result<(Csn, u64)> {
    options.validate()?;
    let (_, _, m) = crate::manifest::read_manifest_unprobed(options)?;
    Ok(history_of(&m).oldest())
}

/// The committed changes in `(from, to]` of the database on `options`'
/// stores (`to` `None`: up to the newest durable point), read from its
/// log. `from` must be inside the window; the objects read are
/// registered against the writer's collection while they are read.
pub fn read_changes(options: &Options, from: At, to: Option<At>) -> Result<Changes> {
    options.validate()?;
    if !options.is_logged() {
        return Err(Error::InvalidArgument("read_changes needs a store".into()));
    }
    let started = milliscale_seam::now();
    let (named, needed, m0) = crate::manifest::read_manifest_unprobed(options)?;
    let deadline: Duration = options.store_deadline;
    let stores: &[(String, Arc<dyn ObjectStore>)] = &named;
    // The points as CSNs, once: a time is resolved through the time index
    // (which waits for a recent time's samples), not again each time the
    // choice is made.
    let from_choice = choose(stores, &m0, from, deadline)?;
    let from_csn = from_choice.n;
    let end = match to {
        None => Csn::MAX,
        Some(At::Csn(n)) => n,
        Some(t @ At::Time(_)) => choose(stores, &m0, t, deadline)?.n,
    };
    if end < from_csn {
        return Err(Error::InvalidArgument(format!(
            "changes from {from} (CSN {from_csn}) to CSN {end}: the end is before the start"
        )));
    }
    let (m, choice, lease) = hold(stores, needed, deadline, from, |m| {
        let mut c = choose(stores, m, At::Csn(from_csn), deadline)?;
        (c.ended, c.live) = logs_after(&history_of(m), m, &c.base, end);
        c.n = end;
        Ok(c)
    })?;
    let mut report = PastReport {
        at: to,
        csn: choice.n,
        time: from_choice.time,
        base_csn: choice.base.csn,
        oldest: choice.oldest,
        ..PastReport::default()
    };
    let threads = options.recovery_threads;
    let (plans, newest) = scan_logs(stores, needed, &m, &choice, threads, deadline, &mut report)?;
    drop(lease);
    let to_csn = if to.is_none() { newest } else { choice.n };
    if to_csn > newest {
        return Err(Error::InvalidArgument(format!(
            "changes up to CSN {to_csn}: past the newest durable point, CSN {newest}"
        )));
    }
    let mut entries: Vec<Entry> = plans
        .into_iter()
        .flat_map(|p| p.replay)
        .filter(|e| e.csn() > from_csn && e.csn() <= to_csn)
        .collect();
    entries.sort_by_key(Entry::csn);
    report.csn = to_csn;
    report.replayed = entries.len();
    report.elapsed = started.elapsed_now();
    let h = history_of(&m);
    Ok(Changes {
        from: from_csn,
        to: to_csn,
        report,
        tables: m.tables.clone(),
        created: h.created.clone(),
        dropped_at: h.dropped_at.clone(),
        dropped_before: m.dropped.clone(),
        entries,
    })
}
