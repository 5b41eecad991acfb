//! Opening a database: a new one, or an existing one recovered from its
//! stores (read the manifest, fence the previous writer, read and merge
//! the log, replay it on the last checkpoint; see `recovery`).

use milliscale_seam::Elapsed as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use objstore::ObjectStore;
use parking_lot::Mutex;

use super::Database;
use crate::commit::CommitMarks;
use crate::engine::{Engine, ManifestState, NamedStores};
use crate::error::{Error, Result};
use crate::keys::LOG_PREFIX;
use crate::log::record::Entry;
use crate::log::{Log, OpenStore};
use crate::manifest::{LogRef, Manifest, ManifestStore, SealedLog, read_manifest_unprobed};
use crate::mvcc::Csn;
use crate::options::Options;
use crate::recovery::{self, RecoveryReport};

static NEXT_DB_ID: AtomicU64 = AtomicU64::new(1);

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
    // A clone not opened yet: its parent's logs up to the clone point, in
    // the parent's stores; then the sealed logs, each as its seal decided;
    // then the current log from where they end.
    let mut sealed = Vec::new();
    let (mut objects, mut bytes) = (0, 0);
    if let Some(p) = &m.parent {
        let parent = crate::history::clone::parent_stores(options, p)?;
        for seal in &p.logs {
            let scan = recovery::scan_sealed(&parent, p.needed, seal, threads, deadline)?;
            objects += scan.objects;
            bytes += scan.bytes;
            sealed.push(recovery::plan_sealed(scan, seal)?);
        }
        if let Some(o) = &p.overlay {
            let entry = crate::history::clone::read_overlay(named, o, deadline)?;
            bytes += o.bytes;
            objects += 1;
            sealed.push(recovery::ReplayPlan {
                prefix: o.csn + 1,
                max_csn: o.csn,
                replay: vec![entry],
                ..recovery::ReplayPlan::default()
            });
        }
    }
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

