//! A shard primary's log on the engine: the records of [`crate::log`],
//! each a row of the table `milana_log` keyed by its number (8 bytes,
//! big-endian, so key order is append order), written in a transaction
//! of its own and acknowledged once durable.
//!
//! So a shard's log is a Milliscale database: it lives on the object store
//! (its own prefix or bucket), replicated to a quorum of stores, fenced
//! against a second writer, checkpointed, tailed by read replicas and
//! promoted by a hot standby, all as the engine already does. Opening one
//! recovers the database and reads the records back in order, for
//! [`crate::participant::Participant::recover`].
//!
//! Appends are pipelined, as the engine's commits are: [`ShardLog::append`]
//! gives the record the next number and pre-commits it at once (so the
//! numbers follow the order of the calls), and [`Appended::durable`]
//! waits until it and every record numbered before it are durable. Many
//! appends in flight share the engine's flushes (group commit), which is
//! what lets one shard prepare many transactions per store round trip.
//!
//! Invariants:
//! - `Appended::durable` returns only once its record and every record
//!   numbered before it are durable: a vote, an answer or an
//!   acknowledgment sent after it survives any crash, and so does
//!   everything logged before it;
//! - records come back in number order, each whole or absent, and with
//!   no gap: a crash can leave a later record durable and an earlier one
//!   lost (they are separate commits), but nothing was acknowledged past
//!   the first lost one, so `open` drops every record after the first
//!   gap (and deletes it, so that a later open cannot see it again);
//! - once the engine fails an append (the store unavailable, the writer
//!   fenced), every later wait fails: the primary must stop;
//! - a record is at most the engine's value limit (256 KiB).

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use milliscale::{AsyncDatabase, Database, Direction, Options, Table, TxnOptions};
use tokio::sync::watch;

use crate::codec::{self, DecodeError};
use crate::log::Record;

/// The table the records live in.
pub const TABLE: &str = "milana_log";

/// Why a shard log failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LogError {
    /// The engine refused (the store is unavailable, the writer was
    /// fenced, the database is closed, ...).
    #[error(transparent)]
    Engine(#[from] Arc<milliscale::Error>),
    /// A record read back does not decode.
    #[error("record {number}: {source}")]
    Corrupt {
        /// Its number.
        number: u64,
        /// Why.
        source: DecodeError,
    },
    /// A record over the engine's value limit.
    #[error("a log record of {0} bytes is over the limit of {max}", max = milliscale::limits::VALUE_BYTES_MAX)]
    TooLarge(usize),
}

impl From<milliscale::Error> for LogError {
    fn from(e: milliscale::Error) -> LogError {
        LogError::Engine(Arc::new(e))
    }
}

/// How far the log is durable.
#[derive(Debug, Clone, Default)]
struct Progress {
    /// Every record numbered below this is durable.
    through: u64,
    /// Why the log stopped, once it has.
    failed: Option<LogError>,
}

#[derive(Debug, Default)]
struct Order {
    next: u64,
    /// Pre-committed records not yet durable.
    pending: BTreeSet<u64>,
}

/// A shard's log (see the module's comment).
pub struct ShardLog {
    db: AsyncDatabase,
    table: Table,
    order: Arc<Mutex<Order>>,
    progress: Arc<watch::Sender<Progress>>,
}

impl std::fmt::Debug for ShardLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardLog").field("next", &lock(&self.order).next).finish()
    }
}

fn lock(o: &Mutex<Order>) -> MutexGuard<'_, Order> {
    // The order is two plain fields, consistent at every await-free step.
    o.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A record pre-committed in the log; see [`Appended::durable`].
#[derive(Debug)]
#[must_use = "an append is durable only once `durable` returns"]
pub struct Appended {
    /// Records numbered below this must be durable.
    upto: u64,
    progress: watch::Receiver<Progress>,
}

impl Appended {
    /// The record's number (for a [`ShardLog::barrier`], the last
    /// record's).
    pub fn number(&self) -> u64 {
        self.upto.saturating_sub(1)
    }

    /// Wait until this record and every record before it are durable;
    /// the record's number.
    pub async fn durable(mut self) -> Result<u64, LogError> {
        let upto = self.upto;
        let p = self
            .progress
            .wait_for(|p| p.failed.is_some() || p.through >= upto)
            .await
            .map_err(|_| LogError::from(milliscale::Error::Closed))?;
        match &p.failed {
            Some(e) if p.through < upto => Err(e.clone()),
            _ => Ok(upto.saturating_sub(1)),
        }
    }
}

