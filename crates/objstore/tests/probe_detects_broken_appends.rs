//! The capability probe trusts only what a store does: correct stores pass,
//! a store that overwrites (moto, s3rver, s3s-fs, versitygw), one that
//! refuses write offsets (MinIO), and one that ignores wrong offsets are
//! put in put-per-flush mode with a reason.

use std::ops::Range;

use objstore::probe::{AppendSupport, probe_appends};
use objstore::{Bytes, MemoryStore, ObjectMeta, ObjectStore, Result, StoreError};

/// A memory store whose `append` misbehaves as `kind` says.
#[derive(Debug)]
struct Double {
    inner: MemoryStore,
    kind: Kind,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Overwrites,
    RefusesOffsets,
    IgnoresWrongOffsets,
    Flaky,
}

impl ObjectStore for Double {
    fn put(&self, k: &str, b: Bytes) -> Result<ObjectMeta> {
        self.inner.put(k, b)
    }
    fn put_if_absent(&self, k: &str, b: Bytes) -> Result<ObjectMeta> {
        self.inner.put_if_absent(k, b)
    }
    fn put_if_match(&self, k: &str, b: Bytes, e: &str) -> Result<ObjectMeta> {
        self.inner.put_if_match(k, b, e)
    }
    fn append(&self, k: &str, offset: u64, b: Bytes) -> Result<ObjectMeta> {
        match self.kind {
            Kind::Overwrites => self.inner.put(k, b),
            Kind::RefusesOffsets => {
                Err(StoreError::InvalidRequest("400 x-amz-write-offset-bytes not supported".into()))
            }
            Kind::IgnoresWrongOffsets => {
                let _ = offset; // appends at the end, whatever the caller said
                let size = self.inner.head(k)?.size;
                self.inner.append(k, size, b)
            }
            Kind::Flaky => Err(StoreError::Transient("connection reset".into())),
        }
    }
    fn get(&self, k: &str) -> Result<Bytes> {
        self.inner.get(k)
    }
    fn get_range(&self, k: &str, r: Range<u64>) -> Result<Bytes> {
        self.inner.get_range(k, r)
    }
    fn head(&self, k: &str) -> Result<ObjectMeta> {
        self.inner.head(k)
    }
    fn list(&self, p: &str) -> Result<Vec<ObjectMeta>> {
        self.inner.list(p)
    }
    fn delete(&self, k: &str) -> Result<()> {
        self.inner.delete(k)
    }
}

fn double(kind: Kind) -> Double {
    Double { inner: MemoryStore::new(), kind }
}

#[test]
fn correct_stores_append() {
    let m = MemoryStore::new();
    assert_eq!(probe_appends(&m, "probe/k").expect("probe"), AppendSupport::Appends);
    assert!(m.list("probe/").expect("list").is_empty(), "the probe cleans up");
    let dir = std::env::temp_dir().join(format!("milliscale-probe-{}", std::process::id()));
    let fs = objstore::FsStore::open(&dir).expect("open");
    assert_eq!(probe_appends(&fs, "probe/k").expect("probe"), AppendSupport::Appends);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn broken_stores_are_put_per_flush_with_a_reason() {
    for (kind, words) in [
        (Kind::Overwrites, "overwrote the object"),
        (Kind::RefusesOffsets, "refused an append"),
        (Kind::IgnoresWrongOffsets, "accepted an append at a wrong offset"),
    ] {
        match probe_appends(&double(kind), "probe/k").expect("probe decides") {
            AppendSupport::PutPerFlush { reason } => {
                assert!(reason.contains(words), "{kind:?}: {reason}")
            }
            AppendSupport::Appends => panic!("{kind:?} passed the probe"),
        }
    }
}

#[test]
fn transient_errors_decide_nothing() {
    assert!(matches!(
        probe_appends(&double(Kind::Flaky), "probe/k"),
        Err(StoreError::Transient(_))
    ));
}
