//! The one configuration type for a database: [`Options`], a builder
//! that validates what it is given. `choices` holds the enums it is made
//! of, `defaults` the defaults and bounds, `validate` the checks, `config`
//! the same options as data (TOML files and environment variables).

mod choices;
mod config;
mod defaults;
mod validate;

/// Default [`Options::log_thread_slice`]: the kernel's smallest slice.
pub use crate::sched::LOG_THREAD_SLICE_DEFAULT;
pub use choices::{
    CommitProtocol, FlushPolicy, Hedging, Isolation, Quorum, StoreSpec, Tracking, TxnOptions,
};
pub use config::{Config, ENV_PREFIX};
pub use defaults::{
    CHECKPOINT_CHUNK_BYTES_DEFAULT, CHECKPOINT_LOG_BYTES_DEFAULT, CHECKPOINT_LOG_RATIO_FLOOR_BYTES,
    FLUSH_MAX_WAIT_DEFAULT, FLUSH_MIN_INTERVAL_DEFAULT, FLUSH_PACE_DEFAULT, FLUSH_PACE_MAX,
    FLUSH_TIMEOUT_DEFAULT, FLUSH_UNIT_DEFAULT, LOG_BUFFER_BYTES_DEFAULT, LOG_GROUP_SIZE_DEFAULT,
    LOG_LANES_DEFAULT, LOG_LANES_MAX, LOG_STREAMS_DEFAULT, LOG_STREAMS_PER_GROUP, MAX_IDLE_DEFAULT,
    MILLISECOND_PRICE_DEFAULT, OBJECT_FLUSH_UNIT_DEFAULT, RETENTION_MIN, STEAL_GROUP_DEFAULT,
};

use std::sync::Arc;
use std::time::Duration;

use objstore::ObjectStore;

use crate::error::Result;
use crate::limits::LOG_GROUPS_MAX;

/// Options for [`crate::Database::open`].
///
/// With no store (the default, or `store("none")`) nothing is logged:
/// commits are acknowledged at pre-commit and nothing survives the
/// process. With one or more stores every commit is logged and
/// acknowledged only once durable.
#[derive(Debug, Clone)]
pub struct Options {
    pub(crate) stores: Vec<StoreSpec>,
    pub(crate) create_if_missing: bool,
    pub(crate) quorum: Quorum,
    pub(crate) max_transactions: usize,
    pub(crate) isolation: Isolation,
    pub(crate) workers: usize,
    pub(crate) log_group_size: usize,
    pub(crate) log_buffer_bytes: usize,
    pub(crate) flush_timeout: Duration,
    pub(crate) log_lanes: usize,
    pub(crate) log_streams: usize,
    pub(crate) log_thread_slice: Option<Duration>,
    pub(crate) flush_policy: FlushPolicy,
    pub(crate) flush_min_interval: Duration,
    pub(crate) flush_pace: Option<f64>,
    pub(crate) max_appends_per_s: Option<u32>,
    pub(crate) millisecond_price: f64,
    pub(crate) flush_max_wait: Duration,
    pub(crate) max_usd_per_hour: Option<f64>,
    pub(crate) append_price: Option<f64>,
    pub(crate) tracking: Tracking,
    pub(crate) commit_protocol: CommitProtocol,
    pub(crate) flush_unit: Option<usize>,
    pub(crate) max_idle: Duration,
    pub(crate) steal_group: usize,
    pub(crate) segment_parts_max: u32,
    pub(crate) store_deadline: Duration,
    pub(crate) hedging: Hedging,
    pub(crate) hedge_multiple: f64,
    pub(crate) hedge_budget: f64,
    pub(crate) force_put_per_flush: bool,
    pub(crate) recovery_threads: usize,
    pub(crate) checkpoint_chunk_bytes: usize,
    pub(crate) checkpoint_log_bytes: u64,
    pub(crate) checkpoint_log_ratio: f64,
    pub(crate) checkpoint_interval: Option<Duration>,
    pub(crate) checkpoint_offload: bool,
    pub(crate) metrics_interval: Option<Duration>,
    pub(crate) point_index: bool,
    pub(crate) retention: Option<Duration>,
    pub(crate) parent_stores: Vec<StoreSpec>,
    pub(crate) bugs: crate::bugs::Bugs,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            stores: Vec::new(),
            create_if_missing: true,
            quorum: Quorum::Majority,
            max_transactions: 1024,
            isolation: Isolation::Snapshot,
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            log_group_size: LOG_GROUP_SIZE_DEFAULT,
            log_buffer_bytes: LOG_BUFFER_BYTES_DEFAULT,
            flush_timeout: FLUSH_TIMEOUT_DEFAULT,
            log_lanes: LOG_LANES_DEFAULT,
            log_streams: LOG_STREAMS_DEFAULT,
            log_thread_slice: Some(crate::sched::LOG_THREAD_SLICE_DEFAULT),
            flush_policy: FlushPolicy::Target,
            flush_min_interval: FLUSH_MIN_INTERVAL_DEFAULT,
            flush_pace: Some(FLUSH_PACE_DEFAULT),
            max_appends_per_s: None,
            millisecond_price: MILLISECOND_PRICE_DEFAULT,
            flush_max_wait: FLUSH_MAX_WAIT_DEFAULT,
            max_usd_per_hour: None,
            append_price: None,
            tracking: Tracking::Record,
            commit_protocol: CommitProtocol::Pipelined,
            flush_unit: None,
            max_idle: MAX_IDLE_DEFAULT,
            steal_group: STEAL_GROUP_DEFAULT,
            segment_parts_max: objstore::PARTS_MAX,
            store_deadline: Duration::from_secs(30),
            hedging: Hedging::Auto,
            hedge_multiple: 1.0,
            hedge_budget: 0.1,
            force_put_per_flush: false,
            recovery_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            checkpoint_chunk_bytes: CHECKPOINT_CHUNK_BYTES_DEFAULT,
            checkpoint_log_bytes: CHECKPOINT_LOG_BYTES_DEFAULT,
            checkpoint_log_ratio: 0.0,
            checkpoint_interval: None,
            checkpoint_offload: false,
            metrics_interval: Some(Duration::from_secs(1)),
            point_index: true,
            retention: None,
            parent_stores: Vec::new(),
            bugs: crate::bugs::Bugs::default(),
        }
    }
}

