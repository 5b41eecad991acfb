//! Read replicas: processes that follow a database's log in the shared
//! object store without asking its writer (Milliscale §2.3). Not to
//! be confused with the store replicas of `log::replica`, the several
//! buckets every part is written to.
//!
//! A [`Replica`] loads the checkpoint, then follows the manifest and every
//! chain of the log, applying committed transactions in CSN order under
//! the recovery rule, and serves read-only transactions at the CSN it has
//! applied. It never shows a state that a crash of the writer could take
//! back, and its snapshots only move forward.
//!
//! - [`tail`]: following one chain of the live log, reading only new bytes.
//! - `follow`: the follower thread (the replay rule, continuously; the
//!   manifest; checkpoints, truncation and new writers) and its tail
//!   threads.
//! - `apply`: applying entries as new versions while readers read.
//!
//! **Session consistency.** A commit's CSN is a token:
//! [`Replica::begin_at`] waits until the replica has applied it, so a
//! session that passes the largest token it has seen (its commits' CSNs,
//! and [`Replica::token_of`] of its reads) reads its writes and never goes
//! back in time, from any replica.

mod apply;
mod follow;
mod manifest_watch;
mod poll;
mod promote;
mod shared;
pub mod tail;
pub(crate) mod tap;

use milliscale_seam::Elapsed as _;
use std::sync::Arc;
use std::time::Duration;

use crate::db::{Database, read_manifest_unprobed};
use crate::error::{Error, Result};
use crate::mvcc::Csn;
use crate::options::{Options, TxnOptions};
use crate::recovery::replay::Folded;
use crate::table::Table;
use crate::txn::Transaction;
use follow::Follower;
pub(crate) use shared::Shared;

pub use follow::IDLE_MANIFEST_POLLS;
pub use shared::ACTIVE_WINDOW;

/// How a replica polls.
#[derive(Debug, Clone)]
pub struct ReplicaOptions {
    /// The interval between polls of a chain while the database is active
    /// (default 5 ms). Each poll is a GET.
    pub poll_min: Duration,
    /// The longest interval between polls of a chain when the database is
    /// idle (default 1 s): empty polls double the interval up to this.
    pub poll_max: Duration,
    /// How often the manifest is checked while the database is active
    /// (default 1 s): one HEAD. While it is idle, at most every
    /// [`IDLE_MANIFEST_POLLS`] `poll_max` (a tail that meets a fence, a
    /// deleted segment or an unknown table has it checked at once).
    pub manifest_every: Duration,
    /// What a millisecond off the replica's lag is worth, for 1,000
    /// transactions a second, in dollars an hour: the writer's
    /// [`crate::Options::millisecond_price`], applied to reads. While the
    /// database is active a chain is polled every `sqrt(2 g / (λ r))`: a
    /// poll costs `g` (the store's GET price), and the `r` transactions a
    /// second the chain carries (its own rate or the average over the
    /// log's chains, whichever is higher) wait half an interval on
    /// average to be read. So polls grow with the square root of what the
    /// writer commits; a store without a price is polled every
    /// `poll_min`. The interval stays within `poll_min..=poll_max`. Finite
    /// and at least 0 (0: every `poll_max`). Default
    /// [`crate::options::MILLISECOND_PRICE_DEFAULT`].
    pub millisecond_price: f64,
    /// Threads that apply the log (default: the machine's cores, at most
    /// 4). Records are split among them by key; 1 applies on the follower
    /// thread alone.
    pub apply_threads: usize,
    /// A run of fewer records than this (default 256) is applied on the
    /// follower thread alone: starting threads would cost more than they
    /// save.
    pub apply_parallel_min: usize,
    /// Send a tail's read again when it is slower than twice the 90th
    /// percentile of its recent reads, where the store can race two requests itself
    /// (`s3://`, `sim://`); at most 10% more reads (default on). One slow
    /// read holds back every CSN behind it.
    pub hedge_reads: bool,
}

impl Default for ReplicaOptions {
    fn default() -> ReplicaOptions {
        ReplicaOptions {
            poll_min: Duration::from_millis(5),
            poll_max: Duration::from_secs(1),
            manifest_every: Duration::from_secs(1),
            millisecond_price: crate::options::MILLISECOND_PRICE_DEFAULT,
            apply_threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
            apply_parallel_min: 256,
            hedge_reads: true,
        }
    }
}

