//! The conformance suite against the directory backend, and durability of
//! its contents across reopening.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use objstore::{Bytes, FsStore, ObjectStore, conformance};

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("milliscale-fs-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn fs_store_conforms() {
    let dirs = parking_lot::Mutex::new(Vec::new());
    conformance::run_all(&|| {
        let d = TempDir::new();
        let s = FsStore::open(&d.0).expect("open");
        dirs.lock().push(d);
        Arc::new(s) as Arc<dyn ObjectStore>
    });
}

#[test]
fn fs_part_limit_small_and_real() {
    let d = TempDir::new();
    conformance::part_limit(&FsStore::with_parts_max(d.0.join("a"), 4).expect("open"), 4);
    conformance::part_limit(&FsStore::open(d.0.join("b")).expect("open"), objstore::PARTS_MAX);
}

#[test]
fn fs_contents_survive_reopening() {
    let d = TempDir::new();
    let etag = {
        let s = FsStore::open(&d.0).expect("open");
        s.append("log/g0/s1", 0, Bytes::from_static(b"abc")).expect("append");
        s.append("log/g0/s1", 3, Bytes::from_static(b"def")).expect("append");
        s.put("../escape", Bytes::from_static(b"x")).expect("odd keys stay inside").etag
    };
    let s = objstore::open(&format!("file://{}", d.0.display())).expect("reopen by URL");
    let m = s.head("log/g0/s1").expect("head");
    assert_eq!((m.size, m.parts), (6, Some(2)));
    assert_eq!(s.get("log/g0/s1").expect("get"), Bytes::from_static(b"abcdef"));
    assert_eq!(s.head("../escape").expect("head").etag, etag);
    assert!(!d.0.parent().expect("parent").join("escape").exists());
    assert!(objstore::open("file://relative/path").is_err());
}
