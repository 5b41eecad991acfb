//! Promotion: a read replica becomes the writer (see `replica::promote`
//! for the steps; this builds the database it hands over).

use milliscale_seam::Elapsed as _;
use std::sync::Arc;
use std::time::Instant;

use super::Database;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;

use crate::commit::CommitMarks;
use crate::engine::{Engine, ManifestState, NamedStores};
use crate::error::Result;
use crate::log::{Log, OpenStore};
use crate::manifest::{LogRef, Manifest, ManifestStore, SealedLog};
use crate::options::Options;
use crate::recovery::PromotionReport;
use crate::table::TableInner;

impl Database {
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
        let commit = Arc::new(CommitMarks::new(groups, options.tracking, true, new_log.base_csn));
        let times = super::open::start_time_index(&options, &named, new_log.epoch, &commit);
        let log = Log::start(&options, Arc::clone(&commit), id, stores, &new_log)?;
        let state = ManifestState { store: ms, stores: named, needed, current: Mutex::new(claim) };
        let mut inner = Engine::new(id, options, commit, Some(log), Some(state), None);
        if let Some(t) = times {
            let _ = inner.time_index.set(t);
        }
        {
            let mut cat = inner.tables.write();
            for t in tables {
                if !t.is_dropped() {
                    cat.by_name.insert(t.name.clone(), Arc::clone(&t));
                }
                cat.by_id.push(t);
            }
        }
        let published = milliscale_seam::now();
        inner.publish(|m| {
            m.sealed.push(seal.clone());
            m.log = new_log.clone();
            m.checkpoint_wanted = None;
        })?;
        report.timings.publish = published.elapsed_now();
        report.timings.total = started.elapsed_now();
        inner.checkpoint_soon.store(true, Ordering::SeqCst);
        inner.promotion = Some(report);
        Ok(Database::start_checkpointer(inner))
    }

    /// What the promotion did, if a replica became this writer
    /// (`Replica::promote`).
    pub fn promotion_report(&self) -> Option<&PromotionReport> {
        self.inner.promotion.as_ref()
    }
}
