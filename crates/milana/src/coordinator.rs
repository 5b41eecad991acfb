//! The client's side: a transaction's reads and buffered writes, local
//! validation of read-only transactions (MILANA §4.3), the prepares a
//! read-write one sends, and the cooperative termination protocol's rule
//! (MILANA §4.5) that participants apply when a coordinator went silent.

use std::collections::BTreeMap;

use crate::log::Prepare;
use crate::participant::ReadReply;
use crate::types::{CommitTs, Key, ShardId, Timestamp, TxnId, TxnStatus, Value};

/// A transaction at its client (the coordinator).
#[derive(Debug, Clone)]
pub struct ClientTxn {
    /// The transaction.
    pub id: TxnId,
    /// Its begin timestamp: every read is at it.
    pub begin: Timestamp,
    /// What each key read returned.
    pub reads: BTreeMap<Key, ReadReply>,
    /// The writes, buffered until commit (`None`: delete).
    pub writes: BTreeMap<Key, Option<Value>>,
    /// The ranges scanned, per shard: `[start, end)`, at the begin
    /// timestamp; and whether any scan met a prepared write at or below it.
    pub ranges: BTreeMap<ShardId, Vec<(Key, Key)>>,
    /// A scan met a prepared write at or below the begin timestamp: the
    /// transaction cannot commit (read-only or not), since that write may
    /// still commit below what the scan saw.
    pub scanned_prepared: bool,
}

impl ClientTxn {
    /// A transaction beginning at `begin`.
    pub fn new(id: TxnId, begin: Timestamp) -> ClientTxn {
        ClientTxn {
            id,
            begin,
            reads: BTreeMap::new(),
            writes: BTreeMap::new(),
            ranges: BTreeMap::new(),
            scanned_prepared: false,
        }
    }

    /// True if it writes nothing.
    pub fn read_only(&self) -> bool {
        self.writes.is_empty()
    }

    /// MILANA §4.3: a read-only transaction commits at its begin timestamp,
    /// with no round trip, if no key it read had a prepared write at or
    /// below that timestamp. (A write not yet prepared cannot commit below
    /// it any more: the read raised the key's latest read.)
    pub fn locally_valid(&self) -> bool {
        !self.scanned_prepared && self.reads.values().all(|r| !r.prepared_below)
    }

    /// The prepare each participant gets for a commit at `version`, keyed
    /// by shard; `shard_of` places a key.
    pub fn prepares(
        &self,
        version: CommitTs,
        shard_of: impl Fn(&[u8]) -> ShardId,
    ) -> BTreeMap<ShardId, Prepare> {
        let mut by_shard: BTreeMap<ShardId, Prepare> = BTreeMap::new();
        let empty = || Prepare {
            txn: self.id,
            version,
            reads: Vec::new(),
            ranges: Vec::new(),
            writes: Vec::new(),
            participants: Vec::new(),
        };
        for (shard, ranges) in &self.ranges {
            let p = by_shard.entry(*shard).or_insert_with(empty);
            p.ranges.extend(ranges.iter().map(|(a, b)| (a.clone(), b.clone(), self.begin)));
        }
        for (key, r) in &self.reads {
            let p = by_shard.entry(shard_of(key)).or_insert_with(empty);
            p.reads.push((key.clone(), r.version));
        }
        for (key, value) in &self.writes {
            let p = by_shard.entry(shard_of(key)).or_insert_with(empty);
            p.writes.push((key.clone(), value.clone()));
        }
        let participants: Vec<ShardId> = by_shard.keys().copied().collect();
        for p in by_shard.values_mut() {
            p.participants.clone_from(&participants);
        }
        by_shard
    }
}

/// The cooperative termination protocol's decision from what the
/// participants answered (`None`: no answer yet): commit if any committed
/// or all are prepared (every participant voted yes, so the coordinator
/// may have committed); abort if any aborted (it voted no, never prepared,
/// or learned of an abort); otherwise wait.
pub fn terminate(answers: &[Option<TxnStatus>]) -> Option<bool> {
    if answers.contains(&Some(TxnStatus::Committed)) {
        return Some(true);
    }
    if answers.contains(&Some(TxnStatus::Aborted)) {
        return Some(false);
    }
    answers.iter().all(|a| *a == Some(TxnStatus::Prepared)).then_some(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use TxnStatus::*;

    #[test]
    fn termination_follows_the_four_rules() {
        assert_eq!(terminate(&[Some(Prepared), Some(Committed), None]), Some(true));
        assert_eq!(terminate(&[Some(Prepared), Some(Aborted), None]), Some(false));
        assert_eq!(terminate(&[Some(Prepared), Some(Prepared)]), Some(true));
        assert_eq!(terminate(&[Some(Prepared), None]), None);
    }
}
