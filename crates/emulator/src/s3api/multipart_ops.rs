//! Multipart uploads: create, upload a part (or copy one), list, complete,
//! abort, and list the uploads in progress.

use crate::buckets::Buckets;
use crate::listing::url_encode;
use crate::multipart::{self};
use crate::objects::Refusal;
use objstore::sim::accounting::Kind;
use s3s::dto::{self, Timestamp};
use s3s::{S3Request, S3Response, S3Result, s3_error};
use std::time::SystemTime;

use super::S3Api;
use super::support::*;

pub(super) async fn create_multipart_upload(
    api: &S3Api,
    req: S3Request<dto::CreateMultipartUploadInput>,
) -> S3Result<S3Response<dto::CreateMultipartUploadOutput>> {
    let input = req.input;
    api.need_bucket(&input.bucket)?;
    let attrs = attrs_in!(input).into_attrs();
    let (bucket, key) = (input.bucket.clone(), input.key.clone());
    let id = api
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

pub(super) async fn upload_part(
    api: &S3Api,
    req: S3Request<dto::UploadPartInput>,
) -> S3Result<S3Response<dto::UploadPartOutput>> {
    let mut req = req;
    api.need_bucket(&req.input.bucket)?;
    let n = multipart::check_part_number(req.input.part_number).map_err(upload_err)?;
    let body = read_body(req.input.body.take(), req.input.content_length).await?;
    let input = &req.input;
    verify_checksums(checksums_in!(input), req.trailing_headers.as_ref(), &body)?;
    verify_content_md5(input.content_md5.as_deref(), &body)?;
    let (id, bucket, key) = (input.upload_id.clone(), input.bucket.clone(), input.key.clone());
    let len = body.len() as u64;
    let e = api
        .write(Kind::Put, len, move |b| Ok(b.upload_part(&id, &bucket, &key, n, body)))
        .await
        .map_err(s3_err)?
        .map_err(upload_err)?;
    Ok(S3Response::new(dto::UploadPartOutput { e_tag: Some(etag(&e)), ..Default::default() }))
}

pub(super) async fn upload_part_copy(
    api: &S3Api,
    req: S3Request<dto::UploadPartCopyInput>,
) -> S3Result<S3Response<dto::UploadPartCopyOutput>> {
    let input = req.input;
    api.need_bucket(&input.bucket)?;
    let n = multipart::check_part_number(input.part_number).map_err(upload_err)?;
    let (src_bucket, src_key) = source_of(&input.copy_source)?;
    api.need_bucket(&src_bucket)?;
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
    let (e, modified) = api.write(Kind::Put, 0, op).await.map_err(s3_err)??;
    Ok(S3Response::new(dto::UploadPartCopyOutput {
        copy_part_result: Some(dto::CopyPartResult {
            e_tag: Some(etag(&e)),
            last_modified: Some(Timestamp::from(modified)),
            ..Default::default()
        }),
        ..Default::default()
    }))
}

pub(super) async fn list_parts(
    api: &S3Api,
    req: S3Request<dto::ListPartsInput>,
) -> S3Result<S3Response<dto::ListPartsOutput>> {
    let input = req.input;
    api.need_bucket(&input.bucket)?;
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
    let (_, parts) = api
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

pub(super) async fn complete_multipart_upload(
    api: &S3Api,
    req: S3Request<dto::CompleteMultipartUploadInput>,
) -> S3Result<S3Response<dto::CompleteMultipartUploadOutput>> {
    let input = req.input;
    api.need_bucket(&input.bucket)?;
    let pre = write_precondition(input.if_match.as_ref(), input.if_none_match.as_ref())?;
    let listed = input.multipart_upload.and_then(|m| m.parts).unwrap_or_default();
    let mut parts = Vec::with_capacity(listed.len());
    for p in listed {
        let n =
            p.part_number.ok_or_else(|| s3_error!(MalformedXML, "a part without a PartNumber"))?;
        let n = multipart::check_part_number(n).map_err(upload_err)?;
        let e = p.e_tag.ok_or_else(|| s3_error!(MalformedXML, "a part without an ETag"))?;
        parts.push((n, e.value().to_owned()));
    }
    let (id, bucket, key) = (input.upload_id.clone(), input.bucket.clone(), input.key.clone());
    let o = api
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

pub(super) async fn abort_multipart_upload(
    api: &S3Api,
    req: S3Request<dto::AbortMultipartUploadInput>,
) -> S3Result<S3Response<dto::AbortMultipartUploadOutput>> {
    let input = req.input;
    api.need_bucket(&input.bucket)?;
    let (id, bucket, key) = (input.upload_id.clone(), input.bucket.clone(), input.key.clone());
    api.write(Kind::Delete, 0, move |b| Ok(b.abort_upload(&id, &bucket, &key)))
        .await
        .map_err(s3_err)?
        .map_err(upload_err)?;
    let mut resp = S3Response::new(dto::AbortMultipartUploadOutput::default());
    resp.status = Some(http::StatusCode::NO_CONTENT);
    Ok(resp)
}

pub(super) async fn list_multipart_uploads(
    api: &S3Api,
    req: S3Request<dto::ListMultipartUploadsInput>,
) -> S3Result<S3Response<dto::ListMultipartUploadsOutput>> {
    let input = req.input;
    api.need_bucket(&input.bucket)?;
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
    let all = api
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
