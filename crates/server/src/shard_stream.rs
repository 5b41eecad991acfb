//! `ShardStream`: a cluster client's calls to this shard over one gRPC
//! stream (the client's side: `milliscale-client`'s `calls`).
//!
//! A unary call costs a new HTTP/2 stream, a header block each way and a
//! task on each side; a shard spent more on that than `milliscale serve`
//! spends on a whole one-shot transaction (BENCHMARKS.md). On the stream a
//! call is one message each way, and answers ready together leave in one
//! write.
//!
//! Invariants:
//! - each call runs exactly as its unary call would ([`Service::shard_call`]
//!   serves both), under the token the stream was opened with; one-shot
//!   batches that arrive together run as a group
//!   ([`crate::shard::Shard::execute_together`]), each by the same rules
//!   and with the same answer as alone;
//! - every request read gets exactly one answer with its id, unless the
//!   client went away first; a call's error is its answer (`Failure`, with
//!   the metadata a status would carry), never the end of the stream;
//! - at most [`IN_FLIGHT`] calls of a stream run at once: past that the
//!   shard stops reading, and HTTP/2 flow control holds the client back;
//! - the stream ends with an error status only for a message that could
//!   not be read (the calls before it still run and answer);
//! - at shutdown the shard stops reading, answers the calls it read, then
//!   ends the stream (the client fails the calls it sent after, as a
//!   broken connection's, and sends them again elsewhere).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};
use milliscale_proto::v1::{
    self as proto, shard_stream_request::Call, shard_stream_response::Outcome,
};
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio_stream::Stream;
use tonic::{Status, Streaming};

use crate::auth::Role;
use crate::errors::{failure, refuse};
use crate::service::{Caller, Service, count};
use crate::stream::{IN_FLIGHT, read_chunks};

/// The answers' side of a stream.
pub type Answers = Pin<Box<dyn Stream<Item = Result<proto::ShardStreamResponse, Status>> + Send>>;

/// Serve one stream opened by `caller`: read calls until the client closes
/// its side, a message is malformed, or the server stops.
pub fn serve(
    service: Arc<Service>,
    caller: Caller,
    requests: Streaming<proto::ShardStreamRequest>,
) -> Answers {
    let (answer, answers) = mpsc::channel(IN_FLIGHT);
    tokio::spawn(async move {
        if let Err(status) = read(service, caller, requests, &answer).await {
            count("ShardStream", status.code());
            let _ = answer.send(Err(status)).await;
        }
        // The calls in flight hold the other senders: the answers' stream
        // ends once they have answered.
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(answers))
}

/// Read the stream's calls and start them a chunk at a time, as
/// `ExecuteStream` does ([`read_chunks`]): the calls that arrived together
/// (up to 16) run in one task, each answered as it is done; their waits
/// (for a decision, for durability) overlap. A task each cost more than
/// the shard's work on a one-shot batch (BENCHMARKS.md).
async fn read(
    service: Arc<Service>,
    caller: Caller,
    requests: Streaming<proto::ShardStreamRequest>,
    answer: &mpsc::Sender<Result<proto::ShardStreamResponse, Status>>,
) -> Result<(), Status> {
    let stop = service.stop.clone();
    read_chunks(stop, requests, |chunk| {
        let (service, answer) = (Arc::clone(&service), answer.clone());
        tokio::spawn(run_chunk(service, caller, chunk, answer));
        std::future::ready(())
    })
    .await
}

/// Run the calls of a chunk in one task, each answered as it is done. Its
/// one-shot batches, when there are two or more, run as a group
/// ([`crate::shard::Shard::execute_together`]: the shard's lock taken
/// twice for them all); the other calls, each as its unary call would.
async fn run_chunk(
    service: Arc<Service>,
    caller: Caller,
    chunk: Calls,
    answer: mpsc::Sender<Result<proto::ShardStreamResponse, Status>>,
) {
    let (service, answer) = (&service, &answer);
    let send = |id: u64, outcome: Result<Outcome, Status>, permit: OwnedSemaphorePermit| async move {
        let outcome = outcome.unwrap_or_else(|s| Outcome::Failure(failure(&s)));
        // A client that went away gets no answer; the call ran (or
        // not) all the same, as a cancelled call's would.
        let _ = answer.send(Ok(proto::ShardStreamResponse { id, outcome: Some(outcome) })).await;
        drop(permit);
    };
    let (group, rest) = grouped(service, caller, chunk);
    let mut each: FuturesUnordered<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = rest
        .into_iter()
        .map(|(request, permit)| -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
            Box::pin(async move {
                let outcome = match request.call {
                    None => Err(refuse::invalid("a stream request without its call")),
                    Some(call) => service.shard_call(caller, call).await,
                };
                send(request.id, outcome, permit).await;
            })
        })
        .collect();
    if let Some((shard, batches)) = group {
        each.push(Box::pin(async move {
            let (named, requests): (Vec<_>, Vec<_>) =
                batches.into_iter().map(|(id, r, permit)| ((id, permit), r)).unzip();
            let mut answers: FuturesUnordered<_> = shard
                .execute_together(requests)
                .into_iter()
                .zip(named)
                .map(|(answered, (id, permit))| async move {
                    let r = answered.await;
                    count(
                        "ShardExecute",
                        r.as_ref().map_or_else(|s| s.code(), |_| tonic::Code::Ok),
                    );
                    send(id, r.map(Outcome::Execute), permit).await;
                })
                .collect();
            while answers.next().await.is_some() {}
        }));
    }
    while each.next().await.is_some() {}
}

