//! The keys changed in ranges being copied to another shard (design
//! record 0009's copy before the freeze): a mover copies a range's rows
//! while it is still served, and the keys written meanwhile are copied
//! again once the range is frozen.

use std::collections::BTreeSet;

use crate::types::Key;
use crate::versions::in_range;

/// The ranges being copied, each with the keys installed in it since its
/// copy began.
#[derive(Debug, Default)]
pub struct Tracked {
    ranges: Vec<(Key, Key, BTreeSet<Key>)>,
}

impl Tracked {
    /// Start recording the keys written in `[start, end)` (an empty
    /// `end`: no end), from none; a recording of the same range already
    /// running starts again.
    pub fn start(&mut self, start: &[u8], end: &[u8]) {
        self.stop(start, end);
        self.ranges.push((start.to_vec(), end.to_vec(), BTreeSet::new()));
    }

    /// Whether `[start, end)` is recorded.
    pub fn is_recording(&self, start: &[u8], end: &[u8]) -> bool {
        self.ranges.iter().any(|(s, e, _)| s == start && e == end)
    }

    /// Stop recording `[start, end)`: the keys written there since its
    /// recording began, or `None` if it was not recorded (never, or no
    /// longer: a restart, a dropped table, or a recording given up).
    pub fn stop(&mut self, start: &[u8], end: &[u8]) -> Option<BTreeSet<Key>> {
        let i = self.ranges.iter().position(|(s, e, _)| s == start && e == end)?;
        Some(self.ranges.swap_remove(i).2)
    }

    /// Stop every recording: rows changed by another way than an install
    /// (a table dropped).
    pub fn clear(&mut self) {
        self.ranges.clear();
    }

    /// Record `key` written, if it is in a recorded range.
    pub(super) fn written(&mut self, key: &[u8]) {
        for (s, e, keys) in &mut self.ranges {
            if in_range(key, s, e) && !keys.contains(key) {
                keys.insert(key.to_vec());
            }
        }
    }

    /// Whether nothing is recorded (the common case: one check an install).
    pub(super) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_written_in_a_recorded_range_are_kept_until_it_stops() {
        let mut t = Tracked::default();
        t.written(b"b");
        t.start(b"b", b"d");
        for k in [&b"a"[..], b"b", b"c", b"c", b"d"] {
            t.written(k);
        }
        assert!(t.is_recording(b"b", b"d"));
        let keys: Vec<_> = t.stop(b"b", b"d").unwrap().into_iter().collect();
        assert_eq!(keys, vec![b"b".to_vec(), b"c".to_vec()]);
        assert!(t.stop(b"b", b"d").is_none(), "stopped once");
        t.start(b"x", b"");
        t.written(b"zz");
        t.clear();
        assert!(t.stop(b"x", b"").is_none(), "cleared");
    }
}
