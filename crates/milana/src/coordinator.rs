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

    /// The prepare of a transaction whose only participant is `shard`
    /// (every key and range it touched is that shard's): what
    /// [`ClientTxn::prepares`] would give it, its keys and values moved,
    /// not copied.
    pub fn into_prepare(self, version: CommitTs, shard: ShardId) -> Prepare {
        let begin = self.begin;
        let ranges = self.ranges.into_values().flatten().map(|(a, b)| (a, b, begin));
        Prepare {
            txn: self.id,
            version,
            reads: self.reads.into_iter().map(|(k, r)| (k, r.version)).collect(),
            ranges: ranges.collect(),
            writes: self.writes.into_iter().collect(),
            participants: vec![shard],
        }
    }

    /// How many rows to ask the shards for, for a scan of `[lo, hi)` of
    /// at most `limit` rows (0: all): each of this transaction's writes in
    /// the range may hide a row, so that many more; a reverse scan reads
    /// the whole range (0).
    pub fn scan_ask(&self, lo: &[u8], hi: &[u8], reverse: bool, limit: u64) -> u64 {
        match (reverse, limit) {
            (true, _) | (false, 0) => 0,
            (false, n) => n + self.writes.range(lo.to_vec()..hi.to_vec()).count() as u64,
        }
    }

    /// A scan of `[lo, hi)` as this transaction sees it: `read` (the
    /// shards' rows, in key order, as many as [`Self::scan_ask`] said, or
    /// every row of the range if fewer came back) with its own writes in
    /// the range laid over them, in key order or reversed, cut to `limit`
    /// (0: all). Exact: the rows read are every row up to the last one.
    pub fn own_view(
        &self,
        lo: &[u8],
        hi: &[u8],
        read: Vec<(Key, Value)>,
        reverse: bool,
        limit: u64,
    ) -> Vec<(Key, Value)> {
        let mut rows = read;
        let mut own = self.writes.range(lo.to_vec()..hi.to_vec()).peekable();
        if own.peek().is_some() {
            let mut merged: BTreeMap<Key, Value> = rows.into_iter().collect();
            for (k, v) in own {
                match v {
                    Some(v) => merged.insert(k.clone(), v.clone()),
                    None => merged.remove(k),
                };
            }
            rows = merged.into_iter().collect();
        }
        if reverse {
            rows.reverse();
        }
        if limit != 0 {
            rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        }
        rows
    }
}

/// `value` with `bytes` written over it at `offset` (a batch's patch);
/// refused past the value's end, as the engine's `update_range` is.
pub fn patch(value: &[u8], offset: usize, bytes: &[u8]) -> Result<Value, String> {
    let end = offset.checked_add(bytes.len()).filter(|e| *e <= value.len()).ok_or_else(|| {
        format!(
            "update_range {offset}..{} is past the end of a {}-byte value",
            offset.saturating_add(bytes.len()),
            value.len()
        )
    })?;
    let mut out = value.to_vec();
    out[offset..end].copy_from_slice(bytes);
    Ok(out)
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

    #[test]
    fn a_lone_participants_prepare_is_the_one_prepares_gives_it() {
        let mut t = ClientTxn::new(TxnId { client: 1, seq: 7 }, 50);
        let reply = |ts| ReadReply {
            version: CommitTs { ts, client: 2 },
            value: Some(b"v".to_vec()),
            prepared_below: false,
        };
        t.reads.insert(b"a".to_vec(), reply(10));
        t.reads.insert(b"c".to_vec(), reply(20));
        t.writes.insert(b"b".to_vec(), Some(b"x".to_vec()));
        t.writes.insert(b"c".to_vec(), None);
        t.ranges.entry(3).or_default().push((b"a".to_vec(), b"z".to_vec()));
        let version = CommitTs { ts: 60, client: 1 };
        let expected = t.prepares(version, |_| 3).remove(&3).expect("shard 3's");
        assert_eq!(t.into_prepare(version, 3), expected);
    }
}
