//! The database: tables, the CSN counter, the transaction table and GC state.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use objstore::ObjectStore;
use parking_lot::{Condvar, Mutex, RwLock};

use crate::checkpoint::{self, ChunkWriter};
use crate::commit::dependency::CommitState;
use crate::error::{Error, Result};
use crate::index::OrderedIndex;
use crate::limits::{TABLE_NAME_BYTES_MAX, TABLES_MAX};
use crate::log::record::Entry;
use crate::log::{Log, LogMetrics, OpenStore};
use crate::manifest::{LogRef, Manifest, ManifestStore, SealedLog};
use crate::mvcc::Csn;
use crate::mvcc::oid_array::OidArray;
use crate::options::{Isolation, Options, TxnOptions};
use crate::recovery::{self, RecoveryReport};
use crate::table::{Table, TableInner};
use crate::txn::Transaction;
use crate::txn::table::TxnTable;

/// Commits between two recomputations of the GC horizon.
pub(crate) const GC_HORIZON_REFRESH_COMMITS: u64 = 32;

static NEXT_DB_ID: AtomicU64 = AtomicU64::new(1);

/// An open database. Share it between threads by reference (`&Database`, for
/// example with `std::thread::scope`) or in an `Arc`.
pub struct Database {
    pub(crate) inner: Arc<DbInner>,
    checkpointer: Mutex<Option<JoinHandle<()>>>,
}

pub(crate) struct DbInner {
    pub(crate) id: u64,
    pub(crate) options: Options,
    /// Read on every operation; on its own cache line so that writes to the
    /// counters below never evict it.
    closed: CachePadded<AtomicBool>,
    /// The CSN counter, gCSN and the durable marks (`commit::dependency`).
    pub(crate) commit: Arc<CommitState>,
    /// The log; `None` without a store.
    pub(crate) log: Option<Log>,
    /// A lower bound on every running and future snapshot (see `mvcc::gc`).
    pub(crate) gc_horizon: CachePadded<AtomicU64>,
    pub(crate) versions_retired: CachePadded<AtomicU64>,
    pub(crate) txns: TxnTable,
    tables: RwLock<Catalog>,
    /// With a log: the manifest chain and the current version. Held while
    /// a new version is written, so versions follow each other.
    manifest: Option<ManifestState>,
    /// What recovery found at open, if the database existed.
    recovery: Option<RecoveryReport>,
    /// What the promotion did, if a replica became this writer.
    promotion: Option<PromotionReport>,
    /// Take a checkpoint at the checkpointer's next wake-up, whatever the
    /// log volume (after a promotion: it drops the sealed logs).
    checkpoint_soon: AtomicBool,
    /// Opened with `open_read_only`: every transaction is read-only.
    read_only: bool,
    /// One checkpoint at a time.
    checkpoint_lock: Mutex<()>,
    /// Offloaded checkpoints: the log marks (each stream's fresh segments,
    /// lane by lane, and the CSN bound below which everything is in older
    /// segments) waiting for an offer at or above their bound.
    checkpoint_marks: Mutex<Vec<(Vec<u64>, Csn)>>,
    /// When offers were last looked for.
    offers_checked: Mutex<Option<Instant>>,
    checkpoint_stats: Mutex<CheckpointStats>,
    /// Wakes the background checkpointer early (close).
    checkpointer_wake: (Mutex<bool>, Condvar),
}

struct ManifestState {
    store: ManifestStore,
    /// The stores, named, for checkpoints.
    stores: Vec<(String, Arc<dyn ObjectStore>)>,
    needed: usize,
    current: Mutex<Manifest>,
}

/// What checkpoints have cost so far: the background column of the cost
/// report (the log's requests are the foreground column).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CheckpointStats {
    /// Checkpoints published.
    pub checkpoints: u64,
    /// CSN of the last one.
    pub last_csn: u64,
    /// Rows and bytes in the last one.
    pub last_rows: u64,
    /// Bytes of the last one.
    pub last_bytes: u64,
    /// PUT-class requests made by checkpoints (chunk puts, manifest puts,
    /// lists), all stores.
    pub put_requests: u64,
    /// Deletes of superseded objects (free on S3), all stores.
    pub delete_requests: u64,
    /// Bytes uploaded by checkpoints, all stores.
    pub bytes_uploaded: u64,
    /// Of `checkpoints`, those built by a replica and adopted
    /// (`Options::checkpoint_offload`).
    pub adopted: u64,
    /// Time spent in checkpoints.
    pub busy: Duration,
    /// Log bytes written when the last one started.
    pub log_bytes_at_last: u64,
    /// What those requests and uploads cost at the stores' price tables,
    /// for stores that have one (`sim://`); `None` otherwise.
    pub cost_usd: Option<f64>,
}

