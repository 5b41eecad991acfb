//! Multipart uploads: create, upload parts, list, complete, abort.
//!
//! Uploads in progress live in one store (memory, or `DIR/_uploads` with a
//! directory backing, so they survive restarts): `ID/upload` holds the
//! upload's record (bucket, key, headers, start time) as JSON, and
//! `ID/NNNNN` holds part NNNNN's bytes. Uploading a part again replaces it
//! (last writer wins, as in S3). A part's ETag is the MD5 of its bytes,
//! computed when the part arrives and again from the stored bytes when the
//! upload completes, so the ETags the client lists are checked against what
//! is actually there.
//!
//! Completing concatenates the named parts into one write of the object
//! (atomic, like any PUT), then replaces the upload by `ID/completed`, a
//! record of the result: completing the same upload again with the same
//! parts answers the same ETag, as S3 does for a retried request. Limits are S3's, which
//! S3 Express shares: part numbers 1 to 10,000, every part but the last at
//! least 5 MiB; a directory bucket also needs the part numbers to be
//! consecutive from 1.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use md5::{Digest, Md5};
use objstore::StoreError;
use serde::{Deserialize, Serialize};

use crate::buckets::Buckets;
use crate::objects::{Attrs, NewObject, Object, Precondition, multipart_etag};

/// Highest part number.
pub const PART_NUMBER_MAX: u32 = 10_000;
/// Smallest part but the last.
pub const PART_BYTES_MIN: u64 = 5 << 20;

/// What can go wrong with an upload.
#[derive(Debug)]
pub enum UploadError {
    /// The store failed (or has no such bucket).
    Store(StoreError),
    /// No upload with this ID for this bucket and key.
    NoSuchUpload,
    /// A listed part is missing, or its ETag is not the stored part's.
    InvalidPart(String),
    /// The listed parts are not in ascending order (or, in a directory
    /// bucket, not consecutive from 1).
    InvalidPartOrder(String),
    /// A part but the last is under 5 MiB.
    EntityTooSmall(String),
    /// A bad part number or an empty part list.
    InvalidArgument(String),
}

impl From<StoreError> for UploadError {
    fn from(e: StoreError) -> Self {
        UploadError::Store(e)
    }
}

type Result<T> = std::result::Result<T, UploadError>;

/// An upload's record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Upload {
    /// Its ID.
    #[serde(skip)]
    pub id: String,
    /// The bucket.
    pub bucket: String,
    /// The object's key.
    pub key: String,
    /// Headers and metadata the object gets.
    #[serde(default)]
    pub attrs: Attrs,
    /// When it started, in nanoseconds since the epoch.
    pub initiated_ns: u64,
}

impl Upload {
    /// When it started.
    pub fn initiated(&self) -> SystemTime {
        UNIX_EPOCH + std::time::Duration::from_nanos(self.initiated_ns)
    }
}

/// One stored part.
#[derive(Debug, Clone)]
pub struct Part {
    /// Its number.
    pub number: u32,
    /// MD5 of its bytes, quoted.
    pub etag: String,
    /// Its size.
    pub size: u64,
    /// When it was uploaded.
    pub modified: SystemTime,
}

/// What a completed upload leaves behind, for retries of the completion.
#[derive(Debug, Serialize, Deserialize)]
struct Completed {
    bucket: String,
    key: String,
    etag: String,
    parts: Vec<(u32, String)>,
}

static NEXT_UPLOAD: AtomicU64 = AtomicU64::new(0);

fn new_upload_id() -> String {
    let ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let n = NEXT_UPLOAD.fetch_add(1, Ordering::Relaxed);
    format!("{ns:016x}{:08x}{n:08x}", std::process::id())
}

fn part_key(id: &str, n: u32) -> String {
    format!("{id}/{n:05}")
}

fn md5_of(b: &[u8]) -> [u8; 16] {
    Md5::digest(b).into()
}

fn quoted(md5: &[u8; 16]) -> String {
    format!("\"{}\"", hex::encode(md5))
}

/// Check a part number.
pub fn check_part_number(n: i32) -> Result<u32> {
    match u32::try_from(n) {
        Ok(n) if (1..=PART_NUMBER_MAX).contains(&n) => Ok(n),
        _ => Err(UploadError::InvalidArgument(format!(
            "part numbers are 1..={PART_NUMBER_MAX}, got {n}"
        ))),
    }
}

impl Buckets {
    /// Start an upload of `bucket/key`; returns its ID.
    pub fn create_upload(&self, bucket: &str, key: &str, attrs: Attrs) -> Result<String> {
        self.bucket(bucket)?;
        objstore::check_key(key)?;
        let id = new_upload_id();
        let ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let rec = Upload {
            id: id.clone(),
            bucket: bucket.into(),
            key: key.into(),
            attrs,
            initiated_ns: ns,
        };
        let json = serde_json::to_vec(&rec).expect("an upload record serializes");
        self.uploads.put(&format!("{id}/upload"), Bytes::from(json))?;
        Ok(id)
    }

