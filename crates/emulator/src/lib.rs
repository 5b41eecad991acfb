//! `milliscale emulator`: an S3-compatible HTTP server with S3 Express One
//! Zone append semantics, a latency and fault model, and accounting.
//!
//! No server installable from a package registry appends correctly (MinIO
//! refuses write offsets; moto, s3rver, s3s-fs and versitygw overwrite), so
//! this is what makes the append path testable anywhere.
//!
//! The stack, per request:
//!
//! ```text
//! hyper (HTTP/1.1, loopback; server.rs: request IDs, request log,
//!   s3express signatures checked in express.rs)
//!   ─► /_milliscale/accounting, /_milliscale/ready (JSON)  or
//!   s3s (SigV4 auth, path or *.localhost addressing (host.rs), XML)
//!   ─► S3Api (s3api.rs: the operations; listing.rs: pages)
//!   ─► sim store's model (latency, faults, accounting), one request each
//!   ─► Buckets: objects.rs (bytes + ETag, headers, metadata),
//!      multipart.rs (uploads) ─► per-bucket memory or fs stores
//!      (exact append semantics, atomic conditionals)
//! ```
//!
//! Store calls run on tokio's blocking pool, since the store is
//! synchronous and the sim store sleeps out its latency.

#![warn(missing_docs)]

pub mod buckets;
pub mod express;
pub mod host;
mod keyed;
pub mod listing;
pub mod multipart;
pub mod objects;
pub mod s3api;
mod server;

use std::net::SocketAddr;
use std::sync::Arc;

use objstore::sim::accounting::AccountingReport;
use objstore::sim::{Faults, SimStore};
use objstore::{ObjectStore, PARTS_MAX, StoreError};
use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;

pub use buckets::Backing;

/// The HTTP path where the accounting is served as JSON (`GET`).
pub const ACCOUNTING_PATH: &str = "/_milliscale/accounting";
/// The HTTP path that answers 200 once the server is serving.
pub const READY_PATH: &str = "/_milliscale/ready";

/// Where the request log goes.
#[derive(Debug, Clone)]
pub enum RequestLog {
    /// One JSON line per request on standard error.
    Stderr,
    /// One JSON line per request appended to this file.
    File(std::path::PathBuf),
}

/// How to run the emulator.
#[derive(Debug, Clone)]
pub struct EmulatorOptions {
    /// Address to bind; loopback by default, port 0 picks a free port.
    pub addr: SocketAddr,
    /// Memory, or a directory (durable).
    pub backing: Backing,
    /// Latency preset (see `data/sim-presets.toml`); `none` adds nothing.
    pub preset: String,
    /// Fault injection; off by default.
    pub faults: Faults,
    /// Parts per object before `TooManyParts` (S3 Express: 10,000).
    pub parts_max: u32,
    /// The one accepted access key id.
    pub access_key: String,
    /// Its secret key.
    pub secret_key: String,
    /// More accepted (access key, secret key) pairs; every user sees the
    /// same buckets.
    pub users: Vec<(String, String)>,
    /// A request log (off by default).
    pub request_log: Option<RequestLog>,
    /// Tokio worker threads for HTTP (store calls use the blocking pool).
    pub threads: usize,
    /// Buckets to create before the listener binds, so that a client that
    /// can connect finds them (one that exists already is kept).
    pub buckets: Vec<String>,
}

/// Default credentials, also used by the tests and scripts.
pub const DEFAULT_ACCESS_KEY: &str = "milliscale";
/// See [`DEFAULT_ACCESS_KEY`].
pub const DEFAULT_SECRET_KEY: &str = "milliscale-secret";

impl Default for EmulatorOptions {
    fn default() -> Self {
        EmulatorOptions {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            backing: Backing::Memory,
            preset: "none".into(),
            faults: Faults::default(),
            parts_max: PARTS_MAX,
            access_key: DEFAULT_ACCESS_KEY.into(),
            secret_key: DEFAULT_SECRET_KEY.into(),
            users: Vec::new(),
            request_log: None,
            threads: 2,
            buckets: Vec::new(),
        }
    }
}

/// Block until the process gets SIGINT (Ctrl-C) or SIGTERM.
pub fn wait_for_shutdown_signal() -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r,
            _ = term.recv() => Ok(()),
        }
    })
}

/// A running emulator; stops when dropped.
pub struct Emulator {
    addr: SocketAddr,
    sim: Arc<SimStore>,
    preset: String,
    /// The credentials it accepts: (access key, secret key).
    credentials: (String, String),
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator").field("addr", &self.addr).finish_non_exhaustive()
    }
}

/// Accounting JSON: the preset and the priced counters.
pub(crate) fn accounting_json(preset: &str, report: &AccountingReport) -> String {
    serde_json::json!({ "preset": preset, "accounting": report }).to_string()
}

