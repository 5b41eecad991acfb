//! The gRPC face of the service: each RPC of
//! `proto/milliscale/v1/milliscale.proto`, answered with [`Service`]'s
//! state (the execute stream by `stream`).

use std::pin::Pin;
use std::sync::Arc;

use milliscale_proto::v1 as proto;
use proto::milliscale_server::Milliscale;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::errors::{engine, refuse};
use crate::ops::{SCAN_BATCH_BYTES, SCAN_BATCH_ROWS, Scan};
use crate::service::{Backend, Service, count, done};

type ScanStream = Pin<Box<dyn Stream<Item = Result<proto::ScanResponse, Status>> + Send>>;

/// A unary shard call: the caller checked, then run as on the stream
/// ([`Service::shard_call`], which counts it).
macro_rules! shard_unary {
    ($service:ident, $req:ident, $variant:ident) => {{
        use proto::{shard_stream_request::Call, shard_stream_response::Outcome};
        let rpc = concat!("Shard", stringify!($variant));
        let caller = $service.caller(&$req).inspect_err(|s| count(rpc, s.code()))?;
        match $service.shard_call(caller, Call::$variant($req.into_inner())).await? {
            Outcome::$variant(r) => Ok(Response::new(r)),
            _ => Err(Status::internal("a shard call answered with another call's answer")),
        }
    }};
}

/// A unary call of an interactive transaction: the caller checked, then
/// run as on the stream ([`Service::txn_call`], which counts it).
macro_rules! txn_unary {
    ($service:ident, $req:ident, $variant:ident) => {{
        use proto::{call_stream_request::Call, call_stream_response::Outcome};
        let caller =
            $service.caller(&$req).inspect_err(|s| count(stringify!($variant), s.code()))?;
        let conn = crate::connection::ConnectionInfo::of(&$req).map(|c| c.id);
        match $service.txn_call(caller, conn, Call::$variant($req.into_inner()), None).await?.0 {
            Outcome::$variant(r) => Ok(Response::new(r)),
            _ => Err(Status::internal("a call answered with another call's answer")),
        }
    }};
}

