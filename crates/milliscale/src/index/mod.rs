//! The ordered index: key bytes -> record id, one per table.
//!
//! Backed by `scc::TreeIndex`, a concurrent B+tree with lock-free reads,
//! chosen by measurement over `crossbeam-skiplist` (see BENCHMARKS.md,
//! "Index choice"). Keys up to 16 bytes are stored inline in the tree nodes
//! ([`IndexKey`]), so comparisons during a descent do not chase pointers.
//!
//! A deleted key keeps its entry, its chain headed by a tombstone, until
//! every snapshot sees the tombstone; then `reclaim` removes the
//! entry and frees the RID.
//!
//! Beside the tree, a hash table answers lookups of one key
//! ([`points::PointIndex`], about 7x faster at 1M keys); the tree stays
//! the truth, and serves scans.

mod points;

use std::ops::Bound;

use std::cmp::Ordering;

use scc::{Comparable, Equivalent, Guard, TreeIndex};
use smallvec::SmallVec;

use crate::mvcc::oid_array::Rid;

/// A key as stored in the index: its bytes, inline up to 16 bytes. Ordered
/// exactly like the byte strings (see `key_cmp`).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct IndexKey(SmallVec<[u8; 16]>);

// The point index looks keys up by their bytes: an `IndexKey` hashes and
// compares as its bytes do.
impl std::borrow::Borrow<[u8]> for IndexKey {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

/// A borrowed key to search with.
#[derive(Clone, Copy, Debug)]
pub struct KeyQuery<'a>(pub &'a [u8]);

impl IndexKey {
    /// The key for `bytes`.
    pub fn from_slice(bytes: &[u8]) -> IndexKey {
        IndexKey(SmallVec::from_slice(bytes))
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Lexicographic byte order, compared 8 bytes at a time as big-endian
/// integers while both keys have 8 more: for a short key this is two loads
/// and a compare instead of a `memcmp` call, and keys that share a long
/// prefix (a table's name, a shard's versioned keys) cost a few word
/// compares. The integer order of big-endian words is the byte order, so
/// the result equals `a.cmp(b)` (a unit test checks it).
pub fn key_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let (mut a, mut b) = (a, b);
    while let (Some((x, rest_a)), Some((y, rest_b))) =
        (a.split_first_chunk::<8>(), b.split_first_chunk::<8>())
    {
        let (x, y) = (u64::from_be_bytes(*x), u64::from_be_bytes(*y));
        if x != y {
            return x.cmp(&y);
        }
        (a, b) = (rest_a, rest_b);
    }
    a.cmp(b)
}

impl Ord for IndexKey {
    fn cmp(&self, other: &Self) -> Ordering {
        key_cmp(&self.0, &other.0)
    }
}
impl PartialOrd for IndexKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Equivalent<IndexKey> for KeyQuery<'_> {
    fn equivalent(&self, key: &IndexKey) -> bool {
        self.0 == &key.0[..]
    }
}
impl Comparable<IndexKey> for KeyQuery<'_> {
    fn compare(&self, key: &IndexKey) -> Ordering {
        key_cmp(self.0, &key.0)
    }
}

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
    /// Lookups of one key, unless the database goes without
    /// (`Options::point_index`).
    points: Option<points::PointIndex>,
}

impl OrderedIndex {
    /// An empty index, with a point index beside the tree if `points`.
    pub(crate) fn new(points: bool) -> OrderedIndex {
        OrderedIndex { tree: TreeIndex::new(), points: points.then(points::PointIndex::new) }
    }

