//! A milliscale [`objstore::ObjectStore`] behind the `object_store` crate's
//! trait (the one SlateDB uses).
//!
//! Our stores are blocking (a `sim` store sleeps for its modelled latency),
//! so every call runs on tokio's blocking pool. Conditional writes map
//! one to one: `PutMode::Create` is `put_if_absent`, `PutMode::Update` is
//! `put_if_match` on the ETag. Multipart uploads are buffered and written
//! with one put at completion (one request, as the store's accounting then
//! shows). Our stores keep no modification times, so `last_modified` is
//! the time of the listing; SlateDB's garbage collector, which uses it,
//! therefore never finds an object old enough to delete during a run.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use objstore::{ObjectStore as MsStore, StoreError};
use slatedb::object_store::path::Path;
use slatedb::object_store::{
    self as os, CopyMode, CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult,
    UploadPart,
};

const NAME: &str = "milliscale";

/// See the module docs.
#[derive(Clone)]
pub struct Adapter {
    inner: Arc<dyn MsStore>,
    name: String,
}

impl Adapter {
    /// `name` is the store's URL, for messages.
    pub fn new(inner: Arc<dyn MsStore>, name: &str) -> Adapter {
        Adapter { inner, name: name.to_owned() }
    }
}

impl fmt::Debug for Adapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Adapter({})", self.name)
    }
}

impl fmt::Display for Adapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "milliscale store {}", self.name)
    }
}

fn convert(e: StoreError, path: &str) -> os::Error {
    let path = path.to_owned();
    match e {
        StoreError::NotFound(_) => os::Error::NotFound { path, source: Box::new(e) },
        StoreError::AlreadyExists(_) => os::Error::AlreadyExists { path, source: Box::new(e) },
        StoreError::PreconditionFailed(_) => os::Error::Precondition { path, source: Box::new(e) },
        other => os::Error::Generic { store: NAME, source: Box::new(other) },
    }
}

fn meta(m: objstore::ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        location: Path::from(m.key.as_str()),
        last_modified: m.modified.map_or_else(chrono::Utc::now, chrono::DateTime::from),
        size: m.size,
        e_tag: Some(m.etag),
        version: None,
    }
}

fn put_result(m: &objstore::ObjectMeta) -> PutResult {
    PutResult { e_tag: Some(m.etag.clone()), version: None, extensions: Default::default() }
}

impl Adapter {
    /// Run a blocking store call on the blocking pool.
    async fn blocking<T: Send + 'static>(
        &self,
        path: &Path,
        f: impl FnOnce(&dyn MsStore, &str) -> Result<T, StoreError> + Send + 'static,
    ) -> os::Result<T> {
        let inner = self.inner.clone();
        let key = path.to_string();
        tokio::task::spawn_blocking(move || f(inner.as_ref(), &key).map_err(|e| convert(e, &key)))
            .await?
    }

    async fn write(&self, path: &Path, body: Bytes, mode: PutMode) -> os::Result<PutResult> {
        let m = self
            .blocking(path, move |s, k| match mode {
                PutMode::Overwrite => s.put(k, body),
                PutMode::Create => s.put_if_absent(k, body),
                PutMode::Update(v) => match v.e_tag {
                    Some(etag) => s.put_if_match(k, body, &etag),
                    None => {
                        Err(StoreError::InvalidRequest("a conditional update needs an ETag".into()))
                    }
                },
            })
            .await?;
        Ok(put_result(&m))
    }
}

