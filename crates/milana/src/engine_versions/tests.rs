//! The engine's layout against the map, and its parts.

use super::*;
use crate::versions::MapVersions;
use milliscale::Options;
use proptest::prelude::*;

/// Rows in a fresh engine; with `small_memo` the memo of newest
/// versions holds 2 keys of the test's 3, so that it is cleared again
/// and again.
fn engine(db: &Arc<milliscale::Database>, small_memo: bool) -> EngineVersions {
    let v = EngineVersions::open(Arc::clone(db));
    EngineVersions { latest_cap: if small_memo { 2 } else { LATEST_MEMO_KEYS }, ..v }
}

proptest! {
    /// The first and last differing bytes, found a chunk at a time, are
    /// the ones a byte-by-byte comparison finds.
    #[test]
    fn differences_are_found_as_byte_by_byte(
        a in prop::collection::vec(0u8..3, 0..200),
        flips in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
    ) {
        let mut b = a.clone();
        for f in &flips {
            if !b.is_empty() {
                let i = f.index(b.len());
                b[i] = b[i].wrapping_add(1);
            }
        }
        let first = (0..a.len()).find(|&i| a[i] != b[i]);
        let last = (0..a.len()).rev().find(|&i| a[i] != b[i]);
        prop_assert_eq!(first_difference(&a, &b), first);
        prop_assert_eq!(last_difference(&a, &b), last);
    }

    /// The engine's layout answers as the map does, through installs
    /// (of values of one length, so that some are patches in place),
    /// reads at any timestamp, collections and restarts.
    #[test]
    fn engine_rows_answer_as_the_map_does(
        ops in prop::collection::vec((0u8..5, 0usize..3, 0u64..50, 0u8..4), 1..60),
        small_memo in any::<bool>(),
    ) {
        // Cluster keys of two tables (a restart finds their engine
        // tables again as it is asked for them).
        let keys: [&[u8]; 3] = [b"t\x00a", b"t\x00a\x00", b"u\x00b"];
        let db = Arc::new(milliscale::Database::open(Options::new().store("memory://")).expect("open"));
        let (mut map, mut rows) = (MapVersions::default(), engine(&db, small_memo));
        let mut ts = 0;
        // Rows read at earlier steps, offered to each install: the
        // newest of their keys, or replaced since (then not to be used).
        let mut held: Vec<(Key, KeptRow)> = Vec::new();
        for (op, k, t, kind) in ops {
            let key = keys[k];
            match op {
                0 | 1 => {
                    ts += 1 + t % 3;
                    // A deletion, a short value, or one of 64 bytes that
                    // differs from the last in a byte or not at all.
                    let value = match kind {
                        0 => None,
                        1 => Some(ts.to_be_bytes().to_vec()),
                        2 => Some(vec![7; 64]),
                        _ => Some([vec![7; 40], ts.to_be_bytes().to_vec(), vec![7; 16]].concat()),
                    };
                    let writes = vec![(key.to_vec(), value)];
                    let v = CommitTs { ts, client: k as u32 };
                    map.install(v, &writes);
                    let offered = held.iter().map(|(k, r): &(Key, KeptRow)| (&k[..], r.clone()));
                    rows.offer_rows(offered);
                    rows.install(v, &writes);
                }
                4 => {
                    let kept = rows.rows().values([(key, rows.latest(key), true)]);
                    held.extend(kept.into_iter().filter_map(|(_, row)| row).map(|r| (key.to_vec(), r)));
                    if held.len() > 3 {
                        held.remove(0);
                    }
                }
                2 => prop_assert_eq!(map.collect(t), rows.collect(t)),
                3 if t % 4 == 0 => {
                    // A restart: the rows stay, the history goes.
                    map.drop_history();
                    rows = engine(&db, small_memo);
                }
                // A range moved away (its rows dropped), or a row copied
                // in from a range's old owner (held alone; older reads
                // gone), newer than the key's or not.
                3 if t % 4 == 1 => {
                    let (a, b): (&[u8], &[u8]) = [(&b"t"[..], &b"u"[..]), (b"t\x00a\x00", b"")][kind as usize % 2];
                    prop_assert_eq!(map.drop_range(a, b), rows.drop_range(a, b));
                }
                3 => {
                    let v = CommitTs { ts: ts.saturating_sub(t % 3) + t % 5, client: 9 };
                    ts = ts.max(v.ts);
                    // A version is one transaction's write: its value
                    // follows from it (adopted again, it is the same).
                    let value = v.ts.is_multiple_of(2).then(|| vec![v.ts as u8; 9]);
                    map.adopt(key, v, value.clone());
                    rows.adopt(key, v, value);
                }
                _ => {}
            }
            let ranges: [(&[u8], &[u8]); 5] = [
                (b"", b""),
                (b"t\x00a", b"t\x00a\x01"),
                (b"t\x00a\x00", b"u\x01"),
                (b"t\x01", b""),
                (b"t", b"u\x00b"),
            ];
            for (a, b) in ranges {
                for at in [0, t, ts] {
                    prop_assert_eq!(map.scan_at(a, b, at, 0), rows.scan_at(a, b, at, 0));
                    prop_assert_eq!(map.scan_at(a, b, at, 1), rows.scan_at(a, b, at, 1));
                    prop_assert_eq!(map.changed_after(a, b, at), rows.changed_after(a, b, at));
                }
            }
            for key in keys {
                prop_assert_eq!(map.latest(key), rows.latest(key));
                for at in [0, t, ts, Timestamp::MAX] {
                    let read = map.read_at(key, at);
                    prop_assert_eq!(&read, &rows.read_at(key, at));
                    if let Ok((v, value)) = read {
                        prop_assert_eq!(rows.rows().value(key, v), Some(value));
                    }
                }
            }
        }
        prop_assert_eq!(map.count(), rows.count());
        prop_assert_eq!(map.all(), rows.all());
    }
}

