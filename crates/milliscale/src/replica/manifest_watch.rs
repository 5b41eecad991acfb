//! The follower's side of the manifest: noticing a new version, and what
//! each change means for a replica (new tables, a checkpoint past what it
//! applied, a new writer's log, a sealed log), and catching up from a
//! checkpoint when the log it needs is gone. The rules are in `follow`'s
//! module docs, "The manifest".

use milliscale_seam::Elapsed as _;

use objstore::StoreError;

use super::apply;
use super::follow::*;
use crate::error::{Error, Result};
use crate::keys::manifest_key;
use crate::manifest::{Manifest, ManifestStore};

impl Follower {
    /// Has the manifest a newer version? Writers delete versions older
    /// than the one before the latest, so either the next version is there
    /// or the replica's own is gone. One or two HEADs per store, until one
    /// answers; and a full read (a LIST) every [`FULL_MANIFEST_READ_EVERY`]
    /// checks, in case deletes went out of order.
    pub(super) fn manifest_changed(&mut self) -> bool {
        self.checks += 1;
        if self.checks.is_multiple_of(FULL_MANIFEST_READ_EVERY) {
            return true;
        }
        let next = manifest_key(self.manifest.version + 1);
        let mine = manifest_key(self.manifest.version);
        for (_, s) in &self.stores {
            self.count(1, 0, 0);
            match s.head(&next) {
                Ok(_) => return true,
                Err(StoreError::NotFound(_)) => {}
                Err(_) => continue,
            }
            self.count(1, 0, 0);
            return match s.head(&mine) {
                Ok(_) => false,
                Err(StoreError::NotFound(_)) => true,
                // Unsure: read it.
                Err(_) => true,
            };
        }
        true
    }

    /// Check the manifest, and act on a new version (see the module docs).
    pub(super) fn follow_manifest(&mut self) -> Result<()> {
        let forced = std::mem::take(&mut self.check_manifest);
        let every = if self.fenced {
            self.opts.manifest_every.min(FENCED_MANIFEST_EVERY)
        } else if self.shared.active() {
            self.opts.manifest_every
        } else {
            self.opts.manifest_every.max(self.opts.poll_max * IDLE_MANIFEST_POLLS)
        };
        self.next_manifest_check = milliscale_seam::now() + every;
        if !forced && !self.manifest_changed() {
            return Ok(());
        }
        let ms = ManifestStore::new(self.stores.clone(), self.needed, self.deadline);
        let n = self.stores.len() as u64;
        self.count(n, n, 0);
        self.shared.counters.lock().manifest_reads += 1;
        self.manifest_reads += 1;
        let m = match ms.read_latest() {
            Ok(Some(m)) => m,
            Ok(None) => {
                return Err(Error::NoDatabase(format!(
                    "{}: the manifest is gone",
                    self.stores.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
                )));
            }
            Err(e @ Error::Corrupt(_)) => return Err(e),
            Err(e) => {
                // Try again at the next check.
                self.shared.counters.lock().last_error = Some(e.to_string());
                return Ok(());
            }
        };
        if m.version < self.manifest.version {
            return Ok(());
        }
        self.db.add_tables(&m.tables, &m.dropped)?;
        self.tables = self.db.tables_by_id();
        let mine = m.logs().find(|(l, _)| l.epoch == self.log.epoch);
        if let Some((_, Some(seal))) = mine {
            // A promoted replica took over and sealed this log: the tails
            // read on to the fence, and `advance` applies the seal's
            // decision, then moves to the next log.
            if self.seal.is_none() {
                tracing::info!(
                    "the log of epoch {} was sealed at CSN {} by a new writer",
                    seal.log.epoch,
                    seal.max_csn
                );
            }
            let seal = seal.clone();
            let behind = seal.from > self.applied;
            let moved = seal.log.chains().any(|c| seal.log.start(c) != self.log.start(c));
            if behind || moved {
                // A checkpoint of its writer moved the log's start, maybe
                // past the replica: catch up from it first, as below.
                let old = self.stop_tails();
                self.drain()?;
                self.advance()?;
                if behind && !self.try_catch_up(&m)? {
                    return Ok(());
                }
                self.log = seal.log.clone();
                self.seal = Some(seal);
                self.manifest = m;
                self.publish();
                self.start_tails(Some(old));
                return Ok(());
            }
            self.seal = Some(seal);
            self.manifest = m;
            self.publish();
            return Ok(());
        }
        if mine.is_none() {
            // A new writer's log, and ours is gone from the manifest (the
            // new writer's checkpoint covers it). Take in what the old
            // tails read, then move to what the new writer recovered.
            let old = self.stop_tails();
            drop(old);
            self.drain()?;
            self.advance()?;
            let from = m.replay_from();
            if self.applied > from {
                return Err(Error::Corrupt(format!(
                    "the replica applied CSNs up to {}, but the writer of epoch {} recovered \
                     only up to {from}",
                    self.applied, m.log.epoch
                )));
            }
            if self.applied < from && !self.try_catch_up(&m)? {
                return Ok(());
            }
            self.pending.clear();
            self.fenced = false;
            let (log, seal) = m.logs().next().map(|(l, s)| (l.clone(), s.cloned())).expect("a log");
            self.log = log;
            self.seal = seal;
            self.manifest = m;
            self.shared.counters.lock().epochs_followed += 1;
            self.publish();
            self.start_tails(None);
            return Ok(());
        }
        // The same log, still current.
        let behind = m.log_from() > self.applied;
        let moved = m.log.chains().any(|c| m.log.start(c) != self.log.start(c)) || behind;
        if !moved {
            self.manifest = m;
            self.publish();
            return Ok(());
        }
        // A checkpoint moved the log's start: tails behind it move up,
        // after the replica reaches the checkpoint.
        let old = self.stop_tails();
        self.drain()?;
        self.advance()?;
        if m.log_from() > self.applied && !self.try_catch_up(&m)? {
            return Ok(());
        }
        self.log = m.log.clone();
        self.manifest = m;
        self.publish();
        self.start_tails(Some(old));
        Ok(())
    }

