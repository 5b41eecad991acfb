//! What the log looks like in the store after real commits: every CSN
//! exactly once (invariant 1), segments within the part limit (invariant
//! 4), records equal to what transactions wrote; and put mode through the
//! emulator and against MinIO, which cannot append.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::{WriteCounter, read_log, read_log_parts};
use milliscale::internals::record::{Entry, Op};
use milliscale::internals::segment::WriteMode;
use milliscale::{Database, Options};
use objstore::{MemoryStore, ObjectStore};

/// Commit `n` transactions per thread from 4 threads; return what each
/// CSN wrote (key, value), and the next CSN.
/// CSN -> (key, value) it wrote.
type Written = BTreeMap<u64, (Vec<u8>, Vec<u8>)>;

fn load(db: &Database, n: u32) -> (Written, u64) {
    let t = db.create_table("t").expect("table");
    let written = parking_lot::Mutex::new(BTreeMap::new());
    std::thread::scope(|s| {
        for w in 0..4u32 {
            let (t, written) = (&t, &written);
            s.spawn(move || {
                for i in 0..n {
                    let key = format!("w{w}-k{}", i % 7).into_bytes();
                    let value = format!("v{i}").into_bytes();
                    let mut tx = db.begin().expect("begin");
                    tx.put(t, &key, &value).expect("put");
                    let info = tx.commit_and_wait().expect("commit");
                    written.lock().insert(info.csn.expect("a write"), (key, value));
                }
            });
        }
    });
    (written.into_inner(), db.stats().next_csn)
}

/// 4 workers in 2 groups, 2 lanes, 3 appends per segment; with one
/// stream per group (the paper's layout) or one stream for both.
fn every_csn_once_and_segments_roll_over(streams: usize) {
    let store = WriteCounter::new(Arc::new(MemoryStore::new()));
    let db = Database::open(
        Options::new()
            .add_store_handle(store.clone())
            .workers(4)
            .log_group_size(2)
            .log_lanes(2)
            .log_streams(streams)
            .segment_parts_max(3)
            .flush_timeout(Duration::from_millis(1)),
    )
    .expect("open");
    let (written, next) = load(&db, 60);
    db.close().expect("close");
    for (key, writes) in store.writes.lock().iter() {
        assert!(writes.len() <= 3, "{key} took {} appends", writes.len());
    }
    let mut seen = BTreeMap::new();
    // Chain (a lane of a stream: the key up to the segment number) ->
    // (segments, groups seen, last CSN per group).
    type ChainSeen = (usize, BTreeMap<u32, u64>);
    let mut chains = BTreeMap::<String, ChainSeen>::new();
    for (key, parts) in read_log_parts(&*store) {
        let chain = key[..key.rfind("/s").expect("a segment key")].to_owned();
        let (segments, last) = chains.entry(chain).or_default();
        *segments += 1;
        for part in parts {
            let last = last.entry(part.group).or_default();
            for e in part.entries {
                assert!(e.csn() > *last, "{key}: a chain holds each group's log in CSN order");
                *last = e.csn();
                let Entry::Commit { csn, records, .. } = e else { panic!("no aborts here") };
                let records = records.to_vec();
                assert_eq!(records.len(), 1);
                let (k, v) = &written[&csn];
                assert_eq!(&records[0].key[..], &k[..]);
                match &records[0].op {
                    Op::Insert(b) | Op::Update(b) => assert_eq!(&b[..], &v[..]),
                    op => panic!("unexpected {op:?}"),
                }
                assert!(seen.insert(csn, ()).is_none(), "CSN {csn} logged twice");
            }
        }
    }
    let all: Vec<u64> = seen.into_keys().collect();
    assert_eq!(all, (1..next).collect::<Vec<_>>(), "CSNs are dense and all logged");
    let names: Vec<&String> = chains.keys().collect();
    assert!(chains.values().all(|(n, _)| *n > 1), "segments rolled over: {chains:?}");
    if streams == 1 {
        assert_eq!(names, ["log/g0000", "log/g0000/l1"], "one stream of 2 lanes");
        let groups: std::collections::BTreeSet<u32> =
            chains.values().flat_map(|(_, g)| g.keys().copied()).collect();
        assert_eq!(groups.into_iter().collect::<Vec<_>>(), [0, 1], "both groups in one stream");
    } else {
        assert_eq!(names, ["log/g0000", "log/g0000/l1", "log/g0001", "log/g0001/l1"], "2 x 2");
        for (chain, (_, groups)) in &chains {
            let own = if chain.starts_with("log/g0000") { 0 } else { 1 };
            assert!(groups.keys().all(|&g| g == own), "{chain} holds only its group's parts");
        }
    }
}