/// A replaced version goes once the watermark reaches the version that
/// replaced it, never before; one replaced with a late timestamp holds
/// those replaced after it (the queue is in the order of commits).
#[test]
fn a_replaced_version_goes_once_the_watermark_passes_its_replacement() {
    let v = |ts| CommitTs { ts, client: 1 };
    let mut h = History::default();
    // c: 10 replaced at 20, and (last) 20 replaced at 200.
    h.push(b"c", v(10), Some(row_value(v(10), Some(b"c10")).into()), 20);
    h.push(b"a", v(90), Some(row_value(v(90), Some(b"a90")).into()), 100);
    h.push(b"b", CommitTs::INITIAL, None, 40);
    h.push(b"b", v(40), Some(row_value(v(40), None).into()), 50);
    h.push(b"c", v(20), Some(row_value(v(20), Some(b"c20")).into()), 200);
    assert_eq!(
        h.collect(99),
        1,
        "c's 10 goes; c's 20 stays (replaced at 200); a's replacement is at 100, so a stays, and \
         b waits behind it"
    );
    assert_eq!(h.at(b"c", 150, v(200)), Ok((v(20), Some(b"c20".to_vec()))));
    assert_eq!(h.at(b"a", 95, v(100)), Ok((v(90), Some(b"a90".to_vec()))));
    assert_eq!(h.at(b"b", 45, v(50)), Ok((v(40), None)));
    assert_eq!(h.collect(100), 2, "a's and b's at 40 (b's absence before it does not count)");
    assert_eq!(h.at(b"a", 95, v(100)), Err(Gone { oldest: 100 }));
    assert_eq!(h.count, 1, "c's 20");
    assert_eq!(h.collect(200), 1);
    assert!(h.keys.is_empty() && h.due.is_empty());
}

/// A patch in place logs the changed bytes and leaves the whole row.
#[test]
fn a_write_that_keeps_the_length_changes_only_its_bytes() {
    let db = milliscale::Database::open(Options::new().store("memory://")).expect("open");
    let t = db.create_table("t").expect("table");
    let v = |ts| CommitTs { ts, client: 1 };
    let old = row_value(v(1), Some(&[5; 100]));
    let mut value = vec![5; 100];
    value[50] = 9;
    let w = RowWrite::new(t.clone(), b"k", v(2), Some(&value), Some(&old));
    assert_eq!(w.changed, Some(vec![(0, STAMP_BYTES), (STAMP_BYTES + 50, STAMP_BYTES + 51)]));
    assert_eq!(w.row, row_value(v(2), Some(&value)));
    // A new length, or most of the row changed: the whole row.
    assert_eq!(RowWrite::new(t.clone(), b"k", v(2), Some(&[5; 99]), Some(&old)).changed, None);
    assert_eq!(RowWrite::new(t.clone(), b"k", v(2), Some(&[6; 100]), Some(&old)).changed, None);
    assert_eq!(RowWrite::new(t.clone(), b"k", v(2), None, Some(&old)).changed, None);
}

/// A collection in parts (the server's, outside its lock) drops what one
/// collection drops, and leaves the same history.
#[test]
fn a_collection_in_parts_drops_what_one_collection_does() {
    let v = |ts| CommitTs { ts, client: 1 };
    let (mut whole, mut parts) = (History::default(), History::default());
    for i in 0..500u64 {
        let key = [b'k', (i % 37) as u8];
        for h in [&mut whole, &mut parts] {
            h.push(&key, v(i + 1), Some(row_value(v(i + 1), Some(&i.to_be_bytes())).into()), i + 2);
        }
    }
    let dropped = whole.collect(300);
    let (mut sum, mut rounds) = (0, 0);
    loop {
        let (n, more) = parts.collect_some(300, 7);
        sum += n;
        rounds += 1;
        if !more {
            break;
        }
    }
    assert!(dropped > 0 && rounds > 1, "{dropped} dropped in {rounds} rounds");
    assert_eq!(sum, dropped);
    assert_eq!((parts.count, parts.due.len()), (whole.count, whole.due.len()));
    let key = [b'k', 3];
    assert_eq!(parts.at(&key, 400, v(500)), whole.at(&key, 400, v(500)));
}