    /// The sealed log followed is done (everything up to its seal's last
    /// CSN is applied): follow the manifest's next log.
    pub(super) fn next_log(&mut self) -> Result<()> {
        let next = self
            .manifest
            .logs()
            .skip_while(|(l, _)| l.epoch != self.log.epoch)
            .nth(1)
            .map(|(l, s)| (l.clone(), s.cloned()));
        let Some((log, seal)) = next else {
            return Err(Error::Corrupt(format!(
                "the manifest seals the log of epoch {} but names no log after it",
                self.log.epoch
            )));
        };
        // What the old tails still hold is beyond the seal: dropped.
        self.stop_tails();
        self.drain()?;
        self.pending.clear();
        let from = seal.as_ref().map_or_else(|| self.manifest.log_from(), |s| s.from);
        if from != self.applied {
            return Err(Error::Corrupt(format!(
                "the log of epoch {} starts at CSN {from}, but the one sealed before it ends at {}",
                log.epoch,
                self.applied - 1
            )));
        }
        self.log = log;
        self.seal = seal;
        self.fenced = false;
        self.shared.counters.lock().epochs_followed += 1;
        self.start_tails(None);
        Ok(())
    }

    /// Handle every message still queued (tails stopped).
    pub(super) fn drain(&mut self) -> Result<()> {
        while let Ok(m) = self.rx.try_recv() {
            self.handle(m)?;
        }
        Ok(())
    }

    /// [`Follower::catch_up`]; `Ok(false)` if a chunk was missing, which
    /// a writer's newer checkpoint explains (it deletes the older one): the
    /// manifest is read again at once, and the caller stops here. Missing
    /// chunks [`CATCH_UP_TRIES`] times in a row is damage.
    pub(super) fn try_catch_up(&mut self, m: &Manifest) -> Result<bool> {
        match self.catch_up(m) {
            Ok(()) => {
                self.catch_up_failures = 0;
                Ok(true)
            }
            Err(Error::Corrupt(e)) if self.catch_up_failures + 1 < CATCH_UP_TRIES => {
                self.catch_up_failures += 1;
                self.shared.counters.lock().last_error = Some(e);
                self.check_manifest = true;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Move to `m`'s checkpoint (the replica's applied CSN is below it).
    pub(super) fn catch_up(&mut self, m: &Manifest) -> Result<()> {
        let Some(cref) = &m.checkpoint else {
            return Err(Error::Corrupt(format!(
                "the log starts at CSN {} with no checkpoint, past the replica's {}",
                m.replay_from(),
                self.applied
            )));
        };
        let started = milliscale_seam::now();
        let threads = self.db.options.recovery_threads;
        let chunks = crate::parallel::parallel_map(&cref.chunks, threads, |c| {
            crate::checkpoint::fetch_chunk(&self.stores, c, self.deadline)
        });
        let mut rows = Vec::with_capacity(chunks.len());
        for c in chunks {
            let c = c?;
            if c.csn != cref.csn {
                return Err(Error::Corrupt(format!(
                    "a chunk of checkpoint {} belongs to checkpoint {}",
                    cref.csn, c.csn
                )));
            }
            rows.push((c.table, c.rows));
        }
        let horizon = self.db.refresh_gc_horizon();
        let done = apply::catch_up(&self.tables, cref.csn, &rows, horizon)?;
        self.count(cref.chunks.len() as u64, 0, cref.bytes);
        tracing::info!(
            "replica caught up to checkpoint {} from CSN {} in {:?}: {} rows, {} changed, {} deleted",
            cref.csn,
            self.applied,
            started.elapsed_now(),
            done.rows,
            done.changed,
            done.deleted
        );
        super::tap::gap(&self.tap, self.applied, m.replay_from());
        self.applied = m.replay_from();
        self.pending.retain(|csn, _| *csn >= self.applied);
        {
            let mut c = self.shared.counters.lock();
            c.catch_ups += 1;
            c.catch_up_rows += done.rows;
        }
        self.publish();
        Ok(())
    }
}
