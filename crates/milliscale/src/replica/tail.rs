//! Following one chain of the live log, reading only what is new.
//!
//! A chain (one lane of one log stream, `keys::Chain`) is a run of
//! consecutive segment objects. The writer appends parts to the current
//! segment (append mode) or puts each part as its own object (put mode),
//! and moves to the next segment after `parts_max` appends or when a
//! checkpoint asks for a fresh one. It never writes to a segment again once
//! it has written to the next one. (One append, or one put object, carries
//! a part of each group of its stream; the bytes do not mark where an
//! append ends, so in append mode the tail learns that a segment is done
//! only from the next one's existence.)
//!
//! A [`ChainTail`] remembers where it stopped (segment, byte offset, part)
//! and on each [`ChainTail::poll`] reads from there: one ranged GET of the
//! current segment's new bytes in append mode (a range that starts at the
//! end is `InvalidRange`: nothing new), or a GET of the next part's object
//! in put mode. When the current segment has nothing new, it looks for
//! the next segment; if that exists, the writer has left the current one,
//! so the tail reads the current one to its end once more (the writer's
//! last append there happened before its first in the next) and moves on.
//!
//! What it hands out is complete, checksummed parts, in chain order, each
//! once. Bytes that do not yet make a whole part are left for the next
//! poll (a store that shows an append while it is being written, such as a
//! local directory, can show half of one); any other damage is `Corrupt`.
//! A fence part ends the chain: the writer was replaced there.
//!
//! **Hedged reads.** One slow GET holds back every CSN behind it on the
//! replica, as one slow append holds back commits on the writer. So a read
//! still unanswered after twice the 90th percentile of the tail's recent
//! reads is sent again where the store can race two requests itself
//! (`ObjectStore::get_range_hedged`, `head_hedged`), within the same 10%
//! budget as the writer's appends (`log::hedge::HedgePolicy::READS`).

use milliscale_seam::Elapsed as _;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use objstore::{ObjectStore, StoreError};

use crate::error::{Error, Result};
use crate::keys::{Chain, put_part_key, segment_key};
use crate::log::decode::{DecodeError, decode_part};
use crate::log::hedge::{HedgePolicy, Hedger};
use crate::log::record::Part;
use crate::log::segment::WriteMode;

/// Where a tail stands in its chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailPosition {
    /// The segment it reads.
    pub segment: u64,
    /// Bytes of it consumed (append mode).
    pub offset: u64,
    /// Objects of it consumed (put mode: one per append).
    pub object: u32,
}

/// What one poll found.
#[derive(Debug, Default)]
pub struct Polled {
    /// New whole parts, in chain order.
    pub parts: Vec<Part>,
    /// Requests sent.
    pub requests: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Of the requests, those sent a second time because the first was
    /// slow (both are in `requests`).
    pub hedged: u64,
    /// Of those, the ones whose second request answered first.
    pub hedges_won: u64,
    /// The segment the tail was reading is gone while the chain went on:
    /// the writer deleted it after a checkpoint that covers its CSNs.
    /// Parts it held past the tail's position are lost to this tail; the
    /// reader must catch up from that checkpoint. The tail does not move.
    pub gone: bool,
}

/// Follows one chain; see the module docs.
#[derive(Debug, Clone)]
pub struct ChainTail {
    chain: Chain,
    parts_max: u32,
    at: TailPosition,
    /// Learned from the first object found.
    mode: Option<WriteMode>,
    /// The epoch of the fence part that ended the chain, once read.
    fenced_by: Option<u64>,
    /// The last read of the current segment found no object.
    missing: bool,
    hedger: Hedger,
}

impl ChainTail {
    /// A tail of `chain` from the start of segment `start`; segments roll
    /// over after `parts_max` parts.
    pub fn new(chain: Chain, start: u64, parts_max: u32) -> ChainTail {
        ChainTail {
            chain,
            parts_max: parts_max.max(1),
            at: TailPosition { segment: start, offset: 0, object: 0 },
            mode: None,
            fenced_by: None,
            missing: false,
            hedger: Hedger::new(Some(HedgePolicy::READS)),
        }
    }

