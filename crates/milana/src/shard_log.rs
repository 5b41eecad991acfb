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
//! Invariants:
//! - `append` returns only once its record is durable: a vote, an answer
//!   or an acknowledgment sent after it survives any crash;
//! - records come back in the order their appends were called, each
//!   record either whole or absent (an append that did not return may be
//!   absent; recovery needs no more, because a record is only ever
//!   appended after the records it depends on returned);
//! - a record is at most the engine's value limit (256 KiB).

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};

use milliscale::{Database, Direction, Options, Table, TxnOptions};

use crate::codec::{self, DecodeError};
use crate::log::Record;

/// The table the records live in.
pub const TABLE: &str = "milana_log";

/// Why a shard log failed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The engine refused (the store is unavailable, the writer was
    /// fenced, the database is closed, ...).
    #[error(transparent)]
    Engine(#[from] milliscale::Error),
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

/// A shard's log (see the module's comment).
pub struct ShardLog {
    db: Database,
    table: Table,
    next: AtomicU64,
}

impl std::fmt::Debug for ShardLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardLog").field("next", &self.next.load(Ordering::Relaxed)).finish()
    }
}

impl ShardLog {
    /// Open the log (as its database's writer, recovering and fencing any
    /// earlier one), with every record it holds, in order.
    pub fn open(options: Options) -> Result<(ShardLog, Vec<Record>), LogError> {
        let db = Database::open(options)?;
        let table = match db.open_table(TABLE) {
            Ok(t) => t,
            Err(milliscale::Error::TableNotFound(_)) => db.create_table(TABLE)?,
            Err(e) => return Err(e.into()),
        };
        let records = read_all(&db, &table)?;
        let next = records.last().map_or(0, |(n, _)| n + 1);
        let log = ShardLog { db, table, next: AtomicU64::new(next) };
        Ok((log, records.into_iter().map(|(_, r)| r).collect()))
    }

    /// Append `r` and wait until it is durable; its number.
    pub fn append(&self, r: &Record) -> Result<u64, LogError> {
        let bytes = codec::encode(r);
        if bytes.len() > milliscale::limits::VALUE_BYTES_MAX {
            return Err(LogError::TooLarge(bytes.len()));
        }
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        self.db.put(&self.table, &number.to_be_bytes(), &bytes)?;
        Ok(number)
    }

    /// The database under the log.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// Close the database (flushing what is left of its log).
    pub fn close(self) -> Result<(), LogError> {
        Ok(self.db.close()?)
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
