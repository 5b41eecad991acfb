//! The choices an [`super::Options`] is made of: isolation, tracking, the
//! commit protocol, the quorum, the stores, the flush policy, hedging; and
//! the per-transaction [`TxnOptions`].

use std::sync::Arc;

use objstore::ObjectStore;

use crate::error::{Error, Result};

/// Transaction isolation levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Each read sees the latest committed version; writes still follow
    /// first-updater-wins against uncommitted versions.
    ReadCommitted,
    /// Reads see the snapshot taken at `begin`; a write over a version
    /// committed after that snapshot aborts (first-updater-wins).
    #[default]
    Snapshot,
    /// Snapshot isolation plus read-set and scan-set validation at commit:
    /// the transaction commits only if everything it read is still the latest
    /// committed state at its commit point (its CSN).
    Serializable,
}

/// When the committer may acknowledge a pre-committed transaction T
/// (invariant 2). Both need T's own log records durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tracking {
    /// Record-level (Milliscale): T.DSN < gCSN, i.e. every transaction
    /// whose versions T read or overwrote is durable.
    #[default]
    Record,
    /// Transaction-level (the baseline): T.CSN < gCSN, i.e. every
    /// transaction serialized before T is durable.
    Txn,
}

/// Who writes the log and who acknowledges commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CommitProtocol {
    /// Pipelined group commit (paper §2.4, §4.3): workers only pre-commit;
    /// the log's lane threads flush the groups' buffers, paced by the
    /// store's latency, and run the committer's round after each append.
    /// The default.
    #[default]
    Pipelined,
    /// Autonomous commit (Autonomous Commit): each worker writes the log itself.
    /// After a pre-commit it flushes its stream (its own buffer and its
    /// neighbours', *log stealing*) once its buffer holds a flush unit, or
    /// at once when it expects to be idle (*force commit*: its average
    /// idle time between transactions reaches a random draw below
    /// `max_idle`, or it waits for an ack). Where the store has an
    /// asynchronous client (`ObjectStore::start_append`) the worker sends
    /// the append and goes on; it, or a neighbour, finishes it after a
    /// later transaction, acknowledging its commits. Workers also run the
    /// committer's round with probability 1/log2(workers) after a
    /// transaction. The lane threads remain as a backstop that flushes
    /// what a worker left behind, and finishes what it left in flight,
    /// after `flush_timeout`. See `log` and ARCHITECTURE.md.
    Autonomous,
}

impl std::str::FromStr for CommitProtocol {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "pipelined" => Ok(CommitProtocol::Pipelined),
            "autonomous" => Ok(CommitProtocol::Autonomous),
            _ => Err(format!("unknown commit protocol {s:?} (pipelined or autonomous)")),
        }
    }
}

impl std::fmt::Display for CommitProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CommitProtocol::Pipelined => "pipelined",
            CommitProtocol::Autonomous => "autonomous",
        })
    }
}

/// How many stores must hold a log part before it counts as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Quorum {
    /// More than half of the stores (1 of 1, 2 of 3, 3 of 5).
    #[default]
    Majority,
    /// Every store.
    All,
}

impl Quorum {
    /// Acknowledgments needed out of `stores`.
    pub fn needed(self, stores: usize) -> usize {
        match self {
            Quorum::Majority => stores / 2 + 1,
            Quorum::All => stores,
        }
    }
}

/// Where the log goes: a URL (`sim://s3x`, `file:///path`, `s3://...`,
/// `memory://`) or a store object the caller built.
#[derive(Debug, Clone)]
pub enum StoreSpec {
    /// A store URL, opened by [`objstore::open`].
    Url(String),
    /// A store the caller already opened (tests, custom backends).
    Handle(Arc<dyn ObjectStore>),
    /// A store opened from this URL ([`Options::open_stores`](crate::Options::open_stores)); the URL
    /// names it in messages.
    Opened(String, Arc<dyn ObjectStore>),
    /// An `s3://` URL with static credentials instead of the AWS SDK's
    /// chain ([`Options::add_s3_store`](crate::Options::add_s3_store)).
    S3(String, objstore::S3Credentials),
}

