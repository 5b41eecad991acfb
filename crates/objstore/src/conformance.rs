//! The conformance suite: one set of checks every backend must pass
//! (memory, fs, sim, the emulator through `s3`, and MinIO for what it
//! supports). Each
//! check panics with a message naming the violated rule. It lives in the
//! library so every backend's test can run the same checks.

use std::sync::{Arc, Barrier};

use bytes::Bytes;

use crate::{KEY_BYTES_MAX, ObjectStore, StoreError};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// A store that reports part counts must report them right; S3 reports none.
fn parts_are(got: Option<u32>, want: u32, what: &str) {
    if let Some(p) = got {
        assert_eq!(p, want, "{what}: part count");
    }
}

/// Run every single-threaded and concurrent check on stores from `make`.
pub fn run_all(make: &dyn Fn() -> Arc<dyn ObjectStore>) {
    run_all_but_keys(make);
    keys(&*make());
}

/// Everything but [`keys`], for stores whose key prefix eats into the
/// 1,024-byte limit (an `s3://bucket/prefix` store).
pub fn run_all_but_keys(make: &dyn Fn() -> Arc<dyn ObjectStore>) {
    put_get_head_delete(&*make());
    conditional_puts(&*make());
    appends(&*make());
    ranges(&*make());
    listing(&*make());
    concurrent_put_if_absent(make, 16, 20);
    concurrent_appends_at_one_offset(make, 8, 20);
}

/// Put, get, head, delete; missing keys.
pub fn put_get_head_delete(s: &dyn ObjectStore) {
    let m = s.put("a/x", b("hello")).expect("put");
    assert_eq!(m.size, 5);
    parts_are(m.parts, 1, "a put makes a one-part object");
    assert_eq!(s.get("a/x").expect("get"), b("hello"));
    let h = s.head("a/x").expect("head");
    assert_eq!((h.size, &h.etag), (5, &m.etag), "head reports the put's size and ETag");
    let m2 = s.put("a/x", b("bye")).expect("overwrite");
    assert_ne!(m2.etag, m.etag, "every write changes the ETag");
    assert_eq!(s.get("a/x").expect("get"), b("bye"));
    assert!(matches!(s.get("a/missing"), Err(StoreError::NotFound(_))), "get of a missing key");
    assert!(matches!(s.head("a/missing"), Err(StoreError::NotFound(_))), "head of a missing key");
    s.delete("a/x").expect("delete");
    assert!(matches!(s.get("a/x"), Err(StoreError::NotFound(_))), "deleted keys are gone");
    s.delete("a/x").expect("deleting a missing key succeeds, as in S3");
}

/// If-None-Match: * and If-Match.
pub fn conditional_puts(s: &dyn ObjectStore) {
    let m = s.put_if_absent("c/m", b("v1")).expect("first create");
    assert!(
        matches!(s.put_if_absent("c/m", b("v2")), Err(StoreError::AlreadyExists(_))),
        "If-None-Match on an existing key"
    );
    assert_eq!(s.get("c/m").expect("get"), b("v1"), "a refused conditional put changes nothing");
    let m2 = s.put_if_match("c/m", b("v2"), &m.etag).expect("If-Match with the current ETag");
    assert!(
        matches!(s.put_if_match("c/m", b("v3"), &m.etag), Err(StoreError::PreconditionFailed(_))),
        "If-Match with a stale ETag"
    );
    assert_eq!(s.get("c/m").expect("get"), b("v2"));
    assert_eq!(s.head("c/m").expect("head").etag, m2.etag);
    assert!(
        matches!(s.put_if_match("c/none", b("x"), &m2.etag), Err(StoreError::NotFound(_))),
        "If-Match on a missing key"
    );
}

/// S3 Express appends: offsets, parts, the ambiguous retry.
pub fn appends(s: &dyn ObjectStore) {
    let m = s.append("l/seg", 0, b("abc")).expect("offset 0 creates the object");
    assert_eq!(m.size, 3);
    parts_are(m.parts, 1, "offset 0 on a missing object");
    let m = s.append("l/seg", 3, b("de")).expect("append at the size");
    assert_eq!(m.size, 5);
    parts_are(m.parts, 2, "each append adds a part");
    assert_eq!(s.get("l/seg").expect("get"), b("abcde"));
    // Retrying an append that landed: the store reports the new size.
    assert_eq!(
        s.append("l/seg", 3, b("de")),
        Err(StoreError::InvalidWriteOffset { actual_size: 5 }),
        "a stale offset is refused with the actual size"
    );
    assert_eq!(
        s.append("l/seg", 9, b("x")),
        Err(StoreError::InvalidWriteOffset { actual_size: 5 })
    );
    assert_eq!(
        s.append("l/seg", 0, b("x")),
        Err(StoreError::InvalidWriteOffset { actual_size: 5 }),
        "offset 0 does not overwrite an existing object"
    );
    assert_eq!(s.get("l/seg").expect("get"), b("abcde"), "refused appends change nothing");
    assert!(
        matches!(s.append("l/seg", 5, Bytes::new()), Err(StoreError::InvalidRequest(_))),
        "empty append"
    );
    assert!(
        matches!(s.append("l/nope", 4, b("x")), Err(StoreError::NotFound(_))),
        "offset > 0 on a missing object"
    );
    parts_are(s.head("l/seg").expect("head").parts, 2, "refused appends add no part");
}

