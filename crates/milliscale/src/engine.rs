//! The engine: the state every transaction borrows. Tables and their
//! catalog, the transaction table, the commit marks, the log, the GC
//! horizon and the manifest chain. [`crate::Database`] is the public
//! facade over it (`db`); a transaction holds `&Engine`; a read replica
//! applies the log to one (`replica::follow`).

use milliscale_seam::Elapsed as _;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use objstore::ObjectStore;
use parking_lot::{Condvar, Mutex, RwLock};

use crate::checkpoint::{self, CheckpointStats};
use crate::commit::CommitMarks;
use crate::error::{Error, Result};
use crate::index::OrderedIndex;
use crate::limits::TABLE_NAME_BYTES_MAX;
use crate::log::Log;
use crate::manifest::{Manifest, ManifestStore};
use crate::mvcc::Csn;
use crate::mvcc::gc::Retrims;
use crate::mvcc::oid_array::OidArray;
use crate::mvcc::txn_table::TxnTable;
use crate::options::Options;
use crate::reclaim::Reclaimer;
use crate::recovery::{self, PromotionReport, RecoveryReport};
use crate::table::TableInner;

/// Commits between two recomputations of the GC horizon.
pub(crate) const GC_HORIZON_REFRESH_COMMITS: u64 = 32;

pub(crate) use crate::manifest::NamedStores;

pub(crate) struct Engine {
    pub(crate) id: u64,
    pub(crate) options: Options,
    /// Read on every operation; on its own cache line so that writes to the
    /// counters below never evict it.
    pub(crate) closed: CachePadded<AtomicBool>,
    /// The CSN counter, gCSN and the durable marks (`commit::marks`).
    pub(crate) commit: Arc<CommitMarks>,
    /// The log; `None` without a store.
    pub(crate) log: Option<Log>,
    /// A lower bound on every running and future snapshot (see `mvcc::gc`).
    pub(crate) gc_horizon: CachePadded<AtomicU64>,
    pub(crate) versions_retired: CachePadded<AtomicU64>,
    /// Deleted keys waiting for the horizon (`reclaim`).
    pub(crate) reclaim: Reclaimer,
    /// Records holding a replaced version, waiting for the horizon
    /// (`mvcc::gc`).
    pub(crate) retrims: Retrims,
    pub(crate) txns: TxnTable,
    pub(crate) tables: RwLock<Catalog>,
    /// With a log: the manifest chain and the current version. Held while
    /// a new version is written, so versions follow each other.
    pub(crate) manifest: Option<ManifestState>,
    /// What recovery found at open, if the database existed.
    pub(crate) recovery: Option<RecoveryReport>,
    /// What the promotion did, if a replica became this writer.
    pub(crate) promotion: Option<PromotionReport>,
    /// Opened at a point of the past (`Database::open_at`): what was read.
    pub(crate) past: Option<crate::history::past::PastReport>,
    /// With a retention window: the time index (acknowledgments reach it
    /// through `commit.set_time_index`; the publisher and the flushing
    /// thread through this).
    pub(crate) time_index: std::sync::OnceLock<Arc<crate::history::times::TimeIndex>>,
    /// Take a checkpoint at the checkpointer's next wake-up, whatever the
    /// log volume (after a promotion: it drops the sealed logs).
    pub(crate) checkpoint_soon: AtomicBool,
    /// Opened with `open_read_only`: every transaction is read-only.
    pub(crate) read_only: bool,
    /// One checkpoint at a time.
    pub(crate) checkpoint_lock: Mutex<()>,
    /// Offloaded checkpoints: the log marks (each stream's fresh segments,
    /// lane by lane, and the CSN bound below which everything is in older
    /// segments) waiting for an offer at or above their bound.
    pub(crate) checkpoint_marks: Mutex<Vec<(Vec<u64>, Csn)>>,
    /// When offers were last looked for.
    pub(crate) offers_checked: Mutex<Option<Instant>>,
    pub(crate) checkpoint_stats: Mutex<CheckpointStats>,
    /// Wakes the background checkpointer early (close).
    pub(crate) checkpointer_wake: (Mutex<bool>, Condvar),
    /// The catalog holds dropped tables waiting to be freed.
    pub(crate) retired_waiting: AtomicBool,
}

pub(crate) struct ManifestState {
    pub(crate) store: ManifestStore,
    /// The stores, named, for checkpoints.
    pub(crate) stores: Vec<(String, Arc<dyn ObjectStore>)>,
    pub(crate) needed: usize,
    pub(crate) current: Mutex<Manifest>,
}

