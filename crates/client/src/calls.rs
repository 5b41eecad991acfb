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
    /// The answer of the call's kind (or its failure) in an outcome.
    type Kind;
    fn kind(o: Self::Outcome) -> Self::Kind;
    /// What the stream is to, for messages.
    const TO: &'static str;
    fn request(id: u64, call: Self::Call) -> Self::Request;
    fn answer(r: Self::Response) -> (u64, Option<Self::Outcome>);
    /// A word that pipelined commits are durable, if `o` is one.
    fn durable(_o: &Self::Outcome) -> Option<&proto::Durable> {
        None
    }
    /// A call answered at pre-commit and not yet durable: whether it asks
    /// to hear of its durability.
    fn notifies(_c: &Self::Call) -> bool {
        false
    }
    /// An answer at pre-commit that is not durable yet.
    fn pending(_o: &Self::Outcome) -> bool {
        false
    }
    /// An answer that says its commit is durable already.
    fn durable_now(_o: &Self::Outcome) -> bool {
        false
    }
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
    type Kind = Self::Outcome;
    const TO: &'static str = "the shard";
    fn kind(o: Self::Outcome) -> Self::Kind {
        o
    }
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

/// A call of an interactive transaction on the stream, with the writes
/// that go before it.
pub(crate) struct TxnCall {
    pub call: proto::call_stream_request::Call,
    pub writes: Option<proto::WriteRequest>,
    /// A pre-commit that asks to hear of its durability.
    pub notify: bool,
    /// Begin the call's transaction first, with these options (the call
    /// and the writes name none).
    pub begin: Option<proto::BeginRequest>,
}

impl From<proto::call_stream_request::Call> for TxnCall {
    fn from(call: proto::call_stream_request::Call) -> TxnCall {
        TxnCall { call, writes: None, notify: false, begin: None }
    }
}

/// An answer on the call stream: the call's outcome, and the transaction
/// its request began, if it asked to.
pub(crate) struct TxnAnswer {
    pub outcome: proto::call_stream_response::Outcome,
    pub began: Option<proto::BeginResponse>,
}

impl Protocol for Txn {
    type Request = proto::CallStreamRequest;
    type Response = proto::CallStreamResponse;
    type Call = TxnCall;
    type Outcome = TxnAnswer;
    type Kind = proto::call_stream_response::Outcome;
    const TO: &'static str = "the server";
    fn kind(o: Self::Outcome) -> Self::Kind {
        o.outcome
    }
    fn request(id: u64, c: Self::Call) -> Self::Request {
        proto::CallStreamRequest {
            id,
            call: Some(c.call),
            writes: c.writes,
            notify_durable: c.notify,
            begin_first: c.begin,
        }
    }
    fn answer(r: Self::Response) -> (u64, Option<Self::Outcome>) {
        (r.id, r.outcome.map(|outcome| TxnAnswer { outcome, began: r.began }))
    }
    fn durable(o: &Self::Outcome) -> Option<&proto::Durable> {
        match &o.outcome {
            proto::call_stream_response::Outcome::Durable(d) => Some(d),
            _ => None,
        }
    }
    fn notifies(c: &Self::Call) -> bool {
        c.notify
    }
    fn pending(o: &Self::Outcome) -> bool {
        matches!(&o.outcome, proto::call_stream_response::Outcome::Commit(c) if !c.durable)
    }
    fn durable_now(o: &Self::Outcome) -> bool {
        matches!(&o.outcome, proto::call_stream_response::Outcome::Commit(c) if c.durable)
    }
    async fn open(
        client: &Client,
        outgoing: ReceiverStream<Self::Request>,
    ) -> Result<Streaming<Self::Response>, Status> {
        Ok(client.stub().call_stream(client.req(outgoing)).await?.into_inner())
    }
}

/// Resolved when the server says a pipelined commit is durable.
type DurableReply = oneshot::Sender<Result<(), Status>>;
/// The word of a pipelined commit's durability, awaited.
type Told = oneshot::Receiver<Result<(), Status>>;

/// The callers waiting for answers on one stream.
struct Waiting<O> {
    replies: HashMap<u64, oneshot::Sender<Result<O, Status>>>,
    /// Pipelined commits waiting to hear of their durability.
    durable: HashMap<u64, DurableReply>,
    next_id: u64,
    /// Why the stream ended, once it has.
    ended: Option<Status>,
}

impl<O> Default for Waiting<O> {
    fn default() -> Waiting<O> {
        Waiting { replies: HashMap::new(), durable: HashMap::new(), next_id: 1, ended: None }
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
        Ok(self.call_told(client, call).await?.0)
    }

