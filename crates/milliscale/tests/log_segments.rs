//! The segment writer under faults (invariants 4 and 5), checked with an
//! oracle: after writing N parts through a store that throttles, fails,
//! and applies appends while reporting them failed (ambiguous appends), the
//! segments hold exactly the N parts, in order, each once; no segment holds
//! more than the part limit; a foreign writer is detected and never
//! overwritten; an outage past the deadline gives up with `Unavailable`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use milliscale::internals::hedge::HedgePolicy;
use milliscale::internals::keys::{Chain, put_part_key, segment_key};
use milliscale::internals::record::{Entry, PartBuilder, decode_part, decode_segment};
use milliscale::internals::segment::{RetryPolicy, SegmentError, SegmentWriter, WriteMode};
use objstore::sim::{Faults, SimStore};
use objstore::{MemoryStore, ObjectStore};

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        base: Duration::from_micros(50),
        cap: Duration::from_millis(2),
        deadline: Duration::from_secs(10),
        hedge: None,
    }
}

/// Hedge every append at once: two copies of every part race for the same
/// offset, the harshest case for "each part lands exactly once".
fn hedge_always() -> RetryPolicy {
    RetryPolicy { hedge: Some(HedgePolicy::EVERY_APPEND), ..fast_retry() }
}

/// Part `i`: one abort entry with CSN i, padded by its group number so
/// sizes vary.
fn part(group: u32, i: u64) -> Bytes {
    let mut b = PartBuilder::new(group, 0);
    for k in 0..=(i % 3) {
        b.push(&Entry::Abort { csn: i * 10 + k });
    }
    b.finish()
}

/// Read back every part of `group`, in order, segment by segment.
fn read_back(store: &dyn ObjectStore, group: u32, mode: WriteMode, parts_max: u32) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut seg = 0;
    loop {
        let mut got = 0;
        match mode {
            WriteMode::Append => {
                let Ok(bytes) = store.get(&segment_key(Chain::new(group, 0), seg)) else { break };
                let (parts, tail) = decode_segment(&bytes);
                assert!(tail.is_none(), "segment {seg} has a bad tail: {tail:?}");
                let mut at = 0;
                for _ in &parts {
                    let (_, n) = decode_part(&bytes.slice(at..)).expect("decodes");
                    out.push(bytes.slice(at..at + n));
                    at += n;
                    got += 1;
                }
            }
            WriteMode::PutPerFlush => {
                let listed = store
                    .list(&format!("{}/", segment_key(Chain::new(group, 0), seg)))
                    .expect("list");
                if listed.is_empty() {
                    break;
                }
                for (p, m) in listed.iter().enumerate() {
                    assert_eq!(
                        m.key,
                        put_part_key(Chain::new(group, 0), seg, p as u32),
                        "dense part names"
                    );
                    out.push(store.get(&m.key).expect("get"));
                    got += 1;
                }
            }
        }
        assert!(got <= parts_max as usize, "segment {seg} holds {got} parts > {parts_max}");
        seg += 1;
    }
    out
}

/// A store that throttles, fails and reports applied appends as failed;
/// and the memory store under it, to read back without faults.
fn faulty(seed: u64) -> (Arc<dyn ObjectStore>, Arc<MemoryStore>) {
    let faults = Faults { seed, throttle: 0.1, error: 0.1, ambiguous: 0.2, stalls: false };
    let inner = Arc::new(MemoryStore::new());
    (Arc::new(SimStore::new(inner.clone(), "none", faults).expect("sim")), inner)
}

