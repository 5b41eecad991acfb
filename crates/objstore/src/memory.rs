//! An in-memory store with exact S3 Express semantics (tests, the emulator's
//! memory mode, and the inner store of `sim://`).
//!
//! One mutex guards the whole map, so every operation, conditional writes and
//! appends included, is atomic.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::{ObjectMeta, ObjectStore, PARTS_MAX, Result, StoreError, check_key};

#[derive(Debug)]
struct Object {
    data: Vec<u8>,
    parts: u32,
    etag: String,
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

    fn etag(&self, data: &[u8]) -> String {
        let g = self.generation.fetch_add(1, Ordering::Relaxed);
        format!("\"{g:x}-{:x}\"", data.len())
    }

    fn meta(key: &str, o: &Object) -> ObjectMeta {
        ObjectMeta {
            key: key.to_owned(),
            size: o.data.len() as u64,
            etag: o.etag.clone(),
            parts: o.parts,
        }
    }

    fn store(&self, map: &mut BTreeMap<String, Object>, key: &str, body: Bytes) -> ObjectMeta {
        let o = Object { etag: self.etag(&body), data: body.to_vec(), parts: 1 };
        let m = MemoryStore::meta(key, &o);
        map.insert(key.to_owned(), o);
        m
    }
}

impl ObjectStore for MemoryStore {
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
        if offset != o.data.len() as u64 {
            return Err(StoreError::InvalidWriteOffset { actual_size: o.data.len() as u64 });
        }
        if o.parts >= self.parts_max {
            return Err(StoreError::TooManyParts { parts: o.parts });
        }
        o.data.extend_from_slice(&body);
        o.parts += 1;
        o.etag = self.etag(&o.data);
        Ok(MemoryStore::meta(key, o))
    }

    fn get(&self, key: &str) -> Result<Bytes> {
        check_key(key)?;
        let map = self.objects.lock();
        let o = map.get(key).ok_or_else(|| StoreError::NotFound(key.to_owned()))?;
        Ok(Bytes::copy_from_slice(&o.data))
    }

    fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        check_key(key)?;
        if range.start > range.end {
            return Err(StoreError::InvalidRequest(format!("inverted range {range:?}")));
        }
        let map = self.objects.lock();
        let o = map.get(key).ok_or_else(|| StoreError::NotFound(key.to_owned()))?;
        let size = o.data.len() as u64;
        if range.start >= size {
            return Err(StoreError::InvalidRange { start: range.start, size });
        }
        let end = range.end.min(size);
        Ok(Bytes::copy_from_slice(&o.data[range.start as usize..end as usize]))
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
