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
//! - at shutdown the server stops reading, answers what it read, then
//!   ends the stream cleanly (so the connection can close in the grace
//!   period).

use std::pin::Pin;
use std::sync::Arc;

use milliscale_client::proto::{self, execute_stream_response::Outcome};
use tokio::sync::{Semaphore, mpsc};
use tokio_stream::Stream;
use tonic::{Status, Streaming};

use crate::errors::{failure, refuse};
use crate::service::{Caller, Service, count};

/// Requests of one stream that may run at once.
pub const IN_FLIGHT: usize = 1024;

/// The answers' side of a stream.
pub type Answers = Pin<Box<dyn Stream<Item = Result<proto::ExecuteStreamResponse, Status>> + Send>>;

/// Serve one stream opened by `caller`: read requests until the client
/// closes its side, a message is malformed, or the server stops.
pub fn serve(
    service: Arc<Service>,
    caller: Caller,
    mut requests: Streaming<proto::ExecuteStreamRequest>,
) -> Answers {
    let (answer, answers) = mpsc::channel(IN_FLIGHT);
    let permits = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut stop = service.stop.clone();
    tokio::spawn(async move {
        loop {
            let permit = tokio::select! {
                p = Arc::clone(&permits).acquire_owned() => p.expect("the semaphore is never closed"),
                _ = stop.wait_for(|s| *s) => break,
            };
            let request = tokio::select! {
                m = requests.message() => m,
                _ = stop.wait_for(|s| *s) => break,
            };
            let request = match request {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(status) => {
                    count("ExecuteStream", status.code());
                    let _ = answer.send(Err(status)).await;
                    break;
                }
            };
            let (service, answer) = (Arc::clone(&service), answer.clone());
            tokio::spawn(async move {
                let outcome = match request.request {
                    None => Err(refuse::invalid("a stream request without its batch")),
                    Some(batch) => match service.new_work() {
                        Ok(()) => service.execute_batch(caller, batch).await,
                        Err(s) => Err(s),
                    },
                };
                count(
                    "ExecuteStream",
                    outcome.as_ref().map_or_else(|s| s.code(), |_| tonic::Code::Ok),
                );
                let outcome = match outcome {
                    Ok(done) => {
                        // Too big an answer would end the whole stream
                        // (and fail its other batches): it fails alone.
                        let len = prost::Message::encoded_len(&done);
                        let max = service.limits.max_message_bytes;
                        if len > max {
                            Outcome::Failure(failure(&refuse::too_large(len, max)))
                        } else {
                            Outcome::Done(done)
                        }
                    }
                    Err(s) => Outcome::Failure(failure(&s)),
                };
                let msg = proto::ExecuteStreamResponse { id: request.id, outcome: Some(outcome) };
                // A client that went away gets no answer; the transaction
                // ran (or not) all the same, as a cancelled call's would.
                let _ = answer.send(Ok(msg)).await;
                drop(permit);
            });
        }
        // The tasks in flight hold the other senders: the answers' stream
        // ends once they have answered.
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(answers))
}
