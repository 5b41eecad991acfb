//! `sim://PRESET`: a store that stacks over any other store and adds
//! latency drawn from a preset, seeded fault injection, and accounting.
//!
//! URL: `sim://PRESET[?seed=N&price=TABLE&throttle=P&error=P&ambiguous=P&stalls=1&inner=URL]`.
//! `price` bills with another price table of `data/sim-presets.toml` than
//! the preset's own (say `s3-2008`, the fourth paper's prices, on the
//! `s3-standard` latencies).
//! `inner` defaults to `memory://` and, if given, must come last (it takes
//! the rest of the URL, so it may carry its own query). Faults are off
//! unless a probability is given:
//! - `throttle`: fail with `Throttled` (503 SlowDown), not applied;
//! - `error`: fail with `Transient` (500 InternalError), not applied;
//! - `ambiguous`: an append **is applied** and the caller gets `Transient`
//!   (a timeout or reset after the fact): the case that must be reconciled
//!   with `head`, never retried blindly;
//! - `stalls=1`: with the preset's stall probability, hang until its
//!   timeout and fail with `Transient`, not applied.
//!
//! [`SimStore::set_unavailable_for`] takes the whole store down for a while.
//!
//! Writes wait out their latency and then apply; reads apply and then wait
//! (the transfer time depends on the response size).
//!
//! **Hedged appends** ([`ObjectStore::append_hedged`]) are modelled as two
//! requests racing, the way an asynchronous client sends them: the first
//! is drawn; if it would take longer than the hedge delay, a second one
//! (its own latency and faults) starts at the delay. Each lands at the end
//! of its latency, in time order, at the same write offset, so at most one
//! applies (the other finds the size changed: `InvalidWriteOffset`). The
//! caller gets the first success, or the last answer if both failed. Both
//! requests are counted and priced. The calling thread sleeps once, until
//! the answer it gets: no second thread.
//!
//! **Appends in flight** ([`ObjectStore::start_append`]) are drawn,
//! counted and priced when sent, and land (or fail) at the end of their
//! latency, at whichever poll or wait of the [`PendingAppend`] comes
//! first (a hedged one as above, its twin's stage after the first's): no
//! thread sleeps for them, so a caller that polls between other work
//! sees the answer without a sleep's wake-up delay.
//!
//! **Hedged reads** ([`ObjectStore::get_range_hedged`],
//! [`ObjectStore::head_hedged`]) race the same way. A read applies when it
//! is sent, so the second one reads the store as it is at the hedge delay.
//! The first answer wins, whatever it says (a 404 is an answer); a request
//! that failed to answer (throttled, transient) waits for its twin.

pub mod accounting;
pub mod model;

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::pending::{PendingAppend, Stage};
pub use crate::sleep::latency_sleep;
use crate::{Hedge, ObjectMeta, ObjectStore, Result, StoreError};
use accounting::{Accounting, AccountingReport, Kind};
use model::{Catalog, OpClass, Preset, Prices};

/// Spreads consecutive draw numbers over the seed space (2^64 / phi).
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// Fault injection settings; everything off by default.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Faults {
    /// Seed of the fault and latency random stream.
    pub seed: u64,
    /// Probability that a request is throttled (503 SlowDown).
    pub throttle: f64,
    /// Probability that a request fails with a 500.
    pub error: f64,
    /// Probability that an append is applied but reported as failed.
    pub ambiguous: f64,
    /// Inject the preset's stalls.
    pub stalls: bool,
}

#[derive(Clone, Copy)]
enum Fault {
    None,
    Stall,
    Throttle,
    Error,
    Ambiguous,
}

/// See the module docs.
#[derive(Debug)]
pub struct SimStore {
    inner: Arc<dyn ObjectStore>,
    preset_name: String,
    preset: Preset,
    prices: Prices,
    faults: Faults,
    /// Draws so far. Draw `n` has a generator of its own, seeded from the
    /// store's seed and `n`, so requests on many threads never wait for
    /// each other here: a lock held by a thread the OS preempted would
    /// stall every other thread's request (say, a replica's reads behind a
    /// busy writer's appends), a coupling real clients do not have.
    draws: AtomicU64,
    accounting: Accounting,
    /// When an injected outage ends, in nanoseconds after `born` (0: none).
    unavailable_until: AtomicU64,
    born: Instant,
}