    /// Upload `id`'s record `name` (`upload` or `completed`);
    /// `NoSuchUpload` if there is none.
    fn record<T: serde::de::DeserializeOwned>(&self, id: &str, name: &str) -> Result<T> {
        if id.is_empty() || id.contains('/') {
            return Err(UploadError::NoSuchUpload);
        }
        let bytes = match self.uploads.get(&format!("{id}/{name}")) {
            Ok(b) => b,
            Err(StoreError::NotFound(_)) => return Err(UploadError::NoSuchUpload),
            Err(e) => return Err(e.into()),
        };
        serde_json::from_slice(&bytes).map_err(|e| {
            UploadError::Store(StoreError::Fatal(format!(
                "the {name} record of upload {id} is damaged: {e}"
            )))
        })
    }

    /// The upload `id` of `bucket/key`.
    pub fn upload(&self, id: &str, bucket: &str, key: &str) -> Result<Upload> {
        let mut rec: Upload = self.record(id, "upload")?;
        rec.id = id.to_owned();
        if rec.bucket != bucket || rec.key != key {
            return Err(UploadError::NoSuchUpload);
        }
        Ok(rec)
    }

    /// Store part `n` of upload `id`; returns its ETag.
    pub fn upload_part(
        &self,
        id: &str,
        bucket: &str,
        key: &str,
        n: u32,
        body: Bytes,
    ) -> Result<String> {
        self.upload(id, bucket, key)?;
        let etag = quoted(&md5_of(&body));
        self.uploads.put(&part_key(id, n), body)?;
        Ok(etag)
    }

