//! The emulator's buckets: a registry of per-bucket stores.
//!
//! Each bucket has two stores of the same backing: `data` holds the
//! objects' bytes (exact append semantics, parts, conditional writes), and
//! `info` holds what S3 keeps beside the bytes (the ETag, content type,
//! user metadata; see [`crate::objects`]). In memory both are `memory`
//! stores; with a directory they are `fs` stores (every write fsynced):
//! `DIR/<bucket>` for the bytes, `DIR/_info/<bucket>` for the info, and
//! `DIR/_uploads` for multipart uploads in progress. A directory emulator
//! finds all of it again when it restarts (names starting with `_` are not
//! valid bucket names, so they never clash with a bucket).
//!
//! [`Buckets`] is also an [`ObjectStore`] keyed `bucket/key` (`keyed`): the `sim`
//! wrapper (one latency model, one fault stream, one set of accounts) is
//! built over it, and its calls go through the same object operations as
//! the S3 API's.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use objstore::{FsStore, MemoryStore, ObjectStore, Result, StoreError};
use parking_lot::{Mutex, MutexGuard, RwLock};

/// Where bucket contents live.
#[derive(Debug, Clone)]
pub enum Backing {
    /// In memory; gone when the process ends.
    Memory,
    /// One directory per bucket under this root.
    Dir(PathBuf),
}

/// One bucket's stores.
#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    /// The objects' bytes.
    pub(crate) data: Arc<dyn ObjectStore>,
    /// What S3 keeps beside the bytes, one small JSON object per key.
    pub(crate) info: Arc<dyn ObjectStore>,
    /// When the bucket was created.
    pub(crate) created: SystemTime,
    /// A directory bucket (`name--zone-id--x-s3`): S3 Express rules.
    pub(crate) directory: bool,
}

/// Lock stripes: writes (and consistent reads) of one key take its stripe,
/// so the bytes and the info of an object change together.
const STRIPES: usize = 256;

/// See the module docs.
#[derive(Debug)]
pub struct Buckets {
    backing: Backing,
    parts_max: u32,
    map: RwLock<BTreeMap<String, Bucket>>,
    /// Multipart uploads in progress (parts and their records).
    pub(crate) uploads: Arc<dyn ObjectStore>,
    stripes: Vec<Mutex<()>>,
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

/// Is `name` a directory bucket's (`base--zone-id--x-s3`)?
pub fn is_directory_bucket(name: &str) -> bool {
    name.strip_suffix("--x-s3")
        .and_then(|rest| rest.rsplit_once("--"))
        .is_some_and(|(base, zone)| !base.is_empty() && !zone.is_empty())
}

impl Buckets {
    /// Open the registry; a directory backing loads the buckets already there.
    pub fn open(backing: Backing, parts_max: u32) -> Result<Buckets> {
        let uploads: Arc<dyn ObjectStore> = match &backing {
            Backing::Memory => Arc::new(MemoryStore::new()),
            Backing::Dir(root) => {
                std::fs::create_dir_all(root).map_err(|e| {
                    StoreError::Fatal(format!("cannot create {}: {e}", root.display()))
                })?;
                Arc::new(FsStore::open(root.join("_uploads"))?)
            }
        };
        let b = Buckets {
            backing,
            parts_max,
            map: RwLock::new(BTreeMap::new()),
            uploads,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        };
        if let Backing::Dir(root) = &b.backing {
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
                let bucket = b.new_bucket(&name, created)?;
                map.insert(name, bucket);
            }
        }
        Ok(b)
    }

    fn new_bucket(&self, name: &str, created: SystemTime) -> Result<Bucket> {
        let (data, info): (Arc<dyn ObjectStore>, Arc<dyn ObjectStore>) = match &self.backing {
            Backing::Memory => (
                Arc::new(MemoryStore::with_parts_max(self.parts_max)),
                Arc::new(MemoryStore::new()),
            ),
            Backing::Dir(root) => (
                Arc::new(FsStore::with_parts_max(root.join(name), self.parts_max)?),
                Arc::new(FsStore::open(root.join("_info").join(name))?),
            ),
        };
        Ok(Bucket { data, info, created, directory: is_directory_bucket(name) })
    }

    /// Create a bucket.
    pub fn create(&self, name: &str) -> std::result::Result<(), BucketError> {
        let mut map = self.map.write();
        if map.contains_key(name) {
            return Err(BucketError::AlreadyExists);
        }
        let bucket = self
            .new_bucket(name, SystemTime::now())
            .map_err(|e| BucketError::Store(e.to_string()))?;
        map.insert(name.to_owned(), bucket);
        Ok(())
    }

    /// Delete an empty bucket (its multipart uploads in progress go with it).
    pub fn delete(&self, name: &str) -> std::result::Result<(), BucketError> {
        let mut map = self.map.write();
        let b = map.get(name).ok_or(BucketError::NoSuchBucket)?;
        if !b.data.list("").map_err(|e| BucketError::Store(e.to_string()))?.is_empty() {
            return Err(BucketError::NotEmpty);
        }
        self.abort_uploads_of(name).map_err(|e| BucketError::Store(e.to_string()))?;
        if let Backing::Dir(root) = &self.backing {
            for dir in [root.join(name), root.join("_info").join(name)] {
                match std::fs::remove_dir_all(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(BucketError::Store(format!("removing {}: {e}", dir.display())));
                    }
                }
            }
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

    /// A bucket's stores, or `NotFound`.
    pub(crate) fn bucket(&self, name: &str) -> Result<Bucket> {
        self.map
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| StoreError::NotFound(format!("bucket {name}")))
    }

    /// The lock stripe of the object `bucket/key`.
    pub(crate) fn stripe(&self, bucket: &str, key: &str) -> MutexGuard<'_, ()> {
        // FNV-1a over `bucket/key`: cheap, spreads similar keys, and needs
        // no allocation on the append path.
        let bytes = bucket.bytes().chain(std::iter::once(b'/')).chain(key.bytes());
        let h = bytes.fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        self.stripes[(h % STRIPES as u64) as usize].lock()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names_follow_s3_rules() {
        for ok in ["abc", "my-bucket.v2", "logs--use1-az4--x-s3"] {
            assert!(valid_bucket_name(ok), "{ok}");
        }
        for bad in ["ab", "Upper", "-lead", "trail-", "a..b", "_milliscale", &"a".repeat(64)] {
            assert!(!valid_bucket_name(bad), "{bad}");
        }
        assert!(is_directory_bucket("logs--use1-az4--x-s3"));
        for not in ["logs", "--x-s3", "logs--x-s3", "a--b--x-s4"] {
            assert!(!is_directory_bucket(not), "{not}");
        }
    }
}
