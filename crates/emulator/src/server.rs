//! One HTTP connection: the accounting and readiness endpoints, or the S3
//! service.
//!
//! Every answer carries a request ID (`x-amz-request-id`, and in an error's
//! XML body `RequestId`, as S3's do), and with a request log each request
//! is one JSON line: time, ID, method, path, status, bytes in and out, and
//! how long it took.
//!
//! **Unread request bodies close the connection.** A client that sent
//! `Expect: 100-continue` and got a final answer before `100 Continue`
//! (s3s answers some errors without reading the body) does not send the
//! body. If the connection stayed open, the server would take the client's
//! next request as the rest of the old body, and the client would see a
//! garbled answer and retry a request that had in fact been applied: for
//! an append, a spurious `InvalidWriteOffset`. So when the body was not
//! read to its end, the answer carries `Connection: close`.
//!
//! The same goes for a request with `Expect: 100-continue` that got no
//! `100 Continue` (its body was empty, or never polled): botocore
//! keeps stale state on such a connection and garbles the next answer on
//! it (seen with boto3 1.43: an empty append answered 400, then the next
//! append on the connection was applied, misread, and retried).

use std::convert::Infallible;
use std::io::Write as _;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body::{Body as _, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};

use objstore::ObjectStore;
use objstore::sim::SimStore;
use s3s::service::S3Service;

use crate::express::{self, ExpressSession, Verdict};
use crate::{ACCOUNTING_PATH, READY_PATH};

/// What every connection shares.
pub(crate) struct Shared {
    pub(crate) service: S3Service,
    pub(crate) sim: Arc<SimStore>,
    pub(crate) preset: String,
    /// Where request log lines go, if anywhere.
    pub(crate) log: Option<parking_lot::Mutex<Box<dyn std::io::Write + Send>>>,
    /// Source of request IDs.
    pub(crate) next_id: AtomicU64,
    /// Process start, mixed into request IDs so two runs do not repeat them.
    pub(crate) epoch: u64,
    /// Access key → secret key, for `s3express` signatures (express.rs).
    pub(crate) users: std::collections::HashMap<String, String>,
}

impl Shared {
    pub(crate) fn new(
        service: S3Service,
        sim: Arc<SimStore>,
        preset: String,
        log: Option<Box<dyn std::io::Write + Send>>,
        users: std::collections::HashMap<String, String>,
    ) -> Shared {
        let epoch = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Shared {
            service,
            sim,
            preset,
            log: log.map(parking_lot::Mutex::new),
            next_id: AtomicU64::new(1),
            epoch,
            users,
        }
    }
}

/// Put `<RequestId>` into an S3 error body that lacks one.
fn with_request_id(body: &[u8], id: &str) -> Option<Vec<u8>> {
    let s = std::str::from_utf8(body).ok()?;
    if s.contains("<RequestId>") {
        return None;
    }
    let at = s.rfind("</Error>")?;
    Some(format!("{}<RequestId>{id}</RequestId>{}", &s[..at], &s[at..]).into_bytes())
}

/// A request body that records whether it was polled, and read to its end.
struct TrackedBody {
    inner: Incoming,
    polled: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
}

