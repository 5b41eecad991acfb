//! Checkpoints (Milliscale §4.4): on demand, and in the background by log
//! volume or interval; adopting the checkpoints read replicas offer; and
//! what a checkpoint makes obsolete.

use milliscale_seam::Elapsed as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use objstore::ObjectStore;

use super::Database;
use crate::checkpoint::{self, CheckpointStats, ChunkWriter};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::mvcc::Csn;
use crate::options::TxnOptions;

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

impl Database {
    pub(super) fn start_checkpointer(inner: Engine) -> Database {
        let db = Database::wrap(inner);
        if db.inner.time_index.get().is_some() {
            let inner = Arc::clone(&db.inner);
            let handle =
                milliscale_seam::spawn("ms-time-index".into(), move || inner.run_time_flusher())
                    .ok();
            *db.time_flusher.lock() = handle;
        }
        let o = &db.inner.options;
        if o.checkpoint_log_bytes > 0
            || o.checkpoint_interval.is_some()
            || o.metrics_interval.is_some()
        {
            let inner = Arc::clone(&db.inner);
            let handle =
                milliscale_seam::spawn("ms-checkpointer".into(), move || inner.run_checkpointer())
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
}

impl Engine {
    /// Scan every table at the durable snapshot and write the chunks.
    pub(super) fn write_checkpoint(&self) -> Result<crate::manifest::CheckpointRef> {
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
        for t in tables.iter().filter(|t| !t.is_dropped()) {
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
        let _one = milliscale_seam::lock(&self.checkpoint_lock);
        let _span = tracing::info_span!("checkpoint").entered();
        let started = milliscale_seam::now();
        let log_bytes = log.bytes_written();
        // 1. Fresh segments from here on, and the CSN bound they give.
        let marks: Vec<(Vec<u64>, Csn)> =
            log.streams().iter().map(|s| s.mark_checkpoint()).collect();
        let bound = marks.iter().map(|m| m.1).max().unwrap_or(0);
        // 2. Wait until everything below the bound is durable.
        let deadline = milliscale_seam::now() + self.options.store_deadline;
        while self.commit.gcsn.load(Ordering::SeqCst) < bound {
            if let Some(e) = self.commit.poison_error() {
                return Err(e);
            }
            if milliscale_seam::now() > deadline {
                return Err(Error::StoreUnavailable(format!(
                    "checkpoint: gCSN did not reach {bound} within {:?}",
                    self.options.store_deadline
                )));
            }
            self.commit.wake_committer();
            milliscale_seam::sleep(Duration::from_millis(1));
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
        milliscale_seam::trace(&[&b"checkpoint"[..], &cref.csn.to_le_bytes()]);
        self.after_checkpoint(&cref, 0, started, log_bytes, false);
        tracing::info!(
            csn = cref.csn,
            rows = cref.rows,
            bytes = cref.bytes,
            ms = started.elapsed_now().as_secs_f64() * 1e3,
            "checkpoint written and published"
        );
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
        let current = milliscale_seam::lock(&st.current).clone();
        let (lists, deletes) =
            crate::history::truncate(&st.stores, st.needed, &current, self.options.bugs);
        // The manifest put on each store, and the lists.
        let puts = st.stores.len() as u64 + lists + requests;
        let version = milliscale_seam::lock(&st.current).version;
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
        stats.busy += started.elapsed_now();
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
        let _one = milliscale_seam::lock(&self.checkpoint_lock);
        let started = milliscale_seam::now();
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
        if milliscale_seam::lock(&st.current).checkpoint_wanted != want {
            self.publish(|m| m.checkpoint_wanted = want)?;
        }
        let (offers, mut requests) = checkpoint::list_offers(&st.stores, deadline);
        let durable = self.commit.gcsn.load(Ordering::SeqCst);
        let (current, current_starts) = {
            let m = milliscale_seam::lock(&st.current);
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
        stats.busy += started.elapsed_now();
        Ok(None)
    }

    /// Write the time index's new samples out (every
    /// `history::times::FLUSH_EVERY`, or `now`), counted with the
    /// checkpoints' requests.
    pub(crate) fn flush_time_index(&self, now: bool) {
        let (Some(t), Some(st)) = (self.time_index.get(), self.manifest.as_ref()) else {
            return;
        };
        let durable = self.commit.gcsn.load(Ordering::SeqCst);
        let puts = t.flush(&st.stores, self.options.store_deadline, now, durable);
        if puts > 0 {
            let mut stats = self.checkpoint_stats.lock();
            stats.put_requests += puts;
            if let Some(c) = price(&st.stores, puts, 0) {
                *stats.cost_usd.get_or_insert(0.0) += c;
            }
        }
    }

    /// The time index's thread: its new samples out every second, until
    /// close (which writes the rest).
    fn run_time_flusher(&self) {
        let (stop, cv) = &self.checkpointer_wake;
        loop {
            {
                let mut stop = stop.lock();
                if !*stop {
                    milliscale_seam::cv_wait_for(cv, &mut stop, Duration::from_millis(100));
                }
                if *stop {
                    return;
                }
            }
            self.flush_time_index(false);
        }
    }

    /// The background thread: checkpoints on log volume or interval, and
    /// the metrics every `metrics_interval`.
    fn run_checkpointer(&self) {
        let Some(log) = &self.log else { return };
        let (stop, cv) = &self.checkpointer_wake;
        let mut last = milliscale_seam::now();
        let mut published = milliscale_seam::now();
        let o = &self.options;
        let checkpoints = o.checkpoints_in_background();
        loop {
            {
                let mut stop = stop.lock();
                if !*stop {
                    milliscale_seam::cv_wait_for(cv, &mut stop, Duration::from_millis(100));
                }
                if *stop {
                    crate::telemetry::publish_database(self);
                    return;
                }
            }
            if o.metrics_interval.is_some_and(|d| published.elapsed_now() >= d) {
                crate::telemetry::publish_database(self);
                published = milliscale_seam::now();
            }
            if !checkpoints {
                continue;
            }
            let (since, last_bytes) = {
                let s = self.checkpoint_stats.lock();
                (log.bytes_written() - s.log_bytes_at_last, s.last_bytes)
            };
            let soon = self.checkpoint_soon.swap(false, Ordering::SeqCst);
            let due = (o.checkpoint_log_bytes > 0 && since >= o.checkpoint_log_bytes)
                || past_ratio(since, last_bytes, o.checkpoint_log_ratio)
                || o.checkpoint_interval.is_some_and(|d| last.elapsed_now() >= d && since > 0)
                || soon;
            if !due {
                continue;
            }
            if o.checkpoint_offload && !soon {
                // Look for offers at most once a second (a LIST per store).
                let mut checked = self.offers_checked.lock();
                if checked.is_some_and(|t| t.elapsed_now() < Duration::from_secs(1)) {
                    continue;
                }
                *checked = Some(milliscale_seam::now());
                drop(checked);
                match self.adopt_offered() {
                    Ok(Some(_)) => last = milliscale_seam::now(),
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
                Ok(_) => last = milliscale_seam::now(),
                Err(e) => {
                    if self.commit.is_poisoned() || self.check_open().is_err() {
                        return;
                    }
                    tracing::warn!("background checkpoint failed, will retry: {e}");
                    last = milliscale_seam::now();
                }
            }
        }
    }
}

/// `Options::checkpoint_log_ratio`: has the log since the last checkpoint
/// (`since` bytes) grown past `ratio` times that checkpoint's size
/// (`last_bytes`, the live data as it measured it), and past the floor?
fn past_ratio(since: u64, last_bytes: u64, ratio: f64) -> bool {
    ratio > 0.0
        && since as f64
            >= (ratio * last_bytes as f64)
                .max(crate::options::CHECKPOINT_LOG_RATIO_FLOOR_BYTES as f64)
}

#[cfg(test)]
mod tests {
    use super::past_ratio;

    #[test]
    fn the_ratio_checkpoints_once_the_log_outgrows_the_live_data() {
        const MIB: u64 = 1 << 20;
        assert!(!past_ratio(10_000 * MIB, 100 * MIB, 0.0), "off");
        assert!(!past_ratio(99 * MIB, 100 * MIB, 1.0));
        assert!(past_ratio(100 * MIB, 100 * MIB, 1.0));
        assert!(past_ratio(100 * MIB, 200 * MIB, 0.5) && !past_ratio(99 * MIB, 200 * MIB, 0.5));
        // A small database waits for the floor, not for a few writes.
        assert!(!past_ratio(MIB, 0, 1.0) && !past_ratio(15 * MIB, MIB, 1.0));
        assert!(past_ratio(16 * MIB, MIB, 1.0));
    }
}
