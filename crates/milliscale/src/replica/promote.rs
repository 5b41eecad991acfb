//! Promotion: a replica becomes the writer without reloading the database
//! (the hot standby).
//!
//! A replica already holds the database up to its applied CSN `P`. To take
//! over it does what recovery does, but only for the part of the log it
//! has not applied, and it writes no checkpoint:
//!
//! 1. **Catch up with the manifest**, so that it follows the current
//!    writer's log (not a sealed one, not an older epoch).
//! 2. **Claim**: create the next manifest version with the next epoch. From
//!    here the old writer can publish nothing (`Fenced`).
//! 3. **Fence** the old writer's log on every store (`recovery::fence`), so
//!    that no append can land after what the tails will read.
//! 4. **Drain**: the tails read every chain up to its fence part.
//! 5. **Decide** with the replay rule on the entries that a quorum of
//!    stores showed: the contiguous prefix from `P`, and the commits above
//!    it whose DSN is below it. An acknowledged commit is in: its CSN and
//!    everything up to its DSN were on a quorum. Every entry decided on is
//!    on a quorum, so a later recovery, which reads any quorum, finds them
//!    all again (`recovery::plan_sealed` checks it does). Apply them.
//! 6. **Seal and publish**: the next manifest version keeps the old log
//!    as a [`SealedLog`] (the decision) and names the new writer's log,
//!    which starts above every CSN seen. Then commits are accepted. The
//!    first checkpoint after it (the checkpointer takes one soon) covers
//!    the sealed log and drops it.
//!
//! Failover time is thus a few store round trips (a manifest read, the
//! claim, the fence, the last polls, the publish) plus applying what the
//! replica had not applied yet, whatever the size of the database.

use milliscale_seam::Elapsed as _;
use std::time::Duration;

use super::follow::Follower;
use crate::db::Database;
use crate::error::{Error, Result};
use crate::log::record::Entry;
use crate::manifest::{ManifestStore, SealedLog};
use crate::mvcc::Csn;
use crate::recovery::PromotionReport;

/// Claims lost in a row to the old writer's own manifest updates (a
/// checkpoint, a new table) before promotion gives up.
const CLAIM_TRIES: u32 = 4;

impl Follower {
    /// Make this replica's database the writer; see the module docs.
    pub(crate) fn promote(mut self) -> Result<Database> {
        let started = milliscale_seam::now();
        let options = self.db.options.clone();
        let mut report = PromotionReport { applied_before: self.applied, ..Default::default() };
        let ms = ManifestStore::new(self.stores.clone(), self.needed, self.deadline);
        let stores = crate::log::open_stores(&options)?;
        let modes: Vec<_> = stores.iter().map(|s| s.mode()).collect();
        // 1 and 2: be current, then claim the next version.
        let mut tries = 0;
        let claim = loop {
            self.catch_up_with_manifest(&ms)?;
            report.timings.catch_up = started.elapsed_now();
            let mut claim = self.manifest.clone();
            claim.version += 1;
            claim.epoch += 1;
            match ms.create(&claim) {
                Ok(()) => break claim,
                Err(Error::Fenced(e)) if tries + 1 < CLAIM_TRIES => {
                    // The old writer (or another promoter) wrote that
                    // version: read it and try again.
                    tries += 1;
                    tracing::info!("promotion: claim lost ({e}); reading the manifest again");
                }
                Err(e) => return Err(e),
            }
        };
        report.timings.claim = started.elapsed_now() - report.timings.catch_up;
        report.old_epoch = self.log.epoch;
        report.new_epoch = claim.epoch;
        // 3. Fence.
        let fenced_at = milliscale_seam::now();
        crate::recovery::fence_stores(
            &self.stores,
            &modes,
            self.needed,
            &self.log,
            claim.epoch,
            self.deadline,
        )?;
        report.timings.fence = fenced_at.elapsed_now();
        // 4. Drain every chain to its fence.
        let drained_at = milliscale_seam::now();
        self.drain_to_fences()?;
        let first_segment =
            crate::recovery::next_free_segment(&self.stores, &self.log, self.deadline);
        report.timings.drain = drained_at.elapsed_now();
        // 5. Decide and apply.
        let applied_at = milliscale_seam::now();
        let seal = self.decide(first_segment);
        report.prefix = seal.prefix;
        report.above = seal.above.len();
        report.dropped = self
            .pending
            .range(self.applied..)
            .filter(|(c, (e, _, _))| matches!(e, Entry::Commit { .. }) && !seal.includes(**c))
            .count();
        report.applied = self.apply_sealed(&seal)?;
        report.timings.apply = applied_at.elapsed_now();
        report.base_csn = seal.max_csn + 1;
        // 6. The new log, above every CSN seen; publish and go.
        let new_log = crate::db::fresh_log(&options, claim.epoch, seal.max_csn + 1, first_segment);
        tracing::info!(
            "promotion: epoch {} sealed at CSN {} (prefix {}, {} above, {} dropped); writing \
             as epoch {} from CSN {}",
            report.old_epoch,
            seal.max_csn,
            seal.prefix,
            report.above,
            report.dropped,
            claim.epoch,
            new_log.base_csn
        );
        let tables = self.db.tables_by_id();
        let id = self.db.id;
        Database::promoted(id, options, tables, stores, claim, seal, new_log, report, started)
    }

