//! The write-ahead log on object storage.
//!
//! - [`record`]: the byte format of parts, entries and records.
//! - [`segment`]: writing one group's parts to one store: segments,
//!   rollover, and reconciliation after unknown outcomes.
//! - `group`: restricted decentralized logging: a buffer per group of
//!   workers, the one-step CSN reservation, and the group's parts in
//!   flight.
//! - `stream`: the lanes that cut the groups' buffers and write them, and
//!   when they flush.
//! - `replica`: every append to every store, durable at a quorum.
//!
//! [`Log`] ties them together: it opens and probes the stores, starts the
//! streams' lanes and the committer (`commit::dependency`), and maps worker
//! threads to groups.

pub mod group;
pub mod record;
pub(crate) mod replica;
pub mod segment;
pub(crate) mod stream;

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use objstore::ObjectStore;
use objstore::probe::{AppendSupport, probe_appends};
use objstore::sim::accounting::AccountingReport;

use crate::commit::dependency::{CommitMetrics, CommitState, Committer};
use crate::error::{Error, Result};
use crate::manifest::LogRef;
use crate::options::{CommitProtocol, FlushPolicy, Options, StoreSpec};
use group::{GroupMetrics, LogGroup};
use replica::{ReplicaConfig, ReplicaSet, StoreHealth};
use segment::{HedgePolicy, RetryPolicy, WriteMode};
use stream::{Finish, FlushSettings, LogStream, RequestBudget};

pub use stream::StreamMetrics;

pub use replica::LAG_PARTS_MAX;

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

/// Autonomous commit's settings (see [`crate::CommitProtocol`]).
struct Autonomous {
    flush_unit: usize,
    max_idle: Duration,
    /// The chance that a worker runs the committer's round after a
    /// transaction it did not flush: 1/log2(workers), seed 001's rule.
    ack_chance: f64,
}

/// The running log of one database.
pub(crate) struct Log {
    groups: Vec<Arc<LogGroup>>,
    streams: Vec<Arc<LogStream>>,
    /// Groups per stream: group `g` is in stream `g / groups_per_stream`.
    groups_per_stream: usize,
    group_size: usize,
    stores: Vec<OpenStore>,
    commit: Arc<CommitState>,
    committer: Arc<parking_lot::Mutex<Committer>>,
    autonomous: Option<Autonomous>,
    threads: parking_lot::Mutex<Vec<JoinHandle<()>>>,
    stop_committer: Arc<AtomicBool>,
    /// Worker numbers handed out, for the thread -> group map.
    workers: AtomicUsize,
    db_id: u64,
}

thread_local! {
    /// (database id, worker number) of this thread.
    static WORKER: Cell<(u64, usize)> = const { Cell::new((0, 0)) };
    /// Autonomous commit: this worker's idle clock.
    static IDLE: Cell<IdleClock> = const { Cell::new(IdleClock { last_commit: None, avg_idle_ns: 0 }) };
}

/// How long a worker stays idle between transactions, to predict whether
/// it will be idle after this one (force commit, seed 001).
#[derive(Clone, Copy)]
struct IdleClock {
    /// When its last pre-commit returned (`None`: it has begun since).
    last_commit: Option<Instant>,
    /// Moving average (1/8 weight) of the gaps from a pre-commit to the
    /// next begin.
    avg_idle_ns: u64,
}