/// Recovery steps 3 and 4: read `m`'s live log on `named` (merging the
/// stores) and plan its replay. `claim` is the manifest the reader writes
/// as (the same as `m` for a read-only open).
fn read_log(
    named: &[(String, Arc<dyn ObjectStore>)],
    needed: usize,
    m: &Manifest,
    claim: &Manifest,
    options: &Options,
) -> Result<(recovery::ReplayPlan, RecoveryReport)> {
    let threads = options.recovery_threads;
    let deadline = options.store_deadline;
    // The sealed logs first, each as its seal decided; then the current
    // log from where they end.
    let mut sealed = Vec::new();
    let (mut objects, mut bytes) = (0, 0);
    for seal in &m.sealed {
        let scan = recovery::scan_sealed(named, needed, seal, threads, deadline)?;
        objects += scan.objects;
        bytes += scan.bytes;
        sealed.push(recovery::plan_sealed(scan, seal)?);
    }
    let scan = recovery::scan_stores(named, needed, &m.log, m.log_from(), threads, deadline)?;
    let mut report = RecoveryReport::new(m, claim, &scan, threads);
    report.log_objects += objects;
    report.log_bytes += bytes;
    report.sealed_logs = sealed.len();
    let mut plan = recovery::plan_replay_owned(scan)?;
    if !sealed.is_empty() {
        let last = std::mem::take(&mut plan);
        plan.max_csn = sealed.iter().map(|p| p.max_csn).max().unwrap_or(0).max(last.max_csn);
        plan.prefix = last.prefix;
        for p in sealed.into_iter().chain(std::iter::once(last)) {
            plan.replay.extend(p.replay);
            plan.dropped.extend(p.dropped);
            plan.aborts += p.aborts;
            plan.covered += p.covered;
        }
    }
    report.set_plan(&plan);
    Ok((plan, report))
}

/// Whether recovery seals the old log instead of writing a checkpoint: a
/// writer that leaves its checkpoints to replicas
/// (`Options::checkpoint_offload`), on one store. With replication the
/// entries a recovery replays may sit on fewer stores than a quorum (the
/// scan merges every store that answered), and a seal must be readable
/// from any quorum again; so there recovery still writes its checkpoint.
fn seals_recovery(options: &Options, stores: usize) -> bool {
    options.checkpoint_offload && stores == 1
}

/// A new writer's log, as `options` lay it out: epoch `epoch`, from CSN
/// `base`, every chain starting at segment `first_segment`.
pub(crate) fn fresh_log(options: &Options, epoch: u64, base: Csn, first_segment: u64) -> LogRef {
    let groups = options.log_groups() as u32;
    let per_stream = options.groups_per_stream();
    LogRef {
        epoch,
        base_csn: base,
        groups,
        groups_per_stream: per_stream as u32,
        lanes: options.log_lanes as u32,
        group_start: vec![
            first_segment;
            (groups as usize).div_ceil(per_stream) * options.log_lanes
        ],
        parts_max: options.segment_parts_max,
    }
}

/// The price of `put` PUT-class requests and `up` uploaded bytes, spread
/// evenly over `stores`, at each store's price table; `None` if a store has
/// no price table.
/// Stores by name.
pub(crate) type NamedStores = Vec<(String, Arc<dyn ObjectStore>)>;

/// Open the stores without probing them (nothing is written) and read the
/// current manifest: the stores by name, the quorum, and the manifest.
/// Fails with `NoDatabase` if there is none.
pub(crate) fn read_manifest_unprobed(options: &Options) -> Result<(NamedStores, usize, Manifest)> {
    let named = options
        .stores
        .iter()
        .map(|spec| Ok((spec.describe(), spec.open()?)))
        .collect::<Result<Vec<_>>>()?;
    let needed = options.quorum.needed(named.len());
    let ms = ManifestStore::new(named.clone(), needed, options.store_deadline);
    let m = ms.read_latest()?.ok_or_else(|| Error::NoDatabase(describe(&named)))?;
    Ok((named, needed, m))
}

/// The stores' names, for messages.
fn describe(stores: &[(String, Arc<dyn ObjectStore>)]) -> String {
    stores.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
}

fn price(stores: &[(String, Arc<dyn ObjectStore>)], put: u64, up: u64) -> Option<f64> {
    let n = stores.len().max(1) as f64;
    stores
        .iter()
        .map(|(_, s)| {
            s.accounting().map(|a| {
                let p = a.prices;
                put as f64 / n / 1e6 * p.put_per_million + up as f64 / n / 1e9 * p.upload_per_gb
            })
        })
        .sum()
}

#[derive(Default)]
struct Catalog {
    by_name: HashMap<String, Arc<TableInner>>,
    by_id: Vec<Arc<TableInner>>,
}

/// What a replica's promotion to writer found and did
/// (`Replica::promote`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PromotionReport {
    /// The epoch of the writer it replaced.
    pub old_epoch: u64,
    /// The epoch it writes as.
    pub new_epoch: u64,
    /// The replica's applied CSN when promotion began.
    pub applied_before: Csn,
    /// The sealed log's contiguous prefix (on a quorum of stores).
    pub prefix: Csn,
    /// Commits above the prefix replayed (DSN below it).
    pub above: usize,
    /// Commits seen but not replayed.
    pub dropped: usize,
    /// Transactions applied during promotion (the rest of the old log).
    pub applied: u64,
    /// The new log's first CSN.
    pub base_csn: Csn,
    /// Time per step.
    pub timings: PromotionTimings,
}

/// How long each step of a promotion took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PromotionTimings {
    /// Reading the manifest until the replica follows the current log.
    pub catch_up: Duration,
    /// Creating the next manifest version with the next epoch.
    pub claim: Duration,
    /// Fencing the old writer's log.
    pub fence: Duration,
    /// Reading every chain up to its fence.
    pub drain: Duration,
    /// Deciding and applying the rest of the old log.
    pub apply: Duration,
    /// Starting the log and publishing the manifest with the seal.
    pub publish: Duration,
    /// All of it.
    pub total: Duration,
}

/// Counters for monitoring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbStats {
    /// The next CSN to be handed out.
    pub next_csn: Csn,
    /// The current GC horizon.
    pub gc_horizon: Csn,
    /// Versions unlinked by garbage collection so far.
    pub versions_retired: u64,
    /// Tables in the database.
    pub tables: usize,
}

