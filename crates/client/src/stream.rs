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
//! A pipelined batch ([`Multiplexer::execute`] with `notify`) is answered
//! at pre-commit and also registers for the stream's later `durable`
//! answer under the same id, before it is sent: the reader resolves it
//! when the server names the id, at once if the answer already says
//! durable, or with an error if the batch failed or the stream ended first
//! (then nobody knows whether it became durable).
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

/// Resolved when the server says a pipelined batch's commit is durable.
pub(crate) type DurableReply = oneshot::Sender<Result<()>>;

/// The callers waiting for answers on one stream.
#[derive(Default)]
struct Waiting {
    replies: HashMap<u64, Reply>,
    /// Pipelined batches waiting to hear of their durability.
    durable: HashMap<u64, DurableReply>,
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

/// A connection's one open stream of some kind (`Open` here, the shard
/// calls' in `calls`): opened at its first use, kept while it
/// lives, opened again, by one caller at a time, once it has ended.
pub(crate) struct Kept<T> {
    open: Mutex<Option<Arc<T>>>,
    opening: tokio::sync::Mutex<()>,
}

impl<T> Default for Kept<T> {
    fn default() -> Self {
        Kept { open: Mutex::new(None), opening: tokio::sync::Mutex::new(()) }
    }
}

impl<T> Kept<T> {
    /// The open stream if `live` says it still is, else one `open` makes.
    pub(crate) async fn get<E, Fut>(
        &self,
        live: impl Fn(&T) -> bool,
        open: impl FnOnce() -> Fut,
    ) -> std::result::Result<Arc<T>, E>
    where
        Fut: std::future::Future<Output = std::result::Result<T, E>>,
    {
        if let Some(kept) = self.current(&live) {
            return Ok(kept);
        }
        let _one_at_a_time = self.opening.lock().await;
        if let Some(kept) = self.current(&live) {
            return Ok(kept);
        }
        let opened = Arc::new(open().await?);
        *self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(Arc::clone(&opened));
        Ok(opened)
    }

    fn current(&self, live: &impl Fn(&T) -> bool) -> Option<Arc<T>> {
        let kept = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()?;
        live(&kept).then_some(kept)
    }
}

/// The stream a client's batches go over (see the module's comment).
#[derive(Default)]
pub(crate) struct Multiplexer {
    open: Kept<Open>,
}

impl std::fmt::Debug for Multiplexer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Multiplexer")
    }
}

