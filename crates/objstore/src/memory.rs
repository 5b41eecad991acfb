//! An in-memory store with exact S3 Express semantics (tests, the emulator's
//! memory mode, and the inner store of `sim://`).
//!
//! One mutex guards the whole map, so every operation, conditional writes and
//! appends included, is atomic. An object is kept as its list of parts, so
//! an append stores the caller's buffer without copying it and holds the
//! lock for a push; reads concatenate.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::{ObjectMeta, ObjectStore, PARTS_MAX, Result, StoreError, check_key};

#[derive(Debug)]
struct Object {
    parts: Vec<Bytes>,
    size: u64,
    etag: String,
    modified: SystemTime,
}

impl Object {
    /// Bytes `start..end` (within the object), copying only if they span parts.
    fn slice(&self, start: u64, end: u64) -> Bytes {
        if let [only] = &self.parts[..] {
            return only.slice(start as usize..end as usize);
        }
        let mut out = Vec::with_capacity((end - start) as usize);
        let mut pos = 0u64;
        for p in &self.parts {
            let (ps, pe) = (pos, pos + p.len() as u64);
            pos = pe;
            if pe <= start || ps >= end {
                continue;
            }
            let (a, b) = (start.max(ps) - ps, end.min(pe) - ps);
            out.extend_from_slice(&p[a as usize..b as usize]);
        }
        Bytes::from(out)
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct MemoryStore {
    objects: Mutex<BTreeMap<String, Object>>,
    parts_max: u32,
    /// Source of ETags: every write gets a fresh one.
    generation: AtomicU64,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// An empty store with the S3 Express part limit.
    pub fn new() -> MemoryStore {
        MemoryStore::with_parts_max(PARTS_MAX)
    }

    /// An empty store whose objects hold at most `parts_max` parts (tests use
    /// a small limit so segment rollover happens in a few appends).
    pub fn with_parts_max(parts_max: u32) -> MemoryStore {
        assert!(parts_max >= 1, "an object has at least one part");
        MemoryStore {
            objects: Mutex::new(BTreeMap::new()),
            parts_max,
            generation: AtomicU64::new(1),
        }
    }

    fn etag(&self, size: u64) -> String {
        let g = self.generation.fetch_add(1, Ordering::Relaxed);
        format!("\"{g:x}-{size:x}\"")
    }

    fn meta(key: &str, o: &Object) -> ObjectMeta {
        ObjectMeta {
            key: key.to_owned(),
            size: o.size,
            etag: o.etag.clone(),
            parts: Some(o.parts.len() as u32),
            modified: Some(o.modified),
        }
    }

    fn store(&self, map: &mut BTreeMap<String, Object>, key: &str, body: Bytes) -> ObjectMeta {
        let size = body.len() as u64;
        let o = Object {
            etag: self.etag(size),
            parts: vec![body],
            size,
            modified: milliscale_seam::system_now(),
        };
        let m = MemoryStore::meta(key, &o);
        map.insert(key.to_owned(), o);
        m
    }
}

impl ObjectStore for MemoryStore {
    fn prefers_ranged_reads(&self) -> bool {
        false
    }

    fn put(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        check_key(key)?;
        let mut map = self.objects.lock();
        Ok(self.store(&mut map, key, body))
    }

    fn put_if_absent(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        check_key(key)?;
        let mut map = self.objects.lock();
        if map.contains_key(key) {
            return Err(StoreError::AlreadyExists(key.to_owned()));
        }
        Ok(self.store(&mut map, key, body))
    }

    fn put_if_match(&self, key: &str, body: Bytes, etag: &str) -> Result<ObjectMeta> {
        check_key(key)?;
        let mut map = self.objects.lock();
        match map.get(key) {
            None => Err(StoreError::NotFound(key.to_owned())),
            Some(o) if o.etag != etag => Err(StoreError::PreconditionFailed(format!(
                "{key}: ETag is {}, not {etag}",
                o.etag
            ))),
            Some(_) => Ok(self.store(&mut map, key, body)),
        }
    }

    fn append(&self, key: &str, offset: u64, body: Bytes) -> Result<ObjectMeta> {
        check_key(key)?;
        if body.is_empty() {
            return Err(StoreError::InvalidRequest("an append needs a non-empty body".into()));
        }
        let mut map = self.objects.lock();
        let Some(o) = map.get_mut(key) else {
            return if offset == 0 {
                Ok(self.store(&mut map, key, body))
            } else {
                Err(StoreError::NotFound(key.to_owned()))
            };
        };
        if offset != o.size {
            return Err(StoreError::InvalidWriteOffset { actual_size: o.size });
        }
        if o.parts.len() as u32 >= self.parts_max {
            return Err(StoreError::TooManyParts { parts: o.parts.len() as u32 });
        }
        o.size += body.len() as u64;
        o.parts.push(body);
        o.etag = self.etag(o.size);
        o.modified = milliscale_seam::system_now();
        Ok(MemoryStore::meta(key, o))
    }

    fn get(&self, key: &str) -> Result<Bytes> {
        check_key(key)?;
        let map = self.objects.lock();
        let o = map.get(key).ok_or_else(|| StoreError::NotFound(key.to_owned()))?;
        Ok(o.slice(0, o.size))
    }

    fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        check_key(key)?;
        if range.start > range.end {
            return Err(StoreError::InvalidRequest(format!("inverted range {range:?}")));
        }
        let map = self.objects.lock();
        let o = map.get(key).ok_or_else(|| StoreError::NotFound(key.to_owned()))?;
        if range.start >= o.size {
            return Err(StoreError::InvalidRange { start: range.start, size: o.size });
        }
        Ok(o.slice(range.start, range.end.min(o.size)))
    }

    fn head(&self, key: &str) -> Result<ObjectMeta> {
        check_key(key)?;
        let map = self.objects.lock();
        map.get(key)
            .map(|o| MemoryStore::meta(key, o))
            .ok_or_else(|| StoreError::NotFound(key.to_owned()))
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let map = self.objects.lock();
        Ok(map
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, o)| MemoryStore::meta(k, o))
            .collect())
    }

    fn delete(&self, key: &str) -> Result<()> {
        check_key(key)?;
        self.objects.lock().remove(key);
        Ok(())
    }
}
