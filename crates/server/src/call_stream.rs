//! `CallStream`: the calls of interactive transactions over one gRPC
//! stream, and the one body each of those calls runs, unary or streamed
//! ([`Service::txn_call`]).
//!
//! A unary call costs a new HTTP/2 stream, a header block each way and a
//! task on each side: about 65 µs of server CPU on this project's
//! machines, against a few µs of engine work for a `get` (BENCHMARKS.md,
//! "How fast is the engine through the server?"). On the stream a call is
//! one message each way, and answers ready together leave in one write.
//!
//! Invariants:
//! - each call runs exactly as its unary call would ([`Service::txn_call`]
//!   serves both), under the token the stream was opened with and as a
//!   call of the connection the stream is on (its limit of open
//!   transactions);
//! - every request read gets exactly one answer with its id, unless the
//!   client went away first; a call's error is its answer (`Failure`, with
//!   the metadata a status would carry), never the end of the stream;
//! - the calls that need no wait (all but Begin and Commit) run in the
//!   stream's reader, one at a time, in the order they were sent; Begin
//!   and Commit, and a call that begins its transaction (`begin_first`),
//!   run in tasks, at most [`IN_FLIGHT`] of a stream at once;
//! - a request with `begin_first` begins its transaction as a Begin
//!   would, then runs as a request of that transaction; its answer names
//!   the transaction (`began`) whenever the begin succeeded, so a client
//!   whose call failed can still end it;
//! - at most [`ANSWERS`] answers wait for a client that does not read
//!   them: past that the reader waits and reads no more calls, and HTTP/2
//!   flow control holds the client back (the server's memory does not);
//! - the stream ends with an error status only for a message that could
//!   not be read (the calls before it still run and answer);
//! - a request's `writes` run in its call's transaction, in order, just
//!   before the call; if one fails, the failure is the request's answer
//!   and the call does not run (a commit's transaction is aborted, as a
//!   failed commit's is). So a client may hold a transaction's writes and
//!   send them with its next read or its commit: the order of the
//!   transaction's operations is the order the client made them;
//! - a commit that asked to hear of its durability (`notify_durable`,
//!   pre-committed, not yet durable at its answer) gets exactly one
//!   `durable` answer after its own, as on `ExecuteStream`, and holds its
//!   place among the [`IN_FLIGHT`] until then;
//! - at shutdown the server stops reading, answers the calls it read, then
//!   ends the stream.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};
use milliscale::CommitAck;
use milliscale_proto::v1::{
    self as proto, call_stream_request::Call, call_stream_response::Outcome,
};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tonic::{Status, Streaming};

use crate::auth::Role;
use crate::errors::{engine, failure, refuse};
use crate::ops::{
    SCAN_BATCH_BYTES, SCAN_BATCH_ROWS, Scan, Tables, run_batch, writes, written_bytes,
};
use crate::service::{Caller, Service, count, iso_of};
#[cfg(doc)]
use crate::stream::IN_FLIGHT;
use crate::stream::{read_chunks, tell_durable};

/// The answers' side of a stream.
pub type Answers = Pin<Box<dyn Stream<Item = Result<proto::CallStreamResponse, Status>> + Send>>;

