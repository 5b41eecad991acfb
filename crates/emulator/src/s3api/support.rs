//! What the S3 operations share: errors, ETags and times, owners, the
//! headers S3 keeps beside an object, checksums, preconditions, and the
//! macros that read them from a request.

use crate::multipart::{self, UploadError};
use crate::objects::{Attrs, Object, Precondition, ReadConditions, Refusal, Tag};
use bytes::Bytes;
use objstore::StoreError;
use s3s::dto::{self, ETag, ETagCondition, StreamingBlob, Timestamp};
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};
use std::time::{Duration, SystemTime};

macro_rules! attrs_in {
    ($input:expr) => {
        AttrsIn {
            content_type: $input.content_type.clone(),
            content_encoding: $input.content_encoding.clone(),
            content_disposition: $input.content_disposition.clone(),
            content_language: $input.content_language.clone(),
            cache_control: $input.cache_control.clone(),
            expires: $input.expires.clone(),
            metadata: $input.metadata.clone(),
        }
    };
}

/// The checksums a write request carries in its headers.
macro_rules! checksums_in {
    ($input:expr) => {
        dto::Checksum {
            checksum_crc32: $input.checksum_crc32.clone(),
            checksum_crc32c: $input.checksum_crc32c.clone(),
            checksum_sha1: $input.checksum_sha1.clone(),
            checksum_sha256: $input.checksum_sha256.clone(),
            checksum_crc64nvme: $input.checksum_crc64nvme.clone(),
            ..Default::default()
        }
    };
}

/// A store error as AWS would answer it.
pub(super) fn s3_err(e: StoreError) -> S3Error {
    use http::StatusCode as C;
    match e {
        StoreError::NotFound(k) if k.starts_with("bucket ") => {
            s3_error!(NoSuchBucket, "no such bucket: {}", &k["bucket ".len()..])
        }
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
        StoreError::InvalidRequest(m) if m.starts_with("keys must be") => {
            s3_error!(KeyTooLongError, "{m}")
        }
        StoreError::InvalidRequest(m) => s3_error!(InvalidRequest, "{m}"),
        StoreError::Throttled(m) => s3_error!(SlowDown, "{m}"),
        StoreError::Transient(m) | StoreError::Fatal(m) => s3_error!(InternalError, "{m}"),
    }
}

pub(super) fn upload_err(e: UploadError) -> S3Error {
    match e {
        UploadError::Store(e) => s3_err(e),
        UploadError::NoSuchUpload => s3_error!(NoSuchUpload, "no such upload"),
        UploadError::InvalidPart(m) => s3_error!(InvalidPart, "{m}"),
        UploadError::InvalidPartOrder(m) => s3_error!(InvalidPartOrder, "{m}"),
        UploadError::EntityTooSmall(m) => s3_error!(EntityTooSmall, "{m}"),
        UploadError::InvalidArgument(m) => s3_error!(InvalidArgument, "{m}"),
    }
}

pub(super) fn refusal_err(r: Refusal) -> S3Error {
    match r {
        Refusal::PreconditionFailed => {
            s3_error!(PreconditionFailed, "at least one of the preconditions did not hold")
        }
        Refusal::NotModified => {
            let mut e = S3Error::with_message(S3ErrorCode::NotModified, "not modified");
            e.set_status_code(http::StatusCode::NOT_MODIFIED);
            e
        }
    }
}

pub(super) fn etag(m: &str) -> ETag {
    ETag::Strong(m.trim_matches('"').to_owned())
}

pub(super) fn tag(c: &ETagCondition) -> Tag {
    match c {
        ETagCondition::Any => Tag::Any,
        ETagCondition::ETag(e) => Tag::Is(e.value().to_owned()),
    }
}

pub(super) fn system_time(t: &Timestamp) -> SystemTime {
    let odt: time::OffsetDateTime = t.clone().into();
    let secs = odt.unix_timestamp();
    if secs >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64)
    } else {
        SystemTime::UNIX_EPOCH
    }
}

pub(super) fn timestamp_secs(secs: i64) -> Option<Timestamp> {
    time::OffsetDateTime::from_unix_timestamp(secs).ok().map(Timestamp::from)
}

pub(super) fn owner() -> dto::Owner {
    dto::Owner { display_name: Some(OWNER.into()), id: Some(OWNER.into()) }
}