    /// Hedge slow reads by `policy` (the default), or not (`None`).
    pub fn hedging(mut self, policy: Option<HedgePolicy>) -> ChainTail {
        self.hedger = Hedger::new(policy);
        self
    }

    /// A ranged read, hedged if it is slow and the store can race two.
    fn get_range(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        key: &str,
        range: Range<u64>,
        out: &mut Polled,
    ) -> objstore::Result<Bytes> {
        self.read(
            out,
            |d| store.get_range_hedged(key, range.clone(), d),
            || store.get_range(key, range.clone()),
        )
    }

    /// A HEAD, hedged as [`ChainTail::get_range`].
    fn head(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        key: &str,
        out: &mut Polled,
    ) -> objstore::Result<objstore::ObjectMeta> {
        self.read(out, |d| store.head_hedged(key, d), || store.head(key))
    }

    /// One read: `raced` with the hedger's delay where the store races two
    /// requests itself, else `plain`. Every answer (a 404 or a 416 too)
    /// goes into the latencies the delay comes from; a failure to answer
    /// does not.
    fn read<T>(
        &mut self,
        out: &mut Polled,
        raced: impl FnOnce(std::time::Duration) -> Option<(objstore::Result<T>, objstore::Hedge)>,
        plain: impl FnOnce() -> objstore::Result<T>,
    ) -> objstore::Result<T> {
        let started = milliscale_seam::now();
        let r = match self.hedger.delay().and_then(raced) {
            Some((r, hedge)) => {
                self.hedger.count(hedge);
                if hedge.sent() {
                    out.requests += 1;
                    out.hedged += 1;
                }
                if hedge == objstore::Hedge::Won {
                    out.hedges_won += 1;
                }
                r
            }
            None => plain(),
        };
        if !r.as_ref().is_err_and(StoreError::is_retryable) {
            self.hedger.record(started.elapsed_now());
        }
        r
    }

    /// The chain it follows.
    pub fn chain(&self) -> Chain {
        self.chain
    }

    /// Where the next poll starts.
    pub fn position(&self) -> TailPosition {
        self.at
    }

    /// The epoch that fenced the chain, once its fence part was read:
    /// nothing more will be written to it.
    pub fn fenced_by(&self) -> Option<u64> {
        self.fenced_by
    }

    /// The write mode learned from the chain's objects, if any yet.
    pub fn mode(&self) -> Option<WriteMode> {
        self.mode
    }

    /// Take `mode` as the chain's write mode before reading any of it (the
    /// writer uses one mode per store: another chain of the store showed
    /// it), so a poll of a chain never written is one request, not two.
    pub fn assume_mode(&mut self, mode: WriteMode) {
        self.mode.get_or_insert(mode);
    }

    /// A poll of one request for an idle database: with `next`, only ask
    /// whether the writer started the next segment; else only read the
    /// current segment from where the tail stands. Whenever either shows
    /// something, the rest is a full [`ChainTail::poll`]. An idle tail
    /// alternates the two, so it notices the writer within two polls.
    pub fn poll_idle(&mut self, store: &Arc<dyn ObjectStore>, next: bool) -> Result<Polled> {
        if self.fenced_by.is_some() || self.segment_full() {
            return self.poll(store);
        }
        let mut out = Polled::default();
        if next {
            if self.next_segment_exists(store, &mut out)? {
                let mut rest = self.poll(store)?;
                rest.requests += out.requests;
                rest.hedged += out.hedged;
                rest.hedges_won += out.hedges_won;
                return Ok(rest);
            }
            return Ok(out);
        }
        // What is there now, as a poll reads it first; a segment that is
        // missing or ends in part of an append is judged by the full poll
        // after the next look finds the writer moved on.
        self.read_segment(store, &mut out)?;
        Ok(out)
    }

