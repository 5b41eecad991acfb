//! One-shot transactions over one `ExecuteStream` per client: the
//! client's side of the server's `stream` module.
//!
//! A [`Multiplexer`] opens the stream at the first batch and keeps it; each
//! batch is a message tagged with a fresh id, and a reader task hands each
//! answer to the caller waiting on that id. If the stream ends (the server
//! shut down, the connection broke), the callers still waiting get an
//! error that says their batch may or may not have committed, and the
//! next batch opens a new stream. A batch that was never handed to the
//! stream is sent on a new one instead: it cannot have run.
//!
//! Dropping the last clone of a client closes the request side, the
//! server answers what it read and ends the stream, and the reader exits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{mpsc, oneshot};
use tonic::Streaming;

use crate::proto::{self, execute_stream_response::Outcome};
use crate::{Client, Error, Result};

/// Batches a client may have sent on its stream before sending waits (the
/// server runs up to this many per stream at once).
const IN_FLIGHT: usize = 1024;

type Reply = oneshot::Sender<Result<proto::ExecuteResponse>>;

/// The callers waiting for answers on one stream.
#[derive(Default)]
struct Waiting {
    replies: HashMap<u64, Reply>,
    next_id: u64,
    /// Why the stream ended, once it has.
    ended: Option<Error>,
}

type SharedWaiting = Arc<Mutex<Waiting>>;

fn lock(w: &SharedWaiting) -> MutexGuard<'_, Waiting> {
    // A panic while holding it cannot leave the map half-changed.
    w.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One open stream: where to send, and who waits.
struct Open {
    requests: mpsc::Sender<proto::ExecuteStreamRequest>,
    waiting: SharedWaiting,
}

/// The stream a client's batches go over (see the module's comment).
#[derive(Default)]
pub(crate) struct Multiplexer {
    open: Mutex<Option<Arc<Open>>>,
    opening: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Multiplexer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Multiplexer")
    }
}

impl Multiplexer {
    /// Run `request` over the stream; its answer.
    pub(crate) async fn execute(
        &self,
        client: &Client,
        request: proto::ExecuteRequest,
    ) -> Result<proto::ExecuteResponse> {
        let mut request = Some(request);
        // At most twice: a second time only if the batch never left.
        for _ in 0..2 {
            let open = self.stream(client).await?;
            let (reply, answer) = oneshot::channel();
            let id = {
                let mut w = lock(&open.waiting);
                if w.ended.is_some() {
                    continue;
                }
                let id = w.next_id;
                w.next_id += 1;
                w.replies.insert(id, reply);
                id
            };
            let msg = proto::ExecuteStreamRequest { id, request: request.take() };
            if let Err(mpsc::error::SendError(msg)) = open.requests.send(msg).await {
                lock(&open.waiting).replies.remove(&id);
                request = msg.request;
                continue;
            }
            return answer.await.unwrap_or_else(|_| {
                Err(Error::local("the stream's reader stopped without an answer".into()))
            });
        }
        Err(Error::local("the stream to the server ended twice in a row".into()))
    }

    /// The open stream, opening one if there is none (or it ended).
    async fn stream(&self, client: &Client) -> Result<Arc<Open>> {
        if let Some(open) = self.current() {
            return Ok(open);
        }
        let _one_at_a_time = self.opening.lock().await;
        if let Some(open) = self.current() {
            return Ok(open);
        }
        let (requests, outgoing) = mpsc::channel(IN_FLIGHT);
        let outgoing = tokio_stream::wrappers::ReceiverStream::new(outgoing);
        let answers = client.stub().execute_stream(client.req(outgoing)).await?.into_inner();
        let waiting = SharedWaiting::default();
        tokio::spawn(read(Arc::clone(&waiting), answers));
        let open = Arc::new(Open { requests, waiting });
        *self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(Arc::clone(&open));
        Ok(open)
    }

    fn current(&self) -> Option<Arc<Open>> {
        let open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()?;
        let live = lock(&open.waiting).ended.is_none();
        live.then_some(open)
    }
}

/// Hand each answer to its caller; when the stream ends, fail the callers
/// still waiting.
async fn read(waiting: SharedWaiting, mut answers: Streaming<proto::ExecuteStreamResponse>) {
    let why = loop {
        match answers.message().await {
            Ok(Some(a)) => {
                let reply = lock(&waiting).replies.remove(&a.id);
                if let Some(reply) = reply {
                    let _ = reply.send(outcome(a.outcome));
                }
            }
            Ok(None) => break Error::local("the server ended the stream".into()),
            Err(status) => break Error::from(status),
        }
    };
    let replies = {
        let mut w = lock(&waiting);
        w.ended = Some(why.clone());
        std::mem::take(&mut w.replies)
    };
    for (_, reply) in replies {
        let _ = reply.send(Err(Error::unanswered(&why)));
    }
}

fn outcome(o: Option<Outcome>) -> Result<proto::ExecuteResponse> {
    match o {
        Some(Outcome::Done(r)) => Ok(r),
        Some(Outcome::Failure(f)) => Err(Error::from_failure(f)),
        None => Err(Error::local("the server answered without an outcome".into())),
    }
}
