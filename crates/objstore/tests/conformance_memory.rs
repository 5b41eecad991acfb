//! The conformance suite against the memory backend, including the part
//! limit at a small setting and at the real 10,000.

use std::sync::Arc;

use objstore::{MemoryStore, ObjectStore, PARTS_MAX, conformance};

#[test]
fn memory_store_conforms() {
    conformance::run_all(&|| Arc::new(MemoryStore::new()) as Arc<dyn ObjectStore>);
}

#[test]
fn part_limit_small() {
    conformance::part_limit(&MemoryStore::with_parts_max(4), 4);
}

#[test]
fn part_limit_at_the_real_10000() {
    conformance::part_limit(&MemoryStore::new(), PARTS_MAX);
}

#[test]
fn urls_choose_backends_or_say_why_not() {
    let s = objstore::open("memory://").expect("memory store");
    s.put("k", objstore::Bytes::from_static(b"v")).expect("put");
    let e = objstore::open("s3:///prefix").expect_err("no bucket");
    assert!(e.to_string().contains("no bucket"), "{e}");
    let e = objstore::open("s3://b/p?colour=red").expect_err("unknown parameter");
    assert!(e.to_string().contains("unknown s3 URL parameter"), "{e}");
    assert!(objstore::open("sim://s3x").is_ok());
    assert!(objstore::open("ftp://x").is_err());
    assert!(objstore::open("no-scheme").is_err());
}

/// A double of the broken servers (moto, s3rver, s3s-fs, versitygw): it
/// ignores the write offset and overwrites the object. The suite must
/// reject it, or it proves nothing about the backends it passes.
#[derive(Debug, Default)]
struct OverwritingStore(MemoryStore);

impl ObjectStore for OverwritingStore {
    fn put(&self, k: &str, b: objstore::Bytes) -> objstore::Result<objstore::ObjectMeta> {
        self.0.put(k, b)
    }
    fn put_if_absent(&self, k: &str, b: objstore::Bytes) -> objstore::Result<objstore::ObjectMeta> {
        self.0.put_if_absent(k, b)
    }
    fn put_if_match(
        &self,
        k: &str,
        b: objstore::Bytes,
        e: &str,
    ) -> objstore::Result<objstore::ObjectMeta> {
        self.0.put_if_match(k, b, e)
    }
    fn append(
        &self,
        k: &str,
        _offset: u64,
        b: objstore::Bytes,
    ) -> objstore::Result<objstore::ObjectMeta> {
        self.0.put(k, b)
    }
    fn get(&self, k: &str) -> objstore::Result<objstore::Bytes> {
        self.0.get(k)
    }
    fn get_range(&self, k: &str, r: std::ops::Range<u64>) -> objstore::Result<objstore::Bytes> {
        self.0.get_range(k, r)
    }
    fn head(&self, k: &str) -> objstore::Result<objstore::ObjectMeta> {
        self.0.head(k)
    }
    fn list(&self, p: &str) -> objstore::Result<Vec<objstore::ObjectMeta>> {
        self.0.list(p)
    }
    fn delete(&self, k: &str) -> objstore::Result<()> {
        self.0.delete(k)
    }
}

#[test]
fn the_suite_rejects_a_store_that_overwrites_on_append() {
    let bad = OverwritingStore::default();
    let verdict =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| conformance::appends(&bad)));
    assert!(verdict.is_err(), "an overwriting store passed the append checks");
    let racy = std::panic::catch_unwind(|| {
        conformance::concurrent_appends_at_one_offset(
            &|| Arc::new(OverwritingStore::default()) as Arc<dyn ObjectStore>,
            8,
            3,
        )
    });
    assert!(racy.is_err(), "an overwriting store passed the concurrent append check");
}