impl Emulator {
    /// Bind and start serving on background threads.
    pub fn start(opts: EmulatorOptions) -> objstore::Result<Emulator> {
        if opts.parts_max == 0 || opts.parts_max > PARTS_MAX {
            return Err(StoreError::InvalidRequest(format!(
                "parts per object must be 1..={PARTS_MAX}, got {}",
                opts.parts_max
            )));
        }
        let buckets = Arc::new(buckets::Buckets::open(opts.backing.clone(), opts.parts_max)?);
        for b in &opts.buckets {
            if !buckets::valid_bucket_name(b) {
                return Err(StoreError::InvalidRequest(format!(
                    "{b:?} is not a valid bucket name"
                )));
            }
            match buckets.create(b) {
                Ok(()) | Err(buckets::BucketError::AlreadyExists) => {}
                Err(e) => {
                    return Err(StoreError::InvalidRequest(format!("creating bucket {b}: {e:?}")));
                }
            }
        }
        let sim = Arc::new(SimStore::new(buckets.clone(), &opts.preset, opts.faults)?);
        let api = s3api::S3Api {
            sim: sim.clone(),
            buckets,
            session: (opts.access_key.clone(), opts.secret_key.clone()),
        };
        let mut builder = S3ServiceBuilder::new(api);
        let mut auth = SimpleAuth::from_single(opts.access_key.clone(), opts.secret_key.clone());
        for (k, s) in &opts.users {
            auth.register(k.clone(), s.clone().into());
        }
        builder.set_auth(auth);
        builder.set_access(express::Access);
        builder.set_host(host::LocalhostBuckets);
        let service = builder.build();
        let log: Option<Box<dyn std::io::Write + Send>> = match &opts.request_log {
            None => None,
            Some(RequestLog::Stderr) => Some(Box::new(std::io::stderr())),
            Some(RequestLog::File(p)) => Some(Box::new(
                std::fs::OpenOptions::new().create(true).append(true).open(p).map_err(|e| {
                    StoreError::Fatal(format!("cannot open the request log {}: {e}", p.display()))
                })?,
            )),
        };
        let mut users: std::collections::HashMap<String, String> =
            opts.users.iter().cloned().collect();
        users.insert(opts.access_key.clone(), opts.secret_key.clone());
        let shared =
            Arc::new(server::Shared::new(service, sim.clone(), opts.preset.clone(), log, users));

        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(opts.threads.max(1))
            .thread_name("emulator")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Fatal(format!("cannot start the runtime: {e}")))?;
        // Bound here with the standard library, not by blocking on the
        // runtime: `start` may be called from async code (a test or an
        // example under #[tokio::main]), where blocking on a runtime panics.
        let listener = std::net::TcpListener::bind(opts.addr)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| StoreError::Fatal(format!("cannot bind {}: {e}", opts.addr)))?;
        let addr = listener
            .local_addr()
            .map_err(|e| StoreError::Fatal(format!("no local address: {e}")))?;
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("emulator-accept".into())
            .spawn(move || {
                rt.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!("the emulator cannot listen: {e}");
                            return;
                        }
                    };
                    loop {
                        let stream = tokio::select! {
                            r = listener.accept() => match r {
                                Ok((s, _)) => s,
                                Err(e) => {
                                    tracing::warn!("accept failed: {e}");
                                    continue;
                                }
                            },
                            _ = &mut rx => break,
                        };
                        let _ = stream.set_nodelay(true);
                        tokio::spawn(server::serve_connection(stream, shared.clone()));
                    }
                });
                // Dropping the runtime here ends the connection tasks.
                rt.shutdown_background();
            })
            .map_err(|e| StoreError::Fatal(format!("cannot spawn the emulator thread: {e}")))?;
        Ok(Emulator {
            addr,
            sim,
            preset: opts.preset,
            credentials: (opts.access_key, opts.secret_key),
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, for clients.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `s3://BUCKET?endpoint=...`: the URL of one of its buckets.
    pub fn bucket_url(&self, bucket: &str) -> String {
        format!("s3://{bucket}?endpoint={}", self.endpoint())
    }

    /// A client of `bucket` with the credentials the emulator accepts; the
    /// bucket is created.
    pub fn bucket(&self, bucket: &str) -> objstore::Result<objstore::S3Store> {
        let (access, secret) = &self.credentials;
        let s = objstore::S3Store::with_credentials(&self.bucket_url(bucket), access, secret)?;
        s.create_bucket()?;
        Ok(s)
    }

    /// Environment variables that give a client process (the AWS SDK's
    /// default chain) the credentials the emulator accepts.
    pub fn client_env(&self) -> [(&'static str, String); 2] {
        [
            ("AWS_ACCESS_KEY_ID", self.credentials.0.clone()),
            ("AWS_SECRET_ACCESS_KEY", self.credentials.1.clone()),
        ]
    }

    /// Requests, bytes and cost so far.
    pub fn accounting(&self) -> AccountingReport {
        self.sim.accounting().expect("the sim store counts")
    }

    /// The accounting as served at [`ACCOUNTING_PATH`].
    pub fn accounting_json(&self) -> String {
        accounting_json(&self.preset, &self.accounting())
    }

    /// Take the whole store down (every request fails with 500) for `d`.
    pub fn set_unavailable_for(&self, d: std::time::Duration) {
        self.sim.set_unavailable_for(d);
    }

    /// Stop serving and wait for the server thread.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.stop_inner();
    }
}