impl Options {
    /// Default options: no log, 1,024 transaction slots, snapshot
    /// isolation; with a store, groups of 2 workers sharing a 1 MiB buffer,
    /// a 10 ms flush timeout and record-level tracking.
    pub fn new() -> Options {
        Options::default()
    }

    /// Log to this one store URL (replacing any set before). `"none"`
    /// turns logging off. Use [`Options::add_store`] for replication.
    pub fn store(mut self, url: impl Into<String>) -> Options {
        let url = url.into();
        self.stores.clear();
        if url != "none" {
            self.stores.push(StoreSpec::Url(url));
        }
        self
    }

    /// Also log to this store URL: every flush goes to every store, and a
    /// part is durable once a [`Quorum`] of them holds it.
    pub fn add_store(mut self, url: impl Into<String>) -> Options {
        self.stores.push(StoreSpec::Url(url.into()));
        self
    }

    /// Also log to this `s3://` URL, signing with `credentials` instead of
    /// the AWS SDK's standard chain (environment, profile files, web
    /// identity, container endpoint, instance metadata), which plain
    /// [`Options::store`] and [`Options::add_store`] use.
    pub fn add_s3_store(
        mut self,
        url: impl Into<String>,
        credentials: crate::store::S3Credentials,
    ) -> Options {
        self.stores.push(StoreSpec::S3(url.into(), credentials));
        self
    }

    /// Also log to a store object the caller opened.
    pub fn add_store_handle(mut self, store: Arc<dyn ObjectStore>) -> Options {
        self.stores.push(StoreSpec::Handle(store));
        self
    }

    /// Open every store given by URL now, so that everything opened with
    /// these options (a database, and a [`crate::Replica`] in the same
    /// process) shares one handle per store: a `sim://` or `memory://` URL
    /// names a new store each time it is opened.
    pub fn open_stores(mut self) -> Result<Options> {
        for spec in &mut self.stores {
            if let StoreSpec::Url(u) | StoreSpec::S3(u, _) = spec {
                *spec = StoreSpec::Opened(u.clone(), spec.open()?);
            }
        }
        Ok(self)
    }

    /// These options with `named` (the stores they name, opened, in
    /// order) as their stores: another reader of the same database through
    /// the same handles (a `memory://` store is one only through its
    /// handle).
    pub(crate) fn with_opened(
        mut self,
        named: &[(String, std::sync::Arc<dyn objstore::ObjectStore>)],
    ) -> Options {
        self.stores = named
            .iter()
            .map(|(name, store)| StoreSpec::Opened(name.clone(), std::sync::Arc::clone(store)))
            .collect();
        self
    }

