//! A directory as an object store: the block-storage baseline (`file://`).
//!
//! Layout: one flat directory; object `K` is `<name>.data` plus a sidecar
//! `<name>.meta` holding the key, the part count and the ETag. `<name>` is
//! the key percent-encoded (or, for long keys, a hash), so any key maps to
//! one file and no key can escape the directory. Writes go to a temporary
//! file that is fsynced and renamed over the target; the directory is then
//! fsynced. Appends write at the end of `.data` and fsync it, then replace
//! `.meta`.
//!
//! Atomicity: writes, conditional writes and appends hold a per-key lock
//! (striped): a mutex within the process and an exclusive `flock` on
//! `.lock-<stripe>` across processes. So two processes sharing a directory
//! (an old writer and the one that fences it) see atomic conditional
//! writes and appends, as on S3. Temporary files carry the process id. The
//! data file is the authority for an object's size; a crash between an
//! append's data write and its `.meta` update leaves the part count one
//! low, never the data.
//!
//! Reads of large objects map the data file instead of copying it (see
//! [`MAP_MIN_BYTES`]). That is safe because this store never changes bytes
//! of a data file in place: puts rename a new file over the old one,
//! appends write only past the end, and deletes unlink. A mapping therefore
//! keeps seeing the object as it was when it was read. Truncating a data
//! file from outside the store while a reader holds it is not supported.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::{ObjectMeta, ObjectStore, PARTS_MAX, Result, StoreError, check_key};

const STRIPES: usize = 64;
/// Objects (and ranges) at least this large are read by mapping the file:
/// recovery then reads a gigabyte of log from the page cache without
/// allocating and first-touching a gigabyte of fresh memory.
pub const MAP_MIN_BYTES: u64 = 1 << 20;
/// Encoded names longer than this are replaced by a hash.
const NAME_BYTES_MAX: usize = 200;

/// See the module docs.
#[derive(Debug)]
pub struct FsStore {
    root: PathBuf,
    parts_max: u32,
    locks: Vec<Mutex<()>>,
    generation: AtomicU64,
}

struct Meta {
    key: String,
    parts: u32,
    etag: String,
}

fn io(op: &str, path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Fatal(format!("{op} {}: {e}", path.display()))
}

fn open_data(key: &str, data: &Path) -> Result<File> {
    match File::open(data) {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(StoreError::NotFound(key.to_owned()))
        }
        Err(e) => Err(io("open", data, e)),
    }
}

/// `range` of an open data file (within its size): mapped when large,
/// copied when small.
#[allow(unsafe_code)]
fn read_at(f: &File, data: &Path, range: Range<u64>) -> Result<Bytes> {
    let len = (range.end - range.start) as usize;
    if range.end - range.start >= MAP_MIN_BYTES {
        // SAFETY: the store never modifies a data file's existing bytes or
        // shrinks it (see the module docs), so the mapped bytes stay valid
        // and unchanged for the mapping's life.
        let map = unsafe { memmap2::MmapOptions::new().offset(range.start).len(len).map(f) }
            .map_err(|e| io("mmap", data, e))?;
        // Read ahead: recovery reads every byte, once, in order.
        let _ = map.advise(memmap2::Advice::Sequential);
        let _ = map.advise(memmap2::Advice::WillNeed);
        return Ok(Bytes::from_owner(map));
    }
    let mut buf = vec![0u8; len];
    let mut f = f;
    f.seek(SeekFrom::Start(range.start)).map_err(|e| io("seek", data, e))?;
    f.read_exact(&mut buf).map_err(|e| io("read", data, e))?;
    Ok(Bytes::from(buf))
}

