//! The gRPC service: each RPC of `proto/milliscale/v1/milliscale.proto`
//! on a writer's database or a read replica.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use milliscale::{
    AsyncDatabase, AsyncReplica, AsyncTransaction, CommitAck, Isolation, Table, TxnOptions,
};
use milliscale_client::proto;
use proto::milliscale_server::Milliscale;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::auth::{Principal, Role, Tokens};
use crate::errors::{engine, refuse};
use crate::ops::{self, SCAN_BATCH_BYTES, SCAN_BATCH_ROWS, Scan};
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
    fn table(&self, name: &str) -> Result<Table, Status> {
        match self {
            Backend::Writer(db) => db.open_table(name),
            Backend::Replica(r) => r.open_table(name),
        }
        .map_err(|e| engine(&e))
    }

    fn is_replica(&self) -> bool {
        matches!(self, Backend::Replica(_))
    }

    /// Durable (writer) or applied (replica): every CSN below it.
    pub fn progress(&self) -> u64 {
        match self {
            Backend::Writer(db) => db.durable_csn(),
            Backend::Replica(r) => r.applied_csn(),
        }
    }

    /// Wait until `token` is durable (writer) or applied (replica).
    async fn wait_for(&self, token: u64, wait: Duration) -> Result<u64, Status> {
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
    async fn begin(
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
}

pub(crate) type Caller = (Principal, Role);

fn iso_of(i: Isolation) -> i32 {
    match i {
        Isolation::ReadCommitted => proto::Isolation::ReadCommitted as i32,
        Isolation::Snapshot => proto::Isolation::Snapshot as i32,
        Isolation::Serializable => proto::Isolation::Serializable as i32,
    }
}

pub(crate) fn count(rpc: &'static str, code: tonic::Code) {
    metrics::counter!("milliscale_server_requests_total", "rpc" => rpc, "code" => format!("{code:?}"))
        .increment(1);
}

/// Count the outcome of an RPC and pass it on.
fn done<T>(rpc: &'static str, r: Result<T, Status>) -> Result<Response<T>, Status> {
    count(rpc, r.as_ref().map_or_else(|s| s.code(), |_| tonic::Code::Ok));
    r.map(Response::new)
}

impl Service {
    fn caller<T>(&self, req: &Request<T>) -> Result<Caller, Status> {
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

    fn writer(&self, caller: Caller, what: &str) -> Result<&AsyncDatabase, Status> {
        if caller.1 == Role::ReadOnly {
            return Err(refuse::read_only_token(what));
        }
        match &self.backend {
            Backend::Writer(db) => Ok(db),
            Backend::Replica(_) => Err(refuse::replica(what)),
        }
    }

    fn wait_of(&self, wait_ms: u32) -> Duration {
        if wait_ms == 0 {
            self.limits.default_wait
        } else {
            Duration::from_millis(wait_ms.into()).min(self.limits.max_wait)
        }
    }

    /// Run `f` on the open transaction `id` of `caller`.
    fn with_txn<R>(
        &self,
        caller: Caller,
        id: u64,
        writes: Option<&str>,
        f: impl FnOnce(&mut AsyncTransaction) -> Result<R, Status>,
    ) -> Result<R, Status> {
        let session = self.sessions.get(id, caller.0)?;
        if let Some(what) = writes
            && session.read_only
        {
            return Err(refuse::read_only_txn(what));
        }
        let mut guard = session.txn.lock();
        let tx = guard.as_mut().ok_or_else(|| refuse::no_transaction(id))?;
        let r = f(tx);
        drop(guard);
        self.sessions.touch(&session);
        r
    }

    /// Commit as `durability` asks: the token, whether it is durable, and
    /// for a pre-commit not yet durable its ack.
    async fn commit_txn(
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

type ScanStream = Pin<Box<dyn Stream<Item = Result<proto::ScanResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Milliscale for Service {
    async fn create_table(
        &self,
        req: Request<proto::CreateTableRequest>,
    ) -> Result<Response<proto::CreateTableResponse>, Status> {
        let r = async {
            let db = self.writer(self.caller(&req)?, "creating a table")?;
            self.new_work()?;
            db.create_table(&req.get_ref().name).await.map_err(|e| engine(&e))?;
            Ok(proto::CreateTableResponse {})
        };
        done("CreateTable", r.await)
    }

    async fn drop_table(
        &self,
        req: Request<proto::DropTableRequest>,
    ) -> Result<Response<proto::DropTableResponse>, Status> {
        let r = async {
            let db = self.writer(self.caller(&req)?, "dropping a table")?;
            self.new_work()?;
            db.drop_table(&req.get_ref().name).await.map_err(|e| engine(&e))?;
            Ok(proto::DropTableResponse {})
        };
        done("DropTable", r.await)
    }

    async fn list_tables(
        &self,
        req: Request<proto::ListTablesRequest>,
    ) -> Result<Response<proto::ListTablesResponse>, Status> {
        let r = self.caller(&req).map(|_| proto::ListTablesResponse {
            names: match &self.backend {
                Backend::Writer(db) => db.table_names(),
                Backend::Replica(r) => r.blocking().table_names(),
            },
        });
        done("ListTables", r)
    }

    async fn begin(
        &self,
        req: Request<proto::BeginRequest>,
    ) -> Result<Response<proto::BeginResponse>, Status> {
        let r = async {
            let caller = self.caller(&req)?;
            self.new_work()?;
            let conn = crate::connection::ConnectionInfo::of(&req).map(|c| c.id);
            let b = req.into_inner();
            if !b.read_only {
                if caller.1 == Role::ReadOnly {
                    return Err(refuse::read_only_token("a read-write transaction"));
                }
                if self.backend.is_replica() {
                    return Err(refuse::replica("a read-write transaction"));
                }
            }
            let wait = self.wait_of(b.wait_ms);
            let tx =
                self.backend.begin(b.isolation, b.read_only, b.read_at, b.at_token, wait).await?;
            let (snapshot, isolation) = (tx.snapshot(), iso_of(tx.isolation()));
            let txn_id = self.sessions.open(tx, caller.0, b.read_only, conn)?;
            Ok(proto::BeginResponse { txn_id, snapshot, isolation })
        };
        done("Begin", r.await)
    }

    async fn get(
        &self,
        req: Request<proto::GetRequest>,
    ) -> Result<Response<proto::GetResponse>, Status> {
        let r = self.caller(&req).and_then(|caller| {
            let g = req.get_ref();
            let table = self.backend.table(&g.table)?;
            self.with_txn(caller, g.txn_id, None, |tx| {
                let value = tx.get(&table, &g.key).map_err(|e| engine(&e))?;
                Ok(proto::GetResponse { value: value.map(Into::into) })
            })
        });
        done("Get", r)
    }

    async fn put(
        &self,
        req: Request<proto::PutRequest>,
    ) -> Result<Response<proto::PutResponse>, Status> {
        let r = self.caller(&req).and_then(|caller| {
            let p = req.get_ref();
            let table = self.backend.table(&p.table)?;
            self.with_txn(caller, p.txn_id, Some("Put"), |tx| {
                tx.put(&table, &p.key, &p.value).map_err(|e| engine(&e))?;
                Ok(proto::PutResponse {})
            })
        });
        done("Put", r)
    }

    async fn delete(
        &self,
        req: Request<proto::DeleteRequest>,
    ) -> Result<Response<proto::DeleteResponse>, Status> {
        let r = self.caller(&req).and_then(|caller| {
            let d = req.get_ref();
            let table = self.backend.table(&d.table)?;
            self.with_txn(caller, d.txn_id, Some("Delete"), |tx| {
                let existed = tx.delete(&table, &d.key).map_err(|e| engine(&e))?;
                Ok(proto::DeleteResponse { existed })
            })
        });
        done("Delete", r)
    }

    async fn patch(
        &self,
        req: Request<proto::PatchRequest>,
    ) -> Result<Response<proto::PatchResponse>, Status> {
        let r = self.caller(&req).and_then(|caller| {
            let p = req.get_ref();
            let table = self.backend.table(&p.table)?;
            self.with_txn(caller, p.txn_id, Some("Patch"), |tx| {
                tx.update_range(&table, &p.key, p.offset as usize, &p.bytes)
                    .map_err(|e| engine(&e))?;
                Ok(proto::PatchResponse {})
            })
        });
        done("Patch", r)
    }

    type ScanStream = ScanStream;

    async fn scan(&self, req: Request<proto::ScanRequest>) -> Result<Response<ScanStream>, Status> {
        let r = (|| -> Result<_, Status> {
            let caller = self.caller(&req)?;
            let s = req.into_inner();
            let table = self.backend.table(&s.table)?;
            let session = self.sessions.get(s.txn_id, caller.0)?;
            let scan = Scan::of(s.range)?;
            Ok((table, session, scan, s.txn_id))
        })();
        count("Scan", r.as_ref().map_or_else(|s| s.code(), |_| tonic::Code::Ok));
        let (table, session, mut scan, id) = r?;
        let sessions = Arc::clone(&self.sessions);
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        tokio::spawn(async move {
            while !scan.is_done() {
                let batch = {
                    let mut guard = session.txn.lock();
                    match guard.as_mut() {
                        Some(t) => scan.next_batch(t, &table, SCAN_BATCH_ROWS, SCAN_BATCH_BYTES),
                        None => Err(refuse::no_transaction(id)),
                    }
                };
                sessions.touch(&session);
                let end = match &batch {
                    Ok(rows) => rows.is_empty(),
                    Err(_) => true,
                };
                if end && batch.is_ok() {
                    break;
                }
                let msg = batch.map(|rows| proto::ScanResponse { rows });
                if tx.send(msg).await.is_err() || end {
                    break; // the client went away, or the scan failed
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn commit(
        &self,
        req: Request<proto::CommitRequest>,
    ) -> Result<Response<proto::CommitResponse>, Status> {
        let r = async {
            let caller = self.caller(&req)?;
            let c = req.get_ref();
            let tx = self.sessions.take(c.txn_id, caller.0)?;
            let (token, durable, _) = self.commit_txn(tx, c.durability).await?;
            Ok(proto::CommitResponse { token, durable })
        };
        done("Commit", r.await)
    }

    async fn abort(
        &self,
        req: Request<proto::AbortRequest>,
    ) -> Result<Response<proto::AbortResponse>, Status> {
        let r = self.caller(&req).and_then(|caller| {
            self.sessions.take(req.get_ref().txn_id, caller.0)?.abort();
            Ok(proto::AbortResponse {})
        });
        done("Abort", r)
    }

    async fn execute(
        &self,
        req: Request<proto::ExecuteRequest>,
    ) -> Result<Response<proto::ExecuteResponse>, Status> {
        let r = async {
            let caller = self.caller(&req)?;
            self.new_work()?;
            // A call has no later message to say when a pre-commit is
            // durable: the client asks with WaitFor.
            self.execute_batch(caller, req.into_inner()).await.map(|(done, _)| done)
        };
        done("Execute", r.await)
    }

    type ExecuteStreamStream = crate::stream::Answers;

    async fn execute_stream(
        &self,
        req: Request<tonic::Streaming<proto::ExecuteStreamRequest>>,
    ) -> Result<Response<Self::ExecuteStreamStream>, Status> {
        let caller = self
            .caller(&req)
            .and_then(|c| self.new_work().map(|()| c))
            .inspect_err(|s| count("ExecuteStream", s.code()))?;
        let service = Arc::new(self.clone());
        Ok(Response::new(crate::stream::serve(service, caller, req.into_inner())))
    }

    async fn wait_for(
        &self,
        req: Request<proto::WaitForRequest>,
    ) -> Result<Response<proto::WaitForResponse>, Status> {
        let r = async {
            self.caller(&req)?;
            let w = req.get_ref();
            let reached = self.backend.wait_for(w.token, self.wait_of(w.wait_ms)).await?;
            Ok(proto::WaitForResponse { reached })
        };
        done("WaitFor", r.await)
    }

    async fn status(
        &self,
        req: Request<proto::StatusRequest>,
    ) -> Result<Response<proto::StatusResponse>, Status> {
        let r = self.caller(&req).map(|_| proto::StatusResponse {
            role: if self.backend.is_replica() { "replica" } else { "writer" }.into(),
            durable_token: self.backend.progress(),
            open_transactions: self.sessions.open_count() as u32,
            version: env!("CARGO_PKG_VERSION").into(),
            cpu_seconds: process_cpu_seconds(),
        });
        done("Status", r)
    }
}

/// This process's CPU time so far (user and system), in seconds.
fn process_cpu_seconds() -> f64 {
    // SAFETY: `getrusage` fills the struct it is given; a zeroed `rusage`
    // is a valid value of it.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut u) != 0 {
            return 0.0;
        }
        u
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}
