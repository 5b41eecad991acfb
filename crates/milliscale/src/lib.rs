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
//! `reclaim` (deleted keys out of the index once every snapshot sees them),
//! `txn/` (transactions, isolation), `index/` (the ordered index), `log/`
//! (records, log groups and their flushers, segments, replication),
//! `commit/` (pre-commit, DSN vs gCSN, the committer). See ARCHITECTURE.md.

#![forbid(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs, clippy::unwrap_used, rust_2018_idioms)]
#![warn(clippy::undocumented_unsafe_blocks)]
// Without `internals`, what only it exports (the fuzz targets, the log's
// encoders for tests) is unused; the workspace's own build enables the
// feature, so its lints still find code that nothing uses.
#![cfg_attr(not(feature = "internals"), allow(dead_code, unused_imports))]

mod async_api;
mod bugs;
mod checkpoint;
mod commit;
mod db;
mod engine;
mod error;
pub mod feed;
pub mod history;
mod index;
mod keys;
pub mod limits;
mod log;
mod manifest;
mod mvcc;
pub mod options;
mod parallel;
mod rate;
mod reclaim;
mod recovery;
mod replica;
mod retry;
mod sched;
mod table;
mod telemetry;
mod txn;

pub use async_api::{AsyncDatabase, AsyncFeed, AsyncReplica, AsyncTransaction, WaitFor};
#[doc(hidden)]
pub use bugs::DeliberateBug;
pub use checkpoint::CheckpointStats;
pub use commit::{CommitAck, CommitInfo, CommitMetrics, Durable};
pub use db::restore::{RestoreReport, RestoreStep, restore};
pub use db::{Database, DbStats};
pub use error::{ConflictKind, Error, ErrorKind, Result};
pub use history::At;
pub use history::backup::{BackupReport, VerifyReport};
pub use history::clone::{CloneReport, OverlayWrite, clone_at, clone_with};
pub use history::past::PastReport;
pub use index::Direction;
pub use keys::Chain;
pub use log::group::GroupMetrics;
pub use log::segment::WriteMode;
pub use log::stream::StreamMetrics;
pub use log::{HOURS_PER_MONTH, LAG_PARTS_MAX, LogCost, LogMetrics, StoreStatus};
pub use manifest::{CheckpointRef, ChunkRef, LogRef, Manifest, Overlay, Parent, SealedLog};
pub use mvcc::Csn;
pub use options::{
    CommitProtocol, Config, FlushPolicy, Hedging, Isolation, Options, Quorum, StoreSpec, Tracking,
    TxnOptions,
};
pub use recovery::{PromotionReport, PromotionTimings, RecoveryReport, Timings, Truncated};
pub use replica::{IDLE_MANIFEST_POLLS, Replica, ReplicaMetrics, ReplicaOptions};
pub use table::Table;

/// The object stores the log writes to: the [`store::ObjectStore`]
/// interface (S3 Express semantics), and the backends behind the store
/// URLs: `memory://`, `file:///path`, `sim://PRESET`, `s3://bucket/prefix`
/// ([`store::S3Store`], with its credentials).
pub mod store {
    pub use objstore::{
        Bytes, FsStore, MemoryStore, ObjectMeta, ObjectStore, Result, S3Credentials, S3Store,
        StoreError, open,
    };
}
pub use txn::{RowHint, SCAN_BATCH_ROWS, ScanIter, Transaction};

/// Hooks for this repository's own tools, benchmarks and tests: the log's
/// byte format and segment writer, object names, recovery's scan and plan,
/// a replica's chain tail, the raw ordered index. They are what
/// `milliscale inspect` and `dump` read the stores with, and what the
/// tests drive the log's parts with one at a time. Not a stable API: an
/// embedding application needs none of it, and it exists only with the
/// `internals` feature.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals {
    pub use crate::checkpoint::list_offers;
    pub use crate::index::{IndexKey, KeyQuery};
    /// Every object name the engine writes or reads.
    pub mod keys {
        pub use crate::keys::*;
    }
    pub use crate::log::{hedge, segment};
    /// The log's byte format: parts, entries and records, and their
    /// decoding.
    pub mod record {
        pub use crate::log::decode::{DecodeError, decode_part, decode_segment};
        pub use crate::log::record::*;
    }
    pub use crate::recovery::{LogScan, ReplayPlan, plan_replay, scan_log};
    pub use crate::replica::ACTIVE_WINDOW;
    pub use crate::replica::tail;

    /// The fuzz targets: each takes arbitrary bytes and must not panic.
    /// `fuzz/` runs them coverage-guided (cargo-fuzz, nightly);
    /// `tests/fuzz_targets.rs` runs each for a fixed time on every test run.
    pub mod fuzz {
        pub use crate::checkpoint::fuzz_chunk;
        pub use crate::log::decode::fuzz_part;
        pub use crate::manifest::fuzz_manifest;
    }
}

/// The README's examples, compiled and run as doctests.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// This crate's README's examples (the async API), likewise.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct EngineReadmeDoctests;
