//! The time index: which CSN a wall-clock millisecond stands for (design
//! record 0012, "The past at time t").
//!
//! A **sample** `(ms, c)`: `c` is the highest CSN handed out when it was
//! taken, `ms` the wall-clock millisecond read *after* `c` was. Samples
//! only grow, in both. Two rules make `At::Time(t)` exact:
//!
//! 1. a sample covers only CSNs handed out by the end of its millisecond,
//!    so the newest sample with `ms <= t` holds nothing that pre-committed
//!    after `t`;
//! 2. before a transaction is reported acknowledged, a sample with
//!    `c >= its CSN` exists (`TimeIndex::cover`, called by
//!    `CommitMarks::is_acknowledged`), taken before the ack, so at a
//!    millisecond at or before it.
//!
//! The writer keeps its samples in memory and writes the new ones every
//! [`FLUSH_EVERY`] as an object `time/tMMMMMMMMMMMMMMMMeEEEEEEEEE` named
//! after its first sample's millisecond and its epoch (`TimeIndex::flush`); every
//! [`FOLD_EVERY`] it rewrites the objects since the last fold as one,
//! under the first one's name, and deletes the rest. A reader lists
//! `time/` and reads the object with the greatest name at or below `t`
//! ([`resolve`]).
//!
//! Object format (little endian): `"MSTI"`, format (1), 3 reserved bytes,
//! the writer's epoch (8), samples (4), the first sample's ms (8) and CSN
//! (8), the writer's gCSN when it wrote the object (8: every CSN below it
//! was durable), the CRC32C of the header's first 44 bytes and the body
//! (4); then each further sample as two LEB128 varints, the growth in ms
//! and in CSN.

use milliscale_seam::Elapsed as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use bytes::{BufMut, Bytes};
use objstore::ObjectStore;
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::mvcc::Csn;
use crate::retry::retry;

/// Where the time index's objects live.
pub const TIME_PREFIX: &str = "time/";
/// How often the writer writes its new samples out: what a crash can
/// lose of the index.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// How long after a time a reader waits before resolving it: by then a
/// running writer has written every sample taken at or before it.
pub const SETTLE: Duration = Duration::from_secs(2);
/// How often the writer folds the objects written since the last fold
/// into one.
pub const FOLD_EVERY: Duration = Duration::from_secs(600);

const MAGIC: [u8; 4] = *b"MSTI";
const FORMAT: u8 = 1;
const HEADER: usize = 48;

/// One sample: the highest CSN handed out, and the millisecond read after.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Sample {
    /// Milliseconds since the Unix epoch.
    pub ms: u64,
    /// The highest CSN handed out by then (0: none yet).
    pub csn: Csn,
}

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    milliscale_seam::system_now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The object key of a time index object of writer epoch `epoch` whose
/// first sample is at `ms`. The epoch keeps two writers' objects apart
/// when the second's clock starts at the first's last millisecond.
pub fn time_key(ms: u64, epoch: u64) -> String {
    format!("{TIME_PREFIX}t{ms:016}e{epoch:010}")
}

/// The millisecond and epoch a time index object's key names.
pub fn parse_time_key(key: &str) -> Option<(u64, u64)> {
    let rest = key.strip_prefix(TIME_PREFIX)?.strip_prefix('t')?;
    let (ms, epoch) = rest.split_once('e')?;
    let digits = |d: &str, n: usize| {
        (d.len() == n && d.bytes().all(|b| b.is_ascii_digit())).then(|| d.parse().ok()).flatten()
    };
    Some((digits(ms, 16)?, digits(epoch, 10)?))
}

/// The writer's time index.
#[derive(Debug)]
pub(crate) struct TimeIndex {
    epoch: u64,
    /// The highest CSN a sample covers: the fast path of `cover`.
    covered: AtomicU64,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The newest sample before this writer's (the previous writers' last,
    /// or the last fold's last): the clock never reads below it.
    floor: Sample,
    /// Samples since the last fold, oldest first.
    samples: Vec<Sample>,
    /// Of `samples`, those already written out.
    written: usize,
    /// The objects written since the last fold (their first ms).
    objects: Vec<u64>,
    /// The gCSN the last object written carried.
    durable_written: Csn,
    last_flush: Option<std::time::Instant>,
    last_fold: Option<std::time::Instant>,
}

impl TimeIndex {
    /// The index of writer epoch `epoch`, whose samples never go below
    /// `floor` (the previous writers' last sample).
    pub(crate) fn new(epoch: u64, floor: Sample) -> TimeIndex {
        let st = State { floor, ..State::default() };
        TimeIndex { epoch, covered: AtomicU64::new(floor.csn), state: Mutex::new(st) }
    }

