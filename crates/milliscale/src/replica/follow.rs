//! The follower: the thread that keeps a replica's tables in step with the
//! log, and the tail threads that read it.
//!
//! **Tail threads.** One per (store, chain) of the writer's live log, each
//! polling its chain ([`ChainTail`]) and sending what it read to the
//! follower. While the database is active (any tail found something
//! within the last [`ACTIVE_WINDOW`]) a tail polls as the writer flushes,
//! weighing a read's price against the waiting it saves: every
//! `sqrt(2 g / (λ r))`, with `g` the store's GET price, `λ` the replica's
//! `millisecond_price` and `r` the transactions a second on its chain or
//! the average over the log's chains, whichever is higher (`EventRate`s
//! of what the tails found), within `poll_min..=poll_max`. So a replica's
//! reads grow with the square root of what the writer commits. When the database is idle, each empty poll doubles the
//! interval up to `poll_max`, and a poll is one request: the tails of a
//! store share the write mode one of them learned, and an idle tail looks
//! either at its segment or for the next one, in turn
//! ([`ChainTail::poll_idle`]). The manifest is checked every
//! `manifest_every` while active and every [`IDLE_MANIFEST_POLLS`]
//! `poll_max` while idle; an idle check's requests are paid back by idle
//! tails skipping as many polls, so an idle replica sends at most one
//! request per chain per `poll_max`.
//!
//! **The replay rule, continuously.** An entry counts once `needed` stores
//! have shown it (the writer's quorum: a part on fewer stores may not
//! survive a crash of the writer). With `P` the applied CSN, the follower
//! applies entry `P` as soon as it counts, and so on: every CSN below `P`
//! is in the log (commit or abort), so every commit below `P` is one that
//! recovery would replay whatever happens to the writer (its DSN is below
//! its CSN, so below `P`). Entries above a missing CSN wait. The replica
//! never applies what recovery could drop, and its CSN counter, which its
//! readers' snapshots come from, moves to `P` only after the versions
//! below `P` are in place.
//!
//! **The manifest.** Read at start, then checked every `manifest_every`
//! (a HEAD of the next version), and at once when a tail meets a fence
//! part or a deleted segment, or an entry names a table not yet known:
//! - new tables are added;
//! - a checkpoint past `P` (the replica fell behind the truncation point,
//!   or a new writer recovered) moves the replica to it
//!   ([`super::apply::catch_up`]);
//! - tails behind their chain's first live segment move to it;
//! - a new writer's log (a new epoch) replaces every tail. The new
//!   writer's recovery wrote a checkpoint of what it replayed, and `P` is
//!   never above it (everything below `P` was on a quorum of stores, so
//!   recovery read it);
//! - unless the new writer was a promoted replica, which *sealed* the log
//!   instead (`manifest::SealedLog`): then the tails read on to the fence,
//!   and the follower applies the seal's decision (every CSN below its
//!   prefix, and the commits it lists above) rather than the quorum rule,
//!   up to the seal's last CSN; then it follows the next log. The seal's
//!   prefix is never below `P`: the promoter counted a quorum's entries,
//!   as the follower does, with all of them in.

use milliscale_seam::JoinHandle;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::ReplicaOptions;
use super::apply;
use super::shared::{Shared, TailMsg};
use super::tail::ChainTail;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::keys::Chain;
use crate::log::hedge::HedgePolicy;
use crate::log::record::Entry;
use crate::manifest::{LogRef, Manifest, SealedLog};
use crate::mvcc::Csn;
use crate::table::TableInner;

/// Deleted keys a replica reclaims at most between two runs it applies.
const RECLAIM_PER_ADVANCE: usize = 4096;
/// Chains holding a replaced version trimmed at most per advance (see
/// `apply::retrim_due`): more than the records a run applies.
const RETRIM_PER_ADVANCE: usize = 1 << 16;

/// While the database is idle, the manifest is checked every this many
/// `poll_max` (at least `manifest_every`).
pub const IDLE_MANIFEST_POLLS: u32 = 16;

/// Once a tail met a fence part, the manifest is checked this often until
/// the new writer's log appears.
pub(super) const FENCED_MANIFEST_EVERY: Duration = Duration::from_millis(20);

/// Catch-ups in a row that may find a checkpoint chunk missing (a newer
/// checkpoint deleted it) before that counts as damage.
pub(super) const CATCH_UP_TRIES: u32 = 8;

/// The most entries applied as one run before publishing: a replica far
/// behind still shows progress every run.
pub(super) const RUN_MAX: usize = 8192;

/// Entries taken from `pending` to apply together, with the earliest time
/// each can have landed (for the lag).
#[derive(Default)]
pub(super) struct Run {
    entries: Vec<Entry>,
    since: Vec<Instant>,
}

