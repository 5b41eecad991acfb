//! The S3 operations, mapped onto the buckets.
//!
//! Every client request that touches objects is exactly one request to the
//! `sim` store (so the latency model, the faults and the accounting see it
//! once): the operation runs inside [`SimStore::modelled_write`] or
//! [`SimStore::modelled_read`]. Bookkeeping the protocol needs on top, such
//! as the existence of a bucket, asks the buckets directly, outside the
//! model. Operations not served here answer 501 with their name (s3s's
//! default).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use objstore::StoreError;
use objstore::sim::SimStore;
use objstore::sim::accounting::Kind;
use s3s::dto::{self, ETag, ETagCondition, StreamingBlob, Timestamp};
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

use crate::buckets::{BucketError, Buckets, valid_bucket_name};
use crate::listing::{self, LIST_KEYS_MAX, Page, hex_token, unhex_token, url_encode};
use crate::multipart::{self, UploadError};
use crate::objects::{Attrs, NewObject, Object, Precondition, ReadConditions, Refusal, Tag};

/// Largest request body held in memory (S3's single-PUT limit).
pub const BODY_BYTES_MAX: usize = 5 << 30;

/// The owner every bucket and object reports.
const OWNER: &str = "milliscale";

/// The S3 service: the `sim` store's model in front of the buckets.
pub struct S3Api {
    pub(crate) sim: Arc<SimStore>,
    pub(crate) buckets: Arc<Buckets>,
    /// Credentials handed out by `CreateSession` (S3 Express).
    pub(crate) session: (String, String),
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

fn upload_err(e: UploadError) -> S3Error {
    match e {
        UploadError::Store(e) => s3_err(e),
        UploadError::NoSuchUpload => s3_error!(NoSuchUpload, "no such upload"),
        UploadError::InvalidPart(m) => s3_error!(InvalidPart, "{m}"),
        UploadError::InvalidPartOrder(m) => s3_error!(InvalidPartOrder, "{m}"),
        UploadError::EntityTooSmall(m) => s3_error!(EntityTooSmall, "{m}"),
        UploadError::InvalidArgument(m) => s3_error!(InvalidArgument, "{m}"),
    }
}

fn refusal_err(r: Refusal) -> S3Error {
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

fn etag(m: &str) -> ETag {
    ETag::Strong(m.trim_matches('"').to_owned())
}

fn tag(c: &ETagCondition) -> Tag {
    match c {
        ETagCondition::Any => Tag::Any,
        ETagCondition::ETag(e) => Tag::Is(e.value().to_owned()),
    }
}

fn system_time(t: &Timestamp) -> SystemTime {
    let odt: time::OffsetDateTime = t.clone().into();
    let secs = odt.unix_timestamp();
    if secs >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64)
    } else {
        SystemTime::UNIX_EPOCH
    }
}

fn timestamp_secs(secs: i64) -> Option<Timestamp> {
    time::OffsetDateTime::from_unix_timestamp(secs).ok().map(Timestamp::from)
}

fn owner() -> dto::Owner {
    dto::Owner { display_name: Some(OWNER.into()), id: Some(OWNER.into()) }
}

