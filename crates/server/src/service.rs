//! The service's state and the work behind its RPCs, on a writer's
//! database or a read replica; `grpc` answers each RPC of
//! `proto/milliscale/v1/milliscale.proto` with it, and `stream` serves the
//! execute stream.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use milliscale::{
    AsyncDatabase, AsyncReplica, AsyncTransaction, CommitAck, Isolation, Table, TxnOptions,
};
use milliscale_proto::v1 as proto;
use tonic::{Request, Response, Status};

use crate::auth::{Principal, Role, Tokens};
use crate::errors::{engine, refuse};
use crate::ops;
use crate::sessions::Sessions;

/// How long a replica's token wait lasts before it asks again for a poll.
const DEMAND_SLICE: Duration = Duration::from_millis(50);

/// What the server serves.
#[derive(Clone, Debug)]
pub enum Backend {
    /// The database's writer.
    Writer(AsyncDatabase),
    /// A read replica: read-only transactions only.
    Replica(AsyncReplica),
}

impl Backend {
    pub(crate) fn table(&self, name: &str) -> Result<Table, Status> {
        match self {
            Backend::Writer(db) => db.open_table(name),
            Backend::Replica(r) => r.open_table(name),
        }
        .map_err(|e| engine(&e))
    }

    pub(crate) fn is_replica(&self) -> bool {
        matches!(self, Backend::Replica(_))
    }

    /// A writer's log since it opened: write requests a second, and
    /// dollars an hour if its stores have a price.
    pub(crate) fn log_rates(&self) -> (Option<f64>, Option<f64>) {
        let Backend::Writer(db) = self else { return (None, None) };
        let Some(m) = db.blocking().log_metrics() else { return (None, None) };
        let secs = m.cost.elapsed.as_secs_f64();
        let per_s = (secs > 0.0).then(|| m.cost.requests as f64 / secs);
        (per_s, m.cost.usd_per_hour())
    }

    /// Durable (writer) or applied (replica): every CSN below it.
    pub fn progress(&self) -> u64 {
        match self {
            Backend::Writer(db) => db.durable_csn(),
            Backend::Replica(r) => r.applied_csn(),
        }
    }

    /// Wait until `token` is durable (writer) or applied (replica).
    pub(crate) async fn wait_for(&self, token: u64, wait: Duration) -> Result<u64, Status> {
        let deadline = Instant::now() + wait;
        match self {
            Backend::Replica(r) => loop {
                // In slices: each new wait asks the replica's tails again
                // to poll now if the token is still unseen.
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(refuse::timeout(format!(
                        "token {token} not applied within {wait:?}; the replica has applied \
                         every CSN below {}",
                        r.applied_csn()
                    )));
                }
                match tokio::time::timeout(left.min(DEMAND_SLICE), r.wait_for(token)).await {
                    Ok(Ok(())) => return Ok(r.applied_csn()),
                    Ok(Err(e)) => return Err(engine(&e)),
                    Err(_) => {}
                }
            },
            Backend::Writer(db) => {
                // The engine publishes its durable CSN without a waiter
                // list; a token wait is rare next to commits (which await
                // their own acknowledgment), so it polls.
                let mut pause = Duration::from_micros(200);
                loop {
                    let durable = db.durable_csn();
                    if durable > token {
                        return Ok(durable);
                    }
                    if let Some(e) = db.blocking().poisoned() {
                        return Err(engine(&e));
                    }
                    if Instant::now() >= deadline {
                        return Err(refuse::timeout(format!(
                            "token {token} not durable within {wait:?}; every CSN below {durable} is"
                        )));
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(5));
                }
            }
        }
    }

    /// Begin a transaction as `begin` asks.
    pub(crate) async fn begin(
        &self,
        isolation: i32,
        read_only: bool,
        read_at: i32,
        at_token: Option<u64>,
        wait: Duration,
    ) -> Result<AsyncTransaction, Status> {
        let durable = match proto::ReadAt::try_from(read_at) {
            Ok(proto::ReadAt::Latest) => false,
            Ok(proto::ReadAt::Durable) => true,
            Err(_) => return Err(refuse::invalid(format!("unknown read_at {read_at}"))),
        };
        let isolation = match proto::Isolation::try_from(isolation) {
            Ok(proto::Isolation::Unspecified) => None,
            Ok(proto::Isolation::ReadCommitted) => Some(Isolation::ReadCommitted),
            Ok(proto::Isolation::Snapshot) => Some(Isolation::Snapshot),
            Ok(proto::Isolation::Serializable) => Some(Isolation::Serializable),
            Err(_) => return Err(refuse::invalid(format!("unknown isolation {isolation}"))),
        };
        if durable && !read_only {
            return Err(refuse::invalid("read_at DURABLE is for read-only transactions"));
        }
        match self {
            Backend::Writer(db) => {
                if let (Some(t), true) = (at_token, durable) {
                    self.wait_for(t, wait).await?;
                }
                // On the writer every commit that returned a token is
                // visible at the latest snapshot already.
                let opts = TxnOptions { isolation, read_only, durable_snapshot: durable };
                db.begin_with(opts).map_err(|e| engine(&e))
            }
            Backend::Replica(r) => {
                if !read_only {
                    return Err(refuse::replica("a read-write transaction"));
                }
                if durable {
                    return Err(refuse::invalid(
                        "read_at DURABLE is for the writer; a replica reads what it has applied",
                    ));
                }
                if let Some(t) = at_token {
                    self.wait_for(t, wait).await.map_err(|s| {
                        if s.code() == tonic::Code::DeadlineExceeded {
                            engine(&milliscale::Error::Stale {
                                token: t,
                                applied: r.applied_csn(),
                                seen: r.blocking().metrics().seen_csn,
                                waited: wait,
                            })
                        } else {
                            s
                        }
                    })?;
                }
                r.begin().map_err(|e| engine(&e))
            }
        }
    }
}

