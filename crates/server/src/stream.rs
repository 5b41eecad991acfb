//! `ExecuteStream`: many one-shot transactions over one gRPC stream.
//!
//! A unary call costs a new HTTP/2 stream, two header blocks, a task on
//! each side and, at a busy server, a system call per answer; on this
//! project's 2-core machines that per-call cost, not the engine, bounded
//! one-shot throughput (BENCHMARKS.md, "How fast is the engine through the
//! server?"). On a stream each transaction is one message each way, and
//! answers that are ready together leave in one write.
//!
//! Invariants:
//! - every request read gets exactly one answer with its id, unless the
//!   client went away first;
//! - at most [`IN_FLIGHT`] requests of a stream run at once: past that the
//!   server stops reading, and HTTP/2 flow control holds the client back;
//! - a transaction's failure is its answer (`Failure`), never the end of
//!   the stream, and so is an answer over the message limit (OUT_OF_RANGE;
//!   the transaction committed); the stream ends with an error status
//!   only for a request that could not be decoded or was over the limit
//!   (the Rust client sends batches over 1 MiB as calls instead);
//! - a request that asked to hear of its durability (`notify_durable`,
//!   pre-committed, not yet durable at its answer) gets exactly one
//!   `durable` answer after its `done` one, unless the client went away:
//!   its id listed once the commit is acknowledged, or with a failure if
//!   the log failed first; it holds its place among the [`IN_FLIGHT`]
//!   until then, which bounds the commits a client can leave waiting;
//! - at shutdown the server stops reading, answers what it read (the
//!   durability of its pre-commits too: the engine's close flushes them),
//!   then ends the stream cleanly (so the connection can close in the
//!   grace period).

use std::pin::Pin;
use std::sync::Arc;

use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use milliscale::CommitAck;
use milliscale_proto::v1::{self as proto, execute_stream_response::Outcome};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_stream::Stream;
use tonic::{Status, Streaming};

use crate::errors::{engine, failure, refuse};
use crate::service::{Caller, Service, count};

/// Requests of one stream that may run at once.
pub const IN_FLIGHT: usize = 1024;

/// At most this many requests that arrived together run in one task (a
/// task each cost more than a small batch's engine work; a chunk too big
/// would hold a worker thread for long).
const CHUNK: usize = 16;

/// The answers' side of a stream.
pub type Answers = Pin<Box<dyn Stream<Item = Result<proto::ExecuteStreamResponse, Status>> + Send>>;

type AnswerTx = mpsc::Sender<Result<proto::ExecuteStreamResponse, Status>>;

/// A pre-commit whose client waits to hear it is durable, with the place
/// it holds among the stream's requests in flight.
pub(crate) type Watched = (u64, CommitAck, OwnedSemaphorePermit);