impl Multiplexer {
    /// Run `request` over the stream; its answer. With `durable`, the
    /// request is pipelined (it must ask for a pre-commit) and `durable`
    /// is resolved once the server says its commit is durable.
    pub(crate) async fn execute(
        &self,
        client: &Client,
        request: proto::ExecuteRequest,
        mut durable: Option<DurableReply>,
    ) -> Result<proto::ExecuteResponse> {
        let mut request = Some(request);
        // At most twice: a second time only if the batch never left.
        for _ in 0..2 {
            let open = self.stream(client).await?;
            let (reply, answer) = oneshot::channel();
            let notify_durable = durable.is_some();
            let id = {
                let mut w = lock(&open.waiting);
                if w.ended.is_some() {
                    continue;
                }
                let id = w.next_id;
                w.next_id += 1;
                w.replies.insert(id, reply);
                if let Some(d) = durable.take() {
                    w.durable.insert(id, d);
                }
                id
            };
            let msg = proto::ExecuteStreamRequest { id, request: request.take(), notify_durable };
            if let Err(mpsc::error::SendError(msg)) = open.requests.send(msg).await {
                let mut w = lock(&open.waiting);
                w.replies.remove(&id);
                durable = w.durable.remove(&id);
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
        let live = |open: &Open| lock(&open.waiting).ended.is_none();
        self.open
            .get(live, || async {
                let (requests, outgoing) = mpsc::channel(IN_FLIGHT);
                let outgoing = tokio_stream::wrappers::ReceiverStream::new(outgoing);
                let answers =
                    client.stub().execute_stream(client.req(outgoing)).await?.into_inner();
                let waiting = SharedWaiting::default();
                tokio::spawn(read(Arc::clone(&waiting), answers));
                Ok(Open { requests, waiting })
            })
            .await
    }
}

/// Hand each answer to its caller; when the stream ends, fail the callers
/// still waiting.
async fn read(waiting: SharedWaiting, mut answers: Streaming<proto::ExecuteStreamResponse>) {
    let why = loop {
        match answers.message().await {
            Ok(Some(a)) => answered(&waiting, a),
            Ok(None) => break Error::local("the server ended the stream".into()),
            Err(status) => break Error::from(status),
        }
    };
    let (replies, durable) = {
        let mut w = lock(&waiting);
        w.ended = Some(why.clone());
        (std::mem::take(&mut w.replies), std::mem::take(&mut w.durable))
    };
    for (_, reply) in replies {
        let _ = reply.send(Err(Error::unanswered(&why)));
    }
    for (_, d) in durable {
        let _ = d.send(Err(Error::durability_unknown(&why)));
    }
}

/// Hand one answer to whoever waits for it.
fn answered(waiting: &SharedWaiting, a: proto::ExecuteStreamResponse) {
    if let Some(Outcome::Durable(d)) = a.outcome {
        let mut w = lock(waiting);
        let told: Vec<DurableReply> = d.ids.iter().filter_map(|id| w.durable.remove(id)).collect();
        drop(w);
        let failed = d.failure.map(Error::from_failure);
        for t in told {
            let _ = t.send(failed.clone().map_or(Ok(()), Err));
        }
        return;
    }
    let mut w = lock(waiting);
    let reply = w.replies.remove(&a.id);
    // Durable already, or failed: the server will not name it again.
    let settled = !matches!(&a.outcome, Some(Outcome::Done(r)) if !r.durable);
    let durable = if settled { w.durable.remove(&a.id) } else { None };
    drop(w);
    let result = outcome(a.outcome);
    if let Some(d) = durable {
        let _ = d.send(match &result {
            Ok(_) => Ok(()),
            Err(e) => Err(e.clone()),
        });
    }
    if let Some(reply) = reply {
        let _ = reply.send(result);
    }
}

fn outcome(o: Option<Outcome>) -> Result<proto::ExecuteResponse> {
    match o {
        Some(Outcome::Done(r)) => Ok(r),
        Some(Outcome::Failure(f)) => Err(Error::from_failure(f)),
        Some(Outcome::Durable(_)) | None => {
            Err(Error::local("the server answered without an outcome".into()))
        }
    }
}

/// A pipelined commit's durability ([`Client::execute_pipelined`],
/// [`crate::Transaction::commit_pipelined`]): [`CommitAck::durable`]
/// resolves once the server says the commit is durable. Dropping it
/// changes nothing on the server.
#[derive(Debug)]
pub struct CommitAck {
    told: Told,
}

#[derive(Debug)]
enum Told {
    Already,
    /// By the `ExecuteStream` reader.
    Batch(oneshot::Receiver<Result<()>>),
    /// By a call stream's reader.
    Call(oneshot::Receiver<std::result::Result<(), tonic::Status>>),
}

impl CommitAck {
    pub(crate) fn waiting(told: oneshot::Receiver<Result<()>>) -> CommitAck {
        CommitAck { told: Told::Batch(told) }
    }

    pub(crate) fn told_by_call(
        told: oneshot::Receiver<std::result::Result<(), tonic::Status>>,
    ) -> CommitAck {
        CommitAck { told: Told::Call(told) }
    }

    /// An ack for a commit already durable.
    pub(crate) fn already_durable() -> CommitAck {
        CommitAck { told: Told::Already }
    }

    /// Wait until the commit is durable. An error means the server could
    /// not make it durable, or the stream ended before it said: the
    /// commit may or may not survive, so treat it as not committed.
    pub async fn durable(self) -> Result<()> {
        let stopped = || Error::local("the stream's reader stopped without saying".into());
        match self.told {
            Told::Already => Ok(()),
            Told::Batch(told) => told.await.unwrap_or_else(|_| Err(stopped())),
            Told::Call(told) => match told.await {
                Ok(r) => r.map_err(Error::from),
                Err(_) => Err(stopped()),
            },
        }
    }
}
