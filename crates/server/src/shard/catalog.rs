//! A cluster's tables on one shard: their names in `_milana.tables`, and
//! their rows among the versions. Every shard gets each call (the cluster
//! client sends it to all).

use std::sync::Arc;
use std::time::{Duration, Instant};

use milliscale_milana::types::ShardId;

use milliscale_milana::types::table_name_ok;
use tonic::Status;

use super::Shard;
use super::tables::open_or_create;
use crate::errors::{engine, refuse};

impl Shard {
    /// Add a cluster table's name here (every shard gets the call).
    pub async fn create_table(&self, name: &str) -> Result<(), Status> {
        if self.opts.read_only {
            return Err(super::read_only_refusal());
        }
        table_name_ok(name).map_err(refuse::invalid)?;
        {
            let st = self.lock();
            if self.names.read().contains(name) {
                return Err(engine(&milliscale::Error::TableExists(name.into())));
            }
            if st.dropping.contains(name) {
                return Err(being_dropped(name));
            }
        }
        // Its rows' engine table first (durable), then its name.
        let table = open_or_create(&self.tables.db, name).await.map_err(|e| engine(&e))?;
        let ack = {
            let mut st = self.lock();
            if self.names.read().contains(name) {
                return Err(engine(&milliscale::Error::TableExists(name.into())));
            }
            if st.dropping.contains(name) {
                return Err(being_dropped(name));
            }
            st.p.versions_mut().register(table);
            let mut tx = self.tables.db.begin().map_err(|e| engine(&e))?;
            tx.put(&self.tables.names, name.as_bytes(), b"").map_err(|e| engine(&e))?;
            let ack = tx.precommit().map_err(|e| engine(&e))?;
            self.names.write().insert(name.to_owned());
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
        if self.opts.read_only {
            return Err(super::read_only_refusal());
        }
        let deadline = Instant::now() + 2 * self.opts.termination_timeout;
        loop {
            let decided = self.decided.notified();
            tokio::pin!(decided);
            decided.as_mut().enable();
            if self.drop_now(name)? {
                let dropped = self.drop_durably(name).await;
                self.lock().dropping.remove(name);
                return dropped;
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

    /// Drop the rows' engine table, then the name: a restart in between
    /// finds the name and an empty table, and the drop is asked again.
    async fn drop_durably(&self, name: &str) -> Result<(), Status> {
        match self.tables.db.drop_table(name).await {
            Ok(()) | Err(milliscale::Error::TableNotFound(_)) => {}
            Err(e) => return Err(engine(&e)),
        }
        let mut tx = self.tables.db.begin().map_err(|e| engine(&e))?;
        tx.delete(&self.tables.names, name.as_bytes()).map_err(|e| engine(&e))?;
        tx.precommit().map_err(|e| engine(&e))?.await.map_err(|e| engine(&e))?;
        Ok(())
    }

    /// Take the table out of service under the lock, once no prepared
    /// transaction writes to it: its name, and its rows' table and
    /// versions in memory; `false` while a prepared transaction writes to
    /// it.
    fn drop_now(&self, name: &str) -> Result<bool, Status> {
        let mut st = self.lock();
        if !self.names.read().contains(name) {
            return Err(engine(&milliscale::Error::TableNotFound(name.into())));
        }
        if st.p.prepared_writes_to(name) {
            return Ok(false);
        }
        let rows = match self.tables.db.open_table(name) {
            Ok(t) => {
                let mut tx = self.tables.db.begin().map_err(|e| engine(&e))?;
                let all = (std::ops::Bound::Unbounded, std::ops::Bound::Unbounded);
                tx.range(&t, all.0, all.1, milliscale::Direction::Forward).count()
            }
            Err(_) => 0,
        };
        let replaced = st.p.versions_mut().forget_table(name);
        self.names.write().remove(name);
        st.dropping.insert(name.to_owned());
        st.versions -= (rows + replaced) as i64;
        Ok(true)
    }

    /// The cluster tables this shard knows.
    pub fn table_names(&self) -> Vec<String> {
        self.names.read().iter().cloned().collect()
    }

    /// [`Shard::join_catalog`] in a task of its own, for up to a minute.
    pub(super) fn join_in_background(self: &Arc<Self>) {
        let me = Arc::clone(self);
        tokio::spawn(async move { me.join_catalog(Duration::from_secs(60)).await });
    }

    /// A shard that joined the cluster (it owns no range and knows no
    /// table) learns the tables from another shard: it asks each in turn,
    /// every second until one answers or `patience` has passed, and
    /// creates here every table the answer names. A table created
    /// meanwhile by a client whose map did not name this shard yet is
    /// missed here; a range moved here brings its tables (design record
    /// 0009). Returns how many it created.
    pub(super) async fn join_catalog(&self, patience: Duration) -> usize {
        let deadline = Instant::now() + patience;
        loop {
            let others: Vec<ShardId> = {
                let map = self.map.read();
                if map.owns_any(self.opts.shard) || !self.names.read().is_empty() {
                    return 0;
                }
                map.shards.keys().copied().filter(|s| *s != self.opts.shard).collect()
            };
            for s in others {
                let Some(names) = self.peer_tables(s).await else { continue };
                let mut created = 0;
                for name in names {
                    match self.create_table(&name).await {
                        Ok(()) => created += 1,
                        Err(e) if e.code() == tonic::Code::AlreadyExists => {}
                        Err(e) => tracing::warn!(table = %name, "joining: {}", e.message()),
                    }
                }
                tracing::info!(from = s, created, "joined: the cluster's tables created here");
                return created;
            }
            if Instant::now() >= deadline {
                tracing::warn!("joining: no other shard told its tables");
                return 0;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// A create of a table whose drop has not finished here (retryable).
fn being_dropped(name: &str) -> Status {
    refuse::timeout(format!("table {name:?} is being dropped here; create it again"))
}
