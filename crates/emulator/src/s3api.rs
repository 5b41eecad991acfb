//! The S3 operations, mapped onto the store.
//!
//! Every client request that touches objects makes exactly one call on the
//! `sim` store (so the latency model, the faults and the accounting see it
//! once). Bookkeeping the protocol needs on top, such as the total size for
//! a `Content-Range` or the existence of a bucket, asks the buckets
//! directly, outside the model.

use std::sync::Arc;

use bytes::Bytes;
use objstore::{ObjectMeta, ObjectStore, StoreError};
use s3s::dto::{self, ETag, ETagCondition, StreamingBlob, Timestamp};
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

use crate::buckets::{BucketError, Buckets, valid_bucket_name};

/// Largest request body held in memory (S3's single-PUT limit).
pub const BODY_BYTES_MAX: usize = 5 << 30;
/// Most keys in one ListObjectsV2 page (S3's limit and default).
pub const LIST_KEYS_MAX: usize = 1000;

/// The S3 service: a `sim` store over the buckets, and the buckets.
pub struct S3Api {
    pub(crate) store: Arc<dyn ObjectStore>,
    pub(crate) buckets: Arc<Buckets>,
}

/// Run a blocking store call off the async threads (the sim store sleeps).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> objstore::Result<T> + Send + 'static,
) -> objstore::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(StoreError::Fatal(format!("store task failed: {e}"))))
}

fn custom(code: &'static str, status: http::StatusCode, msg: String) -> S3Error {
    let mut e = S3Error::with_message(S3ErrorCode::Custom(code.into()), msg);
    e.set_status_code(status);
    e
}

/// A store error as AWS would answer it.
fn s3_err(e: StoreError) -> S3Error {
    use http::StatusCode as C;
    match e {
        StoreError::NotFound(k) => s3_error!(NoSuchKey, "no such key: {k}"),
        StoreError::AlreadyExists(k) => {
            s3_error!(PreconditionFailed, "If-None-Match: the object exists: {k}")
        }
        StoreError::PreconditionFailed(m) => s3_error!(PreconditionFailed, "{m}"),
        StoreError::InvalidWriteOffset { actual_size } => custom(
            "InvalidWriteOffset",
            C::BAD_REQUEST,
            format!("the write offset is not the object's size, {actual_size}"),
        ),
        StoreError::TooManyParts { parts } => custom(
            "TooManyParts",
            C::BAD_REQUEST,
            format!("an object may have at most {parts} parts"),
        ),
        StoreError::InvalidRange { start, size } => {
            s3_error!(InvalidRange, "range start {start} is not below the size {size}")
        }
        StoreError::InvalidRequest(m) => s3_error!(InvalidRequest, "{m}"),
        StoreError::Throttled(m) => s3_error!(SlowDown, "{m}"),
        StoreError::Transient(m) | StoreError::Fatal(m) => s3_error!(InternalError, "{m}"),
    }
}

fn etag(m: &str) -> ETag {
    ETag::Strong(m.trim_matches('"').to_owned())
}

fn path(bucket: &str, key: &str) -> String {
    format!("{bucket}/{key}")
}

impl S3Api {
    fn need_bucket(&self, bucket: &str) -> S3Result<()> {
        if self.buckets.exists(bucket) {
            Ok(())
        } else {
            Err(s3_error!(NoSuchBucket, "no such bucket: {bucket}"))
        }
    }

    /// The object's metadata, outside the model (protocol bookkeeping).
    fn peek(&self, bucket: &str, key: &str) -> S3Result<Option<ObjectMeta>> {
        match self.buckets.head(&path(bucket, key)) {
            Ok(m) => Ok(Some(m)),
            Err(StoreError::NotFound(_)) => Ok(None),
            Err(e) => Err(s3_err(e)),
        }
    }
}

