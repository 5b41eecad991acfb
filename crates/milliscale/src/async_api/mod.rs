//! The async API: the database, its transactions and replicas for async
//! code (a tokio service, say), safe inside any runtime, multi-threaded or
//! current-thread.
//!
//! **Which API to use.** Async code uses these types; code on plain
//! threads uses [`Database`], [`crate::Transaction`] and [`Replica`]
//! directly. Both reach the same engine, and a handle of one converts to
//! the other ([`AsyncDatabase::from`], [`AsyncDatabase::blocking`]).
//!
//! **What never blocks the runtime.** The engine runs on its own threads:
//! the log's lanes write to the stores, the committer acknowledges. The
//! caller's task does only memory work:
//! - reads and writes of a transaction work on the in-memory versions and
//!   return at once (they are plain methods, not futures);
//! - a commit pre-commits in memory and then *awaits* its acknowledgment
//!   ([`crate::Durable`]): the committer wakes the task in the round that
//!   makes it durable, and nothing runs on the runtime meanwhile. The one
//!   wait inside a commit is backpressure: when the log's buffer is full
//!   (the stores are slower than the load), the pre-commit waits for the
//!   next flush to free space, as the blocking API does;
//! - what touches the stores from the caller's side (opening and
//!   recovering, creating and dropping tables, checkpoints, closing)
//!   runs on a thread of its own while the task awaits it.
//!
//! **Transactions move.** An [`AsyncTransaction`] owns a handle on the
//! engine, so it is `Send + 'static`: it can be held across `.await` and
//! moved into a spawned task.

mod feed;
mod replica;
mod txn;

use std::sync::Arc;

pub use feed::AsyncFeed;
pub use replica::{AsyncReplica, WaitFor};
pub use txn::AsyncTransaction;

use crate::db::Database;
use crate::error::{Error, Result};
use crate::mvcc::Csn;
use crate::options::{Options, TxnOptions};
use crate::replica::Replica;
use crate::table::Table;

/// An open database, for async code; see the module docs. Cheap to clone:
/// the clones share one database, which closes when the last one is
/// dropped (or at [`AsyncDatabase::close`]).
#[derive(Clone, Debug)]
pub struct AsyncDatabase {
    db: Arc<Database>,
}

impl From<Database> for AsyncDatabase {
    fn from(db: Database) -> AsyncDatabase {
        AsyncDatabase { db: Arc::new(db) }
    }
}

/// A database shared with blocking code: the async handle and the
/// `Arc<Database>` reach the same engine.
impl From<Arc<Database>> for AsyncDatabase {
    fn from(db: Arc<Database>) -> AsyncDatabase {
        AsyncDatabase { db }
    }
}

impl AsyncDatabase {
    /// Open (or create) the database on `options`' stores, recovering it,
    /// as [`Database::open`] does, on a thread of its own.
    pub async fn open(options: Options) -> Result<AsyncDatabase> {
        let db = off_thread("milliscale-open", move || Database::open(options)).await??;
        Ok(AsyncDatabase::from(db))
    }

    /// The blocking handle on the same database, for code on plain
    /// threads (it must not be called from async code: its calls block).
    pub fn blocking(&self) -> &Database {
        &self.db
    }

    /// Create a table; with a log, its name is made durable in the
    /// manifest (one conditional put) before this resolves.
    pub async fn create_table(&self, name: &str) -> Result<Table> {
        let (db, name) = (Arc::clone(&self.db), name.to_owned());
        off_thread("milliscale-ddl", move || db.create_table(&name)).await?
    }

    /// Drop a table ([`Database::drop_table`]); with a log, the drop is
    /// made durable in the manifest before this resolves.
    pub async fn drop_table(&self, name: &str) -> Result<()> {
        let (db, name) = (Arc::clone(&self.db), name.to_owned());
        off_thread("milliscale-ddl", move || db.drop_table(&name)).await?
    }

    /// Open an existing table by name (memory only).
    pub fn open_table(&self, name: &str) -> Result<Table> {
        self.db.open_table(name)
    }

    /// Names of all tables, in creation order.
    pub fn table_names(&self) -> Vec<String> {
        self.db.table_names()
    }

    /// Begin a transaction at the default isolation level.
    pub fn begin(&self) -> Result<AsyncTransaction> {
        self.begin_with(TxnOptions::default())
    }

    /// Begin a transaction with explicit options.
    pub fn begin_with(&self, opts: TxnOptions) -> Result<AsyncTransaction> {
        AsyncTransaction::begin(Arc::clone(&self.db.inner), opts)
    }

    /// Write `value` under `key` in a transaction of its own and wait until
    /// it is durable; returns its CSN (a token for replicas).
    pub async fn put(&self, table: &Table, key: &[u8], value: &[u8]) -> Result<Csn> {
        let mut tx = self.begin()?;
        tx.put(table, key, value)?;
        committed_csn(tx.commit().await?)
    }

    /// Delete `key` in a transaction of its own and wait until it is
    /// durable; returns its CSN, or `None` if there was nothing to delete.
    pub async fn delete(&self, table: &Table, key: &[u8]) -> Result<Option<Csn>> {
        let mut tx = self.begin()?;
        if !tx.delete(table, key)? {
            return Ok(None);
        }
        committed_csn(tx.commit().await?).map(Some)
    }

    /// Read `key` at the current snapshot (a read-only transaction).
    pub fn get(&self, table: &Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.db.get(table, key)
    }

    /// Take a checkpoint now (see [`Database::checkpoint`]).
    pub async fn checkpoint(&self) -> Result<Csn> {
        let db = Arc::clone(&self.db);
        off_thread("milliscale-checkpoint", move || db.checkpoint()).await?
    }

    /// Every CSN below this is durable.
    pub fn durable_csn(&self) -> Csn {
        self.db.durable_csn()
    }

    /// Close the database (see [`Database::close`]): refuse new work,
    /// write what the log holds, stop the log's threads; fails if the
    /// final flush did not make every pre-committed transaction durable.
    /// Other clones of this handle see `Closed` from then on.
    pub async fn close(&self) -> Result<()> {
        let db = Arc::clone(&self.db);
        off_thread("milliscale-close", move || db.close()).await?
    }
}

/// The CSN of a committed writing transaction.
fn committed_csn(info: crate::CommitInfo) -> Result<Csn> {
    info.csn.ok_or_else(|| Error::InvalidArgument("a write committed without a CSN".into()))
}

/// Run `f` on a new thread named `name` and await its result. Store calls
/// and waits that block go here, never on the caller's runtime. A panic
/// in `f` is resumed in the awaiting task.
pub(crate) async fn off_thread<T, F>(name: &str, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    milliscale_seam::spawn(name.to_owned(), move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(r);
    })
    .map_err(|e| Error::InvalidArgument(format!("cannot start a thread: {e}")))?;
    match rx.await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => Err(Error::Closed),
    }
}

/// Open a replica for async code; see [`AsyncReplica`].
pub(crate) async fn open_replica(
    options: Options,
    replica: crate::ReplicaOptions,
) -> Result<Replica> {
    off_thread("milliscale-replica-open", move || Replica::open_with(options, replica)).await?
}