impl SimStore {
    /// Wrap `inner` with preset `preset` and `faults`.
    pub fn new(inner: Arc<dyn ObjectStore>, preset: &str, faults: Faults) -> Result<SimStore> {
        for (name, p) in [
            ("throttle", faults.throttle),
            ("error", faults.error),
            ("ambiguous", faults.ambiguous),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(StoreError::InvalidRequest(format!(
                    "{name} must be a probability in 0..=1, got {p}"
                )));
            }
        }
        let catalog = Catalog::builtin();
        let p = catalog.preset(preset)?.clone();
        let prices = catalog.prices(&p.price)?;
        Ok(SimStore {
            inner,
            preset_name: preset.to_owned(),
            preset: p,
            prices,
            draws: AtomicU64::new(0),
            faults,
            accounting: Accounting::default(),
            unavailable_until: AtomicU64::new(0),
            born: milliscale_seam::now(),
        })
    }

    /// Parse `sim://...` (see the module docs).
    pub fn from_url(url: &str) -> Result<SimStore> {
        let rest = url
            .strip_prefix("sim://")
            .ok_or_else(|| StoreError::InvalidRequest(format!("not a sim URL: {url:?}")))?;
        let (preset, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (params, inner_url) = match query.find("inner=") {
            Some(i) => (&query[..i], &query[i + "inner=".len()..]),
            None => (query, "memory://"),
        };
        let mut faults = Faults::default();
        let mut price = None;
        for kv in params.split('&').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let num = |v: &str| {
                v.parse::<f64>().map_err(|_| {
                    StoreError::InvalidRequest(format!("{k}={v:?} is not a number in {url:?}"))
                })
            };
            match k {
                "seed" => {
                    faults.seed = v.parse().map_err(|_| {
                        StoreError::InvalidRequest(format!("seed={v:?} is not an integer"))
                    })?
                }
                "throttle" => faults.throttle = num(v)?,
                "error" => faults.error = num(v)?,
                "ambiguous" => faults.ambiguous = num(v)?,
                "stalls" => faults.stalls = matches!(v, "1" | "true" | "on"),
                "price" => price = Some(Catalog::builtin().prices_named(v)?),
                _ => {
                    return Err(StoreError::InvalidRequest(format!(
                        "unknown sim parameter {k:?} in {url:?}"
                    )));
                }
            }
        }
        let inner = crate::open(inner_url.trim_end_matches('&'))?;
        let mut sim = SimStore::new(inner, preset, faults)?;
        if let Some(p) = price {
            sim.prices = p;
        }
        Ok(sim)
    }

    /// The preset's name.
    pub fn preset_name(&self) -> &str {
        &self.preset_name
    }

    /// Fail every request with `Transient` for `d` from now.
    pub fn set_unavailable_for(&self, d: Duration) {
        let until =
            milliscale_seam::Elapsed::elapsed_now(&self.born).saturating_add(d).as_nanos().max(1);
        self.unavailable_until.store(u64::try_from(until).unwrap_or(u64::MAX), Ordering::SeqCst);
    }

    fn draw(&self, class: OpClass, bytes: u64, may_be_ambiguous: bool) -> (Fault, Duration) {
        let n = self.draws.fetch_add(1, Ordering::Relaxed);
        let mut rng = SmallRng::seed_from_u64(self.faults.seed ^ n.wrapping_mul(GOLDEN));
        let rng = &mut rng;
        let f = self.faults;
        let fault = if f.stalls && rng.random::<f64>() < self.preset.stall_prob {
            Fault::Stall
        } else if f.throttle > 0.0 && rng.random::<f64>() < f.throttle {
            Fault::Throttle
        } else if f.error > 0.0 && rng.random::<f64>() < f.error {
            Fault::Error
        } else if may_be_ambiguous && f.ambiguous > 0.0 && rng.random::<f64>() < f.ambiguous {
            Fault::Ambiguous
        } else {
            Fault::None
        };
        (fault, self.preset.sample(class, bytes, &mut *rng))
    }

    fn check_available(&self) -> Result<()> {
        let until = self.unavailable_until.load(Ordering::SeqCst);
        if until != 0
            && milliscale_seam::Elapsed::elapsed_now(&self.born).as_nanos() < u128::from(until)
        {
            self.accounting.fault();
            return Err(StoreError::Transient(format!(
                "sim://{}: store unavailable (injected outage)",
                self.preset_name
            )));
        }
        Ok(())
    }

    /// Run `op` as one write request of `kind` carrying `up` bytes: the
    /// latency model, the faults and the accounting see it exactly as they
    /// see [`ObjectStore::put`]. A server in front of this store (the
    /// emulator) runs its own operations through it: writes with metadata,
    /// copies, multipart parts.
    pub fn modelled_write<T>(
        &self,
        kind: Kind,
        up: u64,
        op: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        self.write(kind, up, op)
    }

    /// Run `op` as one read request of `kind` (a GET, HEAD or LIST) whose
    /// answer carries `down(answer)` bytes, as [`SimStore::modelled_write`]
    /// does for writes.
    pub fn modelled_read<T>(
        &self,
        kind: Kind,
        op: impl FnOnce() -> Result<T>,
        down: impl Fn(&T) -> u64,
    ) -> Result<T> {
        let class = match kind {
            Kind::Get | Kind::GetRange => OpClass::Read,
            Kind::Head | Kind::List | Kind::Delete => OpClass::Meta,
            Kind::Put | Kind::PutIfAbsent | Kind::PutIfMatch | Kind::Append => OpClass::Write,
        };
        self.read(kind, class, op, down)
    }

    /// Run a write-class request: wait, then apply (or fail).
    fn write<T>(&self, kind: Kind, up: u64, op: impl FnOnce() -> Result<T>) -> Result<T> {
        self.accounting.request(kind, up);
        self.check_available()?;
        let (fault, delay) = self.draw(OpClass::Write, up, kind == Kind::Append);
        if kind == Kind::Append {
            self.accounting.append_latency(self.takes(fault, delay));
        }
        latency_sleep(self.takes(fault, delay));
        self.answer(fault, op)
    }

    /// A write request whose time is over: fail it as its fault says, or
    /// apply `op` (and, for an ambiguous fault, report it failed anyway).
    fn answer<T>(&self, fault: Fault, op: impl FnOnce() -> Result<T>) -> Result<T> {
        if let Some(e) = self.fault_answer(fault) {
            return Err(e);
        }
        match (fault, op()) {
            (Fault::Ambiguous, Ok(_)) => {
                self.accounting.fault();
                Err(StoreError::Transient(
                    "connection reset after the append was applied (injected ambiguous append)"
                        .into(),
                ))
            }
            (_, r) => r,
        }
    }

    /// Run a read- or meta-class request: apply, then wait for the response.
    fn read<T>(
        &self,
        kind: Kind,
        class: OpClass,
        op: impl FnOnce() -> Result<T>,
        down: impl Fn(&T) -> u64,
    ) -> Result<T> {
        self.accounting.request(kind, 0);
        self.check_available()?;
        let r = op();
        let bytes = r.as_ref().map_or(0, &down);
        let (fault, delay) = self.draw(class, bytes, false);
        self.accounting.read_latency(self.takes(fault, delay));
        if let Some(e) = self.injected(fault, delay) {
            return Err(e);
        }
        self.accounting.download(bytes);
        r
    }

    /// How long a request with `fault` and drawn `delay` takes to answer.
    fn takes(&self, fault: Fault, delay: Duration) -> Duration {
        match fault {
            Fault::Stall => Duration::from_millis(self.preset.stall_timeout_ms),
            _ => delay,
        }
    }

    /// Sleep for the request; return the injected error, if any.
    fn injected(&self, fault: Fault, delay: Duration) -> Option<StoreError> {
        latency_sleep(self.takes(fault, delay));
        self.fault_answer(fault)
    }

    /// The error a request with `fault` answers, once its time is over.
    fn fault_answer(&self, fault: Fault) -> Option<StoreError> {
        let name = &self.preset_name;
        let e = match fault {
            Fault::Stall => {
                StoreError::Transient(format!("sim://{name}: request timed out (injected stall)"))
            }
            Fault::Throttle => {
                StoreError::Throttled(format!("sim://{name}: 503 SlowDown (injected)"))
            }
            Fault::Error => {
                StoreError::Transient(format!("sim://{name}: 500 InternalError (injected)"))
            }
            Fault::None | Fault::Ambiguous => return None,
        };
        self.accounting.fault();
        Some(e)
    }
}