    /// Rule 2: make sure a sample reaches `csn` before it is acknowledged.
    /// `counter` is the next CSN to hand out.
    #[inline]
    pub(crate) fn cover(&self, csn: Csn, counter: &AtomicU64) {
        if self.covered.load(Ordering::Acquire) < csn {
            self.sample(counter);
        }
    }

    /// Take a sample now; returns it.
    pub(crate) fn sample(&self, counter: &AtomicU64) -> Sample {
        let mut st = self.state.lock();
        let csn = counter.load(Ordering::SeqCst).saturating_sub(1);
        // Read after the counter (rule 1); never below the last sample.
        let last = st.samples.last().copied().unwrap_or(st.floor);
        let s = Sample { ms: now_ms().max(last.ms), csn: csn.max(last.csn) };
        // With nothing new handed out, the last sample stands for now too;
        // a new database's first sample is kept anyway: the empty database
        // is a point of its window.
        if s.csn > last.csn || st.samples.is_empty() && st.floor == Sample::default() {
            st.samples.push(s);
        }
        self.covered.fetch_max(s.csn, Ordering::AcqRel);
        s
    }

    /// The samples not yet written, if [`FLUSH_EVERY`] has passed (or
    /// `now` is set): write them as one object, on every store that
    /// answers (a quorum is not needed: the index is advisory beyond the
    /// last object a quorum holds, see the module docs). Every
    /// [`FOLD_EVERY`], the objects since the last fold become one.
    /// Returns the requests made.
    pub(crate) fn flush(
        &self,
        stores: &[(String, Arc<dyn ObjectStore>)],
        deadline: Duration,
        now: bool,
        durable: Csn,
    ) -> u64 {
        let mut st = self.state.lock();
        let due = now || st.last_flush.is_none_or(|t| t.elapsed_now() >= FLUSH_EVERY);
        // New samples; or none, but the log became durable further than
        // the index says (what a clone checks), with the last sample again.
        let durable_moved = durable > st.durable_written;
        let nothing = st.samples.is_empty() && st.floor == Sample::default();
        if !due || nothing || st.written >= st.samples.len() && !durable_moved {
            return 0;
        }
        let new = if st.written < st.samples.len() {
            st.samples[st.written..].to_vec()
        } else {
            vec![st.samples.last().copied().unwrap_or(st.floor)]
        };
        let first = new[0].ms;
        let body = encode(self.epoch, durable, &new);
        let key = time_key(first, self.epoch);
        let (mut requests, all) = put_everywhere(stores, deadline, &key, &body);
        st.last_flush = Some(milliscale_seam::now());
        if !all {
            // The next flush writes the same key again, with more samples:
            // a reader of any store finds every sample once one succeeds.
            return requests;
        }
        st.written = st.samples.len();
        st.durable_written = durable;
        if st.objects.last() != Some(&first) {
            st.objects.push(first);
        }
        let fold_due = st.last_fold.get_or_insert_with(milliscale_seam::now).elapsed_now()
            >= FOLD_EVERY
            || now;
        if fold_due && st.objects.len() > 1 {
            requests += fold(&mut st, self.epoch, durable, stores, deadline);
        }
        requests
    }
}

/// Put `body` under `key` on every store; the requests made, and whether
/// every store took it (a store that did not is named in a warning; the
/// caller writes the same key again later).
fn put_everywhere(
    stores: &[(String, Arc<dyn ObjectStore>)],
    deadline: Duration,
    key: &str,
    body: &Bytes,
) -> (u64, bool) {
    let mut all = true;
    for (name, s) in stores {
        if let Err(e) = retry(deadline, || s.put(key, body.clone())) {
            tracing::warn!("{name}: writing the time index {key} (written again later): {e}");
            all = false;
        }
    }
    (stores.len() as u64, all)
}

/// Rewrite the objects since the last fold as one, under the first's
/// name, then delete the others; keep only the last sample in memory.
fn fold(
    st: &mut State,
    epoch: u64,
    durable: Csn,
    stores: &[(String, Arc<dyn ObjectStore>)],
    deadline: Duration,
) -> u64 {
    let all = st.samples.clone();
    let body = encode(epoch, durable, &all);
    let key = time_key(st.objects[0], epoch);
    let (mut requests, ok) = put_everywhere(stores, deadline, &key, &body);
    if ok {
        for ms in st.objects[1..].iter().filter(|ms| **ms != st.objects[0]) {
            for (_, s) in stores {
                requests += 1;
                let _ = s.delete(&time_key(*ms, epoch));
            }
        }
    }
    st.floor = *st.samples.last().expect("a sample");
    st.samples.clear();
    st.written = 0;
    st.objects.clear();
    st.last_fold = Some(milliscale_seam::now());
    requests
}

