//! One HTTP connection: the accounting endpoint, or the S3 service.
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
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as _, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use objstore::ObjectStore;
use objstore::sim::SimStore;
use s3s::service::S3Service;

use crate::ACCOUNTING_PATH;

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
    service: S3Service,
    sim: Arc<SimStore>,
    preset: Arc<str>,
) -> Result<hyper::Response<s3s::Body>, Infallible> {
    if req.uri().path() == ACCOUNTING_PATH {
        let report = sim.accounting().expect("the sim store counts");
        let resp = hyper::Response::builder()
            .header("content-type", "application/json")
            .body(s3s::Body::from(crate::accounting_json(&preset, &report)))
            .expect("a valid response");
        return Ok(resp);
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
    let mut resp = match service.call(req).await {
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
    Ok(resp)
}

/// Serve one accepted connection until the client closes it.
pub(crate) async fn serve_connection(
    stream: tokio::net::TcpStream,
    service: S3Service,
    sim: Arc<SimStore>,
    preset: String,
) {
    let preset: Arc<str> = preset.into();
    let svc = service_fn(move |req| handle(req, service.clone(), sim.clone(), preset.clone()));
    let conn = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    if let Err(e) = conn.serve_connection(TokioIo::new(stream), svc).await {
        tracing::debug!("connection ended: {e}");
    }
}
