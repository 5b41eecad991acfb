//! `s3://bucket/prefix`: any S3-compatible store over the AWS SDK.
//!
//! URL parameters: `endpoint=http://127.0.0.1:9000` (else `AWS_ENDPOINT_URL`,
//! else AWS), `region=` (else the SDK's region chain: `AWS_REGION`, the
//! profile's `region`, and on AWS the instance metadata; else `us-east-1`),
//! `profile=NAME` (a named profile of the shared config files, else
//! `AWS_PROFILE`, else `default`),
//! `path_style=true|false` (default: true when an endpoint is given),
//! `price=TABLE` (the price table for the accounting: a table of
//! `data/sim-presets.toml` or a preset's name, e.g. `s3x`; default
//! `s3-express` for directory-bucket names `name--zone--x-s3`, else
//! `s3-standard`).
//!
//! **Credentials** are never in the URL. [`S3Store::from_url`] takes them
//! from the AWS SDK's standard chain, in its order: the environment
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`),
//! the shared profile files (`~/.aws/credentials` and `~/.aws/config`, or
//! `AWS_SHARED_CREDENTIALS_FILE` and `AWS_CONFIG_FILE`; static keys, SSO,
//! `credential_process`, role assumption), web identity
//! (`AWS_WEB_IDENTITY_TOKEN_FILE` with `AWS_ROLE_ARN`: EKS), the container
//! endpoint (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` or `_FULL_URI`: ECS,
//! EKS Pod Identity) and the instance metadata service (EC2). Temporary
//! credentials are renewed before they expire. [`S3Store::with_credentials`]
//! takes static keys instead. Opening resolves the credentials once, so a
//! store without any fails at open with the chain's reasons, not at its
//! first write. With an S3 Express directory bucket (`name--zone--x-s3`)
//! the SDK creates and renews the session credentials itself.
//!
//! The SDK is async; this backend owns a small tokio runtime and blocks on
//! it inside each call (see the crate docs for the boundary decision),
//! except `start_append`, which leaves the append (and its hedge) as a
//! task on the runtime and hands the answer back through a channel. A
//! call made on a thread that is itself inside an async runtime (a
//! blocking call from async code) cannot block on a runtime there: it runs
//! on a helper thread, and the caller's thread waits for it. That works,
//! but it holds one of the caller's runtime threads for the call; async
//! code should call the engine's async API, which keeps store calls off
//! its runtime. Dropping the store inside async code is safe too.
//!
//! Appends send `x-amz-write-offset-bytes`; conditional writes send
//! `If-None-Match: *` and `If-Match`. S3 does not report a part count, so
//! `ObjectMeta::parts` is `None`, and `InvalidWriteOffset` is completed with
//! a HEAD, since S3's error does not carry the size.
//!
//! Every request is counted on the client side, with its bytes, and priced
//! (`ObjectStore::accounting`); each append request's wall time is
//! recorded (a hedge's cancelled loser is not).
//!
//! The SDK's own retries are off: one call is one request. Retrying is the
//! caller's decision, because only the caller knows whether a timed-out
//! append may have been applied (an *ambiguous append*) and how to check.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::Credentials;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::operation::get_object::builders::GetObjectFluentBuilder;
use aws_sdk_s3::operation::put_object::PutObjectOutput;
use aws_sdk_s3::operation::put_object::builders::PutObjectFluentBuilder;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::ChecksumAlgorithm;
use bytes::Bytes;

mod append;
mod config;
mod hedge;

use append::{AppendRequest, RawAppend};
pub use config::S3Credentials;
use config::{SdkSettings, block_on};

use crate::pending::{PendingAppend, Stage};
use crate::sim::accounting::{Accounting, AccountingReport, Kind};
use crate::sim::model::{Catalog, Prices};
use crate::{
    Hedge, KEY_BYTES_MAX, ObjectMeta, ObjectStore, PARTS_MAX, Result, StoreError, check_key,
};