impl ShardLog {
    /// Open the log (as its database's writer, recovering and fencing any
    /// earlier one), with every record it holds, in order. It blocks (it
    /// opens a database): from async code, call it on a blocking thread.
    pub fn open(options: Options) -> Result<(ShardLog, Vec<Record>), LogError> {
        ShardLog::from_database(Database::open(options)?)
    }

    /// The log of a database already open as the writer (a standby just
    /// promoted), with every record it holds, in order. It blocks.
    pub fn from_database(db: Database) -> Result<(ShardLog, Vec<Record>), LogError> {
        let table = match db.open_table(TABLE) {
            Ok(t) => t,
            Err(milliscale::Error::TableNotFound(_)) => db.create_table(TABLE)?,
            Err(e) => return Err(e.into()),
        };
        let mut records = read_all(&db, &table)?;
        // Keep the records before the first gap; delete the rest.
        let kept = records.iter().enumerate().take_while(|(i, (n, _))| *i as u64 == *n).count();
        if kept < records.len() {
            let mut tx = db.begin()?;
            for (n, _) in &records[kept..] {
                tx.delete(&table, &n.to_be_bytes())?;
            }
            tx.commit()?.wait()?;
            records.truncate(kept);
        }
        let next = records.len() as u64;
        let log = ShardLog {
            db: AsyncDatabase::from(db),
            table,
            order: Arc::new(Mutex::new(Order { next, pending: BTreeSet::new() })),
            progress: Arc::new(watch::Sender::new(Progress { through: next, failed: None })),
        };
        Ok((log, records.into_iter().map(|(_, r)| r).collect()))
    }

    /// Append `r`: give it the next number and pre-commit it now (call it
    /// in the order the records must have); await [`Appended::durable`]
    /// before acting on it. Must be called inside a tokio runtime (a task
    /// watches the commit).
    pub fn append(&self, r: &Record) -> Result<Appended, LogError> {
        let bytes = codec::encode(r);
        if bytes.len() > milliscale::limits::VALUE_BYTES_MAX {
            return Err(LogError::TooLarge(bytes.len()));
        }
        if let Some(e) = &self.progress.borrow().failed {
            return Err(e.clone());
        }
        let (number, ack) = {
            let mut o = lock(&self.order);
            let number = o.next;
            let mut tx = self.db.begin()?;
            tx.put(&self.table, &number.to_be_bytes(), &bytes)?;
            let ack = tx.precommit()?;
            o.next += 1;
            o.pending.insert(number);
            (number, ack)
        };
        let (order, progress) = (Arc::clone(&self.order), Arc::clone(&self.progress));
        tokio::spawn(async move {
            let result = ack.durable().await;
            let through = {
                let mut o = lock(&order);
                // A record that failed stays pending: nothing after it is
                // durable through it.
                if result.is_ok() {
                    o.pending.remove(&number);
                }
                o.pending.first().copied().unwrap_or(o.next)
            };
            progress.send_modify(|p| {
                p.through = p.through.max(through);
                if let (Err(e), None) = (result, &p.failed) {
                    p.failed = Some(LogError::from(e));
                }
            });
        });
        Ok(Appended { upto: number + 1, progress: self.progress.subscribe() })
    }

    /// A wait for every record appended so far (none: at once).
    pub fn barrier(&self) -> Appended {
        let upto = lock(&self.order).next;
        Appended { upto, progress: self.progress.subscribe() }
    }

    /// The database under the log.
    pub fn database(&self) -> &AsyncDatabase {
        &self.db
    }

    /// Close the database (flushing what is left of its log).
    pub async fn close(self) -> Result<(), LogError> {
        Ok(self.db.close().await?)
    }
}

/// Every record, in number order.
fn read_all(db: &Database, table: &Table) -> Result<Vec<(u64, Record)>, LogError> {
    let mut tx = db.begin_with(TxnOptions::read_only())?;
    let mut out = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let lower = after.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let rows = tx.scan(table, lower, Bound::Unbounded, Direction::Forward, 1024)?;
        let Some((last, _)) = rows.last() else { break };
        after = Some(last.clone());
        for (key, value) in rows {
            let number = key.as_slice().try_into().map(u64::from_be_bytes).unwrap_or(u64::MAX);
            let record =
                codec::decode(&value).map_err(|source| LogError::Corrupt { number, source })?;
            out.push((number, record));
        }
    }
    Ok(out)
}