    /// The stores, in order.
    pub fn stores(&self) -> &[StoreSpec] {
        &self.stores
    }

    /// Run with a deliberate bug (module `bugs`): for this repository's
    /// tests, which show that their oracles catch it. Only with the
    /// `deliberate-bugs` feature.
    #[cfg(feature = "deliberate-bugs")]
    #[doc(hidden)]
    pub fn deliberate_bug(mut self, bug: crate::DeliberateBug) -> Options {
        self.bugs.bug = Some(bug);
        self
    }

    /// How many stores must hold a part. Default majority.
    pub fn quorum(mut self, quorum: Quorum) -> Options {
        self.quorum = quorum;
        self
    }

    /// How many transactions may run at once (1..=65,536). Default 1,024.
    pub fn max_transactions(mut self, n: usize) -> Options {
        self.max_transactions = n;
        self
    }

    /// Isolation level of [`crate::Database::begin`]. Default snapshot.
    pub fn isolation(mut self, isolation: Isolation) -> Options {
        self.isolation = isolation;
        self
    }

    /// How many threads will run transactions. With the group size it sets
    /// the number of log groups: `ceil(workers / log_group_size)`. Default:
    /// the machine's available parallelism. More threads than this still
    /// work; they share the groups round-robin.
    pub fn workers(mut self, n: usize) -> Options {
        self.workers = n;
        self
    }

    /// Worker threads per log group, i.e. per log buffer (restricted
    /// decentralized logging). Default 2; 1 is per-thread logging.
    pub fn log_group_size(mut self, n: usize) -> Options {
        self.log_group_size = n;
        self
    }

    /// Bytes of one group's log buffer; a flush sends at most this much
    /// (one larger part only for a single transaction that does not fit).
    /// A group fills one buffer while each of its lanes writes another.
    /// Default 1 MiB.
    pub fn log_buffer_bytes(mut self, n: usize) -> Options {
        self.log_buffer_bytes = n;
        self
    }

    /// The longest a transaction waits in a buffer that is not full: it
    /// is flushed this long after its first transaction arrived (with
    /// [`FlushPolicy::Timeout`], exactly then). Default 10 ms.
    pub fn flush_timeout(mut self, d: Duration) -> Options {
        self.flush_timeout = d;
        self
    }

    /// The commit protocol. Default [`CommitProtocol::Pipelined`].
    ///
    /// [`CommitProtocol::Autonomous`] also lays the log out as Autonomous Commit
    /// does: a log buffer per worker (`log_group_size(1)`), streams of
    /// [`Options::steal_group`] buffers, and as many lanes per stream, so
    /// every worker of a stream can have its own append in flight. Call the
    /// layout setters after this one to change that.
    pub fn commit_protocol(mut self, p: CommitProtocol) -> Options {
        self.commit_protocol = p;
        if p == CommitProtocol::Autonomous {
            self.log_group_size = 1;
            self.log_lanes = self.steal_group.min(LOG_LANES_MAX);
        }
        self
    }

    /// Autonomous commit: a worker flushes its stream once its own buffer
    /// holds this many bytes (Autonomous Commit's flush unit). Default
    /// [`FLUSH_UNIT_DEFAULT`] (16 KiB), or [`OBJECT_FLUSH_UNIT_DEFAULT`]
    /// (256 KiB) when a log store is an object store; a unit above
    /// [`Options::log_buffer_bytes`] counts as the buffer's size.
    pub fn flush_unit(mut self, bytes: usize) -> Options {
        self.flush_unit = Some(bytes);
        self
    }

    /// Autonomous commit: force commit. After a transaction a worker
    /// flushes at once, whatever its buffer holds, when its average idle
    /// time between transactions is at least a random draw from
    /// `[0, max_idle)` (Autonomous Commit's rule). Zero turns the prediction off
    /// (a worker that waits for an ack still flushes). Default 50 µs.
    pub fn max_idle(mut self, d: Duration) -> Options {
        self.max_idle = d;
        self
    }

    /// Autonomous commit: how many log groups share a stream, i.e. whose
    /// buffers a flushing worker takes along (log stealing). Default 4.
    /// Also sets the lanes per stream to match.
    pub fn steal_group(mut self, n: usize) -> Options {
        self.steal_group = n;
        if self.commit_protocol == CommitProtocol::Autonomous {
            self.log_lanes = n.clamp(1, LOG_LANES_MAX);
        }
        self
    }