/// Encode samples (oldest first, at least one) as an object body.
pub(crate) fn encode(epoch: u64, durable: Csn, samples: &[Sample]) -> Bytes {
    let mut body = Vec::with_capacity(samples.len() * 4);
    for w in samples.windows(2) {
        leb128(&mut body, w[1].ms - w[0].ms);
        leb128(&mut body, w[1].csn - w[0].csn);
    }
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.put_slice(&MAGIC);
    out.put_u8(FORMAT);
    out.put_bytes(0, 3);
    out.put_u64_le(epoch);
    out.put_u32_le(samples.len() as u32);
    out.put_u64_le(samples[0].ms);
    out.put_u64_le(samples[0].csn);
    out.put_u64_le(durable);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&out), &body);
    out.put_u32_le(crc);
    out.extend_from_slice(&body);
    Bytes::from(out)
}

fn leb128(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// A decoded time index object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeObject {
    /// The writer epoch that wrote it.
    pub epoch: u64,
    /// Every CSN below this was durable when it was written.
    pub durable: Csn,
    /// Its samples, oldest first.
    pub samples: Vec<Sample>,
}

/// Decode a time index object. Damage is `Corrupt`, naming `key`.
pub fn decode(key: &str, bytes: &[u8]) -> Result<TimeObject> {
    let bad = |what: &str| Error::Corrupt(format!("{key}: {what}"));
    if bytes.len() < HEADER || bytes[..4] != MAGIC {
        return Err(bad("not a time index object"));
    }
    if bytes[4] != FORMAT || bytes[5..8] != [0, 0, 0] {
        return Err(bad(&format!("time index format {}; this version reads {FORMAT}", bytes[4])));
    }
    let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
    let epoch = u64_at(8);
    let n = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes")) as usize;
    let first = Sample { ms: u64_at(20), csn: u64_at(28) };
    let durable = u64_at(36);
    let crc = u32::from_le_bytes(bytes[44..48].try_into().expect("4 bytes"));
    let body = &bytes[HEADER..];
    if crc32c::crc32c_append(crc32c::crc32c(&bytes[..44]), body) != crc {
        return Err(bad("checksum mismatch"));
    }
    if n == 0 || n - 1 > body.len() / 2 {
        return Err(bad(&format!("{n} samples in {} bytes", body.len())));
    }
    let mut out = Vec::with_capacity(n);
    out.push(first);
    let mut at = 0;
    let mut next = || -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *body.get(at)?;
            at += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    };
    let mut last = first;
    for _ in 1..n {
        let (dm, dc) = (next(), next());
        let (Some(dm), Some(dc)) = (dm, dc) else { return Err(bad("a sample runs past the end")) };
        last = Sample {
            ms: last.ms.checked_add(dm).ok_or_else(|| bad("ms overflows"))?,
            csn: last.csn.checked_add(dc).ok_or_else(|| bad("CSN overflows"))?,
        };
        out.push(last);
    }
    if at != body.len() {
        return Err(bad("bytes after the last sample"));
    }
    Ok(TimeObject { epoch, durable, samples: out })
}

/// What a time resolved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved {
    /// The sample it resolved to: the highest CSN of any sample at or
    /// before the time (an ended epoch's clamped to its log's last CSN).
    pub sample: Sample,
    /// The epoch that wrote it.
    pub epoch: u64,
    /// Set when that epoch ended after its last sample at or before the
    /// time and its log holds CSNs above the sample: a crash may have lost
    /// the samples that place them, so the resolution may leave out
    /// transactions acknowledged after the sample. The highest CSN of the
    /// epoch's log.
    pub uncertain_above: Option<Csn>,
}