/// Serve one stream opened by `caller`: read requests until the client
/// closes its side, a message is malformed, or the server stops.
pub fn serve(
    service: Arc<Service>,
    caller: Caller,
    requests: Streaming<proto::ExecuteStreamRequest>,
) -> Answers {
    let (answer, answers) = mpsc::channel(IN_FLIGHT);
    let (watch, watched) = mpsc::unbounded_channel();
    tokio::spawn(tell_durable(watched, answer.clone(), |d| proto::ExecuteStreamResponse {
        id: 0,
        outcome: Some(Outcome::Durable(d)),
    }));
    tokio::spawn(async move {
        if let Err(status) = read(service, caller, requests, &answer, watch).await {
            count("ExecuteStream", status.code());
            let _ = answer.send(Err(status)).await;
        }
        // The tasks in flight and the durability teller hold the other
        // senders: the answers' stream ends once they have answered.
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(answers))
}

/// Read the stream's requests and start them, a chunk at a time
/// ([`read_chunks`]). `Ok` once the client has closed its side or the
/// server stops; `Err` for a request that could not be read (the requests
/// before it still run).
async fn read(
    service: Arc<Service>,
    caller: Caller,
    requests: Streaming<proto::ExecuteStreamRequest>,
    answer: &AnswerTx,
    watch: mpsc::UnboundedSender<Watched>,
) -> Result<(), Status> {
    let stop = service.stop.clone();
    read_chunks(stop, requests, |chunk| {
        let (service, answer, watch) = (Arc::clone(&service), answer.clone(), watch.clone());
        tokio::spawn(run_chunk(service, caller, chunk, answer, watch));
        std::future::ready(())
    })
    .await
}

/// Read a stream's requests and hand them to `start` a chunk at a time: a
/// permit (a place among the [`IN_FLIGHT`]) and a request, then what has
/// already arrived (up to [`CHUNK`], each with its permit); the next chunk
/// is read once the future `start` returns is done. `Ok` once the client
/// has closed its side or the server stops; `Err` for a request that could
/// not be read (the chunks before it are started). The three streams'
/// readers (`ExecuteStream`'s, `ShardStream`'s, `CallStream`'s) read here.
pub(crate) async fn read_chunks<T, F: std::future::Future<Output = ()>>(
    mut stop: tokio::sync::watch::Receiver<bool>,
    mut requests: Streaming<T>,
    mut start: impl FnMut(Vec<(T, OwnedSemaphorePermit)>) -> F,
) -> Result<(), Status> {
    let permits = Arc::new(Semaphore::new(IN_FLIGHT));
    loop {
        let Some(first) = next_request(&permits, &mut stop, &mut requests).await? else {
            return Ok(());
        };
        let mut chunk = vec![first];
        let mut end = None;
        while chunk.len() < CHUNK {
            let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else { break };
            match requests.message().now_or_never() {
                // Nothing more has arrived.
                None => break,
                Some(Ok(Some(request))) => chunk.push((request, permit)),
                // The client closed its side, or a request was malformed.
                Some(other) => {
                    end = Some(other.map(|_| ()));
                    break;
                }
            }
        }
        start(chunk).await;
        if let Some(end) = end {
            return end;
        }
    }
}

/// The next request of a stream with its permit (a place among the
/// requests in flight, waited for first): `None` once the client has
/// closed its side or the server stops, `Err` for a request that could not
/// be read.
async fn next_request<T>(
    permits: &Arc<Semaphore>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
    requests: &mut Streaming<T>,
) -> Result<Option<(T, OwnedSemaphorePermit)>, Status> {
    let permit = tokio::select! {
        p = Arc::clone(permits).acquire_owned() => p.expect("the semaphore is never closed"),
        _ = stop.wait_for(|s| *s) => return Ok(None),
    };
    let request = tokio::select! {
        m = requests.message() => m?,
        _ = stop.wait_for(|s| *s) => return Ok(None),
    };
    Ok(request.map(|r| (r, permit)))
}

/// Run the requests of a chunk in one task, each answered as it is done:
/// the engine work of each runs in turn, and the waits (for durability,
/// before a retry) overlap.
async fn run_chunk(
    service: Arc<Service>,
    caller: Caller,
    chunk: Vec<(proto::ExecuteStreamRequest, OwnedSemaphorePermit)>,
    answer: AnswerTx,
    watch: mpsc::UnboundedSender<Watched>,
) {
    let (service, answer, watch) = (&service, &answer, &watch);
    let mut each: FuturesUnordered<_> = chunk
        .into_iter()
        .map(|(request, permit)| async move {
            let (msg, ack) = run(service, caller, request).await;
            // A client that went away gets no answer; the transaction ran
            // (or not) all the same, as a cancelled call's would. Watched
            // after the answer is sent, so the client knows the id before
            // it hears of its durability.
            if answer.send(Ok(msg)).await.is_ok()
                && let Some((id, ack)) = ack
            {
                let _ = watch.send((id, ack, permit));
            }
        })
        .collect();
    while each.next().await.is_some() {}
}

/// Run one request of the stream: its answer, and the ack to watch if
/// its client asked to hear of its durability.
async fn run(
    service: &Service,
    caller: Caller,
    request: proto::ExecuteStreamRequest,
) -> (proto::ExecuteStreamResponse, Option<(u64, CommitAck)>) {
    let (id, notify) = (request.id, request.notify_durable);
    let outcome = match request.request {
        None => Err(refuse::invalid("a stream request without its batch")),
        Some(batch) => match service.new_work() {
            Ok(()) => service.execute_batch(caller, batch).await,
            Err(s) => Err(s),
        },
    };
    count("ExecuteStream", outcome.as_ref().map_or_else(|s| s.code(), |_| tonic::Code::Ok));
    let (outcome, ack) = match outcome {
        Ok((done, ack)) => {
            // Too big an answer would end the whole stream (and fail its
            // other batches): it fails alone.
            let len = prost::Message::encoded_len(&done);
            let max = service.limits.max_message_bytes;
            if len > max {
                (Outcome::Failure(failure(&refuse::too_large(len, max))), ack)
            } else {
                (Outcome::Done(done), ack)
            }
        }
        Err(s) => (Outcome::Failure(failure(&s)), None),
    };
    let msg = proto::ExecuteStreamResponse { id, outcome: Some(outcome) };
    (msg, ack.filter(|_| notify).map(|a| (id, a)))
}

/// Tell the stream's client when its watched pre-commits become durable:
/// the ids acknowledged together (in the same round of the committer, or
/// by the time this task runs) go in one message, made by `message`.
/// Both streams with pipelined commits (`ExecuteStream`, `CallStream`)
/// tell here.
pub(crate) async fn tell_durable<R>(
    mut watched: mpsc::UnboundedReceiver<Watched>,
    answer: mpsc::Sender<Result<R, Status>>,
    message: impl Fn(proto::Durable) -> R,
) {
    let mut waiting = FuturesUnordered::new();
    let mut open = true;
    while open || !waiting.is_empty() {
        let first = tokio::select! {
            w = watched.recv(), if open => {
                match w {
                    Some((id, ack, permit)) => {
                        waiting.push(async move { (id, ack.durable().await.map(|_| ()), permit) });
                    }
                    None => open = false,
                }
                continue;
            }
            Some(first) = waiting.next() => first,
        };
        let mut ids = Vec::new();
        let mut next = Some(first);
        while let Some((id, result, _permit)) = next {
            match result {
                Ok(()) => ids.push(id),
                Err(e) => {
                    let failed =
                        proto::Durable { ids: vec![id], failure: Some(failure(&engine(&e))) };
                    if answer.send(Ok(message(failed))).await.is_err() {
                        return;
                    }
                }
            }
            next = waiting.next().now_or_never().flatten();
        }
        let durable = proto::Durable { ids, failure: None };
        if !durable.ids.is_empty() && answer.send(Ok(message(durable))).await.is_err() {
            return;
        }
    }
}