    /// The dependency tracking policy. Default [`Tracking::Record`].
    pub fn tracking(mut self, t: Tracking) -> Options {
        self.tracking = t;
        self
    }

    /// Parts per log segment before it is sealed (1..=10,000). Default
    /// 10,000, S3 Express's limit; lower it to test rollover.
    pub fn segment_parts_max(mut self, n: u32) -> Options {
        self.segment_parts_max = n;
        self
    }

    /// How long the log keeps retrying a store that fails before it gives
    /// up on it. When too few stores are left for a quorum, the database is
    /// poisoned: every later commit fails with `StoreUnavailable`.
    /// Default 30 s.
    pub fn store_deadline(mut self, d: Duration) -> Options {
        self.store_deadline = d;
        self
    }

    /// Appends a log stream may keep in flight at once (1..=16), each lane
    /// its own chain of segment objects. A flush goes to a free lane, so a
    /// slow append holds back only the transactions in its own part (and
    /// those that depend on them), not the stream's next flush. 1 is the
    /// paper's design: one append at a time per group. Default 8: with the
    /// default pace about three are out at once, and the spare lanes keep
    /// the pace through slow appends.
    pub fn log_lanes(mut self, n: usize) -> Options {
        self.log_lanes = n;
        self
    }

    /// Log streams: the groups are split into this many streams of
    /// consecutive groups, and each stream flushes through its own
    /// `log_lanes` lanes. A stream's flush takes what every one of its
    /// groups has buffered and writes it as one append (each group's part
    /// keeps its own header and checksum), so appends a second grow with
    /// the streams, not with the groups, and all of a stream's groups
    /// become durable together. Groups still have their own buffers: the
    /// workers of different groups never contend for one lock. 1 (the
    /// default) shares the lanes among all groups;
    /// [`LOG_STREAMS_PER_GROUP`] (or any value at least the number of
    /// groups) gives each group its own stream, the paper's layout.
    pub fn log_streams(mut self, n: usize) -> Options {
        self.log_streams = n;
        self
    }

    /// The scheduler slice the log's threads ask for, so that they get a
    /// core as soon as they wake even when the workers keep every core
    /// busy (ARCHITECTURE.md, the `sched` module; Linux 6.12 and later, no privilege
    /// needed). The kernel takes 0.1 to 100 ms. Default 0.1 ms; `None`
    /// leaves the threads at the kernel's default.
    pub fn log_thread_slice(mut self, slice: Option<Duration>) -> Options {
        self.log_thread_slice = slice;
        self
    }

    /// What [`crate::Database::open`] does when the stores hold no
    /// database: create one (`true`, the default), or fail with
    /// [`crate::Error::NoDatabase`] (`false`: for tools that must find an
    /// existing database, such as `milliscale recover`, where a mistyped
    /// prefix would otherwise give an empty database that looks healthy).
    pub fn create_if_missing(mut self, create: bool) -> Options {
        self.create_if_missing = create;
        self
    }

    /// When a group flushes ([`FlushPolicy`]). Default target.
    pub fn flush_policy(mut self, p: FlushPolicy) -> Options {
        self.flush_policy = p;
        self
    }

    /// The least time between two flushes of a stream (0..=1 s), under
    /// the target and adaptive policies. Default 1 ms.
    pub fn flush_min_interval(mut self, d: Duration) -> Options {
        self.flush_min_interval = d;
        self
    }

    /// The pace: how many appends a stream starts per store round trip at
    /// most (the target policy's floor) or always (adaptive), evenly spaced (the interval is the median of its last 64
    /// appends' latencies divided by this; in (0, 64]). A transaction then
    /// waits half an interval for its flush on average, so the pace buys
    /// commit latency with requests: on a store with 8 ms appends, 3 gives
    /// one append every 2.7 ms. `None`: flush whenever a lane is free (the
    /// lanes' own cycle paces the flushes, unevenly). Default 2.75.
    pub fn flush_pace(mut self, pace: Option<f64>) -> Options {
        self.flush_pace = pace;
        self
    }