/// One manifest check in this many reads it whole (a LIST), whatever the
/// HEADs say.
pub(super) const FULL_MANIFEST_READ_EVERY: u64 = 16;

/// Stores by name.
pub(crate) use crate::engine::NamedStores;

/// The tail threads of one log (one epoch's chains on every store).
pub(super) struct Tails {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<(usize, ChainTail)>>,
}

/// The follower thread's state.
pub(crate) struct Follower {
    pub(crate) db: Arc<Engine>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) stores: NamedStores,
    pub(crate) needed: usize,
    pub(crate) deadline: Duration,
    pub(crate) opts: ReplicaOptions,
    pub(crate) manifest: Manifest,
    /// The log followed: one of `manifest.logs()`.
    pub(crate) log: LogRef,
    /// Its seal, if a new writer sealed it: then its entries are applied
    /// as the seal decided, not by the quorum rule.
    pub(crate) seal: Option<SealedLog>,
    /// The CSN applied up to (exclusive).
    pub(crate) applied: Csn,
    pub(super) tables: Vec<Arc<TableInner>>,
    /// Entries at or above `applied`, with the stores that showed them and
    /// the earliest time they can have landed.
    pub(crate) pending: BTreeMap<Csn, (Entry, u8, Instant)>,
    pub(super) seen: Csn,
    /// The tails (store, chain) that met a fence part.
    pub(crate) fenced_tails: std::collections::BTreeSet<(usize, Chain)>,
    pub(super) tx: Sender<TailMsg>,
    pub(super) rx: Receiver<TailMsg>,
    pub(super) tails: Option<Tails>,
    pub(super) next_manifest_check: Instant,
    pub(super) check_manifest: bool,
    /// Manifests read so far.
    pub(super) manifest_reads: u64,
    /// An entry at this CSN named an unknown table; the manifest read count
    /// after which that is damage.
    pub(super) missing_table: Option<(Csn, u64)>,
    /// A tail met a fence part: a new writer is taking over, so the
    /// manifest is checked often until its log appears.
    pub(super) fenced: bool,
    /// Manifest checks so far.
    pub(super) checks: u64,
    /// Catch-ups in a row that found a checkpoint chunk missing.
    pub(super) catch_up_failures: u32,
    /// The change feeds this follower hands its runs to (design record
    /// 0014), if it is a feed's.
    pub(crate) tap: Option<Arc<super::tap::Taps>>,
}

impl Follower {
    /// A follower of `manifest`'s log for `db`, whose tables hold its
    /// checkpoint.
    pub(crate) fn new(
        db: Arc<Engine>,
        shared: Arc<Shared>,
        stores: NamedStores,
        needed: usize,
        deadline: Duration,
        opts: ReplicaOptions,
        manifest: Manifest,
    ) -> Follower {
        let applied = manifest.replay_from();
        let (tx, rx) = crossbeam_channel::unbounded();
        let tables = db.tables_by_id();
        let (log, seal) =
            manifest.logs().next().map(|(l, s)| (l.clone(), s.cloned())).expect("a current log");
        Follower {
            db,
            shared,
            stores,
            needed,
            deadline,
            opts,
            manifest,
            log,
            seal,
            applied,
            tables,
            pending: BTreeMap::new(),
            seen: applied,
            fenced_tails: Default::default(),
            tx,
            rx,
            tails: None,
            next_manifest_check: milliscale_seam::now(),
            check_manifest: false,
            manifest_reads: 0,
            missing_table: None,
            fenced: false,
            checks: 0,
            catch_up_failures: 0,
            tap: None,
        }
    }

    /// Run until closed or a fatal error; or, when asked to hand over,
    /// return itself with its tails still running.
    pub(crate) fn run(mut self) -> Option<Follower> {
        let r = self.run_inner();
        if r.is_ok() && self.shared.handover.load(Ordering::SeqCst) {
            return Some(self);
        }
        self.stop_tails();
        let mut p = self.shared.progress.lock();
        if let Err(e) = r {
            tracing::error!("replica stopped: {e}");
            self.shared.counters.lock().last_error = Some(e.to_string());
            p.error = Some(e);
        }
        p.stopped = true;
        p.wake_tasks();
        self.shared.progressed.notify_all();
        None
    }

    pub(super) fn run_inner(&mut self) -> Result<()> {
        self.publish();
        self.start_tails(None);
        while !self.shared.stop.load(Ordering::SeqCst)
            && !self.shared.handover.load(Ordering::SeqCst)
        {
            let wait = self.next_manifest_check.saturating_duration_since(milliscale_seam::now());
            if let Ok(m) =
                milliscale_seam::recv_timeout(&self.rx, wait.min(Duration::from_millis(100)))
            {
                self.handle(m)?;
                self.drain()?;
            }
            self.advance()?;
            if self.check_manifest || milliscale_seam::now() >= self.next_manifest_check {
                // A scheduled check while idle (not one a tail asked for):
                // idle tails skip as many polls as it cost.
                let idle = !self.check_manifest && !self.fenced && !self.shared.active();
                let shared = Arc::clone(&self.shared);
                let sent = || {
                    let c = shared.counters.lock();
                    c.get_class + c.put_class
                };
                let before = sent();
                self.follow_manifest()?;
                if idle {
                    // (A tail's request counted meanwhile only makes the
                    // idle tails skip one poll more.)
                    self.shared.owed.fetch_add(sent() - before, Ordering::SeqCst);
                }
            }
        }
        Ok(())
    }