    /// Send `call` on the stream and wait for its answer; a call that
    /// asks to hear of its durability ([`Protocol::notifies`]) also gets
    /// the word that it is durable, registered before the call leaves (an
    /// answer that is a failure, or says durable already, resolves it at
    /// once: the server tells nothing more of it).
    pub(crate) async fn call_told(
        &self,
        client: &Client,
        call: P::Call,
    ) -> Result<(P::Outcome, Option<Told>), Status> {
        let open = self.stream(client).await?;
        let (reply, answer) = oneshot::channel();
        let notifies = P::notifies(&call);
        let (id, told) = {
            let mut w = lock(&open.waiting);
            if let Some(why) = &w.ended {
                return Err(ended(P::TO, why));
            }
            let id = w.next_id;
            w.next_id += 1;
            w.replies.insert(id, reply);
            let told = notifies.then(|| {
                let (tell, told) = oneshot::channel();
                w.durable.insert(id, tell);
                told
            });
            (id, told)
        };
        let _forget = Forget { waiting: &open.waiting, id };
        let outcome = self.send_and_wait(&open, id, call, answer).await;
        if told.is_some() && !matches!(&outcome, Ok(o) if P::pending(o)) {
            // A call durable at its answer, or one that failed, is told of
            // no more: the first gets its word here, the second none (its
            // caller has its error).
            let tell = lock(&open.waiting).durable.remove(&id);
            if let (Some(tell), Ok(o)) = (tell, &outcome)
                && P::durable_now(o)
            {
                let _ = tell.send(Ok(()));
            }
        }
        outcome.map(|o| (o, told))
    }

