//! One object-store interface for the whole project.
//!
//! [`ObjectStore`] is **synchronous**: the engine runs on its own threads
//! (workers, one flusher per log group), and a flusher blocks on its store
//! call just as the Milliscale prototype's flusher threads block on the
//! synchronous SDK call. Backends that speak async protocols (the S3 SDK)
//! own a runtime and block on it inside the call; async callers (the
//! emulator's HTTP layer) call the store from a blocking task. The
//! sync/async boundary is therefore inside the backend, and the engine never
//! sees a future. The one exception is the log's append, which a store
//! may also offer as submit-and-poll ([`ObjectStore::start_append`],
//! [`pending`]), so that a worker that writes its own log (autonomous
//! commit) can go on while the append is out.
//!
//! Semantics follow S3 Express One Zone: `append` writes at an offset that
//! must equal the object's size, each successful write adds a part, and an
//! object holds at most [`PARTS_MAX`] parts.

// Two `unsafe` blocks in the crate: mapping a data file in `fs`, and setting
// a thread's timer slack in `sim` (see there).
#![deny(unsafe_code)]
#![deny(missing_docs, clippy::unwrap_used, rust_2018_idioms)]

use std::fmt::Debug;
use std::ops::Range;
use std::sync::Arc;

pub use bytes::Bytes;

pub mod conformance;
mod error;
mod fs;
mod memory;
pub mod pending;
pub mod probe;
mod s3;
pub mod sim;
mod sleep;

pub use error::{Result, StoreError};
pub use pending::PendingAppend;

/// What a hedged append did ([`ObjectStore::append_hedged`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hedge {
    /// The first request answered in time; no second one went out.
    NotSent,
    /// A second request went out, and the first still answered first.
    Lost,
    /// A second request went out and its answer was used.
    Won,
}

impl Hedge {
    /// Whether a second request went out.
    pub fn sent(self) -> bool {
        self != Hedge::NotSent
    }
}
pub use fs::FsStore;
pub use memory::MemoryStore;
pub use s3::{S3Credentials, S3Store};

/// Parts per object on S3 Express One Zone.
pub const PARTS_MAX: u32 = 10_000;
/// Longest key S3 accepts, in bytes.
pub const KEY_BYTES_MAX: usize = 1024;

/// What a store knows about one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// The object's key.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// Changes with every write; use with `put_if_match`.
    pub etag: String,
    /// Writes that make up the object (a put is one part, each append one
    /// more); `None` if the store does not report it (S3 HEAD does not).
    pub parts: Option<u32>,
    /// When the object was last written (put or append); `None` if the
    /// store did not say (S3 answers a PUT without it).
    pub modified: Option<std::time::SystemTime>,
}