    /// Read what the chain gained since the last poll.
    pub fn poll(&mut self, store: &Arc<dyn ObjectStore>) -> Result<Polled> {
        let mut out = Polled::default();
        while self.fenced_by.is_none() {
            let before = out.parts.len();
            self.read_segment(store, &mut out)?;
            if self.fenced_by.is_some() {
                break;
            }
            if !self.segment_full() {
                if out.parts.len() > before {
                    break; // more may come here: the next poll looks
                }
                // Nothing new here: has the writer moved on?
                if !self.next_segment_exists(store, &mut out)? {
                    break;
                }
                // It has: what it wrote here is final; read it to the end.
                let whole = self.read_segment(store, &mut out)?;
                if self.missing && self.segment_deleted(store, &mut out)? {
                    // Deleted: the writer truncated the log past it (a
                    // checkpoint covers it). The tail stays here.
                    out.gone = true;
                    break;
                }
                if !whole {
                    return Err(Error::Corrupt(format!(
                        "{}: ends in a partial part at offset {}, but the chain goes on",
                        segment_key(self.chain, self.at.segment),
                        self.at.offset
                    )));
                }
                if self.fenced_by.is_some() {
                    break;
                }
            }
            self.at = TailPosition { segment: self.at.segment + 1, offset: 0, object: 0 };
        }
        Ok(out)
    }

    /// Put mode: every object of the segment was read.
    fn segment_full(&self) -> bool {
        self.mode == Some(WriteMode::PutPerFlush) && self.at.object >= self.parts_max
    }

    /// Read the current segment's new parts. Returns false if it ended in
    /// bytes that do not make a whole part.
    fn read_segment(&mut self, store: &Arc<dyn ObjectStore>, out: &mut Polled) -> Result<bool> {
        loop {
            if self.segment_full() || self.fenced_by.is_some() {
                return Ok(true);
            }
            let got = match self.mode {
                Some(WriteMode::Append) => self.get_appended(store, out)?,
                Some(WriteMode::PutPerFlush) => self.get_put_part(store, out)?,
                None => match self.get_appended(store, out)? {
                    Some(b) => {
                        self.mode = Some(WriteMode::Append);
                        Some(b)
                    }
                    None => {
                        let b = self.get_put_part(store, out)?;
                        if b.is_some() {
                            self.mode = Some(WriteMode::PutPerFlush);
                        }
                        b
                    }
                },
            };
            let Some(bytes) = got else { return Ok(true) };
            let whole = self.take_parts(&bytes, out)?;
            if self.mode == Some(WriteMode::Append) {
                // Read everything there was in one request.
                return Ok(whole);
            }
            if !whole {
                // A put object is written whole: a partial part in it is
                // damage, not an append in progress.
                return Err(Error::Corrupt(format!(
                    "{}: ends in a partial part",
                    put_part_key(self.chain, self.at.segment, self.at.object)
                )));
            }
            self.at.object += 1;
        }
    }

    /// The current segment's bytes from the offset on; `None` if there are
    /// none (yet).
    fn get_appended(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        out: &mut Polled,
    ) -> Result<Option<Bytes>> {
        let key = segment_key(self.chain, self.at.segment);
        out.requests += 1;
        self.missing = false;
        match self.get_range(store, &key, self.at.offset..u64::MAX, out) {
            Ok(b) => {
                out.bytes += b.len() as u64;
                Ok((!b.is_empty()).then_some(b))
            }
            Err(StoreError::NotFound(_)) => {
                self.missing = true;
                Ok(None)
            }
            Err(StoreError::InvalidRange { .. }) => Ok(None),
            Err(e) => Err(Error::Store(format!("{key}: {e}"))),
        }
    }

    /// The current segment's next part object (put mode); `None` if it is
    /// not there (yet).
    fn get_put_part(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        out: &mut Polled,
    ) -> Result<Option<Bytes>> {
        let key = put_part_key(self.chain, self.at.segment, self.at.object);
        out.requests += 1;
        self.missing = false;
        // A put part is never empty: the whole object, as a range.
        match self.get_range(store, &key, 0..u64::MAX, out) {
            Err(StoreError::InvalidRange { .. }) => Ok(Some(Bytes::new())),
            Ok(b) => {
                out.bytes += b.len() as u64;
                Ok(Some(b))
            }
            Err(StoreError::NotFound(_)) => {
                self.missing = true;
                Ok(None)
            }
            Err(e) => Err(Error::Store(format!("{key}: {e}"))),
        }
    }