/// See the module docs.
#[derive(Debug)]
pub struct S3Store {
    client: Client,
    bucket: String,
    prefix: String,
    /// Always `Some` until dropped (see `Drop`).
    rt: Option<tokio::runtime::Runtime>,
    /// Shared with the append tasks `start_append` leaves on the runtime.
    accounting: Arc<Accounting>,
    prices: Prices,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl S3Store {
    /// Parse `s3://bucket/prefix?...` (see the module docs); credentials
    /// from the AWS SDK's standard chain.
    pub fn from_url(url: &str) -> Result<S3Store> {
        S3Store::open(url, None)
    }

    /// Like [`S3Store::from_url`], with these static credentials.
    pub fn with_credentials(url: &str, access_key: &str, secret_key: &str) -> Result<S3Store> {
        S3Store::with(url, &S3Credentials::new(access_key, secret_key))
    }

    /// Like [`S3Store::from_url`], with `credentials` instead of the chain.
    pub fn with(url: &str, credentials: &S3Credentials) -> Result<S3Store> {
        let c = Credentials::new(
            &credentials.access_key_id,
            &credentials.secret_access_key,
            credentials.session_token.clone(),
            None,
            "milliscale-options",
        );
        S3Store::open(url, Some(c))
    }

    fn open(url: &str, creds: Option<Credentials>) -> Result<S3Store> {
        let bad = |m: String| StoreError::InvalidRequest(m);
        let rest =
            url.strip_prefix("s3://").ok_or_else(|| bad(format!("not an s3 URL: {url:?}")))?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
        if bucket.is_empty() {
            return Err(bad(format!("no bucket in {url:?}")));
        }
        let mut sdk = SdkSettings {
            endpoint: env("AWS_ENDPOINT_URL"),
            credentials: creds,
            ..Default::default()
        };
        let mut path_style = None;
        let directory_bucket = bucket.ends_with("--x-s3");
        let mut price = if directory_bucket { "s3-express" } else { "s3-standard" };
        for kv in query.split('&').filter(|s| !s.is_empty()) {
            match kv.split_once('=') {
                Some(("endpoint", v)) => sdk.endpoint = Some(v.to_owned()),
                Some(("region", v)) => sdk.region = Some(v.to_owned()),
                Some(("profile", v)) => sdk.profile = Some(v.to_owned()),
                Some(("path_style", v)) => path_style = Some(matches!(v, "true" | "1")),
                Some(("price", v)) => price = v,
                _ => return Err(bad(format!("unknown s3 URL parameter {kv:?} in {url:?}"))),
            }
        }
        let prices = Catalog::builtin().prices_named(price)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("milliscale-s3")
            .build()
            .map_err(|e| StoreError::Fatal(format!("cannot start the S3 runtime: {e}")))?;
        let path_style = path_style.unwrap_or(sdk.endpoint.is_some());
        let loaded = block_on(&rt, sdk.load(url))?;
        let mut cfg = aws_sdk_s3::config::Builder::from(&loaded)
            .force_path_style(path_style)
            .retry_config(RetryConfig::disabled());
        if let Some(e) = &sdk.endpoint {
            cfg = cfg.endpoint_url(e);
        }
        let prefix = prefix.trim_end_matches('/');
        let prefix = if prefix.is_empty() { String::new() } else { format!("{prefix}/") };
        Ok(S3Store {
            client: Client::from_conf(cfg.build()),
            bucket: bucket.to_owned(),
            prefix,
            rt: Some(rt),
            accounting: Arc::new(Accounting::default()),
            prices,
        })
    }

    /// The runtime (present until the store is dropped).
    fn rt(&self) -> &tokio::runtime::Runtime {
        self.rt.as_ref().expect("the runtime lives as long as the store")
    }

    /// Run `f` on this store's runtime and wait for it, from any thread.
    fn wait<F>(&self, f: F) -> F::Output
    where
        F: std::future::Future + Send,
        F::Output: Send,
    {
        block_on(self.rt(), f)
    }

    /// Create the bucket if it does not exist (tests and first runs).
    pub fn create_bucket(&self) -> Result<()> {
        let r = self.wait(self.client.create_bucket().bucket(&self.bucket).send());
        match r {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(e.code(), Some("BucketAlreadyOwnedByYou" | "BucketAlreadyExists")) =>
            {
                Ok(())
            }
            Err(e) => Err(map_err(e, &self.bucket)),
        }
    }

    /// The bucket key for `key`: the URL's prefix counts against S3's
    /// 1,024-byte key limit.
    fn full(&self, key: &str) -> Result<String> {
        check_key(key)?;
        let full = format!("{}{key}", self.prefix);
        if full.len() > KEY_BYTES_MAX {
            return Err(StoreError::InvalidRequest(format!(
                "key too long with the store's prefix {:?}: {} bytes, the limit is {KEY_BYTES_MAX}",
                self.prefix,
                full.len()
            )));
        }
        Ok(full)
    }

    fn meta(key: &str, size: u64, etag: Option<&str>, parts: Option<u32>) -> ObjectMeta {
        ObjectMeta {
            key: key.to_owned(),
            size,
            etag: etag.unwrap_or_default().to_owned(),
            parts,
            modified: None,
        }
    }

    /// Send a PUT (plain, conditional or append) with a CRC32C checksum of
    /// the body and without SigV4 payload signing. The checksum is the
    /// integrity check end to end (the server verifies it before storing);
    /// signing the payload would add a SHA-256 pass over every flush (about
    /// 0.4 ms per MiB here) for no extra protection, and over HTTPS the SDK
    /// does not sign payloads anyway.
    ///
    /// S3's `InvalidWriteOffset` carries no size, so it is completed with a
    /// HEAD here.
    fn send_put(&self, req: PutObjectFluentBuilder, key: &str) -> Result<PutObjectOutput> {
        let req = req.checksum_algorithm(ChecksumAlgorithm::Crc32C);
        let r = self.wait(req.customize().disable_payload_signing().send());
        match r {
            Ok(out) => Ok(out),
            Err(e) if e.code() == Some("InvalidWriteOffset") => Err(self.offset_error(key)),
            Err(e) => Err(map_err(e, key)),
        }
    }

    /// Send a GET and collect its body.
    fn fetch(&self, kind: Kind, req: GetObjectFluentBuilder, key: &str) -> Result<Bytes> {
        self.accounting.request(kind, 0);
        let r = self.wait(S3Store::fetch_body(req, key));
        if let Ok(b) = &r {
            self.accounting.download(b.len() as u64);
        }
        r
    }

    /// Send a GetObject request and read its body.
    async fn fetch_body(req: GetObjectFluentBuilder, key: &str) -> Result<Bytes> {
        let out = req.send().await.map_err(|e| map_err(e, key))?;
        let body = out
            .body
            .collect()
            .await
            .map_err(|e| StoreError::Transient(format!("reading {key}: {e}")))?;
        Ok(body.into_bytes())
    }

    /// The GetObject request for `range` of `key` (not empty). S3 clips a
    /// range that ends past the object, and answers 416 to one that starts
    /// at or past its end; an unbounded end is sent open (`bytes=N-`, "to
    /// the end").
    fn range_req(&self, key: &str, range: &Range<u64>) -> Result<GetObjectFluentBuilder> {
        let spec = if range.end == u64::MAX {
            format!("bytes={}-", range.start)
        } else {
            format!("bytes={}-{}", range.start, range.end - 1)
        };
        Ok(self.client.get_object().bucket(&self.bucket).key(self.full(key)?).range(spec))
    }

    /// A ranged read's answer: a 416 becomes `InvalidRange` with the size.
    fn range_answer(&self, key: &str, start: u64, r: Result<Bytes>) -> Result<Bytes> {
        match r {
            Err(StoreError::InvalidRequest(m)) if m.contains("InvalidRange") => {
                let size = self.head(key)?.size;
                Err(StoreError::InvalidRange { start, size })
            }
            r => r,
        }
    }

    /// A read request that `send` makes, sent again if no answer has come
    /// after `hedge_after` (zero: both at once); the first answer wins, or,
    /// if it is a failure to answer (throttled, transient), the other one.
    /// Each request sent counts once.
    fn race<T, F, Fut>(&self, kind: Kind, hedge_after: Duration, send: F) -> (Result<T>, Hedge)
    where
        T: Send,
        F: Fn() -> Fut + Sync,
        Fut: std::future::Future<Output = Result<T>> + Send,
    {
        self.accounting.request(kind, 0);
        self.wait(async {
            let first = send();
            tokio::pin!(first);
            // A zero delay races two requests at once (as the simulator).
            if !hedge_after.is_zero() {
                tokio::select! {
                    r = &mut first => return (r, Hedge::NotSent),
                    () = tokio::time::sleep(hedge_after) => {}
                }
            }
            self.accounting.request(kind, 0);
            // An answer wins (a 404 or a 416 too); a failure to answer
            // (throttled, transient) waits for the other request.
            let is_answer = |r: &Result<T>| !matches!(r, Err(e) if e.is_retryable());
            hedge::first_final(first, send(), is_answer, |_| {}).await
        })
    }

    /// A HeadObject request's answer as metadata.
    async fn head_meta(&self, key: &str) -> Result<ObjectMeta> {
        let req = self.client.head_object().bucket(&self.bucket).key(self.full(key)?);
        let out = req.send().await.map_err(|e| map_err(e, key))?;
        let size = out.content_length().unwrap_or(0).max(0) as u64;
        let mut m = S3Store::meta(key, size, out.e_tag(), None);
        m.modified = out.last_modified().and_then(|t| std::time::SystemTime::try_from(*t).ok());
        Ok(m)
    }

    /// A PutObject request for `key` with `body` (plain, conditional or
    /// append: the caller adds the headers).
    fn put_req(&self, key: &str, body: Bytes) -> Result<PutObjectFluentBuilder> {
        let req = self.client.put_object().bucket(&self.bucket).key(self.full(key)?);
        Ok(req.body(ByteStream::from(body)))
    }

    /// An append of `body` at `offset` to `key`, ready to send.
    fn append_request(&self, key: &str, offset: u64, body: &Bytes) -> Result<AppendRequest> {
        if body.is_empty() {
            return Err(StoreError::InvalidRequest("an append needs a non-empty body".into()));
        }
        Ok(AppendRequest {
            client: self.client.clone(),
            bucket: self.bucket.clone(),
            key: self.full(key)?,
            offset,
            accounting: Arc::clone(&self.accounting),
        })
    }

    /// What an append's raw answer means.
    fn append_answer(&self, key: &str, size: u64, answer: RawAppend) -> Result<ObjectMeta> {
        match answer {
            Err(e) => Err(e),
            Ok(Ok(out)) => Ok(S3Store::meta(key, size, out.e_tag(), None)),
            Ok(Err(e)) if e.code() == Some("InvalidWriteOffset") => Err(self.offset_error(key)),
            Ok(Err(e)) => Err(map_err(e, key)),
        }
    }

    /// Complete a refused append with the object's actual size.
    fn offset_error(&self, key: &str) -> StoreError {
        match self.head(key) {
            Ok(m) => StoreError::InvalidWriteOffset { actual_size: m.size },
            Err(e) => e,
        }
    }
}

/// Map an SDK error to what the caller should do.
fn map_err<E: ProvideErrorMetadata + std::error::Error + 'static>(
    e: SdkError<E, HttpResponse>,
    key: &str,
) -> StoreError {
    match &e {
        SdkError::ServiceError(se) => {
            let code = se.err().code().unwrap_or("");
            let status = se.raw().status().as_u16();
            let text = format!(
                "{key}: HTTP {status} {code}: {}",
                se.err().message().unwrap_or("(no message)")
            );
            match (status, code) {
                // Not an object that is missing: the store itself is, and
                // nothing written there can land.
                (_, "NoSuchBucket") => StoreError::Fatal(format!(
                    "{text} (the bucket does not exist; create it first)"
                )),
                (_, "NoSuchKey" | "NotFound") | (404, _) => StoreError::NotFound(key.to_owned()),
                (_, "PreconditionFailed") | (412, _) => StoreError::PreconditionFailed(text),
                (401 | 403, _) => StoreError::Fatal(text),
                (_, "TooManyParts") => StoreError::TooManyParts { parts: PARTS_MAX },
                (_, "SlowDown") => StoreError::Throttled(text),
                (409, _) | (500..=599, _) => StoreError::Transient(text),
                (400..=499, _) => StoreError::InvalidRequest(text),
                _ => StoreError::Fatal(text),
            }
        }
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            StoreError::Transient(format!("{key}: {}", DisplayErrorContext(&e)))
        }
        _ => StoreError::Fatal(format!("{key}: {}", DisplayErrorContext(&e))),
    }
}

