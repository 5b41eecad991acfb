//! The tap a change feed puts on a replica's follower (design record
//! 0014): every run of transactions the follower applies, handed over in
//! CSN order with each write as the row's whole new value, before the
//! run's applied CSN is published.
//!
//! Invariants:
//! - a transaction is handed over once, whole, in CSN order; the applied
//!   point that comes with a run says every commit below it was handed
//!   over (or was a CSN without a commit: an abort, a CSN the seal left
//!   out);
//! - a delta record is handed over as the whole value it leaves: the value
//!   the apply built for the record's new version (`apply::Whole`; the
//!   delta applied to the chain's head, which is the transaction's earlier
//!   write of the row or else the commits before it), so no row is looked
//!   up again. A record the apply skipped (its table dropped) falls back to
//!   the chains the run was just applied to (the versions of the run and
//!   the ones they replaced are at or above the readers' horizon, taken
//!   before the run: none is trimmed before the next run);
//! - the follower never jumps over changes silently: a catch-up to a
//!   checkpoint is handed over as a gap;
//! - the tap is bounded: a consumer that does not take its runs stops the
//!   follower, which stops reading the log (nothing more is held).

use std::sync::Arc;

use crossbeam_channel::{SendError, Sender};

use crate::log::record::{Entry, OpRef, patched};
use crate::mvcc::visibility::{self, View};
use crate::mvcc::{Csn, txn_table::TxnTable};
use crate::replica::apply::Whole;
use crate::table::TableInner;

/// One write of a committed transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedChange {
    /// The table's name.
    pub table: String,
    /// The row's key.
    pub key: Vec<u8>,
    /// The row's whole value after the transaction; `None`: deleted.
    pub value: Option<Vec<u8>>,
}

/// A committed transaction, whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedTxn {
    /// Its CSN: the cursor to save once it is handled.
    pub csn: Csn,
    /// Its writes, in the order it made them (those the filter keeps).
    pub changes: Vec<FeedChange>,
}

/// What the follower hands a feed.
#[derive(Debug)]
pub(crate) enum TapMsg {
    /// Transactions applied, in CSN order, and the applied point after
    /// them (every commit below it is in this run or an earlier one).
    Run { txns: Vec<FeedTxn>, applied: Csn },
    /// The follower moved from `from` to `to` by loading a checkpoint:
    /// the changes in between were not read.
    Gap { from: Csn, to: Csn },
}

/// The runs a tap holds for a consumer before the follower waits.
pub(crate) const TAP_RUNS: usize = 64;

pub(crate) type Tap = Sender<TapMsg>;

/// Hand `entries` (just applied, CSNs below `applied`) over on `tap`,
/// with `wholes`, the whole values the apply left for their delta records
/// (`apply::apply_batch`, in (entry, record) order). A consumer that went
/// away is not an error: the tap is taken off.
pub(crate) fn hand_over(
    tap: &mut Option<Tap>,
    tables: &[Arc<TableInner>],
    txns: &TxnTable,
    entries: &[Entry],
    wholes: Vec<Whole>,
    applied: Csn,
) {
    let Some(t) = tap else { return };
    let mut wholes = wholes.into_iter().peekable();
    let run = entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Entry::Commit { csn, records, .. } => {
                let mut changes: Vec<FeedChange> = Vec::with_capacity(records.len());
                for (j, r) in records.refs().enumerate() {
                    let whole = wholes
                        .next_if(|w| (w.entry, w.record) == (i as u32, j as u32))
                        .map(|w| w.value);
                    let c = change(tables, txns, *csn, r, whole, &changes);
                    changes.push(c);
                }
                Some(FeedTxn { csn: *csn, changes })
            }
            Entry::Abort { .. } => None,
        })
        .collect();
    if let Err(SendError(_)) = t.send(TapMsg::Run { txns: run, applied }) {
        *tap = None;
    }
}

/// Tell the consumer that the follower jumped from `from` to `to`.
pub(crate) fn gap(tap: &mut Option<Tap>, from: Csn, to: Csn) {
    if let Some(t) = tap
        && t.send(TapMsg::Gap { from, to }).is_err()
    {
        *tap = None;
    }
}

/// Record `r` of the transaction at `csn` as a change; `whole`, the value
/// the apply left for it if it is a delta; `before`, the transaction's
/// changes before it. Without `whole` (the apply skipped the record), a
/// delta is applied to the row as the transaction's latest earlier write
/// of it left it, else as the commits before `csn` did. (A delta on no
/// row, or past its end, cannot be in a log the engine wrote; it is
/// handed over as the row's value after the transaction.)
fn change(
    tables: &[Arc<TableInner>],
    txns: &TxnTable,
    csn: Csn,
    r: crate::log::record::RecordRef<'_>,
    whole: Option<Vec<u8>>,
    before: &[FeedChange],
) -> FeedChange {
    let t = &tables[r.table as usize];
    let value = match r.op {
        OpRef::Insert(v) | OpRef::Update(v) => Some(v.to_vec()),
        OpRef::Delete => None,
        OpRef::Delta { .. } if whole.is_some() => whole,
        OpRef::Delta { offset, bytes } => {
            let earlier = before.iter().rev().find(|c| c.table == t.name && c.key == r.key);
            let base = match earlier {
                Some(c) => c.value.clone(),
                None => value_at(t, r.key, csn, txns),
            };
            base.and_then(|b| patched(&b, offset, bytes))
                .or_else(|| value_at(t, r.key, csn + 1, txns))
        }
    };
    FeedChange { table: t.name.clone(), key: r.key.to_vec(), value }
}

/// The value of `key` in `t` as a snapshot at `snapshot` sees it (the
/// commits below it).
fn value_at(t: &TableInner, key: &[u8], snapshot: Csn, txns: &TxnTable) -> Option<Vec<u8>> {
    let guard = crossbeam_epoch::pin();
    let rid = t.index.get(key)?;
    let view = View { snapshot, me: None };
    let (v, _) = visibility::find_visible(t.records.slot(rid), view, txns, &guard)?;
    v.value().map(<[u8]>::to_vec)
}