    /// Take in what a tail read.
    pub(super) fn handle(&mut self, m: TailMsg) -> Result<()> {
        match m {
            TailMsg::Polled { store, chain, parts, since, gone, fenced } => {
                if gone || fenced {
                    self.check_manifest = true;
                }
                if fenced {
                    self.fenced_tails.insert((store, chain));
                }
                self.fenced |= fenced;
                for p in parts {
                    for e in p.entries {
                        let csn = e.csn();
                        if csn < self.applied {
                            continue;
                        }
                        self.seen = self.seen.max(csn + 1);
                        let slot = self.pending.entry(csn).or_insert((e, 0, since));
                        slot.1 |= 1 << store;
                        slot.2 = slot.2.min(since);
                    }
                }
                Ok(())
            }
            TailMsg::Failed(e @ Error::Corrupt(_)) => Err(e),
            // Counted by the tail that failed (`poll.rs`); the next poll
            // retries.
            TailMsg::Failed(_) => Ok(()),
        }
    }

    /// Apply every entry from `applied` on that a quorum of stores showed,
    /// stopping at the first CSN not yet there, in runs of consecutive
    /// entries applied together ([`apply::apply_batch`]); publish after
    /// each run.
    pub(super) fn advance(&mut self) -> Result<()> {
        let horizon = self.db.refresh_gc_horizon();
        // Deleted keys the readers all see gone; no apply thread runs now.
        let retired = self.db.reclaim.drain(
            horizon,
            self.db.gc_counter(),
            RECLAIM_PER_ADVANCE,
            &crossbeam_epoch::pin(),
        ) + apply::retrim_due(
            &self.tables,
            &self.db.retrims,
            horizon,
            RETRIM_PER_ADVANCE,
            &crossbeam_epoch::pin(),
        );
        self.db.versions_retired.fetch_add(retired as u64, Ordering::Relaxed);
        // The run: entries from `applied` up to `next` (seal-skipped CSNs
        // have no entry), with the earliest time each can have landed.
        let mut run = Run::default();
        let mut next = self.applied;
        loop {
            if run.entries.len() >= RUN_MAX {
                self.apply_run(&mut run, next, horizon)?;
            }
            let e = if let Some(seal) = &self.seal {
                if next > seal.max_csn {
                    self.apply_run(&mut run, next, horizon)?;
                    self.next_log()?;
                    continue;
                }
                if next < seal.from {
                    // The checkpoint holds these: the manifest check
                    // catches up from it first.
                    break;
                }
                if !seal.includes(next) {
                    // Not in the decision: skipped.
                    self.pending.remove(&next);
                    next += 1;
                    continue;
                }
                // In the decision: applied once any store has shown it.
                match self.pending.get(&next) {
                    Some((e, _, _)) => e,
                    None => break,
                }
            } else {
                match self.pending.get(&next) {
                    Some((e, stores, _)) if stores.count_ones() as usize >= self.needed => e,
                    _ => break,
                }
            };
            let unknown = match e {
                Entry::Commit { records: rs, .. } => {
                    rs.refs().map(|r| r.table).find(|t| *t as usize >= self.tables.len())
                }
                Entry::Abort { .. } => None,
            };
            if let Some(table) = unknown {
                // Tables are named in the manifest before they are written:
                // read it (the main loop does), then try again. Still
                // unknown after a read is damage.
                if self.missing_table == Some((next, self.manifest_reads)) {
                    return Err(Error::Corrupt(format!(
                        "CSN {next} writes table id {table}, which the manifest does not name"
                    )));
                }
                self.missing_table = Some((next, self.manifest_reads + 1));
                self.check_manifest = true;
                break;
            }
            let (e, _, since) = self.pending.remove(&next).expect("looked up above");
            run.entries.push(e);
            run.since.push(since);
            next += 1;
        }
        self.apply_run(&mut run, next, horizon)
    }

