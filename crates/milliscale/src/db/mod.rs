//! The database: the public facade over the engine ([`crate::engine`]).
//!
//! - this module: tables, transactions, metrics and close;
//! - `open`: creating a database, or opening and recovering one;
//! - `checkpointer`: checkpoints on demand and in the background;
//! - `promote`: a read replica becoming the writer.

mod checkpointer;
mod open;
mod promote;
pub mod restore;

use milliscale_seam::JoinHandle;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;

pub(crate) use crate::manifest::read_manifest_unprobed;
pub(crate) use open::fresh_log;

use crate::engine::{Engine, check_table_name};
use crate::error::{Error, Result};
use crate::limits::TABLES_MAX;
use crate::log::{Log, LogMetrics};
use crate::manifest::Manifest;
use crate::mvcc::Csn;
use crate::options::{Isolation, TxnOptions};
use crate::recovery::RecoveryReport;
use crate::table::Table;
use crate::txn::Transaction;

/// An open database. Share it between threads by reference (`&Database`, for
/// example with `std::thread::scope`) or in an `Arc`.
pub struct Database {
    pub(crate) inner: Arc<Engine>,
    checkpointer: Mutex<Option<JoinHandle<()>>>,
    /// With a retention window: the thread that writes the time index out
    /// every second (`history::times`), apart from the checkpointer so
    /// that a long checkpoint does not hold it back.
    time_flusher: Mutex<Option<JoinHandle<()>>>,
}

/// Counters for monitoring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbStats {
    /// The next CSN to be handed out.
    pub next_csn: Csn,
    /// The current GC horizon.
    pub gc_horizon: Csn,
    /// Versions unlinked by garbage collection so far.
    pub versions_retired: u64,
    /// Deleted keys whose index entry and record id were reclaimed so far
    /// (once every snapshot saw them deleted).
    pub keys_reclaimed: u64,
    /// Deleted keys waiting for every snapshot to see them deleted.
    pub keys_awaiting_reclaim: usize,
    /// Tables in the database.
    pub tables: usize,
}

impl Database {
    /// What recovery found and did at open; `None` for a new database or
    /// one without a log.
    pub fn recovery_report(&self) -> Option<&RecoveryReport> {
        self.inner.recovery.as_ref()
    }

    /// What was read to open this database at a point of its past
    /// ([`Database::open_at`]); `None` otherwise.
    pub fn past_report(&self) -> Option<&crate::history::past::PastReport> {
        self.inner.past.as_ref()
    }

    /// The current manifest; `None` without a log.
    pub fn manifest(&self) -> Option<Manifest> {
        self.inner.manifest.as_ref().map(|m| milliscale_seam::lock(&m.current).clone())
    }

    /// Create a table. Fails with `TableExists` if the name is taken.
    /// With a log, the new table is recorded in the manifest (one
    /// conditional put) before this returns.
    pub fn create_table(&self, name: &str) -> Result<Table> {
        self.inner.check_open()?;
        if self.inner.read_only {
            return Err(Error::InvalidArgument("the database was opened read-only".into()));
        }
        check_table_name(name)?;
        let mut cat = self.inner.tables.write();
        if cat.by_name.contains_key(name) {
            return Err(Error::TableExists(name.to_owned()));
        }
        if cat.by_id.len() >= TABLES_MAX {
            return Err(Error::InvalidArgument(format!(
                "at most {TABLES_MAX} tables, dropped ones included (ids are not used again)"
            )));
        }
        // Records name tables by id, so the name must be durable before any
        // record of the table can be logged.
        if self.inner.manifest.is_some() {
            self.inner.publish(|m| m.tables.push(name.to_owned()))?;
        }
        let inner = self.inner.new_table(cat.by_id.len() as u32, name);
        cat.by_id.push(Arc::clone(&inner));
        cat.by_name.insert(name.to_owned(), Arc::clone(&inner));
        Ok(Table { inner })
    }