/// Serve one stream opened by `caller` on connection `conn`: read calls
/// until the client closes its side, a message is malformed, or the
/// server stops.
pub fn serve(
    service: Arc<Service>,
    caller: Caller,
    conn: Option<u64>,
    requests: Streaming<proto::CallStreamRequest>,
) -> Answers {
    let (answer, answers) = mpsc::channel(ANSWERS);
    let (watch, watched) = mpsc::unbounded_channel();
    tokio::spawn(tell_durable(watched, answer.clone(), |d| proto::CallStreamResponse {
        id: 0,
        outcome: Some(Outcome::Durable(d)),
        began: None,
    }));
    tokio::spawn(async move {
        let stop = service.stop.clone();
        let read = read_chunks(stop, requests, |chunk| {
            let (service, answer, watch) = (Arc::clone(&service), answer.clone(), watch.clone());
            async move {
                let later = answer_now(&service, caller, chunk, &answer).await;
                if !later.is_empty() {
                    tokio::spawn(run_later(service, caller, conn, later, answer, watch));
                }
            }
        });
        if let Err(status) = read.await {
            count("CallStream", status.code());
            let _ = answer.send(Err(status)).await;
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(answers))
}

/// Answers a stream holds for a client that does not read them: past
/// these, the reader waits (and so reads no more calls), and HTTP/2 flow
/// control holds the client back. With the largest values (256 KiB), 16
/// MiB a stream.
const ANSWERS: usize = 64;

type Permit = tokio::sync::OwnedSemaphorePermit;
type AnswerTx = mpsc::Sender<Result<proto::CallStreamResponse, Status>>;

/// Run and answer, in the stream's reader and in order, the calls of
/// `chunk` that need no wait: no task each (at a light load most chunks
/// are one call, and a task cost more than a point read), and an answer
/// the client does not take in holds up the reader, not memory. The
/// others (Begin, Commit, or a request without its call), to run in a
/// task.
async fn answer_now(
    service: &Service,
    caller: Caller,
    chunk: Vec<(proto::CallStreamRequest, Permit)>,
    answer: &AnswerTx,
) -> Vec<(proto::CallStreamRequest, Permit)> {
    let (mut later, mut answers) = (Vec::new(), Vec::with_capacity(chunk.len()));
    let mut held = 0;
    for (mut request, permit) in chunk {
        if !request.call.as_ref().is_some_and(needs_no_wait) || request.begin_first.is_some() {
            later.push((request, permit));
            continue;
        }
        let (id, call) = (request.id, request.call.take().expect("a call"));
        let outcome = match service.txn_call_now(caller, call, request.writes) {
            Ok(outcome) => service.fitting(outcome),
            Err(s) => Outcome::Failure(failure(&s)),
        };
        let response = proto::CallStreamResponse { id, outcome: Some(outcome), began: None };
        held += prost::Message::encoded_len(&response);
        answers.push((response, permit));
        if held >= HELD_ANSWER_BYTES {
            send_all(&mut answers, answer).await;
            held = 0;
        }
    }
    send_all(&mut answers, answer).await;
    later
}

/// The answers of a chunk's calls are queued together, so that they leave
/// in one write, unless they grow past this.
const HELD_ANSWER_BYTES: usize = 1 << 20;

/// Queue `answers` for the client. A client that went away gets no
/// answer; the calls ran all the same.
async fn send_all(answers: &mut Vec<(proto::CallStreamResponse, Permit)>, answer: &AnswerTx) {
    for (response, permit) in answers.drain(..) {
        let _ = answer.send(Ok(response)).await;
        drop(permit);
    }
}

/// Run the calls that wait (Begin, Commit) in one task, each answered as
/// it is done.
async fn run_later(
    service: Arc<Service>,
    caller: Caller,
    conn: Option<u64>,
    later: Vec<(proto::CallStreamRequest, Permit)>,
    answer: AnswerTx,
    watch: mpsc::UnboundedSender<crate::stream::Watched>,
) {
    let (service, answer, watch) = (&service, &answer, &watch);
    let mut each: FuturesUnordered<_> = later
        .into_iter()
        .map(|(request, permit)| async move {
            let (id, notify) = (request.id, request.notify_durable);
            let (began, outcome) = match (request.call, request.begin_first) {
                (None, _) => (None, Err(refuse::invalid("a stream request without its call"))),
                (Some(call), None) => {
                    (None, service.txn_call(caller, conn, call, request.writes).await)
                }
                (Some(call), Some(begin)) => {
                    service.txn_call_begun(caller, conn, begin, call, request.writes).await
                }
            };
            let (outcome, ack) = match outcome {
                Ok((outcome, ack)) => (service.fitting(outcome), ack),
                Err(s) => (Outcome::Failure(failure(&s)), None),
            };
            // Watched after the answer is sent, so the client knows the id
            // before it hears of its durability.
            let response = proto::CallStreamResponse { id, outcome: Some(outcome), began };
            if answer.send(Ok(response)).await.is_ok()
                && notify
                && let Some(ack) = ack
            {
                let _ = watch.send((id, ack, permit));
            }
        })
        .collect();
    while each.next().await.is_some() {}
}

/// Whether a call runs without waiting for anything (Begin may wait for a
/// replica to catch up, and Commit for durability).
fn needs_no_wait(call: &Call) -> bool {
    !matches!(call, Call::Begin(_) | Call::Commit(_))
}

/// The name a call is counted under, as its unary call is.
fn name(call: &Call) -> &'static str {
    match call {
        Call::Begin(_) => "Begin",
        Call::Get(_) => "Get",
        Call::GetMany(_) => "GetMany",
        Call::Put(_) => "Put",
        Call::Delete(_) => "Delete",
        Call::Patch(_) => "Patch",
        Call::Write(_) => "Write",
        Call::Scan(_) => "Scan",
        Call::Commit(_) => "Commit",
        Call::Abort(_) => "Abort",
    }
}

impl Service {
    /// Run one call of an interactive transaction for `caller`, made on
    /// connection `conn`, after `writes` if any (the stream's requests
    /// carry them): the unary calls and the stream both come here. The
    /// answer, and a pre-commit's ack while it is not durable. Counted
    /// under the call's name.
    pub(crate) async fn txn_call(
        &self,
        caller: Caller,
        conn: Option<u64>,
        call: Call,
        writes: Option<proto::WriteRequest>,
    ) -> Result<(Outcome, Option<CommitAck>), Status> {
        if needs_no_wait(&call) {
            return self.txn_call_now(caller, call, writes).map(|o| (o, None));
        }
        let rpc = name(&call);
        let r = async {
            if let Some(w) = writes.filter(|w| !w.writes.is_empty()) {
                self.writes_before(caller, &call, &w)?;
            }
            self.run_waiting(caller, conn, call).await
        }
        .await;
        count(rpc, r.as_ref().map_or_else(|s| s.code(), |_| tonic::Code::Ok));
        r
    }

    /// [`Self::txn_call`] of a call that begins its transaction
    /// (`begin_first`): the transaction begun, then the call's outcome.
    /// If the begin fails, its error is the outcome and nothing else runs.
    pub(crate) async fn txn_call_begun(
        &self,
        caller: Caller,
        conn: Option<u64>,
        begin: proto::BeginRequest,
        mut call: Call,
        writes: Option<proto::WriteRequest>,
    ) -> (Option<proto::BeginResponse>, Result<(Outcome, Option<CommitAck>), Status>) {
        let named = call.txn_id().into_iter().chain(writes.as_ref().map(|w| w.txn_id));
        if matches!(call, Call::Begin(_)) || named.into_iter().any(|id| id != 0) {
            let why = "a call that begins its transaction (begin_first) is not a Begin \
                       and names no transaction (txn_id 0)";
            count("Begin", tonic::Code::InvalidArgument);
            return (None, Err(refuse::invalid(why)));
        }
        let began = self.begin_txn(caller, conn, begin).await;
        count("Begin", began.as_ref().map_or_else(|s| s.code(), |_| tonic::Code::Ok));
        match began {
            Ok(began) => {
                call.set_txn_id(began.txn_id);
                let outcome = self.txn_call(caller, conn, call, writes).await;
                (Some(began), outcome)
            }
            Err(s) => (None, Err(s)),
        }
    }

    /// [`Self::txn_call`] of a call that needs no wait, run at once.
    pub(crate) fn txn_call_now(
        &self,
        caller: Caller,
        call: Call,
        writes: Option<proto::WriteRequest>,
    ) -> Result<Outcome, Status> {
        let rpc = name(&call);
        let r = (|| {
            if let Some(w) = writes.filter(|w| !w.writes.is_empty()) {
                self.writes_before(caller, &call, &w)?;
            }
            self.run_now(caller, call)
        })();
        count(rpc, r.as_ref().map_or_else(|s| s.code(), |_| tonic::Code::Ok));
        r
    }

    /// Run the writes a stream request carries before its call. A commit
    /// whose writes fail is not run and its transaction is aborted; an
    /// abort's writes are dropped (it would undo them).
    fn writes_before(
        &self,
        caller: Caller,
        call: &Call,
        w: &proto::WriteRequest,
    ) -> Result<(), Status> {
        let Some(txn_id) = call.txn_id() else {
            return Err(refuse::invalid(
                "writes sent with a Begin: its transaction is not open yet",
            ));
        };
        if w.txn_id != 0 && w.txn_id != txn_id {
            return Err(refuse::invalid(format!(
                "writes for transaction {} sent with a call of transaction {txn_id}",
                w.txn_id
            )));
        }
        if matches!(call, Call::Abort(_)) {
            return Ok(());
        }
        let r = self.write(caller, txn_id, w);
        if r.is_err()
            && matches!(call, Call::Commit(_))
            && let Ok(tx) = self.sessions.take(txn_id, caller.0)
        {
            tx.abort();
        }
        r
    }

    /// Run a transaction's writes in order (put, delete and patch only).
    fn write(&self, caller: Caller, txn_id: u64, w: &proto::WriteRequest) -> Result<(), Status> {
        if let Some(i) = w.writes.iter().position(|op| !writes(op)) {
            return Err(refuse::invalid(format!("write {i} is not a put, delete or patch")));
        }
        let bytes = w.writes.iter().map(written_bytes).sum();
        self.with_txn_writing(caller, txn_id, Some(("Write", bytes)), |tx| {
            let open = |name: &str| self.backend.table(name);
            run_batch(tx, &w.writes, &w.table, &mut Tables::default(), open).map(|_| ())
        })
    }

    /// An answer too big for one message fails alone (OUT_OF_RANGE), not
    /// the stream: only a read of many keys can grow so.
    fn fitting(&self, outcome: Outcome) -> Outcome {
        if let Outcome::GetMany(r) = &outcome {
            let (len, max) = (prost::Message::encoded_len(r), self.limits.max_message_bytes);
            if len > max {
                return Outcome::Failure(failure(&refuse::too_large(len, max)));
            }
        }
        outcome
    }

    /// Run a Begin or a Commit (its writes already run).
    async fn run_waiting(
        &self,
        caller: Caller,
        conn: Option<u64>,
        call: Call,
    ) -> Result<(Outcome, Option<CommitAck>), Status> {
        match call {
            Call::Begin(b) => Ok((Outcome::Begin(self.begin_txn(caller, conn, b).await?), None)),
            Call::Commit(c) => {
                let tx = self.sessions.take(c.txn_id, caller.0)?;
                let (token, durable, ack) = self.commit_txn(tx, c.durability).await?;
                Ok((Outcome::Commit(proto::CommitResponse { token, durable }), ack))
            }
            call => self.run_now(caller, call).map(|o| (o, None)),
        }
    }

    /// Run a call that needs no wait (its writes already run).
    fn run_now(&self, caller: Caller, call: Call) -> Result<Outcome, Status> {
        match call {
            Call::Begin(_) | Call::Commit(_) => {
                Err(Status::internal("a call that waits was run as one that does not"))
            }
            Call::Get(g) => {
                let table = self.backend.table(&g.table)?;
                self.with_txn(caller, g.txn_id, None, |tx| {
                    let value = tx.get(&table, &g.key).map_err(|e| engine(&e))?;
                    Ok(Outcome::Get(proto::GetResponse { value: value.map(Into::into) }))
                })
            }
            Call::GetMany(g) => {
                let tables = self.tables_of(&g)?;
                self.with_txn(caller, g.txn_id, None, |tx| {
                    let values = g
                        .keys
                        .iter()
                        .zip(tables)
                        .map(|(key, table)| {
                            let value = tx.get(&table, key).map_err(|e| engine(&e))?;
                            Ok(proto::GetResponse { value: value.map(Into::into) })
                        })
                        .collect::<Result<_, Status>>()?;
                    Ok(Outcome::GetMany(proto::GetManyResponse { values }))
                })
            }
            Call::Put(p) => {
                let table = self.backend.table(&p.table)?;
                let bytes = (p.key.len() + p.value.len()) as u64;
                self.with_txn_writing(caller, p.txn_id, Some(("Put", bytes)), |tx| {
                    tx.put(&table, &p.key, &p.value).map_err(|e| engine(&e))?;
                    Ok(Outcome::Put(proto::PutResponse {}))
                })
            }
            Call::Delete(d) => {
                let table = self.backend.table(&d.table)?;
                let bytes = d.key.len() as u64;
                self.with_txn_writing(caller, d.txn_id, Some(("Delete", bytes)), |tx| {
                    let existed = tx.delete(&table, &d.key).map_err(|e| engine(&e))?;
                    Ok(Outcome::Delete(proto::DeleteResponse { existed }))
                })
            }
            Call::Patch(p) => {
                let table = self.backend.table(&p.table)?;
                let bytes = (p.key.len() + p.bytes.len()) as u64;
                self.with_txn_writing(caller, p.txn_id, Some(("Patch", bytes)), |tx| {
                    tx.update_range(&table, &p.key, p.offset as usize, &p.bytes)
                        .map_err(|e| engine(&e))?;
                    Ok(Outcome::Patch(proto::PatchResponse {}))
                })
            }
            Call::Write(w) => {
                self.write(caller, w.txn_id, &w).map(|()| Outcome::Write(proto::WriteResponse {}))
            }
            Call::Scan(s) => {
                // One batch; the client asks again from after its last
                // row while `more` says so.
                let table = self.backend.table(&s.table)?;
                let mut scan = Scan::of(s.range)?;
                self.with_txn(caller, s.txn_id, None, |tx| {
                    let rows = scan.next_batch(tx, &table, SCAN_BATCH_ROWS, SCAN_BATCH_BYTES)?;
                    Ok(Outcome::Scan(proto::ScanResponse { rows, more: !scan.is_done() }))
                })
            }
            Call::Abort(a) => self.sessions.take(a.txn_id, caller.0).map(|tx| {
                tx.abort();
                Outcome::Abort(proto::AbortResponse {})
            }),
        }
    }

    /// The table of each key of a `GetMany` (its `tables`, or `table`),
    /// each looked up once for a run of keys of one table.
    fn tables_of(&self, g: &proto::GetManyRequest) -> Result<Vec<milliscale::Table>, Status> {
        if !g.tables.is_empty() && g.tables.len() != g.keys.len() {
            return Err(refuse::invalid(format!(
                "GetMany names {} tables for {} keys: one a key, or none",
                g.tables.len(),
                g.keys.len()
            )));
        }
        let name = |i: usize| match g.tables.get(i) {
            Some(t) if !t.is_empty() => t.as_str(),
            _ => g.table.as_str(),
        };
        if g.keys.is_empty() {
            // No key: the table is still checked, as a read of one would.
            self.backend.table(&g.table)?;
        }
        let mut out: Vec<milliscale::Table> = Vec::with_capacity(g.keys.len());
        for i in 0..g.keys.len() {
            let table = match out.last() {
                Some(last) if last.name() == name(i) => last.clone(),
                _ => self.backend.table(name(i))?,
            };
            out.push(table);
        }
        Ok(out)
    }

    /// `Begin`: a transaction opened and kept for its next calls.
    async fn begin_txn(
        &self,
        caller: Caller,
        conn: Option<u64>,
        b: proto::BeginRequest,
    ) -> Result<proto::BeginResponse, Status> {
        self.new_work()?;
        self.single_server("Begin")?;
        if !b.read_only {
            if caller.1 == Role::ReadOnly {
                return Err(refuse::read_only_token("a read-write transaction"));
            }
            if self.backend.is_replica() {
                return Err(refuse::replica("a read-write transaction"));
            }
        }
        let wait = self.wait_of(b.wait_ms);
        let tx = self.backend.begin(b.isolation, b.read_only, b.read_at, b.at_token, wait).await?;
        let (snapshot, isolation) = (tx.snapshot(), iso_of(tx.isolation()));
        let txn_id = self.sessions.open(tx, caller.0, b.read_only, conn)?;
        Ok(proto::BeginResponse { txn_id, snapshot, isolation })
    }
}