/// The one ACL there is: the owner has full control (every user is the
/// owner here).
pub(super) fn owner_grants() -> dto::Grants {
    vec![dto::Grant {
        grantee: Some(dto::Grantee {
            display_name: Some(OWNER.into()),
            id: Some(OWNER.into()),
            type_: dto::Type::from_static(dto::Type::CANONICAL_USER),
            email_address: None,
            uri: None,
        }),
        permission: Some(dto::Permission::from_static(dto::Permission::FULL_CONTROL)),
    }]
}

pub(super) fn storage_class() -> dto::ObjectStorageClass {
    dto::ObjectStorageClass::from_static(dto::ObjectStorageClass::STANDARD)
}

pub(super) fn wants_url(e: &Option<dto::EncodingType>) -> S3Result<bool> {
    match e {
        None => Ok(false),
        Some(e) if e.as_str() == dto::EncodingType::URL => Ok(true),
        Some(e) => Err(s3_error!(InvalidArgument, "invalid encoding-type {:?}", e.as_str())),
    }
}

/// The headers a write stores with the object.
pub(super) struct AttrsIn {
    pub(super) content_type: Option<String>,
    pub(super) content_encoding: Option<String>,
    pub(super) content_disposition: Option<String>,
    pub(super) content_language: Option<String>,
    pub(super) cache_control: Option<String>,
    pub(super) expires: Option<Timestamp>,
    pub(super) metadata: Option<dto::Metadata>,
}

impl AttrsIn {
    pub(super) fn into_attrs(self) -> Attrs {
        Attrs {
            content_type: self.content_type,
            // `aws-chunked` describes the request's framing, not the
            // object: S3 drops it.
            content_encoding: self.content_encoding.and_then(|e| {
                let kept: Vec<&str> = e
                    .split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty() && !t.eq_ignore_ascii_case("aws-chunked"))
                    .collect();
                (!kept.is_empty()).then(|| kept.join(", "))
            }),
            content_disposition: self.content_disposition,
            content_language: self.content_language,
            cache_control: self.cache_control,
            expires: self.expires.map(|t| time::OffsetDateTime::from(t).unix_timestamp()),
            metadata: self
                .metadata
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v))
                .collect(),
        }
    }
}

/// Read a request body of at most [`BODY_BYTES_MAX`] bytes.
pub(super) async fn read_body(
    blob: Option<StreamingBlob>,
    content_length: Option<i64>,
) -> S3Result<Bytes> {
    if content_length.is_some_and(|n| n > BODY_BYTES_MAX as i64) {
        return Err(s3_error!(
            EntityTooLarge,
            "the body is {} bytes; at most {BODY_BYTES_MAX} in one request",
            content_length.unwrap_or(0)
        ));
    }
    match blob {
        Some(blob) => s3s::Body::from(blob).store_all_limited(BODY_BYTES_MAX).await.map_err(|e| {
            if e.to_string().contains("limit") {
                s3_error!(EntityTooLarge, "the body is over {BODY_BYTES_MAX} bytes")
            } else {
                s3_error!(IncompleteBody, "reading the request body failed: {e}")
            }
        }),
        None => Ok(Bytes::new()),
    }
}