    /// The RID of `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Rid> {
        match &self.points {
            Some(p) => p.get(key),
            None => self.tree_get(key),
        }
    }

    fn tree_get(&self, key: &[u8]) -> Option<Rid> {
        let guard = Guard::new();
        self.tree.peek(&KeyQuery(key), &guard).copied()
    }

    /// Insert `key -> rid`; if the key is already present, return its RID.
    /// Either way, once this returns a lookup of `key` finds the RID
    /// (`points`' rule 1), unless the key is being removed meanwhile.
    pub(crate) fn insert(&self, key: &[u8], rid: Rid) -> Result<(), Rid> {
        let backoff = crossbeam_utils::Backoff::new();
        loop {
            let theirs = match self.tree.insert_sync(IndexKey::from_slice(key), rid) {
                Ok(()) => {
                    if let Some(p) = &self.points {
                        between_steps();
                        p.put(key, rid);
                    }
                    return Ok(());
                }
                Err(_) => self.tree_get(key),
            };
            let Some(theirs) = theirs else { continue }; // removed meanwhile: insert again
            let Some(p) = &self.points else { return Err(theirs) };
            // The insert that won may not have reached the point index yet;
            // our caller may install a version under the RID as soon as we
            // return, so wait for it (it is a step away). If the key is
            // removed meanwhile, insert again.
            loop {
                if p.get(key) == Some(theirs) {
                    return Err(theirs);
                }
                if self.tree_get(key) != Some(theirs) {
                    break;
                }
                milliscale_seam::snooze(&backoff);
            }
        }
    }

    /// Remove `key` if it maps to `rid`; whether it did. The caller has
    /// sealed the record's head (`reclaim`), and frees the RID only after
    /// this returns (`points`' rule 2).
    pub(crate) fn remove_if(&self, key: &[u8], rid: Rid) -> bool {
        let removed = self.tree.remove_if_sync(&KeyQuery(key), |r| *r == rid);
        if removed && let Some(p) = &self.points {
            between_steps();
            p.remove_if(key, rid);
        }
        removed
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
        // scc 3.8 finds a range's first leaf by walking back from the leaf
        // the key routes to; for a bound beyond every key that walk fails in
        // every leaf, which made such a scan quadratic in the table size
        // (seconds for 600k keys). A bound beyond the first (last) key
        // selects the same entries as no bound, so the tree gets none; the
        // loop still checks the caller's bounds, because a key inserted
        // meanwhile may lie beyond them.
        let range = self.tree.range(
            (
                self.unless_below_first(lower, &guard).map(KeyQuery),
                self.unless_above_last(upper, &guard).map(KeyQuery),
            ),
            &guard,
        );
        let inside = |k: &[u8]| bound_admits(lower, k, true) && bound_admits(upper, k, false);
        match dir {
            Direction::Forward => {
                for (k, rid) in range {
                    if inside(k.as_bytes()) && !f(k.as_bytes(), *rid) {
                        break;
                    }
                }
            }
            Direction::Backward => {
                for (k, rid) in range.rev() {
                    if inside(k.as_bytes()) && !f(k.as_bytes(), *rid) {
                        break;
                    }
                }
            }
        }
    }

    /// `lower`, or `Unbounded` if it admits the tree's first key anyway.
    fn unless_below_first<'a>(&self, lower: Bound<&'a [u8]>, guard: &Guard) -> Bound<&'a [u8]> {
        let Some((first, _)) = self.tree.iter(guard).next() else { return lower };
        match lower {
            Bound::Included(k) if key_cmp(k, first.as_bytes()).is_le() => Bound::Unbounded,
            Bound::Excluded(k) if key_cmp(k, first.as_bytes()).is_lt() => Bound::Unbounded,
            b => b,
        }
    }

    /// `upper`, or `Unbounded` if it admits the tree's last key anyway.
    fn unless_above_last<'a>(&self, upper: Bound<&'a [u8]>, guard: &Guard) -> Bound<&'a [u8]> {
        let Some((last, _)) = self.tree.iter(guard).next_back() else { return upper };
        match upper {
            Bound::Included(k) if key_cmp(k, last.as_bytes()).is_ge() => Bound::Unbounded,
            Bound::Excluded(k) if key_cmp(k, last.as_bytes()).is_gt() => Bound::Unbounded,
            b => b,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.tree.len()
    }
}

// Tests pause a thread between an insert's or a removal's two steps (the
// tree's, then the point index's) with this hook, to act in the window.
#[cfg(test)]
thread_local! {
    static BETWEEN_STEPS: std::cell::Cell<Option<fn()>> = const { std::cell::Cell::new(None) };
}

#[cfg(test)]
fn between_steps() {
    if let Some(f) = BETWEEN_STEPS.with(std::cell::Cell::get) {
        f();
    }
}

#[cfg(not(test))]
fn between_steps() {}