#[async_trait]
impl os::ObjectStore for Adapter {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> os::Result<PutResult> {
        self.write(location, Bytes::from(payload), opts.mode).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        _opts: PutMultipartOptions,
    ) -> os::Result<Box<dyn MultipartUpload>> {
        Ok(Box::new(Upload {
            store: self.clone(),
            path: location.clone(),
            parts: Arc::new(parking_lot::Mutex::new(Vec::new())),
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> os::Result<GetResult> {
        let head = self.blocking(location, |s, k| s.head(k)).await?;
        let m = meta(head);
        options.check_preconditions(&m)?;
        let range: Range<u64> = match &options.range {
            Some(r) => r
                .as_range(m.size)
                .map_err(|e| os::Error::Generic { store: NAME, source: Box::new(e) })?,
            None => 0..m.size,
        };
        let body = if options.head {
            Bytes::new()
        } else if range.start == 0 && range.end == m.size {
            self.blocking(location, |s, k| s.get(k)).await?
        } else {
            let r = range.clone();
            self.blocking(location, move |s, k| s.get_range(k, r)).await?
        };
        Ok(GetResult {
            payload: GetResultPayload::Stream(stream::once(async move { Ok(body) }).boxed()),
            meta: m,
            range,
            attributes: Default::default(),
            extensions: Default::default(),
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, os::Result<Path>>,
    ) -> BoxStream<'static, os::Result<Path>> {
        let this = self.clone();
        locations
            .then(move |p| {
                let this = this.clone();
                async move {
                    let p = p?;
                    this.blocking(&p, |s, k| s.delete(k)).await?;
                    Ok(p)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, os::Result<ObjectMeta>> {
        let this = self.clone();
        let prefix = prefix.map(|p| format!("{p}/")).unwrap_or_default();
        stream::once(async move {
            let inner = this.inner.clone();
            let p = prefix.clone();
            let listed = tokio::task::spawn_blocking(move || inner.list(&p))
                .await
                .map_err(os::Error::from)
                .and_then(|r| r.map_err(|e| convert(e, &prefix)));
            match listed {
                Ok(v) => stream::iter(v.into_iter().map(|m| Ok(meta(m)))).boxed(),
                Err(e) => stream::once(async move { Err(e) }).boxed(),
            }
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> os::Result<ListResult> {
        let base = prefix.map(|p| format!("{p}/")).unwrap_or_default();
        let inner = self.inner.clone();
        let b = base.clone();
        let all = tokio::task::spawn_blocking(move || inner.list(&b))
            .await?
            .map_err(|e| convert(e, &base))?;
        let mut objects = Vec::new();
        let mut common: Vec<Path> = Vec::new();
        for m in all {
            let rest = &m.key[base.len()..];
            match rest.find('/') {
                Some(i) => {
                    let dir = Path::from(&m.key[..base.len() + i]);
                    if common.last() != Some(&dir) {
                        common.push(dir);
                    }
                }
                None => objects.push(meta(m)),
            }
        }
        common.dedup();
        Ok(ListResult { common_prefixes: common, objects, extensions: Default::default() })
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> os::Result<()> {
        let body = self.blocking(from, |s, k| s.get(k)).await?;
        let mode = match options.mode {
            CopyMode::Overwrite => PutMode::Overwrite,
            CopyMode::Create => PutMode::Create,
        };
        self.write(to, body, mode).await.map(|_| ())
    }
}

/// A multipart upload, buffered; completed with one put.
struct Upload {
    store: Adapter,
    path: Path,
    parts: Arc<parking_lot::Mutex<Vec<(usize, Bytes)>>>,
}

impl fmt::Debug for Upload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Upload({})", self.path)
    }
}

#[async_trait]
impl MultipartUpload for Upload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let parts = self.parts.clone();
        let n = parts.lock().len();
        parts.lock().push((n, Bytes::from(data)));
        Box::pin(async { Ok(()) })
    }

    async fn complete(&mut self) -> os::Result<PutResult> {
        let mut parts = std::mem::take(&mut *self.parts.lock());
        parts.sort_by_key(|(n, _)| *n);
        let body: Vec<u8> = parts.iter().flat_map(|(_, b)| b.iter().copied()).collect();
        self.store.write(&self.path, Bytes::from(body), PutMode::Overwrite).await
    }

    async fn abort(&mut self) -> os::Result<()> {
        self.parts.lock().clear();
        Ok(())
    }
}
