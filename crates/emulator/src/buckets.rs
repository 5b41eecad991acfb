//! The emulator's buckets: a registry of per-bucket stores, and an
//! [`ObjectStore`] over all of them keyed `bucket/key`, so that one `sim`
//! wrapper (one latency model, one fault stream, one set of accounts) sits
//! in front of every bucket.
//!
//! Each bucket is its own `memory` store, or its own `fs` store in
//! `DIR/<bucket>` (durable: every write is fsynced). A directory emulator
//! finds its buckets again when it restarts.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use objstore::{FsStore, MemoryStore, ObjectMeta, ObjectStore, Result, StoreError};
use parking_lot::RwLock;

/// Where bucket contents live.
#[derive(Debug, Clone)]
pub enum Backing {
    /// In memory; gone when the process ends.
    Memory,
    /// One directory per bucket under this root.
    Dir(PathBuf),
}

#[derive(Debug)]
struct Bucket {
    store: Arc<dyn ObjectStore>,
    created: SystemTime,
}

/// See the module docs.
#[derive(Debug)]
pub struct Buckets {
    backing: Backing,
    parts_max: u32,
    map: RwLock<BTreeMap<String, Bucket>>,
}

/// What went wrong with a bucket operation.
#[derive(Debug, PartialEq, Eq)]
pub enum BucketError {
    /// No such bucket.
    NoSuchBucket,
    /// CreateBucket on a bucket that exists.
    AlreadyExists,
    /// DeleteBucket on a bucket that holds objects.
    NotEmpty,
    /// The backing store failed.
    Store(String),
}

impl Buckets {
    /// Open the registry; a directory backing loads the buckets already there.
    pub fn open(backing: Backing, parts_max: u32) -> Result<Buckets> {
        let b = Buckets { backing, parts_max, map: RwLock::new(BTreeMap::new()) };
        if let Backing::Dir(root) = &b.backing {
            std::fs::create_dir_all(root)
                .map_err(|e| StoreError::Fatal(format!("cannot create {}: {e}", root.display())))?;
            let entries = std::fs::read_dir(root)
                .map_err(|e| StoreError::Fatal(format!("cannot read {}: {e}", root.display())))?;
            let mut map = b.map.write();
            for entry in entries.flatten() {
                let path = entry.path();
                let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned)
                else {
                    continue;
                };
                if !path.is_dir() || !valid_bucket_name(&name) {
                    continue;
                }
                let created = entry
                    .metadata()
                    .and_then(|m| m.created().or_else(|_| m.modified()))
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                let store = b.new_store(&name)?;
                map.insert(name, Bucket { store, created });
            }
        }
        Ok(b)
    }

    fn new_store(&self, name: &str) -> Result<Arc<dyn ObjectStore>> {
        Ok(match &self.backing {
            Backing::Memory => Arc::new(MemoryStore::with_parts_max(self.parts_max)),
            Backing::Dir(root) => {
                Arc::new(FsStore::with_parts_max(root.join(name), self.parts_max)?)
            }
        })
    }

    /// Create a bucket.
    pub fn create(&self, name: &str) -> std::result::Result<(), BucketError> {
        let mut map = self.map.write();
        if map.contains_key(name) {
            return Err(BucketError::AlreadyExists);
        }
        let store = self.new_store(name).map_err(|e| BucketError::Store(e.to_string()))?;
        map.insert(name.to_owned(), Bucket { store, created: SystemTime::now() });
        Ok(())
    }

    /// Delete an empty bucket.
    pub fn delete(&self, name: &str) -> std::result::Result<(), BucketError> {
        let mut map = self.map.write();
        let b = map.get(name).ok_or(BucketError::NoSuchBucket)?;
        if !b.store.list("").map_err(|e| BucketError::Store(e.to_string()))?.is_empty() {
            return Err(BucketError::NotEmpty);
        }
        if let Backing::Dir(root) = &self.backing {
            std::fs::remove_dir_all(root.join(name))
                .map_err(|e| BucketError::Store(format!("removing bucket {name}: {e}")))?;
        }
        map.remove(name);
        Ok(())
    }

    /// Does the bucket exist?
    pub fn exists(&self, name: &str) -> bool {
        self.map.read().contains_key(name)
    }

    /// All buckets with their creation times, by name.
    pub fn list_buckets(&self) -> Vec<(String, SystemTime)> {
        self.map.read().iter().map(|(n, b)| (n.clone(), b.created)).collect()
    }

    fn route<'k>(&self, key: &'k str) -> Result<(Arc<dyn ObjectStore>, &'k str)> {
        let (bucket, rest) = key.split_once('/').ok_or_else(|| {
            StoreError::InvalidRequest(format!("emulator keys are bucket/key, got {key:?}"))
        })?;
        match self.map.read().get(bucket) {
            Some(b) => Ok((b.store.clone(), rest)),
            None => Err(StoreError::NotFound(format!("bucket {bucket}"))),
        }
    }
}