/// What a replica has done and what it costs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplicaMetrics {
    /// Every commit below this CSN is visible.
    pub applied_csn: Csn,
    /// One past the largest CSN read from the log.
    pub seen_csn: Csn,
    /// The writer's epoch followed.
    pub epoch: u64,
    /// The manifest version last read.
    pub manifest_version: u64,
    /// Time since the replica opened.
    pub elapsed: Duration,
    /// Transactions applied (commits and aborts).
    pub entries_applied: u64,
    /// Records applied.
    pub records_applied: u64,
    /// Lag, as an upper bound: from a part's landing in the store (after
    /// the poll before the one that found it) to its transactions being
    /// visible here; p50, p99 and max.
    pub lag_p50: Duration,
    /// See `lag_p50`.
    pub lag_p99: Duration,
    /// See `lag_p50`.
    pub lag_max: Duration,
    /// Polls of chains.
    pub polls: u64,
    /// Polls that failed (retried).
    pub poll_errors: u64,
    /// Reads sent a second time because the first was slow
    /// (`ReplicaOptions::hedge_reads`); both count in `get_requests`.
    pub reads_hedged: u64,
    /// Of those, the ones the second request answered first.
    pub reads_hedges_won: u64,
    /// GET-class requests (GET, ranged GET, HEAD), all stores.
    pub get_requests: u64,
    /// PUT-class requests (LIST), all stores.
    pub put_requests: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Manifest versions read.
    pub manifest_reads: u64,
    /// Times the replica moved to a checkpoint (behind truncation, or a
    /// new writer), and the rows read for that.
    pub catch_ups: u64,
    /// See `catch_ups`.
    pub catch_up_rows: u64,
    /// New writers' logs followed.
    pub epochs_followed: u64,
    /// Checkpoints built and offered to the writer.
    pub checkpoints_offered: u64,
    /// Versions freed by garbage collection: replaced ones below the
    /// readers' horizon, and deleted keys' (`Stats::versions_retired`).
    pub versions_retired: u64,
    /// What the requests cost at the stores' price table (`None` if a store
    /// has none).
    pub cost_usd: Option<f64>,
    /// The last error met (polls retry), if any.
    pub last_error: Option<String>,
    /// The follower stopped on this error; reads go on at `applied_csn`.
    pub stopped: Option<String>,
}

impl ReplicaMetrics {
    /// Requests per hour, at the rate so far.
    pub fn requests_per_hour(&self) -> f64 {
        let h = self.elapsed.as_secs_f64() / 3600.0;
        if h > 0.0 { (self.get_requests + self.put_requests) as f64 / h } else { 0.0 }
    }

    /// Dollars per hour, at the rate so far.
    pub fn usd_per_hour(&self) -> Option<f64> {
        let h = self.elapsed.as_secs_f64() / 3600.0;
        self.cost_usd.map(|c| if h > 0.0 { c / h } else { 0.0 })
    }

    /// Records applied per second, on average so far.
    pub fn records_per_s(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 { self.records_applied as f64 / s } else { 0.0 }
    }
}

/// How often a reader waiting for a token the replica has not seen asks
/// the tails again to poll now (a tail busy mid-poll when first asked
/// polls again at once anyway; this bounds the wait should a poll miss).
pub(crate) const DEMAND_RETRY: Duration = Duration::from_millis(50);

/// A read replica; see the module docs. Dropping it stops it.
pub struct Replica {
    db: Database,
    shared: Arc<Shared>,
    follower: parking_lot::Mutex<Option<milliscale_seam::JoinHandle<Option<Follower>>>>,
    stores: Vec<Arc<dyn objstore::ObjectStore>>,
    /// The stores by name, and the writer's quorum: where offered
    /// checkpoints go.
    named: follow::NamedStores,
    needed: usize,
    /// The CSN of the last checkpoint this replica offered (0: none).
    offered: std::sync::atomic::AtomicU64,
}

impl Replica {
    /// Open a replica of the database on `options`' stores, with default
    /// polling.
    pub fn open(options: Options) -> Result<Replica> {
        Replica::open_with(options, ReplicaOptions::default())
    }

    /// Open a replica: read the manifest (a store without a database is
    /// `NoDatabase`; nothing is written), load the checkpoint, and start
    /// following the log. Returns once the checkpoint is loaded; the log is
    /// applied in the background ([`Replica::wait_for`]).
    pub fn open_with(options: Options, replica: ReplicaOptions) -> Result<Replica> {
        Replica::open_tapped(options, replica, None).map(|(r, _)| r)
    }

