//! Range and prefix scans as iterators, in bounded memory.
//!
//! An iterator reads the range in batches of [`SCAN_BATCH_ROWS`] rows, each
//! one [`Transaction::scan`] that starts just past the last key of the
//! batch before: it holds one batch at a time, whatever the range's size.
//! Every batch reads at the transaction's snapshot, so the whole iteration
//! sees one consistent state; under serializable isolation each batch
//! records the key range it examined, and together they cover what the
//! iteration read, as one scan would.

use std::collections::VecDeque;
use std::ops::Bound;

use super::Transaction;
use crate::error::Result;
use crate::index::Direction;
use crate::table::Table;

/// Rows an iterator reads from the index at a time.
pub const SCAN_BATCH_ROWS: usize = 256;

/// The visible rows of a key range, in order; see [`Transaction::range`].
/// Each item is a `(key, value)` pair, or the error that ended the scan
/// (after which the iterator yields nothing more).
pub struct ScanIter<'t, 'db> {
    tx: &'t mut Transaction<'db>,
    table: Table,
    /// What is left to read: the bound on the side the scan moves from
    /// narrows past each batch's last key.
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    direction: Direction,
    batch: VecDeque<(Vec<u8>, Vec<u8>)>,
    done: bool,
}

impl std::fmt::Debug for ScanIter<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanIter")
            .field("direction", &self.direction)
            .field("buffered", &self.batch.len())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

fn borrowed(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn owned(b: Bound<&[u8]>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// The smallest key above every key that starts with `prefix`: the prefix
/// with its last byte below 0xff incremented and the rest dropped; none
/// if it is all 0xff (or empty): then nothing above bounds the range.
fn prefix_end(prefix: &[u8]) -> Bound<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(&last) = end.last() {
        if last < 0xff {
            *end.last_mut().expect("not empty") += 1;
            return Bound::Excluded(end);
        }
        end.pop();
    }
    Bound::Unbounded
}

impl<'t, 'db> ScanIter<'t, 'db> {
    pub(super) fn new(
        tx: &'t mut Transaction<'db>,
        table: &Table,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        direction: Direction,
    ) -> ScanIter<'t, 'db> {
        ScanIter {
            tx,
            table: table.clone(),
            lower: owned(lower),
            upper: owned(upper),
            direction,
            batch: VecDeque::new(),
            done: false,
        }
    }

    pub(super) fn prefix(
        tx: &'t mut Transaction<'db>,
        table: &Table,
        prefix: &[u8],
        direction: Direction,
    ) -> ScanIter<'t, 'db> {
        let mut it = ScanIter::new(tx, table, Bound::Unbounded, Bound::Unbounded, direction);
        if !prefix.is_empty() {
            it.lower = Bound::Included(prefix.to_vec());
            it.upper = prefix_end(prefix);
        }
        it
    }

    /// Read the next batch; `done` once a batch comes back short.
    fn fill(&mut self) -> Result<()> {
        let rows = self.tx.scan(
            &self.table,
            borrowed(&self.lower),
            borrowed(&self.upper),
            self.direction,
            SCAN_BATCH_ROWS,
        )?;
        self.done = rows.len() < SCAN_BATCH_ROWS;
        if let Some((last, _)) = rows.last() {
            let past = Bound::Excluded(last.clone());
            match self.direction {
                Direction::Forward => self.lower = past,
                Direction::Backward => self.upper = past,
            }
        }
        self.batch.extend(rows);
        Ok(())
    }
}

impl Iterator for ScanIter<'_, '_> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.batch.is_empty() && !self.done {
            // A batch may be empty yet not the end: `scan` counts visible
            // rows, so a short batch is the end and a full one is not.
            if let Err(e) = self.fill() {
                self.done = true;
                return Some(Err(e));
            }
        }
        self.batch.pop_front().map(Ok)
    }
}

impl<'db> Transaction<'db> {
    /// The visible rows with keys in `(lower, upper)`, in `direction`
    /// order, as an iterator that holds at most [`SCAN_BATCH_ROWS`] rows at
    /// a time (see [`ScanIter`]). Reads at the transaction's snapshot;
    /// the transaction stays borrowed until the iterator is dropped.
    pub fn range<'t>(
        &'t mut self,
        table: &Table,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        direction: Direction,
    ) -> ScanIter<'t, 'db> {
        ScanIter::new(self, table, lower, upper, direction)
    }

    /// The visible rows whose keys start with `prefix`, in `direction`
    /// order, as [`Transaction::range`] gives them. An empty prefix is
    /// the whole table.
    pub fn prefix<'t>(
        &'t mut self,
        table: &Table,
        prefix: &[u8],
        direction: Direction,
    ) -> ScanIter<'t, 'db> {
        ScanIter::prefix(self, table, prefix, direction)
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_end;
    use std::ops::Bound;

    #[test]
    fn the_end_of_a_prefix_is_the_next_key_above_it() {
        assert_eq!(prefix_end(b"ab"), Bound::Excluded(b"ac".to_vec()));
        assert_eq!(prefix_end(&[b'a', 0xff]), Bound::Excluded(b"b".to_vec()));
        assert_eq!(prefix_end(&[0xff, 0xff]), Bound::Unbounded);
        assert_eq!(prefix_end(b""), Bound::Unbounded);
    }
}