/// Check the body against every checksum the client sent, in headers or in
/// trailers (the AWS SDKs send CRC32 by default): a body damaged on the way
/// must never be stored.
pub(super) fn verify_checksums(
    sent: dto::Checksum,
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
        checksum_crc32: sent.checksum_crc32.or_else(|| from_trailer("x-amz-checksum-crc32")),
        checksum_crc32c: sent.checksum_crc32c.or_else(|| from_trailer("x-amz-checksum-crc32c")),
        checksum_sha1: sent.checksum_sha1.or_else(|| from_trailer("x-amz-checksum-sha1")),
        checksum_sha256: sent.checksum_sha256.or_else(|| from_trailer("x-amz-checksum-sha256")),
        checksum_crc64nvme: sent
            .checksum_crc64nvme
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

/// `Content-MD5`, if sent, must be the body's.
pub(super) fn verify_content_md5(sent: Option<&str>, body: &[u8]) -> S3Result<()> {
    use base64::Engine as _;
    let Some(sent) = sent else { return Ok(()) };
    let want = base64::engine::general_purpose::STANDARD
        .decode(sent.trim())
        .ok()
        .filter(|d| d.len() == 16)
        .ok_or_else(|| s3_error!(InvalidDigest, "the Content-MD5 is not a base64 MD5"))?;
    let got = crate::objects::md5_etag(body);
    if got.trim_matches('"') != hex::encode(want) {
        return Err(s3_error!(BadDigest, "the Content-MD5 does not match the body"));
    }
    Ok(())
}

/// A write's precondition from `If-Match` / `If-None-Match`.
pub(super) fn write_precondition(
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
) -> S3Result<Precondition> {
    match (if_match, if_none_match) {
        (None, None) => Ok(Precondition::None),
        (None, Some(ETagCondition::Any)) => Ok(Precondition::IfAbsent),
        (None, Some(ETagCondition::ETag(e))) => Ok(Precondition::IfNoneMatch(e.value().to_owned())),
        (Some(ETagCondition::Any), None) => Ok(Precondition::IfExists),
        (Some(ETagCondition::ETag(e)), None) => Ok(Precondition::IfMatch(e.value().to_owned())),
        (Some(_), Some(_)) => {
            Err(s3_error!(InvalidRequest, "If-Match and If-None-Match cannot both be set"))
        }
    }
}

/// The object's headers in a GET or HEAD answer, with the `response-*`
/// overrides applied.
pub(super) struct Headers {
    pub(super) content_type: String,
    pub(super) content_encoding: Option<String>,
    pub(super) content_disposition: Option<String>,
    pub(super) content_language: Option<String>,
    pub(super) cache_control: Option<String>,
    pub(super) expires: Option<Timestamp>,
}

pub(super) fn headers_of(o: &Object, overrides: &dto::GetObjectInput) -> Headers {
    let a = &o.attrs;
    Headers {
        content_type: overrides
            .response_content_type
            .clone()
            .or_else(|| a.content_type.clone())
            .unwrap_or_else(|| "binary/octet-stream".into()),
        content_encoding: overrides
            .response_content_encoding
            .clone()
            .or_else(|| a.content_encoding.clone()),
        content_disposition: overrides
            .response_content_disposition
            .clone()
            .or_else(|| a.content_disposition.clone()),
        content_language: overrides
            .response_content_language
            .clone()
            .or_else(|| a.content_language.clone()),
        cache_control: overrides.response_cache_control.clone().or_else(|| a.cache_control.clone()),
        expires: overrides.response_expires.clone().or_else(|| a.expires.and_then(timestamp_secs)),
    }
}

pub(super) fn metadata_of(o: &Object) -> Option<dto::Metadata> {
    (!o.attrs.metadata.is_empty())
        .then(|| o.attrs.metadata.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// Which bytes a GET or HEAD asks for: all, a `Range`, or a part.
#[derive(Clone)]
pub(super) enum Want {
    All,
    Range(dto::Range),
    Part(u32),
}

pub(super) fn want_of(range: Option<dto::Range>, part: Option<i32>) -> S3Result<Want> {
    match (range, part) {
        (Some(_), Some(_)) => {
            Err(s3_error!(InvalidRequest, "Range and partNumber cannot both be set"))
        }
        (Some(r), None) => Ok(Want::Range(r)),
        (None, Some(n)) => multipart::check_part_number(n).map(Want::Part).map_err(upload_err),
        (None, None) => Ok(Want::All),
    }
}

/// A refusal for `o`: a 304 carries the object's ETag and Last-Modified,
/// as S3's does.
pub(super) fn refusal_for(r: Refusal, o: &Object) -> S3Error {
    let mut e = refusal_err(r);
    if r == Refusal::NotModified {
        let mut h = http::HeaderMap::new();
        if let Ok(v) = http::HeaderValue::from_str(&o.etag) {
            h.insert(http::header::ETAG, v);
        }
        let mut date = Vec::new();
        if Timestamp::from(o.modified).format(dto::TimestampFormat::HttpDate, &mut date).is_ok()
            && let Ok(v) = http::HeaderValue::from_bytes(&date)
        {
            h.insert(http::header::LAST_MODIFIED, v);
        }
        e.set_headers(h);
    }
    e
}

/// Resolve `want` against the object: the byte range, or an error.
pub(super) fn plan(
    o: &Object,
    cond: &ReadConditions,
    want: &Want,
) -> S3Result<Option<std::ops::Range<u64>>> {
    cond.check(o).map_err(|r| refusal_for(r, o))?;
    match want {
        Want::All => Ok(None),
        Want::Range(r) => r.check(o.size).map(Some).map_err(|_| {
            s3_error!(InvalidRange, "the range is not satisfiable for size {}", o.size)
        }),
        Want::Part(n) => match o.part_range(*n) {
            Some(r) => Ok(Some(r)),
            None => Err(s3_error!(
                InvalidPart,
                "the object has no part {n} ({} parts)",
                o.parts_count()
            )),
        },
    }
}

pub(super) fn check_version_id(v: Option<&str>) -> S3Result<()> {
    match v {
        None | Some("null") => Ok(()),
        Some(v) => Err(s3_error!(
            InvalidArgument,
            "invalid version id {v:?}: buckets here are unversioned (the only version is \"null\")"
        )),
    }
}

pub(super) fn conditions(
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    if_modified_since: Option<&Timestamp>,
    if_unmodified_since: Option<&Timestamp>,
) -> ReadConditions {
    ReadConditions {
        if_match: if_match.map(tag),
        if_none_match: if_none_match.map(tag),
        if_modified_since: if_modified_since.map(system_time),
        if_unmodified_since: if_unmodified_since.map(system_time),
    }
}

pub(super) fn source_of(c: &dto::CopySource) -> S3Result<(String, String)> {
    match c {
        dto::CopySource::Bucket { bucket, key, version_id } => {
            check_version_id(version_id.as_deref())?;
            Ok((bucket.to_string(), key.to_string()))
        }
        _ => Err(s3_error!(NotImplemented, "copies from access points are not supported")),
    }
}

/// The owner every bucket and object reports.
pub(super) const OWNER: &str = "milliscale";

/// Largest request body held in memory (S3's single-PUT limit).
pub const BODY_BYTES_MAX: usize = 5 << 30;

/// Run a blocking store call off the async threads (the sim store sleeps).
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> objstore::Result<T> + Send + 'static,
) -> objstore::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(StoreError::Fatal(format!("store task failed: {e}"))))
}

