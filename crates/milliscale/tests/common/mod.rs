//! Store doubles for the commit tests: a gate that holds a log group's
//! writes until released, and a recorder that knows which CSNs landed.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use milliscale::log::record::{Entry, decode_part};
use objstore::{Bytes, MemoryStore, ObjectMeta, ObjectStore, Result};
use parking_lot::{Condvar, Mutex};

/// The `ObjectStore` methods a wrapper passes to `self.inner` unchanged.
macro_rules! delegate_reads {
    () => {
        fn get(&self, key: &str) -> Result<Bytes> {
            self.inner.get(key)
        }
        fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
            self.inner.get_range(key, range)
        }
        fn head(&self, key: &str) -> Result<ObjectMeta> {
            self.inner.head(key)
        }
        fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
            self.inner.list(prefix)
        }
        fn delete(&self, key: &str) -> Result<()> {
            self.inner.delete(key)
        }
    };
}

/// Wraps a store; every part that lands (the inner call applied it) is
/// decoded and its CSNs recorded, with the log group that wrote it.
#[derive(Debug)]
pub struct Recorder {
    inner: Arc<dyn ObjectStore>,
    landed: Mutex<BTreeSet<u64>>,
}

impl Recorder {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<Recorder> {
        Arc::new(Recorder { inner, landed: Mutex::new(BTreeSet::new()) })
    }

    pub fn memory() -> Arc<Recorder> {
        Recorder::new(Arc::new(MemoryStore::new()))
    }

    /// CSNs that landed so far.
    pub fn landed(&self) -> BTreeSet<u64> {
        self.landed.lock().clone()
    }

    pub fn has(&self, csn: u64) -> bool {
        self.landed.lock().contains(&csn)
    }

    fn note(&self, key: &str, body: &Bytes) {
        if !key.starts_with("log/") {
            return;
        }
        let (part, _) = decode_part(body).expect("the engine writes whole, valid parts");
        let mut l = self.landed.lock();
        for e in &part.entries {
            let csn = match e {
                Entry::Commit { csn, .. } | Entry::Abort { csn } => *csn,
            };
            assert!(l.insert(csn), "CSN {csn} landed twice");
        }
    }
}

impl ObjectStore for Recorder {
    fn put(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        let r = self.inner.put(key, body.clone())?;
        self.note(key, &body);
        Ok(r)
    }
    fn put_if_absent(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        let r = self.inner.put_if_absent(key, body.clone())?;
        self.note(key, &body);
        Ok(r)
    }
    fn put_if_match(&self, key: &str, body: Bytes, etag: &str) -> Result<ObjectMeta> {
        self.inner.put_if_match(key, body, etag)
    }
    fn append(&self, key: &str, offset: u64, body: Bytes) -> Result<ObjectMeta> {
        let r = self.inner.append(key, offset, body.clone())?;
        self.note(key, &body);
        Ok(r)
    }
    delegate_reads!();
}

/// Wraps a store; log writes of a closed group's objects block until the
/// group is opened again, or sleep a set delay.
#[derive(Debug)]
pub struct Gate {
    inner: Arc<dyn ObjectStore>,
    closed: Mutex<BTreeSet<u32>>,
    delay: Mutex<Vec<Duration>>,
    cv: Condvar,
}

impl Gate {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<Gate> {
        Arc::new(Gate {
            inner,
            closed: Mutex::new(BTreeSet::new()),
            delay: Mutex::new(Vec::new()),
            cv: Condvar::new(),
        })
    }

    pub fn close(&self, group: u32) {
        self.closed.lock().insert(group);
    }

    pub fn open(&self, group: u32) {
        self.closed.lock().remove(&group);
        self.cv.notify_all();
    }

    /// A guard that opens every group when dropped. Declare it after the
    /// database: locals drop in reverse order, so a failed assertion opens
    /// the gate before the database's close waits on it, and the test
    /// fails instead of hanging.
    pub fn open_on_drop(self: &Arc<Gate>) -> OpenOnDrop {
        OpenOnDrop(Arc::clone(self))
    }

    /// Every write of `group` takes `d` (on top of any gate).
    pub fn set_delay(&self, group: u32, d: Duration) {
        let mut v = self.delay.lock();
        if v.len() <= group as usize {
            v.resize(group as usize + 1, Duration::ZERO);
        }
        v[group as usize] = d;
    }

    fn pass(&self, key: &str) {
        let Some(g) = key.strip_prefix("log/g").and_then(|r| r.get(..4)?.parse::<u32>().ok())
        else {
            return;
        };
        let d = self.delay.lock().get(g as usize).copied().unwrap_or_default();
        if !d.is_zero() {
            std::thread::sleep(d);
        }
        let mut c = self.closed.lock();
        while c.contains(&g) {
            self.cv.wait(&mut c);
        }
    }
}

/// See [`Gate::open_on_drop`].
pub struct OpenOnDrop(Arc<Gate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.closed.lock().clear();
        self.0.cv.notify_all();
    }
}

impl ObjectStore for Gate {
    fn put(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        self.pass(key);
        self.inner.put(key, body)
    }
    fn put_if_absent(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        self.pass(key);
        self.inner.put_if_absent(key, body)
    }
    fn put_if_match(&self, key: &str, body: Bytes, etag: &str) -> Result<ObjectMeta> {
        self.inner.put_if_match(key, body, etag)
    }
    fn append(&self, key: &str, offset: u64, body: Bytes) -> Result<ObjectMeta> {
        self.pass(key);
        self.inner.append(key, offset, body)
    }
    delegate_reads!();
}

/// Every entry in a store's log, as (object key, entries of each part).
pub fn read_log(store: &dyn ObjectStore) -> Vec<(String, Vec<Vec<Entry>>)> {
    let mut out = Vec::new();
    for o in store.list("log/").expect("list") {
        let bytes = store.get(&o.key).expect("get");
        let (parts, tail) = milliscale::log::record::decode_segment(&bytes);
        assert!(tail.is_none(), "{} has a bad tail: {tail:?}", o.key);
        out.push((o.key, parts.into_iter().map(|p| p.entries).collect()));
    }
    out
}

/// A new bucket on `e`, through the `s3` backend.
pub fn emulator_bucket(e: &emulator::Emulator, bucket: &str) -> Arc<dyn ObjectStore> {
    Arc::new(e.bucket(bucket).expect("an emulator bucket"))
}

/// A fresh prefix of `bucket` on the MinIO that scripts/test.sh starts
/// (`MILLISCALE_TEST_S3_ENDPOINT`); `None` (skip) if there is none, which
/// fails instead when `MILLISCALE_REQUIRE_S3` is set.
pub fn minio_bucket(bucket: &str, prefix: &str) -> Option<Arc<dyn ObjectStore>> {
    let ep = match std::env::var("MILLISCALE_TEST_S3_ENDPOINT") {
        Ok(e) if !e.is_empty() => e,
        _ => {
            assert!(std::env::var("MILLISCALE_REQUIRE_S3").is_err(), "MinIO is required");
            eprintln!("skipped: no S3 endpoint (scripts/test.sh starts MinIO)");
            return None;
        }
    };
    let url = format!("s3://{bucket}/{prefix}-{}?endpoint={ep}", std::process::id());
    let s = objstore::S3Store::from_url(&url).expect("s3");
    s.create_bucket().expect("bucket");
    Some(Arc::new(s))
}