/// Resolve `t` (ms) with the time index on `store`: the highest CSN of
/// any sample at or before `t`, among the samples of the epochs in
/// `epochs` (each with the last CSN its log holds, `None` for the live
/// one). A writer that was fenced may still write samples for a while;
/// its CSNs above what its successor replayed were never committed, so an
/// ended epoch's samples are clamped to its last CSN. Each epoch's object
/// with the greatest first millisecond at or before `t` holds its newest
/// sample there. `None` if no sample is at or before `t`.
pub fn resolve(
    store: &Arc<dyn ObjectStore>,
    t: u64,
    epochs: &[(u64, Option<Csn>)],
    deadline: Duration,
) -> Result<Option<Resolved>> {
    let listed = retry(deadline, || store.list(TIME_PREFIX))
        .map_err(|e| Error::Store(format!("listing the time index: {e}")))?;
    let mut newest: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
    for (ms, epoch) in listed.iter().filter_map(|o| parse_time_key(&o.key)) {
        if ms <= t && epochs.iter().any(|(e, _)| *e == epoch) {
            let slot = newest.entry(epoch).or_insert(ms);
            *slot = (*slot).max(ms);
        }
    }
    let mut best: Option<Resolved> = None;
    for (epoch, ms) in newest {
        let key = time_key(ms, epoch);
        let bytes = retry(deadline, || store.get(&key))
            .map_err(|e| Error::Store(format!("reading {key}: {e}")))?;
        let samples = decode(&key, &bytes)?.samples;
        let i = samples.partition_point(|s| s.ms <= t);
        let mut sample = samples[i.max(1) - 1];
        let last = epochs.iter().find(|(e, _)| *e == epoch).and_then(|(_, m)| *m);
        let mut uncertain_above = None;
        if let Some(max) = last {
            sample.csn = sample.csn.min(max);
            // Its last sample at or before t, and its log goes on past it.
            if i == samples.len() && sample.csn < max {
                uncertain_above = Some(max);
            }
        }
        if best.is_none_or(|b| sample.csn > b.sample.csn) {
            best = Some(Resolved { sample, epoch, uncertain_above });
        }
    }
    Ok(best)
}

/// How far writer `epoch`'s log was durable when it last wrote its time
/// index on `store` (every CSN below the result); `None` without one.
pub(crate) fn newest_durable(
    store: &Arc<dyn ObjectStore>,
    epoch: u64,
    deadline: Duration,
) -> Option<Csn> {
    let listed = retry(deadline, || store.list(TIME_PREFIX)).ok()?;
    let (ms, e) =
        listed.iter().filter_map(|o| parse_time_key(&o.key)).filter(|(_, e)| *e == epoch).max()?;
    let key = time_key(ms, e);
    let bytes = retry(deadline, || store.get(&key)).ok()?;
    decode(&key, &bytes).ok().map(|o| o.durable)
}

impl crate::commit::AckClock for TimeIndex {
    fn cover(&self, csn: Csn, counter: &AtomicU64) {
        TimeIndex::cover(self, csn, counter);
    }
}

/// The newest sample on `store`'s index (a new writer's clock floor).
pub(crate) fn last_sample(store: &Arc<dyn ObjectStore>, deadline: Duration) -> Option<Sample> {
    let listed = retry(deadline, || store.list(TIME_PREFIX)).ok()?;
    let (ms, epoch) = listed.iter().filter_map(|o| parse_time_key(&o.key)).max()?;
    let key = time_key(ms, epoch);
    let bytes = retry(deadline, || store.get(&key)).ok()?;
    decode(&key, &bytes).ok().and_then(|o| o.samples.last().copied())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_round_trip_and_refuse_damage() {
        let s = vec![
            Sample { ms: 1_000, csn: 5 },
            Sample { ms: 1_000, csn: 9 },
            Sample { ms: 1_300, csn: 9 },
            Sample { ms: 90_000, csn: 1 << 40 },
        ];
        let b = encode(3, 77, &s);
        assert_eq!(
            decode("k", &b).expect("decodes"),
            TimeObject { epoch: 3, durable: 77, samples: s.clone() }
        );
        for i in 0..b.len() {
            let mut bad = b.to_vec();
            bad[i] ^= 0x10;
            assert!(decode("k", &bad).is_err(), "a flip at {i} is refused");
        }
        for n in 0..b.len() {
            assert!(decode("k", &b[..n]).is_err(), "a cut at {n} is refused");
        }
    }

    #[test]
    fn samples_grow_and_cover_what_is_acknowledged() {
        let counter = AtomicU64::new(1);
        let t = TimeIndex::new(1, Sample::default());
        counter.store(11, Ordering::SeqCst); // CSNs 1..=10 handed out
        t.cover(7, &counter);
        let a = t.state.lock().samples.last().copied().expect("a sample");
        assert_eq!(a.csn, 10, "the sample holds every CSN handed out");
        t.cover(9, &counter);
        assert_eq!(t.state.lock().samples.len(), 1, "a covered CSN takes no sample");
        counter.store(21, Ordering::SeqCst);
        t.cover(15, &counter);
        let b = t.state.lock().samples.last().copied().expect("a sample");
        assert!(b.csn == 20 && b.ms >= a.ms);
    }

    #[test]
    fn keys_name_their_millisecond() {
        assert_eq!(parse_time_key(&time_key(1_765_000_000_123, 7)), Some((1_765_000_000_123, 7)));
        assert_eq!(parse_time_key("time/t12e1"), None);
        assert_eq!(parse_time_key("log/t0000000000000001e0000000001"), None);
        let (a, b) = (time_key(5, 2), time_key(5, 10));
        assert!(a < b, "a listing orders by ms, then epoch");
    }
}
