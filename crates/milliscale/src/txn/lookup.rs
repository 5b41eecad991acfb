//! The index lookups of a transaction: a one-entry cache, so that a
//! read-modify-write of one key descends the index once, and row hints,
//! which carry where one transaction found a key to another that writes
//! it ([`Transaction::row_hint`], [`Transaction::assume_row`]).

use std::sync::atomic::Ordering;

use super::Transaction;
use crate::mvcc::Csn;
use crate::mvcc::oid_array::Rid;
use crate::table::{Table, TableInner};

/// A key held by the lookup cache: most keys fit inline.
pub(super) type LookupKey = smallvec::SmallVec<[u8; 32]>;

/// Where a transaction found a key's record, for a later transaction of
/// the same database that writes or reads the key: it skips the index's
/// descent ([`Transaction::row_hint`], [`Transaction::assume_row`]). A
/// hint holds the record's id and the snapshot of the transaction that
/// found it; it is taken only while that record id cannot have been given
/// to another key since (see `assume_row`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowHint {
    db: u64,
    table: u32,
    rid: Rid,
    snapshot: Csn,
}

impl Transaction<'_> {
    /// Where this transaction found `key` of `table`, if it is the last
    /// key it looked up (read or wrote): a [`RowHint`] for another
    /// transaction that writes it ([`Transaction::assume_row`]).
    pub fn row_hint(&self, table: &Table, key: &[u8]) -> Option<RowHint> {
        let (id, k, rid) = self.last_lookup.as_ref()?;
        (table.inner.db_id == self.db.id && *id == table.inner.id && k[..] == *key)
            .then_some(RowHint { db: self.db.id, table: *id, rid: *rid, snapshot: self.snapshot })
    }

    /// Take `hint` (from [`Transaction::row_hint`] of another transaction)
    /// as where `key` of `table` is, so that this transaction's next read
    /// or write of `key` does not descend the index. Ignored (the key is
    /// looked up as always) unless the hint is `table`'s and its record
    /// id cannot have gone to another key since it was found: a freed
    /// record id is given out again only once the GC horizon has passed
    /// the snapshot of every transaction that could have found it under
    /// its old key (`OidArray::free`), and the horizon only rises, so a
    /// horizon still at or below the finder's snapshot means the id is
    /// still the key's, unless its record was reclaimed (its head sealed,
    /// which every use of the cached id checks). Holding the finder open
    /// until this transaction has written keeps the horizon there.
    pub fn assume_row(&mut self, table: &Table, key: &[u8], hint: RowHint) {
        let t = &table.inner;
        if hint.db == self.db.id
            && t.db_id == self.db.id
            && hint.table == t.id
            && self.db.gc_horizon.load(Ordering::Acquire) <= hint.snapshot
        {
            self.last_lookup = Some((t.id, key.into(), hint.rid));
        }
    }

    /// The RID of `key` in `t`, through the one-entry lookup cache.
    pub(super) fn lookup(&mut self, t: &TableInner, key: &[u8]) -> Option<Rid> {
        if let Some((id, k, rid)) = &self.last_lookup
            && *id == t.id
            && k[..] == *key
            && !t.records.is_sealed(*rid)
        {
            return Some(*rid);
        }
        let rid = t.index.get(key)?;
        self.last_lookup = Some((t.id, key.into(), rid));
        Some(rid)
    }
}