/// The one ACL there is: the owner has full control (every user is the
/// owner here).
fn owner_grants() -> dto::Grants {
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

fn storage_class() -> dto::ObjectStorageClass {
    dto::ObjectStorageClass::from_static(dto::ObjectStorageClass::STANDARD)
}

fn wants_url(e: &Option<dto::EncodingType>) -> S3Result<bool> {
    match e {
        None => Ok(false),
        Some(e) if e.as_str() == dto::EncodingType::URL => Ok(true),
        Some(e) => Err(s3_error!(InvalidArgument, "invalid encoding-type {:?}", e.as_str())),
    }
}

/// The headers a write stores with the object.
struct AttrsIn {
    content_type: Option<String>,
    content_encoding: Option<String>,
    content_disposition: Option<String>,
    content_language: Option<String>,
    cache_control: Option<String>,
    expires: Option<Timestamp>,
    metadata: Option<dto::Metadata>,
}

impl AttrsIn {
    fn into_attrs(self) -> Attrs {
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

/// Read a request body of at most [`BODY_BYTES_MAX`] bytes.
async fn read_body(blob: Option<StreamingBlob>, content_length: Option<i64>) -> S3Result<Bytes> {
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
fn verify_checksums(
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
fn verify_content_md5(sent: Option<&str>, body: &[u8]) -> S3Result<()> {
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

/// A write's precondition from `If-Match` / `If-None-Match`.
fn write_precondition(
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
struct Headers {
    content_type: String,
    content_encoding: Option<String>,
    content_disposition: Option<String>,
    content_language: Option<String>,
    cache_control: Option<String>,
    expires: Option<Timestamp>,
}

fn headers_of(o: &Object, overrides: &dto::GetObjectInput) -> Headers {
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

fn metadata_of(o: &Object) -> Option<dto::Metadata> {
    (!o.attrs.metadata.is_empty())
        .then(|| o.attrs.metadata.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// Which bytes a GET or HEAD asks for: all, a `Range`, or a part.
#[derive(Clone)]
enum Want {
    All,
    Range(dto::Range),
    Part(u32),
}

fn want_of(range: Option<dto::Range>, part: Option<i32>) -> S3Result<Want> {
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
fn refusal_for(r: Refusal, o: &Object) -> S3Error {
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
fn plan(o: &Object, cond: &ReadConditions, want: &Want) -> S3Result<Option<std::ops::Range<u64>>> {
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

fn check_version_id(v: Option<&str>) -> S3Result<()> {
    match v {
        None | Some("null") => Ok(()),
        Some(v) => Err(s3_error!(
            InvalidArgument,
            "invalid version id {v:?}: buckets here are unversioned (the only version is \"null\")"
        )),
    }
}

fn conditions(
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

fn source_of(c: &dto::CopySource) -> S3Result<(String, String)> {
    match c {
        dto::CopySource::Bucket { bucket, key, version_id } => {
            check_version_id(version_id.as_deref())?;
            Ok((bucket.to_string(), key.to_string()))
        }
        _ => Err(s3_error!(NotImplemented, "copies from access points are not supported")),
    }
}

impl S3Api {
    fn need_bucket(&self, bucket: &str) -> S3Result<()> {
        if self.buckets.exists(bucket) {
            Ok(())
        } else {
            Err(s3_error!(NoSuchBucket, "no such bucket: {bucket}"))
        }
    }

    /// Run `op` as one modelled write request.
    async fn write<T: Send + 'static>(
        &self,
        kind: Kind,
        up: u64,
        op: impl FnOnce(&Buckets) -> objstore::Result<T> + Send + 'static,
    ) -> objstore::Result<T> {
        let (sim, buckets) = (self.sim.clone(), self.buckets.clone());
        blocking(move || sim.modelled_write(kind, up, || op(&buckets))).await
    }

    /// Run `op` as one modelled read request answering `down` bytes.
    async fn read<T: Send + 'static>(
        &self,
        kind: Kind,
        op: impl FnOnce(&Buckets) -> objstore::Result<T> + Send + 'static,
        down: impl Fn(&T) -> u64 + Send + 'static,
    ) -> objstore::Result<T> {
        let (sim, buckets) = (self.sim.clone(), self.buckets.clone());
        blocking(move || sim.modelled_read(kind, || op(&buckets), down)).await
    }

    /// One page of `bucket`'s objects after `after` (one LIST request):
    /// what ListObjects, ListObjectsV2 and ListObjectVersions share.
    async fn listing(
        &self,
        bucket: &str,
        prefix: &Option<String>,
        delimiter: &Option<String>,
        max_keys: Option<i32>,
        encoding: &Option<dto::EncodingType>,
        after: Option<String>,
    ) -> S3Result<Listing> {
        self.need_bucket(bucket)?;
        let url = wants_url(encoding)?;
        let prefix = prefix.clone().unwrap_or_default();
        let max_keys =
            listing::max_keys(max_keys).map_err(|m| s3_error!(InvalidArgument, "{m}"))?;
        let delimiter = delimiter.clone().filter(|d| !d.is_empty());
        let (b, p) = (bucket.to_owned(), prefix.clone());
        let all = self
            .read(Kind::List, move |bs| bs.list_objects(&b, &p), |_| 0)
            .await
            .map_err(s3_err)?;
        let page = listing::walk(all, &prefix, delimiter.as_deref(), after.as_deref(), max_keys);
        Ok(Listing { url, prefix, delimiter, max_keys, page })
    }
}

/// A listing's page and the request parameters its answer echoes.
struct Listing {
    /// `encoding-type=url` was asked for.
    url: bool,
    prefix: String,
    delimiter: Option<String>,
    max_keys: usize,
    page: Page,
}

impl Listing {
    /// A key, prefix or marker as the answer carries it.
    fn enc(&self, s: String) -> String {
        if self.url { url_encode(&s) } else { s }
    }

    fn common_prefixes(&self) -> Vec<dto::CommonPrefix> {
        self.page
            .prefixes
            .iter()
            .map(|p| dto::CommonPrefix { prefix: Some(self.enc(p.clone())) })
            .collect()
    }

    /// The page's objects, with their owner if `with_owner`.
    fn objects(&self, with_owner: bool) -> Vec<dto::Object> {
        self.page
            .contents
            .iter()
            .map(|o| dto::Object {
                key: Some(self.enc(o.key.clone())),
                size: Some(o.size as i64),
                e_tag: Some(etag(&o.etag)),
                last_modified: Some(Timestamp::from(o.modified)),
                owner: with_owner.then(owner),
                storage_class: Some(storage_class()),
                ..Default::default()
            })
            .collect()
    }
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

    async fn get_bucket_location(
        &self,
        req: S3Request<dto::GetBucketLocationInput>,
    ) -> S3Result<S3Response<dto::GetBucketLocationOutput>> {
        self.need_bucket(&req.input.bucket)?;
        // us-east-1, which S3 reports as an empty constraint.
        Ok(S3Response::new(dto::GetBucketLocationOutput { location_constraint: None }))
    }

    async fn get_bucket_acl(
        &self,
        req: S3Request<dto::GetBucketAclInput>,
    ) -> S3Result<S3Response<dto::GetBucketAclOutput>> {
        self.need_bucket(&req.input.bucket)?;
        Ok(S3Response::new(dto::GetBucketAclOutput {
            grants: Some(owner_grants()),
            owner: Some(owner()),
        }))
    }

    async fn get_object_acl(
        &self,
        req: S3Request<dto::GetObjectAclInput>,
    ) -> S3Result<S3Response<dto::GetObjectAclOutput>> {
        let input = req.input;
        self.need_bucket(&input.bucket)?;
        check_version_id(input.version_id.as_deref())?;
        let (bucket, key) = (input.bucket.clone(), input.key.clone());
        self.read(Kind::Head, move |b| b.head_object(&bucket, &key), |_| 0)
            .await
            .map_err(s3_err)?;
        Ok(S3Response::new(dto::GetObjectAclOutput {
            grants: Some(owner_grants()),
            owner: Some(owner()),
            ..Default::default()
        }))
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<dto::GetBucketVersioningInput>,
    ) -> S3Result<S3Response<dto::GetBucketVersioningOutput>> {
        self.need_bucket(&req.input.bucket)?;
        // Never enabled: S3 then answers without a status.
        Ok(S3Response::new(dto::GetBucketVersioningOutput::default()))
    }

    async fn list_buckets(
        &self,
        req: S3Request<dto::ListBucketsInput>,
    ) -> S3Result<S3Response<dto::ListBucketsOutput>> {
        let input = req.input;
        let prefix = input.prefix.clone().unwrap_or_default();
        let after = match &input.continuation_token {
            Some(t) => Some(unhex_token(t).ok_or_else(|| {
                s3_error!(InvalidArgument, "the continuation token is not valid")
            })?),
            None => None,
        };
        let max = match input.max_buckets {
            None => usize::MAX,
            Some(n) if (1..=10_000).contains(&n) => n as usize,
            Some(n) => {
                return Err(s3_error!(InvalidArgument, "max-buckets must be 1..=10000, got {n}"));
            }
        };
        let mut names: Vec<_> = self
            .buckets
            .list_buckets()
            .into_iter()
            .filter(|(n, _)| n.starts_with(&prefix) && after.as_ref().is_none_or(|a| n > a))
            .collect();
        let truncated = names.len() > max;
        names.truncate(max);
        let token = truncated.then(|| hex_token(&names.last().expect("max >= 1").0));
        let buckets = names
            .into_iter()
            .map(|(name, created)| dto::Bucket {
                name: Some(name),
                creation_date: Some(Timestamp::from(created)),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(dto::ListBucketsOutput {
            buckets: Some(buckets),
            owner: Some(owner()),
            continuation_token: token,
            prefix: input.prefix,
        }))
    }

    async fn create_session(
        &self,
        req: S3Request<dto::CreateSessionInput>,
    ) -> S3Result<S3Response<dto::CreateSessionOutput>> {
        // The SDKs ask for a session before every directory bucket call,
        // CreateBucket included (S3 serves that from another endpoint,
        // without sessions): a directory bucket name gets a session even
        // before the bucket exists; its operations then answer as usual.
        let name = &req.input.bucket;
        if !crate::buckets::is_directory_bucket(name) {
            self.need_bucket(name)?;
        }
        // The session's credentials are the server's own: requests signed
        // with them (and carrying the session token) are accepted.
        let expires = SystemTime::now() + Duration::from_secs(300);
        Ok(S3Response::new(dto::CreateSessionOutput {
            credentials: dto::SessionCredentials {
                access_key_id: self.session.0.clone(),
                secret_access_key: self.session.1.clone(),
                session_token: "milliscale-session".into(),
                expiration: Timestamp::from(expires),
            },
            ..Default::default()
        }))
    }

    async fn put_object(
        &self,
        req: S3Request<dto::PutObjectInput>,
    ) -> S3Result<S3Response<dto::PutObjectOutput>> {
        let mut req = req;
        self.need_bucket(&req.input.bucket)?;
        let body = read_body(req.input.body.take(), req.input.content_length).await?;
        let input = &req.input;
        verify_checksums(checksums_in!(input), req.trailing_headers.as_ref(), &body)?;
        verify_content_md5(input.content_md5.as_deref(), &body)?;
        let pre = write_precondition(input.if_match.as_ref(), input.if_none_match.as_ref())?;
        let (bucket, key) = (input.bucket.clone(), input.key.clone());
        let len = body.len() as u64;
        let (is_append, o) = match input.write_offset_bytes {
            Some(off) => {
                if input.metadata.as_ref().is_some_and(|m| !m.is_empty()) {
                    return Err(s3_error!(
                        InvalidRequest,
                        "an append cannot set user metadata: the object keeps its own"
                    ));
                }
                let off = u64::try_from(off).map_err(|_| {
                    s3_error!(InvalidArgument, "x-amz-write-offset-bytes must be >= 0")
                })?;
                let op = move |b: &Buckets| b.append_object(&bucket, &key, off, body, pre);
                (true, self.write(Kind::Append, len, op).await)
            }
            None => {
                let kind = match pre {
                    Precondition::None => Kind::Put,
                    Precondition::IfAbsent => Kind::PutIfAbsent,
                    _ => Kind::PutIfMatch,
                };
                let attrs = attrs_in!(input).into_attrs();
                let op = move |b: &Buckets| b.put_object(&bucket, &key, body, pre, attrs);
                (false, self.write(kind, len, op).await)
            }
        };
        let o = o.map_err(s3_err)?;
        Ok(S3Response::new(dto::PutObjectOutput {
            e_tag: Some(etag(&o.etag)),
            size: is_append.then_some(o.size as i64),
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<dto::GetObjectInput>,
    ) -> S3Result<S3Response<dto::GetObjectOutput>> {
        let input = req.input;
        self.need_bucket(&input.bucket)?;
        check_version_id(input.version_id.as_deref())?;
        let cond = conditions(
            input.if_match.as_ref(),
            input.if_none_match.as_ref(),
            input.if_modified_since.as_ref(),
            input.if_unmodified_since.as_ref(),
        );
        let want = want_of(input.range, input.part_number)?;
        let kind = if matches!(want, Want::All) { Kind::Get } else { Kind::GetRange };
        let (bucket, key, w) = (input.bucket.clone(), input.key.clone(), want.clone());
        let op = move |b: &Buckets| b.get_object(&bucket, &key, |o| plan(o, &cond, &w));
        let down = |r: &S3Result<(Object, Bytes)>| r.as_ref().map_or(0, |(_, b)| b.len() as u64);
        let (o, body) = self.read(kind, op, down).await.map_err(s3_err)??;
        let h = headers_of(&o, &input);
        let len = body.len() as u64;
        let (content_range, status) = match &want {
            Want::All => (None, None),
            _ => {
                // The store never returns an empty body for start < size.
                let start = match want {
                    Want::Range(r) => r.check(o.size).map_or(0, |r| r.start),
                    Want::Part(n) => o.part_range(n).map_or(0, |r| r.start),
                    Want::All => 0,
                };
                let cr = if len == 0 {
                    format!("bytes */{}", o.size)
                } else {
                    format!("bytes {start}-{}/{}", start + len - 1, o.size)
                };
                (Some(cr), Some(http::StatusCode::PARTIAL_CONTENT))
            }
        };
        let out = dto::GetObjectOutput {
            body: Some(StreamingBlob::from(s3s::Body::from(body))),
            content_length: Some(len as i64),
            content_range,
            content_type: Some(h.content_type),
            content_encoding: h.content_encoding,
            content_disposition: h.content_disposition,
            content_language: h.content_language,
            cache_control: h.cache_control,
            expires: h.expires,
            e_tag: Some(etag(&o.etag)),
            last_modified: Some(Timestamp::from(o.modified)),
            metadata: metadata_of(&o),
            accept_ranges: Some("bytes".into()),
            parts_count: matches!(want, Want::Part(_)).then_some(o.parts_count() as i32),
            storage_class: Some(dto::StorageClass::from_static(dto::StorageClass::STANDARD)),
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
        check_version_id(input.version_id.as_deref())?;
        let cond = conditions(
            input.if_match.as_ref(),
            input.if_none_match.as_ref(),
            input.if_modified_since.as_ref(),
            input.if_unmodified_since.as_ref(),
        );
        let want = want_of(input.range, input.part_number)?;
        let (bucket, key) = (input.bucket.clone(), input.key.clone());
        let o = self
            .read(Kind::Head, move |b| b.head_object(&bucket, &key), |_| 0)
            .await
            .map_err(s3_err)?;
        let range = plan(&o, &cond, &want)?;
        let overrides = dto::GetObjectInput {
            response_cache_control: input.response_cache_control.clone(),
            response_content_disposition: input.response_content_disposition.clone(),
            response_content_encoding: input.response_content_encoding.clone(),
            response_content_language: input.response_content_language.clone(),
            response_content_type: input.response_content_type.clone(),
            response_expires: input.response_expires.clone(),
            ..dto::GetObjectInput::builder()
                .bucket(input.bucket.clone())
                .key(input.key.clone())
                .build()
                .expect("a GetObject input")
        };
        let h = headers_of(&o, &overrides);
        let (len, content_range, status) = match &range {
            None => (o.size, None, None),
            Some(r) => {
                let end = r.end.min(o.size);
                let cr = format!("bytes {}-{}/{}", r.start, end.saturating_sub(1), o.size);
                (end - r.start, Some(cr), Some(http::StatusCode::PARTIAL_CONTENT))
            }
        };
        let mut resp = S3Response::new(dto::HeadObjectOutput {
            content_length: Some(len as i64),
            content_range,
            content_type: Some(h.content_type),
            content_encoding: h.content_encoding,
            content_disposition: h.content_disposition,
            content_language: h.content_language,
            cache_control: h.cache_control,
            expires: h.expires,
            e_tag: Some(etag(&o.etag)),
            last_modified: Some(Timestamp::from(o.modified)),
            metadata: metadata_of(&o),
            accept_ranges: Some("bytes".into()),
            parts_count: matches!(want, Want::Part(_)).then_some(o.parts_count() as i32),
            storage_class: Some(dto::StorageClass::from_static(dto::StorageClass::STANDARD)),
            ..Default::default()
        });
        resp.status = status;
        Ok(resp)
    }

    async fn delete_object(
        &self,
        req: S3Request<dto::DeleteObjectInput>,
    ) -> S3Result<S3Response<dto::DeleteObjectOutput>> {
        let input = req.input;
        self.need_bucket(&input.bucket)?;
        check_version_id(input.version_id.as_deref())?;
        let (bucket, key) = (input.bucket.clone(), input.key.clone());
        self.write(Kind::Delete, 0, move |b| b.delete_object(&bucket, &key))
            .await
            .map_err(s3_err)?;
        let mut resp = S3Response::new(dto::DeleteObjectOutput::default());
        resp.status = Some(http::StatusCode::NO_CONTENT);
        Ok(resp)
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
        let bucket = input.bucket.clone();
        let objects = input.delete.objects;
        // One request: the whole batch is one modelled write.
        let answers = self
            .write(Kind::Delete, 0, move |b| {
                Ok(objects
                    .into_iter()
                    .map(|o| {
                        let r = check_version_id(o.version_id.as_deref())
                            .and_then(|()| b.delete_object(&bucket, &o.key).map_err(s3_err));
                        (o, r)
                    })
                    .collect::<Vec<_>>())
            })
            .await
            .map_err(s3_err)?;
        let (mut deleted, mut errors) = (Vec::new(), Vec::new());
        for (o, r) in answers {
            match r {
                Ok(()) if quiet => {}
                Ok(()) => deleted.push(dto::DeletedObject {
                    key: Some(o.key),
                    version_id: o.version_id,
                    ..Default::default()
                }),
                Err(e) => errors.push(dto::Error {
                    code: Some(e.code().as_str().to_owned()),
                    key: Some(o.key),
                    message: e.message().map(str::to_owned),
                    version_id: o.version_id,
                }),
            }
        }
        Ok(S3Response::new(dto::DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: Some(errors),
            ..Default::default()
        }))
    }

    async fn copy_object(
        &self,
        req: S3Request<dto::CopyObjectInput>,
    ) -> S3Result<S3Response<dto::CopyObjectOutput>> {
        let input = req.input;
        self.need_bucket(&input.bucket)?;
        let (src_bucket, src_key) = source_of(&input.copy_source)?;
        self.need_bucket(&src_bucket)?;
        let replace = match &input.metadata_directive {
            None => false,
            Some(d) if d.as_str() == dto::MetadataDirective::COPY => false,
            Some(d) if d.as_str() == dto::MetadataDirective::REPLACE => true,
            Some(d) => {
                return Err(s3_error!(
                    InvalidArgument,
                    "unknown metadata directive {:?}",
                    d.as_str()
                ));
            }
        };
        if !replace && src_bucket == input.bucket && src_key == input.key {
            return Err(s3_error!(
                InvalidRequest,
                "This copy request is illegal because it is trying to copy an object to itself \
                 without changing the object's metadata, storage class, website redirect \
                 location or encryption attributes."
            ));
        }
        let cond = conditions(
            input.copy_source_if_match.as_ref(),
            input.copy_source_if_none_match.as_ref(),
            input.copy_source_if_modified_since.as_ref(),
            input.copy_source_if_unmodified_since.as_ref(),
        );
        let new_attrs = replace.then(|| attrs_in!(input).into_attrs());
        let (dst_bucket, dst_key) = (input.bucket.clone(), input.key.clone());
        let op = move |b: &Buckets| -> objstore::Result<S3Result<Object>> {
            // A copy's failed source condition is a 412, never a 304.
            let got = b.get_object(&src_bucket, &src_key, |o| {
                cond.check(o).map(|()| None).map_err(|_| refusal_err(Refusal::PreconditionFailed))
            })?;
            let (src, body) = match got {
                Ok(x) => x,
                Err(e) => return Ok(Err(e)),
            };
            let attrs = new_attrs.unwrap_or(src.attrs);
            let new = NewObject { attrs, ..Default::default() };
            b.write_object(&dst_bucket, &dst_key, body, Precondition::None, new).map(Ok)
        };
        let o = self.write(Kind::Put, 0, op).await.map_err(s3_err)??;
        Ok(S3Response::new(dto::CopyObjectOutput {
            copy_object_result: Some(dto::CopyObjectResult {
                e_tag: Some(etag(&o.etag)),
                last_modified: Some(Timestamp::from(o.modified)),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn list_objects(
        &self,
        req: S3Request<dto::ListObjectsInput>,
    ) -> S3Result<S3Response<dto::ListObjectsOutput>> {
        let input = req.input;
        let marker = input.marker.clone().filter(|m| !m.is_empty());
        let l = self
            .listing(
                &input.bucket,
                &input.prefix,
                &input.delimiter,
                input.max_keys,
                &input.encoding_type,
                marker,
            )
            .await?;
        // S3 gives NextMarker only with a delimiter; without one, the last
        // key on the page is the next marker.
        let next_marker =
            (l.page.truncated && l.delimiter.is_some()).then(|| l.page.last.clone()).flatten();
        Ok(S3Response::new(dto::ListObjectsOutput {
            marker: Some(l.enc(input.marker.unwrap_or_default())),
            next_marker: next_marker.map(|m| l.enc(m)),
            max_keys: Some(l.max_keys as i32),
            is_truncated: Some(l.page.truncated),
            prefix: Some(l.enc(l.prefix.clone())),
            delimiter: l.delimiter.clone().map(|d| l.enc(d)),
            common_prefixes: Some(l.common_prefixes()),
            contents: Some(l.objects(true)),
            name: Some(input.bucket),
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<dto::ListObjectsV2Input>,
    ) -> S3Result<S3Response<dto::ListObjectsV2Output>> {
        let input = req.input;
        // The continuation token is the last key (or common prefix) of the
        // previous page, hex-encoded so that it stays opaque and URL-safe.
        let after = match &input.continuation_token {
            Some(t) => Some(unhex_token(t).ok_or_else(|| {
                s3_error!(InvalidArgument, "the continuation token is not valid")
            })?),
            None => input.start_after.clone().filter(|s| !s.is_empty()),
        };
        let l = self
            .listing(
                &input.bucket,
                &input.prefix,
                &input.delimiter,
                input.max_keys,
                &input.encoding_type,
                after,
            )
            .await?;
        let key_count = (l.page.contents.len() + l.page.prefixes.len()) as i32;
        let next = if l.page.truncated { l.page.last.as_deref().map(hex_token) } else { None };
        Ok(S3Response::new(dto::ListObjectsV2Output {
            max_keys: Some(l.max_keys as i32),
            key_count: Some(key_count),
            start_after: input.start_after.map(|s| l.enc(s)),
            is_truncated: Some(l.page.truncated),
            next_continuation_token: next,
            prefix: Some(l.enc(l.prefix.clone())),
            delimiter: l.delimiter.clone().map(|d| l.enc(d)),
            common_prefixes: Some(l.common_prefixes()),
            contents: Some(l.objects(input.fetch_owner == Some(true))),
            name: Some(input.bucket),
            continuation_token: input.continuation_token,
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }

    async fn list_object_versions(
        &self,
        req: S3Request<dto::ListObjectVersionsInput>,
    ) -> S3Result<S3Response<dto::ListObjectVersionsOutput>> {
        let input = req.input;
        // Every object has one version, "null": the key marker alone says
        // where a page starts.
        let after = input.key_marker.clone().filter(|m| !m.is_empty());
        let l = self
            .listing(
                &input.bucket,
                &input.prefix,
                &input.delimiter,
                input.max_keys,
                &input.encoding_type,
                after,
            )
            .await?;
        let (next_key, next_version) = if l.page.truncated {
            (l.page.last.clone().map(|k| l.enc(k)), Some("null".to_owned()))
        } else {
            (None, None)
        };
        let versions = l
            .page
            .contents
            .iter()
            .map(|o| dto::ObjectVersion {
                key: Some(l.enc(o.key.clone())),
                version_id: Some("null".into()),
                is_latest: Some(true),
                size: Some(o.size as i64),
                e_tag: Some(etag(&o.etag)),
                last_modified: Some(Timestamp::from(o.modified)),
                owner: Some(owner()),
                storage_class: Some(dto::ObjectVersionStorageClass::from_static(
                    dto::ObjectVersionStorageClass::STANDARD,
                )),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(dto::ListObjectVersionsOutput {
            max_keys: Some(l.max_keys as i32),
            key_marker: Some(l.enc(input.key_marker.unwrap_or_default())),
            version_id_marker: Some(input.version_id_marker.unwrap_or_default()),
            is_truncated: Some(l.page.truncated),
            next_key_marker: next_key,
            next_version_id_marker: next_version,
            prefix: Some(l.enc(l.prefix.clone())),
            delimiter: l.delimiter.clone().map(|d| l.enc(d)),
            common_prefixes: Some(l.common_prefixes()),
            versions: Some(versions),
            name: Some(input.bucket),
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<dto::CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::CreateMultipartUploadOutput>> {
        let input = req.input;
        self.need_bucket(&input.bucket)?;
        let attrs = attrs_in!(input).into_attrs();
        let (bucket, key) = (input.bucket.clone(), input.key.clone());
        let id = self
            .write(Kind::Put, 0, move |b| Ok(b.create_upload(&bucket, &key, attrs)))
            .await
            .map_err(s3_err)?
            .map_err(upload_err)?;
        Ok(S3Response::new(dto::CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(id),
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<dto::UploadPartInput>,
    ) -> S3Result<S3Response<dto::UploadPartOutput>> {
        let mut req = req;
        self.need_bucket(&req.input.bucket)?;
        let n = multipart::check_part_number(req.input.part_number).map_err(upload_err)?;
        let body = read_body(req.input.body.take(), req.input.content_length).await?;
        let input = &req.input;
        verify_checksums(checksums_in!(input), req.trailing_headers.as_ref(), &body)?;
        verify_content_md5(input.content_md5.as_deref(), &body)?;
        let (id, bucket, key) = (input.upload_id.clone(), input.bucket.clone(), input.key.clone());
        let len = body.len() as u64;
        let e = self
            .write(Kind::Put, len, move |b| Ok(b.upload_part(&id, &bucket, &key, n, body)))
            .await
            .map_err(s3_err)?
            .map_err(upload_err)?;
        Ok(S3Response::new(dto::UploadPartOutput { e_tag: Some(etag(&e)), ..Default::default() }))
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<dto::UploadPartCopyInput>,
    ) -> S3Result<S3Response<dto::UploadPartCopyOutput>> {
        let input = req.input;
        self.need_bucket(&input.bucket)?;
        let n = multipart::check_part_number(input.part_number).map_err(upload_err)?;
        let (src_bucket, src_key) = source_of(&input.copy_source)?;
        self.need_bucket(&src_bucket)?;
        let range = match &input.copy_source_range {
            None => None,
            Some(r) => {
                let parsed = dto::Range::parse(r)
                    .map_err(|_| s3_error!(InvalidArgument, "bad x-amz-copy-source-range {r:?}"))?;
                Some(parsed)
            }
        };
        let cond = conditions(
            input.copy_source_if_match.as_ref(),
            input.copy_source_if_none_match.as_ref(),
            input.copy_source_if_modified_since.as_ref(),
            input.copy_source_if_unmodified_since.as_ref(),
        );
        let (id, bucket, key) = (input.upload_id.clone(), input.bucket.clone(), input.key.clone());
        let op = move |b: &Buckets| -> objstore::Result<S3Result<(String, SystemTime)>> {
            if let Err(e) = b.upload(&id, &bucket, &key) {
                return Ok(Err(upload_err(e)));
            }
            let got = b.get_object(&src_bucket, &src_key, |o| {
                cond.check(o).map_err(|_| refusal_err(Refusal::PreconditionFailed))?;
                match &range {
                    None => Ok(None),
                    // Unlike a GET's, a copy's range must lie within the
                    // source: it is not clipped.
                    Some(r) => {
                        let past_end =
                            matches!(r, dto::Range::Int { last: Some(l), .. } if *l >= o.size);
                        match r.check(o.size) {
                            Ok(rr) if !past_end => Ok(Some(rr)),
                            _ => Err(s3_error!(
                                InvalidRange,
                                "the copy range is not within the source's {} bytes",
                                o.size
                            )),
                        }
                    }
                }
            })?;
            let (src, body) = match got {
                Ok(x) => x,
                Err(e) => return Ok(Err(e)),
            };
            Ok(b.upload_part(&id, &bucket, &key, n, body)
                .map(|e| (e, src.modified))
                .map_err(upload_err))
        };
        let (e, modified) = self.write(Kind::Put, 0, op).await.map_err(s3_err)??;
        Ok(S3Response::new(dto::UploadPartCopyOutput {
            copy_part_result: Some(dto::CopyPartResult {
                e_tag: Some(etag(&e)),
                last_modified: Some(Timestamp::from(modified)),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn list_parts(
        &self,
        req: S3Request<dto::ListPartsInput>,
    ) -> S3Result<S3Response<dto::ListPartsOutput>> {
        let input = req.input;
        self.need_bucket(&input.bucket)?;
        let max = match input.max_parts {
            None => 1000,
            Some(n) if n < 0 => return Err(s3_error!(InvalidArgument, "max-parts must be >= 0")),
            Some(n) => (n as usize).min(1000),
        };
        let marker = match input.part_number_marker {
            None => 0,
            Some(m) => u32::try_from(m)
                .map_err(|_| s3_error!(InvalidArgument, "bad part-number-marker {m}"))?,
        };
        let (id, bucket, key) = (input.upload_id.clone(), input.bucket.clone(), input.key.clone());
        let (_, parts) = self
            .read(Kind::List, move |b| Ok(b.list_parts(&id, &bucket, &key)), |_| 0)
            .await
            .map_err(s3_err)?
            .map_err(upload_err)?;
        let mut parts: Vec<_> = parts.into_iter().filter(|p| p.number > marker).collect();
        let truncated = parts.len() > max;
        parts.truncate(max);
        let next = truncated.then(|| parts.last().map(|p| p.number as i32)).flatten();
        Ok(S3Response::new(dto::ListPartsOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(input.upload_id),
            max_parts: Some(max as i32),
            part_number_marker: input.part_number_marker,
            next_part_number_marker: next,
            is_truncated: Some(truncated),
            owner: Some(owner()),
            initiator: Some(dto::Initiator {
                display_name: Some(OWNER.into()),
                id: Some(OWNER.into()),
            }),
            storage_class: Some(dto::StorageClass::from_static(dto::StorageClass::STANDARD)),
            parts: Some(
                parts
                    .into_iter()
                    .map(|p| dto::Part {
                        part_number: Some(p.number as i32),
                        e_tag: Some(etag(&p.etag)),
                        size: Some(p.size as i64),
                        last_modified: Some(Timestamp::from(p.modified)),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<dto::CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::CompleteMultipartUploadOutput>> {
        let input = req.input;
        self.need_bucket(&input.bucket)?;
        let pre = write_precondition(input.if_match.as_ref(), input.if_none_match.as_ref())?;
        let listed = input.multipart_upload.and_then(|m| m.parts).unwrap_or_default();
        let mut parts = Vec::with_capacity(listed.len());
        for p in listed {
            let n = p
                .part_number
                .ok_or_else(|| s3_error!(MalformedXML, "a part without a PartNumber"))?;
            let n = multipart::check_part_number(n).map_err(upload_err)?;
            let e = p.e_tag.ok_or_else(|| s3_error!(MalformedXML, "a part without an ETag"))?;
            parts.push((n, e.value().to_owned()));
        }
        let (id, bucket, key) = (input.upload_id.clone(), input.bucket.clone(), input.key.clone());
        let o = self
            .write(Kind::Put, 0, move |b| Ok(b.complete_upload(&id, &bucket, &key, &parts, pre)))
            .await
            .map_err(s3_err)?
            .map_err(upload_err)?;
        Ok(S3Response::new(dto::CompleteMultipartUploadOutput {
            bucket: Some(input.bucket.clone()),
            key: Some(input.key.clone()),
            e_tag: Some(etag(&o.etag)),
            location: Some(format!("/{}/{}", input.bucket, input.key)),
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<dto::AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::AbortMultipartUploadOutput>> {
        let input = req.input;
        self.need_bucket(&input.bucket)?;
        let (id, bucket, key) = (input.upload_id.clone(), input.bucket.clone(), input.key.clone());
        self.write(Kind::Delete, 0, move |b| Ok(b.abort_upload(&id, &bucket, &key)))
            .await
            .map_err(s3_err)?
            .map_err(upload_err)?;
        let mut resp = S3Response::new(dto::AbortMultipartUploadOutput::default());
        resp.status = Some(http::StatusCode::NO_CONTENT);
        Ok(resp)
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<dto::ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<dto::ListMultipartUploadsOutput>> {
        let input = req.input;
        self.need_bucket(&input.bucket)?;
        let url = wants_url(&input.encoding_type)?;
        let enc = |s: String| if url { url_encode(&s) } else { s };
        let max = match input.max_uploads {
            None => 1000,
            Some(n) if n < 0 => return Err(s3_error!(InvalidArgument, "max-uploads must be >= 0")),
            Some(n) => (n as usize).min(1000),
        };
        let prefix = input.prefix.clone().unwrap_or_default();
        let key_marker = input.key_marker.clone().unwrap_or_default();
        let id_marker = input.upload_id_marker.clone().unwrap_or_default();
        let bucket = input.bucket.clone();
        let all = self
            .read(Kind::List, move |b| Ok(b.list_uploads(&bucket)), |_| 0)
            .await
            .map_err(s3_err)?
            .map_err(upload_err)?;
        // After the markers: keys past the key marker, or, with an upload
        // marker too, later uploads of the marker's key.
        let mut ups: Vec<_> = all
            .into_iter()
            .filter(|u| u.key.starts_with(&prefix))
            .filter(|u| {
                key_marker.is_empty()
                    || u.key > key_marker
                    || (u.key == key_marker && !id_marker.is_empty() && u.id > id_marker)
            })
            .collect();
        let truncated = ups.len() > max;
        ups.truncate(max);
        let (next_key, next_id) = match (truncated, ups.last()) {
            (true, Some(u)) => (Some(enc(u.key.clone())), Some(u.id.clone())),
            _ => (None, None),
        };
        Ok(S3Response::new(dto::ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            prefix: Some(enc(prefix)),
            key_marker: Some(enc(key_marker)),
            upload_id_marker: Some(id_marker),
            next_key_marker: next_key,
            next_upload_id_marker: next_id,
            max_uploads: Some(max as i32),
            is_truncated: Some(truncated),
            uploads: Some(
                ups.into_iter()
                    .map(|u| dto::MultipartUpload {
                        initiated: Some(Timestamp::from(u.initiated())),
                        key: Some(enc(u.key)),
                        upload_id: Some(u.id),
                        owner: Some(owner()),
                        initiator: Some(dto::Initiator {
                            display_name: Some(OWNER.into()),
                            id: Some(OWNER.into()),
                        }),
                        storage_class: Some(dto::StorageClass::from_static(
                            dto::StorageClass::STANDARD,
                        )),
                        ..Default::default()
                    })
                    .collect(),
            ),
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
