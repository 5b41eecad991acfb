//! The write-ahead log on object storage.
//!
//! - [`record`]: the byte format of parts, entries and records.
//! - [`segment`]: writing one group's parts to one store: segments,
//!   rollover, and reconciliation after unknown outcomes.
//! - `group`: restricted decentralized logging: a buffer per group of
//!   workers, the one-step CSN reservation, and the group's parts in
//!   flight.
//! - `stream`: the lanes that cut the groups' buffers and write them, and
//!   when they flush; `signal`: what the groups signal and the lanes wait
//!   on.
//! - `quorum`: every append to every store, durable at a quorum of them.
//! - `hedge`: sending a slow append (or a replica's read) a second time;
//!   `latency_window`: the recent latencies hedging and pacing read.
//! - `autonomous`: autonomous commit (workers flush and acknowledge).
//!
//! [`Log`] ties them together: it opens and probes the stores, starts the
//! streams' lanes and the committer (`commit::committer`), and maps worker
//! threads to groups.

pub(crate) mod autonomous;
pub(crate) mod cost;
pub(crate) mod decode;
pub mod group;
pub mod hedge;
pub(crate) mod latency_window;
pub(crate) mod pacing;
pub(crate) mod quorum;
pub mod record;
pub mod segment;
pub(crate) mod signal;
pub(crate) mod stream;

use milliscale_seam::JoinHandle;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use objstore::ObjectStore;
use objstore::probe::{AppendSupport, probe_appends};
use objstore::sim::accounting::AccountingReport;

use crate::commit::committer::Committer;
use crate::commit::{CommitMarks, CommitMetrics};
use crate::error::{Error, Result};
use crate::manifest::LogRef;
use crate::options::{CommitProtocol, FlushPolicy, Options, StoreSpec};
use autonomous::{Autonomous, WaiterFlush};
use cost::Pricing;
pub use cost::{HOURS_PER_MONTH, LogCost};
use group::{GroupMetrics, LogGroup};
use hedge::HedgePolicy;
use pacing::{FlushSettings, RequestBudget, Target};
use quorum::{QuorumWriter, StoreConfig, StoreHealth};
use segment::{RetryPolicy, WriteMode};
use stream::LogStream;

pub use stream::StreamMetrics;

pub use quorum::LAG_PARTS_MAX;

/// One store the log writes to, as monitoring sees it.
#[derive(Debug, Clone)]
pub struct StoreStatus {
    /// The URL or a description.
    pub name: String,
    /// Whether the log appends to it or writes one object per flush.
    pub mode: WriteMode,
    /// Why it is in put mode, if the probe said so.
    pub put_reason: Option<String>,
    /// Parts written to it (all groups).
    pub parts: u64,
    /// Appends sent a second time because the first was slow (all groups).
    pub hedged: u64,
    /// Of those, the ones whose second request answered first.
    pub hedges_won: u64,
    /// Groups that dropped it from replication (0 = healthy).
    pub dropped: u64,
    /// The error that made a group drop it.
    pub last_error: Option<String>,
    /// Its request and cost accounting, if it keeps one (`sim://`).
    pub accounting: Option<AccountingReport>,
}

/// Everything the log measured; see [`crate::Database::log_metrics`].
#[derive(Debug, Clone)]
pub struct LogMetrics {
    /// Per log group.
    pub groups: Vec<GroupMetrics>,
    /// Per log stream.
    pub streams: Vec<StreamMetrics>,
    /// Commit latency and dependency waits.
    pub commit: CommitMetrics,
    /// Per store.
    pub stores: Vec<StoreStatus>,
    /// The log's writes and what they cost.
    pub cost: LogCost,
}

/// An opened and probed store.
pub(crate) struct OpenStore {
    pub(crate) store: Arc<dyn ObjectStore>,
    pub(crate) health: Arc<StoreHealth>,
    put_reason: Option<String>,
}

impl OpenStore {
    pub(crate) fn name(&self) -> &str {
        &self.health.name
    }

    pub(crate) fn mode(&self) -> WriteMode {
        self.health.mode
    }
}

