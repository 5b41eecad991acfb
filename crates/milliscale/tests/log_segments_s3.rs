//! The segment writer over real HTTP S3 servers: the emulator in append
//! mode and in put mode (appends disabled), and MinIO in put mode (it
//! cannot append). Segments roll over at a small part limit.
//!
//! The MinIO half needs `MILLISCALE_TEST_S3_ENDPOINT` (scripts/test.sh
//! starts MinIO and sets it, with `MILLISCALE_REQUIRE_S3=1`).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use milliscale::internals::keys::{Chain, put_part_key, segment_key};
use milliscale::internals::record::{Entry, PartBuilder, decode_segment};
use milliscale::internals::segment::{RetryPolicy, SegmentWriter, WriteMode};
use objstore::ObjectStore;
use objstore::probe::{AppendSupport, probe_appends};

fn part(i: u64) -> Bytes {
    let mut b = PartBuilder::new(0, 0);
    b.push(&Entry::Abort { csn: i });
    b.finish()
}

fn retry() -> RetryPolicy {
    RetryPolicy {
        base: Duration::from_millis(1),
        cap: Duration::from_millis(20),
        deadline: Duration::from_secs(10),
        ..RetryPolicy::default()
    }
}

/// Every entry of group 0's first `segments` segments, in order. Reads
/// are retried (the store may inject throttles and errors).
fn read_back(
    store: &dyn ObjectStore,
    mode: WriteMode,
    parts_max: u32,
    segments: u64,
) -> Vec<Entry> {
    let get = |key: &str| {
        let mut tries = 0;
        loop {
            match store.get(key) {
                Err(e) if e.is_retryable() && tries < 20 => tries += 1,
                r => return r,
            }
        }
    };
    let mut got = Vec::new();
    for seg in 0..segments {
        match mode {
            WriteMode::Append => {
                let bytes = get(&segment_key(Chain::new(0, 0), seg)).expect("segment");
                let (parts, tail) = decode_segment(&bytes);
                assert!(tail.is_none());
                assert!(parts.len() <= parts_max as usize, "segment {seg}: {} parts", parts.len());
                got.extend(parts.into_iter().flat_map(|p| p.entries));
            }
            WriteMode::PutPerFlush => {
                for p in 0..parts_max {
                    let Ok(bytes) = get(&put_part_key(Chain::new(0, 0), seg, p)) else { break };
                    let (parts, _) = decode_segment(&bytes);
                    got.extend(parts.into_iter().flat_map(|p| p.entries));
                }
            }
        }
    }
    got
}

/// Write 10 parts with a part limit of 3, read them back, compare.
fn round_trip(store: Arc<dyn ObjectStore>, mode: WriteMode) {
    let mut w = SegmentWriter::new(store.clone(), Chain::new(0, 0), mode, 3, 0, retry());
    let written: Vec<Bytes> = (0..10).map(part).collect();
    for p in &written {
        w.write(p).expect("write");
    }
    let want: Vec<Entry> = (0..10).map(|csn| Entry::Abort { csn }).collect();
    assert_eq!(read_back(&*store, mode, 3, 4), want, "{mode:?}");
}

#[test]
fn segments_through_the_emulator_in_both_modes() {
    let e = emulator::Emulator::start(emulator::EmulatorOptions::default()).expect("emulator");
    for (i, mode) in [WriteMode::Append, WriteMode::PutPerFlush].into_iter().enumerate() {
        round_trip(common::emulator_bucket(&e, &format!("log{i}")), mode);
    }
}

/// Hedging inside the S3 client (`ObjectStore::append_hedged`): every
/// append after the warm-up goes out twice at once, over HTTP, to an
/// emulator that throttles, fails and loses answers of applied appends.
/// Both copies race at the server; each part must land exactly once.
#[test]
fn hedged_appends_through_the_emulator_land_once() {
    use milliscale::internals::hedge::HedgePolicy;
    let faults = objstore::sim::Faults {
        seed: 11,
        throttle: 0.05,
        error: 0.05,
        ambiguous: 0.1,
        stalls: false,
    };
    // The s3x latency (about 8 ms a request) lets the hedge, sent after a
    // timer tick, race a first copy still in flight.
    let opts = emulator::EmulatorOptions { faults, preset: "s3x".into(), ..Default::default() };
    let e = emulator::Emulator::start(opts).expect("emulator");
    let store = common::emulator_bucket(&e, "hedged");
    let retry = RetryPolicy { hedge: Some(HedgePolicy::EVERY_APPEND), ..retry() };
    let mut w = SegmentWriter::new(store.clone(), Chain::new(0, 0), WriteMode::Append, 7, 0, retry);
    for i in 0..100 {
        w.write(&part(i)).unwrap_or_else(|e| panic!("part {i}: {e}"));
    }
    let hedged = w.take_hedged();
    assert!(hedged >= 80, "appends after the warm-up were hedged: {hedged}");
    let want: Vec<Entry> = (0..100).map(|csn| Entry::Abort { csn }).collect();
    assert_eq!(read_back(&*store, WriteMode::Append, 7, 15), want);
    let faults = e.accounting().injected_faults;
    assert!(faults > 10, "faults were injected: {faults}");
}

#[test]
fn put_mode_against_minio() {
    let Some(s) = common::minio_bucket("milliscale-log", "run") else { return };
    let verdict = probe_appends(&*s, "probe/k").expect("the probe decides");
    assert!(matches!(verdict, AppendSupport::PutPerFlush { .. }), "MinIO cannot append");
    round_trip(s, WriteMode::PutPerFlush);
}
