//! What a range's move needs of its participants (design record 0009):
//! at the old owner, whether a prepared write is left in the range and
//! the latest read served there; at the new owner, that read as the
//! range's read floor.

use super::Participant;
use crate::types::Timestamp;
use crate::versions::{Versions, in_range};

impl<V: Versions> Participant<V> {
    /// Raise the read mark of `[start, end)` (an empty `end`: no end) to
    /// `ts`, as a scan there at `ts` would: no write into it commits at or
    /// below `ts`. For a range moved here, whose old owner served reads
    /// below `ts` (its read lease; design record 0009).
    pub fn raise_read_floor(&mut self, start: &[u8], end: &[u8], ts: Timestamp) {
        self.mark_ranges(&[(start.to_vec(), end.to_vec(), 0)], ts);
    }

    /// The latest read this shard served in `[start, end)` (an empty
    /// `end`: no end), or may have: the highest read mark of a key or a
    /// range there, and the floor the marks collected or a restart left.
    /// A range's new owner refuses writes at or below it (design record
    /// 0009): no write there may slip under a read served here.
    pub fn latest_read_in(&self, start: &[u8], end: &[u8]) -> Timestamp {
        let keys = self.keys.iter().filter(|(k, _)| in_range(k, start, end));
        let ranges = self.ranges.iter().filter(|r| {
            (r.end.is_empty() || start < r.end.as_slice())
                && (end.is_empty() || r.start.as_slice() < end)
        });
        keys.map(|(_, k)| k.latest_read)
            .chain(ranges.map(|r| r.latest_read))
            .fold(self.read_floor.max(self.collected), Timestamp::max)
    }

    /// Whether an undecided transaction prepared here writes a key in
    /// `[start, end)` (an empty `end`: no end).
    pub fn prepared_in(&self, start: &[u8], end: &[u8]) -> bool {
        self.prepared_keys.range(start.to_vec()..).next().is_some_and(|k| in_range(k, start, end))
    }
}