    /// [`Replica::open_with`], its follower handing what it applies to the
    /// feeds on `tap` (change feeds'); and the CSN it starts at (its
    /// checkpoint holds every commit below it).
    pub(crate) fn open_tapped(
        options: Options,
        replica: ReplicaOptions,
        tap: Option<Arc<tap::Taps>>,
    ) -> Result<(Replica, Csn)> {
        options.validate()?;
        if !options.is_logged() {
            return Err(Error::InvalidArgument("a replica needs the database's stores".into()));
        }
        if !(replica.millisecond_price.is_finite() && replica.millisecond_price >= 0.0) {
            return Err(Error::InvalidArgument(format!(
                "millisecond_price must be a finite number of dollars, at least 0, got {}",
                replica.millisecond_price
            )));
        }
        if replica.poll_min > replica.poll_max {
            return Err(Error::InvalidArgument(format!(
                "poll_min ({:?}) is above poll_max ({:?})",
                replica.poll_min, replica.poll_max
            )));
        }
        // Open the stores once: a promoted replica writes through the same
        // handles.
        let options = options.open_stores()?;
        let (named, needed, m) = read_manifest_unprobed(&options)?;
        if m.parent.is_some() {
            return Err(Error::InvalidArgument(
                "a clone that has not been opened yet has nothing of its own to follow: open it \
                 once as its writer"
                    .into(),
            ));
        }
        let base = m.replay_from();
        let deadline = options.store_deadline;
        let threads = options.recovery_threads;
        let db = Database::replica_shell(options, &m, base)?;
        if let Some(c) = &m.checkpoint {
            let tables = db.inner.tables_by_id();
            crate::checkpoint::load(&named, c, &tables, threads, deadline, &Folded::empty())?;
        }
        let shared = Arc::new(Shared::new());
        {
            let mut p = shared.progress.lock();
            p.applied = base;
            p.seen = base;
            p.epoch = m.log.epoch;
            p.manifest_version = m.version;
        }
        {
            let mut c = shared.counters.lock();
            c.get_class += m.checkpoint.as_ref().map_or(0, |c| c.chunks.len() as u64);
            c.get_class += named.len() as u64;
            c.put_class += named.len() as u64;
            c.bytes_down += m.checkpoint.as_ref().map_or(0, |c| c.bytes);
            c.manifest_reads += 1;
        }
        let stores = named.iter().map(|(_, s)| Arc::clone(s)).collect();
        let mut follower = Follower::new(
            Arc::clone(&db.inner),
            Arc::clone(&shared),
            named.clone(),
            needed,
            deadline,
            replica,
            m,
        );
        if let Some(t) = &tap {
            t.begin(base);
        }
        follower.tap = tap;
        let handle = milliscale_seam::spawn("replica-follow".into(), move || follower.run())
            .map_err(|e| Error::InvalidArgument(format!("starting the follower thread: {e}")))?;
        let replica = Replica {
            db,
            shared,
            follower: parking_lot::Mutex::new(Some(handle)),
            stores,
            named,
            needed,
            offered: std::sync::atomic::AtomicU64::new(0),
        };
        Ok((replica, base))
    }

    /// The options it was opened with (its stores opened).
    pub(crate) fn options(&self) -> &Options {
        &self.db.inner.options
    }

    /// Its engine's id, unique in the process (the change feeds of this
    /// replica share a follower by it).
    pub(crate) fn engine_id(&self) -> u64 {
        self.db.inner.id
    }

    /// Every commit below this CSN is visible to new transactions.
    pub fn applied_csn(&self) -> Csn {
        self.shared.progress.lock().applied
    }

