//! A transaction on a cluster: reads at its begin timestamp, buffered
//! writes, and the commit the client coordinates (see the parent module).

use std::collections::BTreeSet;

use milliscale_milana::coordinator::ClientTxn;
use milliscale_milana::types::{CommitTs, ShardId, cluster_key};

use super::{Cluster, lock, physical_now, table_key, ts_to};
use crate::{Error, Result, proto};

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
        check_table(table)?;
        let k = cluster_key(table, key);
        if let Some(v) = self.txn.writes.get(&k) {
            return Ok(v.clone());
        }
        if let Some(r) = self.txn.reads.get(&k) {
            return Ok(r.value.clone());
        }
        let mut tries = 0;
        let r = loop {
            let s = self.cluster.map().shard_of(&k);
            match self.cluster.read(s, std::slice::from_ref(&k), self.txn.begin).await {
                Ok(mut r) if r.len() == 1 => break r.remove(0),
                Ok(_) => {
                    return Err(Error::local(format!(
                        "shard {s} answered a read of one key with another count"
                    )));
                }
                Err(e) if e.kind() == "wrong_shard" && tries < 3 => {
                    tries += 1;
                    self.cluster.refresh().await?;
                }
                Err(e) if e.kind() == "unavailable" => {
                    // The next run of the transaction finds the new map.
                    let _ = self.cluster.refresh().await;
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
        };
        lock(&self.cluster.inner.clock).observe(r.version.ts);
        let value = r.value.clone();
        self.txn.reads.insert(k, r);
        Ok(value)
    }

    /// Write `value` under `key` of `table` (at commit).
    pub fn put(&mut self, table: &str, key: &[u8], value: &[u8]) -> Result<()> {
        check_table(table)?;
        self.txn.writes.insert(cluster_key(table, key), Some(value.to_vec()));
        Ok(())
    }

    /// Delete `key` of `table` (at commit); whether it held a value (a
    /// read of it, which the commit validates).
    pub async fn delete(&mut self, table: &str, key: &[u8]) -> Result<bool> {
        let existed = self.get(table, key).await?.is_some();
        self.txn.writes.insert(cluster_key(table, key), None);
        Ok(existed)
    }

    /// The shards it has touched so far (its participants if it commits
    /// now), under the current map.
    pub fn shards(&self) -> Vec<u32> {
        let map = self.cluster.map();
        let s: BTreeSet<ShardId> =
            self.txn.reads.keys().chain(self.txn.writes.keys()).map(|k| map.shard_of(k)).collect();
        s.into_iter().collect()
    }

    /// Abort: nothing was sent to be undone.
    pub fn abort(self) {}

    /// Commit (see the module's comment). An error of kind `unknown` means
    /// the outcome is not known (votes did not come back): do not report
    /// it either way.
    pub async fn commit(self) -> Result<()> {
        let cluster = self.cluster.clone();
        let txn = &self.txn;
        let local = cluster.inner.builder.local_validation;
        if txn.read_only() && (local || txn.reads.is_empty()) {
            return if txn.locally_valid() {
                Ok(())
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
            if e.kind() == "wrong_shard" {
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
        Ok(())
    }
}
