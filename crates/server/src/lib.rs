//! `milliscale serve`: the engine over the network.
//!
//! One gRPC service (`proto/milliscale/v1/milliscale.proto`) over a
//! writer's [`AsyncDatabase`] or a read replica ([`AsyncReplica`]):
//! tables, interactive transactions held in server-side sessions,
//! one-shot batches, token waits and read-your-writes on replicas. Beside
//! it, an optional HTTP listener answers `/healthz`, `/readyz` and
//! `/metrics` (Prometheus).
//!
//! The parts: [`auth`] (bearer tokens), `sessions` (open transactions,
//! caps, the idle reaper), `connection` (accepted connections, whose
//! transactions end with them), `service` (the RPCs), `ops` (scans and
//! batches inside one transaction), `errors` (engine errors to status
//! codes), `admin` (the HTTP endpoints). The life of a request is in
//! ARCHITECTURE.md; the limits and their defaults in README.md.

#![deny(missing_docs, clippy::unwrap_used)]

mod admin;
pub mod auth;
mod call_stream;
mod changes;
mod connection;
mod errors;
mod grpc;
mod in_flight;
mod ops;
mod service;
mod sessions;
pub mod shard;
mod shard_stream;
mod stream;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use auth::{Role, Tokens};
pub use changes::{CLUSTER_FEEDS_MAX, FEEDS_MAX};
pub use errors::{KIND_KEY, RETRYABLE_KEY};
pub use milliscale::{AsyncDatabase, AsyncReplica};
pub use ops::{EXECUTE_SCAN_ROWS_MAX, SCAN_BATCH_BYTES, SCAN_BATCH_ROWS};
pub use service::Backend;
pub use sessions::EXPIRED_REMEMBERED;

use milliscale_proto::v1::milliscale_server::MilliscaleServer;
use service::{RequestLimits, Service};
use sessions::{SessionLimits, Sessions};

/// A certificate chain and its private key, PEM-encoded: the server
/// speaks TLS (rustls) with them.
#[derive(Clone)]
pub struct TlsIdentity {
    /// The certificate chain, PEM.
    pub cert_pem: Vec<u8>,
    /// The private key, PEM.
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsIdentity { .. }")
    }
}

/// How the server listens, whom it lets in, and its limits. Every limit
/// has a default sized for one server on a small machine; README.md
/// lists them.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// The gRPC address.
    pub listen: SocketAddr,
    /// The HTTP address for `/healthz`, `/readyz` and `/metrics`.
    pub http: Option<SocketAddr>,
    /// Bearer tokens; none lets every caller read and write.
    pub tokens: Tokens,
    /// TLS; none is plaintext.
    pub tls: Option<TlsIdentity>,
    /// Allow a non-loopback address without TLS and tokens.
    pub insecure: bool,
    /// Largest request or response message, in bytes.
    pub max_message_bytes: usize,
    /// Most interactive transactions open at once.
    pub max_open_txns: usize,
    /// Most interactive transactions open at once on one connection.
    pub max_open_txns_per_conn: usize,
    /// Most bytes (keys, values, patches) one interactive transaction may
    /// write through the server: its writes stay in the server's memory
    /// until it ends.
    pub max_txn_bytes: u64,
    /// An interactive transaction idle this long is aborted.
    pub idle_timeout: Duration,
    /// How long a token wait lasts when the request names no wait.
    pub default_wait: Duration,
    /// The longest token wait a request may ask for.
    pub max_wait: Duration,
    /// Most operations in one `Execute` batch.
    pub max_batch_ops: usize,
    /// Most retries one `Execute` may ask for.
    pub max_retries: u32,
    /// At shutdown, how long open transactions get to finish.
    pub grace: Duration,
    /// Serve as a shard of a cluster (`--cluster`): MILANA's calls, over
    /// the writer's database (design record 0008).
    pub cluster: Option<shard::ShardOptions>,
}

/// Default [`ServerOptions::max_message_bytes`]: a batch of 16 values of
/// the largest size, with room for keys and framing.
pub const MAX_MESSAGE_BYTES_DEFAULT: usize = 16 << 20;

/// Default [`ServerOptions::max_txn_bytes`]: 256 MiB (TiKV's default is
/// 100 MB, FoundationDB's 10 MB).
pub const MAX_TXN_BYTES_DEFAULT: u64 = 256 << 20;