    /// Decode whole parts from `bytes` into `out`; in append mode advance
    /// the offset past them. Returns false if bytes were left over that do
    /// not make a whole part.
    fn take_parts(&mut self, bytes: &Bytes, out: &mut Polled) -> Result<bool> {
        let mut at = 0;
        while at < bytes.len() {
            match decode_part(&bytes.slice(at..)) {
                Ok((part, n)) => {
                    at += n;
                    if self.mode != Some(WriteMode::PutPerFlush) {
                        self.at.offset += n as u64;
                    }
                    if let Some(epoch) = part.fence {
                        self.fenced_by = Some(epoch);
                        return Ok(true);
                    }
                    out.parts.push(part);
                }
                Err(DecodeError::Truncated { .. }) if self.mode == Some(WriteMode::PutPerFlush) => {
                    return Ok(false);
                }
                Err(e) if self.mode != Some(WriteMode::PutPerFlush) => {
                    // Half an append (still landing, or torn: its writer
                    // died in it) is damage with nothing valid after it,
                    // or only the next writer's fence parts; anything else
                    // is corruption. A torn part's length can reach into
                    // the fence part after it.
                    let rest = bytes.slice(at..);
                    match after_torn(&rest) {
                        AfterTorn::Nothing => return Ok(false),
                        AfterTorn::Fence(epoch) => {
                            self.at.offset += rest.len() as u64;
                            self.fenced_by = Some(epoch);
                            return Ok(true);
                        }
                        AfterTorn::Entries => {
                            let key = segment_key(self.chain, self.at.segment);
                            return Err(Error::Corrupt(format!(
                                "{key}: offset {}: {e}, with log after it",
                                self.at.offset
                            )));
                        }
                    }
                }
                Err(e) => {
                    let key = segment_key(self.chain, self.at.segment);
                    return Err(Error::Corrupt(format!(
                        "{key}: object {} offset {}: {e}",
                        self.at.object,
                        self.at.offset + at as u64
                    )));
                }
            }
        }
        Ok(true)
    }

    /// The writer has moved past the current segment and its last read
    /// found no object there: was the segment deleted? In append mode the
    /// segment must exist (a chain's segments are consecutive, each created
    /// by its first append). In put mode a segment can end before
    /// `parts_max` objects (a checkpoint asked for a fresh one): it was
    /// deleted if the object read last is gone too (or none was read).
    /// Truncation deletes a segment's part objects in key order.
    fn segment_deleted(&mut self, store: &Arc<dyn ObjectStore>, out: &mut Polled) -> Result<bool> {
        if self.mode != Some(WriteMode::PutPerFlush) || self.at.object == 0 {
            return Ok(true);
        }
        let key = put_part_key(self.chain, self.at.segment, self.at.object - 1);
        out.requests += 1;
        match self.head(store, &key, out) {
            Ok(_) => Ok(false),
            Err(StoreError::NotFound(_)) => Ok(true),
            Err(e) => Err(Error::Store(format!("{key}: {e}"))),
        }
    }

    /// Does the segment after the current one exist?
    fn next_segment_exists(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        out: &mut Polled,
    ) -> Result<bool> {
        let next = self.at.segment + 1;
        let key = match self.mode {
            Some(WriteMode::PutPerFlush) => put_part_key(self.chain, next, 0),
            _ => segment_key(self.chain, next),
        };
        out.requests += 1;
        match self.head(store, &key, out) {
            Ok(_) => Ok(true),
            Err(StoreError::NotFound(_)) if self.mode.is_none() => {
                // Mode unknown (nothing read yet): try the put-mode name.
                out.requests += 1;
                match self.head(store, &put_part_key(self.chain, next, 0), out) {
                    Ok(_) => Ok(true),
                    Err(StoreError::NotFound(_)) => Ok(false),
                    Err(e) => Err(Error::Store(format!("{key}: {e}"))),
                }
            }
            Err(StoreError::NotFound(_)) => Ok(false),
            Err(e) => Err(Error::Store(format!("{key}: {e}"))),
        }
    }
}