impl ObjectStore for S3Store {
    fn is_object_store(&self) -> bool {
        true
    }

    fn put(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        let size = body.len() as u64;
        let req = self.put_req(key, body)?;
        self.accounting.request(Kind::Put, size);
        let out = self.send_put(req, key)?;
        Ok(S3Store::meta(key, size, out.e_tag(), Some(1)))
    }

    fn put_if_absent(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        let size = body.len() as u64;
        let req = self.put_req(key, body)?.if_none_match("*");
        self.accounting.request(Kind::PutIfAbsent, size);
        match self.send_put(req, key) {
            Ok(out) => Ok(S3Store::meta(key, size, out.e_tag(), Some(1))),
            Err(StoreError::PreconditionFailed(_)) => {
                Err(StoreError::AlreadyExists(key.to_owned()))
            }
            Err(e) => Err(e),
        }
    }

    fn put_if_match(&self, key: &str, body: Bytes, etag: &str) -> Result<ObjectMeta> {
        let size = body.len() as u64;
        let req = self.put_req(key, body)?.if_match(etag);
        self.accounting.request(Kind::PutIfMatch, size);
        let out = self.send_put(req, key)?;
        Ok(S3Store::meta(key, size, out.e_tag(), Some(1)))
    }

    fn append(&self, key: &str, offset: u64, body: Bytes) -> Result<ObjectMeta> {
        let req = self.append_request(key, offset, &body)?;
        let size = req.size(&body);
        let (answer, _) = self.wait(req.race(body, None));
        self.append_answer(key, size, answer)
    }

