//! Listings: buckets, objects (v1 and v2) and object versions.

use crate::listing::{hex_token, unhex_token};
use s3s::dto::{self, Timestamp};
use s3s::{S3Request, S3Response, S3Result, s3_error};

use super::S3Api;
use super::support::*;

pub(super) async fn list_buckets(
    api: &S3Api,
    req: S3Request<dto::ListBucketsInput>,
) -> S3Result<S3Response<dto::ListBucketsOutput>> {
    let input = req.input;
    let prefix = input.prefix.clone().unwrap_or_default();
    let after = match &input.continuation_token {
        Some(t) => Some(
            unhex_token(t)
                .ok_or_else(|| s3_error!(InvalidArgument, "the continuation token is not valid"))?,
        ),
        None => None,
    };
    let max = match input.max_buckets {
        None => usize::MAX,
        Some(n) if (1..=10_000).contains(&n) => n as usize,
        Some(n) => {
            return Err(s3_error!(InvalidArgument, "max-buckets must be 1..=10000, got {n}"));
        }
    };
    let mut names: Vec<_> = api
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

pub(super) async fn list_objects(
    api: &S3Api,
    req: S3Request<dto::ListObjectsInput>,
) -> S3Result<S3Response<dto::ListObjectsOutput>> {
    let input = req.input;
    let marker = input.marker.clone().filter(|m| !m.is_empty());
    let l = api
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

pub(super) async fn list_objects_v2(
    api: &S3Api,
    req: S3Request<dto::ListObjectsV2Input>,
) -> S3Result<S3Response<dto::ListObjectsV2Output>> {
    let input = req.input;
    // The continuation token is the last key (or common prefix) of the
    // previous page, hex-encoded so that it stays opaque and URL-safe.
    let after = match &input.continuation_token {
        Some(t) => Some(
            unhex_token(t)
                .ok_or_else(|| s3_error!(InvalidArgument, "the continuation token is not valid"))?,
        ),
        None => input.start_after.clone().filter(|s| !s.is_empty()),
    };
    let l = api
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

pub(super) async fn list_object_versions(
    api: &S3Api,
    req: S3Request<dto::ListObjectVersionsInput>,
) -> S3Result<S3Response<dto::ListObjectVersionsOutput>> {
    let input = req.input;
    // Every object has one version, "null": the key marker alone says
    // where a page starts.
    let after = input.key_marker.clone().filter(|m| !m.is_empty());
    let l = api
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