/// What follows damage in an appended segment.
enum AfterTorn {
    /// No valid part: a torn append, perhaps still landing.
    Nothing,
    /// Only fence parts: a torn append, then the next writer's fence (the
    /// first one's epoch).
    Fence(u64),
    /// A part with entries: the damage is not a torn tail.
    Entries,
}

/// Look past damage at `damaged[0]`: a corrupt length hides where the next
/// part starts, so every later occurrence of the part magic is tried (as
/// recovery does).
fn after_torn(damaged: &Bytes) -> AfterTorn {
    let magic = crate::log::record::PART_MAGIC;
    let mut fence = None;
    for i in 1..damaged.len().saturating_sub(3) {
        if damaged[i..i + 4] != magic {
            continue;
        }
        match decode_part(&damaged.slice(i..)) {
            Ok((p, _)) if p.fence.is_none() => return AfterTorn::Entries,
            Ok((p, _)) => {
                fence = fence.or(p.fence);
            }
            Err(_) => {}
        }
    }
    fence.map_or(AfterTorn::Nothing, AfterTorn::Fence)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::record::{Entry, PartBuilder, fence_part};
    use objstore::{MemoryStore, ObjectMeta};
    use parking_lot::Mutex;

    /// A part of group 0 holding an abort entry for `csn`.
    fn part(csn: u64) -> Bytes {
        let mut b = PartBuilder::new(0, 64);
        b.push(&Entry::Abort { csn });
        b.finish()
    }

    type PendingWrite = Box<dyn FnOnce(&MemoryStore) + Send>;

    /// A memory store that runs a pending write just before it answers the
    /// first HEAD of `trigger`: the writer's last append to a segment and
    /// its move to the next land between the tail's read of the segment
    /// and its look for the next one.
    struct Racing {
        inner: MemoryStore,
        trigger: String,
        pending: Mutex<Option<PendingWrite>>,
    }

    impl std::fmt::Debug for Racing {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Racing").field("trigger", &self.trigger).finish()
        }
    }

    impl ObjectStore for Racing {
        fn put(&self, key: &str, body: Bytes) -> objstore::Result<ObjectMeta> {
            self.inner.put(key, body)
        }
        fn put_if_absent(&self, key: &str, body: Bytes) -> objstore::Result<ObjectMeta> {
            self.inner.put_if_absent(key, body)
        }
        fn put_if_match(&self, key: &str, body: Bytes, etag: &str) -> objstore::Result<ObjectMeta> {
            self.inner.put_if_match(key, body, etag)
        }
        fn append(&self, key: &str, offset: u64, body: Bytes) -> objstore::Result<ObjectMeta> {
            self.inner.append(key, offset, body)
        }
        fn get(&self, key: &str) -> objstore::Result<Bytes> {
            self.inner.get(key)
        }
        fn get_range(&self, key: &str, range: std::ops::Range<u64>) -> objstore::Result<Bytes> {
            self.inner.get_range(key, range)
        }
        fn head(&self, key: &str) -> objstore::Result<ObjectMeta> {
            if key == self.trigger
                && let Some(write) = self.pending.lock().take()
            {
                write(&self.inner);
            }
            self.inner.head(key)
        }
        fn list(&self, prefix: &str) -> objstore::Result<Vec<ObjectMeta>> {
            self.inner.list(prefix)
        }
        fn delete(&self, key: &str) -> objstore::Result<()> {
            self.inner.delete(key)
        }
    }

    fn csns(parts: &[Part]) -> Vec<u64> {
        parts.iter().flat_map(|p| p.entries.iter().map(Entry::csn)).collect()
    }

    #[test]
    fn the_last_append_before_a_segment_move_is_read_and_a_fence_ends_the_chain() {
        let chain = Chain::new(0, 1);
        let (s0, s1) = (segment_key(chain, 0), segment_key(chain, 1));
        let racing =
            Racing { inner: MemoryStore::new(), trigger: s1.clone(), pending: Mutex::new(None) };
        let first = part(1);
        racing.append(&s0, 0, first.clone()).expect("append");
        let store: Arc<dyn ObjectStore> = Arc::new(racing);
        let mut tail = ChainTail::new(chain, 0, 10_000);
        assert_eq!(csns(&tail.poll(&store).expect("poll").parts), [1]);

        // Between the tail's read of segment 0 (nothing new) and its look
        // for segment 1, the writer appends CSN 2 to segment 0 and CSN 3 to
        // a new segment 1.
        let at = first.len() as u64;
        let s1_write = s1.clone();
        let racing = Racing {
            inner: MemoryStore::new(),
            trigger: s1.clone(),
            pending: Mutex::new(Some(Box::new(move |m: &MemoryStore| {
                m.append(&segment_key(chain, 0), at, part(2)).expect("append");
                m.append(&s1_write, 0, part(3)).expect("append");
            }))),
        };
        racing.inner.append(&s0, 0, first).expect("append");
        let store: Arc<dyn ObjectStore> = Arc::new(racing);
        let got = tail.poll(&store).expect("poll");
        assert_eq!(csns(&got.parts), [2, 3], "the last append of segment 0, then segment 1");
        assert_eq!(tail.position().segment, 1);

        // A fence part ends the chain; nothing after it is handed out.
        let s1_len = part(3).len() as u64;
        store.append(&s1, s1_len, fence_part(0, 7)).expect("fence");
        store.append(&s1, s1_len + fence_part(0, 7).len() as u64, part(4)).expect("append");
        assert!(tail.poll(&store).expect("poll").parts.is_empty());
        assert_eq!(tail.fenced_by(), Some(7));
        assert!(tail.poll(&store).expect("poll").parts.is_empty());
    }

    #[test]
    fn half_a_part_waits_and_damage_before_a_part_is_corrupt() {
        let chain = Chain::new(0, 0);
        let key = segment_key(chain, 0);
        let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
        let p = part(1);
        let half = p.len() / 2;
        store.append(&key, 0, p.slice(..half)).expect("append");
        let mut tail = ChainTail::new(chain, 0, 10_000);
        assert!(tail.poll(&store).expect("poll").parts.is_empty(), "half a part waits");
        store.append(&key, half as u64, p.slice(half..)).expect("append");
        assert_eq!(csns(&tail.poll(&store).expect("poll").parts), [1]);

        let mut bad = part(2).to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        let bad_len = bad.len() as u64;
        store.append(&key, p.len() as u64, Bytes::from(bad)).expect("append");
        // Damage with nothing after it may be a torn append: it waits, as
        // recovery would cut it.
        assert!(tail.poll(&store).expect("poll").parts.is_empty(), "a torn tail waits");
        // A valid part after it: the damage is not a torn tail.
        store.append(&key, p.len() as u64 + bad_len, part(3)).expect("append");
        assert!(matches!(tail.poll(&store), Err(Error::Corrupt(_))));
    }

    #[test]
    fn a_torn_append_then_the_next_writers_fence_ends_the_chain() {
        let chain = Chain::new(0, 0);
        let key = segment_key(chain, 0);
        let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
        store.append(&key, 0, part(1)).expect("append");
        let at = part(1).len();
        // A big part torn after a few bytes: its length reaches past the
        // fence part that follows.
        let mut b = PartBuilder::new(0, 4096);
        for csn in 2..60 {
            b.push(&Entry::Abort { csn });
        }
        let torn = b.finish().slice(..40);
        store.append(&key, at as u64, torn.clone()).expect("torn");
        let mut tail = ChainTail::new(chain, 0, 10_000);
        assert_eq!(csns(&tail.poll(&store).expect("poll").parts), [1]);
        assert_eq!(tail.fenced_by(), None, "a torn tail alone waits");
        store.append(&key, (at + torn.len()) as u64, fence_part(0, 9)).expect("fence");
        store.append(&segment_key(chain, 1), 0, fence_part(0, 9)).expect("fence");
        assert!(tail.poll(&store).expect("poll").parts.is_empty());
        assert_eq!(tail.fenced_by(), Some(9));
    }
}