impl ServerOptions {
    /// Defaults, listening on `listen`.
    pub fn new(listen: SocketAddr) -> ServerOptions {
        ServerOptions {
            listen,
            http: None,
            tokens: Tokens::none(),
            tls: None,
            insecure: false,
            max_message_bytes: MAX_MESSAGE_BYTES_DEFAULT,
            max_open_txns: 4096,
            max_open_txns_per_conn: 1024,
            max_txn_bytes: MAX_TXN_BYTES_DEFAULT,
            idle_timeout: Duration::from_secs(30),
            default_wait: Duration::from_secs(5),
            max_wait: Duration::from_secs(60),
            max_batch_ops: 10_000,
            max_retries: 32,
            grace: Duration::from_secs(10),
            cluster: None,
        }
    }

    /// Refuse what would be unsafe or cannot work: a non-loopback address
    /// without TLS and tokens (unless `insecure`), zero caps, a message
    /// limit below one largest value.
    pub fn check(&self) -> Result<(), String> {
        let exposed = |a: &SocketAddr| !a.ip().is_loopback();
        if !self.insecure && (exposed(&self.listen) || self.http.as_ref().is_some_and(exposed)) {
            let mut missing = Vec::new();
            if self.tls.is_none() {
                missing.push("TLS (--tls-cert and --tls-key)");
            }
            if self.tokens.is_empty() {
                missing.push("bearer tokens (--tokens FILE or MILLISCALE_TOKENS)");
            }
            if !missing.is_empty() && exposed(&self.listen) {
                return Err(format!(
                    "refusing to listen on {} without {}; add them, listen on 127.0.0.1, \
                     or pass --insecure",
                    self.listen,
                    missing.join(" and ")
                ));
            }
        }
        let min = milliscale::limits::VALUE_BYTES_MAX + milliscale::limits::KEY_BYTES_MAX + 4096;
        if self.max_message_bytes < min {
            return Err(format!(
                "the message limit must be at least {min} bytes (one largest row)"
            ));
        }
        if self.max_txn_bytes < min as u64 {
            return Err(format!(
                "the transaction size limit must be at least {min} bytes (one largest row)"
            ));
        }
        if self.max_open_txns == 0 || self.max_open_txns_per_conn == 0 || self.max_batch_ops == 0 {
            return Err(
                "the caps on open transactions and batch operations must be at least 1".into()
            );
        }
        if self.idle_timeout < Duration::from_millis(10) {
            return Err("the idle timeout must be at least 10 ms".into());
        }
        Ok(())
    }
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The options were refused.
    #[error("{0}")]
    Options(String),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The TLS identity was refused.
    #[error("TLS: {0}")]
    Tls(String),
    /// The cluster shard could not start.
    #[error("as a shard: {0}")]
    Shard(String),
}

/// What a shutdown did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Open transactions that finished during the grace period.
    pub finished: usize,
    /// Open transactions aborted when it ran out.
    pub aborted: usize,
    /// Transactions aborted for idling, over the server's life.
    pub expired: u64,
    /// How long the shutdown took.
    pub took: Duration,
}