pub(super) fn custom(code: &'static str, status: http::StatusCode, msg: String) -> S3Error {
    let mut e = S3Error::with_message(S3ErrorCode::Custom(code.into()), msg);
    e.set_status_code(status);
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::S3ErrorCode;
    use s3s::dto::{ETag, ETagCondition};

    #[test]
    fn bodies_must_match_their_checksums() {
        let sent = |crc32c: &str| dto::Checksum {
            checksum_crc32c: Some(crc32c.to_owned()),
            ..Default::default()
        };
        // CRC32C("hello") = 0x9a71bb4c, base64 of its big-endian bytes.
        verify_checksums(sent("mnG7TA=="), None, b"hello").expect("the right checksum");
        let e = verify_checksums(sent("mnG7TA=="), None, b"hellp").expect_err("a damaged body");
        assert_eq!(e.code(), &S3ErrorCode::BadDigest);
        verify_checksums(dto::Checksum::default(), None, b"x")
            .expect("no checksum, nothing to check");
        // Content-MD5 of "hello": XUFAKrxLKna5cZ2REBfFkg==.
        verify_content_md5(Some("XUFAKrxLKna5cZ2REBfFkg=="), b"hello").expect("right MD5");
        let e = verify_content_md5(Some("XUFAKrxLKna5cZ2REBfFkg=="), b"hellp").expect_err("bad");
        assert_eq!(e.code(), &S3ErrorCode::BadDigest);
        let e = verify_content_md5(Some("nope"), b"hello").expect_err("not an MD5");
        assert_eq!(e.code(), &S3ErrorCode::InvalidDigest);
    }

    #[test]
    fn write_preconditions_map_as_s3_does() {
        let any = ETagCondition::Any;
        let e = ETagCondition::ETag(ETag::Strong("abc".into()));
        assert_eq!(write_precondition(None, None).expect("none"), Precondition::None);
        assert_eq!(write_precondition(None, Some(&any)).expect("*"), Precondition::IfAbsent);
        assert_eq!(write_precondition(Some(&any), None).expect("*"), Precondition::IfExists);
        assert_eq!(
            write_precondition(Some(&e), None).expect("etag"),
            Precondition::IfMatch("abc".into())
        );
        assert_eq!(
            write_precondition(None, Some(&e)).expect("If-None-Match etag"),
            Precondition::IfNoneMatch("abc".into())
        );
        let err = write_precondition(Some(&e), Some(&any)).expect_err("both");
        assert_eq!(err.code(), &S3ErrorCode::InvalidRequest);
    }
}
