//! Objects: their bytes, and what S3 keeps beside them.
//!
//! A bucket's `data` store holds the bytes with exact S3 Express append
//! semantics; its `info` store holds one small JSON record per key that was
//! written by a PUT, a copy or a completed multipart upload: S3's ETag, the
//! standard headers (`Content-Type` and the like), user metadata
//! (`x-amz-meta-*`), and a multipart object's part sizes.
//!
//! **ETags as AWS computes them.** In a general purpose bucket a PUT's ETag
//! is the MD5 of the body, and a multipart object's is the MD5 of its parts'
//! MD5s followed by `-N`. A directory bucket's ETags are opaque strings (S3
//! Express does not use MD5), here the data store's own version tag. An
//! append changes the ETag to the data store's new version tag: MD5 over a
//! growing object would cost a pass over all of it per append.
//!
//! **How the record belongs to its bytes.** A record stores the data
//! store's version tag it was written with. If the bytes still carry that
//! tag, the record's ETag is the object's; if not, the object was appended
//! to since, and the record's headers and metadata still hold (an append
//! keeps them, as in S3 Express) but the ETag is the new version tag.
//! Writes of one key hold its lock stripe, so bytes and record change
//! together for every reader. On disk, a write deletes the old record
//! before it replaces the bytes, and a delete drops the record before the
//! bytes: a crash in between can lose an object's headers (it reads with
//! defaults), never attach one object's headers to another's bytes.

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use md5::{Digest, Md5};
use objstore::{ObjectMeta, Result, StoreError};
use serde::{Deserialize, Serialize};

use crate::buckets::{Bucket, Buckets};

/// The standard headers and user metadata an object keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attrs {
    /// `Content-Type`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// `Content-Encoding`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_encoding: Option<String>,
    /// `Content-Disposition`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_disposition: Option<String>,
    /// `Content-Language`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_language: Option<String>,
    /// `Cache-Control`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<String>,
    /// `Expires`, as seconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<i64>,
    /// User metadata (`x-amz-meta-NAME: value`), names in lower case.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

impl Attrs {
    /// Nothing set.
    pub fn is_empty(&self) -> bool {
        *self == Attrs::default()
    }
}

/// The record kept in a bucket's `info` store.
#[derive(Debug, Serialize, Deserialize)]
struct Info {
    /// The data store's version tag when this record was written.
    version: String,
    /// S3's ETag (quoted) for that version.
    etag: String,
    #[serde(default)]
    attrs: Attrs,
    /// A multipart object's parts (number, size), in order; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    part_sizes: Vec<(u32, u64)>,
}

/// One object as S3 describes it.
#[derive(Debug, Clone)]
pub struct Object {
    /// The key, within its bucket.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// S3's ETag, quoted.
    pub etag: String,
    /// When it was last written.
    pub modified: SystemTime,
    /// Headers and user metadata.
    pub attrs: Attrs,
    /// A multipart object's parts (number, size); empty otherwise.
    pub part_sizes: Vec<(u32, u64)>,
    /// Writes that make up the bytes (a put is one, each append one more).
    pub parts: Option<u32>,
}

impl Object {
    /// As the object-store interface describes it, keyed `key`.
    pub fn meta(&self, key: &str) -> ObjectMeta {
        ObjectMeta {
            key: key.to_owned(),
            size: self.size,
            etag: self.etag.clone(),
            parts: self.parts,
            modified: Some(self.modified),
        }
    }

    /// Bytes of part `n` (1-based) of a multipart object; a single-part
    /// object has one part, all of it. `None` past the last part.
    pub fn part_range(&self, n: u32) -> Option<Range<u64>> {
        if self.part_sizes.is_empty() {
            return (n == 1).then_some(0..self.size);
        }
        // Part numbers may skip (1, 3): find the part by its number.
        let i = self.part_sizes.iter().position(|(num, _)| *num == n)?;
        let start: u64 = self.part_sizes[..i].iter().map(|(_, s)| s).sum();
        Some(start..start + self.part_sizes[i].1)
    }

    /// How many parts `GET ?partNumber` sees.
    pub fn parts_count(&self) -> u32 {
        self.part_sizes.len().max(1) as u32
    }
}

