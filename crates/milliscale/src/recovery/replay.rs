//! Applying a replay plan to the tables, in parallel by key.
//!
//! The plan's records are scattered by key and folded into each key's
//! fate (its final value, its deletion, or the patches its checkpoint
//! value takes); then the checkpoint is loaded, each row merged with its
//! key's fate; then the values the plan wrote itself are installed.
//!
//! The fold is a radix-partitioned hash aggregation, because one hash map
//! per thread over millions of keys is bound by cache misses:
//! 1. **Scatter.** Each thread takes a contiguous run of the plan's
//!    entries (in CSN order) and copies each record, with its CSN, into one
//!    of [`BUCKETS`] byte buffers chosen by the key's hash: sequential
//!    writes.
//! 2. **Fold.** One thread folds a bucket (a few thousand keys) with a
//!    small map that stays in cache, reading the scatter runs' buffers for
//!    that bucket in run order, which is CSN order: sequential reads. A
//!    key's fate ([`Fate`]) is the value its last put left (patched by the
//!    deltas after it), its deletion, or, when every record of it is a
//!    delta, those deltas, to patch the checkpoint's value with. The fold
//!    reads nothing of the tables.
//! 3. **Load** the checkpoint (`checkpoint::load`), each row by its key's
//!    fate ([`Folded::merge`]): a key the plan does not touch is loaded as
//!    it is; a key the plan only patches is loaded patched, as one
//!    version; a key the plan puts or deletes is not loaded (what it held
//!    is replaced, and its row would cost an insert into the index and a
//!    removal: a shard's forgotten decisions are many of them).
//! 4. **Install** the values the plan put, by bucket. A deleted key is in
//!    no table now, and a key patched with no checkpoint value is corrupt.
//!
//! So a delta on a checkpointed key costs no search of the index: the
//! load meets its row anyway. (Replay used to load the checkpoint first
//! and then look each such key up to patch it: a random descent of the
//! index per key, most of a shard's replay; BENCHMARKS.md, "Does a
//! shard's state stay bounded".) The maps of every bucket are held until
//! the load ends: about 64 bytes per key the plan touches, beside the
//! scatter buffers.
//!
//! A key's records are folded in CSN order whatever the number of threads,
//! so the result is the same for any number; only record ids (internal)
//! differ.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_epoch::Owned;

use crate::error::{Error, Result};
use crate::log::record::{Entry, OpRef, RecordRef};
use crate::mvcc::Csn;
use crate::mvcc::version::{Version, prefetch};
use crate::recovery::ReplayPlan;
use crate::table::TableInner;

/// What replay did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Records applied.
    pub records: u64,
    /// Keys whose version was installed or replaced.
    pub keys: u64,
}

/// Buckets of the scatter step: enough that a bucket's keys and values
/// fit in a core's cache for logs of millions of keys.
pub const BUCKETS: usize = 1024;

fn key_hash(table: u32, key: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    std::hash::Hasher::write_u32(&mut h, table);
    std::hash::Hasher::write(&mut h, key);
    std::hash::Hasher::finish(&h)
}

/// The bucket of the key whose hash is `h`.
fn bucket_of(h: u64) -> usize {
    (h >> 32) as usize % BUCKETS
}

/// The replay's hash of a key: the multiply-rotate word hash of rustc and
/// Firefox ("FxHash"). SipHash and CRC32C (a call per key) were each a
/// visible share of replay time; keys here come from our own log, not from
/// an adversary, so a fast non-keyed hash is enough.
#[derive(Default)]
struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    fn finish(&self) -> u64 {
        // The multiply leaves the low bits weak, and the tables pick
        // slots by them: finish with a full avalanche, MurmurHash3's
        // `fmix64` (both of its multiplies: with only the first, the 8-byte
        // keys that share a bucket fell into 8 to 16 of its slots, and a
        // probe walked 19 slots on average).
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^= h >> 33;
        h
    }
}