/// The tables. Ids are positions in the manifest's list and are never
/// used again: a dropped table's id keeps an empty tombstone in `by_id`
/// (so that the log's records of it can be recognised and skipped), and
/// its name can be taken by a new table.
#[derive(Default)]
pub(crate) struct Catalog {
    pub(crate) by_name: HashMap<String, Arc<TableInner>>,
    pub(crate) by_id: Vec<Arc<TableInner>>,
    /// Dropped tables' contents, each with the GC counter read after it
    /// was marked dropped, kept until no transaction can still reach them
    /// (see [`Engine::reclaim_dropped`]).
    pub(crate) retired: Vec<(Csn, Arc<TableInner>)>,
}

impl Engine {
    pub(crate) fn new(
        id: u64,
        options: Options,
        commit: Arc<CommitMarks>,
        log: Option<Log>,
        manifest: Option<ManifestState>,
        recovery: Option<RecoveryReport>,
    ) -> Engine {
        let txns = TxnTable::new(options.max_transactions);
        Engine {
            id,
            options,
            closed: CachePadded::new(AtomicBool::new(false)),
            commit,
            log,
            gc_horizon: CachePadded::new(AtomicU64::new(0)),
            versions_retired: CachePadded::new(AtomicU64::new(0)),
            reclaim: Reclaimer::default(),
            retrims: Retrims::default(),
            txns,
            tables: RwLock::new(Catalog::default()),
            manifest,
            recovery,
            promotion: None,
            past: None,
            time_index: std::sync::OnceLock::new(),
            checkpoint_soon: AtomicBool::new(false),
            read_only: false,
            checkpoint_lock: Mutex::new(()),
            checkpoint_marks: Mutex::new(Vec::new()),
            offers_checked: Mutex::new(None),
            checkpoint_stats: Mutex::new(CheckpointStats::default()),
            checkpointer_wake: (Mutex::new(false), Condvar::new()),
            retired_waiting: AtomicBool::new(false),
        }
    }

    /// [`Engine::new`], with the tables of manifest `m`.
    pub(crate) fn with_tables_of(self, m: &Manifest) -> Result<Engine> {
        self.add_tables(&m.tables, &m.dropped)?;
        Ok(self)
    }

    /// The tables, by id.
    pub(crate) fn tables_by_id(&self) -> Vec<Arc<TableInner>> {
        self.tables.read().by_id.clone()
    }

