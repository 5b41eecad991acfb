//! Calls over one stream per connection: a cluster client's calls to a
//! shard (`ShardStream`, the server's `shard_stream` module) and the calls
//! of interactive transactions (`CallStream`, the server's `call_stream`
//! module), by one machinery ([`Calls`], over a [`Protocol`]).
//!
//! A unary call costs a new HTTP/2 stream and a header block each way:
//! about 65 µs of server CPU, more than `milliscale serve` spends on a
//! whole one-shot transaction (BENCHMARKS.md). So each connection
//! ([`Client`]) opens one stream of each kind at its first call of that
//! kind and keeps it; each call is a message tagged with a fresh id, and
//! a reader task hands each answer to the caller waiting on that id.
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
//!   server's message limit would end the stream for all of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use crate::Client;
use crate::proto;
use crate::stream::Kept;

/// Calls a connection may have sent on its stream before sending waits.
const IN_FLIGHT: usize = 1024;

/// A request this big or bigger goes as a unary call (see the module's
/// comment).
pub(crate) const STREAMED_CALL_MAX: usize = 1 << 20;

/// One kind of call stream: its messages and how it is opened.
pub(crate) trait Protocol: Send + Sync + 'static {
    /// A request on the stream, and its answer.
    type Request: Send + 'static;
    type Response: prost::Message + Default + Send + 'static;
    /// A call, and its outcome (an answer of the call's kind, or a
    /// failure).
    type Call: Send;
    type Outcome: Send + 'static;
    /// What the stream is to, for messages.
    const TO: &'static str;
    fn request(id: u64, call: Self::Call) -> Self::Request;
    fn answer(r: Self::Response) -> (u64, Option<Self::Outcome>);
    fn open(
        client: &Client,
        outgoing: ReceiverStream<Self::Request>,
    ) -> impl std::future::Future<Output = Result<Streaming<Self::Response>, Status>> + Send;
}

/// A cluster client's calls to a shard.
pub(crate) struct Shard;

impl Protocol for Shard {
    type Request = proto::ShardStreamRequest;
    type Response = proto::ShardStreamResponse;
    type Call = proto::shard_stream_request::Call;
    type Outcome = proto::shard_stream_response::Outcome;
    const TO: &'static str = "the shard";
    fn request(id: u64, call: Self::Call) -> Self::Request {
        proto::ShardStreamRequest { id, call: Some(call) }
    }
    fn answer(r: Self::Response) -> (u64, Option<Self::Outcome>) {
        (r.id, r.outcome)
    }
    async fn open(
        client: &Client,
        outgoing: ReceiverStream<Self::Request>,
    ) -> Result<Streaming<Self::Response>, Status> {
        Ok(client.stub().shard_stream(client.req(outgoing)).await?.into_inner())
    }
}

/// The calls of interactive transactions.
pub(crate) struct Txn;

impl Protocol for Txn {
    type Request = proto::CallStreamRequest;
    type Response = proto::CallStreamResponse;
    type Call = proto::call_stream_request::Call;
    type Outcome = proto::call_stream_response::Outcome;
    const TO: &'static str = "the server";
    fn request(id: u64, call: Self::Call) -> Self::Request {
        proto::CallStreamRequest { id, call: Some(call) }
    }
    fn answer(r: Self::Response) -> (u64, Option<Self::Outcome>) {
        (r.id, r.outcome)
    }
    async fn open(
        client: &Client,
        outgoing: ReceiverStream<Self::Request>,
    ) -> Result<Streaming<Self::Response>, Status> {
        Ok(client.stub().call_stream(client.req(outgoing)).await?.into_inner())
    }
}

/// The callers waiting for answers on one stream.
struct Waiting<O> {
    replies: HashMap<u64, oneshot::Sender<Result<O, Status>>>,
    next_id: u64,
    /// Why the stream ended, once it has.
    ended: Option<Status>,
}

impl<O> Default for Waiting<O> {
    fn default() -> Waiting<O> {
        Waiting { replies: HashMap::new(), next_id: 0, ended: None }
    }
}

type SharedWaiting<O> = Arc<Mutex<Waiting<O>>>;

fn lock<O>(w: &Mutex<Waiting<O>>) -> MutexGuard<'_, Waiting<O>> {
    // A panic while holding it cannot leave the map half-changed.
    w.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One open stream: where to send, and who waits.
struct Open<P: Protocol> {
    requests: mpsc::Sender<P::Request>,
    waiting: SharedWaiting<P::Outcome>,
}

/// The stream a connection's calls of one kind go over (see the module's
/// comment).
pub(crate) struct Calls<P: Protocol> {
    open: Kept<Open<P>>,
}

impl<P: Protocol> Default for Calls<P> {
    fn default() -> Calls<P> {
        Calls { open: Kept::default() }
    }
}

impl<P: Protocol> std::fmt::Debug for Calls<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Calls to {}", P::TO)
    }
}

/// Forgets a caller's id if it stops waiting before its answer.
struct Forget<'a, O> {
    waiting: &'a Mutex<Waiting<O>>,
    id: u64,
}

impl<O> Drop for Forget<'_, O> {
    fn drop(&mut self) {
        lock(self.waiting).replies.remove(&self.id);
    }
}