    /// The target policy ([`FlushPolicy::Target`]): what taking one
    /// millisecond off the commit latency of 1,000 transactions a second
    /// is worth to you, in dollars an hour. The log sends an append when
    /// the latency it saves the transactions waiting is worth its price
    /// (the store's price table, or [`Options::append_price`]). Higher buys
    /// lower latency with more requests; 0 waits `flush_max_wait` for
    /// every flush. Finite and at least 0; default
    /// [`MILLISECOND_PRICE_DEFAULT`].
    pub fn millisecond_price(mut self, usd_per_hour: f64) -> Options {
        self.millisecond_price = usd_per_hour;
        self
    }

    /// The target policy: the longest a stream lets data wait for its
    /// append to start (1 ms..=10 s), the latency bound at low load.
    /// Default [`FLUSH_MAX_WAIT_DEFAULT`].
    pub fn flush_max_wait(mut self, d: Duration) -> Options {
        self.flush_max_wait = d;
        self
    }

    /// A ceiling on the log's request dollars an hour, over all stores:
    /// turned into a request budget at the stores' append prices (as
    /// [`Options::max_appends_per_s`]; the lower of the two holds). Bytes
    /// uploaded are not in it: they follow the data, not the policy.
    /// Needs a price: a store with a price table (`sim://`, `s3://`) or
    /// [`Options::append_price`]. `None` (the default): no ceiling.
    pub fn max_usd_per_hour(mut self, usd: Option<f64>) -> Options {
        self.max_usd_per_hour = usd;
        self
    }

    /// The dollars of one log append to one store, for the target policy
    /// and [`Options::max_usd_per_hour`]. `None` (the default): each
    /// store's own price table (S3 Express: $1.13 per million); a store
    /// without one (`file://`, `memory://`) counts as free.
    pub fn append_price(mut self, usd: Option<f64>) -> Options {
        self.append_price = usd;
        self
    }

    /// A request budget for the whole database: at most this many parts
    /// (each one append, or one put, per store) per second, over all
    /// groups, smoothed over 100 ms. `None` (the default): no budget. A
    /// full buffer waits for the budget too, so under a budget too small
    /// for the load, commits slow down instead of the bill going up.
    pub fn max_appends_per_s(mut self, n: Option<u32>) -> Options {
        self.max_appends_per_s = n;
        self
    }

    /// Where to send a slow log append a second time (same bytes, same
    /// offset; the store's write-offset check lets at most one land), after
    /// the 90th percentile of the recent appends, and for at most 10% of
    /// them. Default [`Hedging::Auto`]: where the store's client hedges
    /// without the log's threads (`s3://`, `sim://`). [`Hedging::Always`]
    /// also hedges on other stores through helper threads, which costs
    /// median latency when the cores are busy (BENCHMARKS.md).
    pub fn hedging(mut self, h: Hedging) -> Options {
        self.hedging = h;
        self
    }

    /// Hedge an append once it is slower than this many times the 90th
    /// percentile of recent appends (default 1.0; at least 2 ms). Higher
    /// values race fewer appends, which leaves more of the 10% budget for
    /// the slow tail (a replica's reads use 2.0).
    pub fn hedge_multiple(mut self, m: f64) -> Options {
        self.hedge_multiple = if m.is_finite() && m >= 0.0 { m } else { 1.0 };
        self
    }

    /// In the long run, hedge at most this share of appends (default 0.1;
    /// each hedge is one more PUT-class request). A slow append that finds
    /// the budget spent is not raced.
    pub fn hedge_budget(mut self, share: f64) -> Options {
        self.hedge_budget = if (0.0..=1.0).contains(&share) { share } else { 0.1 };
        self
    }

    /// `true`: [`Hedging::Always`]; `false`: [`Hedging::Off`].
    pub fn hedge_appends(mut self, yes: bool) -> Options {
        self.hedging = if yes { Hedging::Always } else { Hedging::Off };
        self
    }

    /// Write one object per flush even where the store can append (the
    /// S3 Standard layout). By default the probe decides per store.
    pub fn put_per_flush(mut self, yes: bool) -> Options {
        self.force_put_per_flush = yes;
        self
    }

    /// Threads that fetch, decode and replay at recovery, and load the
    /// checkpoint. The recovered state is the same for any number.
    /// Default: the number of cores.
    pub fn recovery_threads(mut self, n: usize) -> Options {
        self.recovery_threads = n;
        self
    }

    /// Target size of a checkpoint chunk object. Default 8 MiB.
    pub fn checkpoint_chunk_bytes(mut self, n: usize) -> Options {
        self.checkpoint_chunk_bytes = n;
        self
    }