/// Check the body against every checksum the client sent, in headers or in
/// trailers (the AWS SDKs send CRC32 by default): a body damaged on the way
/// must never be stored.
fn verify_checksums(
    input: &dto::PutObjectInput,
    trailers: Option<&s3s::TrailingHeaders>,
    body: &[u8],
) -> S3Result<()> {
    use s3s::checksum::ChecksumHasher;
    let from_trailer = |name: &str| {
        trailers.and_then(|t| {
            t.read(|h| h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)).flatten()
        })
    };
    let want = dto::Checksum {
        checksum_crc32: input
            .checksum_crc32
            .clone()
            .or_else(|| from_trailer("x-amz-checksum-crc32")),
        checksum_crc32c: input
            .checksum_crc32c
            .clone()
            .or_else(|| from_trailer("x-amz-checksum-crc32c")),
        checksum_sha1: input.checksum_sha1.clone().or_else(|| from_trailer("x-amz-checksum-sha1")),
        checksum_sha256: input
            .checksum_sha256
            .clone()
            .or_else(|| from_trailer("x-amz-checksum-sha256")),
        checksum_crc64nvme: input
            .checksum_crc64nvme
            .clone()
            .or_else(|| from_trailer("x-amz-checksum-crc64nvme")),
        ..Default::default()
    };
    let mut h = ChecksumHasher::default();
    if want.checksum_crc32.is_some() {
        h.crc32 = Some(Default::default());
    }
    if want.checksum_crc32c.is_some() {
        h.crc32c = Some(Default::default());
    }
    if want.checksum_sha1.is_some() {
        h.sha1 = Some(Default::default());
    }
    if want.checksum_sha256.is_some() {
        h.sha256 = Some(Default::default());
    }
    if want.checksum_crc64nvme.is_some() {
        h.crc64nvme = Some(Default::default());
    }
    h.update(body);
    let got = h.finalize();
    let pairs = [
        ("CRC32", &want.checksum_crc32, &got.checksum_crc32),
        ("CRC32C", &want.checksum_crc32c, &got.checksum_crc32c),
        ("SHA1", &want.checksum_sha1, &got.checksum_sha1),
        ("SHA256", &want.checksum_sha256, &got.checksum_sha256),
        ("CRC64NVME", &want.checksum_crc64nvme, &got.checksum_crc64nvme),
    ];
    for (name, w, g) in pairs {
        if let Some(w) = w
            && Some(w) != g.as_ref()
        {
            return Err(s3_error!(BadDigest, "the {name} checksum does not match the body"));
        }
    }
    Ok(())
}

#[async_trait::async_trait]
impl S3 for S3Api {
    async fn create_bucket(
        &self,
        req: S3Request<dto::CreateBucketInput>,
    ) -> S3Result<S3Response<dto::CreateBucketOutput>> {
        let name = req.input.bucket;
        if !valid_bucket_name(&name) {
            return Err(s3_error!(InvalidBucketName, "invalid bucket name {name:?}"));
        }
        match self.buckets.create(&name) {
            Ok(()) => {
                Ok(S3Response::new(dto::CreateBucketOutput { location: Some(format!("/{name}")) }))
            }
            Err(BucketError::AlreadyExists) => {
                Err(s3_error!(BucketAlreadyOwnedByYou, "bucket {name} exists"))
            }
            Err(e) => Err(s3_error!(InternalError, "creating bucket {name}: {e:?}")),
        }
    }

    async fn delete_bucket(
        &self,
        req: S3Request<dto::DeleteBucketInput>,
    ) -> S3Result<S3Response<dto::DeleteBucketOutput>> {
        let name = req.input.bucket;
        match self.buckets.delete(&name) {
            Ok(()) => Ok(S3Response::new(dto::DeleteBucketOutput {})),
            Err(BucketError::NoSuchBucket) => Err(s3_error!(NoSuchBucket, "no bucket {name}")),
            Err(BucketError::NotEmpty) => {
                Err(s3_error!(BucketNotEmpty, "bucket {name} is not empty"))
            }
            Err(e) => Err(s3_error!(InternalError, "deleting bucket {name}: {e:?}")),
        }
    }

    async fn head_bucket(
        &self,
        req: S3Request<dto::HeadBucketInput>,
    ) -> S3Result<S3Response<dto::HeadBucketOutput>> {
        self.need_bucket(&req.input.bucket)?;
        Ok(S3Response::new(dto::HeadBucketOutput::default()))
    }