/// Open and probe every store of `options`.
pub(crate) fn open_stores(options: &Options) -> Result<Vec<OpenStore>> {
    options.stores.iter().map(|spec| open_store(spec, options)).collect()
}

/// Appends a second the database may send: the lower of
/// `max_appends_per_s` and `max_usd_per_hour` at `append_usd` a flush.
fn request_budget(options: &Options, append_usd: f64) -> Result<Option<u32>> {
    let from_usd = match options.max_usd_per_hour {
        None => None,
        Some(_) if append_usd <= 0.0 => {
            return Err(Error::InvalidArgument(
                "max_usd_per_hour needs a price: a store with a price table (sim://, s3://) or \
                 append_price"
                    .into(),
            ));
        }
        Some(usd) => Some((usd / 3600.0 / append_usd).floor().max(1.0) as u32),
    };
    Ok(match (options.max_appends_per_s, from_usd) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

/// The running log of one database.
pub(crate) struct Log {
    groups: Vec<Arc<LogGroup>>,
    streams: Vec<Arc<LogStream>>,
    /// Groups per stream: group `g` is in stream `g / groups_per_stream`.
    groups_per_stream: usize,
    group_size: usize,
    stores: Vec<OpenStore>,
    commit: Arc<CommitMarks>,
    committer: Arc<parking_lot::Mutex<Committer>>,
    autonomous: Option<Autonomous>,
    threads: parking_lot::Mutex<Vec<JoinHandle<()>>>,
    stop_committer: Arc<AtomicBool>,
    /// Worker numbers handed out, for the thread -> group map.
    workers: AtomicUsize,
    pricing: Pricing,
    db_id: u64,
}

thread_local! {
    /// (database id, worker number) of this thread.
    static WORKER: std::cell::Cell<(u64, usize)> = const { std::cell::Cell::new((0, 0)) };
}

impl Log {
    /// Start the flushers and the committer for the log `log` (its groups
    /// start at `log.group_start`) on opened `stores`.
    pub(crate) fn start(
        options: &Options,
        commit: Arc<CommitMarks>,
        db_id: u64,
        stores: Vec<OpenStore>,
        log: &LogRef,
    ) -> Result<Log> {
        let autonomous = (options.commit_protocol == CommitProtocol::Autonomous)
            .then(|| Autonomous::new(options, stores.iter().any(|s| s.store.is_object_store())));
        let pricing = Pricing::new(options, &stores);
        let append_usd = pricing.flush_usd();
        let flush = FlushSettings {
            // Autonomous: the lanes' threads are only the backstop.
            policy: if autonomous.is_some() { FlushPolicy::Timeout } else { options.flush_policy },
            timeout: options.flush_timeout,
            min_interval: options.flush_min_interval,
            pace: options.flush_pace,
            budget: request_budget(options, append_usd)?.map(|n| Arc::new(RequestBudget::new(n))),
            reap: autonomous.is_some(),
            target: Target::new(append_usd, options.millisecond_price, options.flush_max_wait),
        };
        let mut streams: Vec<LogStream> = (0..log.streams())
            .map(|s| {
                LogStream::new(
                    s,
                    flush.clone(),
                    (log.stream_starts(s), log.parts_max),
                    Arc::clone(&commit),
                )
            })
            .collect();
        let mut groups: Vec<Arc<LogGroup>> = Vec::new();
        for stream in &mut streams {
            for g in log.stream_groups(stream.id) {
                let group = Arc::new(LogGroup::new(
                    g,
                    options.log_buffer_bytes,
                    log.lanes,
                    stream.signal(),
                    Arc::clone(&commit),
                ));
                stream.add_group(Arc::clone(&group));
                groups.push(group);
            }
        }
        let retry = RetryPolicy {
            deadline: options.store_deadline,
            hedge: HedgePolicy::for_setting(options.hedging).map(|h| HedgePolicy {
                multiple: options.hedge_multiple,
                max_share: options.hedge_budget,
                ..h
            }),
            ..RetryPolicy::default()
        };
        let mut needed = options.quorum.needed(stores.len());
        if options.bugs.on(crate::DeliberateBug::AckBeforeQuorum) {
            needed = 1;
        }
        for stream in &mut streams {
            let writers = (0..log.lanes)
                .map(|lane| {
                    let configs = stores
                        .iter()
                        .map(|s| StoreConfig {
                            store: Arc::clone(&s.store),
                            health: Arc::clone(&s.health),
                            parts_max: options.segment_parts_max,
                            retry,
                            slice: options.log_thread_slice,
                        })
                        .collect();
                    QuorumWriter::start(log.chain(stream.id, lane), configs, needed)
                })
                .collect();
            stream.set_writers(writers);
        }
        let streams: Vec<Arc<LogStream>> = streams.into_iter().map(Arc::new).collect();
        let groups_per_stream = log.groups_per_stream.max(1) as usize;
        let slice = options.log_thread_slice;
        let stop_committer = Arc::new(AtomicBool::new(false));
        let committer = Arc::new(parking_lot::Mutex::new(Committer::new(
            Arc::clone(&commit),
            stop_committer.clone(),
        )));
        if autonomous.is_some() {
            commit.set_force_flush(Box::new(WaiterFlush {
                streams: streams.iter().map(Arc::downgrade).collect(),
                committer: Arc::downgrade(&committer),
                groups_per_stream,
            }));
        }
        let threads = start_threads(&streams, &groups, &committer, log.lanes, slice)?;
        Ok(Log {
            groups,
            streams,
            groups_per_stream,
            group_size: options.log_group_size,
            stores,
            commit,
            committer,
            autonomous,
            threads: parking_lot::Mutex::new(threads),
            stop_committer,
            workers: AtomicUsize::new(0),
            db_id,
            pricing,
        })
    }

    /// The group of the calling thread. Threads get worker numbers in the
    /// order they first commit; workers `k*size .. (k+1)*size` share group
    /// `k`, wrapping around when there are more threads than planned.
    pub(crate) fn my_group(&self) -> &LogGroup {
        let (db, mut worker) = WORKER.get();
        if db != self.db_id {
            worker = self.workers.fetch_add(1, Ordering::Relaxed);
            WORKER.set((self.db_id, worker));
        }
        &self.groups[(worker / self.group_size) % self.groups.len()]
    }

    /// A transaction begins on this thread (autonomous commit keeps the
    /// worker's idle clock).
    pub(crate) fn note_begin(&self) {
        if let Some(a) = &self.autonomous {
            a.note_begin();
        }
    }

    /// After a worker pre-committed into `group`, whose buffer now holds
    /// `buffered` bytes: under autonomous commit the worker may flush and
    /// acknowledge now ([`Autonomous::after_commit`]). A no-op under
    /// pipelined commit.
    pub(crate) fn after_commit(&self, group: &LogGroup, buffered: usize) {
        if let Some(a) = &self.autonomous {
            let stream = autonomous::stream_of(&self.streams, group, self.groups_per_stream);
            a.after_commit(stream, &self.committer, buffered);
        }
    }

    /// Flush everything, let the committer release it, stop the threads.
    pub(crate) fn shut_down(&self) {
        for g in &self.groups {
            g.close();
        }
        for s in &self.streams {
            s.close();
        }
        let mut threads = std::mem::take(&mut *self.threads.lock());
        let committer = threads.pop();
        for t in threads {
            let _ = t.join();
        }
        for s in &self.streams {
            s.close_writers(&self.committer);
        }
        self.stop_committer.store(true, Ordering::Release);
        self.commit.wake_committer();
        if let Some(t) = committer {
            let _ = t.join();
        }
    }

    pub(crate) fn metrics(&self) -> LogMetrics {
        let groups: Vec<GroupMetrics> = self.groups.iter().map(|g| g.metrics()).collect();
        let streams: Vec<StreamMetrics> = self.streams.iter().map(|s| s.metrics()).collect();
        let commit = self.commit.metrics.lock().clone();
        let cost = self.pricing.cost(
            streams.iter().map(|s| s.appends).sum(),
            groups.iter().map(|g| g.bytes).sum(),
            commit.released,
        );
        LogMetrics {
            groups,
            streams,
            commit,
            stores: self.stores.iter().map(status).collect(),
            cost,
        }
    }

    /// The log groups.
    pub(crate) fn groups(&self) -> &[Arc<LogGroup>] {
        &self.groups
    }

    /// The log streams.
    pub(crate) fn streams(&self) -> &[Arc<LogStream>] {
        &self.streams
    }

    /// Part bytes written since the log started (all groups).
    pub(crate) fn bytes_written(&self) -> u64 {
        self.groups.iter().map(|g| g.bytes_written()).sum()
    }

    pub(crate) fn reset_metrics(&self) {
        self.pricing.reset();
        for g in &self.groups {
            g.reset_metrics();
        }
        for s in &self.streams {
            s.reset_metrics();
        }
        *self.commit.metrics.lock() = CommitMetrics::new();
        for s in &self.stores {
            s.store.reset_latency();
        }
    }
}

/// Start the lanes' flusher threads (`lanes` per stream) and the committer
/// thread (last), each with the log threads' scheduler slice.
fn start_threads(
    streams: &[Arc<LogStream>],
    groups: &[Arc<LogGroup>],
    committer: &Arc<parking_lot::Mutex<Committer>>,
    lanes: u32,
    slice: Option<Duration>,
) -> Result<Vec<JoinHandle<()>>> {
    let mut threads = Vec::new();
    for stream in streams {
        for lane in 0..lanes {
            let stream = Arc::clone(stream);
            let all = groups.to_vec();
            let committer = Arc::clone(committer);
            threads.push(
                milliscale_seam::spawn(format!("ms-flusher-s{}-l{lane}", stream.id), move || {
                    crate::sched::request_slice(slice);
                    stream.run_lane(lane as usize, &committer);
                    // A poisoned stream wakes every group's workers.
                    for other in &all {
                        other.wake_all();
                    }
                })
                .map_err(|e| Error::Store(format!("cannot start a flusher thread: {e}")))?,
            );
        }
    }
    let run = Arc::clone(committer);
    threads.push(
        milliscale_seam::spawn("ms-committer".into(), move || {
            crate::sched::request_slice(slice);
            Committer::run(run)
        })
        .map_err(|e| Error::Store(format!("cannot start the committer thread: {e}")))?,
    );
    Ok(threads)
}

fn status(s: &OpenStore) -> StoreStatus {
    StoreStatus {
        name: s.health.name.clone(),
        mode: s.health.mode,
        put_reason: s.put_reason.clone(),
        parts: s.health.parts.load(Ordering::Relaxed),
        hedged: s.health.hedged.load(Ordering::Relaxed),
        hedges_won: s.health.hedges_won.load(Ordering::Relaxed),
        dropped: s.health.dropped.load(Ordering::Relaxed),
        last_error: s.health.last_error.lock().clone(),
        accounting: s.store.accounting(),
    }
}

fn open_store(spec: &StoreSpec, options: &Options) -> Result<OpenStore> {
    let name = spec.describe();
    let store = spec.open()?;
    let (mode, put_reason) = if options.force_put_per_flush {
        (WriteMode::PutPerFlush, Some("put-per-flush mode was requested".to_owned()))
    } else {
        let key = crate::keys::probe_key();
        match retry_at_open(options, || probe_appends(store.as_ref(), &key)) {
            Ok(AppendSupport::Appends) => (WriteMode::Append, None),
            Ok(AppendSupport::PutPerFlush { reason }) => {
                // Said once, at open, per store.
                tracing::warn!(
                    "store {name} cannot append ({reason}); the log writes one object per flush"
                );
                (WriteMode::PutPerFlush, Some(reason))
            }
            Err(e) => return Err(Error::Store(format!("{name}: the append probe failed: {e}"))),
        }
    };
    let health = Arc::new(StoreHealth::new(name, mode));
    Ok(OpenStore { store, health, put_reason })
}

/// Run a request at open, retrying throttling and transient errors with
/// backoff until the store deadline.
fn retry_at_open<T>(
    options: &Options,
    f: impl FnMut() -> objstore::Result<T>,
) -> objstore::Result<T> {
    crate::retry::retry(options.store_deadline, f)
}
