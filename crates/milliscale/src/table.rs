//! Tables: a name, an ordered index and an indirection array.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::index::OrderedIndex;
use crate::mvcc::oid_array::OidArray;
use crate::mvcc::{Csn, gc};

/// A handle to a table. Cheap to clone; valid only with the database that
/// created or opened it.
#[derive(Clone)]
pub struct Table {
    pub(crate) inner: Arc<TableInner>,
}

pub(crate) struct TableInner {
    pub(crate) id: u32,
    pub(crate) name: String,
    /// Identifies the owning database, so a handle from another one is refused.
    pub(crate) db_id: u64,
    pub(crate) index: OrderedIndex,
    pub(crate) records: OidArray,
    /// Set by `Database::drop_table` (or, on a replica, by the manifest
    /// that drops it): operations through a handle fail with
    /// `TableNotFound`, and the log's and checkpoints' rows of the table
    /// are not applied. A dropped table's id is never used again.
    pub(crate) dropped: AtomicBool,
}

impl TableInner {
    pub(crate) fn is_dropped(&self) -> bool {
        self.dropped.load(Ordering::SeqCst)
    }
}

impl Table {
    /// The table's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The table's id, stable for the database's lifetime.
    pub fn id(&self) -> u32 {
        self.inner.id
    }

    /// Keys in the index: the live ones, and deleted ones that some
    /// snapshot may still see or that are waiting to be reclaimed.
    pub fn approximate_len(&self) -> usize {
        self.inner.index.len()
    }
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("id", &self.inner.id).field("name", &self.inner.name).finish()
    }
}

/// Trim the chains of `due`, records of `tables` (by table id), at
/// `horizon`. A dropped table's records are freed with it: skipped.
/// Returns the versions retired.
pub(crate) fn trim_due(
    tables: &[Arc<TableInner>],
    due: &gc::Due,
    horizon: Csn,
    guard: &crossbeam_epoch::Guard,
) -> usize {
    let slots = due
        .iter()
        .filter_map(|r| tables.get(r.table as usize).filter(|t| !t.is_dropped()).map(|t| (t, r)))
        .map(|(t, r)| t.records.slot(r.rid));
    // A due record's newest version and the one below it, which its trim
    // retires.
    gc::prefetch_chains(slots.clone(), 1, guard);
    slots.map(|slot| gc::trim_chain(slot, horizon, false, guard)).sum()
}