    /// Both requests run on this store's runtime: a timer and a second
    /// request cost the calling thread nothing until the first answer.
    /// Dropping the loser cancels it in flight.
    fn append_hedged(
        &self,
        key: &str,
        offset: u64,
        body: Bytes,
        hedge_after: std::time::Duration,
    ) -> Option<(Result<ObjectMeta>, Hedge)> {
        let req = match self.append_request(key, offset, &body) {
            Ok(req) => req,
            Err(e) => return Some((Err(e), Hedge::NotSent)),
        };
        let size = req.size(&body);
        let (answer, hedge) = self.wait(req.race(body, Some(hedge_after)));
        Some((self.append_answer(key, size, answer), hedge))
    }

    /// The append runs as a task on this store's runtime, hedged there if
    /// asked; the answer comes back through a channel, and a refused
    /// offset is completed with a HEAD by whoever takes the answer (on its
    /// own thread: not the runtime's).
    fn start_append(
        self: Arc<Self>,
        key: &str,
        offset: u64,
        body: Bytes,
        hedge_after: Option<Duration>,
    ) -> Option<PendingAppend> {
        let req = match self.append_request(key, offset, &body) {
            Ok(req) => req,
            Err(e) => return Some(PendingAppend::done((Err(e), Hedge::NotSent))),
        };
        let size = req.size(&body);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        // The task holds no reference to the store: the last one dropped
        // on the runtime's own thread would stop the runtime there.
        self.rt().spawn(async move {
            let _ = tx.send(req.race(body, hedge_after).await);
        });
        let key = key.to_owned();
        Some(PendingAppend::new(Stage::Ask(Box::new(move |block| {
            use std::sync::mpsc::TryRecvError;
            let raw = if block {
                rx.recv().ok()
            } else {
                match rx.try_recv() {
                    Ok(raw) => Some(raw),
                    Err(TryRecvError::Empty) => return None,
                    Err(TryRecvError::Disconnected) => None,
                }
            };
            let (answer, hedge) = raw.unwrap_or_else(|| {
                let e = StoreError::Transient("the append's task ended unanswered".into());
                (Err(e), Hedge::NotSent)
            });
            Some((self.append_answer(&key, size, answer), hedge))
        }))))
    }