/// Whether a request that takes `takes` answers before a hedge at
/// `hedge_after`. A zero delay always races two requests (tests use it).
fn takes_no_hedge(hedge_after: Duration, takes: Duration) -> bool {
    !hedge_after.is_zero() && takes <= hedge_after
}

impl SimStore {
    /// See the module docs: two reads racing, in one thread. `op` reads;
    /// `down` is the response's size.
    fn hedged_read<T>(
        &self,
        kind: Kind,
        class: OpClass,
        op: impl Fn() -> Result<T>,
        down: impl Fn(&T) -> u64,
        hedge_after: Duration,
    ) -> (Result<T>, Hedge) {
        self.accounting.request(kind, 0);
        if let Err(e) = self.check_available() {
            return (Err(e), Hedge::NotSent);
        }
        let size = |r: &Result<T>| r.as_ref().map_or(0, &down);
        let first_answer = op();
        let first = self.draw(class, size(&first_answer), false);
        let first_takes = self.takes(first.0, first.1);
        self.accounting.read_latency(first_takes);
        if takes_no_hedge(hedge_after, first_takes) {
            latency_sleep(first_takes);
            return (self.read_answer(first.0, first_answer, &down), Hedge::NotSent);
        }
        latency_sleep(hedge_after);
        self.accounting.request(kind, 0);
        let second_answer = match self.check_available() {
            Ok(()) => op(),
            Err(e) => Err(e),
        };
        let second = self.draw(class, size(&second_answer), false);
        self.accounting.read_latency(self.takes(second.0, second.1));
        let second_at = hedge_after + self.takes(second.0, second.1);
        let mut arrivals = [
            (first_takes, first.0, Some(first_answer), Hedge::Lost),
            (second_at, second.0, Some(second_answer), Hedge::Won),
        ];
        arrivals.sort_by_key(|a| a.0);
        let mut waited = hedge_after;
        let mut last = None;
        for (at, fault, answer, which) in &mut arrivals {
            latency_sleep(at.saturating_sub(waited));
            waited = waited.max(*at);
            let r = self.read_answer(*fault, answer.take().expect("taken once"), &down);
            // An answer wins (a 404 or a 416 too); a failure to answer
            // (throttled, transient) waits for the other request.
            if !r.as_ref().is_err_and(StoreError::is_retryable) {
                return (r, *which);
            }
            last = Some((r, *which));
        }
        last.expect("two requests")
    }

