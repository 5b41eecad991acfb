//! A shard's durable state as tables (design record 0008): its committed
//! versions, its transaction table (`_milana.txns`: a prepare row until
//! the decision, then the outcome, until forgotten) and its meta row (the
//! read lease and the forget bound). What each log record writes is
//! [`ShardTables::apply`]; what a restart rebuilds from the tables is
//! [`crate::participant::Participant::restart`]. Both are written once:
//! the server's shard writes the same rows to engine tables, one engine
//! transaction per record, and the simulation keeps them in maps that a
//! crash rolls back to what was durable.
//!
//! Invariants:
//! - a record's writes are one transaction: a commit's version rows and
//!   its outcome row are durable together or not at all;
//! - a prepare row exists only for a transaction that passed validation
//!   here, and is replaced by its outcome;
//! - an outcome row is deleted only by a `Forget` record, whose bound is
//!   kept, so that a restart still refuses a late prepare below it.

use std::collections::BTreeMap;

use crate::log::{Prepare, Record};
use crate::types::{Timestamp, TxnId};
use crate::versions::Versions;

/// A row of the transaction table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnRow {
    /// Validated and durable; the decision is not known here.
    Prepared(Prepare),
    /// Committed at this commit timestamp.
    Committed(Timestamp),
    /// Aborted; its commit timestamp.
    Aborted(Timestamp),
}

/// The tables of one shard, kept in maps over a [`Versions`].
#[derive(Debug, Clone, Default)]
pub struct ShardTables<V> {
    /// The committed versions.
    pub versions: V,
    /// The transaction table.
    pub txns: BTreeMap<TxnId, TxnRow>,
    /// The highest read lease: reads below it may have been served.
    pub lease: Timestamp,
    /// Decided transactions below this may have been forgotten.
    pub forgotten: Timestamp,
}

impl<V: Versions> ShardTables<V> {
    /// Empty tables over `versions`.
    pub fn new(versions: V) -> ShardTables<V> {
        ShardTables { versions, txns: BTreeMap::new(), lease: 0, forgotten: 0 }
    }

    /// The tables a log's records leave, applied in order.
    pub fn from_log(versions: V, log: &[Record]) -> ShardTables<V> {
        let mut t = ShardTables::new(versions);
        log.iter().for_each(|r| t.apply(r));
        t
    }

    /// What `r` writes, as one transaction.
    pub fn apply(&mut self, r: &Record) {
        match r {
            Record::Prepare(p) => {
                self.txns.insert(p.txn, TxnRow::Prepared(p.clone()));
            }
            Record::Commit(t) => {
                // A commit of a transaction never prepared here writes
                // nothing (only a broken protocol sends one).
                if let Some(TxnRow::Prepared(p)) = self.txns.get(t) {
                    let ts = p.version.ts;
                    self.versions.install(p.version, &p.writes);
                    self.txns.insert(*t, TxnRow::Committed(ts));
                }
            }
            Record::Abort(t, ts) => {
                self.txns.insert(*t, TxnRow::Aborted(*ts));
            }
            Record::ReadLease(until) => self.lease = self.lease.max(*until),
            Record::Forget { below, txns } => {
                for t in txns {
                    if !matches!(self.txns.get(t), Some(TxnRow::Prepared(_))) {
                        self.txns.remove(t);
                    }
                }
                self.forgotten = self.forgotten.max(*below);
            }
        }
    }
}

/// The key of `txn`'s row: client then sequence number, big-endian.
pub fn txn_key(txn: TxnId) -> [u8; 12] {
    let mut k = [0; 12];
    k[..4].copy_from_slice(&txn.client.to_be_bytes());
    k[4..].copy_from_slice(&txn.seq.to_be_bytes());
    k
}