#[test]
fn every_part_lands_exactly_once_despite_faults() {
    for mode in [WriteMode::Append, WriteMode::PutPerFlush] {
        for seed in 0..5 {
            let (store, inner) = faulty(seed);
            // Odd seeds hedge every append (append mode only hedges).
            let retry = if seed % 2 == 1 { hedge_always() } else { fast_retry() };
            let mut w = SegmentWriter::new(store.clone(), Chain::new(3, 0), mode, 7, 0, retry);
            let written: Vec<Bytes> = (0..200).map(|i| part(3, i)).collect();
            for (i, p) in written.iter().enumerate() {
                let loc =
                    w.write(p).unwrap_or_else(|e| panic!("{mode:?} seed {seed} part {i}: {e}"));
                assert_eq!(loc.segment, i as u64 / 7, "rollover after 7 parts");
                assert_eq!(loc.part, i as u32 % 7);
            }
            let report = store.accounting().expect("sim counts");
            assert!(
                report.injected_faults > 20,
                "faults were injected: {}",
                report.injected_faults
            );
            let got = read_back(&*inner, 3, mode, 7);
            assert_eq!(got.len(), written.len(), "{mode:?} seed {seed}: parts in the store");
            let first_diff = got.iter().zip(&written).position(|(g, w)| g != w);
            assert_eq!(first_diff, None, "{mode:?} seed {seed}: parts differ");
            if seed % 2 == 1 && mode == WriteMode::Append {
                // Every append after the warm-up (16) was sent twice.
                let hedged = w.take_hedged();
                assert!(hedged >= 150, "appends were hedged: {hedged}");
            }
        }
    }
}

/// A store whose chosen appends are slow: either the append waits before
/// it is applied (a slow request) or after (a slow response).
#[derive(Debug)]
struct SlowAppends {
    inner: Arc<MemoryStore>,
    calls: std::sync::atomic::AtomicU64,
    slow_every: u64,
}

impl ObjectStore for SlowAppends {
    fn put(&self, k: &str, b: Bytes) -> objstore::Result<objstore::ObjectMeta> {
        self.inner.put(k, b)
    }
    fn put_if_absent(&self, k: &str, b: Bytes) -> objstore::Result<objstore::ObjectMeta> {
        self.inner.put_if_absent(k, b)
    }
    fn put_if_match(&self, k: &str, b: Bytes, e: &str) -> objstore::Result<objstore::ObjectMeta> {
        self.inner.put_if_match(k, b, e)
    }
    fn append(&self, k: &str, off: u64, b: Bytes) -> objstore::Result<objstore::ObjectMeta> {
        let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n % self.slow_every != self.slow_every - 1 {
            return self.inner.append(k, off, b);
        }
        let stall = Duration::from_millis(150);
        if (n / self.slow_every).is_multiple_of(2) {
            std::thread::sleep(stall);
            self.inner.append(k, off, b)
        } else {
            let r = self.inner.append(k, off, b);
            std::thread::sleep(stall);
            r
        }
    }
    fn get(&self, k: &str) -> objstore::Result<Bytes> {
        self.inner.get(k)
    }
    fn get_range(&self, k: &str, r: std::ops::Range<u64>) -> objstore::Result<Bytes> {
        self.inner.get_range(k, r)
    }
    fn head(&self, k: &str) -> objstore::Result<objstore::ObjectMeta> {
        self.inner.head(k)
    }
    fn list(&self, p: &str) -> objstore::Result<Vec<objstore::ObjectMeta>> {
        self.inner.list(p)
    }
    fn delete(&self, k: &str) -> objstore::Result<()> {
        self.inner.delete(k)
    }
}

