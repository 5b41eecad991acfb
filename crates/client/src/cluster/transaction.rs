//! A transaction on a cluster: reads at its begin timestamp, buffered
//! writes, and the commit the client coordinates (see the parent module).

use std::collections::{BTreeMap, BTreeSet};

use milliscale_milana::coordinator::ClientTxn;
use milliscale_milana::types::{
    CommitTs, Key, ShardId, cluster_key, cluster_range, split_cluster_key,
};

use super::{Cluster, lock, physical_now, table_key, ts_to};
use crate::{Error, KeyRange, Result, proto};

/// A transaction on a cluster ([`Cluster::begin`]). Reads go to the
/// shards at its begin timestamp; writes stay here until
/// [`ClusterTransaction::commit`]. Dropping it unfinished aborts it (there
/// is nothing on the shards to undo).
#[derive(Debug)]
pub struct ClusterTransaction {
    cluster: Cluster,
    txn: ClientTxn,
}

impl ClusterTransaction {
    pub(super) fn new(cluster: Cluster, txn: ClientTxn) -> ClusterTransaction {
        ClusterTransaction { cluster, txn }
    }
}

impl Drop for ClusterTransaction {
    fn drop(&mut self) {
        lock(&self.cluster.inner.active).remove(&(self.txn.begin, self.txn.id.seq));
    }
}

/// `range` of `table` in the cluster's key space: `[lo, hi)`.
pub(super) fn bounds(table: &str, range: &KeyRange) -> (Vec<u8>, Vec<u8>) {
    cluster_range(table, range.start.as_deref(), range.end.as_deref(), range.prefix.as_deref())
}

fn check_table(table: &str) -> Result<()> {
    milliscale_milana::types::table_name_ok(table).map_err(Error::invalid)
}

impl ClusterTransaction {
    /// Its name: the client's id and the client's count of its
    /// transactions.
    pub fn id(&self) -> (u32, u64) {
        (self.txn.id.client, self.txn.id.seq)
    }

    /// Its begin timestamp (µs of the client's hybrid clock).
    pub fn begin_ts(&self) -> u64 {
        self.txn.begin
    }

    /// Read `key` of `table` (this transaction's own write if it wrote it).
    pub async fn get(&mut self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut v = self.get_many(table, &[key]).await?;
        Ok(v.pop().flatten())
    }

    /// The values of `keys` of `table` at the transaction's timestamp, in
    /// their order: one `ShardRead` for each shard holding any of them not
    /// read or written yet, sent at once. Each is a read as [`Self::get`]'s,
    /// validated at commit. A failed shard's keys are read again as
    /// `get`'s are (after a map reload on `wrong_shard`).
    pub async fn get_many(&mut self, table: &str, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        check_table(table)?;
        let keys: Vec<Key> = keys.iter().map(|k| cluster_key(table, k)).collect();
        let mut tries = 0;
        loop {
            let map = self.cluster.map();
            let mut by_shard: BTreeMap<ShardId, Vec<Key>> = BTreeMap::new();
            for k in &keys {
                if !self.txn.writes.contains_key(k) && !self.txn.reads.contains_key(k) {
                    let on = by_shard.entry(map.shard_of(k)).or_default();
                    if !on.contains(k) {
                        on.push(k.clone());
                    }
                }
            }
            match self.read_shards(by_shard).await {
                Ok(()) => break,
                Err(e) => self.cluster.after_read_error(e, &mut tries).await?,
            }
        }
        Ok(keys
            .iter()
            .map(|k| match self.txn.writes.get(k) {
                Some(v) => v.clone(),
                None => self.txn.reads.get(k).and_then(|r| r.value.clone()),
            })
            .collect())
    }