/// Percent-encode everything but `[A-Za-z0-9_-]`; hash keys that get too long.
fn file_name(key: &str) -> String {
    let mut s = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    if s.len() <= NAME_BYTES_MAX {
        return s;
    }
    // Two independent 64-bit FNV-1a hashes: collisions are not a practical concern.
    let h = |seed: u64| {
        key.bytes().fold(seed, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
    };
    format!("~{:016x}{:016x}", h(0xcbf2_9ce4_8422_2325), h(0x8422_2325_cbf2_9ce4))
}

impl FsStore {
    /// A store in `root` (created if missing) with the S3 Express part limit.
    pub fn open(root: impl Into<PathBuf>) -> Result<FsStore> {
        FsStore::with_parts_max(root, PARTS_MAX)
    }

    /// As [`FsStore::open`], with a custom part limit (tests).
    pub fn with_parts_max(root: impl Into<PathBuf>, parts_max: u32) -> Result<FsStore> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(|e| io("create", &root, e))?;
        Ok(FsStore {
            root,
            parts_max,
            locks: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            generation: AtomicU64::new(0),
        })
    }

    fn paths(&self, key: &str) -> (PathBuf, PathBuf) {
        let n = file_name(key);
        (self.root.join(format!("{n}.data")), self.root.join(format!("{n}.meta")))
    }

    /// The key's stripe, locked in this process and across processes
    /// (the file lock is released when the returned file is dropped).
    fn lock(&self, key: &str) -> Result<(parking_lot::MutexGuard<'_, ()>, File)> {
        let h = key.bytes().fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(usize::from(b)));
        let stripe = h % STRIPES;
        let g = self.locks[stripe].lock();
        let path = self.root.join(format!(".lock-{stripe:02}"));
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| io("open", &path, e))?;
        f.lock().map_err(|e| io("lock", &path, e))?;
        Ok((g, f))
    }

    fn etag(&self, size: u64) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let g = self.generation.fetch_add(1, Ordering::Relaxed);
        format!("\"{nanos:x}-{g:x}-{size:x}\"")
    }

    fn read_meta(&self, path: &Path) -> Result<Option<Meta>> {
        let text = match fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("read", path, e)),
        };
        let mut lines = text.lines();
        let bad = || StoreError::Fatal(format!("corrupt metadata file {}", path.display()));
        let key = lines.next().ok_or_else(bad)?.to_owned();
        let parts = lines.next().and_then(|l| l.parse().ok()).ok_or_else(bad)?;
        let etag = lines.next().ok_or_else(bad)?.to_owned();
        Ok(Some(Meta { key, parts, etag }))
    }

    /// Write `bytes` to `path` durably: temp file, fsync, rename, fsync dir.
    fn write_atomic(&self, path: &Path, bytes: &[u8]) -> Result<()> {
        let tmp = path.with_extension(format!(
            "tmp{}-{}",
            std::process::id(),
            self.generation.fetch_add(1, Ordering::Relaxed)
        ));
        let mut f = File::create(&tmp).map_err(|e| io("create", &tmp, e))?;
        f.write_all(bytes).map_err(|e| io("write", &tmp, e))?;
        f.sync_all().map_err(|e| io("fsync", &tmp, e))?;
        fs::rename(&tmp, path).map_err(|e| io("rename", path, e))?;
        self.sync_dir()
    }

    fn sync_dir(&self) -> Result<()> {
        File::open(&self.root).and_then(|d| d.sync_all()).map_err(|e| io("fsync", &self.root, e))
    }

    fn write_meta(&self, path: &Path, m: &Meta) -> Result<()> {
        self.write_atomic(path, format!("{}\n{}\n{}\n", m.key, m.parts, m.etag).as_bytes())
    }

    /// The data file's modification time: when the object was last written.
    fn modified(data: &Path) -> Option<std::time::SystemTime> {
        fs::metadata(data).and_then(|m| m.modified()).ok()
    }

    fn size_of(path: &Path) -> Result<u64> {
        fs::metadata(path).map(|m| m.len()).map_err(|e| io("stat", path, e))
    }

    /// Replace the object with `body` (one part). Caller holds the key's lock.
    fn store(&self, key: &str, body: &[u8]) -> Result<ObjectMeta> {
        let (data, meta) = self.paths(key);
        let m = Meta { key: key.to_owned(), parts: 1, etag: self.etag(body.len() as u64) };
        // Meta first, then data: a crash in between leaves the old data with
        // a new ETag (a spurious If-Match failure), never new data with an old ETag.
        self.write_meta(&meta, &m)?;
        self.write_atomic(&data, body)?;
        Ok(ObjectMeta {
            key: key.to_owned(),
            size: body.len() as u64,
            etag: m.etag,
            parts: Some(1),
            modified: FsStore::modified(&data),
        })
    }

    /// The object's metadata and size, or `None` if it does not exist. A
    /// `.meta` whose `.data` is gone (a delete cut short) reads as missing.
    fn existing(&self, key: &str) -> Result<Option<(Meta, u64)>> {
        let (data, meta) = self.paths(key);
        let Some(m) = self.read_meta(&meta)? else { return Ok(None) };
        match fs::metadata(&data) {
            Ok(md) => Ok(Some((m, md.len()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("stat", &data, e)),
        }
    }
}

impl ObjectStore for FsStore {
    fn prefers_ranged_reads(&self) -> bool {
        false
    }

    fn put(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        check_key(key)?;
        let _g = self.lock(key)?;
        self.store(key, &body)
    }

    fn put_if_absent(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        check_key(key)?;
        let _g = self.lock(key)?;
        match self.existing(key)? {
            Some(_) => Err(StoreError::AlreadyExists(key.to_owned())),
            None => self.store(key, &body),
        }
    }

    fn put_if_match(&self, key: &str, body: Bytes, etag: &str) -> Result<ObjectMeta> {
        check_key(key)?;
        let _g = self.lock(key)?;
        match self.existing(key)? {
            None => Err(StoreError::NotFound(key.to_owned())),
            Some((m, _)) if m.etag != etag => Err(StoreError::PreconditionFailed(format!(
                "{key}: ETag is {}, not {etag}",
                m.etag
            ))),
            Some(_) => self.store(key, &body),
        }
    }

    fn append(&self, key: &str, offset: u64, body: Bytes) -> Result<ObjectMeta> {
        check_key(key)?;
        if body.is_empty() {
            return Err(StoreError::InvalidRequest("an append needs a non-empty body".into()));
        }
        let _g = self.lock(key)?;
        let Some((mut m, size)) = self.existing(key)? else {
            return if offset == 0 {
                self.store(key, &body)
            } else {
                Err(StoreError::NotFound(key.to_owned()))
            };
        };
        if offset != size {
            return Err(StoreError::InvalidWriteOffset { actual_size: size });
        }
        if m.parts >= self.parts_max {
            return Err(StoreError::TooManyParts { parts: m.parts });
        }
        let (data, meta) = self.paths(key);
        let mut f = OpenOptions::new().write(true).open(&data).map_err(|e| io("open", &data, e))?;
        f.seek(SeekFrom::Start(offset)).map_err(|e| io("seek", &data, e))?;
        f.write_all(&body).map_err(|e| io("write", &data, e))?;
        f.sync_data().map_err(|e| io("fsync", &data, e))?;
        let size = offset + body.len() as u64;
        m.parts += 1;
        m.etag = self.etag(size);
        self.write_meta(&meta, &m)?;
        Ok(ObjectMeta {
            key: key.to_owned(),
            size,
            etag: m.etag,
            parts: Some(m.parts),
            modified: FsStore::modified(&data),
        })
    }

    fn get(&self, key: &str) -> Result<Bytes> {
        check_key(key)?;
        let (data, _) = self.paths(key);
        let f = open_data(key, &data)?;
        let size = f.metadata().map_err(|e| io("stat", &data, e))?.len();
        read_at(&f, &data, 0..size)
    }

    fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        check_key(key)?;
        if range.start > range.end {
            return Err(StoreError::InvalidRequest(format!("inverted range {range:?}")));
        }
        let (data, _) = self.paths(key);
        let f = open_data(key, &data)?;
        let size = f.metadata().map_err(|e| io("stat", &data, e))?.len();
        if range.start >= size {
            return Err(StoreError::InvalidRange { start: range.start, size });
        }
        read_at(&f, &data, range.start..range.end.min(size))
    }

    fn head(&self, key: &str) -> Result<ObjectMeta> {
        check_key(key)?;
        match self.existing(key)? {
            None => Err(StoreError::NotFound(key.to_owned())),
            Some((m, size)) => Ok(ObjectMeta {
                key: m.key,
                size,
                etag: m.etag,
                parts: Some(m.parts),
                modified: FsStore::modified(&self.paths(key).0),
            }),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let dir = fs::read_dir(&self.root).map_err(|e| io("list", &self.root, e))?;
        let mut out = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|e| io("list", &self.root, e))?;
            let path = entry.path();
            if path.extension().is_none_or(|x| x != "meta") {
                continue;
            }
            let Some(m) = self.read_meta(&path)? else { continue };
            if !m.key.starts_with(prefix) {
                continue;
            }
            let data = path.with_extension("data");
            let Ok(size) = FsStore::size_of(&data) else { continue };
            let modified = FsStore::modified(&data);
            out.push(ObjectMeta { key: m.key, size, etag: m.etag, parts: Some(m.parts), modified });
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    fn delete(&self, key: &str) -> Result<()> {
        check_key(key)?;
        let _g = self.lock(key)?;
        let (data, meta) = self.paths(key);
        // Data first: a delete cut short leaves a `.meta` alone, which reads as missing.
        for p in [&data, &meta] {
            match fs::remove_file(p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("delete", p, e)),
            }
        }
        self.sync_dir()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_never_escape_the_directory() {
        for k in ["..", "../x", "a/b", "/abs", "a\0b", "é"] {
            let n = file_name(k);
            assert!(!n.contains('/') && !n.contains('.') && !n.contains('\0'), "{k:?} -> {n}");
        }
        assert_ne!(file_name("a/b"), file_name("a%2Fb"), "encoding is injective");
        let long = "x".repeat(1000);
        assert!(file_name(&long).len() <= NAME_BYTES_MAX);
    }

    /// Large reads are mappings; they must keep the bytes they returned
    /// while the store appends to, overwrites and deletes the object.
    #[test]
    fn mapped_reads_keep_their_bytes() {
        let dir = std::env::temp_dir().join(format!("ms-fs-map-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let store = FsStore::open(&dir).expect("open");
        let n = (MAP_MIN_BYTES * 3) as usize + 17;
        let first: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        store.put("seg", Bytes::from(first.clone())).expect("put");
        let whole = store.get("seg").expect("get");
        let range = store.get_range("seg", 5..MAP_MIN_BYTES * 2 + 5).expect("range");
        let small = store.get_range("seg", 7..107).expect("small range");
        assert_eq!(&whole[..], &first[..]);
        assert_eq!(&range[..], &first[5..(MAP_MIN_BYTES * 2 + 5) as usize]);
        assert_eq!(&small[..], &first[7..107]);
        // A range past the end is clipped, as for a copied read.
        let tail = store.get_range("seg", MAP_MIN_BYTES..u64::MAX).expect("tail");
        assert_eq!(&tail[..], &first[MAP_MIN_BYTES as usize..]);

        store.append("seg", n as u64, Bytes::from(vec![9u8; 4096])).expect("append");
        assert_eq!(&whole[..], &first[..], "an append changed a mapped read");
        assert_eq!(store.get("seg").expect("get").len(), n + 4096);

        store.put("seg", Bytes::from(vec![1u8; n])).expect("overwrite");
        store.delete("seg").expect("delete");
        assert_eq!(&whole[..], &first[..], "an overwrite or delete changed a mapped read");
        assert_eq!(&range[..], &first[5..(MAP_MIN_BYTES * 2 + 5) as usize]);
        fs::remove_dir_all(&dir).expect("clean up");
    }
}
