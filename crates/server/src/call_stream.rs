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
//! - at most [`IN_FLIGHT`] calls of a stream run at once: past that the
//!   server stops reading, and HTTP/2 flow control holds the client back;
//! - the stream ends with an error status only for a message that could
//!   not be read (the calls before it still run and answer);
//! - at shutdown the server stops reading, answers the calls it read, then
//!   ends the stream.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};
use milliscale_proto::v1::{
    self as proto, call_stream_request::Call, call_stream_response::Outcome,
};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tonic::{Status, Streaming};

use crate::auth::Role;
use crate::errors::{engine, failure, refuse};
use crate::service::{Caller, Service, count, iso_of};
use crate::stream::{IN_FLIGHT, read_chunks};

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
    let (answer, answers) = mpsc::channel(IN_FLIGHT);
    tokio::spawn(async move {
        let stop = service.stop.clone();
        let read = read_chunks(stop, requests, |chunk| {
            let (service, answer) = (Arc::clone(&service), answer.clone());
            // The calls that arrived together run in one task, each
            // answered as it is done.
            tokio::spawn(async move {
                let service = &service;
                let mut each: FuturesUnordered<_> = chunk
                    .into_iter()
                    .map(|(request, permit): (proto::CallStreamRequest, _)| {
                        let answer = answer.clone();
                        async move {
                            let outcome = match request.call {
                                None => Err(refuse::invalid("a stream request without its call")),
                                Some(call) => service.txn_call(caller, conn, call).await,
                            };
                            let outcome = outcome.unwrap_or_else(|s| Outcome::Failure(failure(&s)));
                            let id = request.id;
                            // A client that went away gets no answer; the
                            // call ran (or not) all the same.
                            let response = proto::CallStreamResponse { id, outcome: Some(outcome) };
                            let _ = answer.send(Ok(response)).await;
                            drop(permit);
                        }
                    })
                    .collect();
                while each.next().await.is_some() {}
            });
        });
        if let Err(status) = read.await {
            count("CallStream", status.code());
            let _ = answer.send(Err(status)).await;
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(answers))
}

/// The name a call is counted under, as its unary call is.
fn name(call: &Call) -> &'static str {
    match call {
        Call::Begin(_) => "Begin",
        Call::Get(_) => "Get",
        Call::Put(_) => "Put",
        Call::Delete(_) => "Delete",
        Call::Patch(_) => "Patch",
        Call::Commit(_) => "Commit",
        Call::Abort(_) => "Abort",
    }
}

impl Service {
    /// Run one call of an interactive transaction for `caller`, made on
    /// connection `conn`: the unary calls and the stream both come here.
    /// Counted under the call's name.
    pub(crate) async fn txn_call(
        &self,
        caller: Caller,
        conn: Option<u64>,
        call: Call,
    ) -> Result<Outcome, Status> {
        let rpc = name(&call);
        let r = match call {
            Call::Begin(b) => self.begin_txn(caller, conn, b).await.map(Outcome::Begin),
            Call::Get(g) => (|| {
                let table = self.backend.table(&g.table)?;
                self.with_txn(caller, g.txn_id, None, |tx| {
                    let value = tx.get(&table, &g.key).map_err(|e| engine(&e))?;
                    Ok(Outcome::Get(proto::GetResponse { value: value.map(Into::into) }))
                })
            })(),
            Call::Put(p) => (|| {
                let table = self.backend.table(&p.table)?;
                self.with_txn(caller, p.txn_id, Some("Put"), |tx| {
                    tx.put(&table, &p.key, &p.value).map_err(|e| engine(&e))?;
                    Ok(Outcome::Put(proto::PutResponse {}))
                })
            })(),
            Call::Delete(d) => (|| {
                let table = self.backend.table(&d.table)?;
                self.with_txn(caller, d.txn_id, Some("Delete"), |tx| {
                    let existed = tx.delete(&table, &d.key).map_err(|e| engine(&e))?;
                    Ok(Outcome::Delete(proto::DeleteResponse { existed }))
                })
            })(),
            Call::Patch(p) => (|| {
                let table = self.backend.table(&p.table)?;
                self.with_txn(caller, p.txn_id, Some("Patch"), |tx| {
                    tx.update_range(&table, &p.key, p.offset as usize, &p.bytes)
                        .map_err(|e| engine(&e))?;
                    Ok(Outcome::Patch(proto::PatchResponse {}))
                })
            })(),
            Call::Commit(c) => {
                async {
                    let tx = self.sessions.take(c.txn_id, caller.0)?;
                    let (token, durable, _) = self.commit_txn(tx, c.durability).await?;
                    Ok(Outcome::Commit(proto::CommitResponse { token, durable }))
                }
                .await
            }
            Call::Abort(a) => self.sessions.take(a.txn_id, caller.0).map(|tx| {
                tx.abort();
                Outcome::Abort(proto::AbortResponse {})
            }),
        };
        count(rpc, r.as_ref().map_or_else(|s| s.code(), |_| tonic::Code::Ok));
        r
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