impl Database {
    /// Open a database with `options`.
    ///
    /// With a store that already holds a database, this recovers it
    /// (ARCHITECTURE.md, "Recovery"): it takes over as the writer (the old
    /// one is fenced), loads the checkpoint, replays the log, and writes a
    /// checkpoint of the result before it returns. See
    /// [`Database::recovery_report`] for what it found.
    pub fn open(options: Options) -> Result<Database> {
        options.validate()?;
        let id = NEXT_DB_ID.fetch_add(1, Ordering::Relaxed);
        if !options.is_logged() {
            let commit = Arc::new(CommitState::new(0, options.tracking, false, 0));
            let inner = DbInner::new(id, options, commit, None, None, None, Vec::new());
            return Ok(Database::wrap(inner));
        }
        if !options.create_if_missing {
            // Before the stores are probed: the probe writes (and deletes)
            // an object, and an address without a database must be left
            // as it was.
            read_manifest_unprobed(&options)?;
        }
        let stores = crate::log::open_stores(&options)?;
        let named: Vec<(String, Arc<dyn ObjectStore>)> =
            stores.iter().map(|s| (s.name().to_owned(), Arc::clone(&s.store))).collect();
        let needed = options.quorum.needed(stores.len());
        let ms = ManifestStore::new(named.clone(), needed, options.store_deadline);
        match ms.read_latest()? {
            None if !options.create_if_missing => Err(Error::NoDatabase(describe(&named))),
            None => Database::create(id, options, stores, named, ms),
            Some(old) => Database::recover(id, options, stores, named, ms, old),
        }
    }

    /// Read a database's durable state without taking it over: the
    /// checkpoint and the log as recovery would replay them, into an
    /// in-memory database whose transactions are read-only. The writer,
    /// if one runs, is not fenced and keeps going; what it commits later is
    /// not seen. For inspection, dumps and checks.
    pub fn open_read_only(options: Options) -> Result<Database> {
        options.validate()?;
        if !options.is_logged() {
            return Err(Error::InvalidArgument("open_read_only needs a store".into()));
        }
        let id = NEXT_DB_ID.fetch_add(1, Ordering::Relaxed);
        let (named, needed, m) = read_manifest_unprobed(&options)?;
        let (plan, mut report) = read_log(&named, needed, &m, &m, &options)?;
        let base = m.log_from().max(plan.max_csn + 1);
        let commit = Arc::new(CommitState::new(0, options.tracking, false, base));
        let mut inner = DbInner::new(id, options, commit, None, None, None, m.tables.clone());
        inner.read_only = true;
        inner.rebuild(&named, m.checkpoint.as_ref(), &plan, &mut report)?;
        inner.recovery = Some(report);
        Ok(Database::wrap(inner))
    }

    /// An empty in-memory database whose transactions are read-only, with
    /// `tables` named and its CSN counter at `base`: what a read replica
    /// (`replica`) fills from the log. It has no log and no manifest.
    pub(crate) fn replica_shell(options: Options, tables: Vec<String>, base: Csn) -> Database {
        let id = NEXT_DB_ID.fetch_add(1, Ordering::Relaxed);
        let commit = Arc::new(CommitState::new(0, options.tracking, false, base));
        let mut inner = DbInner::new(id, options, commit, None, None, None, tables);
        inner.read_only = true;
        Database::wrap(inner)
    }

    fn wrap(inner: DbInner) -> Database {
        Database { inner: Arc::new(inner), checkpointer: Mutex::new(None) }
    }

    /// A new database: the first manifest, then an empty log.
    fn create(
        id: u64,
        options: Options,
        stores: Vec<OpenStore>,
        named: Vec<(String, Arc<dyn ObjectStore>)>,
        ms: ManifestStore,
    ) -> Result<Database> {
        for (name, s) in &named {
            let found = crate::manifest::retry(options.store_deadline, || s.list("log/"))
                .map_err(|e| Error::Store(format!("{name}: {e}")))?;
            if let Some(o) = found.first() {
                return Err(Error::Store(format!(
                    "{name} holds log objects ({}) but no manifest: it is not a milliscale \
                     database this version can open; use an empty bucket, prefix or directory",
                    o.key
                )));
            }
        }
        let m = Manifest::initial(
            options.log_groups() as u32,
            options.groups_per_stream() as u32,
            options.log_lanes as u32,
            options.segment_parts_max,
        );
        ms.create(&m)?;
        let groups = m.log.groups as usize;
        let commit = Arc::new(CommitState::new(groups, options.tracking, true, m.log.base_csn));
        let log = Log::start(&options, Arc::clone(&commit), id, stores, &m.log)?;
        let needed = options.quorum.needed(named.len());
        let state = ManifestState { store: ms, stores: named, needed, current: Mutex::new(m) };
        let inner = DbInner::new(id, options, commit, Some(log), Some(state), None, Vec::new());
        Ok(Database::start_checkpointer(inner))
    }