/// S3's rules for general purpose bucket names, plus directory bucket names
/// (`name--zone--x-s3`), which fit the same character set.
pub fn valid_bucket_name(name: &str) -> bool {
    let b = name.as_bytes();
    (3..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'.')
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && !name.contains("..")
}

/// Re-key a bucket store's answer into `bucket/key` form.
fn rekey(bucket_key: &str, key: &str, mut m: ObjectMeta) -> ObjectMeta {
    m.key = format!("{}{}", &bucket_key[..bucket_key.len() - key.len()], m.key);
    m
}

impl ObjectStore for Buckets {
    fn put(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        let (s, k) = self.route(key)?;
        s.put(k, body).map(|m| rekey(key, k, m))
    }

    fn put_if_absent(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        let (s, k) = self.route(key)?;
        s.put_if_absent(k, body).map(|m| rekey(key, k, m))
    }

    fn put_if_match(&self, key: &str, body: Bytes, etag: &str) -> Result<ObjectMeta> {
        let (s, k) = self.route(key)?;
        s.put_if_match(k, body, etag).map(|m| rekey(key, k, m))
    }

    fn append(&self, key: &str, offset: u64, body: Bytes) -> Result<ObjectMeta> {
        let (s, k) = self.route(key)?;
        s.append(k, offset, body).map(|m| rekey(key, k, m))
    }

    fn get(&self, key: &str) -> Result<Bytes> {
        let (s, k) = self.route(key)?;
        s.get(k)
    }

    fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let (s, k) = self.route(key)?;
        s.get_range(k, range)
    }

    fn head(&self, key: &str) -> Result<ObjectMeta> {
        let (s, k) = self.route(key)?;
        s.head(k).map(|m| rekey(key, k, m))
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let (s, p) = self.route(prefix)?;
        Ok(s.list(p)?.into_iter().map(|m| rekey(prefix, p, m)).collect())
    }

    fn delete(&self, key: &str) -> Result<()> {
        let (s, k) = self.route(key)?;
        s.delete(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_route_to_their_bucket() {
        let b = Buckets::open(Backing::Memory, 10_000).expect("open");
        b.create("one").expect("create");
        b.create("two").expect("create");
        assert_eq!(b.create("one"), Err(BucketError::AlreadyExists));
        b.put("one/a/b", Bytes::from_static(b"1")).expect("put");
        b.put("two/a/b", Bytes::from_static(b"22")).expect("put");
        assert_eq!(b.head("one/a/b").expect("head").size, 1);
        assert_eq!(b.head("two/a/b").expect("head").key, "two/a/b");
        let l = b.list("two/a").expect("list");
        assert_eq!(l.iter().map(|m| m.key.as_str()).collect::<Vec<_>>(), ["two/a/b"]);
        assert!(matches!(b.get("three/x"), Err(StoreError::NotFound(_))));
        assert_eq!(b.delete("one"), Err(BucketError::NotEmpty));
        ObjectStore::delete(&b, "one/a/b").expect("delete object");
        b.delete("one").expect("delete bucket");
        assert!(!b.exists("one"));
    }

    #[test]
    fn bucket_names_follow_s3_rules() {
        for ok in ["abc", "my-bucket.v2", "logs--use1-az4--x-s3"] {
            assert!(valid_bucket_name(ok), "{ok}");
        }
        for bad in ["ab", "Upper", "-lead", "trail-", "a..b", "_milliscale", &"a".repeat(64)] {
            assert!(!valid_bucket_name(bad), "{bad}");
        }
    }
}