/// The limits a request is held to (see `ServerOptions`).
#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    pub default_wait: Duration,
    pub max_wait: Duration,
    pub max_batch_ops: usize,
    pub max_retries: u32,
    pub max_message_bytes: usize,
    pub max_txn_bytes: u64,
}

/// The service behind the RPCs.
#[derive(Clone)]
pub struct Service {
    pub(crate) backend: Backend,
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) tokens: Tokens,
    pub(crate) limits: RequestLimits,
    pub(crate) shutting_down: Arc<AtomicBool>,
    /// Turns true when the server stops accepting (after the grace period
    /// for open transactions); streams stop reading then.
    pub(crate) stop: tokio::sync::watch::Receiver<bool>,
    /// The cluster shard this server is, if it is one.
    pub(crate) shard: Option<Arc<crate::shard::Shard>>,
    /// The shard's standbys, as they last checked on it.
    pub(crate) standbys: Arc<crate::shard::standby::Standbys>,
    /// `ShardStream`s opened here since the server started.
    pub(crate) shard_streams: Arc<std::sync::atomic::AtomicU64>,
    /// The change feeds this server may still run (`Changes`).
    pub(crate) feeds: Arc<tokio::sync::Semaphore>,
}

pub(crate) type Caller = (Principal, Role);

pub(crate) fn iso_of(i: Isolation) -> i32 {
    match i {
        Isolation::ReadCommitted => proto::Isolation::ReadCommitted as i32,
        Isolation::Snapshot => proto::Isolation::Snapshot as i32,
        Isolation::Serializable => proto::Isolation::Serializable as i32,
    }
}

pub(crate) fn count(rpc: &'static str, code: tonic::Code) {
    metrics::counter!("milliscale_server_requests_total", "rpc" => rpc, "code" => code_name(code))
        .increment(1);
}

/// A status code's name, as the metrics label it (no allocation a call).
fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "Ok",
        Cancelled => "Cancelled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

/// Count the outcome of an RPC and pass it on.
pub(crate) fn done<T>(rpc: &'static str, r: Result<T, Status>) -> Result<Response<T>, Status> {
    count(rpc, r.as_ref().map_or_else(|s| s.code(), |_| tonic::Code::Ok));
    r.map(Response::new)
}

impl Service {
    pub(crate) fn caller<T>(&self, req: &Request<T>) -> Result<Caller, Status> {
        self.tokens.authorize(req.metadata())
    }

    /// Refuse new transactions, batches and table changes once the server
    /// is shutting down; calls on open transactions go on so they can
    /// finish.
    pub(crate) fn new_work(&self) -> Result<(), Status> {
        if self.shutting_down.load(Ordering::Acquire) {
            return Err(refuse::shutting_down());
        }
        Ok(())
    }

    pub(crate) fn writer(&self, caller: Caller, what: &str) -> Result<&AsyncDatabase, Status> {
        if caller.1 == Role::ReadOnly {
            return Err(refuse::read_only_token(what));
        }
        match &self.backend {
            Backend::Writer(db) => Ok(db),
            Backend::Replica(_) => Err(refuse::replica(what)),
        }
    }

    /// The shard, for a shard's call.
    pub(crate) fn shard(&self, what: &str) -> Result<&Arc<crate::shard::Shard>, Status> {
        self.shard.as_ref().ok_or_else(|| refuse::not_a_shard(what))
    }

    /// Refuse a single server's data call on a shard: a shard's rows are
    /// versions, read and written through a cluster client.
    pub(crate) fn single_server(&self, what: &str) -> Result<(), Status> {
        match &self.shard {
            Some(s) => Err(refuse::a_shard(what, s.id())),
            None => Ok(()),
        }
    }

    pub(crate) fn wait_of(&self, wait_ms: u32) -> Duration {
        if wait_ms == 0 {
            self.limits.default_wait
        } else {
            Duration::from_millis(wait_ms.into()).min(self.limits.max_wait)
        }
    }

