//! The point index: a hash table from key to record id beside the ordered
//! index, for lookups of one key.
//!
//! A descent of the ordered index (`scc::TreeIndex`) costs about 550 ns at
//! 1M keys on this project's machines: five or six nodes, each searched
//! key by key, each a load from memory. A hash lookup is one or two loads
//! (about 90 ns): YCSB-C in memory runs about 2x as fast through it
//! (BENCHMARKS.md, "The engine in memory"). The price is memory, about
//! 50 bytes a key (`Options::point_index(false)` goes without it). Scans
//! use the ordered index only.
//!
//! The ordered index is the truth; this one follows it (`OrderedIndex`
//! keeps both, and only it writes here). What a reader may rely on:
//!
//! 1. **Before anyone can read a key's version, its entry is here.** An
//!    insert enters a key in the ordered index and then here, before it
//!    returns and so before its caller installs a version under the
//!    record id; a caller whose insert found the key already in the
//!    ordered index (another insert won it) waits until the winner's
//!    entry is here before it returns the winner's id. A snapshot that
//!    sees a version began after the version's commit took its CSN, which
//!    came after the entry went in.
//! 2. **An entry never outlives its record id's freeing.** Entries are
//!    removed by `OrderedIndex::remove_if` (the reclaimer of a deleted
//!    key: it seals the record's head first, then removes the entry from
//!    the ordered index and from here, and only then reads the mark past
//!    which the id may be given out again), and an entry for a key is put
//!    here only with the record id the ordered index has just accepted
//!    for it. So a reader that finds an id here finds either the key's
//!    record, or one being reclaimed (its head sealed: the key reads as
//!    absent, as every snapshot already sees it deleted), never another
//!    key's.
//!
//! Between the two indexes' steps a key can be in one and not the other:
//! in the ordered index only while its insert is under way (no version
//! under it yet), and here only while its removal is (its head sealed).
//! A lookup in either window answers what the key's versions would.
//!
//! **Resizes.** The table (`papaya`) grows incrementally: each insert or
//! removal copies a few entries into the larger table, so that none waits
//! for the whole copy. Until the copy is done, a lookup may search both
//! tables (YCSB-C at about 0.65x), and only writes move it along: a load
//! that stops just after a resize began would leave every read of a
//! read-mostly table paying for it. So every write also asks the
//! process's resize finisher (one thread, started at the first write) to
//! finish whatever resize is under way 50 ms later; the finisher does the
//! rest of the copy off the writers' threads.

use ahash::RandomState;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::IndexKey;
use crate::mvcc::oid_array::Rid;

/// How long after a write the finisher completes the resize it may have
/// begun: long enough that a stream of writes is not interrupted for
/// each one, short enough that reads soon search one table again.
const FINISH_AFTER: Duration = Duration::from_millis(50);

/// Key to record id, for lookups of one key (see the module's doc).
pub(crate) struct PointIndex {
    shared: Arc<Shared>,
}

struct Shared {
    /// The hasher is std's (SipHash with a random key per table): keys
    /// come from a server's clients, and a hash a client could aim at one
    /// bucket would make every lookup of that table slow, and its resizes
    /// endless.
    map: papaya::HashMap<IndexKey, Rid, RandomState>,
    /// Queued with the finisher: writes need not queue it again.
    queued: AtomicBool,
    /// How many times the finisher has run for this table (tests).
    finished: AtomicU64,
}