/// A running server. Dropping it does not stop it; call
/// [`Server::shutdown`].
pub struct Server {
    addr: SocketAddr,
    http_addr: Option<SocketAddr>,
    sessions: Arc<Sessions>,
    backend: Backend,
    shutting_down: Arc<AtomicBool>,
    stop: tokio::sync::watch::Sender<bool>,
    grace: Duration,
    /// Calls in flight (shutdown waits for them, not for connections).
    calls: Arc<in_flight::Calls>,
    shard: Option<Arc<shard::Shard>>,
    serving: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// Start serving `backend` (on the current tokio runtime); returns once
    /// the listeners are bound. `metrics` is what `/metrics` renders.
    pub async fn start(
        backend: Backend,
        options: ServerOptions,
        metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    ) -> Result<Server, ServeError> {
        options.check().map_err(ServeError::Options)?;
        let bind = |addr: SocketAddr| async move {
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Bind { addr, source })
        };
        let listener = bind(options.listen).await?;
        let addr = listener
            .local_addr()
            .map_err(|source| ServeError::Bind { addr: options.listen, source })?;
        let sessions = Arc::new(Sessions::new(SessionLimits {
            per_connection: options.max_open_txns_per_conn,
            total: options.max_open_txns,
            idle_timeout: options.idle_timeout,
        }));
        let shutting_down = Arc::new(AtomicBool::new(false));
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let shard = start_shard(&backend, options.cluster.as_ref()).await?;
        let service = Service {
            shard: shard.clone(),
            standbys: Arc::default(),
            shard_streams: Arc::default(),
            backend: backend.clone(),
            sessions: Arc::clone(&sessions),
            tokens: options.tokens.clone(),
            limits: RequestLimits {
                default_wait: options.default_wait.min(options.max_wait),
                max_wait: options.max_wait,
                max_batch_ops: options.max_batch_ops,
                max_retries: options.max_retries,
                max_message_bytes: options.max_message_bytes,
                max_txn_bytes: options.max_txn_bytes,
            },
            shutting_down: Arc::clone(&shutting_down),
            stop: stopped.clone(),
            feeds: Arc::new(tokio::sync::Semaphore::new(match shard {
                Some(_) => changes::CLUSTER_FEEDS_MAX,
                None => changes::FEEDS_MAX,
            })),
        };
        let grpc = MilliscaleServer::new(service)
            .max_decoding_message_size(options.max_message_bytes)
            .max_encoding_message_size(options.max_message_bytes);
        let calls = Arc::new(in_flight::Calls::default());
        let mut builder = tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .http2_keepalive_interval(Some(Duration::from_secs(30)));
        if let Some(tls) = &options.tls {
            let identity = tonic::transport::Identity::from_pem(&tls.cert_pem, &tls.key_pem);
            builder = builder
                .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
                .map_err(|e| ServeError::Tls(e.to_string()))?;
        }
        let connections = connection::Connections::new(Arc::clone(&sessions));
        let incoming = tokio_stream::StreamExt::map(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            move |accepted| accepted.map(|io| connections.accept(io)),
        );
        // The standard gRPC health service (`grpc.health.v1`, for probes
        // such as grpc_health_probe) and server reflection (for grpcurl and
        // other tools that learn the schema from the server). Neither
        // needs a token: they tell no data.
        let (health, health_service) = tonic_health::server::health_reporter();
        let is_ready = ready(&backend, &shutting_down);
        publish_health(&health, is_ready).await;
        let reflection = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(milliscale_proto::v1::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        };
        let schema = |e: tonic_reflection::server::Error| {
            ServeError::Options(format!("the schema's descriptors: {e}"))
        };
        // Both versions of reflection: tools ask for v1 or v1alpha.
        let reflection_v1 = reflection().build_v1().map_err(schema)?;
        let reflection_v1alpha = reflection().build_v1alpha().map_err(schema)?;
        let serving = tokio::spawn(
            builder
                .layer(in_flight::Layer(Arc::clone(&calls)))
                .add_service(grpc)
                .add_service(health_service)
                .add_service(reflection_v1)
                .add_service(reflection_v1alpha)
                .serve_with_incoming_shutdown(incoming, async move {
                    let _ = stopped.wait_for(|s| *s).await;
                }),
        );
        let mut tasks = vec![
            tokio::spawn(reap(Arc::clone(&sessions), options.idle_timeout)),
            tokio::spawn(report_health(
                health,
                backend.clone(),
                Arc::clone(&shutting_down),
                is_ready,
            )),
        ];
        let mut http_addr = None;
        if let Some(http) = options.http {
            let listener = bind(http).await?;
            http_addr = listener.local_addr().ok();
            let state = admin::State {
                backend: backend.clone(),
                shutting_down: Arc::clone(&shutting_down),
                metrics,
            };
            tasks.push(tokio::spawn(admin::serve(listener, state, stop.subscribe())));
        }
        tracing::info!(%addr, ?http_addr, tls = options.tls.is_some(), "serving");
        Ok(Server {
            addr,
            http_addr,
            sessions,
            backend,
            shutting_down,
            stop,
            grace: options.grace,
            calls,
            shard,
            serving,
            tasks,
        })
    }

    /// The gRPC address (with the port the system chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The HTTP address, if there is one.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// What is served.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The cluster shard it serves as, if any.
    pub fn shard(&self) -> Option<&Arc<shard::Shard>> {
        self.shard.as_ref()
    }

    /// Open interactive transactions now.
    pub fn open_transactions(&self) -> usize {
        self.sessions.open_count()
    }

    /// Shut down gracefully: refuse new transactions and batches (and
    /// report not ready), give the open transactions up to the grace
    /// period to finish, abort the rest, stop accepting and let the calls
    /// in flight end. The database itself stays open: close it next (that
    /// flushes the log).
    pub async fn shutdown(self) -> ShutdownReport {
        let started = Instant::now();
        self.shutting_down.store(true, Ordering::Release);
        let open = self.sessions.open_count();
        while self.sessions.open_count() > 0 && started.elapsed() < self.grace {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let aborted = self.sessions.abort_all();
        let _ = self.stop.send(true);
        // The calls in flight finish (streams end at the stop); then the
        // connections left, idle, are dropped rather than waited for: a
        // graceful HTTP/2 close needs an answer from each client, and a
        // client that runs only inside its calls gives none (in_flight.rs).
        let rest = self.grace.saturating_sub(started.elapsed()).max(Duration::from_secs(1));
        let mut serving = self.serving;
        tokio::select! {
            _ = &mut serving => {}
            _ = self.calls.idle() => {
                if tokio::time::timeout(DRAIN.min(rest), &mut serving).await.is_err() {
                    serving.abort();
                }
            }
            _ = tokio::time::sleep(rest) => {
                tracing::warn!("calls still in flight after the grace period; leaving them");
                serving.abort();
            }
        }
        for t in self.tasks {
            t.abort();
        }
        if let Some(shard) = &self.shard {
            shard.stop();
        }
        ShutdownReport {
            finished: open.saturating_sub(aborted),
            aborted,
            expired: self.sessions.expired_total(),
            took: started.elapsed(),
        }
    }
}