/// A slow append is hedged, and whichever copy lands (the slow one applied
/// late, or applied at once with a late answer), every part is in the
/// segment exactly once, in order, and the next parts go on after it.
#[test]
fn slow_appends_are_hedged_and_land_once() {
    let inner = Arc::new(MemoryStore::new());
    let store: Arc<dyn ObjectStore> =
        Arc::new(SlowAppends { inner: inner.clone(), calls: Default::default(), slow_every: 25 });
    let retry = RetryPolicy {
        hedge: Some(HedgePolicy {
            quantile: 0.5,
            multiple: 3.0,
            min: Duration::from_millis(5),
            max_share: 1.0,
            threads: true,
        }),
        ..fast_retry()
    };
    let mut w = SegmentWriter::new(store, Chain::new(1, 0), WriteMode::Append, 10_000, 0, retry);
    let written: Vec<Bytes> = (0..200).map(|i| part(1, i)).collect();
    for (i, p) in written.iter().enumerate() {
        w.write(p).unwrap_or_else(|e| panic!("part {i}: {e}"));
    }
    // Calls 24, 49, ... were slow; each of those was hedged (the hedge is
    // itself a call, which shifts the count, so at least 200 / 26).
    let hedged = w.take_hedged();
    assert!(hedged >= 7, "only {hedged} hedges");
    // Let the losing copies finish, then check the segment.
    std::thread::sleep(Duration::from_millis(300));
    let got = read_back(&*inner, 1, WriteMode::Append, 10_000);
    assert_eq!(got, written, "every part once, in order");

    // The same writer without hedging waits the slow calls out instead.
    let inner = Arc::new(MemoryStore::new());
    let store: Arc<dyn ObjectStore> =
        Arc::new(SlowAppends { inner: inner.clone(), calls: Default::default(), slow_every: 25 });
    let mut w =
        SegmentWriter::new(store, Chain::new(1, 0), WriteMode::Append, 10_000, 0, fast_retry());
    for p in &written[..60] {
        w.write(p).expect("write");
    }
    assert_eq!(w.take_hedged(), 0);
    assert_eq!(read_back(&*inner, 1, WriteMode::Append, 10_000), written[..60].to_vec());
}

#[test]
fn a_foreign_append_stops_the_writer_without_overwriting() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let mut w = SegmentWriter::new(
        store.clone(),
        Chain::new(0, 0),
        WriteMode::Append,
        100,
        0,
        fast_retry(),
    );
    w.write(&part(0, 1)).expect("first part");
    let intruder = part(0, 99);
    let size = store.head(&segment_key(Chain::new(0, 0), 0)).expect("head").size;
    store
        .append(&segment_key(Chain::new(0, 0), 0), size, intruder.clone())
        .expect("another writer appends");
    let err = w.write(&part(0, 2)).expect_err("the segment changed under the writer");
    assert!(matches!(err, SegmentError::Foreign { .. }), "{err}");
    let seg = store.get(&segment_key(Chain::new(0, 0), 0)).expect("get");
    assert_eq!(seg.len() as u64, size + intruder.len() as u64, "nothing was overwritten");
}

#[test]
fn a_foreign_part_object_stops_a_put_mode_writer() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    store.put(&put_part_key(Chain::new(0, 0), 0, 0), part(0, 99)).expect("someone else's part");
    let mut w = SegmentWriter::new(
        store.clone(),
        Chain::new(0, 0),
        WriteMode::PutPerFlush,
        100,
        0,
        fast_retry(),
    );
    let err = w.write(&part(0, 1)).expect_err("the part name is taken");
    assert!(matches!(err, SegmentError::Foreign { .. }), "{err}");
    assert_eq!(store.get(&put_part_key(Chain::new(0, 0), 0, 0)).expect("get"), part(0, 99));
}

#[test]
fn an_outage_past_the_deadline_is_unavailable() {
    let sim = Arc::new(
        SimStore::new(Arc::new(MemoryStore::new()), "none", Faults::default()).expect("sim"),
    );
    let retry = RetryPolicy { deadline: Duration::from_millis(200), ..fast_retry() };
    let mut w = SegmentWriter::new(sim.clone(), Chain::new(0, 0), WriteMode::Append, 100, 0, retry);
    w.write(&part(0, 1)).expect("before the outage");
    sim.set_unavailable_for(Duration::from_secs(5));
    let t = Instant::now();
    let err = w.write(&part(0, 2)).expect_err("the store is down");
    assert!(matches!(err, SegmentError::Unavailable { .. }), "{err}");
    assert!(t.elapsed() < Duration::from_secs(2), "gave up near the deadline: {:?}", t.elapsed());

    // A short outage is ridden out.
    let mut w =
        SegmentWriter::new(sim.clone(), Chain::new(1, 0), WriteMode::Append, 100, 0, fast_retry());
    sim.set_unavailable_for(Duration::from_millis(100));
    w.write(&part(1, 1)).expect("written once the store is back");
}
