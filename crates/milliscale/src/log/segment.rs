//! Writing a log stream's appends to a store: segments, rollover, and the
//! failure handling of invariant 5.
//!
//! **Chains.** A log stream writes through `log_lanes` *lanes*, each its
//! own chain of segment objects ([`Chain`], named after the stream's first
//! group `GGGG`): lane 0 is `log/gGGGG/sSSSSSSSS` (the name a one-lane log
//! has always had), lane `L > 0` is `log/gGGGG/lL/sSSSSSSSS`. A writer
//! writes one chain. Each append carries one part of each group of the
//! stream that had entries; to this module it is just bytes.
//!
//! **Append mode.** A chain is a run of segment objects; each write is one
//! append at the segment's current size. After `parts_max` appends
//! (10,000 on S3 Express) the segment is sealed and the next one starts at
//! offset 0 (invariant 4).
//!
//! **Put mode**, for stores whose probe says they cannot append: one object
//! per part, `<segment>/pPPPPP`, written with `If-None-Match: *`,
//! and the same rollover, so no segment prefix lists more than `parts_max`
//! objects.
//!
//! **An append is never blindly retried.** When an append's outcome is
//! unknown (a timeout, a lost response, a 5xx) or the store says
//! `InvalidWriteOffset`, the writer reads the segment's size. If the size
//! is unchanged, the part did not land and is sent again after a backoff.
//! If the size grew by exactly the part and the bytes there are the part,
//! it landed. Anything else means another writer touched the segment, and
//! the writer stops with [`SegmentError::Foreign`]: it never overwrites.
//! Throttling and transient errors back off with full jitter; past the
//! deadline the writer gives up with [`SegmentError::Unavailable`].
//!
//! **Hedged appends.** Object stores have heavy latency tails: about one
//! request in 10^4 takes tens of times the median. A slow append holds back
//! every transaction in its part, and under the gCSN rule every commit that
//! depends on them, in every group. So an append still unanswered after
//! [`HedgePolicy`]'s delay (by default the 90th percentile of the writer's
//! recent appends) is sent a second time, same bytes, same offset, and the
//! first success wins. The write offset makes this safe: at most one of the
//! two can land, because the other finds the object's size changed and is
//! refused; a failure waits for the other request's answer (its refusal
//! may be the sign that the twin landed), and only if both fail does the
//! usual reconciliation above decide (as it does for any failed append:
//! it is correct whichever copy lands, and when). Each hedge is one extra request (counted by the store's
//! accounting), and the policy bounds them: at most `max_share` of the
//! appends (10%) in the long run.
//!
//! Where it runs: a store whose client is asynchronous (`s3://`) hedges
//! inside its own runtime, and the simulated store models the two racing
//! requests itself (`ObjectStore::append_hedged`); both cost the writer's
//! thread nothing, so `Hedging::Auto` (the default) hedges there and
//! only there. For other stores, waiting with a timeout needs the append
//! on a helper thread: each writer keeps a few long-lived ones
//! (`AppendPool`), which sleep between appends. That costs two thread
//! wake-ups per append, which show in the median when the cores are busy;
//! `Hedging::Always` turns it on.

use milliscale_seam::Elapsed as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use objstore::{ObjectStore, StoreError};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::hedge::{AppendJob, AppendPool, HedgePolicy, Hedger};
use crate::keys::{Chain, put_part_key, segment_key};

/// How parts reach the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// One append per part (S3 Express, fs, the emulator).
    Append,
    /// One object per part (stores that cannot append).
    PutPerFlush,
}

/// Backoff and give-up policy for one part.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// First backoff; it doubles per attempt, with full jitter.
    pub base: Duration,
    /// Largest backoff.
    pub cap: Duration,
    /// Give up on a part after this long.
    pub deadline: Duration,
    /// When to send a second copy of a slow append; `None` (the default):
    /// never.
    pub hedge: Option<HedgePolicy>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_millis(5),
            cap: Duration::from_millis(500),
            deadline: Duration::from_secs(30),
            hedge: None,
        }
    }
}

/// Why a part could not be written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SegmentError {
    /// The store kept failing past the deadline.
    #[error("log store unavailable for {waited:?}: {last}")]
    Unavailable {
        /// How long the writer tried.
        waited: Duration,
        /// The last error.
        last: String,
    },
    /// The segment holds bytes this writer did not write.
    #[error("log segment {key} was changed by another writer: {detail}")]
    Foreign {
        /// The object.
        key: String,
        /// What was found.
        detail: String,
    },
    /// The store refused the request outright.
    #[error("log store error on {key}: {error}")]
    Store {
        /// The object.
        key: String,
        /// The error.
        error: StoreError,
    },
}

