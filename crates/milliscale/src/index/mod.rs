//! The ordered index: key bytes -> record id, one per table.
//!
//! Backed by `scc::TreeIndex`, a concurrent B+tree with lock-free reads,
//! chosen by measurement over `crossbeam-skiplist` (see BENCHMARKS.md,
//! "Index choice"). Keys up to 16 bytes are stored inline in the tree nodes
//! ([`IndexKey`]), so comparisons during a descent do not chase pointers.
//!
//! Entries are only ever added: a deleted record keeps its entry and RID, and
//! its chain ends in a tombstone version.

use std::ops::Bound;

use scc::{Guard, TreeIndex};
use smallvec::SmallVec;

use crate::mvcc::oid_array::Rid;

/// A key as stored in the index: inline up to 16 bytes, heap beyond.
pub type IndexKey = SmallVec<[u8; 16]>;

/// Scan order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    /// Ascending key order.
    #[default]
    Forward,
    /// Descending key order.
    Backward,
}

pub(crate) struct OrderedIndex {
    tree: TreeIndex<IndexKey, Rid>,
}

impl OrderedIndex {
    pub(crate) fn new() -> OrderedIndex {
        OrderedIndex { tree: TreeIndex::new() }
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<Rid> {
        let guard = Guard::new();
        self.tree.peek(key, &guard).copied()
    }

    /// Insert `key -> rid`; if the key is already present, return its RID.
    pub(crate) fn insert(&self, key: &[u8], rid: Rid) -> Result<(), Rid> {
        match self.tree.insert_sync(IndexKey::from_slice(key), rid) {
            Ok(()) => Ok(()),
            Err((k, _)) => Err(self.get(&k).expect("insert failed because the key exists")),
        }
    }

    /// Visit entries in `(lower, upper)` in `dir` order until `f` returns false.
    pub(crate) fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        dir: Direction,
        mut f: impl FnMut(&[u8], Rid) -> bool,
    ) {
        if is_empty_range(lower, upper) {
            return;
        }
        let guard = Guard::new();
        let range = self.tree.range::<[u8], _>((lower, upper), &guard);
        match dir {
            Direction::Forward => {
                for (k, rid) in range {
                    if !f(k, *rid) {
                        break;
                    }
                }
            }
            Direction::Backward => {
                for (k, rid) in range.rev() {
                    if !f(k, *rid) {
                        break;
                    }
                }
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.tree.len()
    }
}

/// True if no key can lie in the range (also guards the tree against
/// inverted bounds, which callers may pass).
fn is_empty_range(lower: Bound<&[u8]>, upper: Bound<&[u8]>) -> bool {
    use Bound::*;
    match (lower, upper) {
        (Included(a), Included(b)) => a > b,
        (Included(a), Excluded(b)) | (Excluded(a), Included(b)) | (Excluded(a), Excluded(b)) => {
            a >= b
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_both_ways_and_rejects_duplicates() {
        let ix = OrderedIndex::new();
        for i in 0..100u64 {
            ix.insert(&i.to_be_bytes(), Rid(i)).expect("fresh key");
        }
        assert_eq!(ix.insert(&7u64.to_be_bytes(), Rid(999)), Err(Rid(7)));
        assert_eq!(ix.len(), 100);
        let lo = 10u64.to_be_bytes();
        let hi = 20u64.to_be_bytes();
        let mut fwd = vec![];
        ix.scan(Bound::Included(&lo), Bound::Excluded(&hi), Direction::Forward, |_, r| {
            fwd.push(r.0);
            true
        });
        assert_eq!(fwd, (10..20).collect::<Vec<_>>());
        let mut bwd = vec![];
        ix.scan(Bound::Excluded(&lo), Bound::Included(&hi), Direction::Backward, |_, r| {
            bwd.push(r.0);
            bwd.len() < 3
        });
        assert_eq!(bwd, vec![20, 19, 18]);
        let mut none = 0;
        ix.scan(Bound::Included(&hi), Bound::Excluded(&lo), Direction::Forward, |_, _| {
            none += 1;
            true
        });
        assert_eq!(none, 0, "inverted bounds are an empty range");
    }
}