    /// An existing database: take over, fence, read, replay, checkpoint.
    fn recover(
        id: u64,
        options: Options,
        stores: Vec<OpenStore>,
        named: Vec<(String, Arc<dyn ObjectStore>)>,
        ms: ManifestStore,
        old: Manifest,
    ) -> Result<Database> {
        let started = Instant::now();
        let needed = options.quorum.needed(named.len());
        // 1. Take over: the next version, with the next epoch. Its create
        //    is the moment this writer owns the database.
        let mut claim = old.clone();
        claim.version += 1;
        claim.epoch = old.epoch + 1;
        ms.create(&claim)?;
        // 2. Fence the old epoch's log on every store that answers.
        let modes: Vec<_> = stores.iter().map(OpenStore::mode).collect();
        recovery::fence_stores(
            &named,
            &modes,
            needed,
            &old.log,
            claim.epoch,
            options.store_deadline,
        )?;
        let fenced_at = started.elapsed();
        // 3. Read the log and plan.
        let (plan, mut report) = read_log(&named, needed, &old, &claim, &options)?;
        let scanned_at = started.elapsed();
        // 4. Rebuild: the tables, the checkpoint, then the log on top.
        let base = old.log_from().max(plan.max_csn + 1);
        let first_segment = recovery::next_free_segment(&named, &old.log, options.store_deadline);
        let new_log = fresh_log(&options, claim.epoch, base, first_segment);
        let groups = new_log.groups as usize;
        let commit = Arc::new(CommitState::new(groups, options.tracking, true, base));
        let tables = claim.tables.clone();
        let state =
            ManifestState { store: ms, stores: named.clone(), needed, current: Mutex::new(claim) };
        // The log starts now but nothing can commit before `open` returns.
        let log = Log::start(&options, Arc::clone(&commit), id, stores, &new_log)?;
        let inner = DbInner::new(id, options, commit, Some(log), Some(state), None, tables);
        inner.rebuild(&named, old.checkpoint.as_ref(), &plan, &mut report)?;
        let rebuilt_at = started.elapsed();
        // 5. Pin what this recovery included, and the new epoch's log:
        //    a checkpoint of the result (when the log held anything); or,
        //    for a writer that leaves checkpoints to replicas, a seal of the
        //    old log with this decision, as a promotion writes.
        let logged = base > old.replay_from();
        let seal = (logged && seals_recovery(&inner.options, named.len())).then(|| SealedLog {
            log: old.log.clone(),
            end_segment: first_segment,
            from: old.log_from(),
            prefix: plan.prefix,
            above: plan.replay.iter().map(Entry::csn).filter(|c| *c >= plan.prefix).collect(),
            max_csn: base - 1,
        });
        let checkpoint = if logged && seal.is_none() {
            Some(inner.write_checkpoint()?)
        } else {
            old.checkpoint.clone()
        };
        inner.publish(|m| {
            m.checkpoint = checkpoint.clone();
            match &seal {
                Some(s) => m.sealed.push(s.clone()),
                None => m.sealed.clear(),
            }
            m.log = new_log.clone();
            m.checkpoint_wanted = None;
        })?;
        let published_at = started.elapsed();
        // With a seal, the old log's segments stay: nothing covers them yet.
        let deleted = if seal.is_some() {
            (0, 0)
        } else {
            checkpoint::delete_superseded(&named, checkpoint.as_ref(), &new_log)
        };
        if let Some(st) = &inner.manifest {
            st.store.delete_below(st.current.lock().version.saturating_sub(1));
        }
        let t = &mut report.timings;
        t.fence = fenced_at;
        t.scan = scanned_at - fenced_at;
        t.checkpoint_and_publish = published_at - rebuilt_at;
        t.total = started.elapsed();
        report.cleanup_requests = deleted.0 + deleted.1;
        report.new_epoch = new_log.epoch;
        report.new_checkpoint_csn =
            if seal.is_some() { None } else { checkpoint.as_ref().map(|c| c.csn) };
        report.sealed_old_log = seal.is_some();
        if seal.is_some() {
            // The checkpointer marks the log soon: replicas then offer.
            inner.checkpoint_soon.store(true, Ordering::SeqCst);
        }
        let mut inner = inner;
        inner.recovery = Some(report);
        Ok(Database::start_checkpointer(inner))
    }