    /// Drop a table: its rows are gone, its name is free for a new table
    /// (which gets a new id: ids are never used again), and every handle
    /// to it fails with `TableNotFound` from now on.
    ///
    /// With a log, the drop is recorded in the manifest (one conditional
    /// put, manifest format 2) before this returns; it is durable then.
    /// The table's records already in the log stay there until the next
    /// checkpoint lets the log be truncated; recovery, replicas and
    /// checkpoint loads skip them, and the next checkpoint leaves the
    /// table out. A transaction that wrote to the table and commits after
    /// the drop commits its other writes; its writes to the dropped table
    /// are discarded with it. The rows' memory is freed once no
    /// transaction that began before the drop is still running.
    pub fn drop_table(&self, name: &str) -> Result<()> {
        self.inner.check_open()?;
        if self.inner.read_only {
            return Err(Error::InvalidArgument("the database was opened read-only".into()));
        }
        let mut cat = self.inner.tables.write();
        let id = match cat.by_name.get(name) {
            Some(t) => t.id,
            None => return Err(Error::TableNotFound(name.to_owned())),
        };
        if self.inner.manifest.is_some() {
            self.inner.publish(|m| m.dropped.push(id))?;
        }
        self.inner.retire_table(&mut cat, id);
        tracing::info!(table = name, id, "dropped a table");
        Ok(())
    }

    /// Open an existing table by name.
    pub fn open_table(&self, name: &str) -> Result<Table> {
        self.inner.check_open()?;
        let cat = self.inner.tables.read();
        cat.by_name
            .get(name)
            .map(|inner| Table { inner: Arc::clone(inner) })
            .ok_or_else(|| Error::TableNotFound(name.to_owned()))
    }

    /// Names of all tables, in creation order (dropped ones left out).
    pub fn table_names(&self) -> Vec<String> {
        let cat = self.inner.tables.read();
        cat.by_id.iter().filter(|t| !t.is_dropped()).map(|t| t.name.clone()).collect()
    }

    /// Begin a transaction at the default isolation level.
    pub fn begin(&self) -> Result<Transaction<'_>> {
        self.begin_with(TxnOptions::default())
    }

    /// Begin a transaction with explicit options.
    pub fn begin_with(&self, opts: TxnOptions) -> Result<Transaction<'_>> {
        self.inner.begin_with(opts)
    }

    /// Refuse all further work, write what the log holds, and stop the
    /// log's threads. Running transactions fail with `Closed` at their next
    /// operation or commit; pre-committed ones are still acknowledged once
    /// their log records are durable. Returns the error that stopped the
    /// log (`StoreUnavailable`, `Fenced`) if it could not make every
    /// pre-committed transaction durable: those were never acknowledged,
    /// and a restart decides whether each survived. Closing again returns
    /// the same. Dropping the database closes it and drops the result.
    pub fn close(&self) -> Result<()> {
        self.inner.closed.store(true, Ordering::SeqCst);
        {
            let (m, cv) = &self.inner.checkpointer_wake;
            *m.lock() = true;
            cv.notify_all();
        }
        if let Some(t) = self.checkpointer.lock().take() {
            let _ = t.join();
        }
        if let Some(t) = self.time_flusher.lock().take() {
            let _ = t.join();
        }
        if let Some(log) = &self.inner.log {
            log.shut_down();
        }
        self.inner.flush_time_index(true);
        match self.inner.commit.poison_error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Read `key` at the current snapshot, in a read-only transaction of
    /// its own.
    pub fn get(&self, table: &Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.begin_with(TxnOptions::read_only())?.get(table, key)
    }

    /// Write `value` under `key` in a transaction of its own, and wait
    /// until it is durable. Returns its CSN: a token a read replica can be
    /// asked to reach ([`crate::Replica::begin_at`]). A conflict with a
    /// concurrent writer of the same key is returned, not retried.
    pub fn put(&self, table: &Table, key: &[u8], value: &[u8]) -> Result<Csn> {
        let mut tx = self.begin()?;
        tx.put(table, key, value)?;
        written_csn(tx.commit_and_wait()?)
    }

    /// Delete `key` in a transaction of its own, and wait until it is
    /// durable. Returns its CSN, or `None` if there was no value to delete
    /// (then nothing was written).
    pub fn delete(&self, table: &Table, key: &[u8]) -> Result<Option<Csn>> {
        let mut tx = self.begin()?;
        if !tx.delete(table, key)? {
            return Ok(None);
        }
        written_csn(tx.commit_and_wait()?).map(Some)
    }

    /// What the log measured: per group flushes, bytes, fill and flush
    /// times; commit latency and dependency waits; per store requests and
    /// cost. `None` without a log.
    pub fn log_metrics(&self) -> Option<LogMetrics> {
        self.inner.log.as_ref().map(Log::metrics)
    }

    /// Publish the database's metrics through the `metrics` facade now
    /// (the background thread also does, every `Options::metrics_interval`).
    /// The names are listed in the `telemetry` module's docs and in
    /// ARCHITECTURE.md, "Observability".
    pub fn publish_metrics(&self) {
        crate::telemetry::publish_database(&self.inner);
    }

    /// Zero the log's metrics (store accounting is not reset).
    pub fn reset_log_metrics(&self) {
        if let Some(log) = &self.inner.log {
            log.reset_metrics();
        }
    }

    /// Every CSN below this is durable (gCSN). Without a log, the next CSN.
    pub fn durable_csn(&self) -> Csn {
        self.inner.gc_counter().load(Ordering::SeqCst)
    }

    /// Why the database stopped accepting commits, if it did.
    pub fn poisoned(&self) -> Option<Error> {
        self.inner.commit.poison_error()
    }

    /// Monitoring counters.
    pub fn stats(&self) -> DbStats {
        DbStats {
            next_csn: self.inner.commit.next_csn.load(Ordering::Acquire),
            gc_horizon: self.inner.gc_horizon.load(Ordering::Acquire),
            versions_retired: self.inner.versions_retired.load(Ordering::Relaxed),
            keys_reclaimed: self.inner.reclaim.reclaimed.load(Ordering::Relaxed),
            keys_awaiting_reclaim: self.inner.reclaim.queued(),
            tables: self.inner.tables.read().by_name.len(),
        }
    }
}