    /// The parts of upload `id` stored so far, by number.
    pub fn list_parts(&self, id: &str, bucket: &str, key: &str) -> Result<(Upload, Vec<Part>)> {
        let rec = self.upload(id, bucket, key)?;
        let mut parts = Vec::new();
        for m in self.uploads.list(&format!("{id}/"))? {
            let Some(Ok(number)) = m.key.rsplit('/').next().map(str::parse::<u32>) else {
                continue;
            };
            let bytes = match self.uploads.get(&m.key) {
                Ok(b) => b,
                Err(StoreError::NotFound(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            parts.push(Part {
                number,
                etag: quoted(&md5_of(&bytes)),
                size: bytes.len() as u64,
                modified: m.modified.unwrap_or(UNIX_EPOCH),
            });
        }
        parts.sort_by_key(|p| p.number);
        Ok((rec, parts))
    }

    /// Complete upload `id` from `parts` (number, ETag), in order.
    pub fn complete_upload(
        &self,
        id: &str,
        bucket: &str,
        key: &str,
        parts: &[(u32, String)],
        pre: Precondition,
    ) -> Result<Object> {
        let rec = match self.upload(id, bucket, key) {
            Err(UploadError::NoSuchUpload) => return self.completed_again(id, bucket, key, parts),
            r => r?,
        };
        if parts.is_empty() {
            return Err(UploadError::InvalidArgument(
                "CompleteMultipartUpload needs at least one part".into(),
            ));
        }
        let directory = self.bucket(bucket)?.directory;
        let mut body = BytesMut::new();
        let (mut md5s, mut sizes) = (Vec::with_capacity(parts.len()), Vec::new());
        for (i, (n, _)) in parts.iter().enumerate() {
            if i > 0 && *n <= parts[i - 1].0 {
                return Err(UploadError::InvalidPartOrder(
                    "the list of parts must be in ascending part number order".into(),
                ));
            }
            if directory && *n != i as u32 + 1 {
                return Err(UploadError::InvalidPartOrder(
                    "a directory bucket needs consecutive part numbers from 1".into(),
                ));
            }
        }
        for (i, (n, want)) in parts.iter().enumerate() {
            let bytes = match self.uploads.get(&part_key(id, *n)) {
                Ok(b) => b,
                Err(StoreError::NotFound(_)) => {
                    return Err(UploadError::InvalidPart(format!("part {n} was not uploaded")));
                }
                Err(e) => return Err(e.into()),
            };
            let md5 = md5_of(&bytes);
            if want.trim_matches('"') != hex::encode(md5) {
                return Err(UploadError::InvalidPart(format!(
                    "part {n}'s ETag is {}, not {want}",
                    quoted(&md5)
                )));
            }
            if i + 1 < parts.len() && (bytes.len() as u64) < PART_BYTES_MIN {
                return Err(UploadError::EntityTooSmall(format!(
                    "part {n} is {} bytes; every part but the last needs at least {PART_BYTES_MIN}",
                    bytes.len()
                )));
            }
            md5s.push(md5);
            sizes.push((*n, bytes.len() as u64));
            body.extend_from_slice(&bytes);
        }
        let new = NewObject {
            attrs: rec.attrs,
            etag: (!directory).then(|| multipart_etag(&md5s)),
            part_sizes: sizes,
        };
        let o = self.write_object(bucket, key, body.freeze(), pre, new)?;
        let done = Completed {
            bucket: bucket.into(),
            key: key.into(),
            etag: o.etag.clone(),
            parts: parts.iter().map(|(n, e)| (*n, e.trim_matches('"').to_owned())).collect(),
        };
        let json = serde_json::to_vec(&done).expect("a completion record serializes");
        self.uploads.put(&format!("{id}/completed"), Bytes::from(json))?;
        self.remove_upload(id)?;
        Ok(o)
    }

    /// A completion of an upload completed before: the same parts get the
    /// same answer, if the object is still the one it made.
    fn completed_again(
        &self,
        id: &str,
        bucket: &str,
        key: &str,
        parts: &[(u32, String)],
    ) -> Result<Object> {
        let done: Completed = self.record(id, "completed")?;
        let same_parts = done.parts.len() == parts.len()
            && done
                .parts
                .iter()
                .zip(parts)
                .all(|(a, b)| a.0 == b.0 && a.1 == b.1.trim_matches('"'));
        if done.bucket != bucket || done.key != key || !same_parts {
            return Err(UploadError::NoSuchUpload);
        }
        match self.head_object(bucket, key) {
            Ok(o) if o.etag == done.etag => Ok(o),
            Ok(_) | Err(StoreError::NotFound(_)) => Err(UploadError::NoSuchUpload),
            Err(e) => Err(e.into()),
        }
    }

    /// Abort upload `id`: its parts are deleted.
    pub fn abort_upload(&self, id: &str, bucket: &str, key: &str) -> Result<()> {
        self.upload(id, bucket, key)?;
        self.remove_upload(id)
    }

    fn remove_upload(&self, id: &str) -> Result<()> {
        for m in self.uploads.list(&format!("{id}/"))? {
            if !m.key.ends_with("/upload") && !m.key.ends_with("/completed") {
                self.uploads.delete(&m.key)?;
            }
        }
        // The record last: an upload cut short by a crash is still listed.
        self.uploads.delete(&format!("{id}/upload"))?;
        Ok(())
    }

    /// Uploads in progress in `bucket`, by key, then start time.
    pub fn list_uploads(&self, bucket: &str) -> Result<Vec<Upload>> {
        self.bucket(bucket)?;
        self.uploads_into(bucket)
    }

    /// [`Buckets::list_uploads`] without the bucket check (the registry's
    /// lock may be held).
    fn uploads_into(&self, bucket: &str) -> Result<Vec<Upload>> {
        let mut out = Vec::new();
        for m in self.uploads.list("")? {
            let Some(id) = m.key.strip_suffix("/upload") else { continue };
            let bytes = match self.uploads.get(&m.key) {
                Ok(b) => b,
                Err(StoreError::NotFound(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            let Ok(mut rec) = serde_json::from_slice::<Upload>(&bytes) else {
                tracing::warn!("skipping the damaged record of upload {id}");
                continue;
            };
            if rec.bucket == bucket {
                rec.id = id.to_owned();
                out.push(rec);
            }
        }
        out.sort_by(|a, b| (&a.key, a.initiated_ns, &a.id).cmp(&(&b.key, b.initiated_ns, &b.id)));
        Ok(out)
    }

    /// Abort every upload into `bucket` (the bucket is being deleted).
    pub(crate) fn abort_uploads_of(&self, bucket: &str) -> objstore::Result<()> {
        let ids = match self.uploads_into(bucket) {
            Ok(v) => v.into_iter().map(|u| u.id).collect::<Vec<_>>(),
            Err(UploadError::Store(e)) => return Err(e),
            Err(e) => return Err(StoreError::Fatal(format!("{e:?}"))),
        };
        for m in self.uploads.list("")? {
            if m.key.ends_with("/completed")
                && let Ok(bytes) = self.uploads.get(&m.key)
                && serde_json::from_slice::<Completed>(&bytes).is_ok_and(|c| c.bucket == bucket)
            {
                self.uploads.delete(&m.key)?;
            }
        }
        for id in ids {
            match self.remove_upload(&id) {
                Ok(()) => {}
                Err(UploadError::Store(e)) => return Err(e),
                Err(e) => return Err(StoreError::Fatal(format!("{e:?}"))),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buckets::Backing;

    #[test]
    fn an_upload_completes_into_one_object_with_the_aws_etag() {
        let b = Buckets::open(Backing::Memory, 10_000).expect("open");
        b.create("gp").expect("create");
        let attrs = Attrs { content_type: Some("image/png".into()), ..Default::default() };
        let id = b.create_upload("gp", "big", attrs.clone()).expect("create");
        let p1 = Bytes::from(vec![1u8; PART_BYTES_MIN as usize]);
        let p2 = Bytes::from_static(b"tail");
        let e2 = b.upload_part(&id, "gp", "big", 2, p2.clone()).expect("part 2");
        let e1 = b.upload_part(&id, "gp", "big", 1, p1.clone()).expect("part 1");
        let (_, listed) = b.list_parts(&id, "gp", "big").expect("list");
        assert_eq!(listed.iter().map(|p| p.number).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(listed[0].etag, e1);
        assert!(matches!(b.upload(&id, "gp", "other"), Err(UploadError::NoSuchUpload)));
        // Wrong order, wrong ETag, missing part: refused, upload kept.
        let bad_order = [(2, e2.clone()), (1, e1.clone())];
        assert!(matches!(
            b.complete_upload(&id, "gp", "big", &bad_order, Precondition::None),
            Err(UploadError::InvalidPartOrder(_))
        ));
        let bad_etag = [(1, e2.clone()), (2, e2.clone())];
        assert!(matches!(
            b.complete_upload(&id, "gp", "big", &bad_etag, Precondition::None),
            Err(UploadError::InvalidPart(_))
        ));
        let missing = [(1, e1.clone()), (3, e2.clone())];
        assert!(matches!(
            b.complete_upload(&id, "gp", "big", &missing, Precondition::None),
            Err(UploadError::InvalidPart(_))
        ));
        let done = [(1, e1), (2, e2)];
        let o = b.complete_upload(&id, "gp", "big", &done, Precondition::None).expect("complete");
        assert_eq!(o.etag, multipart_etag(&[md5_of(&p1), md5_of(&p2)]));
        assert!(o.etag.ends_with("-2\""));
        let head = b.head_object("gp", "big").expect("head");
        assert_eq!((head.size, &head.attrs, head.parts_count()), (p1.len() as u64 + 4, &attrs, 2));
        assert!(matches!(b.upload(&id, "gp", "big"), Err(UploadError::NoSuchUpload)));
        assert!(b.list_uploads("gp").expect("list").is_empty());
        // Completing again with the same parts answers the same; other
        // parts, or after the object changed, there is no such upload.
        let again = b.complete_upload(&id, "gp", "big", &done, Precondition::None).expect("again");
        assert_eq!(again.etag, o.etag);
        assert!(matches!(
            b.complete_upload(&id, "gp", "big", &done[..1], Precondition::None),
            Err(UploadError::NoSuchUpload)
        ));
        b.delete_object("gp", "big").expect("delete");
        assert!(matches!(
            b.complete_upload(&id, "gp", "big", &done, Precondition::None),
            Err(UploadError::NoSuchUpload)
        ));
    }

    #[test]
    fn small_parts_are_refused_and_aborts_clean_up() {
        let b = Buckets::open(Backing::Memory, 10_000).expect("open");
        b.create("gp").expect("create");
        let id = b.create_upload("gp", "k", Attrs::default()).expect("create");
        let e1 = b.upload_part(&id, "gp", "k", 1, Bytes::from_static(b"small")).expect("1");
        let e2 = b.upload_part(&id, "gp", "k", 2, Bytes::from_static(b"last")).expect("2");
        assert!(matches!(
            b.complete_upload(&id, "gp", "k", &[(1, e1.clone()), (2, e2)], Precondition::None),
            Err(UploadError::EntityTooSmall(_))
        ));
        // One small part alone is the last part: fine.
        let id2 = b.create_upload("gp", "k2", Attrs::default()).expect("create");
        let e = b.upload_part(&id2, "gp", "k2", 1, Bytes::from_static(b"small")).expect("1");
        b.complete_upload(&id2, "gp", "k2", &[(1, e)], Precondition::None).expect("complete");
        assert_eq!(b.list_uploads("gp").expect("list").len(), 1);
        b.abort_upload(&id, "gp", "k").expect("abort");
        assert!(b.list_uploads("gp").expect("list").is_empty());
        assert!(b.uploads.list(&format!("{id}/")).expect("list").is_empty(), "parts are gone too");
        assert!(check_part_number(0).is_err() && check_part_number(10_001).is_err());
        assert_eq!(check_part_number(10_000).expect("max"), 10_000);
    }
}