    /// A read's answer once its time is over: its injected fault, or what
    /// it read (counted as downloaded).
    fn read_answer<T>(&self, fault: Fault, r: Result<T>, down: impl Fn(&T) -> u64) -> Result<T> {
        if let Some(e) = self.fault_answer(fault) {
            return Err(e);
        }
        if let Ok(v) = &r {
            self.accounting.download(down(v));
        }
        r
    }

    /// Send an append (and its hedge, if it would be slower than
    /// `hedge_after`): count and draw them, and return when each lands, in
    /// the order they land, with its fault and what it is to the hedge.
    /// `Err`: the store refused it at once (an injected outage).
    fn send_append(
        &self,
        up: u64,
        hedge_after: Option<Duration>,
    ) -> Result<Vec<(Duration, Fault, Hedge)>> {
        self.accounting.request(Kind::Append, up);
        self.check_available()?;
        let takes = |(fault, delay): (Fault, Duration)| self.takes(fault, delay);
        let first = self.draw(OpClass::Write, up, true);
        self.accounting.append_latency(takes(first));
        let Some(hedge_after) = hedge_after.filter(|h| !takes_no_hedge(*h, takes(first))) else {
            return Ok(vec![(takes(first), first.0, Hedge::NotSent)]);
        };
        self.accounting.request(Kind::Append, up);
        let second = self.draw(OpClass::Write, up, true);
        self.accounting.append_latency(takes(second));
        let mut arrivals = vec![
            (takes(first), first.0, Hedge::Lost),
            (hedge_after + takes(second), second.0, Hedge::Won),
        ];
        arrivals.sort_by_key(|a| a.0);
        Ok(arrivals)
    }

    /// See the module docs: two requests racing, in one thread.
    fn hedged_append(
        &self,
        key: &str,
        offset: u64,
        body: Bytes,
        hedge_after: Duration,
    ) -> (Result<ObjectMeta>, Hedge) {
        let arrivals = match self.send_append(body.len() as u64, Some(hedge_after)) {
            Ok(a) => a,
            Err(e) => return (Err(e), Hedge::NotSent),
        };
        let mut waited = Duration::ZERO;
        let mut answer = None;
        for (at, fault, which) in arrivals {
            latency_sleep(at.saturating_sub(waited));
            waited = at;
            let r = self.answer(fault, || self.inner.append(key, offset, body.clone()));
            if r.is_ok() {
                return (r, which);
            }
            answer = Some((r, which));
        }
        answer.expect("one or two requests")
    }
}