impl PointIndex {
    pub(crate) fn new() -> PointIndex {
        PointIndex {
            shared: Arc::new(Shared {
                map: papaya::HashMap::with_hasher(RandomState::new()),
                queued: AtomicBool::new(false),
                finished: AtomicU64::new(0),
            }),
        }
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<Rid> {
        self.shared.map.pin().get(key).copied()
    }

    /// Put `key -> rid` in, replacing the entry of a key whose removal is
    /// under way (its `remove_if` will then find another id and leave it).
    pub(crate) fn put(&self, key: &[u8], rid: Rid) {
        self.shared.map.pin().insert(IndexKey::from_slice(key), rid);
        self.finish_resize_soon();
    }

    /// Remove `key` if it maps to `rid`.
    pub(crate) fn remove_if(&self, key: &[u8], rid: Rid) {
        // Err: another id (an insert that replaced a removed key's entry).
        let _ = self.shared.map.pin().remove_if(key, |_, r| *r == rid);
        self.finish_resize_soon();
    }

    /// After a write (which may have begun a resize): have the finisher
    /// complete any resize under way, `FINISH_AFTER` from now.
    fn finish_resize_soon(&self) {
        let s = &self.shared;
        if !s.queued.load(Ordering::Relaxed) && !s.queued.swap(true, Ordering::AcqRel) {
            finisher(Arc::clone(s), std::time::Instant::now() + FINISH_AFTER);
        }
    }

    /// How many times the finisher has run for this index.
    #[cfg(test)]
    fn finished(&self) -> u64 {
        self.shared.finished.load(Ordering::Acquire)
    }
}

impl Shared {
    /// Complete the resize under way, if any (a no-op otherwise).
    fn finish_resize(&self) {
        // Cleared first: a write from here on queues another run, so a
        // resize it begins during this one is finished too.
        self.queued.store(false, Ordering::Release);
        // Making an iterator completes every resize under way first (an
        // iteration must not see an entry in two tables).
        let _linearized = self.map.pin().iter();
        self.finished.fetch_add(1, Ordering::Release);
    }
}

/// An index for the finisher, and when to finish its resize.
type Job = (Instant, Arc<Shared>);

/// Queue `index` with the process's finisher, to run at `due`. If the
/// thread cannot be started, resizes are left to the writes alone.
fn finisher(index: Arc<Shared>, due: Instant) {
    static QUEUE: OnceLock<Option<Mutex<Sender<Job>>>> = OnceLock::new();
    let queue = QUEUE.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        // One thread for the process, outside any simulation (design
        // record 0015): finishing a resize changes no lookup's answer.
        std::thread::Builder::new()
            .name("milliscale-points".into())
            .spawn(move || finish_resizes(&rx))
            .map_err(|e| tracing::warn!("no point index resize finisher: {e}"))
            .ok()
            .map(|_| Mutex::new(tx))
    });
    if let Some(q) = queue {
        let sent = q.lock().map(|tx| tx.send((due, index)).is_ok());
        if !matches!(sent, Ok(true)) {
            tracing::warn!("the point index resize finisher is gone");
        }
    }
}

/// The finisher's loop: each index at its time, in the order queued
/// (their times grow in that order).
fn finish_resizes(rx: &Receiver<Job>) {
    for (due, index) in rx {
        std::thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
        index.finish_resize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_was_put_and_forgets_what_was_removed() {
        let p = PointIndex::new();
        for i in 0..10_000u64 {
            p.put(&i.to_be_bytes(), Rid(i));
        }
        assert_eq!(p.get(&7u64.to_be_bytes()), Some(Rid(7)));
        // Removal only of the id it names.
        p.remove_if(&7u64.to_be_bytes(), Rid(8));
        assert_eq!(p.get(&7u64.to_be_bytes()), Some(Rid(7)));
        p.remove_if(&7u64.to_be_bytes(), Rid(7));
        assert_eq!(p.get(&7u64.to_be_bytes()), None);
        // A put replaces a key's entry (a removal under way then leaves it).
        p.put(&8u64.to_be_bytes(), Rid(80));
        p.remove_if(&8u64.to_be_bytes(), Rid(8));
        assert_eq!(p.get(&8u64.to_be_bytes()), Some(Rid(80)));
        assert_eq!(p.get(b"absent"), None);
    }

    /// Writes have the finisher run (and finish the resizes they began)
    /// within a moment of the last of them; every key stays found.
    #[test]
    fn the_finisher_runs_after_writes_stop() {
        let p = PointIndex::new();
        for i in 0..100_000u64 {
            p.put(&i.to_be_bytes(), Rid(i));
        }
        let t0 = milliscale_seam::now();
        while p.shared.queued.load(Ordering::Acquire) || p.finished() == 0 {
            assert!(t0.elapsed() < Duration::from_secs(10), "the finisher never ran");
            milliscale_seam::sleep(Duration::from_millis(5));
        }
        for i in (0..100_000u64).step_by(97) {
            assert_eq!(p.get(&i.to_be_bytes()), Some(Rid(i)));
        }
    }
}