/// Apply `plan` to `tables` (indexed by table id) with `threads` threads.
/// With a checkpoint, `load` loads it once the plan is folded, each row
/// as [`Folded::merge_rows`] says; without one (`None`), each bucket is
/// folded and installed at once, and dropped.
pub(crate) fn apply<L>(
    plan: &ReplayPlan,
    tables: &[Arc<TableInner>],
    threads: usize,
    load: Option<L>,
) -> Result<ReplayStats>
where
    L: FnOnce(&Folded<'_>) -> Result<()>,
{
    let threads = threads.max(1);
    let entries = &plan.replay;
    // 1. Scatter: runs of entries, in CSN order, one per thread.
    let runs: Vec<std::ops::Range<usize>> = (0..threads)
        .map(|t| entries.len() * t / threads..entries.len() * (t + 1) / threads)
        .collect();
    let scattered: Vec<Vec<Vec<u8>>> = crate::parallel::parallel_map(&runs, threads, |run| {
        // Sized for an even spread (plus slack), so the buffers rarely grow:
        // growing copies them and touches fresh pages twice.
        let bytes: usize = entries[run.clone()]
            .iter()
            .map(|e| match e {
                Entry::Commit { records, .. } => e.encoded_len() + records.len() * 8,
                Entry::Abort { .. } => 0,
            })
            .sum();
        let each = bytes / BUCKETS + bytes / BUCKETS / 8 + 64;
        let mut buckets: Vec<Vec<u8>> = (0..BUCKETS).map(|_| Vec::with_capacity(each)).collect();
        for e in &entries[run.clone()] {
            let Entry::Commit { csn, records, .. } = e else { continue };
            for r in records.refs() {
                scatter(&mut buckets[bucket_of(key_hash(r.table, r.key))], *csn, &r);
            }
        }
        buckets
    });
    let buckets: Vec<usize> = (0..BUCKETS).collect();
    let bucket = |b: usize| fold_bucket(tables, scattered.iter().map(|run| run[b].as_slice()));
    let mut total = ReplayStats::default();
    let Some(load) = load else {
        // 2 and 4: no checkpoint to merge with, so a bucket's keys are
        // installed as soon as they are folded.
        let done = crate::parallel::parallel_map(&buckets, threads, |&b| {
            let (bucket, records) = bucket(b)?;
            Ok::<_, Error>((records, install_bucket(tables, &bucket)?))
        });
        for d in done {
            let (records, keys) = d?;
            total.records += records;
            total.keys += keys;
        }
        return Ok(total);
    };
    // 2. Fold each bucket into its keys' fates.
    let mut folded = Folded { buckets: Vec::with_capacity(BUCKETS), keys: 0 };
    for f in crate::parallel::parallel_map(&buckets, threads, |&b| bucket(b)) {
        let (bucket, records) = f?;
        total.records += records;
        folded.keys += bucket.keys.len();
        folded.buckets.push(bucket);
    }
    // 3. The checkpoint, each row merged with its key's fate.
    load(&folded)?;
    // 4. The values the plan put; the patches the load applied.
    let installed = crate::parallel::parallel_map(&folded.buckets, threads, |bucket| {
        install_bucket(tables, bucket)
    });
    for keys in installed {
        total.keys += keys?;
    }
    Ok(total)
}

/// What a key's records in the plan come to, folded in CSN order.
enum Fate<'a> {
    /// Its last put's value, patched by the deltas after it (borrowed from
    /// the scatter buffers until a delta patches it).
    Value(Cow<'a, [u8]>),
    /// Its last record deleted it.
    Deleted,
    /// Every record of it is a delta: its checkpoint value, patched by
    /// these in order (offset, bytes); `met` once the load patched it.
    Patched { deltas: Vec<(usize, &'a [u8])>, met: AtomicBool },
}

/// A key, its fate and the CSN of its last record.
struct KeyFate<'a> {
    table: u32,
    key: &'a [u8],
    csn: Csn,
    fate: Fate<'a>,
}

/// One bucket's keys and their fates: an open-addressed table of slots
/// (a key's hash and where its entry is), kept at most half full, over
/// the entries. A key that is not there is known from one slot's cache
/// line, which the checkpoint's load asks for ahead of the row
/// ([`Folded::merge_rows`]); a standard hash map offers no way to do that,
/// and its probes were most of the load's time.
struct Bucket<'a> {
    slots: Vec<Slot>,
    keys: Vec<KeyFate<'a>>,
}

/// A key's hash and its entry's index plus one (0: an empty slot).
#[derive(Clone, Copy, Default)]
struct Slot {
    hash: u64,
    at: u32,
}

impl<'a> Bucket<'a> {
    fn with_capacity(keys: usize) -> Bucket<'a> {
        let slots = (keys * 2).max(8).next_power_of_two();
        Bucket { slots: vec![Slot::default(); slots], keys: Vec::with_capacity(keys) }
    }

    /// The first slot `h` may be in (the bucket was chosen by other bits
    /// of the hash, [`bucket_of`]).
    fn first(&self, h: u64) -> usize {
        (h as usize) & (self.slots.len() - 1)
    }

    /// The entry of `key` in `table`, whose hash is `h`, if it is here.
    fn find(&self, h: u64, table: u32, key: &[u8]) -> Option<usize> {
        let mask = self.slots.len() - 1;
        let mut i = self.first(h);
        loop {
            let s = self.slots[i];
            if s.at == 0 {
                return None;
            }
            let at = s.at as usize - 1;
            if s.hash == h && self.keys[at].table == table && self.keys[at].key == key {
                return Some(at);
            }
            i = (i + 1) & mask;
        }
    }

    /// Add `k` (not here yet), whose hash is `h`.
    fn insert(&mut self, h: u64, k: KeyFate<'a>) {
        if (self.keys.len() + 1) * 2 > self.slots.len() {
            let mut bigger = vec![Slot::default(); self.slots.len() * 2];
            for s in self.slots.iter().filter(|s| s.at != 0) {
                place(&mut bigger, *s);
            }
            self.slots = bigger;
        }
        self.keys.push(k);
        place(&mut self.slots, Slot { hash: h, at: self.keys.len() as u32 });
    }
}