impl StoreSpec {
    /// The store: opened from its URL (a bad URL is `InvalidArgument`,
    /// an unreachable store `Store`), or the handle.
    pub fn open(&self) -> Result<Arc<dyn ObjectStore>> {
        match self {
            StoreSpec::Url(u) => objstore::open(u).map_err(|e| match e {
                objstore::StoreError::InvalidRequest(m) => {
                    Error::InvalidArgument(format!("{u}: {m}"))
                }
                e => Error::Store(format!("{u}: {e}")),
            }),
            StoreSpec::Handle(s) | StoreSpec::Opened(_, s) => Ok(Arc::clone(s)),
            StoreSpec::S3(u, c) => match objstore::S3Store::with(u, c) {
                Ok(s) => Ok(Arc::new(s)),
                Err(objstore::StoreError::InvalidRequest(m)) => {
                    Err(Error::InvalidArgument(format!("{u}: {m}")))
                }
                Err(e) => Err(Error::Store(format!("{u}: {e}"))),
            },
        }
    }

    /// A short name for messages.
    pub fn describe(&self) -> String {
        match self {
            StoreSpec::Url(u) | StoreSpec::Opened(u, _) | StoreSpec::S3(u, _) => u.clone(),
            // Not its Debug output: a memory store prints every object.
            StoreSpec::Handle(_) => "store handle".to_owned(),
        }
    }
}

/// When a log group writes its buffer out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlushPolicy {
    /// The fewest appends worth their price (the default): a stream
    /// flushes when its last flush is older than the gap that costs least
    /// in store dollars plus waiting, `sqrt(2 a / (λ R))` for an append of
    /// `a` dollars, `R` transactions a second, and a transaction-second
    /// worth `λ` (`Options::millisecond_price`). The gap is never shorter
    /// than the pace (`flush_pace` appends per store round trip, or
    /// `flush_min_interval`) and never longer than `flush_max_wait`. So
    /// the bill follows the load: an idle stream sends nothing, a quiet
    /// one an append per transaction without waiting, a busy one more
    /// appends as the square root of its load, up to the pace at
    /// saturation. A full buffer goes out at once; `max_appends_per_s`
    /// and `max_usd_per_hour` cap the rate.
    #[default]
    Target,
    /// Flush evenly paced, by the store's own latency: a stream starts
    /// `flush_pace` appends per round trip (the median of its recent
    /// appends), never more often than `flush_min_interval`, on any free
    /// lane, and only when a buffer holds data (and within the database's
    /// `max_appends_per_s`, if set); a full buffer, or data older than
    /// `flush_timeout`, goes out without waiting. A busy stream sends
    /// bigger parts at the same pace, an idle one sends none. Without a
    /// pace, a free lane flushes as soon as `flush_min_interval` allows.
    /// The default before `Target`: the same appends a second at any load.
    Adaptive,
    /// The paper's policy: flush when the buffer is full or when
    /// `flush_timeout` has passed since its first entry.
    Timeout,
}

/// Per-transaction options for [`crate::Database::begin_with`].
#[derive(Debug, Clone, Copy, Default)]
pub struct TxnOptions {
    /// The isolation level; `None` uses the database default.
    pub isolation: Option<Isolation>,
    /// Refuse writes. A read-only transaction never takes a CSN.
    pub read_only: bool,
    /// Read at the durable snapshot (gCSN) instead of the latest one: the
    /// transaction sees only durable data, so its commit never waits
    /// (MILANA-style local commit). Implies `read_only`.
    ///
    /// It sees every commit acknowledged before it began whenever a
    /// consistent cut can hold that commit: always with one log group of
    /// one lane or with [`Tracking::Txn`]. With record-level tracking and
    /// several groups or lanes, a commit can be acknowledged while a lower
    /// CSN of another group or lane is still being written (it does not
    /// depend on it); the durable snapshot includes it once that lower CSN
    /// is durable too.
    pub durable_snapshot: bool,
}

impl TxnOptions {
    /// Options with the given isolation level.
    pub fn isolation(isolation: Isolation) -> TxnOptions {
        TxnOptions { isolation: Some(isolation), ..TxnOptions::default() }
    }

    /// A read-only transaction at the database's default isolation.
    pub fn read_only() -> TxnOptions {
        TxnOptions { read_only: true, ..TxnOptions::default() }
    }

    /// A read-only transaction at the durable snapshot; see
    /// [`TxnOptions::durable_snapshot`].
    pub fn durable_snapshot() -> TxnOptions {
        TxnOptions { read_only: true, durable_snapshot: true, ..TxnOptions::default() }
    }
}

/// Where the log hedges slow appends (`Options::hedging`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hedging {
    /// Only where the store hedges inside its own client at no cost to the
    /// writer's thread (`s3://`, `sim://`). The default.
    #[default]
    Auto,
    /// Everywhere: stores that cannot hedge themselves get helper threads.
    Always,
    /// Never.
    Off,
}