    async fn send_and_wait(
        &self,
        open: &Open<P>,
        id: u64,
        call: P::Call,
        answer: oneshot::Receiver<Result<P::Outcome, Status>>,
    ) -> Result<P::Outcome, Status> {
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
                if let Some(d) = outcome.as_ref().and_then(P::durable) {
                    tell(&waiting, d);
                    continue;
                }
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
    let (replies, durable) = {
        let mut w = lock(&waiting);
        let replies = std::mem::take(&mut w.replies);
        let durable = std::mem::take(&mut w.durable);
        w.ended = Some(why.clone());
        (replies, durable)
    };
    for (_, reply) in replies {
        let _ = reply.send(Err(ended(P::TO, &why)));
    }
    for (_, tell) in durable {
        let _ = tell.send(Err(ended(P::TO, &why)));
    }
}

/// Tell the pipelined commits the server names that they are durable (or,
/// with a failure, that the log failed before they were).
fn tell<O>(waiting: &Mutex<Waiting<O>>, d: &proto::Durable) {
    let tells: Vec<_> = {
        let mut w = lock(waiting);
        d.ids.iter().filter_map(|id| w.durable.remove(id)).collect()
    };
    for tell in tells {
        let r = match &d.failure {
            None => Ok(()),
            Some(f) => Err(status_of(f.clone())),
        };
        let _ = tell.send(r);
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

/// The calls of each stream, by kind (for [`stream_call!`]).
type ShardCallKind = proto::shard_stream_request::Call;
type TxnCallKind = proto::call_stream_request::Call;

/// One typed call on one of the connection's streams (`$calls`, of
/// protocol `$p`), or as the unary call `$unary` when the connection
/// streams none of that kind or the request is big.
macro_rules! stream_call {
    ($(#[$doc:meta])* $calls:ident, $p:ty, $call:ident, $name:ident, $unary:ident, $req:ty, $resp:ty, $variant:ident) => {
        $(#[$doc])*
        pub(crate) async fn $name(&self, r: $req) -> Result<$resp, Status> {
            let calls = self
                .$calls
                .as_deref()
                .filter(|_| prost::Message::encoded_len(&r) < STREAMED_CALL_MAX);
            let Some(calls) = calls else {
                return self.stub().$unary(self.req(r)).await.map(tonic::Response::into_inner);
            };
            type Kind = <$p as Protocol>::Kind;
            match <$p as Protocol>::kind(calls.call(self, $call::$variant(r).into()).await?) {
                Kind::$variant(a) => Ok(a),
                Kind::Failure(f) => Err(status_of(f)),
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
        stream_call!(
            $(#[$doc])* shard_calls, Shard, ShardCallKind,
            $name, $name, $req, $resp, $variant
        );
    };
}

/// A call of an interactive transaction ([`stream_call!`] on
/// `CallStream`).
macro_rules! txn_call {
    ($(#[$doc:meta])* $name:ident, $unary:ident, $req:ty, $resp:ty, $variant:ident) => {
        stream_call!(
            $(#[$doc])* txn_calls, Txn, TxnCallKind,
            $name, $unary, $req, $resp, $variant
        );
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
        /// `GetMany`.
        txn_get_many, get_many, proto::GetManyRequest, proto::GetManyResponse, GetMany
    );
    txn_call!(
        /// `Write`.
        txn_write, write, proto::WriteRequest, proto::WriteResponse, Write
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

impl Client {
    /// Whether this connection sends the calls of transactions on its
    /// stream.
    pub(crate) fn streams_calls(&self) -> bool {
        self.txn_calls.is_some()
    }

    /// A call of a transaction with the writes that go before it: on the
    /// stream, one message (its answer may be a write's failure); as calls
    /// (unary, or too big for the stream together), the writes first,
    /// waited for, then the call. With `begin`, the call's transaction is
    /// begun first (on the stream, in the same message): the transaction
    /// begun is returned even when the call failed.
    pub(crate) async fn txn_send(
        &self,
        call: TxnCallKind,
        writes: Option<proto::WriteRequest>,
        begin: Option<proto::BeginRequest>,
    ) -> (Option<proto::BeginResponse>, Result<proto::call_stream_response::Outcome, Status>) {
        let (began, r) = self.txn_send_told(call, writes, false, begin).await;
        (began, r.map(|(o, _)| o))
    }

    /// [`Self::txn_send`], and for a pipelined commit (`notify`) sent on
    /// the stream, the word of its durability there.
    async fn txn_send_told(
        &self,
        mut call: TxnCallKind,
        writes: Option<proto::WriteRequest>,
        notify: bool,
        begin: Option<proto::BeginRequest>,
    ) -> (
        Option<proto::BeginResponse>,
        Result<(proto::call_stream_response::Outcome, Option<Told>), Status>,
    ) {
        use proto::call_stream_response::Outcome as O;
        let len = call.encoded_len() + writes.as_ref().map_or(0, prost::Message::encoded_len);
        let calls = self.txn_calls.as_deref();
        if let Some(calls) = calls.filter(|_| len < STREAMED_CALL_MAX) {
            let sent = TxnCall { call, writes, notify, begin };
            return match calls.call_told(self, sent).await {
                Err(s) => (None, Err(s)),
                Ok((TxnAnswer { outcome: O::Failure(f), began }, _)) => (began, Err(status_of(f))),
                Ok((TxnAnswer { outcome, began }, told)) => (began, Ok((outcome, told))),
            };
        }
        let began = match begin {
            None => None,
            Some(b) => match self.txn_begin(b).await {
                Ok(b) => {
                    call.set_txn_id(b.txn_id);
                    Some(b)
                }
                Err(s) => return (None, Err(s)),
            },
        };
        (began, self.txn_unary(call, writes).await.map(|o| (o, None)))
    }

    /// A call and the writes before it as calls of their own (see
    /// [`Self::txn_send`]).
    async fn txn_unary(
        &self,
        call: TxnCallKind,
        writes: Option<proto::WriteRequest>,
    ) -> Result<proto::call_stream_response::Outcome, Status> {
        use proto::call_stream_response::Outcome as O;
        if let Some(mut w) = writes {
            w.txn_id = call.txn_id().unwrap_or_default();
            self.txn_write(w).await?;
        }
        Ok(match call {
            TxnCallKind::Begin(r) => O::Begin(self.txn_begin(r).await?),
            TxnCallKind::Get(r) => O::Get(self.txn_get(r).await?),
            TxnCallKind::GetMany(r) => O::GetMany(self.txn_get_many(r).await?),
            TxnCallKind::Put(r) => O::Put(self.txn_put(r).await?),
            TxnCallKind::Delete(r) => O::Delete(self.txn_delete(r).await?),
            TxnCallKind::Patch(r) => O::Patch(self.txn_patch(r).await?),
            TxnCallKind::Write(r) => O::Write(self.txn_write(r).await?),
            TxnCallKind::Commit(r) => O::Commit(self.txn_commit(r).await?),
            TxnCallKind::Abort(r) => O::Abort(self.txn_abort(r).await?),
            TxnCallKind::Scan(r) => {
                // Only a streamed client scans a batch a call.
                let Some(calls) = self.txn_calls.as_deref() else {
                    return Err(Status::internal("a scan call without a stream"));
                };
                match calls.call(self, TxnCall::from(TxnCallKind::Scan(r))).await? {
                    TxnAnswer { outcome: O::Failure(f), .. } => return Err(status_of(f)),
                    a => a.outcome,
                }
            }
        })
    }
}

impl Client {
    /// A commit (`call`, at pre-commit) with the writes that go before
    /// it, answered at pre-commit, and the word of its durability: on the
    /// stream, told there; otherwise (unary, or too big for the stream),
    /// asked with `WaitFor` in the background.
    pub(crate) async fn txn_commit_told(
        &self,
        call: TxnCallKind,
        writes: Option<proto::WriteRequest>,
        begin: Option<proto::BeginRequest>,
    ) -> Result<(proto::CommitResponse, crate::CommitAck), Status> {
        use proto::call_stream_response::Outcome as O;
        // The transaction begun is not needed: a commit ends it, answered
        // or not.
        let (c, told) = match self.txn_send_told(call, writes, true, begin).await.1? {
            (O::Commit(c), told) => (c, told),
            _ => return Err(Status::internal("a commit answered with another call's answer")),
        };
        let ack = match (c.durable, c.token, told) {
            (true, _, _) | (_, None, _) => crate::CommitAck::already_durable(),
            (false, _, Some(told)) => crate::CommitAck::told_by_call(told),
            (false, Some(token), None) => {
                let (tell, told) = tokio::sync::oneshot::channel();
                let client = self.clone();
                tokio::spawn(async move {
                    let wait = std::time::Duration::from_secs(60);
                    let r = client.wait_for(token, wait).await.map(drop);
                    let _ = tell.send(r.map_err(|e| Status::new(e.code(), e.message())));
                });
                crate::CommitAck::told_by_call(told)
            }
        };
        Ok((c, ack))
    }
}