/// Put `s` in the first empty slot from its hash's on (`slots` is a power
/// of two long, and not full).
fn place(slots: &mut [Slot], s: Slot) {
    let mask = slots.len() - 1;
    let mut i = (s.hash as usize) & mask;
    while slots[i].at != 0 {
        i = (i + 1) & mask;
    }
    slots[i] = s;
}

/// The plan folded, by bucket: each key's fate, for the checkpoint's load
/// ([`Folded::merge_rows`]) and the install after it.
pub(crate) struct Folded<'a> {
    buckets: Vec<Bucket<'a>>,
    /// Keys in all buckets.
    keys: usize,
}

/// How the load installs a checkpoint row ([`Folded::merge_rows`]).
pub(crate) enum Loaded {
    /// As it is, at the checkpoint's CSN.
    Keep,
    /// Not at all: the plan puts or deletes the key.
    Skip,
    /// This version: the row patched by the plan, at its last delta's CSN.
    Patched(Owned<Version>),
}

/// How many rows ahead of the one merged the load asks for its key's
/// bytes (twice as many for its entry, three times for its slot).
const AHEAD: usize = 8;

impl Folded<'_> {
    /// Nothing to merge (a replica's catch-up loads a checkpoint alone).
    pub(crate) fn empty() -> Folded<'static> {
        Folded { buckets: Vec::new(), keys: 0 }
    }

    /// The entry the first slot of hash `h` names, if its hash is `h`
    /// (most keys a checkpoint row meets are there, if anywhere).
    fn named(&self, h: u64) -> Option<&KeyFate<'_>> {
        let b = &self.buckets[bucket_of(h)];
        let s = b.slots[b.first(h)];
        (s.at != 0 && s.hash == h).then(|| &b.keys[s.at as usize - 1])
    }

    /// Call `f` with each of `rows` (a checkpoint chunk's, of table
    /// `table`, in order) and how to load it: kept, skipped (the plan puts
    /// or deletes the key) or patched (the plan only patches it).
    pub(crate) fn merge_rows<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        table: u32,
        rows: &[(K, V)],
        mut f: impl FnMut(&[u8], &[u8], Loaded) -> Result<()>,
    ) -> Result<()> {
        if self.keys == 0 {
            for (k, v) in rows {
                f(k.as_ref(), v.as_ref(), Loaded::Keep)?;
            }
            return Ok(());
        }
        let hashes: Vec<u64> = rows.iter().map(|(k, _)| key_hash(table, k.as_ref())).collect();
        for (i, ((k, v), &h)) in rows.iter().zip(&hashes).enumerate() {
            // Three steps ahead, each a cache line that the next step
            // reads: a row's slot, then the entry it names (for a key
            // the plan touches), then that key's bytes, which are
            // compared.
            if let Some(&h) = hashes.get(i + 3 * AHEAD) {
                let b = &self.buckets[bucket_of(h)];
                prefetch(&b.slots[b.first(h)]);
            }
            if let Some(k) = hashes.get(i + 2 * AHEAD).and_then(|&h| self.named(h)) {
                prefetch(k);
            }
            if let Some(k) = hashes.get(i + AHEAD).and_then(|&h| self.named(h)) {
                prefetch(k.key.as_ptr());
            }
            let (k, v) = (k.as_ref(), v.as_ref());
            let b = &self.buckets[bucket_of(h)];
            let loaded = match b.find(h, table, k).map(|at| &b.keys[at]) {
                None => Loaded::Keep,
                Some(KeyFate { fate: Fate::Value(_) | Fate::Deleted, .. }) => Loaded::Skip,
                Some(KeyFate { csn, fate: Fate::Patched { deltas, met }, .. }) => {
                    let mut version = Version::committed(*csn, Some(v));
                    for &(at, bytes) in deltas {
                        check_patch(v.len(), at, bytes, *csn)?;
                        version.overwrite(at, bytes);
                    }
                    met.store(true, Ordering::Relaxed);
                    Loaded::Patched(version)
                }
            };
            f(k, v, loaded)?;
        }
        Ok(())
    }
}