    /// A read-only transaction at the applied CSN.
    pub fn begin(&self) -> Result<Transaction<'_>> {
        self.db.begin_with(TxnOptions::read_only())
    }

    /// A read-only transaction that sees the commit whose CSN is `token`
    /// (and everything before it): waits until the replica has applied it,
    /// or fails with `Stale` after `deadline`. A token of 0 waits for
    /// nothing.
    pub fn begin_at(&self, token: Csn, deadline: Duration) -> Result<Transaction<'_>> {
        self.wait_for(token, deadline)?;
        let tx = self.begin()?;
        debug_assert!(tx.snapshot() > token);
        Ok(tx)
    }

    /// Wait until the commit `token` is applied (visible), or fail with
    /// `Stale` after `deadline`; if the follower has stopped on an error,
    /// fail with that error.
    pub fn wait_for(&self, token: Csn, deadline: Duration) -> Result<()> {
        let started = milliscale_seam::now();
        let until = started + deadline;
        let mut p = self.shared.progress.lock();
        loop {
            if p.applied > token {
                return Ok(());
            }
            if let Some(e) = &p.error {
                return Err(e.clone());
            }
            if p.seen <= token {
                // Not read from the log yet: poll now rather than at the
                // next interval (an idle database's is `poll_max`), and
                // again every `DEMAND_RETRY` while it stays unseen.
                self.shared.poll_now();
            }
            let step = until.min(milliscale_seam::now() + DEMAND_RETRY);
            if p.stopped
                || (milliscale_seam::cv_wait_until(&self.shared.progressed, &mut p, step)
                    && milliscale_seam::now() >= until)
            {
                if p.applied > token {
                    return Ok(());
                }
                return Err(Error::Stale {
                    token,
                    applied: p.applied,
                    seen: p.seen,
                    waited: started.elapsed_now(),
                });
            }
        }
    }

    /// The token a session keeps after reading in `tx`: a later
    /// `begin_at` with it sees at least what `tx` saw (monotonic reads).
    pub fn token_of(tx: &Transaction<'_>) -> Csn {
        tx.snapshot().saturating_sub(1)
    }

    /// Open a table by name (tables appear as the writer creates them).
    pub fn open_table(&self, name: &str) -> Result<Table> {
        self.db.open_table(name)
    }

    /// Names of all tables, in creation order.
    pub fn table_names(&self) -> Vec<String> {
        self.db.table_names()
    }

    /// The replica's database, read-only: what `begin` reads.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// Where the follower publishes its progress (the async API's waits).
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The error the follower stopped on, if it did.
    pub fn error(&self) -> Option<Error> {
        self.shared.progress.lock().error.clone()
    }

    /// Publish [`Replica::metrics`] through the `metrics` facade (the lag
    /// histogram is recorded as transactions are applied).
    pub fn publish_metrics(&self) {
        use metrics::{counter, gauge};
        let m = self.metrics();
        gauge!("milliscale_replica_applied_csn").set(m.applied_csn as f64);
        counter!("milliscale_replica_requests_total", "class" => "get").absolute(m.get_requests);
        counter!("milliscale_replica_requests_total", "class" => "put").absolute(m.put_requests);
        counter!("milliscale_replica_poll_errors_total").absolute(m.poll_errors);
        if let Some(usd) = m.cost_usd {
            gauge!("milliscale_replica_usd").set(usd);
        }
    }

    /// What the replica has done and what it cost.
    pub fn metrics(&self) -> ReplicaMetrics {
        let p = self.shared.progress.lock();
        let c = self.shared.counters.lock();
        let q = |x: f64| Duration::from_micros(c.lag_us.value_at_quantile(x));
        let lagged = !c.lag_us.is_empty();
        let cost = self
            .stores
            .iter()
            .map(|s| s.accounting().map(|a| a.prices))
            .collect::<Option<Vec<_>>>()
            .and_then(|prices| prices.first().copied())
            .map(|p| {
                c.get_class as f64 / 1e6 * p.get_per_million
                    + c.put_class as f64 / 1e6 * p.put_per_million
                    + c.bytes_down as f64 / 1e9 * p.download_per_gb
            });
        ReplicaMetrics {
            applied_csn: p.applied,
            seen_csn: p.seen,
            epoch: p.epoch,
            manifest_version: p.manifest_version,
            elapsed: c.started.elapsed_now(),
            entries_applied: c.entries,
            records_applied: c.records,
            lag_p50: if lagged { q(0.5) } else { Duration::ZERO },
            lag_p99: if lagged { q(0.99) } else { Duration::ZERO },
            lag_max: if lagged { Duration::from_micros(c.lag_us.max()) } else { Duration::ZERO },
            polls: c.polls,
            poll_errors: c.poll_errors,
            reads_hedged: c.reads_hedged,
            reads_hedges_won: c.reads_hedges_won,
            get_requests: c.get_class,
            put_requests: c.put_class,
            bytes_read: c.bytes_down,
            manifest_reads: c.manifest_reads,
            catch_ups: c.catch_ups,
            catch_up_rows: c.catch_up_rows,
            epochs_followed: c.epochs_followed,
            checkpoints_offered: c.checkpoints_offered,
            versions_retired: self.db.stats().versions_retired,
            cost_usd: cost,
            last_error: c.last_error.clone(),
            stopped: p.error.as_ref().map(Error::to_string),
        }
    }

    /// Forget the lag percentiles measured so far (benchmarks call it
    /// before the measured phase); counts are kept.
    pub fn reset_lag(&self) {
        self.shared.counters.lock().lag_us.reset();
    }

    /// The CSN above which a writer that offloads its checkpoints waits
    /// for one (its manifest's `checkpoint_wanted`: where it marked its
    /// log), as of the last manifest this replica read.
    pub fn checkpoint_wanted(&self) -> Option<Csn> {
        self.shared.progress.lock().checkpoint_wanted
    }

    /// Offer a checkpoint if the writer wants one that this replica can
    /// give ([`Replica::checkpoint_wanted`]): it has applied the wanted CSN
    /// and has not offered at or above it yet. Returns the offer made, if
    /// any. Call it now and then (`milliscale replica --offer-checkpoints`
    /// does, at each progress tick); it costs nothing while nothing is
    /// wanted.
    pub fn offer_if_wanted(&self) -> Result<Option<crate::manifest::CheckpointRef>> {
        let (wanted, applied) = {
            let p = self.shared.progress.lock();
            (p.checkpoint_wanted, p.applied)
        };
        let Some(wanted) = wanted else { return Ok(None) };
        let offered = self.offered.load(std::sync::atomic::Ordering::SeqCst);
        if applied < wanted || offered >= wanted {
            return Ok(None);
        }
        self.offer_checkpoint().map(Some)
    }

    /// Build a checkpoint of the replica's state at its applied CSN and
    /// offer it to the writer (`Options::checkpoint_offload`): the chunks
    /// go where a writer's own would (`checkpoint/c<csn>/...`, each on a
    /// quorum of stores), then an offer naming them
    /// (`checkpoint/offer/c<csn>`). A writer with offloading on adopts the
    /// newest offer that covers the log it marked, after checking the
    /// chunks, and truncates its log as after its own checkpoint. Reads go
    /// on meanwhile; applying the log waits only for the snapshot's GC
    /// horizon, as any long reader does. Returns the checkpoint.
    pub fn offer_checkpoint(&self) -> Result<crate::manifest::CheckpointRef> {
        let o = &self.db.inner.options;
        let mut tx = self.begin()?;
        let csn = tx.snapshot();
        let mut w = crate::checkpoint::ChunkWriter::new(
            &self.named,
            self.needed,
            o.store_deadline,
            csn,
            o.checkpoint_chunk_bytes,
        );
        for t in self.db.inner.tables_by_id().into_iter().filter(|t| !t.is_dropped()) {
            w.table(t.id)?;
            tx.for_each_visible(&t, |k, v| w.row(k, v))?;
        }
        drop(tx);
        let (cref, requests) = w.finish()?;
        let offer =
            crate::checkpoint::put_offer(&self.named, self.needed, o.store_deadline, &cref)?;
        {
            let mut c = self.shared.counters.lock();
            c.put_class += requests + offer;
            c.checkpoints_offered += 1;
        }
        self.offered.fetch_max(cref.csn, std::sync::atomic::Ordering::SeqCst);
        Ok(cref)
    }

    /// Make this replica the writer: take the next epoch through the
    /// manifest (which fences the old writer), read the old log to its
    /// fence, apply what is left of it under the replay rule, and start a
    /// new log, without reloading the database. See `promote.rs` for the
    /// steps and [`Database::promotion_report`] for what it did.
    ///
    /// The options the replica was opened with become the writer's (log
    /// groups, lanes, flush policy). Fails with `Fenced` if another writer
    /// took over first, and with the follower's error if it had stopped on
    /// one. On failure nothing is lost: a later recovery or promotion
    /// takes over as usual.
    pub fn promote(self) -> Result<Database> {
        if let Some(e) = self.error() {
            return Err(e);
        }
        self.shared.handover.store(true, std::sync::atomic::Ordering::SeqCst);
        let handle = self.follower.lock().take();
        let follower = handle.and_then(|h| h.join().ok()).flatten();
        let Some(follower) = follower else {
            return Err(self.error().unwrap_or(Error::Closed));
        };
        follower.promote()
    }

    /// Stop following the log. Reads go on at the applied CSN.
    pub fn close(&self) {
        self.shared.shut_down();
        if let Some(h) = self.follower.lock().take() {
            let _ = h.join();
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica").field("applied_csn", &self.applied_csn()).finish()
    }
}