impl http_body::Body for TrackedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        this.polled.store(true, Ordering::Relaxed);
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        if matches!(r, Poll::Ready(None)) {
            this.done.store(true, Ordering::Relaxed);
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        let end = self.inner.is_end_stream();
        if end {
            self.done.store(true, Ordering::Relaxed);
        }
        end
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

async fn handle(
    req: hyper::Request<Incoming>,
    shared: Arc<Shared>,
) -> Result<hyper::Response<s3s::Body>, Infallible> {
    let started = Instant::now();
    let n = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let id = format!("{:08X}{n:08X}", shared.epoch as u32);
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let query = req.uri().query().map(str::to_owned);
    let bytes_in = req.body().size_hint().exact();
    let mut resp = serve(req, &shared).await;
    let headers = resp.headers_mut();
    if let Ok(v) = http::HeaderValue::from_str(&id) {
        headers.insert("x-amz-request-id", v.clone());
        headers.insert("x-amz-id-2", v);
    }
    if resp.status().as_u16() >= 400
        && let Some(body) = resp.body().bytes()
        && let Some(new) = with_request_id(&body, &id)
    {
        resp.headers_mut().insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(new.len()));
        *resp.body_mut() = s3s::Body::from(Bytes::from(new));
    }
    if let Some(log) = &shared.log {
        let bytes_out = resp.body().bytes().map(|b| b.len() as u64).or_else(|| {
            resp.headers()
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse().ok())
        });
        let line = serde_json::json!({
            "time": SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()),
            "id": id,
            "method": method.as_str(),
            "path": path,
            "query": query,
            "status": resp.status().as_u16(),
            "bytes_in": bytes_in,
            "bytes_out": bytes_out,
            "ms": started.elapsed().as_secs_f64() * 1e3,
        });
        let mut w = log.lock();
        // A log that cannot be written must not fail the request.
        let _ = writeln!(w, "{line}").and_then(|()| w.flush());
    }
    Ok(resp)
}

/// An S3 error answered here, before s3s.
fn error_response(status: http::StatusCode, code: &str, msg: &str) -> hyper::Response<s3s::Body> {
    let esc = msg.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>{esc}</Message></Error>"
    );
    hyper::Response::builder()
        .status(status)
        .header("content-type", "application/xml")
        .body(s3s::Body::from(xml))
        .expect("a valid response")
}

async fn serve(mut req: hyper::Request<Incoming>, shared: &Shared) -> hyper::Response<s3s::Body> {
    let json = |body: String| {
        hyper::Response::builder()
            .header("content-type", "application/json")
            .body(s3s::Body::from(body))
            .expect("a valid response")
    };
    match req.uri().path() {
        ACCOUNTING_PATH => {
            let report = shared.sim.accounting().expect("the sim store counts");
            return json(crate::accounting_json(&shared.preset, &report));
        }
        READY_PATH => return json(r#"{"ready":true}"#.into()),
        _ => {}
    }
    match express::verify(req.method(), req.uri(), req.headers(), &shared.users) {
        Verdict::NotExpress => {}
        Verdict::Valid(access_key) => {
            let h = req.headers_mut();
            h.remove(http::header::AUTHORIZATION);
            h.remove("x-amz-s3session-token");
            req.extensions_mut().insert(ExpressSession { access_key });
        }
        Verdict::Invalid(code, msg) => {
            let status = if code == "NotImplemented" {
                http::StatusCode::NOT_IMPLEMENTED
            } else {
                http::StatusCode::FORBIDDEN
            };
            return error_response(status, code, &msg);
        }
    }
    let expects_continue = req
        .headers()
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let empty = req.body().is_end_stream();
    let done = Arc::new(AtomicBool::new(empty));
    let polled = Arc::new(AtomicBool::new(false));
    let req = req.map(|inner| {
        s3s::Body::http_body(TrackedBody { inner, polled: polled.clone(), done: done.clone() })
    });
    let mut resp = match shared.service.call(req).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("request failed: {e:?}");
            hyper::Response::builder()
                .status(500)
                .body(s3s::Body::empty())
                .expect("a valid response")
        }
    };
    // hyper sends `100 Continue` when a non-empty body is first polled.
    let continued = !empty && polled.load(Ordering::Relaxed);
    if !done.load(Ordering::Relaxed) || (expects_continue && !continued) {
        resp.headers_mut()
            .insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    }
    resp
}

/// Serve one accepted connection until the client closes it.
pub(crate) async fn serve_connection(stream: tokio::net::TcpStream, shared: Arc<Shared>) {
    let svc = service_fn(move |req| handle(req, shared.clone()));
    let conn = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    if let Err(e) = conn.serve_connection(TokioIo::new(stream), svc).await {
        tracing::debug!("connection ended: {e}");
    }
}