    /// The writer that a promoted replica becomes (`replica::promote`): its
    /// tables (`tables`, by id, under database id `id`) hold everything up
    /// to `seal`'s decision. `claim` is the manifest version it created to
    /// take over; this publishes the next one, with the old log sealed and
    /// `new_log` current, and starts the log. The background checkpointer,
    /// if enabled, checkpoints soon after, which drops the seal.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn promoted(
        id: u64,
        options: Options,
        tables: Vec<Arc<TableInner>>,
        stores: Vec<OpenStore>,
        claim: Manifest,
        seal: SealedLog,
        new_log: LogRef,
        mut report: PromotionReport,
        started: Instant,
    ) -> Result<Database> {
        let named: NamedStores =
            stores.iter().map(|s| (s.name().to_owned(), Arc::clone(&s.store))).collect();
        let needed = options.quorum.needed(named.len());
        let ms = ManifestStore::new(named.clone(), needed, options.store_deadline);
        let groups = new_log.groups as usize;
        let commit = Arc::new(CommitState::new(groups, options.tracking, true, new_log.base_csn));
        let log = Log::start(&options, Arc::clone(&commit), id, stores, &new_log)?;
        let state = ManifestState { store: ms, stores: named, needed, current: Mutex::new(claim) };
        let mut inner = DbInner::new(id, options, commit, Some(log), Some(state), None, Vec::new());
        {
            let mut cat = inner.tables.write();
            for t in tables {
                cat.by_name.insert(t.name.clone(), Arc::clone(&t));
                cat.by_id.push(t);
            }
        }
        let published = Instant::now();
        inner.publish(|m| {
            m.sealed.push(seal.clone());
            m.log = new_log.clone();
            m.checkpoint_wanted = None;
        })?;
        report.timings.publish = published.elapsed();
        report.timings.total = started.elapsed();
        inner.checkpoint_soon.store(true, Ordering::SeqCst);
        inner.promotion = Some(report);
        Ok(Database::start_checkpointer(inner))
    }

    /// What the promotion did, if a replica became this writer
    /// (`Replica::promote`).
    pub fn promotion_report(&self) -> Option<&PromotionReport> {
        self.inner.promotion.as_ref()
    }

    fn start_checkpointer(inner: DbInner) -> Database {
        let db = Database::wrap(inner);
        let o = &db.inner.options;
        if o.checkpoint_log_bytes > 0 || o.checkpoint_interval.is_some() {
            let inner = Arc::clone(&db.inner);
            let handle = std::thread::Builder::new()
                .name("ms-checkpointer".into())
                .spawn(move || inner.run_checkpointer())
                .ok();
            *db.checkpointer.lock() = handle;
        }
        db
    }

    /// Take a checkpoint now and publish it; then delete the log segments
    /// and older checkpoints it supersedes. Returns the checkpoint's CSN.
    /// Transactions keep running meanwhile. Fails without a log.
    pub fn checkpoint(&self) -> Result<Csn> {
        self.inner.check_open()?;
        self.inner.checkpoint_now()
    }

    /// What checkpoints have cost so far.
    pub fn checkpoint_stats(&self) -> CheckpointStats {
        *self.inner.checkpoint_stats.lock()
    }

    /// What recovery found and did at open; `None` for a new database or
    /// one without a log.
    pub fn recovery_report(&self) -> Option<&RecoveryReport> {
        self.inner.recovery.as_ref()
    }

    /// The current manifest; `None` without a log.
    pub fn manifest(&self) -> Option<Manifest> {
        self.inner.manifest.as_ref().map(|m| m.current.lock().clone())
    }

    /// Create a table. Fails with `TableExists` if the name is taken.
    /// With a log, the new table is recorded in the manifest (one
    /// conditional put) before this returns.
    pub fn create_table(&self, name: &str) -> Result<Table> {
        self.inner.check_open()?;
        if self.inner.read_only {
            return Err(Error::InvalidArgument("the database was opened read-only".into()));
        }
        check_table_name(name)?;
        let mut cat = self.inner.tables.write();
        if cat.by_name.contains_key(name) {
            return Err(Error::TableExists(name.to_owned()));
        }
        if cat.by_id.len() >= TABLES_MAX {
            return Err(Error::InvalidArgument(format!("at most {TABLES_MAX} tables")));
        }
        // Records name tables by id, so the name must be durable before any
        // record of the table can be logged.
        if self.inner.manifest.is_some() {
            self.inner.publish(|m| m.tables.push(name.to_owned()))?;
        }
        let inner = self.inner.new_table(cat.by_id.len() as u32, name);
        cat.by_id.push(Arc::clone(&inner));
        cat.by_name.insert(name.to_owned(), Arc::clone(&inner));
        Ok(Table { inner })
    }

    /// Open an existing table by name.
    pub fn open_table(&self, name: &str) -> Result<Table> {
        self.inner.check_open()?;
        let cat = self.inner.tables.read();
        cat.by_name
            .get(name)
            .map(|inner| Table { inner: Arc::clone(inner) })
            .ok_or_else(|| Error::TableNotFound(name.to_owned()))
    }

    /// Names of all tables, in creation order.
    pub fn table_names(&self) -> Vec<String> {
        self.inner.tables.read().by_id.iter().map(|t| t.name.clone()).collect()
    }

    /// Begin a transaction at the default isolation level.
    pub fn begin(&self) -> Result<Transaction<'_>> {
        self.begin_with(TxnOptions::default())
    }

    /// Begin a transaction with explicit options.
    pub fn begin_with(&self, opts: TxnOptions) -> Result<Transaction<'_>> {
        self.inner.begin_with(opts)
    }

    /// Refuse all further work, write what the log holds, and stop the
    /// log's threads. Running transactions fail with `Closed` at their next
    /// operation or commit; pre-committed ones are still acknowledged once
    /// their log records are durable. Dropping the database closes it.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        {
            let (m, cv) = &self.inner.checkpointer_wake;
            *m.lock() = true;
            cv.notify_all();
        }
        if let Some(t) = self.checkpointer.lock().take() {
            let _ = t.join();
        }
        if let Some(log) = &self.inner.log {
            log.shut_down();
        }
    }

    /// What the log measured: per group flushes, bytes, fill and flush
    /// times; commit latency and dependency waits; per store requests and
    /// cost. `None` without a log.
    pub fn log_metrics(&self) -> Option<LogMetrics> {
        self.inner.log.as_ref().map(Log::metrics)
    }

    /// Zero the log's metrics (store accounting is not reset).
    pub fn reset_log_metrics(&self) {
        if let Some(log) = &self.inner.log {
            log.reset_metrics();
        }
    }

    /// Every CSN below this is durable (gCSN). Without a log, the next CSN.
    pub fn durable_csn(&self) -> Csn {
        self.inner.gc_counter().load(Ordering::SeqCst)
    }

    /// Why the database stopped accepting commits, if it did.
    pub fn poisoned(&self) -> Option<Error> {
        self.inner.commit.poison_error()
    }

    /// Monitoring counters.
    pub fn stats(&self) -> DbStats {
        DbStats {
            next_csn: self.inner.commit.next_csn.load(Ordering::Acquire),
            gc_horizon: self.inner.gc_horizon.load(Ordering::Acquire),
            versions_retired: self.inner.versions_retired.load(Ordering::Relaxed),
            tables: self.inner.tables.read().by_id.len(),
        }
    }
}

