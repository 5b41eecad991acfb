//! The tail threads: one per (store, chain), each polling its chain and
//! sending what it read to the follower, as often as the writer's load is
//! worth (the rules are in `follow`'s module docs, "Tail threads").

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use objstore::ObjectStore;

use super::ReplicaOptions;
use super::shared::{Shared, TXN_RATE_TAU, TailMsg};
use super::tail::ChainTail;
use crate::log::record::Part;
use crate::rate::EventRate;

/// Transactions (commit and abort entries) in a poll's parts.
fn txns_in(parts: &[Part]) -> usize {
    parts.iter().map(|p| p.entries.len()).sum()
}

/// What a tail thread needs.
pub(super) struct TailCtx {
    pub(super) store: usize,
    pub(super) handle: Arc<dyn ObjectStore>,
    pub(super) shared: Arc<Shared>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) tx: Sender<TailMsg>,
    pub(super) opts: ReplicaOptions,
}

impl TailCtx {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || self.shared.stop.load(Ordering::SeqCst)
    }

    pub(super) fn run(self, mut tail: ChainTail) -> (usize, ChainTail) {
        let mut interval = self.opts.poll_min;
        let mut last_start: Option<Instant> = None;
        let mut rate = EventRate::new(TXN_RATE_TAU);
        // When a poll last found something: the rate a find shows is what
        // it found over the time since the find before (not since the last
        // poll, which a fast poller would read as a fast writer).
        let mut last_found: Option<Instant> = None;
        // Idle polls look at the segment and for the next one in turn.
        let mut idle_polls: u64 = 0;
        // After a fence or a deleted segment the tail has nothing more to
        // read; the follower replaces it.
        let mut ended = false;
        // The readers' demand served so far (`Shared::poll_now`).
        let mut served = self.shared.demand();
        while !self.stopped() {
            if ended {
                self.shared.sleep(self.opts.poll_max, &self.stop);
                continue;
            }
            if tail.mode().is_none()
                && let Some(m) = self.shared.mode(self.store)
            {
                tail.assume_mode(m);
            }
            let started = milliscale_seam::now();
            let demand = self.shared.demand();
            let asked = demand != served;
            served = demand;
            let idle = !asked && interval >= self.opts.poll_max && !self.shared.active();
            if idle && self.shared.pay_back() {
                // This poll's request went to an idle manifest check.
                self.shared.sleep(interval, &self.stop);
                continue;
            }
            let r = if idle {
                idle_polls += 1;
                tail.poll_idle(&self.handle, idle_polls.is_multiple_of(2))
            } else {
                tail.poll(&self.handle)
            };
            if let Some(m) = tail.mode()
                && self.shared.mode(self.store).is_none()
            {
                self.shared.learned_mode(self.store, m);
            }
            let since = last_start.unwrap_or(started);
            last_start = Some(started);
            let found = match r {
                Ok(p) => {
                    {
                        let mut c = self.shared.counters.lock();
                        c.polls += 1;
                        c.get_class += p.requests;
                        c.reads_hedged += p.hedged;
                        c.reads_hedges_won += p.hedges_won;
                        c.bytes_down += p.bytes;
                    }
                    let found = !p.parts.is_empty();
                    if found {
                        let n = txns_in(&p.parts);
                        match last_found {
                            Some(t) => rate.add_over(started, n, started - t),
                            None => rate.add(started, n),
                        }
                        last_found = Some(started);
                        self.shared.txns.lock().add(started, n);
                    }
                    ended = p.gone || tail.fenced_by().is_some();
                    let msg = TailMsg::Polled {
                        store: self.store,
                        chain: tail.chain(),
                        parts: p.parts,
                        since,
                        gone: p.gone,
                        fenced: tail.fenced_by().is_some(),
                    };
                    if (found || ended) && self.tx.send(msg).is_err() {
                        break;
                    }
                    found
                }
                Err(e) => {
                    // Counted here, not by the follower: it may be inside a
                    // manifest read that retries against the same outage
                    // for up to the store deadline, and the metrics must
                    // show the failures as they happen.
                    {
                        let mut c = self.shared.counters.lock();
                        c.polls += 1;
                        c.poll_errors += 1;
                        c.last_error = Some(e.to_string());
                    }
                    if self.tx.send(TailMsg::Failed(e)).is_err() {
                        break;
                    }
                    interval = (interval * 2).min(self.opts.poll_max);
                    self.shared.sleep(interval, &self.stop);
                    continue;
                }
            };
            if found {
                self.shared.mark_active();
            }
            interval = if found || self.shared.active() {
                let now = milliscale_seam::now();
                self.active_interval(rate.at(now).max(self.shared.txns_per_tail(now)))
            } else {
                (interval * 2).clamp(self.opts.poll_min, self.opts.poll_max)
            };
            if !interval.is_zero() {
                self.shared.sleep_unless_asked(interval, &self.stop, served);
            }
        }
        (self.store, tail)
    }

    /// The interval between polls while the database is active, for a
    /// chain that carries `txns_per_s`: the one that costs least in reads
    /// plus waiting (see the module docs), within `poll_min..=poll_max`;
    /// `poll_min` on a store without a price or before anything was seen.
    fn active_interval(&self, txns_per_s: f64) -> Duration {
        let get_usd = self.handle.prices().map_or(0.0, |p| p.get_per_million / 1e6);
        let wait_usd_per_s = self.opts.millisecond_price / 3600.0;
        if get_usd <= 0.0 || txns_per_s <= 0.0 {
            return self.opts.poll_min;
        }
        if wait_usd_per_s <= 0.0 {
            return self.opts.poll_max;
        }
        let secs = (2.0 * get_usd / (wait_usd_per_s * txns_per_s)).sqrt();
        Duration::try_from_secs_f64(secs)
            .unwrap_or(self.opts.poll_max)
            .clamp(self.opts.poll_min, self.opts.poll_max)
    }
}

/// Demand polls: a reader waiting for a token the replica has not read.
impl Shared {
    /// Ask every tail to poll its chain now (a reader waits for a token
    /// not seen yet): one request per chain, however idle the database.
    pub(crate) fn poll_now(&self) {
        self.demand.fetch_add(1, Ordering::SeqCst);
        let _g = self.sleep.0.lock();
        self.sleep.1.notify_all();
    }

    /// The demand count a tail has served up to.
    pub(super) fn demand(&self) -> u64 {
        self.demand.load(Ordering::SeqCst)
    }

    /// Sleep as [`Shared::sleep`] does, but return at once if a reader
    /// asked for a poll after the tail served `served` (checked under the
    /// lock `poll_now` notifies under, so no request is missed).
    pub(super) fn sleep_unless_asked(&self, d: Duration, stop: &AtomicBool, served: u64) {
        let mut g = self.sleep.0.lock();
        if self.demand.load(Ordering::SeqCst) != served {
            return;
        }
        if !self.stop.load(Ordering::SeqCst) && !stop.load(Ordering::SeqCst) {
            milliscale_seam::cv_wait_for(&self.sleep.1, &mut g, d);
        }
    }
}