/// Does `bound` (a lower bound if `lower`, else an upper one) admit `k`?
fn bound_admits(bound: Bound<&[u8]>, k: &[u8], lower: bool) -> bool {
    let c = match bound {
        Bound::Unbounded => return true,
        Bound::Included(b) | Bound::Excluded(b) => key_cmp(k, b),
    };
    match (bound, lower) {
        (Bound::Included(_), true) => c.is_ge(),
        (Bound::Excluded(_), true) => c.is_gt(),
        (Bound::Included(_), false) => c.is_le(),
        _ => c.is_lt(),
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
    use proptest::prelude::*;
    use std::time::Duration;

    proptest! {
        #[test]
        fn key_order_is_byte_order(
            a in proptest::collection::vec(prop_oneof![Just(0u8), Just(255u8), any::<u8>()], 0..20),
            b in proptest::collection::vec(prop_oneof![Just(0u8), Just(255u8), any::<u8>()], 0..20),
        ) {
            prop_assert_eq!(key_cmp(&a, &b), a.cmp(&b));
            prop_assert_eq!(IndexKey::from_slice(&a).cmp(&IndexKey::from_slice(&b)), a.cmp(&b));
            prop_assert_eq!(KeyQuery(&a).compare(&IndexKey::from_slice(&b)), a.cmp(&b));
            prop_assert_eq!(KeyQuery(&a).equivalent(&IndexKey::from_slice(&b)), a == b);
        }

        /// Keys sharing a prefix of up to 40 bytes, so that the compare
        /// runs through several equal words before the bytes differ.
        #[test]
        fn long_shared_prefixes_order_like_bytes(
            prefix in proptest::collection::vec(any::<u8>(), 0..40),
            a in proptest::collection::vec(prop_oneof![Just(0u8), Just(255u8), any::<u8>()], 0..20),
            b in proptest::collection::vec(prop_oneof![Just(0u8), Just(255u8), any::<u8>()], 0..20),
        ) {
            let (a, b) = ([&prefix[..], &a].concat(), [&prefix[..], &b].concat());
            prop_assert_eq!(key_cmp(&a, &b), a.cmp(&b));
        }
    }

    /// What the tree and the point index hold, checked against a model
    /// after each step: lookups answer the model, scans list it.
    fn check_against(ix: &OrderedIndex, model: &std::collections::BTreeMap<Vec<u8>, u64>) {
        for k in 0u8..16 {
            assert_eq!(ix.get(&[k]), model.get(&vec![k]).map(|r| Rid(*r)), "lookup of {k}");
        }
        let mut scanned = vec![];
        ix.scan(Bound::Unbounded, Bound::Unbounded, Direction::Forward, |k, r| {
            scanned.push((k.to_vec(), r.0));
            true
        });
        assert_eq!(scanned, model.iter().map(|(k, r)| (k.clone(), *r)).collect::<Vec<_>>());
    }

    proptest! {
        /// Inserts and removals in any order keep lookups (through the
        /// point index, or the tree alone) and scans equal to a model.
        #[test]
        fn lookups_and_scans_follow_inserts_and_removals(
            points in any::<bool>(),
            ops in proptest::collection::vec((any::<bool>(), 0u8..16, any::<bool>()), 1..200),
        ) {
            let ix = OrderedIndex::new(points);
            let mut model = std::collections::BTreeMap::new();
            for (i, (insert, k, right_rid)) in ops.into_iter().enumerate() {
                let key = vec![k];
                if insert {
                    let fresh = 1000 + i as u64;
                    match (ix.insert(&key, Rid(fresh)), model.get(&key)) {
                        (Ok(()), None) => { model.insert(key, fresh); }
                        (Err(Rid(theirs)), Some(&r)) => prop_assert_eq!(theirs, r),
                        (got, want) => prop_assert!(false, "insert {k}: {got:?}, model {want:?}"),
                    }
                } else {
                    let present = model.get(&key).copied();
                    let rid = match (present, right_rid) {
                        (Some(r), true) => r,
                        (Some(r), false) => r + 1,
                        (None, _) => 7,
                    };
                    let removed = ix.remove_if(&key, Rid(rid));
                    prop_assert_eq!(removed, present == Some(rid));
                    if removed {
                        model.remove(&key);
                    }
                }
                check_against(&ix, &model);
            }
        }
    }

    /// An insert that finds its key taken returns the winner's RID only
    /// once a lookup finds it too (points' rule 1): the caller may install
    /// a version under it at once. The winner is held between its two
    /// steps; without the wait the loser's lookup would find nothing.
    #[test]
    fn a_losing_insert_returns_once_the_winners_entry_is_found() {
        let ix = OrderedIndex::new(true);
        let key = b"contended";
        std::thread::scope(|s| {
            let winner = s.spawn(|| {
                BETWEEN_STEPS
                    .with(|h| h.set(Some(|| milliscale_seam::sleep(Duration::from_millis(200)))));
                ix.insert(key, Rid(1))
            });
            while ix.tree_get(key).is_none() {
                std::thread::yield_now();
            }
            assert_eq!(ix.get(key), None, "the winner is held before the point index");
            assert_eq!(ix.insert(key, Rid(2)), Err(Rid(1)));
            assert_eq!(ix.get(key), Some(Rid(1)), "the loser returned before the lookup finds it");
            assert_eq!(winner.join().expect("winner"), Ok(()));
        });
    }

    /// A removal held between its steps (the tree's entry gone, the point
    /// index's not yet) and an insert of the same key meanwhile: the
    /// removal takes out only the entry of its own RID (points' rule 2),
    /// and the new key stays found.
    #[test]
    fn a_removal_leaves_the_entry_of_a_key_inserted_again_meanwhile() {
        let ix = OrderedIndex::new(true);
        let key = b"again";
        ix.insert(key, Rid(1)).expect("fresh");
        std::thread::scope(|s| {
            let remover = s.spawn(|| {
                BETWEEN_STEPS
                    .with(|h| h.set(Some(|| milliscale_seam::sleep(Duration::from_millis(200)))));
                ix.remove_if(key, Rid(1))
            });
            while ix.tree_get(key).is_some() {
                std::thread::yield_now();
            }
            assert_eq!(ix.get(key), Some(Rid(1)), "the remover is held before the point index");
            ix.insert(key, Rid(2)).expect("the tree has no entry: a fresh insert");
            assert!(remover.join().expect("remover"));
        });
        assert_eq!(ix.get(key), Some(Rid(2)));
        assert_eq!(ix.tree_get(key), Some(Rid(2)));
    }

    #[test]
    fn shared_prefixes_order_like_bytes() {
        let keys: [&[u8]; 7] =
            [b"", b"\0", b"ab", b"ab\0", b"ab\0\0\0\0\0\0", b"ab\0\0\0\0\0\0\0", b"abcdefgh\xff"];
        for a in keys {
            for b in keys {
                assert_eq!(key_cmp(a, b), a.cmp(b), "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn scans_both_ways_and_rejects_duplicates() {
        let ix = OrderedIndex::new(true);
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

    /// Bounds at, below and above the first and last keys (the scan drops
    /// a bound beyond the ends for speed, and must still honour it),
    /// against a `BTreeMap` of the same keys, both ways.
    #[test]
    fn bounds_beyond_the_ends_select_like_a_btreemap() {
        let ix = OrderedIndex::new(true);
        let mut model = std::collections::BTreeMap::new();
        for i in (100u32..200).step_by(3) {
            // Keys of 5 and 9 bytes, like TPC-C's district prefixes and rows.
            let mut k = i.to_be_bytes().to_vec();
            k.push(1);
            if i % 2 == 0 {
                k.extend_from_slice(&i.to_be_bytes());
            }
            ix.insert(&k, Rid(u64::from(i))).expect("fresh");
            model.insert(k, u64::from(i));
        }
        let first = model.keys().next().expect("keys").clone();
        let last = model.keys().next_back().expect("keys").clone();
        let probes: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            first[..4].to_vec(),
            first.clone(),
            last.clone(),
            [last.clone(), vec![0]].concat(),
            vec![0xff; 12],
        ];
        let bounds = |k: &Vec<u8>| [Bound::Included(k.clone()), Bound::Excluded(k.clone())];
        let mut cases = 0;
        for lo in probes.iter().flat_map(bounds).chain([Bound::Unbounded]) {
            for hi in probes.iter().flat_map(bounds).chain([Bound::Unbounded]) {
                let want: Vec<u64> = if is_empty_range(
                    lo.as_ref().map(Vec::as_slice),
                    hi.as_ref().map(Vec::as_slice),
                ) {
                    vec![]
                } else {
                    model.range((lo.clone(), hi.clone())).map(|(_, v)| *v).collect()
                };
                for dir in [Direction::Forward, Direction::Backward] {
                    let mut got = vec![];
                    ix.scan(
                        lo.as_ref().map(Vec::as_slice),
                        hi.as_ref().map(Vec::as_slice),
                        dir,
                        |_, r| {
                            got.push(r.0);
                            true
                        },
                    );
                    if dir == Direction::Backward {
                        got.reverse();
                    }
                    assert_eq!(got, want, "{lo:?}..{hi:?} {dir:?}");
                    cases += 1;
                }
            }
        }
        assert_eq!(cases, 15 * 15 * 2);
    }
}