/// The stages of an append in flight ([`ObjectStore::start_append`]):
/// each request of `arrivals` lands at `sent + at`; the first that
/// succeeds answers, else the last one's failure does.
fn append_stage(
    sim: Arc<SimStore>,
    key: String,
    offset: u64,
    body: Bytes,
    sent: Instant,
    mut arrivals: std::vec::IntoIter<(Duration, Fault, Hedge)>,
) -> Stage {
    let (at, fault, which) = arrivals.next().expect("one request at least");
    Stage::At(
        sent + at,
        Box::new(move || {
            let r = sim.answer(fault, || sim.inner.append(&key, offset, body.clone()));
            if r.is_ok() || arrivals.len() == 0 {
                Stage::Done((r, which))
            } else {
                append_stage(sim, key, offset, body, sent, arrivals)
            }
        }),
    )
}

impl ObjectStore for SimStore {
    fn is_object_store(&self) -> bool {
        self.preset.object
    }

    fn put(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        self.write(Kind::Put, body.len() as u64, || self.inner.put(key, body))
    }
    fn put_if_absent(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        self.write(Kind::PutIfAbsent, body.len() as u64, || self.inner.put_if_absent(key, body))
    }
    fn put_if_match(&self, key: &str, body: Bytes, etag: &str) -> Result<ObjectMeta> {
        self.write(Kind::PutIfMatch, body.len() as u64, || self.inner.put_if_match(key, body, etag))
    }
    fn append(&self, key: &str, offset: u64, body: Bytes) -> Result<ObjectMeta> {
        self.write(Kind::Append, body.len() as u64, || self.inner.append(key, offset, body))
    }
    fn start_append(
        self: Arc<Self>,
        key: &str,
        offset: u64,
        body: Bytes,
        hedge_after: Option<Duration>,
    ) -> Option<PendingAppend> {
        let sent = milliscale_seam::now();
        Some(match self.send_append(body.len() as u64, hedge_after) {
            Ok(arrivals) => PendingAppend::new(append_stage(
                Arc::clone(&self),
                key.to_owned(),
                offset,
                body,
                sent,
                arrivals.into_iter(),
            )),
            Err(e) => PendingAppend::done((Err(e), Hedge::NotSent)),
        })
    }
    fn get(&self, key: &str) -> Result<Bytes> {
        self.read(Kind::Get, OpClass::Read, || self.inner.get(key), |b| b.len() as u64)
    }
    fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        self.read(
            Kind::GetRange,
            OpClass::Read,
            || self.inner.get_range(key, range),
            |b| b.len() as u64,
        )
    }
    fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.read(Kind::Head, OpClass::Meta, || self.inner.head(key), |_| 0)
    }
    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        self.read(Kind::List, OpClass::Meta, || self.inner.list(prefix), |_| 0)
    }
    fn delete(&self, key: &str) -> Result<()> {
        self.write(Kind::Delete, 0, || self.inner.delete(key))
    }
    fn prices(&self) -> Option<crate::sim::model::Prices> {
        Some(self.prices)
    }
    fn accounting(&self) -> Option<AccountingReport> {
        Some(self.accounting.report(self.prices))
    }
    fn reset_latency(&self) {
        self.accounting.reset_latency();
    }
    fn append_hedged(
        &self,
        key: &str,
        offset: u64,
        body: Bytes,
        hedge_after: Duration,
    ) -> Option<(Result<ObjectMeta>, Hedge)> {
        Some(self.hedged_append(key, offset, body, hedge_after))
    }
    fn get_range_hedged(
        &self,
        key: &str,
        range: Range<u64>,
        hedge_after: Duration,
    ) -> Option<(Result<Bytes>, Hedge)> {
        Some(self.hedged_read(
            Kind::GetRange,
            OpClass::Read,
            || self.inner.get_range(key, range.clone()),
            |b| b.len() as u64,
            hedge_after,
        ))
    }
    fn head_hedged(&self, key: &str, hedge_after: Duration) -> Option<(Result<ObjectMeta>, Hedge)> {
        Some(self.hedged_read(
            Kind::Head,
            OpClass::Meta,
            || self.inner.head(key),
            |_| 0,
            hedge_after,
        ))
    }
}
