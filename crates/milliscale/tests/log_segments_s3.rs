//! The segment writer over real HTTP S3 servers: the emulator in append
//! mode and in put mode (appends disabled), and MinIO in put mode (it
//! cannot append). Segments roll over at a small part limit.
//!
//! The MinIO half needs `MILLISCALE_TEST_S3_ENDPOINT` (scripts/test.sh
//! starts MinIO and sets it, with `MILLISCALE_REQUIRE_S3=1`).

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use milliscale::log::record::{Entry, PartBuilder, decode_segment};
use milliscale::log::segment::{RetryPolicy, SegmentWriter, WriteMode, put_part_key, segment_key};
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

/// Write 10 parts with a part limit of 3, read them back, compare.
fn round_trip(store: Arc<dyn ObjectStore>, mode: WriteMode) {
    let mut w = SegmentWriter::new(store.clone(), 0, mode, 3, 0, retry());
    let written: Vec<Bytes> = (0..10).map(part).collect();
    for p in &written {
        w.write(p).expect("write");
    }
    let mut got = Vec::new();
    for seg in 0..4 {
        match mode {
            WriteMode::Append => {
                let bytes = store.get(&segment_key(0, seg)).expect("segment");
                let (parts, tail) = decode_segment(&bytes);
                assert!(tail.is_none());
                assert!(parts.len() <= 3, "segment {seg} holds {} parts", parts.len());
                got.extend(parts.into_iter().flat_map(|p| p.entries));
            }
            WriteMode::PutPerFlush => {
                for p in 0..3 {
                    let Ok(bytes) = store.get(&put_part_key(0, seg, p)) else { break };
                    let (parts, _) = decode_segment(&bytes);
                    got.extend(parts.into_iter().flat_map(|p| p.entries));
                }
            }
        }
    }
    let want: Vec<Entry> = (0..10).map(|csn| Entry::Abort { csn }).collect();
    assert_eq!(got, want, "{mode:?}");
}

#[test]
fn segments_through_the_emulator_in_both_modes() {
    let e = emulator::Emulator::start(emulator::EmulatorOptions::default()).expect("emulator");
    for (i, mode) in [WriteMode::Append, WriteMode::PutPerFlush].into_iter().enumerate() {
        round_trip(common::emulator_bucket(&e, &format!("log{i}")), mode);
    }
}

#[test]
fn put_mode_against_minio() {
    let Some(s) = common::minio_bucket("milliscale-log", "run") else { return };
    let verdict = probe_appends(&*s, "probe/k").expect("the probe decides");
    assert!(matches!(verdict, AppendSupport::PutPerFlush { .. }), "MinIO cannot append");
    round_trip(s, WriteMode::PutPerFlush);
}
