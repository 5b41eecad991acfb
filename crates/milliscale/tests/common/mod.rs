//! Store doubles for the commit tests: a gate that holds a log group's
//! writes until released, and a recorder that knows which CSNs landed.

#![allow(dead_code)]

pub mod switch;
pub mod window;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use milliscale::internals::record::{Entry, decode_part};
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

/// The `ObjectStore` write methods of a wrapper that passes each write to
/// `self.inner` and, once it is applied, shows it to `self.note`.
macro_rules! noting_log_writes {
    () => {
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
        // One write carries a part of each group of its stream that had
        // entries.
        let mut at = 0;
        let mut l = self.landed.lock();
        while at < body.len() {
            let (part, n) =
                decode_part(&body.slice(at..)).expect("the engine writes whole, valid parts");
            for e in &part.entries {
                let csn = match e {
                    Entry::Commit { csn, .. } | Entry::Abort { csn } => *csn,
                };
                assert!(l.insert(csn), "CSN {csn} landed twice");
            }
            at += n;
        }
    }
}

impl ObjectStore for Recorder {
    noting_log_writes!();
    delegate_reads!();
}

/// Wraps a store; log writes of a closed chain's objects block until it is
/// opened again, or sleep a set delay. Chains are named after the first
/// group of their stream: with one stream per group
/// (`LOG_STREAMS_PER_GROUP`), `close(g)` holds group `g`; with one stream,
/// `close(0)` holds every group.
#[derive(Debug)]
pub struct Gate {
    inner: Arc<dyn ObjectStore>,
    /// (group, None): every lane of the group; (group, Some(lane)): one.
    closed: Mutex<BTreeSet<(u32, Option<u32>)>>,
    delay: Mutex<BTreeMap<(u32, Option<u32>), Duration>>,
    cv: Condvar,
}

/// (group, lane) of a log object's key.
fn chain_of(key: &str) -> Option<(u32, u32)> {
    let rest = key.strip_prefix("log/g")?;
    let g = rest.get(..4)?.parse::<u32>().ok()?;
    let lane = match rest.get(5..)?.strip_prefix('l') {
        Some(r) => r.split('/').next()?.parse().ok()?,
        None => 0,
    };
    Some((g, lane))
}

impl Gate {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<Gate> {
        Arc::new(Gate {
            inner,
            closed: Mutex::new(BTreeSet::new()),
            delay: Mutex::new(BTreeMap::new()),
            cv: Condvar::new(),
        })
    }

    /// Hold back every lane of `group`.
    pub fn close(&self, group: u32) {
        self.closed.lock().insert((group, None));
    }

    /// Hold back one lane of `group`.
    pub fn close_lane(&self, group: u32, lane: u32) {
        self.closed.lock().insert((group, Some(lane)));
    }

    /// Let `group` through (the lanes closed one by one stay closed).
    pub fn open(&self, group: u32) {
        self.closed.lock().remove(&(group, None));
        self.cv.notify_all();
    }

    /// Let one lane of `group` through.
    pub fn open_lane(&self, group: u32, lane: u32) {
        self.closed.lock().remove(&(group, Some(lane)));
        self.cv.notify_all();
    }

    /// Open everything.
    pub fn open_all(&self) {
        self.closed.lock().clear();
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
        self.delay.lock().insert((group, None), d);
    }

    /// Every write of one lane of `group` takes `d` (instead of the
    /// group's delay).
    pub fn set_lane_delay(&self, group: u32, lane: u32, d: Duration) {
        self.delay.lock().insert((group, Some(lane)), d);
    }

    fn pass(&self, key: &str) {
        let Some((g, lane)) = chain_of(key) else {
            return;
        };
        let d = {
            let delays = self.delay.lock();
            delays.get(&(g, Some(lane))).or_else(|| delays.get(&(g, None))).copied()
        };
        if let Some(d) = d.filter(|d| !d.is_zero()) {
            std::thread::sleep(d);
        }
        let mut c = self.closed.lock();
        while c.contains(&(g, None)) || c.contains(&(g, Some(lane))) {
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
    read_log_parts(store)
        .into_iter()
        .map(|(k, parts)| (k, parts.into_iter().map(|p| p.entries).collect()))
        .collect()
}

/// Every log object and its parts (with the group of each).
pub fn read_log_parts(
    store: &dyn ObjectStore,
) -> Vec<(String, Vec<milliscale::internals::record::Part>)> {
    let mut out = Vec::new();
    for o in store.list("log/").expect("list") {
        let bytes = store.get(&o.key).expect("get");
        let (parts, tail) = milliscale::internals::record::decode_segment(&bytes);
        assert!(tail.is_none(), "{} has a bad tail: {tail:?}", o.key);
        out.push((o.key, parts));
    }
    out
}

/// Wraps a store; counts the log writes (appends or part objects) per key,
/// and keeps each write's part count.
#[derive(Debug)]
pub struct WriteCounter {
    inner: Arc<dyn ObjectStore>,
    /// Key -> parts in each write, in order.
    pub writes: Mutex<BTreeMap<String, Vec<usize>>>,
}

impl WriteCounter {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<WriteCounter> {
        Arc::new(WriteCounter { inner, writes: Mutex::new(BTreeMap::new()) })
    }

    fn note(&self, key: &str, body: &Bytes) {
        if key.starts_with("log/") {
            let (parts, _) = milliscale::internals::record::decode_segment(body);
            self.writes.lock().entry(key.to_owned()).or_default().push(parts.len());
        }
    }
}

impl ObjectStore for WriteCounter {
    noting_log_writes!();
    delegate_reads!();
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

/// A writer on `store` whose log a follower (a replica, a change feed)
/// reads in tests: 2 workers, 3 lanes, segments of 4 parts, no automatic
/// checkpoint.
pub fn followed_writer(store: &Arc<dyn ObjectStore>) -> milliscale::Options {
    milliscale::Options::new()
        .add_store_handle(Arc::clone(store))
        .workers(2)
        .log_lanes(3)
        .segment_parts_max(4)
        .checkpoint_log_bytes(0)
        .checkpoint_chunk_bytes(4096)
}

/// A follower's polling in tests: every millisecond while the database is
/// active, at most 50 ms apart while it is idle.
pub fn fast_polls() -> milliscale::ReplicaOptions {
    milliscale::ReplicaOptions {
        poll_min: Duration::from_millis(1),
        poll_max: Duration::from_millis(50),
        manifest_every: Duration::from_millis(50),
        ..milliscale::ReplicaOptions::default()
    }
}

/// The text of a caught panic's payload.
#[allow(dead_code)]
pub fn panic_text(e: &Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}
