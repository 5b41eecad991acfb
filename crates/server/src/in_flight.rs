//! Calls in flight, counted from a request's arrival to the end of its
//! answer's body (a stream's last message), so that shutdown waits for
//! calls rather than for connections.
//!
//! Why: an HTTP/2 server that shuts down gracefully waits for each client
//! to acknowledge its GOAWAY (a PING round trip) before it closes the
//! connection. A client whose runtime is not running between calls (the
//! Python package drives its runtime only inside a call) never answers,
//! so one idle Python client held the server's shutdown for the whole
//! grace period. Shutdown now waits until no call is in flight, then
//! drops the connections that are left.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use tokio::sync::Notify;

/// The count of calls in flight.
#[derive(Default)]
pub struct Calls {
    n: AtomicUsize,
    idle: Notify,
}

impl Calls {
    /// Resolves once no call is in flight.
    pub async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.n.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }

    fn start(self: &Arc<Self>) -> Guard {
        self.n.fetch_add(1, Ordering::AcqRel);
        Guard(Arc::clone(self))
    }
}

/// One call in flight, until dropped.
struct Guard(Arc<Calls>);

impl Drop for Guard {
    fn drop(&mut self) {
        if self.0.n.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// The layer that counts the calls of the service it wraps.
#[derive(Clone)]
pub struct Layer(pub Arc<Calls>);

impl<S> tower::Layer<S> for Layer {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted { inner, calls: Arc::clone(&self.0) }
    }
}

/// A service whose calls are counted.
#[derive(Clone)]
pub struct Counted<S> {
    inner: S,
    calls: Arc<Calls>,
}

impl<S, Req, B> tower::Service<Req> for Counted<S>
where
    S: tower::Service<Req, Response = http::Response<B>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<CountedBody<B>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let guard = self.calls.start();
        let answer = self.inner.call(req);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| CountedBody { body, _guard: guard }))
        })
    }
}

/// An answer's body, which keeps its call counted until it is dropped.
pub struct CountedBody<B> {
    body: B,
    _guard: Guard,
}

impl<B: Body + Unpin> Body for CountedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