/// Refuse a delta of `bytes` at `at` (from the record of `csn`) on a value
/// of `len` bytes that it does not fit in.
fn check_patch(len: usize, at: usize, bytes: &[u8], csn: Csn) -> Result<()> {
    let end = at + bytes.len();
    if end > len {
        return Err(Error::Corrupt(format!(
            "CSN {csn}: a delta at {at}..{end} on a value of {len} bytes"
        )));
    }
    Ok(())
}

/// Bytes of a scattered record's header: CSN, table, op, key length,
/// payload length, delta offset.
const SCATTERED_HEADER: usize = 8 + 4 + 1 + 2 + 4 + 4;

fn scatter(out: &mut Vec<u8>, csn: Csn, r: &RecordRef<'_>) {
    let (op, offset, payload): (u8, u32, &[u8]) = match r.op {
        OpRef::Insert(v) => (1, 0, v),
        OpRef::Update(v) => (2, 0, v),
        OpRef::Delta { offset, bytes } => (3, offset, bytes),
        OpRef::Delete => (4, 0, &[]),
    };
    out.extend_from_slice(&csn.to_le_bytes());
    out.extend_from_slice(&r.table.to_le_bytes());
    out.push(op);
    out.extend_from_slice(&(r.key.len() as u16).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(r.key);
    out.extend_from_slice(payload);
}

/// Read back what [`scatter`] wrote.
fn gather(b: &[u8]) -> impl Iterator<Item = (Csn, RecordRef<'_>)> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= b.len() {
            return None;
        }
        let h = &b[at..at + SCATTERED_HEADER];
        let csn = u64::from_le_bytes(h[0..8].try_into().expect("8"));
        let table = u32::from_le_bytes(h[8..12].try_into().expect("4"));
        let key_len = usize::from(u16::from_le_bytes([h[13], h[14]]));
        let len = u32::from_le_bytes(h[15..19].try_into().expect("4")) as usize;
        let offset = u32::from_le_bytes(h[19..23].try_into().expect("4"));
        let k = at + SCATTERED_HEADER;
        let (key, payload) = (&b[k..k + key_len], &b[k + key_len..k + key_len + len]);
        at = k + key_len + len;
        let op = match h[12] {
            1 => OpRef::Insert(payload),
            2 => OpRef::Update(payload),
            3 => OpRef::Delta { offset, bytes: payload },
            _ => OpRef::Delete,
        };
        Some((csn, RecordRef { table, key, op }))
    })
}

