//! Reads of a shard's versions without the shard's lock ([`VersionRows`]):
//! the value of a key at a version, from its row or from the versions it
//! replaced, and, for a batch that writes what it read, the rows it read
//! with where the engine found them.

use std::sync::{Arc, Mutex};

use milliscale::{AsyncDatabase, Table};

use super::{History, Tables, collect_in_parts, lock, parse, split, table_named};
use crate::types::{CommitTs, Timestamp, Value};

/// One read of [`VersionRows::values`]: the value (`None`: not held;
/// `Some(None)`: a deletion) and, if asked for, the key's row.
pub type ValueRead = (Option<Option<Value>>, Option<KeptRow>);

/// A key's row as [`VersionRows::values`] read it, kept for the install
/// of a batch that writes the key ([`EngineVersions::offer_rows`]): the
/// whole row, and where the engine found it, so that the install's write
/// skips the index's descent while the read's engine transaction is open
/// ([`VersionRows::values_held`]).
#[derive(Clone, Debug)]
pub struct KeptRow {
    pub row: Arc<[u8]>,
    pub hint: Option<milliscale::RowHint>,
}

/// The engine transaction of a [`VersionRows::values_held`] read, kept
/// open until the install that uses its rows' hints has written: while
/// it is open no record id it found can go to another key.
pub struct HeldRead {
    _open: Option<milliscale::AsyncTransaction>,
}

impl HeldRead {
    /// Nothing read.
    pub fn none() -> HeldRead {
        HeldRead { _open: None }
    }
}

/// Reads one version's value (the row's, or one replaced and still held)
/// without `&EngineVersions`; shared across threads.
#[derive(Clone)]
pub struct VersionRows {
    pub(super) db: AsyncDatabase,
    pub(super) tables: Tables,
    pub(super) history: Arc<Mutex<History>>,
}

impl VersionRows {
    /// The value of `key` at `version` (`Some(None)`: a deletion), or
    /// `None` if it is not held (collected, or its table dropped).
    pub fn value(&self, key: &[u8], version: CommitTs) -> Option<Option<Value>> {
        self.values([(key, version, false)]).pop().and_then(|(value, _)| value)
    }

    /// [`VersionRows::value`] of each of `reads` (key, version, and
    /// whether to keep its row), in one engine transaction; with the row
    /// read, when asked to keep it and it is the key's row (for
    /// [`EngineVersions::offer_rows`]: a batch that writes a key it read).
    pub fn values<'k, I>(&self, reads: I) -> Vec<ValueRead>
    where
        I: IntoIterator<Item = (&'k [u8], CommitTs, bool)>,
        I::IntoIter: Clone,
    {
        self.values_held(reads.into_iter().map(|(k, v, keep)| (k, v, keep, None))).0
    }

    /// [`VersionRows::values`], with its engine transaction, to keep
    /// until the install that writes the rows kept has written (drop it
    /// then; not across an `.await`: it holds one of the engine's
    /// transaction slots). Each read may come with where the engine last
    /// found its key ([`EngineVersions::version_and_hint_at`]), so that its read does not
    /// descend the index.
    pub fn values_held<'k, I>(&self, reads: I) -> (Vec<ValueRead>, HeldRead)
    where
        I: IntoIterator<Item = (&'k [u8], CommitTs, bool, Option<milliscale::RowHint>)>,
        I::IntoIter: Clone,
    {
        let reads = reads.into_iter();
        // The table the prefetch found, for the reads of its keys (a key
        // of another table looks its own up below).
        let mut table = self.prefetch(reads.clone());
        let mut tx = None;
        let mut out = Vec::with_capacity(reads.size_hint().0);
        for (key, version, keep, hint) in reads {
            if version == CommitTs::INITIAL {
                out.push((Some(None), None));
                continue;
            }
            let (name, k) = split(key);
            if table.as_ref().is_none_or(|t| t.name() != name) {
                table = table_named(&self.tables, name);
            }
            let Some(t) = &table else {
                out.push((None, None));
                continue;
            };
            let tx = tx.get_or_insert_with(|| self.db.begin().expect("begin a read"));
            if let Some(hint) = hint {
                tx.assume_row(t, k, hint);
            }
            let row = tx.get_with(t, k, |row| {
                let (v, value) = parse(row);
                (v == version).then(|| (value.map(<[u8]>::to_vec), keep.then(|| Arc::from(row))))
            });
            out.push(match row.expect("read a version") {
                Some(Some((value, row))) => {
                    let kept = row.map(|row| KeptRow { row, hint: tx.row_hint(t, k) });
                    (Some(value), kept)
                }
                // Replaced since the caller learned it: in the history (a
                // version is put there before its row changes).
                _ => (lock(&self.history).exact(key, version), None),
            });
        }
        (out, HeldRead { _open: tx })
    }

    /// Start loading the rows `reads` found before into the CPU's cache,
    /// all at once ([`Table::prefetch_rows`]), for each table whose rows
    /// they hint at. Returns the first table it found, if any.
    fn prefetch<'k>(
        &self,
        reads: impl Iterator<Item = (&'k [u8], CommitTs, bool, Option<milliscale::RowHint>)> + Clone,
    ) -> Option<Table> {
        let hints = reads.clone().filter_map(|r| r.3);
        let (mut first, mut named): (Option<Table>, Option<&str>) = (None, None);
        for (key, _, _, hint) in reads {
            let name = split(key).0;
            if hint.is_none() || named == Some(name) {
                continue;
            }
            named = Some(name);
            if let Some(t) = table_named(&self.tables, name) {
                t.prefetch_rows(hints.clone());
                first.get_or_insert(t);
            }
        }
        first
    }

    /// Drop the versions replaced at or below `watermark`, as
    /// [`Versions::collect`] does, a thousand replacements at a time, so
    /// that no install or read waits long for it: for a caller that
    /// collects outside its own lock, once its participant refuses reads
    /// below `watermark` ([`crate::participant::Participant::collect_marks`]).
    /// How many versions it dropped.
    pub fn collect(&self, watermark: Timestamp) -> usize {
        collect_in_parts(&self.history, watermark)
    }
}

impl std::fmt::Debug for VersionRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VersionRows").finish_non_exhaustive()
    }
}