#[test]
fn the_log_holds_every_csn_once_and_segments_roll_over() {
    every_csn_once_and_segments_roll_over(1);
    every_csn_once_and_segments_roll_over(milliscale::options::LOG_STREAMS_PER_GROUP);
}

/// One append carries a part of each group of its stream: with one lane
/// held at the gate, two groups' commits wait in their buffers, and the
/// next append takes both. Recovery reads both parts back.
#[test]
fn one_append_carries_a_part_of_each_group_that_had_entries() {
    let counter = WriteCounter::new(Arc::new(MemoryStore::new()));
    let gate = common::Gate::new(counter.clone());
    let db = Database::open(
        Options::new()
            .add_store_handle(gate.clone())
            .workers(2)
            .log_group_size(1)
            .log_lanes(1)
            .flush_timeout(Duration::from_millis(1)),
    )
    .expect("open");
    let _open = gate.open_on_drop();
    let t = db.create_table("t").expect("table");
    gate.close(0);
    let put = |k: &[u8]| {
        let mut tx = db.begin().expect("begin");
        tx.put(&t, k, b"v").expect("put");
        tx.commit().expect("commit")
    };
    let first = put(b"a"); // worker 0: group 0; its append waits at the gate
    std::thread::sleep(Duration::from_millis(20));
    let second = put(b"b");
    let third = std::thread::scope(|s| s.spawn(|| put(b"c")).join().expect("worker 1"));
    assert!(!first.is_acknowledged() && !second.is_acknowledged() && !third.is_acknowledged());
    gate.open(0);
    for a in [first, second, third] {
        a.wait().expect("durable");
    }
    db.close().expect("close");
    let writes: Vec<usize> = counter.writes.lock().values().flatten().copied().collect();
    assert_eq!(writes, [1, 2], "the held append, then one with both groups' parts");
    let db = Database::open(Options::new().add_store_handle(counter.clone())).expect("recover");
    let t = db.open_table("t").expect("table");
    let mut tx = db.begin().expect("begin");
    for k in [b"a", b"b", b"c"] {
        assert_eq!(tx.get(&t, k).expect("get"), Some(b"v".to_vec()), "{k:?} recovered");
    }
}

/// Every entry of the log in `store`, in CSN order (lanes interleave:
/// CSN order is the log's order).
fn logged_entries(store: &dyn ObjectStore) -> Vec<Entry> {
    let mut entries: Vec<Entry> =
        read_log(store).into_iter().flat_map(|(_, p)| p.into_iter().flatten()).collect();
    entries.sort_by_key(Entry::csn);
    entries
}

/// The operations `entries` committed, in order.
fn logged_ops(entries: &[Entry]) -> Vec<Op> {
    entries
        .iter()
        .flat_map(|e| match e {
            Entry::Commit { records, .. } => records.to_vec().into_iter().map(|r| r.op).collect(),
            Entry::Abort { .. } => vec![],
        })
        .collect()
}

#[test]
fn a_delta_update_logs_only_the_changed_bytes() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let db = Database::open(
        Options::new().add_store_handle(store.clone()).flush_timeout(Duration::from_millis(1)),
    )
    .expect("open");
    let t = db.create_table("t").expect("table");
    let mut tx = db.begin().expect("begin");
    tx.put(&t, b"k", &[0u8; 80]).expect("put");
    tx.commit_and_wait().expect("commit");
    let mut tx = db.begin().expect("begin");
    tx.update_range(&t, b"k", 16, b"abcdefgh").expect("update");
    assert!(tx.delete(&t, b"gone").is_ok());
    tx.commit_and_wait().expect("commit");
    let mut tx = db.begin().expect("begin");
    assert!(tx.delete(&t, b"k").expect("delete"));
    tx.commit_and_wait().expect("commit");
    db.close().expect("close");
    let entries = logged_entries(&*store);
    let ops = logged_ops(&entries);
    assert_eq!(ops.len(), 3, "a delete of a missing key logs nothing: {ops:?}");
    assert!(matches!(&ops[0], Op::Insert(v) if v.len() == 80));
    assert!(matches!(&ops[1], Op::Delta { offset: 16, bytes } if &bytes[..] == b"abcdefgh"));
    assert_eq!(ops[2], Op::Delete);
    assert!(matches!(entries[1], Entry::Commit { dsn: 1, .. }), "the delta overwrote CSN 1");
}

