//! A cluster client's calls to one shard over one `ShardStream`: the
//! client's side of the server's `shard_stream` module.
//!
//! A unary call costs a new HTTP/2 stream and a header block each way, and
//! at a busy shard that cost was more than `milliscale serve` spends on a
//! whole one-shot transaction (BENCHMARKS.md). So each connection to a
//! shard ([`Client`]) opens one stream at its first shard call and keeps
//! it; each call is a message tagged with a fresh id, and a reader task
//! hands each answer to the caller waiting on that id.
//!
//! Invariants:
//! - a call gets its own answer or an error, never another call's: ids are
//!   never reused on a stream, and an answer of the wrong kind is an error;
//! - a caller that stops waiting (its timeout) leaves nothing behind: its
//!   id is forgotten, and a late answer is dropped;
//! - if the stream ends (the shard shut down, the connection broke), every
//!   caller still waiting gets UNAVAILABLE, as a broken call would: the
//!   call may or may not have run, and the cluster client's rules for a
//!   call without an answer apply (a prepare or a batch is sent again and
//!   answered as the first time; a read is retried by the transaction);
//!   the next call opens a new stream;
//! - a request of [`STREAMED_CALL_MAX`] bytes or more goes as a unary call:
//!   on the stream it would hold up the calls behind it, and one over the
//!   shard's message limit would end the stream for all of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{mpsc, oneshot};
use tonic::{Status, Streaming};

use crate::Client;
use crate::proto::{self, shard_stream_request::Call, shard_stream_response::Outcome};
use crate::stream::Kept;

/// Calls a connection may have sent on its stream before sending waits.
const IN_FLIGHT: usize = 1024;

/// A request this big or bigger goes as a unary call (see the module's
/// comment).
pub(crate) const STREAMED_CALL_MAX: usize = 1 << 20;

type Reply = oneshot::Sender<Result<Outcome, Status>>;

/// The callers waiting for answers on one stream.
#[derive(Default)]
struct Waiting {
    replies: HashMap<u64, Reply>,
    next_id: u64,
    /// Why the stream ended, once it has.
    ended: Option<Status>,
}

type SharedWaiting = Arc<Mutex<Waiting>>;

fn lock(w: &Mutex<Waiting>) -> MutexGuard<'_, Waiting> {
    // A panic while holding it cannot leave the map half-changed.
    w.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One open stream: where to send, and who waits.
struct Open {
    requests: mpsc::Sender<proto::ShardStreamRequest>,
    waiting: SharedWaiting,
}

/// The stream a connection's shard calls go over (see the module's
/// comment).
#[derive(Default)]
pub(crate) struct ShardCalls {
    open: Kept<Open>,
}

impl std::fmt::Debug for ShardCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ShardCalls")
    }
}

/// Forgets a caller's id if it stops waiting before its answer.
struct Forget<'a> {
    waiting: &'a Mutex<Waiting>,
    id: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        lock(self.waiting).replies.remove(&self.id);
    }
}

impl ShardCalls {
    /// Send `call` on the stream and wait for its answer.
    async fn call(&self, client: &Client, call: Call) -> Result<Outcome, Status> {
        let open = self.stream(client).await?;
        let (reply, answer) = oneshot::channel();
        let id = {
            let mut w = lock(&open.waiting);
            if let Some(why) = &w.ended {
                return Err(ended(why));
            }
            let id = w.next_id;
            w.next_id += 1;
            w.replies.insert(id, reply);
            id
        };
        let _forget = Forget { waiting: &open.waiting, id };
        let msg = proto::ShardStreamRequest { id, call: Some(call) };
        if open.requests.send(msg).await.is_err() {
            return Err(Status::unavailable("the stream to the shard ended before the call left"));
        }
        answer.await.unwrap_or_else(|_| {
            Err(Status::unavailable("the stream's reader stopped without an answer"))
        })
    }

