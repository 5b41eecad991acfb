//! The index lookups of a transaction: a one-entry cache, so that a
//! read-modify-write of one key descends the index once, and row hints,
//! which carry where one transaction found a key to another that writes
//! it ([`Transaction::row_hint`], [`Transaction::assume_row`]).

use std::sync::atomic::Ordering;

use super::Transaction;
use crate::mvcc::Csn;
use crate::mvcc::gc;
use crate::mvcc::oid_array::Rid;
use crate::table::{Table, TableInner};

/// A key held by the lookup cache: most keys fit inline.
pub(super) type LookupKey = smallvec::SmallVec<[u8; 32]>;

/// Where a transaction found a key's record, for a later transaction of
/// the same database that writes or reads the key: it skips the index's
/// descent ([`Transaction::row_hint`], [`Transaction::assume_row`]). A
/// hint holds the record's id, the snapshot of the transaction that found
/// it and how many of the table's freed record ids had been handed out
/// again then; it is taken only while that record id cannot have been
/// given to another key since (see `assume_row`). A hint may be kept
/// across transactions, for as long as the caller likes: one that no
/// longer holds is ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowHint {
    db: u64,
    table: u32,
    rid: Rid,
    snapshot: Csn,
    reuses: u64,
}

impl Table {
    /// Start loading into the CPU's cache the records of this table that
    /// `hints` point at (their heads, then their newest versions), all
    /// at once, so that the reads of them that follow do not each wait
    /// for memory in turn: a batch that reads rows found before, whose
    /// records are scattered over far more memory than the cache holds,
    /// otherwise waits for two loads from memory per row, one after
    /// another. It changes nothing: a hint of another table is skipped,
    /// and one that no longer holds costs a wasted load.
    pub fn prefetch_rows(&self, hints: impl Iterator<Item = RowHint> + Clone) {
        let t = &self.inner;
        let mine = |h: &RowHint| h.db == t.db_id && h.table == t.id && h.rid.0 < t.records.len();
        let slots = hints.filter(mine).map(|h| t.records.slot(h.rid));
        gc::prefetch_chains(slots, 0, &crossbeam_epoch::pin());
    }
}

impl Transaction<'_> {
    /// Where this transaction found `key` of `table`, if it is the last
    /// key it looked up (read or wrote): a [`RowHint`] for another
    /// transaction that writes it ([`Transaction::assume_row`]).
    pub fn row_hint(&self, table: &Table, key: &[u8]) -> Option<RowHint> {
        let (id, k, rid, _) = self.last_lookup.as_ref()?;
        (table.inner.db_id == self.db.id && *id == table.inner.id && k[..] == *key).then(|| {
            RowHint {
                db: self.db.id,
                table: *id,
                rid: *rid,
                snapshot: self.snapshot,
                reuses: table.inner.records.reuses(),
            }
        })
    }

    /// Take `hint` (from [`Transaction::row_hint`] of another transaction,
    /// running or ended) as where `key` of `table` is, so that this
    /// transaction's next read or write of `key` does not descend the
    /// index. Ignored (the key is looked up as always) unless the hint is
    /// `table`'s and its record id cannot have gone to another key since
    /// it was found. Two ways to know that:
    /// - a freed record id is given out again only once the GC horizon
    ///   has passed the snapshot of every transaction that could have found
    ///   it under its old key (`OidArray::free`), and the horizon only
    ///   rises, so a horizon still at or below the finder's snapshot means
    ///   the id is still the key's (holding the finder open until this
    ///   transaction has written keeps the horizon there);
    /// - else, the table's count of record ids given out again
    ///   (`OidArray::reuses`) unchanged since the hint was made, checked
    ///   when the id is used, after its head is found unsealed.
    ///
    /// Either way a record reclaimed since has its head sealed, which every
    /// use of the cached id checks. Once checked, the id stays the key's
    /// while this transaction runs: a reclaim that begins after this
    /// transaction did cannot give the id out again before it ends.
    pub fn assume_row(&mut self, table: &Table, key: &[u8], hint: RowHint) {
        let t = &table.inner;
        if hint.db == self.db.id && t.db_id == self.db.id && hint.table == t.id {
            let held = self.db.gc_horizon.load(Ordering::Acquire) <= hint.snapshot;
            let reuses = (!held).then_some(hint.reuses);
            self.last_lookup = Some((t.id, key.into(), hint.rid, reuses));
        }
    }

    /// The RID of `key` in `t`, through the one-entry lookup cache.
    pub(super) fn lookup(&mut self, t: &TableInner, key: &[u8]) -> Option<Rid> {
        if let Some((id, k, rid, reuses)) = &self.last_lookup
            && *id == t.id
            && k[..] == *key
            // The seal first, then the count (`OidArray::reuses`).
            && !t.records.is_sealed(*rid)
            && reuses.is_none_or(|n| t.records.reuses() == n)
        {
            return Some(*rid);
        }
        let rid = t.index.get(key)?;
        self.last_lookup = Some((t.id, key.into(), rid, None));
        Some(rid)
    }
}