impl DbInner {
    fn new(
        id: u64,
        options: Options,
        commit: Arc<CommitState>,
        log: Option<Log>,
        manifest: Option<ManifestState>,
        recovery: Option<RecoveryReport>,
        tables: Vec<String>,
    ) -> DbInner {
        let txns = TxnTable::new(options.max_transactions);
        let inner = DbInner {
            id,
            options,
            closed: CachePadded::new(AtomicBool::new(false)),
            commit,
            log,
            gc_horizon: CachePadded::new(AtomicU64::new(0)),
            versions_retired: CachePadded::new(AtomicU64::new(0)),
            txns,
            tables: RwLock::new(Catalog::default()),
            manifest,
            recovery,
            promotion: None,
            checkpoint_soon: AtomicBool::new(false),
            read_only: false,
            checkpoint_lock: Mutex::new(()),
            checkpoint_marks: Mutex::new(Vec::new()),
            offers_checked: Mutex::new(None),
            checkpoint_stats: Mutex::new(CheckpointStats::default()),
            checkpointer_wake: (Mutex::new(false), Condvar::new()),
        };
        {
            let mut cat = inner.tables.write();
            for (i, name) in tables.into_iter().enumerate() {
                let t = inner.new_table(i as u32, &name);
                cat.by_id.push(Arc::clone(&t));
                cat.by_name.insert(name, t);
            }
        }
        inner
    }

    /// The tables, by id.
    pub(crate) fn tables_by_id(&self) -> Vec<Arc<TableInner>> {
        self.tables.read().by_id.clone()
    }

    /// Add the tables of `names` (a manifest's list, by id) that are not
    /// there yet. A name that differs from the table of its id is
    /// `Corrupt`: the list only ever grows.
    pub(crate) fn add_tables(&self, names: &[String]) -> Result<()> {
        let mut cat = self.tables.write();
        for (i, name) in names.iter().enumerate() {
            match cat.by_id.get(i) {
                Some(t) if t.name == *name => {}
                Some(t) => {
                    return Err(Error::Corrupt(format!(
                        "the manifest names table {i} {name:?}, but it was {:?}",
                        t.name
                    )));
                }
                None => {
                    let t = self.new_table(i as u32, name);
                    cat.by_id.push(Arc::clone(&t));
                    cat.by_name.insert(name.clone(), t);
                }
            }
        }
        Ok(())
    }

    fn new_table(&self, id: u32, name: &str) -> Arc<TableInner> {
        Arc::new(TableInner {
            id,
            name: name.to_owned(),
            db_id: self.id,
            index: OrderedIndex::new(),
            records: OidArray::new(),
        })
    }

    /// Write the next manifest version: the current one changed by `f`.
    /// Another writer's version there means this one is fenced: the
    /// database is poisoned and acknowledges nothing more.
    fn publish(&self, f: impl FnOnce(&mut Manifest)) -> Result<()> {
        let st = self.manifest.as_ref().ok_or_else(|| Error::InvalidArgument("no log".into()))?;
        let mut cur = st.current.lock();
        let mut next = cur.clone();
        f(&mut next);
        next.version += 1;
        match st.store.create(&next) {
            Ok(()) => {
                *cur = next;
                Ok(())
            }
            Err(e) => {
                if let Error::Fenced(_) = e {
                    self.commit.poison(e.clone());
                    if let Some(log) = &self.log {
                        for g in log.groups() {
                            g.wake_all();
                        }
                        for s in log.streams() {
                            s.wake_all();
                        }
                    }
                }
                Err(e)
            }
        }
    }

    /// Recovery steps 5 and 6, before the database is shared: load the
    /// checkpoint into the tables, then replay the plan on top.
    fn rebuild(
        &self,
        named: &[(String, Arc<dyn ObjectStore>)],
        checkpoint: Option<&crate::manifest::CheckpointRef>,
        plan: &recovery::ReplayPlan,
        report: &mut RecoveryReport,
    ) -> Result<()> {
        let threads = self.options.recovery_threads;
        let tables = self.tables.read().by_id.clone();
        let started = Instant::now();
        if let Some(c) = checkpoint {
            report.checkpoint_rows_loaded =
                checkpoint::load(named, c, &tables, threads, self.options.store_deadline)?;
        }
        report.timings.load_checkpoint = started.elapsed();
        let stats = recovery::replay::apply(plan, &tables, threads)?;
        report.timings.replay = started.elapsed() - report.timings.load_checkpoint;
        report.records_applied = stats.records;
        report.keys_installed = stats.keys;
        Ok(())
    }

