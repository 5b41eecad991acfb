//! Milliscale: a memory-optimized multi-version transactional record store
//! whose write-ahead log commits directly to object storage.
//!
//! ```
//! use milliscale::{Database, Options};
//! # fn main() -> milliscale::Result<()> {
//! // Log to an object store: here an in-memory one; "sim://s3x" adds S3
//! // Express latency and accounting, "s3://bucket/prefix" is the real thing.
//! let db = Database::open(Options::new().store("memory://"))?;
//! let users = db.create_table("users")?;
//! let mut tx = db.begin()?;                      // snapshot isolation by default
//! tx.put(&users, b"k1", b"v1")?;
//! tx.update_range(&users, b"k1", 1, b"2")?;      // partial update: logged as a delta
//! let ack = tx.commit()?;                        // pre-committed: visible, worker free
//! ack.wait()?;                                   // returns once durable
//! assert_eq!(db.begin()?.get(&users, b"k1")?, Some(b"v2".to_vec()));
//! # Ok(()) }
//! ```
//!
//! The tree follows the Milliscale paper: `mvcc/` (versions, visibility, GC),
//! `txn/` (transactions, isolation), `index/` (the ordered index), `log/`
//! (records, log groups and their flushers, segments, replication),
//! `commit/` (pre-commit, DSN vs gCSN, the committer). See ARCHITECTURE.md.

#![forbid(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs, clippy::unwrap_used, rust_2018_idioms)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod checkpoint;
mod commit;
mod db;
mod error;
mod index;
pub mod limits;
pub mod log;
pub mod manifest;
mod mvcc;
pub mod options;
pub mod pages;
pub mod recovery;
pub mod replica;
pub mod sched;
mod table;
mod txn;

pub use commit::{CommitAck, CommitInfo, CommitMetrics};
pub use db::{CheckpointStats, Database, DbStats, PromotionReport, PromotionTimings};
pub use error::{ConflictKind, Error, Result};
pub use index::Direction;
pub use log::group::GroupMetrics;
pub use log::{LogMetrics, StoreStatus};
pub use mvcc::Csn;
pub use options::{
    CommitProtocol, FlushPolicy, Hedging, Isolation, Options, Quorum, StoreSpec, Tracking,
    TxnOptions,
};
pub use replica::{Replica, ReplicaMetrics, ReplicaOptions};
pub use table::Table;
pub use txn::Transaction;

/// Raw access to the ordered index implementation, for benchmarks that
/// compare the engine with the bare index ("raw index" lookups).
#[doc(hidden)]
pub mod raw {
    pub use crate::index::{IndexKey, KeyQuery};
}