    /// Follow the manifest until the replica follows its current log with
    /// no seal pending.
    fn catch_up_with_manifest(&mut self, ms: &ManifestStore) -> Result<()> {
        let until = milliscale_seam::now() + self.deadline;
        loop {
            self.drain()?;
            self.advance()?;
            let m = ms
                .read_latest()?
                .ok_or_else(|| Error::NoDatabase("promotion: the manifest is gone".to_owned()))?;
            let current = m.version == self.manifest.version;
            if current && self.seal.is_none() {
                return Ok(());
            }
            if milliscale_seam::now() > until {
                return Err(Error::StoreUnavailable(format!(
                    "promotion: the replica did not reach the current log (epoch {}) within {:?}",
                    m.log.epoch, self.deadline
                )));
            }
            if current {
                // Finishing a sealed log: wait for the tails.
                self.wake_tails();
                self.receive(Duration::from_millis(10))?;
            } else {
                self.check_manifest = true;
                self.follow_manifest()?;
            }
        }
    }

    /// Wait until every chain's tail on every store met its fence part; or,
    /// once the store deadline has passed, on a quorum of stores.
    fn drain_to_fences(&mut self) -> Result<()> {
        let started = milliscale_seam::now();
        let chains: Vec<_> = self.log.chains().collect();
        let n = self.stores.len();
        loop {
            self.wake_tails();
            self.drain()?;
            let fenced = |c| (0..n).filter(|s| self.fenced_tails.contains(&(*s, c))).count();
            let least = chains.iter().map(|c| fenced(*c)).min().unwrap_or(n);
            if least == n || (least >= self.needed && started.elapsed_now() > self.deadline) {
                return Ok(());
            }
            if started.elapsed_now() > self.deadline * 2 {
                return Err(Error::StoreUnavailable(format!(
                    "promotion: the old log's fence was read on {least} of {n} stores, \
                     {} needed",
                    self.needed
                )));
            }
            self.receive(Duration::from_millis(2))?;
        }
    }

    /// The replay rule on what a quorum of stores showed: the seal of the
    /// followed log, whose next epoch's segments start at `end_segment`.
    fn decide(&self, end_segment: u64) -> SealedLog {
        let quorum = |stores: u8| stores.count_ones() as usize >= self.needed;
        let mut prefix = self.applied;
        while self.pending.get(&prefix).is_some_and(|(_, s, _)| quorum(*s)) {
            prefix += 1;
        }
        let above: Vec<Csn> = self
            .pending
            .range(prefix..)
            .filter(|(_, (e, s, _))| {
                quorum(*s) && matches!(e, Entry::Commit { dsn, .. } if *dsn < prefix)
            })
            .map(|(c, _)| *c)
            .collect();
        // The next log starts above every CSN seen, decided or not.
        let top = self.pending.keys().next_back().map_or(0, |c| c + 1);
        let base = top.max(self.seen_csn()).max(prefix).max(self.applied);
        SealedLog {
            log: self.log.clone(),
            end_segment,
            from: self.manifest.log_from(),
            prefix,
            above,
            max_csn: base - 1,
        }
    }

    /// Apply the decided entries from the applied CSN up to the seal's
    /// last; returns how many were applied.
    fn apply_sealed(&mut self, seal: &SealedLog) -> Result<u64> {
        let horizon = self.db.refresh_gc_horizon();
        let tables = self.db.tables_by_id();
        let mut batch = Vec::new();
        for csn in self.applied..=seal.max_csn {
            if !seal.includes(csn) {
                continue;
            }
            let (e, _, _) = self.pending.remove(&csn).ok_or_else(|| {
                Error::Corrupt(format!("promotion: decided entry {csn} is not at hand"))
            })?;
            batch.push(e);
        }
        let n = batch.len() as u64;
        super::apply::apply_batch(
            &tables,
            &batch,
            horizon,
            self.opts.apply_threads,
            self.opts.apply_parallel_min,
            &self.db.retrims,
            false,
        )?;
        super::apply::queue_deletes(&tables, &batch, &self.db.reclaim);
        self.applied = seal.max_csn + 1;
        self.pending.clear();
        self.stop_tails();
        Ok(n)
    }
}