    /// Read each shard's keys, the shards at once; every answer is kept as
    /// a read, and the first failure is returned.
    async fn read_shards(&mut self, by_shard: BTreeMap<ShardId, Vec<Key>>) -> Result<()> {
        let at = self.txn.begin;
        let mut answers = Vec::with_capacity(by_shard.len());
        if by_shard.len() == 1 {
            for (s, keys) in by_shard {
                let r = self.cluster.read(s, &keys, at).await;
                answers.push((s, keys, r));
            }
        } else {
            let mut set = tokio::task::JoinSet::new();
            for (s, keys) in by_shard {
                let c = self.cluster.clone();
                set.spawn(async move {
                    let r = c.read(s, &keys, at).await;
                    (s, keys, r)
                });
            }
            while let Some(a) = set.join_next().await {
                answers.push(a.map_err(|e| Error::local(format!("a shard read's task: {e}")))?);
            }
        }
        let mut failed = None;
        for (s, keys, r) in answers {
            match r {
                Ok(replies) if replies.len() == keys.len() => {
                    for (k, r) in keys.into_iter().zip(replies) {
                        lock(&self.cluster.inner.clock).observe(r.version.ts);
                        self.txn.reads.insert(k, r);
                    }
                }
                Ok(_) => {
                    failed.get_or_insert(Error::local(format!(
                        "shard {s} answered a read with another count of keys"
                    )));
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// Write `value` under `key` of `table` (at commit).
    pub fn put(&mut self, table: &str, key: &[u8], value: &[u8]) -> Result<()> {
        check_table(table)?;
        milliscale_milana::versions::write_ok(table, key, Some(value)).map_err(Error::invalid)?;
        self.txn.writes.insert(cluster_key(table, key), Some(value.to_vec()));
        Ok(())
    }

    /// The rows of `table` in `range`, at the transaction's timestamp,
    /// with this transaction's own writes in them. Each shard holding
    /// part of the range is scanned in key order; the commit validates the
    /// ranges (no row changed or appeared in them since: no phantom). A
    /// reverse scan reads the whole range and reverses it at the client.
    pub async fn scan(&mut self, table: &str, range: KeyRange) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        check_table(table)?;
        let (lo, hi) = bounds(table, &range);
        let mut tries = 0;
        loop {
            match self.scan_once(&lo, &hi, &range).await {
                Err(e) => self.cluster.after_read_error(e, &mut tries).await?,
                r => return r,
            }
        }
    }

    async fn scan_once(
        &mut self,
        lo: &[u8],
        hi: &[u8],
        range: &KeyRange,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let map = self.cluster.map();
        let limit = self.txn.scan_ask(lo, hi, range.reverse, range.limit);
        let mut rows: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for (i, (first, shard)) in map.ranges.iter().enumerate() {
            let next = map.ranges.get(i + 1).map(|(k, _)| k.as_slice());
            // This map range's part of [lo, hi).
            let start = first.as_slice().max(lo).to_vec();
            let end = match next {
                Some(n) if n < hi => n.to_vec(),
                _ => hi.to_vec(),
            };
            if start >= end {
                continue;
            }
            let left = if limit == 0 { 0 } else { limit - rows.len() as u64 };
            let reply = self.cluster.scan_shard(*shard, &start, &end, left, self.txn.begin).await?;
            self.txn.ranges.entry(*shard).or_default().push((start, end));
            self.txn.scanned_prepared |= reply.prepared_below;
            for r in reply.rows {
                if let Some(v) = &r.version {
                    lock(&self.cluster.inner.clock).observe(v.ts);
                }
                if split_cluster_key(&r.key).is_none() {
                    return Err(Error::local("a shard answered a scan with a foreign key".into()));
                }
                rows.push((r.key.to_vec(), r.value.to_vec()));
            }
            if limit != 0 && rows.len() as u64 >= limit {
                break;
            }
        }
        let rows = self.txn.own_view(lo, hi, rows, range.reverse, range.limit);
        Ok(rows
            .into_iter()
            .map(|(k, v)| (split_cluster_key(&k).map_or(Vec::new(), |(_, k)| k.to_vec()), v))
            .collect())
    }

    /// Delete `key` of `table` (at commit); whether it held a value (a
    /// read of it, which the commit validates).
    pub async fn delete(&mut self, table: &str, key: &[u8]) -> Result<bool> {
        check_table(table)?;
        milliscale_milana::versions::write_ok(table, key, None).map_err(Error::invalid)?;
        let existed = self.get(table, key).await?.is_some();
        self.txn.writes.insert(cluster_key(table, key), None);
        Ok(existed)
    }

    /// Overwrite `bytes.len()` bytes of `key`'s value at `offset` (at
    /// commit): a read of the value, validated at commit, and a write of
    /// the whole new value. Fails with kind `not_found` if the key has no
    /// value, and `invalid_input` if the range passes its end.
    pub async fn patch(
        &mut self,
        table: &str,
        key: &[u8],
        offset: u32,
        bytes: &[u8],
    ) -> Result<()> {
        let Some(old) = self.get(table, key).await? else {
            return Err(Error::not_found("update_range of a key with no value"));
        };
        let new = milliscale_milana::coordinator::patch(&old, offset as usize, bytes)
            .map_err(Error::invalid)?;
        self.put(table, key, &new)
    }

    /// The shards it has touched so far (its participants if it commits
    /// now), under the current map.
    pub fn shards(&self) -> Vec<u32> {
        let map = self.cluster.map();
        let mut s: BTreeSet<ShardId> =
            self.txn.reads.keys().chain(self.txn.writes.keys()).map(|k| map.shard_of(k)).collect();
        s.extend(self.txn.ranges.keys());
        s.into_iter().collect()
    }

    /// Abort: nothing was sent to be undone.
    pub fn abort(self) {}

    /// Commit (see the module's comment). Returns the commit timestamp
    /// (the version its writes carry on every shard, µs of the hybrid
    /// clock), or `None` for a transaction that wrote nothing. An error
    /// of kind `unknown` means the outcome is not known (votes did not
    /// come back): do not report it either way.
    pub async fn commit(self) -> Result<Option<u64>> {
        let cluster = self.cluster.clone();
        let txn = &self.txn;
        let local = cluster.inner.builder.local_validation;
        if txn.read_only() && (local || txn.reads.is_empty()) {
            return if txn.locally_valid() {
                Ok(None)
            } else {
                Err(Error::conflict(
                    "a key read had a prepared write below the read time; run it again".into(),
                ))
            };
        }
        let version = CommitTs {
            ts: lock(&cluster.inner.clock).now(physical_now()),
            client: cluster.inner.id,
        };
        let map = cluster.map();
        let prepares = txn.prepares(version, |k| map.shard_of(k));
        let shards: Vec<ShardId> = prepares.keys().copied().collect();
        let votes: Vec<_> = prepares
            .into_iter()
            .map(|(s, p)| {
                let cluster = cluster.clone();
                let req = proto::ShardPrepareRequest {
                    txn: Some(proto::ClusterTxnId { client: p.txn.client, seq: p.txn.seq }),
                    version: Some(ts_to(p.version)),
                    reads: p
                        .reads
                        .iter()
                        .map(|(k, v)| proto::ReadVersion {
                            key: Some(table_key(k)),
                            version: Some(ts_to(*v)),
                        })
                        .collect(),
                    writes: p
                        .writes
                        .iter()
                        .map(|(k, v)| proto::ShardWrite {
                            key: Some(table_key(k)),
                            value: v.clone().map(Into::into),
                        })
                        .collect(),
                    participants: p.participants.clone(),
                    ranges: p
                        .ranges
                        .iter()
                        .map(|(start, end, at)| proto::ScannedRange {
                            start: start.clone().into(),
                            end: end.clone().into(),
                            at: *at,
                        })
                        .collect(),
                };
                tokio::spawn(async move { cluster.prepare(s, req).await })
            })
            .collect();
        let (mut missing, mut no) = (0, None);
        for v in votes {
            match v.await.unwrap_or(None) {
                Some(Ok(())) => {}
                Some(Err(e)) => no = no.or(Some(e)),
                None => missing += 1,
            }
        }
        if let Some(e) = no {
            cluster.decide(txn.id, version.ts, &shards, false);
            if e.kind() == "wrong_shard" && !cluster.await_map(&e).await {
                let _ = cluster.refresh().await;
            }
            return Err(e);
        }
        if missing > 0 {
            return Err(Error::unknown(format!(
                "{missing} of {} participants did not vote; the shards settle it",
                shards.len()
            )));
        }
        if shards.len() > 1 {
            cluster.decide(txn.id, version.ts, &shards, true);
        }
        Ok((!txn.read_only()).then_some(version.ts))
    }
}