impl Log {
    /// Start the flushers and the committer for the log `log` (its groups
    /// start at `log.group_start`) on opened `stores`.
    pub(crate) fn start(
        options: &Options,
        commit: Arc<CommitState>,
        db_id: u64,
        stores: Vec<OpenStore>,
        log: &LogRef,
    ) -> Result<Log> {
        let autonomous = (options.commit_protocol == CommitProtocol::Autonomous).then(|| {
            let workers = options.workers.max(2) as f64;
            Autonomous {
                flush_unit: options
                    .flush_unit
                    .unwrap_or(if stores.iter().any(|s| s.store.is_object_store()) {
                        crate::options::OBJECT_FLUSH_UNIT_DEFAULT
                    } else {
                        crate::options::FLUSH_UNIT_DEFAULT
                    })
                    .min(options.log_buffer_bytes),
                max_idle: options.max_idle,
                ack_chance: 1.0 / workers.log2(),
            }
        });
        let flush = FlushSettings {
            // Autonomous: the lanes' threads are only the backstop.
            policy: if autonomous.is_some() { FlushPolicy::Timeout } else { options.flush_policy },
            timeout: options.flush_timeout,
            min_interval: options.flush_min_interval,
            pace: options.flush_pace,
            budget: options.max_appends_per_s.map(|n| Arc::new(RequestBudget::new(n))),
            reap: autonomous.is_some(),
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
        let needed = options.quorum.needed(stores.len());
        for stream in &mut streams {
            let writers = (0..log.lanes)
                .map(|lane| {
                    let configs = stores
                        .iter()
                        .map(|s| ReplicaConfig {
                            store: Arc::clone(&s.store),
                            health: Arc::clone(&s.health),
                            parts_max: options.segment_parts_max,
                            retry,
                            slice: options.log_thread_slice,
                        })
                        .collect();
                    ReplicaSet::start(log.chain(stream.id, lane), configs, needed)
                })
                .collect();
            stream.set_writers(writers);
        }
        let streams: Vec<Arc<LogStream>> = streams.into_iter().map(Arc::new).collect();
        let groups_per_stream = log.groups_per_stream.max(1) as usize;
        let mut threads = Vec::new();
        let slice = options.log_thread_slice;
        let stop_committer = Arc::new(AtomicBool::new(false));
        let committer = Arc::new(parking_lot::Mutex::new(Committer::new(
            Arc::clone(&commit),
            groups.clone(),
            stop_committer.clone(),
        )));
        if autonomous.is_some() {
            // Force commit on wait: a worker that waits for an ack is idle,
            // so it flushes its own stream first. Weak: the streams and the
            // committer hold the commit state.
            let weak: Vec<std::sync::Weak<LogStream>> =
                streams.iter().map(Arc::downgrade).collect();
            let c = Arc::downgrade(&committer);
            commit.set_force_flush(Box::new(move |group, within| {
                if let (Some(stream), Some(c)) =
                    (weak.get(group / groups_per_stream).and_then(|w| w.upgrade()), c.upgrade())
                {
                    stream.flush_now(&c, within.map_or(Finish::Wait, Finish::Idle));
                }
            }));
        }
        for stream in &streams {
            for lane in 0..log.lanes {
                let stream = Arc::clone(stream);
                let all = groups.clone();
                let committer = Arc::clone(&committer);
                let slice = options.log_thread_slice;
                threads.push(
                    std::thread::Builder::new()
                        .name(format!("ms-flusher-s{}-l{lane}", stream.id))
                        .spawn(move || {
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
        let run = Arc::clone(&committer);
        threads.push(
            std::thread::Builder::new()
                .name("ms-committer".into())
                .spawn(move || {
                    crate::sched::request_slice(slice);
                    Committer::run(run)
                })
                .map_err(|e| Error::Store(format!("cannot start the committer thread: {e}")))?,
        );
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

    /// A transaction begins on this thread: under autonomous commit, the
    /// time since this worker's last pre-commit was idle time.
    pub(crate) fn note_begin(&self) {
        if self.autonomous.is_none() {
            return;
        }
        let mut c = IDLE.get();
        if let Some(at) = c.last_commit.take() {
            let gap = at.elapsed().as_nanos().min(u128::from(u64::MAX / 8)) as u64;
            c.avg_idle_ns = c.avg_idle_ns - c.avg_idle_ns / 8 + gap / 8;
            IDLE.set(c);
        }
    }

    /// Autonomous commit, after a worker pre-committed into `group`, whose
    /// buffer now holds `buffered` bytes: flush the group's stream if the
    /// buffer holds a flush unit or the worker expects to be idle (force
    /// commit); else, with probability 1/log2(workers), run the
    /// committer's round (autonomous acknowledgment). A no-op under
    /// pipelined commit.
    pub(crate) fn after_commit(&self, group: &LogGroup, buffered: usize) {
        let Some(a) = &self.autonomous else { return };
        let mut clock = IDLE.get();
        let idle = !a.max_idle.is_zero()
            && Duration::from_nanos(clock.avg_idle_ns) >= a.max_idle.mul_f64(rand::random::<f64>());
        let stream = &self.streams[group.id as usize / self.groups_per_stream];
        // Finish the stream's appends that have landed since (they
        // acknowledge their transactions).
        stream.finish_landed(&self.committer);
        if buffered >= a.flush_unit || idle {
            let then = if idle {
                Finish::Idle(Duration::from_nanos(clock.avg_idle_ns))
            } else {
                Finish::Later
            };
            stream.flush_now(&self.committer, then);
        } else if rand::random::<f64>() < a.ack_chance
            && let Some(mut c) = self.committer.try_lock()
        {
            c.round();
        }
        clock.last_commit = Some(Instant::now());
        IDLE.set(clock);
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
        LogMetrics {
            groups: self.groups.iter().map(|g| g.metrics()).collect(),
            streams: self.streams.iter().map(|s| s.metrics()).collect(),
            commit: self.commit.metrics.lock().clone(),
            stores: self.stores.iter().map(status).collect(),
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
        let key = format!("probe/append-{:016x}", rand::random::<u64>());
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
    crate::manifest::retry(options.store_deadline, f)
}