#[test]
fn several_patches_are_one_version_logged_as_a_delta_each_and_recovered() {
    let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
    let opts =
        || Options::new().add_store_handle(store.clone()).flush_timeout(Duration::from_millis(1));
    let db = Database::open(opts()).expect("open");
    let t = db.create_table("t").expect("table");
    let mut tx = db.begin().expect("begin");
    tx.put(&t, b"k", &[0u8; 80]).expect("put");
    tx.commit_and_wait().expect("commit");
    let mut tx = db.begin().expect("begin");
    let err = tx.update_ranges(&t, b"k", &[]).expect_err("no ranges");
    assert!(matches!(err, milliscale::Error::InvalidArgument(_)), "{err}");
    let err = tx.update_ranges(&t, b"k", &[(0, b"a"), (79, b"bc")]).expect_err("past the end");
    assert!(matches!(err, milliscale::Error::InvalidArgument(_)), "{err}");
    let err = tx.update_ranges(&t, b"missing", &[(0, b"a"), (1, b"b")]).expect_err("no key");
    assert!(matches!(err, milliscale::Error::NotFound), "{err}");
    // In order: the third overwrites a byte of the first.
    tx.update_ranges(&t, b"k", &[(0, b"ab"), (40, b"xyz"), (1, b"Q")]).expect("update");
    let mut want = vec![0u8; 80];
    want[..2].copy_from_slice(b"aQ");
    want[40..43].copy_from_slice(b"xyz");
    assert_eq!(tx.get(&t, b"k").expect("get"), Some(want.clone()), "its own write");
    tx.commit_and_wait().expect("commit");
    db.close().expect("close");
    let ops = logged_ops(&logged_entries(&*store));
    assert_eq!(ops.len(), 4, "an insert, then a delta per patch: {ops:?}");
    assert!(matches!(&ops[1], Op::Delta { offset: 0, bytes } if &bytes[..] == b"ab"));
    assert!(matches!(&ops[2], Op::Delta { offset: 40, bytes } if &bytes[..] == b"xyz"));
    assert!(matches!(&ops[3], Op::Delta { offset: 1, bytes } if &bytes[..] == b"Q"));
    // A recovery replays the deltas in order.
    let db = Database::open(opts()).expect("recover");
    let t = db.open_table("t").expect("table");
    let mut tx = db.begin().expect("begin");
    assert_eq!(tx.get(&t, b"k").expect("get"), Some(want), "recovered");
}

fn put_mode(store: Arc<dyn ObjectStore>, force: bool) {
    let db = Database::open(
        Options::new()
            .add_store_handle(store.clone())
            .put_per_flush(force)
            .workers(2)
            // Each of the 4 threads waits for each of its 10 commits, so
            // there are at least 10 flushes; over 3 lanes one lane takes at
            // least 4, so it rolls over past 2.
            .log_lanes(3)
            .segment_parts_max(2)
            .flush_timeout(Duration::from_millis(1)),
    )
    .expect("open");
    let status = &db.log_metrics().expect("a log").stores[0];
    assert_eq!(status.mode, WriteMode::PutPerFlush);
    assert!(status.put_reason.is_some(), "the reason is reported");
    let (written, next) = load(&db, 10);
    db.close().expect("close");
    let log = read_log(&*store);
    // One object per flush, each with a part of each group that had
    // entries (2 workers: one group here).
    assert!(log.iter().all(|(k, parts)| k.contains("/p") && parts.len() == 1), "one part each");
    let keys: Vec<&String> = log.iter().map(|(k, _)| k).collect();
    assert!(
        log.iter().any(|(k, _)| k.contains("/s00000001/")),
        "rolled over to segment 1: {keys:?}"
    );
    let n: usize = log.iter().map(|(_, p)| p[0].len()).sum();
    assert_eq!(n as u64, next - 1);
    assert_eq!(n, written.len());
}

#[test]
fn put_mode_through_the_emulator() {
    let e = emulator::Emulator::start(emulator::EmulatorOptions::default()).expect("emulator");
    put_mode(common::emulator_bucket(&e, "putmode"), true);
}

#[test]
fn minio_is_probed_into_put_mode() {
    if let Some(s) = common::minio_bucket("milliscale-db", "db") {
        put_mode(s, false);
    }
}