    /// Take a checkpoint in the background after this many log bytes since
    /// the last one (0: never on volume). Default 1 GiB.
    pub fn checkpoint_log_bytes(mut self, n: u64) -> Options {
        self.checkpoint_log_bytes = n;
        self
    }

    /// Also take a checkpoint once the log since the last one reaches
    /// `ratio` times that checkpoint's size (and at least 16 MiB,
    /// `CHECKPOINT_LOG_RATIO_FLOOR_BYTES`): recovery then replays at most
    /// about `ratio` times the live data, however long the database has
    /// run, where `checkpoint_log_bytes` alone lets a small database
    /// replay far more log than it holds. 0 (the default): off. `serve
    /// --cluster` sets 0.125 for its shard unless the configuration says.
    pub fn checkpoint_log_ratio(mut self, ratio: f64) -> Options {
        self.checkpoint_log_ratio = ratio;
        self
    }

    /// How often the database's background thread publishes its metrics
    /// through the `metrics` facade (see `Database::publish_metrics`);
    /// `None`: only when the program calls it. Default 1 s.
    pub fn metrics_interval(mut self, d: Option<Duration>) -> Options {
        self.metrics_interval = d;
        self
    }

    /// Take a checkpoint in the background at this interval (if the log
    /// grew since the last one). Default: none.
    pub fn checkpoint_interval(mut self, d: Option<Duration>) -> Options {
        self.checkpoint_interval = d;
        self
    }

    /// Offload checkpoints: when one is due, the writer does not
    /// scan its memory but adopts a checkpoint that a read replica built
    /// from the log (`Replica::offer_checkpoint`, `milliscale checkpoint
    /// --from-log`), after checking it; then truncates the log as usual.
    /// Until an offer covers the log it has marked, nothing is truncated.
    /// `Database::checkpoint` still takes one locally. Default off.
    pub fn checkpoint_offload(mut self, on: bool) -> Options {
        self.checkpoint_offload = on;
        self
    }

    /// Keep a hash table of each table's keys beside its ordered index, for
    /// reads and writes of one key: a point lookup then costs one or two
    /// loads from memory instead of a tree's descent (about 80 ns against
    /// 550 ns at 1M keys; YCSB-C in memory about 2x the transactions a
    /// second). It costs about 70 bytes a key. Scans use the ordered index
    /// either way. Default on.
    pub fn point_index(mut self, on: bool) -> Options {
        self.point_index = on;
        self
    }

    /// Keep a retention window of this length: every checkpoint and log
    /// object needed to read the database at any point of the last `d`
    /// stays on the stores (`Database::open_at`, `milliscale restore`),
    /// with a time index to find the CSN of any millisecond; truncation
    /// deletes only what is older. `None` (the default): truncation deletes
    /// everything the newest checkpoint covers, and the past is gone. See
    /// `crate::history` and design record 0012.
    pub fn retention(mut self, d: Option<Duration>) -> Options {
        self.retention = d;
        self
    }

    /// For a clone not opened yet (`Database::clone_at`): the stores of the
    /// database it was cloned from, when the URLs its manifest names do not
    /// open them (stores given as handles; another endpoint). Default:
    /// those URLs.
    pub fn parent_stores(mut self, stores: Vec<StoreSpec>) -> Options {
        self.parent_stores = stores;
        self
    }

    /// Whether the writer's background thread takes checkpoints on its
    /// own (on log volume, on the log's ratio to the live data, or on an
    /// interval).
    pub fn checkpoints_in_background(&self) -> bool {
        self.checkpoint_log_bytes > 0
            || self.checkpoint_log_ratio > 0.0
            || self.checkpoint_interval.is_some()
    }

    /// Whether commits are logged.
    pub fn is_logged(&self) -> bool {
        !self.stores.is_empty()
    }

    /// The number of log groups these options give.
    pub fn log_groups(&self) -> usize {
        self.workers.div_ceil(self.log_group_size.max(1)).clamp(1, LOG_GROUPS_MAX)
    }

    /// Groups per log stream these options give (see
    /// [`Options::log_streams`]).
    pub fn groups_per_stream(&self) -> usize {
        let groups = self.log_groups();
        match self.commit_protocol {
            CommitProtocol::Autonomous => self.steal_group.clamp(1, groups),
            CommitProtocol::Pipelined => groups.div_ceil(self.log_streams.clamp(1, groups)),
        }
    }
}