    /// Bring the catalog up to a manifest's table list (`names`, by id)
    /// and its dropped ids: add the tables not there yet, drop the ones
    /// newly dropped. A name that differs from the table of its id is
    /// `Corrupt`: the list only ever grows.
    pub(crate) fn add_tables(&self, names: &[String], dropped: &[u32]) -> Result<()> {
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
                    // A dropped id never takes the name: a database
                    // restored from before a drop may name, at a later id,
                    // a table of the same name that is not there yet.
                    if !dropped.contains(&(i as u32)) {
                        cat.by_name.insert(name.clone(), t);
                    }
                }
            }
        }
        for &id in dropped {
            match cat.by_id.get(id as usize) {
                Some(t) if t.is_dropped() => {}
                Some(_) => self.retire_table(&mut cat, id),
                None => {
                    return Err(Error::Corrupt(format!(
                        "the manifest drops table id {id}, but names only {}",
                        names.len()
                    )));
                }
            }
        }
        Ok(())
    }

    pub(crate) fn new_table(&self, id: u32, name: &str) -> Arc<TableInner> {
        Arc::new(TableInner {
            id,
            name: name.to_owned(),
            db_id: self.id,
            index: OrderedIndex::new(self.options.point_index),
            records: OidArray::new(),
            dropped: AtomicBool::new(false),
        })
    }

    /// Take table `id` out of the catalog: mark it dropped (from here on
    /// no operation reaches it), leave an empty tombstone at its id, and
    /// keep its contents until no running transaction can hold a
    /// reference into them.
    pub(crate) fn retire_table(&self, cat: &mut Catalog, id: u32) {
        let old = Arc::clone(&cat.by_id[id as usize]);
        old.dropped.store(true, Ordering::SeqCst);
        let tombstone = self.new_table(id, &old.name);
        tombstone.dropped.store(true, Ordering::SeqCst);
        cat.by_id[id as usize] = tombstone;
        if cat.by_name.get(&old.name).is_some_and(|t| t.id == id) {
            cat.by_name.remove(&old.name);
        }
        // Read after the mark: a transaction whose snapshot is above this
        // began after the mark, so it was refused the table.
        let mark = self.gc_counter().load(Ordering::SeqCst);
        cat.retired.push((mark, old));
        self.reclaim_dropped_in(cat);
    }

    /// Free the dropped tables that no transaction can reach any more.
    /// A transaction holds references into a table only between an
    /// operation that passed the dropped check and its end, and it holds
    /// its slot in the transaction table all that time: so a dropped
    /// table is unreachable once the GC horizon (the least snapshot of the
    /// running transactions) is above the counter read after the mark, or
    /// once no transaction runs at all.
    fn reclaim_dropped_in(&self, cat: &mut Catalog) {
        if cat.retired.is_empty() {
            return;
        }
        let horizon = self.txns.horizon(self.gc_counter());
        let idle = !self.txns.any_running();
        let (free, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut cat.retired)
            .into_iter()
            .partition(|(mark, _)| idle || horizon > *mark);
        cat.retired = keep;
        self.retired_waiting.store(!cat.retired.is_empty(), Ordering::SeqCst);
        if !free.is_empty() {
            // Freeing a large table takes a while: not on the caller's time.
            std::thread::spawn(move || drop(free));
        }
    }

    /// [`Engine::reclaim_dropped_in`], if a dropped table is waiting and
    /// the catalog is free (called as the GC horizon is refreshed).
    pub(crate) fn reclaim_dropped(&self) {
        if self.retired_waiting.load(Ordering::Relaxed)
            && let Some(mut cat) = self.tables.try_write()
        {
            self.reclaim_dropped_in(&mut cat);
        }
    }

    /// Write the next manifest version: the current one changed by `f`.
    /// Another writer's version there means this one is fenced: the
    /// database is poisoned and acknowledges nothing more.
    pub(crate) fn publish(&self, f: impl FnOnce(&mut Manifest)) -> Result<()> {
        self.publish_ending(None, f)
    }

    /// [`Engine::publish`] of a version that starts a new epoch's log after
    /// a recovery: `decision` is the replay decision that ended the old
    /// one, kept in the history of a database with a retention window.
    pub(crate) fn publish_ending(
        &self,
        decision: Option<&crate::manifest::SealedLog>,
        f: impl FnOnce(&mut Manifest),
    ) -> Result<()> {
        let st = self.manifest.as_ref().ok_or_else(|| Error::InvalidArgument("no log".into()))?;
        let mut cur = milliscale_seam::lock(&st.current);
        let mut next = cur.clone();
        f(&mut next);
        // A base published now is reached by any time from `now` on: the
        // sample covers every CSN handed out so far.
        let now = self.time_index.get().map(|t| t.sample(&self.commit.next_csn));
        let now = now.unwrap_or_else(|| crate::history::times::Sample {
            ms: crate::history::times::now_ms(),
            csn: self.commit.next_csn.load(std::sync::atomic::Ordering::SeqCst).saturating_sub(1),
        });
        let retention = self.options.retention.map(|d| d.as_millis() as u64);
        let lists = crate::history::on_publish(&cur, &mut next, retention, now, decision);
        crate::history::put_chunk_lists(
            &st.stores,
            st.needed,
            self.options.store_deadline,
            &lists,
        )?;
        next.version += 1;
        match st.store.create(&next) {
            Ok(()) => {
                // A manifest version written, for a simulation's trace.
                milliscale_seam::trace(&[&b"manifest"[..], &next.version.to_le_bytes()]);
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
    pub(crate) fn rebuild(
        &self,
        named: &[(String, Arc<dyn ObjectStore>)],
        checkpoint: Option<&crate::manifest::CheckpointRef>,
        plan: &recovery::ReplayPlan,
        report: &mut RecoveryReport,
    ) -> Result<()> {
        let threads = self.options.recovery_threads;
        let tables = self.tables.read().by_id.clone();
        let started = milliscale_seam::now();
        // The plan is folded first, so that the load merges each row with
        // what the plan does to its key; the replay's time is the rest.
        let (mut rows, mut loading) = (0, Duration::ZERO);
        let load = checkpoint.map(|c| {
            |folded: &recovery::replay::Folded<'_>| {
                let at = milliscale_seam::now();
                rows = checkpoint::load(
                    named,
                    c,
                    &tables,
                    threads,
                    self.options.store_deadline,
                    folded,
                )?;
                loading = at.elapsed_now();
                Ok(())
            }
        });
        let stats = recovery::replay::apply(plan, &tables, threads, load)?;
        report.checkpoint_rows_loaded = rows;
        report.timings.load_checkpoint = loading;
        report.timings.replay = started.elapsed_now() - loading;
        report.records_applied = stats.records;
        report.keys_installed = stats.keys;
        Ok(())
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
        self.reclaim_dropped();
        h
    }
}

pub(crate) fn check_table_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > TABLE_NAME_BYTES_MAX {
        return Err(Error::InvalidArgument(format!(
            "table names must be 1..={TABLE_NAME_BYTES_MAX} bytes, got {}",
            name.len()
        )));
    }
    Ok(())
}