    /// The open stream, opening one if there is none (or it ended).
    async fn stream(&self, client: &Client) -> Result<Arc<Open>, Status> {
        let live = |open: &Open| lock(&open.waiting).ended.is_none();
        self.open
            .get(live, || async {
                let (requests, outgoing) = mpsc::channel(IN_FLIGHT);
                let outgoing = tokio_stream::wrappers::ReceiverStream::new(outgoing);
                let answers = client.stub().shard_stream(client.req(outgoing)).await?.into_inner();
                let waiting = SharedWaiting::default();
                tokio::spawn(read(Arc::clone(&waiting), answers));
                Ok(Open { requests, waiting })
            })
            .await
    }
}

/// The error a caller gets when the stream ended under its call.
fn ended(why: &Status) -> Status {
    Status::unavailable(format!(
        "the stream to the shard ended before this call's answer ({}: {}); it may or may not \
         have run",
        why.code(),
        why.message()
    ))
}

/// Hand each answer to its caller; when the stream ends, fail the callers
/// still waiting.
async fn read(waiting: SharedWaiting, mut answers: Streaming<proto::ShardStreamResponse>) {
    let why = loop {
        match answers.message().await {
            Ok(Some(a)) => {
                let reply = lock(&waiting).replies.remove(&a.id);
                if let Some(reply) = reply {
                    let _ = reply.send(a.outcome.ok_or_else(|| {
                        Status::internal("the shard answered a call with no outcome")
                    }));
                }
            }
            Ok(None) => break Status::unavailable("the shard ended the stream"),
            Err(status) => break status,
        }
    };
    let replies = {
        let mut w = lock(&waiting);
        let replies = std::mem::take(&mut w.replies);
        w.ended = Some(why.clone());
        replies
    };
    for (_, reply) in replies {
        let _ = reply.send(Err(ended(&why)));
    }
}

/// A call's failure as the status the unary call would have returned, its
/// metadata included (the floor of a stale read, the map version of a
/// wrong shard).
fn status_of(f: proto::Failure) -> Status {
    let mut meta = tonic::metadata::MetadataMap::new();
    let mut put = |k: &'static str, v: String| {
        if let Ok(v) = v.parse() {
            meta.insert(k, v);
        }
    };
    if !f.kind.is_empty() {
        put("milliscale-error", f.kind);
    }
    put("milliscale-retryable", f.retryable.to_string());
    if f.floor > 0 {
        put("milliscale-floor", f.floor.to_string());
    }
    if f.map_version > 0 {
        put("milliscale-map-version", f.map_version.to_string());
    }
    Status::with_metadata(tonic::Code::from_i32(f.code), f.message, meta)
}

/// One typed shard call: on the connection's stream, or as a unary call
/// when the connection streams nothing or the request is big.
macro_rules! shard_call {
    ($(#[$doc:meta])* $name:ident, $req:ty, $resp:ty, $variant:ident) => {
        $(#[$doc])*
        pub(crate) async fn $name(&self, r: $req) -> Result<$resp, Status> {
            let calls = self
                .shard_calls
                .as_deref()
                .filter(|_| prost::Message::encoded_len(&r) < STREAMED_CALL_MAX);
            let Some(calls) = calls else {
                return self.stub().$name(self.req(r)).await.map(tonic::Response::into_inner);
            };
            match calls.call(self, Call::$variant(r)).await? {
                Outcome::$variant(a) => Ok(a),
                Outcome::Failure(f) => Err(status_of(f)),
                _ => Err(Status::internal("the shard answered a call with another call's answer")),
            }
        }
    };
}

impl Client {
    shard_call!(
        /// `ShardRead`.
        shard_read, proto::ShardReadRequest, proto::ShardReadResponse, Read
    );
    shard_call!(
        /// `ShardScan`.
        shard_scan, proto::ShardScanRequest, proto::ShardScanResponse, Scan
    );
    shard_call!(
        /// `ShardPrepare`.
        shard_prepare, proto::ShardPrepareRequest, proto::ShardPrepareResponse, Prepare
    );
    shard_call!(
        /// `ShardExecute`.
        shard_execute, proto::ShardExecuteRequest, proto::ShardExecuteResponse, Execute
    );
    shard_call!(
        /// `ShardDecide`.
        shard_decide, proto::ShardDecideRequest, proto::ShardDecideResponse, Decide
    );
}