    fn get(&self, key: &str) -> Result<Bytes> {
        let req = self.client.get_object().bucket(&self.bucket).key(self.full(key)?);
        self.fetch(Kind::Get, req, key)
    }

    fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        if range.start > range.end {
            return Err(StoreError::InvalidRequest(format!("inverted range {range:?}")));
        }
        if range.start == range.end {
            // HTTP cannot ask for zero bytes; the size decides the answer.
            let size = self.head(key)?.size;
            return if range.start >= size {
                Err(StoreError::InvalidRange { start: range.start, size })
            } else {
                Ok(Bytes::new())
            };
        }
        let req = self.range_req(key, &range)?;
        let r = self.fetch(Kind::GetRange, req, key);
        self.range_answer(key, range.start, r)
    }

    fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.accounting.request(Kind::Head, 0);
        self.wait(self.head_meta(key))
    }

    fn get_range_hedged(
        &self,
        key: &str,
        range: Range<u64>,
        hedge_after: Duration,
    ) -> Option<(Result<Bytes>, Hedge)> {
        if range.start >= range.end {
            return Some((self.get_range(key, range), Hedge::NotSent));
        }
        let req = match self.range_req(key, &range) {
            Ok(r) => r,
            Err(e) => return Some((Err(e), Hedge::NotSent)),
        };
        let (r, hedge) =
            self.race(Kind::GetRange, hedge_after, || S3Store::fetch_body(req.clone(), key));
        if let Ok(b) = &r {
            self.accounting.download(b.len() as u64);
        }
        Some((self.range_answer(key, range.start, r), hedge))
    }

    fn head_hedged(&self, key: &str, hedge_after: Duration) -> Option<(Result<ObjectMeta>, Hedge)> {
        Some(self.race(Kind::Head, hedge_after, || self.head_meta(key)))
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let full = format!("{}{prefix}", self.prefix);
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut req = self.client.list_objects_v2().bucket(&self.bucket).prefix(&full);
            if let Some(t) = &token {
                req = req.continuation_token(t);
            }
            self.accounting.request(Kind::List, 0);
            let page = self.wait(req.send()).map_err(|e| map_err(e, prefix))?;
            for o in page.contents() {
                let Some(k) = o.key().and_then(|k| k.strip_prefix(&self.prefix)) else { continue };
                let size = o.size().unwrap_or(0).max(0) as u64;
                let mut m = S3Store::meta(k, size, o.e_tag(), None);
                m.modified =
                    o.last_modified().and_then(|t| std::time::SystemTime::try_from(*t).ok());
                out.push(m);
            }
            match page.next_continuation_token() {
                Some(t) if page.is_truncated() == Some(true) => token = Some(t.to_owned()),
                _ => break,
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    fn delete(&self, key: &str) -> Result<()> {
        let req = self.client.delete_object().bucket(&self.bucket).key(self.full(key)?);
        self.accounting.request(Kind::Delete, 0);
        self.wait(req.send()).map_err(|e| map_err(e, key))?;
        Ok(())
    }

    fn prices(&self) -> Option<crate::sim::model::Prices> {
        Some(self.prices)
    }
    fn accounting(&self) -> Option<AccountingReport> {
        Some(self.accounting.report(self.prices))
    }
    fn reset_latency(&self) {
        self.accounting.reset_latency();
    }
}

impl Drop for S3Store {
    /// A runtime dropped inside async code would panic ("cannot drop a
    /// runtime in a context where blocking is not allowed"); shutting it
    /// down in the background cannot. Append tasks still out are
    /// cancelled: nobody holds the store, so nobody waits for them.
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}