/// A chunk's calls, each with its place among the calls in flight.
type Calls = Vec<(proto::ShardStreamRequest, OwnedSemaphorePermit)>;

/// One-shot batches to run as a group on a shard, with their ids.
type Group<'s> =
    (&'s Arc<crate::shard::Shard>, Vec<(u64, proto::ShardExecuteRequest, OwnedSemaphorePermit)>);

/// The one-shot batches of `chunk` that may run as a group (on a shard,
/// allowed to `caller`, the server not stopping: each is refused alone
/// otherwise, as its unary call would be), with their ids, if there are
/// two or more; and the chunk's other calls.
fn grouped(service: &Service, caller: Caller, chunk: Calls) -> (Option<Group<'_>>, Calls) {
    let shard = match service.shard("ShardExecute") {
        Ok(shard) if service.new_work().is_ok() => shard,
        _ => return (None, chunk),
    };
    let may = |c: &Option<Call>| match c {
        Some(Call::Execute(r)) => {
            caller.1 != Role::ReadOnly || !r.operations.iter().any(proto::Operation::writes)
        }
        _ => false,
    };
    if chunk.iter().filter(|(r, _)| may(&r.call)).count() < 2 {
        return (None, chunk);
    }
    let (mut batches, mut rest) = (Vec::new(), Vec::new());
    for (request, permit) in chunk {
        let alone = !may(&request.call);
        match request.call {
            Some(Call::Execute(r)) if !alone => batches.push((request.id, r, permit)),
            call => rest.push((proto::ShardStreamRequest { id: request.id, call }, permit)),
        }
    }
    (Some((shard, batches)), rest)
}

/// The name a call is counted under, as its unary call is.
fn name(call: &Call) -> &'static str {
    match call {
        Call::Read(_) => "ShardRead",
        Call::Scan(_) => "ShardScan",
        Call::Prepare(_) => "ShardPrepare",
        Call::Execute(_) => "ShardExecute",
        Call::Decide(_) => "ShardDecide",
    }
}

impl Service {
    /// Run one of a cluster client's calls to this shard for `caller`:
    /// the unary calls and the stream both come here. Counted under the
    /// call's name.
    pub(crate) async fn shard_call(&self, caller: Caller, call: Call) -> Result<Outcome, Status> {
        let rpc = name(&call);
        let r = async {
            let shard = self.shard(rpc)?;
            match call {
                Call::Read(r) => shard.read(r).await.map(Outcome::Read),
                Call::Scan(r) => shard.scan(r).await.map(Outcome::Scan),
                Call::Prepare(r) => {
                    if caller.1 == Role::ReadOnly && !r.writes.is_empty() {
                        return Err(refuse::read_only_token("the prepare"));
                    }
                    self.new_work()?;
                    shard.prepare(r).await.map(Outcome::Prepare)
                }
                Call::Execute(r) => {
                    let writes = r.operations.iter().any(proto::Operation::writes);
                    if caller.1 == Role::ReadOnly && writes {
                        return Err(refuse::read_only_token("the batch"));
                    }
                    self.new_work()?;
                    shard.execute(r).await.map(Outcome::Execute)
                }
                Call::Decide(d) => {
                    shard.decide(crate::shard::txn_from(d.txn)?, d.commit, d.ts).await?;
                    Ok(Outcome::Decide(proto::ShardDecideResponse {}))
                }
            }
        };
        let r = r.await;
        count(rpc, r.as_ref().map_or_else(|s| s.code(), |_| tonic::Code::Ok));
        r
    }
}