/// Transactions begin here: the one place that makes a [`Transaction`]
/// of the engine (`engine` itself knows nothing of transactions).
impl Engine {
    /// Begin a transaction (`Database::begin_with`).
    pub(crate) fn begin_with(&self, opts: TxnOptions) -> Result<Transaction<'_>> {
        self.check_open()?;
        if let Some(log) = &self.log {
            log.note_begin();
        }
        let isolation = opts.isolation.unwrap_or(self.options.isolation);
        // The durable snapshot reads at gCSN; its registration uses the GC
        // counter so the horizon proof holds (see `Engine::gc_counter`).
        if opts.durable_snapshot && self.log.is_some() {
            crate::commit::committer::publish_gcsn(&self.commit);
        }
        let counter = if opts.durable_snapshot { self.gc_counter() } else { &self.commit.next_csn };
        let (lease, snapshot) =
            self.txns.begin(counter).ok_or(Error::TooManyTransactions(self.txns.capacity()))?;
        let read_only = opts.read_only || opts.durable_snapshot || self.read_only;
        let isolation = if opts.durable_snapshot { Isolation::Snapshot } else { isolation };
        Ok(Transaction::new(self, lease, snapshot, isolation, read_only))
    }
}

/// The CSN of a transaction that wrote.
fn written_csn(info: crate::CommitInfo) -> Result<Csn> {
    info.csn.ok_or_else(|| Error::InvalidArgument("a write committed without a CSN".into()))
}

impl Drop for Database {
    fn drop(&mut self) {
        // Whoever needs the outcome calls `close` first.
        let _ = self.close();
    }
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database").field("stats", &self.stats()).finish()
    }
}

#[cfg(test)]
mod tests {
    use crate::{Database, Options};

    fn retired(db: &Database) -> usize {
        db.inner.tables.read().retired.len()
    }

    /// A dropped table's rows are freed only once no transaction that
    /// could still reach them runs.
    #[test]
    fn a_dropped_table_is_freed_after_the_transactions_that_could_reach_it() {
        let db = Database::open(Options::new()).expect("open");
        let t = db.create_table("t").expect("table");
        let mut early = db.begin().expect("begin");
        early.put(&t, b"k", b"v").expect("put before the drop");
        db.drop_table("t").expect("drop");
        assert_eq!(retired(&db), 1, "kept: a running transaction wrote to it");
        // Later transactions are refused the table, and do not hold it.
        let mut late = db.begin().expect("begin");
        assert!(late.get(&t, b"k").is_err());
        late.commit().expect("read-only").wait().expect("ack");
        db.inner.reclaim_dropped();
        assert_eq!(retired(&db), 1, "the early transaction still runs");
        drop(early);
        db.inner.reclaim_dropped();
        assert_eq!(retired(&db), 0, "nothing can reach it any more");

        // With no transaction running, a drop frees at once.
        db.create_table("u").expect("table");
        db.drop_table("u").expect("drop");
        assert_eq!(retired(&db), 0);
    }
}
