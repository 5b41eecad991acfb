//! The database: tables, the CSN counter, the transaction table and GC state.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::RwLock;

use crate::commit::dependency::CommitState;
use crate::error::{Error, Result};
use crate::index::OrderedIndex;
use crate::limits::{TABLE_NAME_BYTES_MAX, TABLES_MAX};
use crate::log::{Log, LogMetrics};
use crate::mvcc::Csn;
use crate::mvcc::oid_array::OidArray;
use crate::options::{Isolation, Options, TxnOptions};
use crate::table::{Table, TableInner};
use crate::txn::Transaction;
use crate::txn::table::TxnTable;

/// Commits between two recomputations of the GC horizon.
pub(crate) const GC_HORIZON_REFRESH_COMMITS: u64 = 32;

static NEXT_DB_ID: AtomicU64 = AtomicU64::new(1);

/// An open database. Share it between threads by reference (`&Database`, for
/// example with `std::thread::scope`) or in an `Arc`.
pub struct Database {
    pub(crate) inner: DbInner,
}

pub(crate) struct DbInner {
    pub(crate) id: u64,
    pub(crate) options: Options,
    /// Read on every operation; on its own cache line so that writes to the
    /// counters below never evict it.
    closed: CachePadded<AtomicBool>,
    /// The CSN counter, gCSN and the durable marks (`commit::dependency`).
    pub(crate) commit: Arc<CommitState>,
    /// The log; `None` without a store.
    pub(crate) log: Option<Log>,
    /// A lower bound on every running and future snapshot (see `mvcc::gc`).
    pub(crate) gc_horizon: CachePadded<AtomicU64>,
    pub(crate) versions_retired: CachePadded<AtomicU64>,
    pub(crate) txns: TxnTable,
    tables: RwLock<Catalog>,
}

#[derive(Default)]
struct Catalog {
    by_name: HashMap<String, Arc<TableInner>>,
    by_id: Vec<Arc<TableInner>>,
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
    /// Tables in the database.
    pub tables: usize,
}

impl Database {
    /// Open a database with `options`.
    pub fn open(options: Options) -> Result<Database> {
        options.validate()?;
        let txns = TxnTable::new(options.max_transactions);
        let id = NEXT_DB_ID.fetch_add(1, Ordering::Relaxed);
        let logged = options.is_logged();
        let groups = if logged { options.log_groups() } else { 0 };
        let commit = Arc::new(CommitState::new(groups, options.tracking, logged));
        let log = if logged { Some(Log::start(&options, Arc::clone(&commit), id)?) } else { None };
        Ok(Database {
            inner: DbInner {
                id,
                options,
                closed: CachePadded::new(AtomicBool::new(false)),
                commit,
                log,
                gc_horizon: CachePadded::new(AtomicU64::new(0)),
                versions_retired: CachePadded::new(AtomicU64::new(0)),
                txns,
                tables: RwLock::new(Catalog::default()),
            },
        })
    }

    /// Create a table. Fails with `TableExists` if the name is taken.
    pub fn create_table(&self, name: &str) -> Result<Table> {
        self.inner.check_open()?;
        check_table_name(name)?;
        let mut cat = self.inner.tables.write();
        if cat.by_name.contains_key(name) {
            return Err(Error::TableExists(name.to_owned()));
        }
        if cat.by_id.len() >= TABLES_MAX {
            return Err(Error::InvalidArgument(format!("at most {TABLES_MAX} tables")));
        }
        let inner = Arc::new(TableInner {
            id: cat.by_id.len() as u32,
            name: name.to_owned(),
            db_id: self.inner.id,
            index: OrderedIndex::new(),
            records: OidArray::new(),
        });
        cat.by_id.push(Arc::clone(&inner));
        cat.by_name.insert(name.to_owned(), Arc::clone(&inner));
        Ok(Table { inner })
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

    /// Names of all tables, in creation order.
    pub fn table_names(&self) -> Vec<String> {
        self.inner.tables.read().by_id.iter().map(|t| t.name.clone()).collect()
    }

    /// Begin a transaction at the default isolation level.
    pub fn begin(&self) -> Result<Transaction<'_>> {
        self.begin_with(TxnOptions::default())
    }

    /// Begin a transaction with explicit options.
    pub fn begin_with(&self, opts: TxnOptions) -> Result<Transaction<'_>> {
        self.inner.check_open()?;
        let isolation = opts.isolation.unwrap_or(self.inner.options.isolation);
        // The durable snapshot reads at gCSN; its registration uses the GC
        // counter so the horizon proof holds (see `DbInner::gc_counter`).
        let counter = if opts.durable_snapshot {
            self.inner.gc_counter()
        } else {
            &self.inner.commit.next_csn
        };
        let (lease, snapshot) = self
            .inner
            .txns
            .begin(counter)
            .ok_or(Error::TooManyTransactions(self.inner.txns.capacity()))?;
        let read_only = opts.read_only || opts.durable_snapshot;
        let isolation = if opts.durable_snapshot { Isolation::Snapshot } else { isolation };
        Ok(Transaction::new(&self.inner, lease, snapshot, isolation, read_only))
    }

    /// Refuse all further work, write what the log holds, and stop the
    /// log's threads. Running transactions fail with `Closed` at their next
    /// operation or commit; pre-committed ones are still acknowledged once
    /// their log records are durable. Dropping the database closes it.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        if let Some(log) = &self.inner.log {
            log.shut_down();
        }
    }

    /// What the log measured: per group flushes, bytes, fill and flush
    /// times; commit latency and dependency waits; per store requests and
    /// cost. `None` without a log.
    pub fn log_metrics(&self) -> Option<LogMetrics> {
        self.inner.log.as_ref().map(Log::metrics)
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
            tables: self.inner.tables.read().by_id.len(),
        }
    }
}

impl DbInner {
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) { Err(Error::Closed) } else { Ok(()) }
    }

    /// The counter that bounds the GC horizon: gCSN with a log (so the
    /// durable snapshot stays readable), the CSN counter without one. Both
    /// are monotone and never above the CSN counter, which is what
    /// `TxnTable::horizon`'s proof needs of a counter.
    pub(crate) fn gc_counter(&self) -> &AtomicU64 {
        if self.commit.logged { &self.commit.gcsn } else { &self.commit.next_csn }
    }

    /// Recompute the cached GC horizon (cheap: one pass over the slots in use).
    pub(crate) fn refresh_gc_horizon(&self) -> Csn {
        let h = self.txns.horizon(self.gc_counter());
        self.gc_horizon.fetch_max(h, Ordering::AcqRel);
        h
    }
}

fn check_table_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > TABLE_NAME_BYTES_MAX {
        return Err(Error::InvalidArgument(format!(
            "table names must be 1..={TABLE_NAME_BYTES_MAX} bytes, got {}",
            name.len()
        )));
    }
    Ok(())
}

impl Drop for Database {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database").field("stats", &self.stats()).finish()
    }
}