    async fn list_buckets(
        &self,
        _req: S3Request<dto::ListBucketsInput>,
    ) -> S3Result<S3Response<dto::ListBucketsOutput>> {
        let buckets = self
            .buckets
            .list_buckets()
            .into_iter()
            .map(|(name, created)| dto::Bucket {
                name: Some(name),
                creation_date: Some(Timestamp::from(created)),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(dto::ListBucketsOutput {
            buckets: Some(buckets),
            owner: Some(dto::Owner {
                display_name: Some("milliscale".into()),
                id: Some("milliscale".into()),
            }),
            ..Default::default()
        }))
    }

    async fn put_object(
        &self,
        req: S3Request<dto::PutObjectInput>,
    ) -> S3Result<S3Response<dto::PutObjectOutput>> {
        let mut req = req;
        self.need_bucket(&req.input.bucket)?;
        let body = match req.input.body.take() {
            Some(blob) => s3s::Body::from(blob)
                .store_all_limited(BODY_BYTES_MAX)
                .await
                .map_err(|e| s3_error!(IncompleteBody, "reading the request body failed: {e}"))?,
            None => Bytes::new(),
        };
        let input = &req.input;
        verify_checksums(input, req.trailing_headers.as_ref(), &body)?;
        let has_metadata = input.metadata.as_ref().is_some_and(|m| !m.is_empty());
        let key = path(&input.bucket, &input.key);
        let store = self.store.clone();
        let (is_append, call): (bool, Box<dyn FnOnce() -> objstore::Result<ObjectMeta> + Send>) =
            match (input.write_offset_bytes, &input.if_none_match, &input.if_match) {
                (Some(off), None, None) => {
                    if has_metadata {
                        return Err(s3_error!(
                            InvalidRequest,
                            "an append cannot set user metadata"
                        ));
                    }
                    let off = u64::try_from(off).map_err(|_| {
                        s3_error!(InvalidArgument, "x-amz-write-offset-bytes must be >= 0")
                    })?;
                    (true, Box::new(move || store.append(&key, off, body)))
                }
                (Some(_), _, _) => {
                    return Err(s3_error!(
                        NotImplemented,
                        "conditional headers on an append are not supported"
                    ));
                }
                _ if has_metadata => {
                    return Err(s3_error!(
                        NotImplemented,
                        "this emulator does not store user metadata"
                    ));
                }
                (None, Some(ETagCondition::Any), None) => {
                    (false, Box::new(move || store.put_if_absent(&key, body)))
                }
                (None, Some(_), _) => {
                    return Err(s3_error!(
                        NotImplemented,
                        "If-None-Match on PUT supports only '*'"
                    ));
                }
                (None, None, Some(ETagCondition::ETag(e))) => {
                    let want = format!("\"{}\"", e.value());
                    (false, Box::new(move || store.put_if_match(&key, body, &want)))
                }
                (None, None, Some(ETagCondition::Any)) => {
                    // If-Match: * replaces an object that exists; the etag
                    // pins the object seen, so a racing delete fails it.
                    let Some(m) = self.peek(&input.bucket, &input.key)? else {
                        return Err(s3_error!(NoSuchKey, "If-Match: *: no such key"));
                    };
                    (false, Box::new(move || store.put_if_match(&key, body, &m.etag)))
                }
                (None, None, None) => (false, Box::new(move || store.put(&key, body))),
            };
        let m = blocking(call).await.map_err(s3_err)?;
        Ok(S3Response::new(dto::PutObjectOutput {
            e_tag: Some(etag(&m.etag)),
            size: is_append.then_some(m.size as i64),
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<dto::GetObjectInput>,
    ) -> S3Result<S3Response<dto::GetObjectOutput>> {
        let input = req.input;
        self.need_bucket(&input.bucket)?;
        if input.if_match.is_some()
            || input.if_none_match.is_some()
            || input.if_modified_since.is_some()
            || input.if_unmodified_since.is_some()
            || input.part_number.is_some()
        {
            return Err(s3_error!(
                NotImplemented,
                "conditional and part-number GETs are not supported"
            ));
        }
        let key = path(&input.bucket, &input.key);
        let store = self.store.clone();
        let (body, content_range, status, meta) = match input.range {
            None => {
                let body = blocking(move || store.get(&key)).await.map_err(s3_err)?;
                (body, None, None, self.peek(&input.bucket, &input.key)?)
            }
            Some(range) => {
                let Some(m) = self.peek(&input.bucket, &input.key)? else {
                    return Err(s3_error!(NoSuchKey, "no such key: {}", input.key));
                };
                let r = range.check(m.size).map_err(|_| {
                    s3_error!(InvalidRange, "the range is not satisfiable for size {}", m.size)
                })?;
                let (start, end) = (r.start, r.end);
                let body =
                    blocking(move || store.get_range(&key, start..end)).await.map_err(s3_err)?;
                // The store never returns an empty body for start < size.
                let last = (start + body.len() as u64).saturating_sub(1);
                let cr = format!("bytes {start}-{last}/{}", m.size.max(last + 1));
                (body, Some(cr), Some(http::StatusCode::PARTIAL_CONTENT), Some(m))
            }
        };
        let len = body.len() as i64;
        let out = dto::GetObjectOutput {
            body: Some(StreamingBlob::from(s3s::Body::from(body))),
            content_length: Some(len),
            content_range,
            content_type: Some("application/octet-stream".parse().expect("a mime type")),
            e_tag: meta.map(|m| etag(&m.etag)),
            accept_ranges: Some("bytes".into()),
            ..Default::default()
        };
        let mut resp = S3Response::new(out);
        resp.status = status;
        Ok(resp)
    }

    async fn head_object(
        &self,
        req: S3Request<dto::HeadObjectInput>,
    ) -> S3Result<S3Response<dto::HeadObjectOutput>> {
        let input = req.input;
        self.need_bucket(&input.bucket)?;
        let key = path(&input.bucket, &input.key);
        let store = self.store.clone();
        let m = blocking(move || store.head(&key)).await.map_err(s3_err)?;
        Ok(S3Response::new(dto::HeadObjectOutput {
            content_length: Some(m.size as i64),
            content_type: Some("application/octet-stream".parse().expect("a mime type")),
            e_tag: Some(etag(&m.etag)),
            accept_ranges: Some("bytes".into()),
            ..Default::default()
        }))
    }

    async fn delete_object(
        &self,
        req: S3Request<dto::DeleteObjectInput>,
    ) -> S3Result<S3Response<dto::DeleteObjectOutput>> {
        let input = req.input;
        self.need_bucket(&input.bucket)?;
        let key = path(&input.bucket, &input.key);
        let store = self.store.clone();
        match blocking(move || store.delete(&key)).await {
            Ok(()) | Err(StoreError::NotFound(_)) => {
                Ok(S3Response::new(dto::DeleteObjectOutput::default()))
            }
            Err(e) => Err(s3_err(e)),
        }
    }

    async fn delete_objects(
        &self,
        req: S3Request<dto::DeleteObjectsInput>,
    ) -> S3Result<S3Response<dto::DeleteObjectsOutput>> {
        let input = req.input;
        self.need_bucket(&input.bucket)?;
        if input.delete.objects.len() > LIST_KEYS_MAX {
            return Err(s3_error!(MalformedXML, "at most {LIST_KEYS_MAX} keys per DeleteObjects"));
        }
        let quiet = input.delete.quiet.unwrap_or(false);
        let (mut deleted, mut errors) = (Vec::new(), Vec::new());
        for o in input.delete.objects {
            let key = path(&input.bucket, &o.key);
            let store = self.store.clone();
            match blocking(move || store.delete(&key)).await {
                Ok(()) | Err(StoreError::NotFound(_)) => {
                    if !quiet {
                        deleted.push(dto::DeletedObject { key: Some(o.key), ..Default::default() });
                    }
                }
                Err(e) => {
                    let e = s3_err(e);
                    errors.push(dto::Error {
                        code: Some(e.code().as_str().to_owned()),
                        key: Some(o.key),
                        message: e.message().map(str::to_owned),
                        ..Default::default()
                    });
                }
            }
        }
        Ok(S3Response::new(dto::DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: Some(errors),
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<dto::ListObjectsV2Input>,
    ) -> S3Result<S3Response<dto::ListObjectsV2Output>> {
        let input = req.input;
        self.need_bucket(&input.bucket)?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let max_keys = match input.max_keys {
            None => LIST_KEYS_MAX,
            Some(n) if n < 0 => return Err(s3_error!(InvalidArgument, "max-keys must be >= 0")),
            Some(n) => (n as usize).min(LIST_KEYS_MAX),
        };
        // The continuation token is the last key (or common prefix) of the
        // previous page, hex-encoded so that it stays opaque and URL-safe.
        let after = match &input.continuation_token {
            Some(t) => Some(unhex(t).ok_or_else(|| {
                s3_error!(InvalidArgument, "the continuation token is not valid")
            })?),
            None => input.start_after.clone(),
        };
        let full = path(&input.bucket, &prefix);
        let store = self.store.clone();
        let all = blocking(move || store.list(&full)).await.map_err(s3_err)?;
        let strip = input.bucket.len() + 1;
        let delim = input.delimiter.clone().filter(|d| !d.is_empty());
        let (mut contents, mut prefixes, mut last, mut truncated) =
            (Vec::new(), Vec::<String>::new(), None::<String>, false);
        for m in all {
            let key = &m.key[strip..];
            if after.as_deref().is_some_and(|a| key <= a) {
                continue;
            }
            // With a delimiter, keys that share the part up to the next
            // delimiter after the prefix roll up into one common prefix.
            let common = delim.as_deref().and_then(|d| {
                key[prefix.len()..].find(d).map(|i| key[..prefix.len() + i + d.len()].to_owned())
            });
            // Skip a common prefix already listed on this page, or ending
            // the previous page (its keys sort after it, so `after` alone
            // does not skip them).
            if let Some(cp) = &common
                && (prefixes.last() == Some(cp) || after.as_ref() == Some(cp))
            {
                continue;
            }
            if contents.len() + prefixes.len() == max_keys {
                truncated = true;
                break;
            }
            match common {
                Some(cp) => {
                    last = Some(cp.clone());
                    prefixes.push(cp);
                }
                None => {
                    last = Some(key.to_owned());
                    contents.push(dto::Object {
                        key: Some(key.to_owned()),
                        size: Some(m.size as i64),
                        e_tag: Some(etag(&m.etag)),
                        storage_class: Some(dto::ObjectStorageClass::from_static(
                            dto::ObjectStorageClass::STANDARD,
                        )),
                        ..Default::default()
                    });
                }
            }
        }
        let key_count = (contents.len() + prefixes.len()) as i32;
        Ok(S3Response::new(dto::ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: Some(prefix),
            delimiter: delim,
            max_keys: Some(max_keys as i32),
            key_count: Some(key_count),
            continuation_token: input.continuation_token,
            start_after: input.start_after,
            is_truncated: Some(truncated),
            next_continuation_token: if truncated { last.map(|k| hex(&k)) } else { None },
            contents: Some(contents),
            common_prefixes: Some(
                prefixes.into_iter().map(|p| dto::CommonPrefix { prefix: Some(p) }).collect(),
            ),
            ..Default::default()
        }))
    }
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect();
    String::from_utf8(bytes?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuation_tokens_round_trip() {
        for k in ["", "a/b", "log/000001", "ünï"] {
            assert_eq!(unhex(&hex(k)).as_deref(), Some(k));
        }
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("abc"), None);
    }

    #[test]
    fn bodies_must_match_their_checksums() {
        let input = |crc32c: &str| dto::PutObjectInput {
            checksum_crc32c: Some(crc32c.to_owned()),
            ..dto::PutObjectInput::builder()
                .bucket("b".into())
                .key("k".into())
                .build()
                .expect("input")
        };
        // CRC32C("hello") = 0x9a71bb4c, base64 of its big-endian bytes.
        verify_checksums(&input("mnG7TA=="), None, b"hello").expect("the right checksum");
        let e = verify_checksums(&input("mnG7TA=="), None, b"hellp").expect_err("a damaged body");
        assert_eq!(e.code(), &S3ErrorCode::BadDigest);
        verify_checksums(&dto::PutObjectInput { checksum_crc32c: None, ..input("") }, None, b"x")
            .expect("no checksum, nothing to check");
    }
}
