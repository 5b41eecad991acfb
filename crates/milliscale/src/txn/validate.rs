//! Serializable isolation by read-set and scan-set validation.
//!
//! Why this and not SSN (ERMIA's serial safety net): SSN stamps every read
//! into shared per-version metadata, which costs snapshot-isolation readers
//! cache-line traffic even when nobody asks for serializability. Validation
//! costs nothing until a serializable transaction commits, and then only in
//! proportion to what it read.
//!
//! The rule: after taking its CSN `c` (state VALIDATING(c)), a transaction
//! re-reads everything it read "as of `c`" and commits only if it finds the
//! same versions it found at its snapshot. Then no transaction serialized
//! before it (CSN < c) changed what it read, and anything that overwrites its
//! reads later gets a CSN > c: CSN order is a serial order. Own writes are
//! excluded from both reads (`me: None`), so a transaction never invalidates
//! itself. Scans are re-run over the key range they examined, so phantoms
//! are caught too. If validation fails after the CSN was taken, the CSN is
//! left unused; the log will record an abort for it (DESIGN invariant 1).

use std::ops::Bound;

use crossbeam_epoch::Guard;

use super::Transaction;
use crate::index::Direction;
use crate::mvcc::Csn;
use crate::mvcc::oid_array::Rid;
use crate::mvcc::txn_table::TxnTable;
use crate::mvcc::visibility::{self, View};
use crate::table::TableInner;

/// What a point read depended on: the address of the visible non-tombstone
/// version (0 for "absent"). Versions visible at a running transaction's
/// snapshot are never reclaimed while it runs, so addresses cannot be reused.
pub(crate) struct ReadEntry<'db> {
    table: &'db TableInner,
    key: Box<[u8]>,
    token: usize,
}

/// What a scan depended on: every visible record in the key range it examined.
pub(crate) struct ScanEntry<'db> {
    table: &'db TableInner,
    lower: Bound<Box<[u8]>>,
    upper: Bound<Box<[u8]>>,
    tokens: Vec<(Rid, usize)>,
}

fn token(t: &TableInner, key: &[u8], as_of: Csn, txns: &TxnTable, guard: &Guard) -> usize {
    let view = View { snapshot: as_of, me: None };
    t.index
        .get(key)
        .and_then(|rid| visibility::find_visible(t.records.slot(rid), view, txns, guard))
        .and_then(|(v, _)| (!v.is_tombstone()).then_some(v.addr()))
        .unwrap_or(0)
}

fn range_tokens(
    t: &TableInner,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    as_of: Csn,
    txns: &TxnTable,
    guard: &Guard,
) -> Vec<(Rid, usize)> {
    let view = View { snapshot: as_of, me: None };
    let mut out = Vec::new();
    t.index.scan(lower, upper, Direction::Forward, |_, rid| {
        if let Some((v, _)) = visibility::find_visible(t.records.slot(rid), view, txns, guard)
            && !v.is_tombstone()
        {
            out.push((rid, v.addr()));
        }
        true
    });
    out
}

fn owned(b: Bound<&[u8]>) -> Bound<Box<[u8]>> {
    b.map(Box::from)
}

impl<'db> Transaction<'db> {
    pub(super) fn track_read(&mut self, t: &'db TableInner, key: &[u8], guard: &Guard) {
        let token = token(t, key, self.snapshot, &self.db.txns, guard);
        self.reads.push(ReadEntry { table: t, key: key.into(), token });
    }

    /// Record a scan over `(lower, upper)`; `stopped_at` is the last key the
    /// scan examined if it stopped early because of its limit.
    pub(super) fn track_scan(
        &mut self,
        t: &'db TableInner,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        direction: Direction,
        stopped_at: Option<&[u8]>,
        guard: &Guard,
    ) {
        let (lower, upper) = match (stopped_at, direction) {
            (None, _) => (lower, upper),
            (Some(k), Direction::Forward) => (lower, Bound::Included(k)),
            (Some(k), Direction::Backward) => (Bound::Included(k), upper),
        };
        let tokens = range_tokens(t, lower, upper, self.snapshot, &self.db.txns, guard);
        self.scans.push(ScanEntry { table: t, lower: owned(lower), upper: owned(upper), tokens });
    }

    /// True if nothing this transaction read changed before CSN `csn`.
    pub(super) fn validate(&self, csn: Csn, guard: &Guard) -> bool {
        let txns = &self.db.txns;
        self.reads.iter().all(|r| token(r.table, &r.key, csn, txns, guard) == r.token)
            && self.scans.iter().all(|s| {
                let (lo, hi) = (s.lower.as_ref().map(|b| &**b), s.upper.as_ref().map(|b| &**b));
                range_tokens(s.table, lo, hi, csn, txns, guard) == s.tokens
            })
    }
}