/// Fold one bucket's records (one buffer per scatter run, runs in CSN
/// order) into its keys' fates; with the number of records folded.
fn fold_bucket<'a>(
    tables: &[Arc<TableInner>],
    runs: impl Iterator<Item = &'a [u8]>,
) -> Result<(Bucket<'a>, u64)> {
    let runs: Vec<&'a [u8]> = runs.collect();
    // Sized for a record per key: growing as it fills was a visible share
    // of a bucket's fold.
    let bytes: usize = runs.iter().map(|r| r.len()).sum();
    let mut state = Bucket::with_capacity(bytes / (SCATTERED_HEADER + 64) + 16);
    let mut records = 0;
    for (csn, r) in runs.into_iter().flat_map(gather) {
        let table = tables.get(r.table as usize).ok_or_else(|| {
            Error::Corrupt(format!(
                "CSN {csn} writes table id {}, which the manifest does not name",
                r.table
            ))
        })?;
        if table.is_dropped() {
            continue;
        }
        records += 1;
        let h = key_hash(r.table, r.key);
        let Some(at) = state.find(h, r.table, r.key) else {
            let fate = match r.op {
                OpRef::Insert(v) | OpRef::Update(v) => Fate::Value(Cow::Borrowed(v)),
                OpRef::Delete => Fate::Deleted,
                OpRef::Delta { offset, bytes } => Fate::Patched {
                    deltas: vec![(offset as usize, bytes)],
                    met: AtomicBool::new(false),
                },
            };
            state.insert(h, KeyFate { table: r.table, key: r.key, csn, fate });
            continue;
        };
        let k = &mut state.keys[at];
        k.csn = csn;
        match (r.op, &mut k.fate) {
            (OpRef::Insert(v) | OpRef::Update(v), fate) => *fate = Fate::Value(Cow::Borrowed(v)),
            (OpRef::Delete, fate) => *fate = Fate::Deleted,
            (OpRef::Delta { offset, bytes }, Fate::Value(v)) => {
                let at = offset as usize;
                check_patch(v.len(), at, bytes, csn)?;
                v.to_mut()[at..at + bytes.len()].copy_from_slice(bytes);
            }
            (OpRef::Delta { offset, bytes }, Fate::Patched { deltas, .. }) => {
                deltas.push((offset as usize, bytes));
            }
            (OpRef::Delta { .. }, Fate::Deleted) => {
                return Err(Error::Corrupt(format!(
                    "CSN {csn}: a delta on a key that has no value"
                )));
            }
        }
    }
    Ok((state, records))
}

/// Step 4 for one bucket, once the checkpoint is loaded (if there is
/// one): install the values the plan put; how many keys the plan
/// installed (the patched ones the load installed included). A key
/// patched whose row the load did not meet had no value to patch.
fn install_bucket(tables: &[Arc<TableInner>], bucket: &Bucket<'_>) -> Result<u64> {
    let mut keys = 0;
    for k in &bucket.keys {
        match &k.fate {
            Fate::Value(v) => {
                install(&tables[k.table as usize], k.key, Version::committed(k.csn, Some(v)))?;
            }
            Fate::Deleted => continue,
            Fate::Patched { met, .. } if met.load(Ordering::Relaxed) => {}
            Fate::Patched { .. } => {
                return Err(Error::Corrupt(format!(
                    "CSN {}: a delta on a key that has no value",
                    k.csn
                )));
            }
        }
        keys += 1;
    }
    Ok(keys)
}

/// Make `version` (committed) the only version of `key`. Called before
/// the database is shared, once per key: a checkpoint row by the load (as
/// it is, or patched by the plan), or a value the plan put. The plan's
/// deletions need no call: a deleted key is never loaded (step 3), nor
/// installed.
///
/// It inserts the key first and looks it up only if it is there: most
/// keys recovery installs are new (every key of a checkpoint, and a
/// shard's version and outcome rows in the log), and a lookup that misses
/// costs a descent of the index as an insert does. Measured: the lookups
/// were half of a shard's replay (BENCHMARKS.md, "Does a shard's state
/// stay bounded").
pub(crate) fn install(table: &TableInner, key: &[u8], version: Owned<Version>) -> Result<()> {
    let guard = crossbeam_epoch::pin();
    // Every RID recovery freed may be handed out again.
    let fresh = table.records.allocate(u64::MAX)?;
    let rid = match table.index.insert(key, fresh) {
        Ok(()) => fresh,
        Err(existing) => {
            // Its slot was never set: hand it back.
            table.records.free(fresh, 0);
            existing
        }
    };
    let old = table.records.slot(rid).swap(version, std::sync::atomic::Ordering::AcqRel, &guard);
    if !old.is_null() {
        // SAFETY: `old` was unlinked by the swap; nobody else can reach it
        // once the guards of concurrent readers (other replay threads never
        // read this key) are gone.
        unsafe { guard.defer_destroy(old) };
    }
    Ok(())
}