/// Object size limit in parts: `parts_max` parts fit, the next append is refused.
pub fn part_limit(s: &dyn ObjectStore, parts_max: u32) {
    let mut size = 0u64;
    for i in 0..parts_max {
        let m = s.append("p/seg", size, b("x")).unwrap_or_else(|e| panic!("append {i}: {e}"));
        size = m.size;
        parts_are(m.parts, i + 1, "appends below the limit");
    }
    // The count in the error is informational: S3's error does not carry it.
    let r = s.append("p/seg", size, b("x"));
    assert!(
        matches!(r, Err(StoreError::TooManyParts { .. })),
        "the part after the limit is refused: {r:?}"
    );
    assert_eq!(s.head("p/seg").expect("head").size, u64::from(parts_max), "nothing was added");
    s.put("p/seg", b("y")).expect("a put replaces the object and resets its parts");
    parts_are(s.append("p/seg", 1, b("z")).expect("append").parts, 2, "after a reset");
}

/// Range reads.
pub fn ranges(s: &dyn ObjectStore) {
    s.put("r/o", b("0123456789")).expect("put");
    assert_eq!(s.get_range("r/o", 2..5).expect("range"), b("234"));
    assert_eq!(s.get_range("r/o", 7..100).expect("clipped"), b("789"), "the end is clipped");
    assert_eq!(
        s.get_range("r/o", 10..12),
        Err(StoreError::InvalidRange { start: 10, size: 10 }),
        "a range past the end"
    );
    assert!(matches!(s.get_range("r/missing", 0..1), Err(StoreError::NotFound(_))));
    // Ranges across appended parts.
    s.append("r/parts", 0, b("abc")).expect("append");
    s.append("r/parts", 3, b("def")).expect("append");
    s.append("r/parts", 6, b("ghi")).expect("append");
    assert_eq!(s.get_range("r/parts", 2..7).expect("across parts"), b("cdefg"));
    assert_eq!(s.get_range("r/parts", 3..6).expect("one whole part"), b("def"));
    assert_eq!(s.get("r/parts").expect("get"), b("abcdefghi"));
}

/// Listing by prefix, in key order.
pub fn listing(s: &dyn ObjectStore) {
    for k in ["ls/b", "ls/a", "ls/c/1", "lt/x", "l"] {
        s.put(k, b(k)).expect("put");
    }
    let keys: Vec<String> = s.list("ls/").expect("list").into_iter().map(|m| m.key).collect();
    assert_eq!(keys, ["ls/a", "ls/b", "ls/c/1"], "only the prefix, in key order");
    assert_eq!(s.list("ls/a").expect("list")[0].size, 4);
    assert!(s.list("zz/").expect("list").is_empty());
}

/// Key limits as S3 enforces them.
pub fn keys(s: &dyn ObjectStore) {
    assert!(matches!(s.put("", b("x")), Err(StoreError::InvalidRequest(_))), "empty key");
    // In 100-byte path segments: file-backed servers such as MinIO cannot
    // hold one 1,024-byte file name, and S3 does not care.
    let long: String = (0..KEY_BYTES_MAX).map(|i| if i % 101 == 100 { '/' } else { 'k' }).collect();
    s.put(&long, b("x")).expect("a 1024-byte key");
    assert_eq!(s.get(&long).expect("get the long key"), b("x"));
    assert!(
        matches!(s.put(&format!("{long}k"), b("x")), Err(StoreError::InvalidRequest(_))),
        "1025 bytes"
    );
}

/// Run `f(i)` on `n` threads released together by a barrier; results in
/// thread order.
fn race<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let barrier = Barrier::new(n);
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..n)
            .map(|i| {
                let (f, barrier) = (&f, &barrier);
                sc.spawn(move || {
                    barrier.wait();
                    f(i)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("a racing thread panicked")).collect()
    })
}

/// `writers` threads race `put_if_absent` on one key: exactly one wins, every round.
pub fn concurrent_put_if_absent(
    make: &dyn Fn() -> Arc<dyn ObjectStore>,
    writers: usize,
    rounds: usize,
) {
    for round in 0..rounds {
        let s = make();
        let wins =
            race(writers, |w| match s.put_if_absent("race/k", Bytes::from(vec![w as u8; 8])) {
                Ok(_) => true,
                Err(StoreError::AlreadyExists(_)) => false,
                Err(e) => panic!("unexpected error {e}"),
            });
        let winners: Vec<usize> = (0..writers).filter(|&w| wins[w]).collect();
        assert_eq!(winners.len(), 1, "round {round}: {} writers won", winners.len());
        assert_eq!(
            s.get("race/k").expect("get"),
            Bytes::from(vec![winners[0] as u8; 8]),
            "the winner's body"
        );
    }
}

/// `appenders` threads append at the same offset: exactly one succeeds, the
/// rest get `InvalidWriteOffset` with the winner's size.
pub fn concurrent_appends_at_one_offset(
    make: &dyn Fn() -> Arc<dyn ObjectStore>,
    appenders: usize,
    rounds: usize,
) {
    for round in 0..rounds {
        let s = make();
        s.append("race/seg", 0, b("head")).expect("create");
        let results = race(appenders, |w| {
            s.append("race/seg", 4, Bytes::from(vec![w as u8; 16])).map(|m| m.size)
        });
        let ok = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(ok, 1, "round {round}: {ok} appends succeeded at one offset");
        for r in &results {
            match r {
                Ok(size) => assert_eq!(*size, 20),
                Err(e) => assert_eq!(
                    *e,
                    StoreError::InvalidWriteOffset { actual_size: 20 },
                    "round {round}"
                ),
            }
        }
        let m = s.head("race/seg").expect("head");
        assert_eq!(m.size, 20, "exactly one append landed");
        parts_are(m.parts, 2, "exactly one part was added");
    }
}