/// Whether recovery seals the old log instead of writing a checkpoint
/// before it returns: a writer on one store whose checkpoints come later
/// anyway, either from replicas (`Options::checkpoint_offload`) or from
/// its own background checkpointer, which then writes one at once. So a
/// restart costs the checkpoint's load and the log's replay, not also a
/// full checkpoint write before the first commit. With replication the
/// entries a recovery replays may sit on fewer stores than a quorum (the
/// scan merges every store that answered), and a seal must be readable
/// from any quorum again; so there recovery still writes its checkpoint,
/// as does a writer that takes no checkpoints on its own.
fn seals_recovery(options: &Options, stores: usize) -> bool {
    stores == 1 && (options.checkpoint_offload || options.checkpoints_in_background())
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

/// The checkpoint a database's state starts from, and the stores that
/// hold it: a clone not opened yet starts from its parent's.
fn checkpoint_of(
    options: &Options,
    named: &NamedStores,
    m: &Manifest,
) -> Result<(NamedStores, Option<crate::manifest::CheckpointRef>)> {
    match &m.parent {
        Some(p) => Ok((crate::history::clone::parent_stores(options, p)?, p.checkpoint.clone())),
        None => Ok((named.to_vec(), m.checkpoint.clone())),
    }
}

/// Keep a time index on `commit` from now on if `options` keep a window:
/// writer `epoch`'s samples start at the stores' last one (whose clock may
/// have run ahead of this machine's).
pub(crate) fn start_time_index(
    options: &Options,
    stores: &[(String, Arc<dyn ObjectStore>)],
    epoch: u64,
    commit: &CommitMarks,
) -> Option<Arc<crate::history::times::TimeIndex>> {
    options.retention?;
    let floor = stores
        .iter()
        .filter_map(|(_, s)| crate::history::times::last_sample(s, options.store_deadline))
        .max()
        .unwrap_or_default();
    let t = Arc::new(crate::history::times::TimeIndex::new(epoch, floor));
    commit.set_time_index(t.clone());
    Some(t)
}

/// The stores' names, for messages.
fn describe(stores: &[(String, Arc<dyn ObjectStore>)]) -> String {
    stores.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
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
            let commit = Arc::new(CommitMarks::new(0, options.tracking, false, 0));
            let inner = Engine::new(id, options, commit, None, None, None);
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
        let _span = tracing::info_span!("open", stores = %describe(&named)).entered();
        let started = milliscale_seam::now();
        let db = match ms.read_latest()? {
            None if !options.create_if_missing => Err(Error::NoDatabase(describe(&named))),
            None => Database::create(id, options, stores, named, ms),
            Some(old) => {
                let _span = tracing::info_span!("recovery", old_epoch = old.epoch).entered();
                Database::recover(id, options, stores, named, ms, old)
            }
        }?;
        let ms_open = started.elapsed_now().as_secs_f64() * 1e3;
        match db.recovery_report() {
            None => tracing::info!(ms = ms_open, "created a new database"),
            Some(r) => tracing::info!(
                ms = ms_open,
                new_epoch = r.new_epoch,
                replayed = r.replayed,
                "recovered the database"
            ),
        }
        Ok(db)
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
        let commit = Arc::new(CommitMarks::new(0, options.tracking, false, base));
        let mut inner = Engine::new(id, options, commit, None, None, None).with_tables_of(&m)?;
        inner.read_only = true;
        let (from, checkpoint) = checkpoint_of(&inner.options, &named, &m)?;
        inner.rebuild(&from, checkpoint.as_ref(), &plan, &mut report)?;
        inner.recovery = Some(report);
        Ok(Database::wrap(inner))
    }

    /// The database as it was at a point of its retention window
    /// (`Options::retention`), read-only, in memory: every transaction
    /// committed at or below `At::Csn(n)`, and none above; or, for
    /// `At::Time(t)`, every transaction acknowledged before `t` and none
    /// that pre-committed after it (design record 0012). The writer, if
    /// one runs, is not fenced and keeps going. A point outside the window
    /// is refused, naming the oldest and newest reachable points;
    /// [`Database::past_report`] says what was read.
    ///
    /// A database without a window can be read at a CSN from its current
    /// checkpoint on, not by time.
    pub fn open_at(options: Options, at: crate::history::At) -> Result<Database> {
        options.validate()?;
        if !options.is_logged() {
            return Err(Error::InvalidArgument("open_at needs a store".into()));
        }
        let id = NEXT_DB_ID.fetch_add(1, Ordering::Relaxed);
        let (named, needed, _) = read_manifest_unprobed(&options)?;
        let past = crate::history::past::plan(
            &named,
            needed,
            at,
            options.recovery_threads,
            options.store_deadline,
        )?;
        let commit = Arc::new(CommitMarks::new(0, options.tracking, false, past.report.csn + 1));
        let mut inner = Engine::new(id, options, commit, None, None, None);
        inner.add_tables(&past.tables, &past.dropped)?;
        inner.read_only = true;
        let mut report = RecoveryReport::default();
        inner.rebuild(&named, past.checkpoint.as_ref(), &past.plan, &mut report)?;
        // Rebuilt in memory: the objects may go now.
        drop(past.lease);
        inner.past = Some(past.report);
        Ok(Database::wrap(inner))
    }

    /// An empty in-memory database whose transactions are read-only, with
    /// the tables of manifest `m` and its CSN counter at `base`: what a
    /// read replica (`replica`) fills from the log. It has no log and no
    /// manifest.
    pub(crate) fn replica_shell(options: Options, m: &Manifest, base: Csn) -> Result<Database> {
        let id = NEXT_DB_ID.fetch_add(1, Ordering::Relaxed);
        let commit = Arc::new(CommitMarks::new(0, options.tracking, false, base));
        let mut inner = Engine::new(id, options, commit, None, None, None).with_tables_of(m)?;
        inner.read_only = true;
        Ok(Database::wrap(inner))
    }

    pub(super) fn wrap(inner: Engine) -> Database {
        Database {
            inner: Arc::new(inner),
            checkpointer: Mutex::new(None),
            time_flusher: Mutex::new(None),
        }
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
            let found = crate::retry::retry(options.store_deadline, || s.list(LOG_PREFIX))
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
            crate::log::record::FORMAT_VERSION,
            options.log_groups() as u32,
            options.groups_per_stream() as u32,
            options.log_lanes as u32,
            options.segment_parts_max,
        );
        ms.create(&m)?;
        let groups = m.log.groups as usize;
        let commit = Arc::new(CommitMarks::new(groups, options.tracking, true, m.log.base_csn));
        let times = start_time_index(&options, &named, m.log.epoch, &commit);
        let log = Log::start(&options, Arc::clone(&commit), id, stores, &m.log)?;
        let needed = options.quorum.needed(named.len());
        let state = ManifestState { store: ms, stores: named, needed, current: Mutex::new(m) };
        let inner = Engine::new(id, options, commit, Some(log), Some(state), None);
        if let Some(t) = times {
            let _ = inner.time_index.set(t);
        }
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
        let started = milliscale_seam::now();
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
        let fenced_at = started.elapsed_now();
        // 3. Read the log and plan.
        let (plan, mut report) = read_log(&named, needed, &old, &claim, &options)?;
        let scanned_at = started.elapsed_now();
        // 4. Rebuild: the tables, the checkpoint, then the log on top.
        let base = old.log_from().max(plan.max_csn + 1);
        let first_segment = recovery::next_free_segment(&named, &old.log, options.store_deadline);
        let new_log = fresh_log(&options, claim.epoch, base, first_segment);
        let groups = new_log.groups as usize;
        let commit = Arc::new(CommitMarks::new(groups, options.tracking, true, base));
        let times = start_time_index(&options, &named, claim.epoch, &commit);
        let tables = claim.clone();
        let state =
            ManifestState { store: ms, stores: named.clone(), needed, current: Mutex::new(claim) };
        // The log starts now but nothing can commit before `open` returns.
        let log = Log::start(&options, Arc::clone(&commit), id, stores, &new_log)?;
        let inner = Engine::new(id, options, commit, Some(log), Some(state), None)
            .with_tables_of(&tables)?;
        if let Some(t) = times {
            let _ = inner.time_index.set(t);
        }
        let (from, loaded) = checkpoint_of(&inner.options, &named, &old)?;
        inner.rebuild(&from, loaded.as_ref(), &plan, &mut report)?;
        let rebuilt_at = started.elapsed_now();
        // 5. Pin what this recovery included, and the new epoch's log:
        //    a checkpoint of the result (when the log held anything); or,
        //    for a writer whose checkpoints come later anyway (its own
        //    checkpointer's or replicas'), a seal of the old log with this
        //    decision, as a promotion writes (`seals_recovery`).
        // A clone's first writer always writes its own checkpoint: after
        // it, nothing of the parent's is needed.
        let logged = base > old.replay_from() || old.parent.is_some();
        // The decision on the old log: a seal's content, and what the
        // history of a database with a retention window keeps of it.
        let decision = SealedLog {
            log: old.log.clone(),
            end_segment: first_segment,
            from: old.log_from(),
            prefix: plan.prefix,
            above: plan.replay.iter().map(Entry::csn).filter(|c| *c >= plan.prefix).collect(),
            max_csn: base - 1,
        };
        let seal = (logged && old.parent.is_none() && seals_recovery(&inner.options, named.len()))
            .then(|| decision.clone());
        let checkpoint = if logged && seal.is_none() {
            Some(inner.write_checkpoint()?)
        } else {
            old.checkpoint.clone()
        };
        inner.publish_ending(Some(&decision), |m| {
            m.parent = None;
            m.checkpoint = checkpoint.clone();
            match &seal {
                Some(s) => m.sealed.push(s.clone()),
                None => m.sealed.clear(),
            }
            m.log = new_log.clone();
            m.checkpoint_wanted = None;
        })?;
        let published_at = started.elapsed_now();
        // The clone is on its own now: withdraw its registration in the
        // parent (best effort: a registration left behind keeps the
        // parent's objects until it is deleted by hand).
        if let Some(p) = &old.parent
            && let Ok(parent) = crate::history::clone::parent_stores(&inner.options, p)
        {
            crate::history::leases::withdraw(&parent, &p.registration);
        }
        // And its overlay is in its checkpoint now.
        if let Some(o) = old.parent.as_ref().and_then(|p| p.overlay.as_ref()) {
            for (_, s) in &named {
                let _ = s.delete(&o.key);
            }
        }
        // With a seal, the old log's segments stay: nothing covers them yet.
        let deleted = match (&seal, &inner.manifest) {
            (None, Some(st)) => {
                let current = milliscale_seam::lock(&st.current).clone();
                crate::history::truncate(&named, needed, &current, inner.options.bugs)
            }
            _ => (0, 0),
        };
        if let Some(st) = &inner.manifest {
            st.store.delete_below(milliscale_seam::lock(&st.current).version.saturating_sub(1));
        }
        let t = &mut report.timings;
        t.fence = fenced_at;
        t.scan = scanned_at - fenced_at;
        t.checkpoint_and_publish = published_at - rebuilt_at;
        t.total = started.elapsed_now();
        report.cleanup_requests = deleted.0 + deleted.1;
        report.new_epoch = new_log.epoch;
        report.new_checkpoint_csn =
            if seal.is_some() { None } else { checkpoint.as_ref().map(|c| c.csn) };
        report.sealed_old_log = seal.is_some();
        if seal.is_some() {
            // The checkpointer checkpoints soon (or, offloading, marks the
            // log so that replicas offer), which drops the seal.
            inner.checkpoint_soon.store(true, Ordering::SeqCst);
        }
        // `checkpoint_log_ratio` measures the log against the last
        // checkpoint's size: start from the checkpoint this database now
        // stands on, or the first checkpoint after a restart would come at
        // the ratio's floor whatever the live data's size.
        if let Some(c) = &checkpoint {
            let mut stats = inner.checkpoint_stats.lock();
            stats.last_csn = c.csn;
            stats.last_rows = c.rows;
            stats.last_bytes = c.bytes;
        }
        let mut inner = inner;
        inner.recovery = Some(report);
        Ok(Database::start_checkpointer(inner))
    }
}