/// Where a part was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartLocation {
    /// Segment number.
    pub segment: u64,
    /// Part number within the segment, from 0.
    pub part: u32,
    /// Byte offset within the segment (append mode; 0 in put mode).
    pub offset: u64,
}

/// A part [`SegmentWriter::start_at`] started.
#[derive(Debug)]
pub enum StartedPart {
    /// The store has no asynchronous client: the write already ran.
    Written(Result<PartLocation, SegmentError>),
    /// The append is out; its answer goes to [`SegmentWriter::finish`].
    Sent {
        /// The request.
        pending: objstore::PendingAppend,
        /// When it was sent.
        sent: Instant,
    },
}

/// Writes one chain's parts in order. See the module docs.
#[derive(Debug)]
pub struct SegmentWriter {
    store: Arc<dyn ObjectStore>,
    chain: Chain,
    mode: WriteMode,
    parts_max: u32,
    retry: RetryPolicy,
    segment: u64,
    offset: u64,
    parts: u32,
    rng: SmallRng,
    hedger: Hedger,
    pool: AppendPool,
}

impl SegmentWriter {
    /// A writer for `chain` that starts a fresh segment `first_segment`.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        chain: Chain,
        mode: WriteMode,
        parts_max: u32,
        first_segment: u64,
        retry: RetryPolicy,
    ) -> SegmentWriter {
        SegmentWriter {
            store,
            chain,
            mode,
            parts_max: parts_max.max(1),
            retry,
            segment: first_segment,
            offset: 0,
            parts: 0,
            rng: SmallRng::seed_from_u64(
                (u64::from(chain.group) << 8 | u64::from(chain.lane)) ^ 0x6c6f_6773,
            ),
            hedger: Hedger::new(retry.hedge),
            pool: AppendPool::new(),
        }
    }

    /// Appends sent a second time since the last call.
    pub fn take_hedged(&mut self) -> u64 {
        std::mem::take(&mut self.hedger.hedged)
    }

    /// Of those, the ones whose second request answered first (known where
    /// the store hedges itself), since the last call.
    pub fn take_hedges_won(&mut self) -> u64 {
        std::mem::take(&mut self.hedger.won)
    }

    /// One append, hedged if it is slow (see the module docs). Returns the
    /// first answer.
    fn append_once(&mut self, key: &str, part: &Bytes) -> Result<objstore::ObjectMeta, StoreError> {
        let started = milliscale_seam::now();
        let r = self.append_maybe_hedged(key, part);
        if r.is_ok() {
            self.hedger.record(started.elapsed_now());
        }
        r
    }

    fn append_maybe_hedged(
        &mut self,
        key: &str,
        part: &Bytes,
    ) -> Result<objstore::ObjectMeta, StoreError> {
        let Some(delay) = self.hedger.delay() else {
            return self.store.append(key, self.offset, part.clone());
        };
        // A store with an asynchronous client hedges on its own runtime
        // (the simulated one models it), with no hand-off between threads
        // of ours.
        if let Some((r, hedge)) = self.store.append_hedged(key, self.offset, part.clone(), delay) {
            self.hedger.count(hedge);
            return r;
        }
        if !self.hedger.policy().is_some_and(|h| h.threads) {
            return self.store.append(key, self.offset, part.clone());
        }
        let (tx, rx) = crossbeam_channel::bounded(2);
        let (store, offset) = (Arc::clone(&self.store), self.offset);
        let request =
            |tx: crossbeam_channel::Sender<Result<objstore::ObjectMeta, StoreError>>| -> AppendJob {
                let (store, key, part) = (Arc::clone(&store), key.to_owned(), part.clone());
                Box::new(move || {
                    let _ = tx.send(store.append(&key, offset, part));
                })
            };
        let job = request(tx.clone());
        if self.pool.run(job).is_err() {
            // No thread to wait on: append without a hedge.
            return self.store.append(key, self.offset, part.clone());
        }
        // A zero delay hedges at once (tests use it to race every append).
        let first = if delay.is_zero() {
            Err(crossbeam_channel::RecvTimeoutError::Timeout)
        } else {
            milliscale_seam::recv_timeout(&rx, delay)
        };
        match first {
            Ok(r) => return r,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                unreachable!("this thread holds a sender")
            }
        }
        self.hedger.count(objstore::Hedge::Lost);
        // If the hedge cannot be queued, the first request is still ours
        // to wait for.
        let _ = self.pool.run(request(tx));
        milliscale_seam::recv(&rx).expect("an append thread answers")
    }

    /// The chain it writes.
    pub fn chain(&self) -> Chain {
        self.chain
    }

    /// The segment the next part goes to.
    pub fn segment(&self) -> u64 {
        self.segment
    }

    fn roll_over(&mut self) {
        self.segment += 1;
        self.offset = 0;
        self.parts = 0;
    }

    /// Write one encoded part durably; returns where it landed. The writer
    /// rolls over on its own after `parts_max` parts, or when the store
    /// says the segment is full.
    pub fn write(&mut self, part: &Bytes) -> Result<PartLocation, SegmentError> {
        if self.parts >= self.parts_max {
            self.roll_over();
        }
        self.write_here(part, true)
    }

    /// Write one part to `segment`, chosen by the log group (so that every
    /// store holds the same parts in the same segments, which fencing and
    /// checkpoints rely on). A new segment number starts it at offset 0.
    /// A store that refuses more parts in the segment is an error here:
    /// `parts_max` must not exceed the store's limit.
    pub fn write_at(&mut self, segment: u64, part: &Bytes) -> Result<PartLocation, SegmentError> {
        self.move_to(segment);
        self.write_here(part, false)
    }

    fn move_to(&mut self, segment: u64) {
        if segment != self.segment {
            self.segment = segment;
            self.offset = 0;
            self.parts = 0;
        }
    }

    /// [`SegmentWriter::write_at`] without waiting, where the store can
    /// (`ObjectStore::start_append`, append mode): the append is sent and
    /// the caller polls or waits on the returned [`StartedPart`], then
    /// hands its answer to [`SegmentWriter::finish`]. Anywhere else the
    /// write runs here, and the part returned is already answered. One
    /// part at a time: finish it before the next one starts.
    pub fn start_at(&mut self, segment: u64, part: &Bytes) -> StartedPart {
        self.move_to(segment);
        if self.mode == WriteMode::Append {
            let key = segment_key(self.chain, self.segment);
            let hedge = self.hedger.delay();
            if let Some(pending) =
                Arc::clone(&self.store).start_append(&key, self.offset, part.clone(), hedge)
            {
                return StartedPart::Sent { pending, sent: milliscale_seam::now() };
            }
        }
        StartedPart::Written(self.write_here(part, false))
    }

    /// The end of a part started with [`SegmentWriter::start_at`], given
    /// the store's answer: where it landed, or, after a failure, the same
    /// reconciliation and retries as a synchronous write, here.
    pub fn finish(
        &mut self,
        part: &Bytes,
        sent: Instant,
        (answer, hedge): objstore::pending::AppendAnswer,
    ) -> Result<PartLocation, SegmentError> {
        self.hedger.count(hedge);
        if answer.is_ok() {
            self.hedger.record(sent.elapsed_now());
        }
        let key = segment_key(self.chain, self.segment);
        match self.append_outcome(&key, part, answer) {
            Ok(Some(loc)) => Ok(loc),
            Err(Step::Fail(e)) => Err(e),
            Err(Step::RollOver) => Err(SegmentError::Store {
                key,
                error: StoreError::TooManyParts { parts: self.parts },
            }),
            // Surely not landed, or not known yet: as a synchronous write
            // goes on after its first attempt (a stale offset is refused
            // and reconciled, so sending again is safe).
            Ok(None) | Err(Step::Retry(_)) => self.write_here(part, false),
        }
    }

    fn write_here(&mut self, part: &Bytes, may_roll: bool) -> Result<PartLocation, SegmentError> {
        let started = milliscale_seam::now();
        let mut attempt = 0u32;
        loop {
            let key = match self.mode {
                WriteMode::Append => segment_key(self.chain, self.segment),
                WriteMode::PutPerFlush => put_part_key(self.chain, self.segment, self.parts),
            };
            let outcome = match self.mode {
                WriteMode::Append => self.try_append(&key, part),
                WriteMode::PutPerFlush => self.try_put(&key, part),
            };
            let last = match outcome {
                Ok(Some(loc)) => return Ok(loc),
                Ok(None) => "the part did not land".to_owned(),
                Err(Step::RollOver) if may_roll => {
                    self.roll_over();
                    continue;
                }
                Err(Step::RollOver) => {
                    return Err(SegmentError::Store {
                        key,
                        error: StoreError::TooManyParts { parts: self.parts },
                    });
                }
                Err(Step::Fail(e)) => return Err(e),
                Err(Step::Retry(last)) => last,
            };
            if started.elapsed_now() >= self.retry.deadline {
                return Err(SegmentError::Unavailable { waited: started.elapsed_now(), last });
            }
            attempt += 1;
            self.back_off(attempt);
        }
    }

    fn back_off(&mut self, attempt: u32) {
        let ceiling = self.retry.base.saturating_mul(1 << attempt.min(16)).min(self.retry.cap);
        let nanos = self.rng.random_range(0..=ceiling.as_nanos() as u64);
        milliscale_seam::sleep(Duration::from_nanos(nanos));
    }

    fn landed(&mut self, part: &Bytes) -> PartLocation {
        let loc = PartLocation { segment: self.segment, part: self.parts, offset: self.offset };
        if self.mode == WriteMode::Append {
            self.offset += part.len() as u64;
        }
        self.parts += 1;
        loc
    }

    /// One append. `Ok(Some)` landed, `Ok(None)` surely did not.
    fn try_append(&mut self, key: &str, part: &Bytes) -> Result<Option<PartLocation>, Step> {
        let answer = self.append_once(key, part);
        self.append_outcome(key, part, answer)
    }

    /// What an append's answer means for the part (see `try_append`).
    fn append_outcome(
        &mut self,
        key: &str,
        part: &Bytes,
        answer: Result<objstore::ObjectMeta, StoreError>,
    ) -> Result<Option<PartLocation>, Step> {
        match answer {
            Ok(m) if m.size == self.offset + part.len() as u64 => Ok(Some(self.landed(part))),
            Ok(m) => Err(Step::Fail(SegmentError::Foreign {
                key: key.into(),
                detail: format!(
                    "an append at {} of {} bytes left size {}",
                    self.offset,
                    part.len(),
                    m.size
                ),
            })),
            Err(StoreError::TooManyParts { .. }) => Err(Step::RollOver),
            Err(
                StoreError::Throttled(_)
                | StoreError::Transient(_)
                | StoreError::InvalidWriteOffset { .. },
            ) => self.reconcile_append(key, part),
            Err(StoreError::NotFound(_)) => Err(Step::Fail(SegmentError::Foreign {
                key: key.into(),
                detail: format!("the segment is gone at offset {}", self.offset),
            })),
            Err(error) => Err(Step::Fail(SegmentError::Store { key: key.into(), error })),
        }
    }

    /// After an unknown outcome: did the append land? (invariant 5)
    fn reconcile_append(&mut self, key: &str, part: &Bytes) -> Result<Option<PartLocation>, Step> {
        let size = match self.store.head(key) {
            Ok(m) => m.size,
            Err(StoreError::NotFound(_)) if self.offset == 0 => 0,
            // A transient error: cannot tell yet; ask again after a backoff.
            // Sending the append again is safe: at a stale offset it is
            // refused, and refused appends are reconciled here.
            Err(e) => return Err(Step::after(key, e)),
        };
        let end = self.offset + part.len() as u64;
        if size == self.offset {
            return Ok(None);
        }
        if size == end {
            return match self.store.get_range(key, self.offset..end) {
                Ok(b) if b == *part => Ok(Some(self.landed(part))),
                Ok(_) => Err(Step::Fail(SegmentError::Foreign {
                    key: key.into(),
                    detail: format!("bytes {}..{end} are not this writer's part", self.offset),
                })),
                Err(e) => Err(Step::after(key, e)),
            };
        }
        Err(Step::Fail(SegmentError::Foreign {
            key: key.into(),
            detail: format!("size {size}, expected {} (not landed) or {end} (landed)", self.offset),
        }))
    }

    /// One conditional put of a part object.
    fn try_put(&mut self, key: &str, part: &Bytes) -> Result<Option<PartLocation>, Step> {
        match self.store.put_if_absent(key, part.clone()) {
            Ok(_) => Ok(Some(self.landed(part))),
            // A put is idempotent under If-None-Match: an earlier attempt
            // may have landed; then the object holds exactly this part.
            Err(StoreError::AlreadyExists(_)) => match self.store.get(key) {
                Ok(b) if b == *part => Ok(Some(self.landed(part))),
                Ok(_) => Err(Step::Fail(SegmentError::Foreign {
                    key: key.into(),
                    detail: "the part object holds other bytes".into(),
                })),
                Err(e) => Err(Step::after(key, e)),
            },
            Err(e) => Err(Step::after(key, e)),
        }
    }
}

/// What the write loop does after one attempt that did not land.
enum Step {
    Retry(String),
    RollOver,
    Fail(SegmentError),
}

impl Step {
    /// After a store error: back off and try again if it was throttling or
    /// transient, else give up.
    fn after(key: &str, e: StoreError) -> Step {
        match e {
            StoreError::Throttled(_) | StoreError::Transient(_) => Step::Retry(e.to_string()),
            error => Step::Fail(SegmentError::Store { key: key.into(), error }),
        }
    }
}