#[tonic::async_trait]
impl Milliscale for Service {
    async fn create_table(
        &self,
        req: Request<proto::CreateTableRequest>,
    ) -> Result<Response<proto::CreateTableResponse>, Status> {
        let r = async {
            let db = self.writer(self.caller(&req)?, "creating a table")?;
            self.new_work()?;
            if let Some(shard) = &self.shard {
                shard.create_table(&req.get_ref().name).await?;
                return Ok(proto::CreateTableResponse {});
            }
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
            if let Some(shard) = &self.shard {
                shard.drop_table(&req.get_ref().name).await?;
                return Ok(proto::DropTableResponse {});
            }
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
            names: match (&self.shard, &self.backend) {
                (Some(shard), _) => shard.table_names(),
                (None, Backend::Writer(db)) => db.table_names(),
                (None, Backend::Replica(r)) => r.blocking().table_names(),
            },
        });
        done("ListTables", r)
    }

    async fn begin(
        &self,
        req: Request<proto::BeginRequest>,
    ) -> Result<Response<proto::BeginResponse>, Status> {
        txn_unary!(self, req, Begin)
    }

    async fn get(
        &self,
        req: Request<proto::GetRequest>,
    ) -> Result<Response<proto::GetResponse>, Status> {
        txn_unary!(self, req, Get)
    }

    async fn put(
        &self,
        req: Request<proto::PutRequest>,
    ) -> Result<Response<proto::PutResponse>, Status> {
        txn_unary!(self, req, Put)
    }

    async fn delete(
        &self,
        req: Request<proto::DeleteRequest>,
    ) -> Result<Response<proto::DeleteResponse>, Status> {
        txn_unary!(self, req, Delete)
    }

    async fn patch(
        &self,
        req: Request<proto::PatchRequest>,
    ) -> Result<Response<proto::PatchResponse>, Status> {
        txn_unary!(self, req, Patch)
    }

    async fn get_many(
        &self,
        req: Request<proto::GetManyRequest>,
    ) -> Result<Response<proto::GetManyResponse>, Status> {
        txn_unary!(self, req, GetMany)
    }

    async fn write(
        &self,
        req: Request<proto::WriteRequest>,
    ) -> Result<Response<proto::WriteResponse>, Status> {
        txn_unary!(self, req, Write)
    }

    type ChangesStream = crate::changes::ChangesStream;

    async fn changes(
        &self,
        req: Request<proto::ChangesRequest>,
    ) -> Result<Response<Self::ChangesStream>, Status> {
        let r = async {
            self.caller(&req)?;
            self.open_changes(req.into_inner()).await
        }
        .await;
        count("Changes", r.as_ref().map_or_else(|s| s.code(), |_| tonic::Code::Ok));
        r.map(Response::new)
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
                let msg = batch.map(|rows| proto::ScanResponse { rows, more: false });
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
        txn_unary!(self, req, Commit)
    }

    async fn abort(
        &self,
        req: Request<proto::AbortRequest>,
    ) -> Result<Response<proto::AbortResponse>, Status> {
        txn_unary!(self, req, Abort)
    }

    async fn execute(
        &self,
        req: Request<proto::ExecuteRequest>,
    ) -> Result<Response<proto::ExecuteResponse>, Status> {
        let r = async {
            let caller = self.caller(&req)?;
            self.new_work()?;
            self.single_server("Execute")?;
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
            .and_then(|c| self.single_server("ExecuteStream").map(|()| c))
            .inspect_err(|s| count("ExecuteStream", s.code()))?;
        let service = Arc::new(self.clone());
        Ok(Response::new(crate::stream::serve(service, caller, req.into_inner())))
    }

    type CallStreamStream = crate::call_stream::Answers;

    async fn call_stream(
        &self,
        req: Request<tonic::Streaming<proto::CallStreamRequest>>,
    ) -> Result<Response<Self::CallStreamStream>, Status> {
        let caller = self.caller(&req).inspect_err(|s| count("CallStream", s.code()))?;
        let conn = crate::connection::ConnectionInfo::of(&req).map(|c| c.id);
        let service = Arc::new(self.clone());
        Ok(Response::new(crate::call_stream::serve(service, caller, conn, req.into_inner())))
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
        let r = self.caller(&req).map(|_| {
            let (log_requests_per_s, log_usd_per_hour) = self.backend.log_rates();
            proto::StatusResponse {
                role: if self.backend.is_replica() { "replica" } else { "writer" }.into(),
                durable_token: self.backend.progress(),
                open_transactions: self.sessions.open_count() as u32,
                version: env!("CARGO_PKG_VERSION").into(),
                cpu_seconds: process_cpu_seconds(),
                log_requests_per_s,
                log_usd_per_hour,
            }
        });
        done("Status", r)
    }

    async fn shard_read(
        &self,
        req: Request<proto::ShardReadRequest>,
    ) -> Result<Response<proto::ShardReadResponse>, Status> {
        shard_unary!(self, req, Read)
    }

    async fn shard_scan(
        &self,
        req: Request<proto::ShardScanRequest>,
    ) -> Result<Response<proto::ShardScanResponse>, Status> {
        shard_unary!(self, req, Scan)
    }

    async fn shard_prepare(
        &self,
        req: Request<proto::ShardPrepareRequest>,
    ) -> Result<Response<proto::ShardPrepareResponse>, Status> {
        shard_unary!(self, req, Prepare)
    }

    async fn shard_execute(
        &self,
        req: Request<proto::ShardExecuteRequest>,
    ) -> Result<Response<proto::ShardExecuteResponse>, Status> {
        shard_unary!(self, req, Execute)
    }

    async fn shard_decide(
        &self,
        req: Request<proto::ShardDecideRequest>,
    ) -> Result<Response<proto::ShardDecideResponse>, Status> {
        shard_unary!(self, req, Decide)
    }

    type ShardStreamStream = crate::shard_stream::Answers;

    async fn shard_stream(
        &self,
        req: Request<tonic::Streaming<proto::ShardStreamRequest>>,
    ) -> Result<Response<Self::ShardStreamStream>, Status> {
        let caller = self
            .caller(&req)
            .and_then(|c| self.shard("ShardStream").map(|_| c))
            .inspect_err(|s| count("ShardStream", s.code()))?;
        self.shard_streams.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let service = Arc::new(self.clone());
        Ok(Response::new(crate::shard_stream::serve(service, caller, req.into_inner())))
    }

    async fn shard_query(
        &self,
        req: Request<proto::ShardQueryRequest>,
    ) -> Result<Response<proto::ShardQueryResponse>, Status> {
        let r = async {
            self.caller(&req)?;
            let shard = self.shard("ShardQuery")?;
            let q = req.into_inner();
            let status = shard.query(crate::shard::txn_from(q.txn)?, q.ts).await?;
            Ok(proto::ShardQueryResponse { status: crate::shard::status_to(status) as i32 })
        };
        done("ShardQuery", r.await)
    }

    async fn shard_info(
        &self,
        req: Request<proto::ShardInfoRequest>,
    ) -> Result<Response<proto::ShardInfoResponse>, Status> {
        let r = self.caller(&req).and_then(|_| {
            let shard = self.shard("ShardInfo")?;
            let mut info = shard.info();
            if let Some(s) = &req.get_ref().standby {
                self.standbys.checked(s);
            }
            info.standbys = self.standbys.health(self.backend.progress());
            info.streams_opened = self.shard_streams.load(std::sync::atomic::Ordering::Relaxed);
            if req.get_ref().loads {
                info.loads = shard.loads()?;
            }
            Ok(info)
        });
        done("ShardInfo", r)
    }

    async fn shard_leave(
        &self,
        req: Request<proto::ShardLeaveRequest>,
    ) -> Result<Response<proto::ShardLeaveResponse>, Status> {
        let r = self.caller(&req).and_then(|_| {
            self.shard("ShardLeave")?.leave(req.get_ref().client);
            Ok(proto::ShardLeaveResponse {})
        });
        done("ShardLeave", r)
    }

    async fn shard_map(
        &self,
        req: Request<proto::ShardMapRequest>,
    ) -> Result<Response<proto::ShardMapResponse>, Status> {
        let r = async {
            self.caller(&req)?;
            Ok(self.shard("ShardMap")?.map(req.get_ref().at_least).await)
        };
        done("ShardMap", r.await)
    }

    async fn shard_freeze(
        &self,
        req: Request<proto::ShardFreezeRequest>,
    ) -> Result<Response<proto::ShardFreezeResponse>, Status> {
        let r = async {
            self.writer(self.caller(&req)?, "freezing a range")?;
            self.shard("ShardFreeze")?.freeze(req.into_inner()).await
        };
        done("ShardFreeze", r.await)
    }

    async fn shard_export(
        &self,
        req: Request<proto::ShardExportRequest>,
    ) -> Result<Response<proto::ShardExportResponse>, Status> {
        let r = async {
            self.writer(self.caller(&req)?, "exporting a range")?;
            self.shard("ShardExport")?.export(req.into_inner()).await
        };
        done("ShardExport", r.await)
    }

    async fn shard_import(
        &self,
        req: Request<proto::ShardImportRequest>,
    ) -> Result<Response<proto::ShardImportResponse>, Status> {
        let r = async {
            self.writer(self.caller(&req)?, "importing a range")?;
            self.shard("ShardImport")?.import(req.into_inner()).await
        };
        done("ShardImport", r.await)
    }

    async fn shard_release(
        &self,
        req: Request<proto::ShardReleaseRequest>,
    ) -> Result<Response<proto::ShardReleaseResponse>, Status> {
        let r = async {
            self.writer(self.caller(&req)?, "releasing a range")?;
            self.shard("ShardRelease")?.release(req.into_inner()).await
        };
        done("ShardRelease", r.await)
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
