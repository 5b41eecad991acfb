//! The S3 operations, mapped onto the buckets.
//!
//! Every client request that touches objects is exactly one request to the
//! `sim` store (so the latency model, the faults and the accounting see it
//! once): the operation runs inside [`SimStore::modelled_write`] or
//! [`SimStore::modelled_read`]. Bookkeeping the protocol needs on top, such
//! as the existence of a bucket, asks the buckets directly, outside the
//! model. Operations not served here answer 501 with their name (s3s's
//! default).

#[macro_use]
mod support;
mod listing_ops;
mod multipart_ops;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use objstore::sim::SimStore;
use objstore::sim::accounting::Kind;
use s3s::dto::{self, StreamingBlob, Timestamp};
use s3s::{S3, S3Request, S3Response, S3Result, s3_error};

use crate::buckets::{BucketError, Buckets, valid_bucket_name};
use crate::listing::{self, LIST_KEYS_MAX, Page, url_encode};
use crate::objects::{NewObject, Object, Precondition, Refusal};
use support::*;

/// The S3 service: the `sim` store's model in front of the buckets.
pub struct S3Api {
    pub(crate) sim: Arc<SimStore>,
    pub(crate) buckets: Arc<Buckets>,
    /// Credentials handed out by `CreateSession` (S3 Express).
    pub(crate) session: (String, String),
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
        listing_ops::list_buckets(self, req).await
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
        listing_ops::list_objects(self, req).await
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<dto::ListObjectsV2Input>,
    ) -> S3Result<S3Response<dto::ListObjectsV2Output>> {
        listing_ops::list_objects_v2(self, req).await
    }

    async fn list_object_versions(
        &self,
        req: S3Request<dto::ListObjectVersionsInput>,
    ) -> S3Result<S3Response<dto::ListObjectVersionsOutput>> {
        listing_ops::list_object_versions(self, req).await
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<dto::CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::CreateMultipartUploadOutput>> {
        multipart_ops::create_multipart_upload(self, req).await
    }

    async fn upload_part(
        &self,
        req: S3Request<dto::UploadPartInput>,
    ) -> S3Result<S3Response<dto::UploadPartOutput>> {
        multipart_ops::upload_part(self, req).await
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<dto::UploadPartCopyInput>,
    ) -> S3Result<S3Response<dto::UploadPartCopyOutput>> {
        multipart_ops::upload_part_copy(self, req).await
    }

    async fn list_parts(
        &self,
        req: S3Request<dto::ListPartsInput>,
    ) -> S3Result<S3Response<dto::ListPartsOutput>> {
        multipart_ops::list_parts(self, req).await
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<dto::CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::CompleteMultipartUploadOutput>> {
        multipart_ops::complete_multipart_upload(self, req).await
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<dto::AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::AbortMultipartUploadOutput>> {
        multipart_ops::abort_multipart_upload(self, req).await
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<dto::ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<dto::ListMultipartUploadsOutput>> {
        multipart_ops::list_multipart_uploads(self, req).await
    }
}
