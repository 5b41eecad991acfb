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
use crate::types::{Key, ShardId, Timestamp, TxnId};
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
    /// Moves in flight (design record 0009): the ranges frozen here, by
    /// `Freeze` records not yet released.
    pub frozen: Vec<Frozen>,
    /// Ranges copied here for a move not known to have happened yet
    /// (`Adopt` records not yet released): `(start, end, map version)`.
    pub incoming: Vec<(Key, Key, u64)>,
    /// The read floors of ranges copied here: `(start, end, floor)`.
    pub adopted: Vec<(Key, Key, Timestamp)>,
}

/// A range frozen here for its move.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frozen {
    /// The range's first key.
    pub start: Key,
    /// The next range's first key (empty: no end).
    pub end: Key,
    /// Its new owner.
    pub to: ShardId,
    /// The map version that gives it there.
    pub version: u64,
}

/// Whether `[a, b)` and `[c, d)` share a key (empty ends: no end).
pub fn overlap(a: &[u8], b: &[u8], c: &[u8], d: &[u8]) -> bool {
    (b.is_empty() || c < b) && (d.is_empty() || a < d)
}

impl<V: Versions> ShardTables<V> {
    /// Empty tables over `versions`.
    pub fn new(versions: V) -> ShardTables<V> {
        ShardTables {
            versions,
            txns: BTreeMap::new(),
            lease: 0,
            forgotten: 0,
            frozen: Vec::new(),
            incoming: Vec::new(),
            adopted: Vec::new(),
        }
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
            Record::Freeze { start, end, to, version } => {
                self.frozen.retain(|f| !overlap(&f.start, &f.end, start, end));
                let (start, end) = (start.clone(), end.clone());
                self.frozen.push(Frozen { start, end, to: *to, version: *version });
            }
            Record::Adopt { start, end, version, clear, rows, floor } => {
                if *clear {
                    self.versions.drop_range(start, end);
                }
                for (key, v, value) in rows {
                    self.versions.adopt(key, *v, value.clone());
                }
                self.incoming.retain(|(a, b, _)| !overlap(a, b, start, end));
                self.incoming.push((start.clone(), end.clone(), *version));
                if let Some(floor) = floor {
                    self.adopted.push((start.clone(), end.clone(), *floor));
                }
            }
            Record::Release { start, end, drop } => {
                self.frozen.retain(|f| !overlap(&f.start, &f.end, start, end));
                self.incoming.retain(|(a, b, _)| !overlap(a, b, start, end));
                if *drop {
                    self.versions.drop_range(start, end);
                    self.adopted.retain(|(a, b, _)| !overlap(a, b, start, end));
                }
            }
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