/// The cluster shard the server is, if `cluster` says it is one.
async fn start_shard(
    backend: &Backend,
    cluster: Option<&shard::ShardOptions>,
) -> Result<Option<Arc<shard::Shard>>, ServeError> {
    match (cluster, backend) {
        (None, _) => Ok(None),
        (Some(opts), Backend::Writer(db)) => Ok(Some(
            shard::Shard::start(db.clone(), opts.clone()).await.map_err(ServeError::Shard)?,
        )),
        (Some(_), Backend::Replica(_)) => Err(ServeError::Options(
            "a read replica is no shard: --cluster is for the writer".into(),
        )),
    }
}

/// At shutdown, once no call is in flight, how long the connections get
/// to close by themselves (the last answers' bytes leave in this time)
/// before those left, idle or stalled, are dropped.
const DRAIN: Duration = Duration::from_millis(500);

/// Whether the server is ready, as `/readyz` and the gRPC health service
/// say it: taking new transactions, and the database healthy.
fn ready(backend: &Backend, shutting_down: &AtomicBool) -> bool {
    !shutting_down.load(Ordering::Acquire) && admin::health(backend).is_ok()
}

/// Set the gRPC health service's answer for the whole server (`""`) and
/// for `milliscale.v1.Milliscale`: SERVING or NOT_SERVING.
async fn publish_health(reporter: &tonic_health::server::HealthReporter, ready: bool) {
    use tonic::server::NamedService;
    use tonic_health::ServingStatus;
    let status = if ready { ServingStatus::Serving } else { ServingStatus::NotServing };
    for name in ["", <MilliscaleServer<Service> as NamedService>::NAME] {
        reporter.set_service_status(name, status).await;
    }
}

/// Keep the gRPC health service's answer what `/readyz` answers (NOT_SERVING
/// once the server is shutting down or the database unhealthy), checked
/// every 100 ms; `last` is what it says now.
async fn report_health(
    reporter: tonic_health::server::HealthReporter,
    backend: Backend,
    shutting_down: Arc<AtomicBool>,
    mut last: bool,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = ready(&backend, &shutting_down);
        if now != last {
            publish_health(&reporter, now).await;
            last = now;
        }
    }
}

/// Abort idle transactions, checking four times per idle timeout.
async fn reap(sessions: Arc<Sessions>, idle: Duration) {
    let mut tick = tokio::time::interval((idle / 4).max(Duration::from_millis(5)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let n = sessions.reap_idle();
        if n > 0 {
            tracing::info!(aborted = n, "idle transactions aborted");
            metrics::counter!("milliscale_server_expired_transactions_total").increment(n as u64);
        }
    }
}