/// An object store: S3 Express One Zone semantics.
pub trait ObjectStore: Send + Sync + Debug {
    /// Create or replace `key` (one part).
    fn put(&self, key: &str, body: Bytes) -> Result<ObjectMeta>;
    /// Create `key` only if it does not exist (`If-None-Match: *`); else
    /// `AlreadyExists`. Atomic under concurrency.
    fn put_if_absent(&self, key: &str, body: Bytes) -> Result<ObjectMeta>;
    /// Replace `key` only if its ETag is `etag` (`If-Match`); else
    /// `PreconditionFailed` (or `NotFound`). Atomic under concurrency.
    fn put_if_match(&self, key: &str, body: Bytes, etag: &str) -> Result<ObjectMeta>;
    /// Append `body` at `offset`, which must equal the object's size
    /// (`InvalidWriteOffset { actual_size }` otherwise). Offset 0 creates a
    /// missing object; a larger offset on a missing object is `NotFound`.
    /// An empty body is `InvalidRequest`; a full object is `TooManyParts`.
    fn append(&self, key: &str, offset: u64, body: Bytes) -> Result<ObjectMeta>;
    /// The whole object.
    fn get(&self, key: &str) -> Result<Bytes>;
    /// Bytes `range` of the object; the end is clipped to the object's size,
    /// a start at or past the end is `InvalidRange`.
    fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes>;
    /// The object's metadata.
    fn head(&self, key: &str) -> Result<ObjectMeta>;
    /// Every object whose key starts with `prefix`, in key order.
    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>>;
    /// Delete `key`; deleting a missing key succeeds, as in S3.
    fn delete(&self, key: &str) -> Result<()>;
    /// Requests, bytes and cost so far, for stores that count them (`sim://`).
    fn accounting(&self) -> Option<sim::accounting::AccountingReport> {
        None
    }
    /// The price table this store's requests are counted at, for stores
    /// that have one (`sim://`, `s3://`); `None` for local directories and
    /// memory, whose requests cost no dollars. The log weighs an append's
    /// price against the latency it saves (`FlushPolicy::Target`).
    fn prices(&self) -> Option<sim::model::Prices> {
        None
    }
    /// Whether this is an object store reached over the network (S3, S3
    /// Express, or a `sim://` preset of one), where every write is a
    /// request that costs milliseconds and money, rather than a local
    /// directory or a block device. The engine sizes autonomous commit's
    /// default flush unit by it.
    fn is_object_store(&self) -> bool {
        false
    }
    /// Whether a large object is read faster as many concurrent ranged
    /// GETs (a remote store, where one connection gets a fraction of the
    /// bandwidth) than as one read (a local directory or memory, where
    /// splitting only adds a copy). Recovery asks this.
    fn prefers_ranged_reads(&self) -> bool {
        true
    }
    /// Forget the request latencies the accounting recorded so far
    /// (benchmarks call it before the measured phase); counts and dollars
    /// are kept.
    fn reset_latency(&self) {}
    /// [`ObjectStore::append`], hedged inside the store: if no answer has
    /// come after `hedge_after`, the same bytes are sent again at the same
    /// offset, and the first answer wins (at most one copy can land; the
    /// other is refused, or cancelled in flight). Returns the answer and
    /// what the hedge did. `None` (the default) means the store cannot do
    /// this without the caller's threads, and the caller hedges itself;
    /// asynchronous clients (`s3://`) do it with a timer, and `sim://`
    /// models the two requests.
    fn append_hedged(
        &self,
        _key: &str,
        _offset: u64,
        _body: Bytes,
        _hedge_after: std::time::Duration,
    ) -> Option<(Result<ObjectMeta>, Hedge)> {
        None
    }
    /// [`ObjectStore::append`] (hedged as [`ObjectStore::append_hedged`]
    /// with `hedge_after`) without waiting for the answer: the request is
    /// sent, and the caller polls or waits on the returned
    /// [`PendingAppend`] (see [`pending`]). `None` (the default): the store
    /// has no asynchronous client, and the caller makes the synchronous
    /// call. `sim://` models the request's time without a thread.
    fn start_append(
        self: Arc<Self>,
        _key: &str,
        _offset: u64,
        _body: Bytes,
        _hedge_after: Option<std::time::Duration>,
    ) -> Option<PendingAppend> {
        None
    }
    /// [`ObjectStore::get_range`], hedged inside the store: if no answer
    /// has come after `hedge_after`, the same read is sent again and the
    /// first answer wins, a 404 or a 416 as much as data; a retryable
    /// failure (throttled, transient) waits for the other request. A read
    /// changes nothing, so racing two is always safe; the second may see
    /// newer bytes, as any later read may.
    /// `None` (the default): the store cannot, and the caller reads once.
    fn get_range_hedged(
        &self,
        _key: &str,
        _range: Range<u64>,
        _hedge_after: std::time::Duration,
    ) -> Option<(Result<Bytes>, Hedge)> {
        None
    }
    /// [`ObjectStore::head`], hedged as [`ObjectStore::get_range_hedged`].
    fn head_hedged(
        &self,
        _key: &str,
        _hedge_after: std::time::Duration,
    ) -> Option<(Result<ObjectMeta>, Hedge)> {
        None
    }
}

/// Check a key as S3 does: 1..=1024 bytes.
pub fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > KEY_BYTES_MAX {
        return Err(StoreError::InvalidRequest(format!(
            "keys must be 1..={KEY_BYTES_MAX} bytes, got {}",
            key.len()
        )));
    }
    Ok(())
}

/// Open a store by URL: `memory://` (a fresh, empty store),
/// `file:///absolute/path` (a directory), `s3://bucket/prefix?...` (see
/// [`S3Store`]), `sim://PRESET?...` (see [`sim`]).
pub fn open(url: &str) -> Result<Arc<dyn ObjectStore>> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| StoreError::InvalidRequest(format!("not a store URL: {url:?}")))?;
    match scheme {
        "memory" => Ok(Arc::new(MemoryStore::new())),
        "file" if rest.starts_with('/') => Ok(Arc::new(FsStore::open(rest)?)),
        "file" => {
            Err(StoreError::InvalidRequest(format!("file URLs need an absolute path: {url:?}")))
        }
        "sim" => Ok(Arc::new(sim::SimStore::from_url(url)?)),
        "s3" => Ok(Arc::new(S3Store::from_url(url)?)),
        _ => Err(StoreError::InvalidRequest(format!("unknown store scheme {scheme:?} in {url:?}"))),
    }
}
