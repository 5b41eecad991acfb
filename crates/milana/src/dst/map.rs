//! The simulated shard map (design record 0009): versions on a store,
//! each created once (a conditional write), each a list of ranges and
//! their owners. A shard and a client each serve or route by the version
//! they last read.

use crate::types::{Key, ShardId};
use crate::versions::in_range;

/// One version of the map: `[start, next start)` belongs to its shard;
/// the first range starts at the empty key, so every key has an owner.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Map {
    pub(super) ranges: Vec<(Key, ShardId)>,
}

impl Map {
    /// `keys` (sorted) cut into `shards` ranges of as many keys each.
    pub(super) fn even(keys: &[Key], shards: u32) -> Map {
        let n = keys.len();
        let mut ranges = vec![(Vec::new(), 0)];
        for s in 1..shards {
            let i = n * s as usize / shards as usize;
            if let Some(k) = keys.get(i)
                && ranges.last().is_some_and(|(last, _)| last < k)
            {
                ranges.push((k.clone(), s));
            }
        }
        Map { ranges }
    }

    /// The index of the range holding `key`.
    pub(super) fn index(&self, key: &[u8]) -> usize {
        self.ranges.partition_point(|(start, _)| start.as_slice() <= key) - 1
    }

    /// The owner of `key`.
    pub(super) fn owner(&self, key: &[u8]) -> ShardId {
        self.ranges[self.index(key)].1
    }

    /// Range `i` as `(start, end)` (an empty `end`: no end).
    pub(super) fn bounds(&self, i: usize) -> (Key, Key) {
        let end = self.ranges.get(i + 1).map(|(k, _)| k.clone()).unwrap_or_default();
        (self.ranges[i].0.clone(), end)
    }

    /// Whether `s` owns every key of `[start, end)` (an empty `end`: no
    /// end).
    pub(super) fn owns_range(&self, s: ShardId, start: &[u8], end: &[u8]) -> bool {
        let first = self.index(start);
        self.ranges[first..]
            .iter()
            .take_while(|(k, _)| end.is_empty() || k.as_slice() < end || k.as_slice() == start)
            .all(|(_, o)| *o == s)
    }

    /// The parts of `[start, end)` by owner: `(start, end, owner)`.
    pub(super) fn pieces(&self, start: &[u8], end: &[u8]) -> Vec<(Key, Key, ShardId)> {
        let mut out = Vec::new();
        for i in self.index(start)..self.ranges.len() {
            let (a, b) = self.bounds(i);
            if !end.is_empty() && a.as_slice() >= end {
                break;
            }
            let lo = if a.as_slice() < start { start.to_vec() } else { a };
            let hi = match (b.is_empty(), end.is_empty()) {
                (true, _) => end.to_vec(),
                (false, true) => b,
                (false, false) => b.min(end.to_vec()),
            };
            out.push((lo, hi, self.ranges[i].1));
        }
        out
    }

    /// How many of `keys` each range holds.
    pub(super) fn counts(&self, keys: &[Key]) -> Vec<usize> {
        let mut counts = vec![0; self.ranges.len()];
        for k in keys {
            counts[self.index(k)] += 1;
        }
        counts
    }

    /// The keys of `keys` in range `i`.
    pub(super) fn keys_in<'k>(&self, i: usize, keys: &'k [Key]) -> Vec<&'k Key> {
        let (a, b) = self.bounds(i);
        keys.iter().filter(|k| in_range(k, &a, &b)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_route_keys_and_cut_scans_by_owner() {
        let keys: Vec<Key> = (0..6).map(|i| format!("k{i}").into_bytes()).collect();
        let m = Map::even(&keys, 3);
        assert_eq!(m.ranges, vec![(vec![], 0), (b"k2".to_vec(), 1), (b"k4".to_vec(), 2)]);
        assert_eq!((m.owner(b"a"), m.owner(b"k2"), m.owner(b"k39"), m.owner(b"z")), (0, 1, 1, 2));
        assert!(m.owns_range(1, b"k2", b"k4") && !m.owns_range(1, b"k2", b"k5"));
        assert!(m.owns_range(2, b"k4", b"") && m.owns_range(0, b"", b"k2"));
        let p = m.pieces(b"k1", b"k5");
        assert_eq!(p.len(), 3);
        assert_eq!(p[0], (b"k1".to_vec(), b"k2".to_vec(), 0));
        assert_eq!(p[2], (b"k4".to_vec(), b"k5".to_vec(), 2));
        assert_eq!(m.pieces(b"k4", b"").last(), Some(&(b"k4".to_vec(), vec![], 2)));
        assert_eq!(m.counts(&keys), vec![2, 2, 2]);
        assert_eq!(m.keys_in(1, &keys), vec![&keys[2], &keys[3]]);
    }
}