impl<P: Protocol> Calls<P> {
    /// Send `call` on the stream and wait for its answer.
    pub(crate) async fn call(&self, client: &Client, call: P::Call) -> Result<P::Outcome, Status> {
        let open = self.stream(client).await?;
        let (reply, answer) = oneshot::channel();
        let id = {
            let mut w = lock(&open.waiting);
            if let Some(why) = &w.ended {
                return Err(ended(P::TO, why));
            }
            let id = w.next_id;
            w.next_id += 1;
            w.replies.insert(id, reply);
            id
        };
        let _forget = Forget { waiting: &open.waiting, id };
        if open.requests.send(P::request(id, call)).await.is_err() {
            return Err(Status::unavailable(format!(
                "the stream to {} ended before the call left",
                P::TO
            )));
        }
        answer.await.unwrap_or_else(|_| {
            Err(Status::unavailable("the stream's reader stopped without an answer"))
        })
    }

    /// The open stream, opening one if there is none (or it ended).
    async fn stream(&self, client: &Client) -> Result<Arc<Open<P>>, Status> {
        let live = |open: &Open<P>| lock(&open.waiting).ended.is_none();
        self.open
            .get(live, || async {
                let (requests, outgoing) = mpsc::channel(IN_FLIGHT);
                let answers = P::open(client, ReceiverStream::new(outgoing)).await?;
                let waiting = SharedWaiting::default();
                tokio::spawn(read::<P>(Arc::clone(&waiting), answers));
                Ok(Open { requests, waiting })
            })
            .await
    }
}

/// The error a caller gets when the stream ended under its call.
fn ended(to: &str, why: &Status) -> Status {
    Status::unavailable(format!(
        "the stream to {to} ended before this call's answer ({}: {}); it may or may not have run",
        why.code(),
        why.message()
    ))
}

/// Hand each answer to its caller; when the stream ends, fail the callers
/// still waiting.
async fn read<P: Protocol>(
    waiting: SharedWaiting<P::Outcome>,
    mut answers: Streaming<P::Response>,
) {
    let why = loop {
        match answers.message().await {
            Ok(Some(a)) => {
                let (id, outcome) = P::answer(a);
                let reply = lock(&waiting).replies.remove(&id);
                if let Some(reply) = reply {
                    let _ = reply.send(outcome.ok_or_else(|| {
                        Status::internal(format!("{} answered a call with no outcome", P::TO))
                    }));
                }
            }
            Ok(None) => break Status::unavailable(format!("{} ended the stream", P::TO)),
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
        let _ = reply.send(Err(ended(P::TO, &why)));
    }
}

/// A call's failure as the status the unary call would have returned, its
/// metadata included (the floor of a stale read, the map version of a
/// wrong shard).
pub(crate) fn status_of(f: proto::Failure) -> Status {
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

/// One typed call on one of the connection's streams (`$calls`, of
/// protocol `$p`), or as the unary call `$unary` when the connection
/// streams none of that kind or the request is big.
macro_rules! stream_call {
    ($(#[$doc:meta])* $calls:ident, $p:ty, $name:ident, $unary:ident, $req:ty, $resp:ty, $variant:ident) => {
        $(#[$doc])*
        pub(crate) async fn $name(&self, r: $req) -> Result<$resp, Status> {
            let calls = self
                .$calls
                .as_deref()
                .filter(|_| prost::Message::encoded_len(&r) < STREAMED_CALL_MAX);
            let Some(calls) = calls else {
                return self.stub().$unary(self.req(r)).await.map(tonic::Response::into_inner);
            };
            type Call = <$p as Protocol>::Call;
            type Outcome = <$p as Protocol>::Outcome;
            match calls.call(self, Call::$variant(r)).await? {
                Outcome::$variant(a) => Ok(a),
                Outcome::Failure(f) => Err(status_of(f)),
                _ => Err(Status::internal(format!(
                    "{} answered a call with another call's answer",
                    <$p as Protocol>::TO
                ))),
            }
        }
    };
}

/// A shard call ([`stream_call!`] on `ShardStream`).
macro_rules! shard_call {
    ($(#[$doc:meta])* $name:ident, $req:ty, $resp:ty, $variant:ident) => {
        stream_call!($(#[$doc])* shard_calls, Shard, $name, $name, $req, $resp, $variant);
    };
}

/// A call of an interactive transaction ([`stream_call!`] on
/// `CallStream`).
macro_rules! txn_call {
    ($(#[$doc:meta])* $name:ident, $unary:ident, $req:ty, $resp:ty, $variant:ident) => {
        stream_call!($(#[$doc])* txn_calls, Txn, $name, $unary, $req, $resp, $variant);
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

impl Client {
    txn_call!(
        /// `Begin`.
        txn_begin, begin, proto::BeginRequest, proto::BeginResponse, Begin
    );
    txn_call!(
        /// `Get`.
        txn_get, get, proto::GetRequest, proto::GetResponse, Get
    );
    txn_call!(
        /// `Put`.
        txn_put, put, proto::PutRequest, proto::PutResponse, Put
    );
    txn_call!(
        /// `Delete`.
        txn_delete, delete, proto::DeleteRequest, proto::DeleteResponse, Delete
    );
    txn_call!(
        /// `Patch`.
        txn_patch, patch, proto::PatchRequest, proto::PatchResponse, Patch
    );
    txn_call!(
        /// `Commit`.
        txn_commit, commit, proto::CommitRequest, proto::CommitResponse, Commit
    );
    txn_call!(
        /// `Abort`.
        txn_abort, abort, proto::AbortRequest, proto::AbortResponse, Abort
    );
}