    /// Run `f` on the open transaction `id` of `caller`.
    pub(crate) fn with_txn<R>(
        &self,
        caller: Caller,
        id: u64,
        writes: Option<&str>,
        f: impl FnOnce(&mut AsyncTransaction) -> Result<R, Status>,
    ) -> Result<R, Status> {
        self.with_txn_writing(caller, id, writes.map(|w| (w, 0)), f)
    }

    /// [`Self::with_txn`] of a call that writes `bytes` (keys, values,
    /// patches): refused, and nothing of it run, if the transaction would
    /// then have written more than [`RequestLimits::max_txn_bytes`].
    pub(crate) fn with_txn_writing<R>(
        &self,
        caller: Caller,
        id: u64,
        writes: Option<(&str, u64)>,
        f: impl FnOnce(&mut AsyncTransaction) -> Result<R, Status>,
    ) -> Result<R, Status> {
        let session = self.sessions.get(id, caller.0)?;
        if let Some((what, _)) = writes
            && session.read_only
        {
            return Err(refuse::read_only_txn(what));
        }
        let mut guard = session.txn.lock();
        let tx = guard.as_mut().ok_or_else(|| refuse::no_transaction(id))?;
        let bytes = writes.map_or(0, |(_, b)| b);
        // Counted under the transaction's lock: its calls add one at a time.
        let written = session.written.load(Ordering::Relaxed);
        if written + bytes > self.limits.max_txn_bytes {
            return Err(refuse::txn_too_large(written, bytes, self.limits.max_txn_bytes));
        }
        let r = f(tx);
        if bytes > 0 {
            session.written.store(written + bytes, Ordering::Relaxed);
        }
        drop(guard);
        self.sessions.touch(&session);
        r
    }

    /// Commit as `durability` asks: the token, whether it is durable, and
    /// for a pre-commit not yet durable its ack.
    pub(crate) async fn commit_txn(
        &self,
        tx: AsyncTransaction,
        durability: i32,
    ) -> Result<(Option<u64>, bool, Option<CommitAck>), Status> {
        match proto::Durability::try_from(durability) {
            Ok(proto::Durability::Wait) => {
                let info = tx.commit().await.map_err(|e| engine(&e))?;
                Ok((info.csn, true, None))
            }
            Ok(proto::Durability::Precommit) => {
                let ack = tx.precommit().map_err(|e| engine(&e))?;
                let (csn, durable) = (ack.csn(), ack.is_acknowledged());
                Ok((csn, durable, (!durable).then_some(ack)))
            }
            Err(_) => {
                tx.abort();
                Err(refuse::invalid(format!("unknown durability {durability}")))
            }
        }
    }

    /// Run a one-shot batch: its answer, and for a pre-commit not yet
    /// durable its ack (dropping it changes nothing).
    pub(crate) async fn execute_batch(
        &self,
        caller: Caller,
        req: proto::ExecuteRequest,
    ) -> Result<(proto::ExecuteResponse, Option<CommitAck>), Status> {
        if req.operations.len() > self.limits.max_batch_ops {
            return Err(refuse::invalid(format!(
                "a batch has at most {} operations (this one has {})",
                self.limits.max_batch_ops,
                req.operations.len()
            )));
        }
        let writes = req.operations.iter().any(ops::writes);
        if writes {
            self.writer(caller, "the batch")?;
        }
        let wait = self.wait_of(req.wait_ms);
        let max_retries = req.max_retries.min(self.limits.max_retries);
        let mut tables = ops::Tables::default();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut tx =
                self.backend.begin(req.isolation, !writes, req.read_at, req.at_token, wait).await?;
            let ran = ops::run_batch(&mut tx, &req.operations, &req.table, &mut tables, |name| {
                self.backend.table(name)
            });
            let outcome = match ran {
                Ok(results) => self.commit_txn(tx, req.durability).await.map(|c| (results, c)),
                Err(s) => {
                    tx.abort();
                    Err(s)
                }
            };
            match outcome {
                Ok((results, (token, durable, ack))) => {
                    let done =
                        proto::ExecuteResponse { results, token, durable, attempts: attempt };
                    return Ok((done, ack));
                }
                Err(s) if s.code() == tonic::Code::Aborted && attempt <= max_retries => {
                    // Back off a little, more each time, so that the
                    // transactions that collided do not collide again.
                    let cap = 1u64 << attempt.min(6);
                    let us = rand::random_range(0..cap * 100);
                    tokio::time::sleep(Duration::from_micros(us)).await;
                }
                Err(s) => return Err(s),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_code_is_labelled_by_its_name() {
        for i in 0..=16 {
            let code = tonic::Code::from_i32(i);
            assert_eq!(super::code_name(code), format!("{code:?}"));
        }
    }
}