/// A write's condition on the object it replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Precondition {
    /// None.
    None,
    /// `If-None-Match: *`: only if no object has the key.
    IfAbsent,
    /// `If-Match: ETAG`: only if the object's ETag is this (quoted or not).
    IfMatch(String),
    /// `If-Match: *`: only if an object has the key.
    IfExists,
    /// `If-None-Match: ETAG`: only if no object has this ETag (S3 takes
    /// only `*` on writes; MinIO and others take tags, and so does this).
    IfNoneMatch(String),
}

/// An entity tag condition: `*` or one tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tag {
    /// `*`: any object.
    Any,
    /// This ETag (quotes optional).
    Is(String),
}

impl Tag {
    fn matches(&self, etag: &str) -> bool {
        match self {
            Tag::Any => true,
            Tag::Is(t) => t.trim_matches('"') == etag.trim_matches('"'),
        }
    }
}

/// Conditions on a read (GET, HEAD, a copy's source).
#[derive(Debug, Clone, Default)]
pub struct ReadConditions {
    /// `If-Match`.
    pub if_match: Option<Tag>,
    /// `If-None-Match`.
    pub if_none_match: Option<Tag>,
    /// `If-Modified-Since`.
    pub if_modified_since: Option<SystemTime>,
    /// `If-Unmodified-Since`.
    pub if_unmodified_since: Option<SystemTime>,
}

/// Why conditions refused a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// 412.
    PreconditionFailed,
    /// 304 (a copy answers 412 instead).
    NotModified,
}

fn whole_seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl ReadConditions {
    /// Evaluate as S3 does (RFC 9110's order): `If-Match`, else
    /// `If-Unmodified-Since`, may fail with 412; then `If-None-Match`, else
    /// `If-Modified-Since`, may answer 304. HTTP dates have whole seconds.
    pub fn check(&self, o: &Object) -> std::result::Result<(), Refusal> {
        let modified = whole_seconds(o.modified);
        match (&self.if_match, self.if_unmodified_since) {
            (Some(t), _) if !t.matches(&o.etag) => return Err(Refusal::PreconditionFailed),
            (None, Some(t)) if modified > whole_seconds(t) => {
                return Err(Refusal::PreconditionFailed);
            }
            _ => {}
        }
        match (&self.if_none_match, self.if_modified_since) {
            (Some(t), _) if t.matches(&o.etag) => Err(Refusal::NotModified),
            (None, Some(t)) if modified <= whole_seconds(t) => Err(Refusal::NotModified),
            _ => Ok(()),
        }
    }

    /// Is any condition set?
    pub fn any(&self) -> bool {
        self.if_match.is_some()
            || self.if_none_match.is_some()
            || self.if_modified_since.is_some()
            || self.if_unmodified_since.is_some()
    }
}

/// `"md5hex"`: a single-part ETag in a general purpose bucket.
pub fn md5_etag(body: &[u8]) -> String {
    format!("\"{}\"", hex::encode(Md5::digest(body)))
}

/// `"md5hex-N"`: a multipart ETag, from the parts' MD5s.
pub fn multipart_etag(part_md5s: &[[u8; 16]]) -> String {
    let mut h = Md5::new();
    for m in part_md5s {
        h.update(m);
    }
    format!("\"{}-{}\"", hex::encode(h.finalize()), part_md5s.len())
}

/// What a PUT-like write stores beside the bytes.
#[derive(Debug, Clone, Default)]
pub struct NewObject {
    /// Headers and user metadata.
    pub attrs: Attrs,
    /// The ETag, if the caller computed it (a multipart upload's);
    /// otherwise it is the MD5 of the body (general purpose buckets) or the
    /// data store's version tag (directory buckets).
    pub etag: Option<String>,
    /// A multipart object's parts (number, size).
    pub part_sizes: Vec<(u32, u64)>,
}

