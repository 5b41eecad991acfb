//! A cluster's tables on one shard: their names in `_milana.tables`, and
//! their rows among the versions. Every shard gets each call (the cluster
//! client sends it to all).

use std::time::Instant;

use milliscale_milana::types::{cluster_key, table_name_ok};
use tonic::Status;

use super::Shard;
use crate::errors::{engine, refuse};

impl Shard {
    /// Add a cluster table's name here (every shard gets the call).
    pub async fn create_table(&self, name: &str) -> Result<(), Status> {
        table_name_ok(name).map_err(refuse::invalid)?;
        let ack = {
            let mut st = self.lock();
            if st.names.contains(name) {
                return Err(engine(&milliscale::Error::TableExists(name.into())));
            }
            let mut tx = self.tables.db.begin().map_err(|e| engine(&e))?;
            tx.put(&self.tables.names, name.as_bytes(), b"").map_err(|e| engine(&e))?;
            let ack = tx.precommit().map_err(|e| engine(&e))?;
            st.names.insert(name.to_owned());
            ack
        };
        ack.await.map_err(|e| engine(&e))?;
        Ok(())
    }

    /// Drop a cluster table's name and its rows here, once no prepared
    /// transaction writes to it (a commit decided after the drop would
    /// write its rows again: one acknowledged before the drop was asked
    /// for has only its decision left to arrive). It waits for those
    /// decisions up to twice the termination timeout, then refuses,
    /// retryably.
    pub async fn drop_table(&self, name: &str) -> Result<(), Status> {
        let deadline = Instant::now() + 2 * self.opts.termination_timeout;
        loop {
            let decided = self.decided.notified();
            tokio::pin!(decided);
            decided.as_mut().enable();
            if let Some(ack) = self.drop_now(name)? {
                ack.await.map_err(|e| engine(&e))?;
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(refuse::timeout(format!(
                    "transactions writing to table {name:?} are still being decided; drop it again"
                )));
            }
            let _ = tokio::time::timeout(left, decided).await;
        }
    }

    /// The drop's engine transaction, pre-committed; `None` while a
    /// prepared transaction writes to the table.
    fn drop_now(&self, name: &str) -> Result<Option<milliscale::CommitAck>, Status> {
        let mut st = self.lock();
        if !st.names.contains(name) {
            return Err(engine(&milliscale::Error::TableNotFound(name.into())));
        }
        if st.p.prepared_writes_to(name) {
            return Ok(None);
        }
        let rows = st.p.versions_mut().table().clone();
        let mut tx = self.tables.db.begin().map_err(|e| engine(&e))?;
        tx.delete(&self.tables.names, name.as_bytes()).map_err(|e| engine(&e))?;
        // Every row of the table: its cluster keys start with the name and
        // 0x00.
        let lower = cluster_key(name, b"");
        let mut upper = name.as_bytes().to_vec();
        upper.extend_from_slice(&[0x01]);
        let doomed: Vec<Vec<u8>> = tx
            .range(
                &rows,
                std::ops::Bound::Included(&lower[..]),
                std::ops::Bound::Excluded(&upper[..]),
                milliscale::Direction::Forward,
            )
            .map(|r| r.map(|(k, _)| k))
            .collect::<Result<_, _>>()
            .map_err(|e| engine(&e))?;
        for k in &doomed {
            tx.delete(&rows, k).map_err(|e| engine(&e))?;
        }
        let ack = tx.precommit().map_err(|e| engine(&e))?;
        let replaced = st.p.versions_mut().forget_prefix(&cluster_key(name, b""));
        st.names.remove(name);
        st.versions -= (doomed.len() + replaced) as i64;
        Ok(Some(ack))
    }

    /// The cluster tables this shard knows.
    pub fn table_names(&self) -> Vec<String> {
        self.lock().names.iter().cloned().collect()
    }
}