    /// Apply `run` (every entry from `applied` below `next`, seal-skipped
    /// CSNs aside), move `applied` to `next` and publish.
    pub(super) fn apply_run(&mut self, run: &mut Run, next: Csn, horizon: Csn) -> Result<()> {
        if next == self.applied {
            return Ok(());
        }
        let (records, wholes) = apply::apply_batch(
            &self.tables,
            &run.entries,
            horizon,
            self.opts.apply_threads,
            self.opts.apply_parallel_min,
            &self.db.retrims,
            self.tap.is_some(),
        )?;
        apply::queue_deletes(&self.tables, &run.entries, &self.db.reclaim);
        let entries = run.entries.len() as u64;
        // (Takes the entries when a feed is attached.)
        super::tap::hand_over(
            &self.tap,
            &self.tables,
            &self.db.txns,
            &mut run.entries,
            wholes,
            next,
        );
        self.applied = next;
        // Counted before the readers are told, so that anyone woken by
        // the new applied CSN sees the counts that go with it.
        let now = milliscale_seam::now();
        {
            let mut c = self.shared.counters.lock();
            c.entries += entries;
            c.records += records;
            let lag_histogram = metrics::histogram!("milliscale_replica_lag_seconds");
            for since in run.since.drain(..) {
                let lag = now.saturating_duration_since(since);
                c.lag_us.saturating_record(lag.as_micros().max(1) as u64);
                lag_histogram.record(lag);
            }
        }
        run.entries.clear();
        self.publish();
        Ok(())
    }

    /// Move the readers' snapshot to `applied` and tell waiters.
    pub(super) fn publish(&self) {
        self.db.commit.next_csn.fetch_max(self.applied, Ordering::SeqCst);
        let mut p = self.shared.progress.lock();
        p.applied = self.applied;
        p.seen = self.seen.max(self.applied);
        p.epoch = self.log.epoch;
        p.manifest_version = self.manifest.version;
        p.checkpoint_wanted = self.manifest.checkpoint_wanted;
        p.wake_tasks();
        self.shared.progressed.notify_all();
    }

    /// Take in what the tails send within `wait` (all that is queued, if
    /// anything came).
    pub(super) fn receive(&mut self, wait: Duration) -> Result<()> {
        if let Ok(m) = milliscale_seam::recv_timeout(&self.rx, wait) {
            self.handle(m)?;
            self.drain()?;
        }
        Ok(())
    }

    /// One past the largest CSN read from the log.
    pub(super) fn seen_csn(&self) -> Csn {
        self.seen
    }

    /// Make every tail poll now, and at `poll_min` for a while.
    pub(super) fn wake_tails(&self) {
        self.shared.mark_active();
        let _g = self.shared.sleep.0.lock();
        self.shared.sleep.1.notify_all();
    }

    pub(super) fn count(&self, get_class: u64, put_class: u64, bytes: u64) {
        let mut c = self.shared.counters.lock();
        c.get_class += get_class;
        c.put_class += put_class;
        c.bytes_down += bytes;
    }

    /// Start tails on every store for the current log: each chain from its
    /// first live segment, or where `keep` (the tails stopped before) had
    /// got to if that is further.
    pub(super) fn start_tails(&mut self, keep: Option<Vec<(usize, ChainTail)>>) {
        self.fenced_tails.clear();
        let log = &self.log;
        let mut tails: Vec<(usize, ChainTail)> = Vec::new();
        for store in 0..self.stores.len() {
            for c in log.chains() {
                let start = log.start(c).expect("a chain of the log");
                let kept = keep.as_ref().and_then(|k| {
                    k.iter().find(|(s, t)| {
                        *s == store && t.chain() == c && t.position().segment >= start
                    })
                });
                tails.push(match kept {
                    Some((_, t)) => (store, t.clone()),
                    None => {
                        let hedge = self.opts.hedge_reads.then_some(HedgePolicy::READS);
                        (store, ChainTail::new(c, start, log.parts_max).hedging(hedge))
                    }
                });
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        self.shared.tails.store(tails.len(), Ordering::Relaxed);
        let threads = tails
            .into_iter()
            .map(|(store, tail)| {
                let ctx = super::poll::TailCtx {
                    store,
                    handle: Arc::clone(&self.stores[store].1),
                    shared: Arc::clone(&self.shared),
                    stop: Arc::clone(&stop),
                    tx: self.tx.clone(),
                    opts: self.opts.clone(),
                };
                milliscale_seam::spawn(
                    format!("tail-{store}-{}-{}", tail.chain().group, tail.chain().lane),
                    move || ctx.run(tail),
                )
                .expect("spawn a replica tail thread")
            })
            .collect();
        self.tails = Some(Tails { stop, threads });
    }

    /// Stop the tail threads; returns their tails.
    pub(super) fn stop_tails(&mut self) -> Vec<(usize, ChainTail)> {
        let Some(t) = self.tails.take() else { return Vec::new() };
        t.stop.store(true, Ordering::SeqCst);
        {
            let _g = self.shared.sleep.0.lock();
            self.shared.sleep.1.notify_all();
        }
        t.threads.into_iter().filter_map(|h| h.join().ok()).collect()
    }
}