impl Buckets {
    fn read_info(b: &Bucket, key: &str) -> Result<Option<Info>> {
        match b.info.get(key) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                StoreError::Fatal(format!("the info record of {key:?} is damaged: {e}"))
            }),
            Err(StoreError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The object whose bytes are described by `m`, with its record.
    fn describe(b: &Bucket, key: &str, m: ObjectMeta) -> Result<Object> {
        let info = Buckets::read_info(b, key)?;
        let mut o = Object {
            key: key.to_owned(),
            size: m.size,
            etag: m.etag.clone(),
            modified: m.modified.unwrap_or(UNIX_EPOCH),
            attrs: Attrs::default(),
            part_sizes: Vec::new(),
            parts: m.parts,
        };
        if let Some(info) = info {
            o.attrs = info.attrs;
            if info.version == m.etag {
                o.etag = info.etag;
                o.part_sizes = info.part_sizes;
            }
        }
        Ok(o)
    }

    /// The object at `key`, or `None`. Caller holds the key's stripe.
    fn current(b: &Bucket, key: &str) -> Result<Option<Object>> {
        match b.data.head(key) {
            Ok(m) => Buckets::describe(b, key, m).map(Some),
            Err(StoreError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn check_precondition(b: &Bucket, key: &str, pre: &Precondition) -> Result<()> {
        if *pre == Precondition::None {
            return Ok(());
        }
        let cur = Buckets::current(b, key)?;
        match (pre, cur) {
            (Precondition::IfAbsent, Some(_)) => Err(StoreError::AlreadyExists(key.to_owned())),
            (Precondition::IfMatch(_) | Precondition::IfExists, None) => {
                Err(StoreError::NotFound(key.to_owned()))
            }
            (Precondition::IfMatch(want), Some(o)) if !Tag::Is(want.clone()).matches(&o.etag) => {
                Err(StoreError::PreconditionFailed(format!(
                    "{key}: ETag is {}, not {want}",
                    o.etag
                )))
            }
            (Precondition::IfNoneMatch(not), Some(o)) if Tag::Is(not.clone()).matches(&o.etag) => {
                Err(StoreError::PreconditionFailed(format!("{key}: ETag is {not}")))
            }
            _ => Ok(()),
        }
    }

    /// The object at `bucket/key`.
    pub fn head_object(&self, bucket: &str, key: &str) -> Result<Object> {
        let b = self.bucket(bucket)?;
        let _g = self.stripe(bucket, key);
        Buckets::current(&b, key)?.ok_or_else(|| StoreError::NotFound(key.to_owned()))
    }

    /// Read `bucket/key`: `plan` sees the object first and says which bytes
    /// to read (`None`: all), or refuses with its own error `E`.
    pub fn get_object<E>(
        &self,
        bucket: &str,
        key: &str,
        plan: impl FnOnce(&Object) -> std::result::Result<Option<Range<u64>>, E>,
    ) -> Result<std::result::Result<(Object, Bytes), E>> {
        let b = self.bucket(bucket)?;
        let _g = self.stripe(bucket, key);
        let o = Buckets::current(&b, key)?.ok_or_else(|| StoreError::NotFound(key.to_owned()))?;
        let range = match plan(&o) {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        let body = match range {
            None => b.data.get(key)?,
            Some(r) if r.is_empty() => Bytes::new(),
            Some(r) => b.data.get_range(key, r)?,
        };
        Ok(Ok((o, body)))
    }

    /// Create or replace `bucket/key` with `body`, if `pre` holds.
    pub fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: Bytes,
        pre: Precondition,
        attrs: Attrs,
    ) -> Result<Object> {
        self.write_object(bucket, key, body, pre, NewObject { attrs, ..Default::default() })
    }

    /// [`Buckets::put_object`] with everything a write can store.
    pub fn write_object(
        &self,
        bucket: &str,
        key: &str,
        body: Bytes,
        pre: Precondition,
        new: NewObject,
    ) -> Result<Object> {
        let b = self.bucket(bucket)?;
        objstore::check_key(key)?;
        let _g = self.stripe(bucket, key);
        Buckets::check_precondition(&b, key, &pre)?;
        let md5 = (!b.directory && new.etag.is_none()).then(|| md5_etag(&body));
        b.info.delete(key)?;
        let m = b.data.put(key, body)?;
        let etag = new.etag.or(md5).unwrap_or_else(|| m.etag.clone());
        // A directory bucket's plain PUT needs no record: its ETag is the
        // version tag, and it has no headers to keep.
        if etag != m.etag || !new.attrs.is_empty() || !new.part_sizes.is_empty() {
            let info = Info {
                version: m.etag.clone(),
                etag: etag.clone(),
                attrs: new.attrs.clone(),
                part_sizes: new.part_sizes.clone(),
            };
            let json = serde_json::to_vec(&info).expect("an info record serializes");
            b.info.put(key, Bytes::from(json))?;
        }
        Ok(Object {
            key: key.to_owned(),
            size: m.size,
            etag,
            modified: m.modified.unwrap_or_else(SystemTime::now),
            attrs: new.attrs,
            part_sizes: new.part_sizes,
            parts: m.parts,
        })
    }

    /// Append `body` at `offset` (S3 Express), if `pre` holds. The object
    /// keeps its headers and metadata; its ETag becomes the new version's.
    pub fn append_object(
        &self,
        bucket: &str,
        key: &str,
        offset: u64,
        body: Bytes,
        pre: Precondition,
    ) -> Result<Object> {
        let b = self.bucket(bucket)?;
        let _g = self.stripe(bucket, key);
        Buckets::check_precondition(&b, key, &pre)?;
        let m = b.data.append(key, offset, body)?;
        // No record read: the new version tag is never a record's version,
        // so the ETag is the tag, and an append's answer has no headers.
        Ok(Object {
            key: key.to_owned(),
            size: m.size,
            etag: m.etag,
            modified: m.modified.unwrap_or_else(SystemTime::now),
            attrs: Attrs::default(),
            part_sizes: Vec::new(),
            parts: m.parts,
        })
    }

    /// Delete `bucket/key`; a missing key is not an error.
    pub fn delete_object(&self, bucket: &str, key: &str) -> Result<()> {
        let b = self.bucket(bucket)?;
        let _g = self.stripe(bucket, key);
        b.info.delete(key)?;
        b.data.delete(key)
    }

    /// Every object whose key starts with `prefix`, in key order.
    pub fn list_objects(&self, bucket: &str, prefix: &str) -> Result<Vec<Object>> {
        let b = self.bucket(bucket)?;
        let mut out = Vec::new();
        for m in b.data.list(prefix)? {
            let key = m.key.clone();
            match Buckets::describe(&b, &key, m) {
                Ok(o) => out.push(o),
                // Deleted between the listing and its record: skip it.
                Err(StoreError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buckets::Backing;

    fn obj(etag: &str, modified_secs: u64) -> Object {
        Object {
            key: "k".into(),
            size: 1,
            etag: etag.into(),
            modified: UNIX_EPOCH + std::time::Duration::from_millis(modified_secs * 1000 + 500),
            attrs: Attrs::default(),
            part_sizes: Vec::new(),
            parts: Some(1),
        }
    }

    fn at(secs: u64) -> Option<SystemTime> {
        Some(UNIX_EPOCH + std::time::Duration::from_secs(secs))
    }

    #[test]
    fn conditions_follow_s3_precedence() {
        let o = obj("\"abc\"", 100);
        let c = |f: fn(&mut ReadConditions)| {
            let mut c = ReadConditions::default();
            f(&mut c);
            c.check(&o)
        };
        assert_eq!(c(|_| {}), Ok(()));
        assert_eq!(c(|c| c.if_match = Some(Tag::Is("abc".into()))), Ok(()));
        assert_eq!(c(|c| c.if_match = Some(Tag::Is("\"abc\"".into()))), Ok(()));
        assert_eq!(c(|c| c.if_match = Some(Tag::Is("x".into()))), Err(Refusal::PreconditionFailed));
        // If-Match true wins over a failing If-Unmodified-Since.
        assert_eq!(
            c(|c| {
                c.if_match = Some(Tag::Any);
                c.if_unmodified_since = at(50);
            }),
            Ok(())
        );
        assert_eq!(c(|c| c.if_unmodified_since = at(50)), Err(Refusal::PreconditionFailed));
        // Whole seconds: modified at 100.5 is not after 100.
        assert_eq!(c(|c| c.if_unmodified_since = at(100)), Ok(()));
        assert_eq!(c(|c| c.if_none_match = Some(Tag::Any)), Err(Refusal::NotModified));
        assert_eq!(c(|c| c.if_none_match = Some(Tag::Is("x".into()))), Ok(()));
        // If-None-Match decides when present, If-Modified-Since does not.
        assert_eq!(
            c(|c| {
                c.if_none_match = Some(Tag::Is("x".into()));
                c.if_modified_since = at(200);
            }),
            Ok(())
        );
        assert_eq!(c(|c| c.if_modified_since = at(100)), Err(Refusal::NotModified));
        assert_eq!(c(|c| c.if_modified_since = at(99)), Ok(()));
        // 412 comes before 304.
        assert_eq!(
            c(|c| {
                c.if_match = Some(Tag::Is("x".into()));
                c.if_none_match = Some(Tag::Any);
            }),
            Err(Refusal::PreconditionFailed)
        );
    }

    #[test]
    fn etags_are_computed_as_aws_does() {
        // MD5("") and the multipart ETag of two empty parts.
        assert_eq!(md5_etag(b""), "\"d41d8cd98f00b204e9800998ecf8427e\"");
        let empty: [u8; 16] = Md5::digest(b"").into();
        assert_eq!(multipart_etag(&[empty, empty]), {
            let mut cat = Vec::new();
            cat.extend_from_slice(&empty);
            cat.extend_from_slice(&empty);
            format!("\"{}-2\"", hex::encode(Md5::digest(&cat)))
        });
    }

    #[test]
    fn appends_keep_headers_and_change_the_etag() {
        let b = Buckets::open(Backing::Memory, 10_000).expect("open");
        b.create("gp").expect("create");
        let mut attrs = Attrs { content_type: Some("text/plain".into()), ..Default::default() };
        attrs.metadata.insert("color".into(), "blue".into());
        let put = b
            .put_object("gp", "k", Bytes::from_static(b"hello"), Precondition::None, attrs.clone())
            .expect("put");
        assert_eq!(put.etag, md5_etag(b"hello"));
        let head = b.head_object("gp", "k").expect("head");
        assert_eq!((head.etag.as_str(), &head.attrs), (put.etag.as_str(), &attrs));
        let app = b
            .append_object("gp", "k", 5, Bytes::from_static(b" world"), Precondition::None)
            .expect("append");
        assert_ne!(app.etag, put.etag);
        let head = b.head_object("gp", "k").expect("head");
        assert_eq!((head.etag.as_str(), head.size, &head.attrs), (app.etag.as_str(), 11, &attrs));
        // A stale If-Match fails; the current ETag works.
        let stale = Precondition::IfMatch(put.etag.clone());
        assert!(matches!(
            b.append_object("gp", "k", 11, Bytes::from_static(b"!"), stale),
            Err(StoreError::PreconditionFailed(_))
        ));
        b.append_object("gp", "k", 11, Bytes::from_static(b"!"), Precondition::IfMatch(app.etag))
            .expect("conditional append");
        // A PUT replaces headers; deleting drops them with the bytes.
        b.put_object("gp", "k", Bytes::from_static(b"x"), Precondition::None, Attrs::default())
            .expect("put");
        assert!(b.head_object("gp", "k").expect("head").attrs.is_empty());
        b.delete_object("gp", "k").expect("delete");
        b.append_object("gp", "k", 0, Bytes::from_static(b"new"), Precondition::None)
            .expect("append creates");
        assert!(b.head_object("gp", "k").expect("head").attrs.is_empty());
        // Deleting an object with headers drops them too: an append that
        // creates the key again starts bare.
        b.put_object("gp", "k2", Bytes::from_static(b"x"), Precondition::None, attrs.clone())
            .expect("put");
        b.delete_object("gp", "k2").expect("delete");
        b.append_object("gp", "k2", 0, Bytes::from_static(b"y"), Precondition::None)
            .expect("append creates");
        assert!(b.head_object("gp", "k2").expect("head").attrs.is_empty());
    }

    #[test]
    fn directory_buckets_have_opaque_etags() {
        let b = Buckets::open(Backing::Memory, 10_000).expect("open");
        b.create("d--use1-az4--x-s3").expect("create");
        let o = b
            .put_object(
                "d--use1-az4--x-s3",
                "k",
                Bytes::from_static(b"hello"),
                Precondition::None,
                Attrs::default(),
            )
            .expect("put");
        assert_ne!(o.etag, md5_etag(b"hello"));
        assert_eq!(b.head_object("d--use1-az4--x-s3", "k").expect("head").etag, o.etag);
    }

    #[test]
    fn multipart_part_ranges() {
        let mut o = obj("\"e-3\"", 1);
        o.size = 12;
        o.part_sizes = vec![(1, 5), (2, 5), (4, 2)];
        assert_eq!(o.part_range(1), Some(0..5));
        assert_eq!(o.part_range(4), Some(10..12));
        assert_eq!(o.part_range(3), None);
        assert_eq!(o.part_range(5), None);
        assert_eq!(o.part_range(0), None);
        assert_eq!(o.parts_count(), 3);
        o.part_sizes.clear();
        assert_eq!(o.part_range(1), Some(0..12));
        assert_eq!(o.part_range(2), None);
    }
}
