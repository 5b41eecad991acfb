//! The single-shard fast path at its participant: a transaction whose
//! only participant is this shard is committed by its vote.

use super::{Entry, Participant, Vote};
use crate::log::{Prepare, Record};
use crate::types::HeldKey;
use crate::versions::Versions;

impl<V: Versions> Participant<V> {
    /// The single-shard fast path: `p`'s only participant is this shard,
    /// so its vote is its decision. Validated as [`Participant::prepare`]
    /// validates; on yes it commits at once, never prepared here: its
    /// reads (keys and ranges) take effect at its commit timestamp, its
    /// writes are installed. The records returned must be made durable
    /// together, in one write (a `Prepare` and its `Commit`): a crash
    /// keeps both or neither, so the decision is durable once the
    /// prepare is, and nothing holds the forget bound down meanwhile. A
    /// transaction seen before gets its first vote again and no record,
    /// as from `prepare`.
    pub fn commit_alone(&mut self, p: Prepare) -> (Vote, Vec<Record>) {
        match self.txns.get(&p.txn) {
            Some(Entry::Prepared(_) | Entry::Committed(_)) => return (Vote::Yes, Vec::new()),
            Some(Entry::Aborted(_)) => return (Vote::No("aborted here before"), Vec::new()),
            None => {}
        }
        debug_assert!(p.participants.len() <= 1, "a transaction with other participants");
        if let Err(why) = self.validate(&p) {
            self.txns.insert(p.txn, Entry::Aborted(p.version.ts));
            return (Vote::No(why), vec![Record::Abort(p.txn, p.version.ts)]);
        }
        let ts = p.version.ts;
        for (key, _) in &p.reads {
            // Marked when it was read (or at a restart's floor since).
            let k = match self.keys.get_mut(key.as_slice()) {
                Some(k) => k,
                None => self.keys.entry(HeldKey::from_slice(key)).or_default(),
            };
            k.latest_read = k.latest_read.max(ts);
        }
        self.mark_ranges(&p.ranges, ts);
        self.versions.install(p.version, &p.writes);
        self.txns.insert(p.txn, Entry::Committed(ts));
        let txn = p.txn;
        (Vote::Yes, vec![Record::Prepare(p), Record::Commit(txn)])
    }
}