    /// Begin a transaction (`Database::begin_with`).
    pub(crate) fn begin_with(&self, opts: TxnOptions) -> Result<Transaction<'_>> {
        self.check_open()?;
        if let Some(log) = &self.log {
            log.note_begin();
        }
        let isolation = opts.isolation.unwrap_or(self.options.isolation);
        // The durable snapshot reads at gCSN; its registration uses the GC
        // counter so the horizon proof holds (see `DbInner::gc_counter`).
        if let (true, Some(log)) = (opts.durable_snapshot, &self.log) {
            self.commit.publish_gcsn(log.groups());
        }
        let counter = if opts.durable_snapshot { self.gc_counter() } else { &self.commit.next_csn };
        let (lease, snapshot) =
            self.txns.begin(counter).ok_or(Error::TooManyTransactions(self.txns.capacity()))?;
        let read_only = opts.read_only || opts.durable_snapshot || self.read_only;
        let isolation = if opts.durable_snapshot { Isolation::Snapshot } else { isolation };
        Ok(Transaction::new(self, lease, snapshot, isolation, read_only))
    }

    /// Scan every table at the durable snapshot and write the chunks.
    fn write_checkpoint(&self) -> Result<crate::manifest::CheckpointRef> {
        let st = self.manifest.as_ref().ok_or_else(|| Error::InvalidArgument("no log".into()))?;
        let mut tx = self.begin_with(TxnOptions::durable_snapshot())?;
        let csn = tx.snapshot();
        let tables = self.tables.read().by_id.clone();
        let mut w = ChunkWriter::new(
            &st.stores,
            st.needed,
            self.options.store_deadline,
            csn,
            self.options.checkpoint_chunk_bytes,
        );
        for t in &tables {
            w.table(t.id)?;
            tx.for_each_visible(t, |k, v| w.row(k, v))?;
        }
        drop(tx);
        let (cref, requests) = w.finish()?;
        let up = cref.bytes * st.stores.len() as u64;
        let mut stats = self.checkpoint_stats.lock();
        stats.put_requests += requests;
        stats.bytes_uploaded += up;
        if let Some(c) = price(&st.stores, requests, up) {
            *stats.cost_usd.get_or_insert(0.0) += c;
        }
        Ok(cref)
    }

    /// See [`Database::checkpoint`] and the `checkpoint` module.
    fn checkpoint_now(&self) -> Result<Csn> {
        let log = self.log.as_ref().ok_or_else(|| Error::InvalidArgument("no log".into()))?;
        if self.manifest.is_none() {
            return Err(Error::InvalidArgument("no log".into()));
        }
        let _one = self.checkpoint_lock.lock();
        let started = Instant::now();
        let log_bytes = log.bytes_written();
        // 1. Fresh segments from here on, and the CSN bound they give.
        let marks: Vec<(Vec<u64>, Csn)> =
            log.streams().iter().map(|s| s.mark_checkpoint()).collect();
        let bound = marks.iter().map(|m| m.1).max().unwrap_or(0);
        // 2. Wait until everything below the bound is durable.
        let deadline = Instant::now() + self.options.store_deadline;
        while self.commit.gcsn.load(Ordering::SeqCst) < bound {
            if let Some(e) = self.commit.poison_error() {
                return Err(e);
            }
            if Instant::now() > deadline {
                return Err(Error::StoreUnavailable(format!(
                    "checkpoint: gCSN did not reach {bound} within {:?}",
                    self.options.store_deadline
                )));
            }
            self.commit.wake_committer();
            std::thread::sleep(Duration::from_millis(1));
        }
        // 3. The snapshot, in chunks.
        let cref = self.write_checkpoint()?;
        debug_assert!(cref.csn >= bound);
        // Per chain, stream by stream (`LogRef::start`).
        let starts: Vec<u64> = marks.into_iter().flat_map(|m| m.0).collect();
        // 4. Publish, then 5. delete what it superseded.
        // The checkpoint is above every sealed log's CSNs (the current
        // log starts above them): it drops them.
        self.publish(|m| {
            m.checkpoint = Some(cref.clone());
            m.sealed.clear();
            m.log.group_start = starts.clone();
            m.checkpoint_wanted = None;
        })?;
        self.after_checkpoint(&cref, 0, started, log_bytes, false);
        Ok(cref.csn)
    }

    /// A checkpoint (`cref`) is published: delete what it superseded (log
    /// segments before the new starts, other checkpoints' objects, old
    /// manifest versions) and count it. `requests` were made before
    /// publishing, beyond those the stats have already.
    fn after_checkpoint(
        &self,
        cref: &crate::manifest::CheckpointRef,
        requests: u64,
        started: Instant,
        log_bytes: u64,
        adopted: bool,
    ) {
        let Some(st) = self.manifest.as_ref() else { return };
        let new_log = st.current.lock().log.clone();
        let (lists, deletes) = checkpoint::delete_superseded(&st.stores, Some(cref), &new_log);
        // The manifest put on each store, and the lists.
        let puts = st.stores.len() as u64 + lists + requests;
        let version = st.current.lock().version;
        st.store.delete_below(version.saturating_sub(1));
        let mut stats = self.checkpoint_stats.lock();
        stats.checkpoints += 1;
        stats.adopted += u64::from(adopted);
        stats.last_csn = cref.csn;
        stats.last_rows = cref.rows;
        stats.last_bytes = cref.bytes;
        stats.put_requests += puts;
        stats.delete_requests += deletes;
        if let Some(c) = price(&st.stores, puts, 0) {
            *stats.cost_usd.get_or_insert(0.0) += c;
        }
        stats.busy += started.elapsed();
        stats.log_bytes_at_last = log_bytes;
    }

    /// Offloaded checkpoints (`Options::checkpoint_offload`): mark the log
    /// (fresh segments and their CSN bound) unless a mark is waiting, then
    /// adopt the newest checkpoint a replica offered that covers a mark,
    /// is durable and is newer than the current one, once its chunks
    /// check out: publish it with the mark's segments as the log's start,
    /// then delete what it superseded, as a local checkpoint does. Returns
    /// its CSN, or `None` if no offer qualified yet.
    fn adopt_offered(&self) -> Result<Option<Csn>> {
        let log = self.log.as_ref().ok_or_else(|| Error::InvalidArgument("no log".into()))?;
        let st = self.manifest.as_ref().ok_or_else(|| Error::InvalidArgument("no log".into()))?;
        let _one = self.checkpoint_lock.lock();
        let started = Instant::now();
        let deadline = self.options.store_deadline;
        let want = {
            let mut marks = self.checkpoint_marks.lock();
            if marks.is_empty() {
                let m: Vec<(Vec<u64>, Csn)> =
                    log.streams().iter().map(|s| s.mark_checkpoint()).collect();
                let bound = m.iter().map(|x| x.1).max().unwrap_or(0);
                marks.push((m.into_iter().flat_map(|x| x.0).collect(), bound));
            }
            marks.first().map(|(_, b)| *b)
        };
        // Tell replicas (again, if a publish failed): they offer once they
        // have applied the oldest mark's bound.
        if st.current.lock().checkpoint_wanted != want {
            self.publish(|m| m.checkpoint_wanted = want)?;
        }
        let (offers, mut requests) = checkpoint::list_offers(&st.stores, deadline);
        let durable = self.commit.gcsn.load(Ordering::SeqCst);
        let (current, current_starts) = {
            let m = st.current.lock();
            (m.checkpoint.as_ref().map_or(0, |c| c.csn), m.log.group_start.clone())
        };
        let marks = self.checkpoint_marks.lock().clone();
        for offer in offers {
            if offer.csn <= current || offer.csn > durable {
                continue;
            }
            // The newest mark it covers: segments before the mark's hold
            // only CSNs below its bound, so below the offer's.
            let Some((starts, _)) = marks.iter().rev().find(|(_, b)| *b <= offer.csn) else {
                continue;
            };
            match checkpoint::check_chunks(&st.stores, st.needed, deadline, &offer) {
                Ok(n) => requests += n,
                Err(e) => {
                    tracing::warn!("not adopting a checkpoint offer: {e}");
                    continue;
                }
            }
            // Never move a chain's start back (a local checkpoint may have
            // moved it past an older mark).
            let starts: Vec<u64> =
                starts.iter().zip(&current_starts).map(|(a, b)| *a.max(b)).collect();
            // A mark the offer does not cover stays wanted.
            let wanted = marks.iter().map(|(_, b)| *b).find(|b| *b > offer.csn);
            self.publish(|m| {
                m.checkpoint = Some(offer.clone());
                m.sealed.clear();
                m.log.group_start = starts.clone();
                m.checkpoint_wanted = wanted;
            })?;
            self.checkpoint_marks.lock().retain(|(_, b)| *b > offer.csn);
            self.after_checkpoint(&offer, requests, started, log.bytes_written(), true);
            return Ok(Some(offer.csn));
        }
        let mut stats = self.checkpoint_stats.lock();
        stats.put_requests += requests;
        stats.busy += started.elapsed();
        Ok(None)
    }

    /// The background checkpointer: on log volume or interval.
    fn run_checkpointer(&self) {
        let Some(log) = &self.log else { return };
        let (stop, cv) = &self.checkpointer_wake;
        let mut last = Instant::now();
        loop {
            {
                let mut stop = stop.lock();
                if !*stop {
                    cv.wait_for(&mut stop, Duration::from_millis(100));
                }
                if *stop {
                    return;
                }
            }
            let since = log.bytes_written() - self.checkpoint_stats.lock().log_bytes_at_last;
            let o = &self.options;
            let soon = self.checkpoint_soon.swap(false, Ordering::SeqCst);
            let due = (o.checkpoint_log_bytes > 0 && since >= o.checkpoint_log_bytes)
                || o.checkpoint_interval.is_some_and(|d| last.elapsed() >= d && since > 0)
                || soon;
            if !due {
                continue;
            }
            if o.checkpoint_offload && !soon {
                // Look for offers at most once a second (a LIST per store).
                let mut checked = self.offers_checked.lock();
                if checked.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
                    continue;
                }
                *checked = Some(Instant::now());
                drop(checked);
                match self.adopt_offered() {
                    Ok(Some(_)) => last = Instant::now(),
                    Ok(None) => {}
                    Err(e) => {
                        if self.commit.is_poisoned() || self.check_open().is_err() {
                            return;
                        }
                        tracing::warn!("adopting an offered checkpoint failed, will retry: {e}");
                    }
                }
                continue;
            }
            match self.checkpoint_now() {
                Ok(_) => last = Instant::now(),
                Err(e) => {
                    if self.commit.is_poisoned() || self.check_open().is_err() {
                        return;
                    }
                    tracing::warn!("background checkpoint failed, will retry: {e}");
                    last = Instant::now();
                }
            }
        }
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) { Err(Error::Closed) } else { Ok(()) }
    }

    /// The counter that bounds the GC horizon: gCSN with a log (so the
    /// durable snapshot stays readable), the CSN counter without one. Both
    /// are monotone and never above the CSN counter, which is what
    /// `TxnTable::horizon`'s proof needs of a counter.
    pub(crate) fn gc_counter(&self) -> &AtomicU64 {
        if self.commit.logged { &self.commit.gcsn } else { &self.commit.next_csn }
    }

    /// Recompute the cached GC horizon (cheap: one pass over the slots in use).
    pub(crate) fn refresh_gc_horizon(&self) -> Csn {
        let h = self.txns.horizon(self.gc_counter());
        self.gc_horizon.fetch_max(h, Ordering::AcqRel);
        h
    }
}

fn check_table_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > TABLE_NAME_BYTES_MAX {
        return Err(Error::InvalidArgument(format!(
            "table names must be 1..={TABLE_NAME_BYTES_MAX} bytes, got {}",
            name.len()
        )));
    }
    Ok(())
}

impl Drop for Database {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database").field("stats", &self.stats()).finish()
    }
}
