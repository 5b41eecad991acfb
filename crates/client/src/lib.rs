//! The async Rust client of a `milliscale serve` server.
//!
//! ```no_run
//! # async fn run() -> Result<(), milliscale_client::Error> {
//! use milliscale_client::Client;
//! let client = Client::builder("http://127.0.0.1:7878").token("a-token-of-16-chars").connect().await?;
//! client.create_table("accounts").await?;
//! let token = client.put("accounts", b"alice", b"100").await?; // durable on return
//!
//! // An interactive transaction, run again if it conflicts.
//! let moved = milliscale_client::retry(8, || async {
//!     let mut tx = client.begin().await?;
//!     let v = tx.get("accounts", b"alice").await?.unwrap_or_default();
//!     tx.put("accounts", b"bob", &v).await?;
//!     tx.commit().await
//! })
//! .await?;
//! # let _ = (token, moved); Ok(()) }
//! ```
//!
//! A [`Transaction`] lives on the server until it commits or aborts (or
//! idles past the server's timeout); dropping one unfinished aborts it in
//! the background. [`Client::execute`] runs a whole batch of reads and
//! writes as one transaction in one round trip, which the server can
//! retry by itself on a conflict.
//!
//! A [`Cluster`] is the same database over many `milliscale serve
//! --cluster` shards: tables, reads, writes and serializable transactions
//! across them, coordinated by this client.

#![deny(missing_docs, clippy::unwrap_used)]

mod batch;
mod calls;
mod changes;
mod cluster;
mod error;
pub mod handover;
pub mod limits;
mod stream;
mod txn;

use std::sync::Arc;
use std::time::Duration;

pub use batch::{Batch, BatchResult};
pub use changes::{
    BlockingChanges, BlockingClusterChanges, Change, ChangeEvent, ChangeFilter, Changes,
    ClusterChangeEvent, ClusterChanges,
};
pub use cluster::{Cluster, ClusterBuilder, ClusterTransaction, ShardStatus};
pub use error::{Error, Result, retry};
pub use stream::CommitAck;
/// The gRPC status codes [`Error::code`] returns.
pub use tonic::Code;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
pub use txn::{
    Commit, Durability, Isolation, KeyRange, ReadAt, Transaction, TxnOptions, WRITE_BEHIND_BYTES,
};

/// The wire protocol (`proto/milliscale/v1/milliscale.proto`), generated
/// by the `milliscale-proto` crate.
pub use milliscale_proto::v1 as proto;

type Stub = proto::milliscale_client::MilliscaleClient<Channel>;

/// Batches this big or bigger (encoded) go as `Execute` calls, not on the
/// stream.
const STREAMED_BATCH_MAX: usize = 1 << 20;

/// How to reach a server; see [`Client::builder`].
#[derive(Clone, Debug)]
pub struct ClientBuilder {
    addr: String,
    token: Option<String>,
    ca_pem: Option<Vec<u8>>,
    domain: Option<String>,
    connect_timeout: Duration,
    max_message_bytes: usize,
    streamed_batches: bool,
    /// A cluster's calls to this shard on one stream (`calls`).
    streamed_shard_calls: bool,
    streamed_calls: bool,
}

impl ClientBuilder {
    /// Send this bearer token with every call.
    pub fn token(mut self, token: impl Into<String>) -> ClientBuilder {
        self.token = Some(token.into());
        self
    }

    /// Speak TLS, trusting the certificate authority in `ca_pem`. The
    /// server's certificate must carry the address's host, or the name
    /// given to [`ClientBuilder::tls_domain`].
    pub fn tls(mut self, ca_pem: Vec<u8>) -> ClientBuilder {
        self.ca_pem = Some(ca_pem);
        self
    }

    /// With TLS: the name the server's certificate must carry, when it is
    /// not the address's host (say, an IP address and a certificate for a
    /// name).
    pub fn tls_domain(mut self, domain: impl Into<String>) -> ClientBuilder {
        self.domain = Some(domain.into());
        self
    }

    /// Give up connecting after this long (default 5 s).
    pub fn connect_timeout(mut self, d: Duration) -> ClientBuilder {
        self.connect_timeout = d;
        self
    }

    /// Largest message to accept (default 16 MiB, the server's default).
    pub fn max_message_bytes(mut self, n: usize) -> ClientBuilder {
        self.max_message_bytes = n;
        self
    }

    /// Send one-shot batches ([`Client::execute`]) as messages on one
    /// stream per client (`true`, the default: it costs a server far less
    /// CPU per batch) or as one call each (`false`). Batches of 1 MiB or
    /// more go as calls either way.
    pub fn streamed_batches(mut self, on: bool) -> ClientBuilder {
        self.streamed_batches = on;
        self
    }

    /// Connect.
    pub async fn connect(self) -> Result<Client> {
        let (endpoint, addr) = self.endpoint()?;
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| Error::local(format!("cannot connect to {addr}: {e}")))?;
        self.client(channel)
    }

    /// A cluster's calls to this shard on one stream, or as calls.
    /// Send the calls of interactive transactions (begin, get, put,
    /// delete, patch, commit, abort) on one stream per connection (the
    /// default), or each as a unary call (`false`). On the stream a call
    /// is one message each way instead of a new HTTP/2 stream with its
    /// headers; errors, deadlines and the server's limits are the same.
    pub fn streamed_calls(mut self, on: bool) -> ClientBuilder {
        self.streamed_calls = on;
        self
    }

    pub(crate) fn streamed_shard_calls(mut self, on: bool) -> ClientBuilder {
        self.streamed_shard_calls = on;
        self
    }

    /// The same settings for another address.
    pub(crate) fn with_addr(mut self, addr: String) -> ClientBuilder {
        self.addr = addr;
        self
    }

    /// A client whose connection is made at its first call.
    pub(crate) fn connect_lazy(self) -> Result<Client> {
        let (endpoint, _) = self.endpoint()?;
        let channel = endpoint.connect_lazy();
        self.streamed_batches(false).client(channel)
    }

    fn endpoint(&self) -> Result<(Endpoint, String)> {
        let mut addr = self.addr.clone();
        if !addr.contains("://") {
            let scheme = if self.ca_pem.is_some() { "https" } else { "http" };
            addr = format!("{scheme}://{addr}");
        }
        let mut endpoint = Endpoint::from_shared(addr.clone())
            .map_err(|e| Error::local(format!("bad server address {addr:?}: {e}")))?
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true);
        if let Some(ca) = &self.ca_pem {
            let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
            if let Some(d) = &self.domain {
                tls = tls.domain_name(d.clone());
            }
            endpoint = endpoint.tls_config(tls).map_err(|e| Error::local(format!("TLS: {e}")))?;
        }
        Ok((endpoint, addr))
    }

    fn client(self, channel: Channel) -> Result<Client> {
        let token = match &self.token {
            Some(t) => Some(
                format!("Bearer {t}")
                    .parse::<MetadataValue<Ascii>>()
                    .map_err(|_| Error::local("a token must be printable ASCII".into()))?,
            ),
            None => None,
        };
        // The server enforces its own limit on what it receives (and says
        // so, OUT_OF_RANGE); the client bounds only what it accepts.
        let stub = Stub::new(channel).max_decoding_message_size(self.max_message_bytes);
        let streams = self.streamed_batches.then(Arc::default);
        let shard_calls = self.streamed_shard_calls.then(Arc::default);
        let txn_calls = self.streamed_calls.then(Arc::default);
        let max_message_bytes = self.max_message_bytes;
        Ok(Client { stub, token, streams, shard_calls, txn_calls, max_message_bytes })
    }
}

/// A connection to a server. Cheap to clone: clones share the connection
/// (HTTP/2 multiplexes their calls) and the stream their batches go over.
#[derive(Clone, Debug)]
pub struct Client {
    stub: Stub,
    token: Option<MetadataValue<Ascii>>,
    /// The stream one-shot batches go over, unless they go as calls.
    streams: Option<Arc<stream::Multiplexer>>,
    /// The stream a cluster's calls to this shard go over, unless they go
    /// as calls (`calls`).
    shard_calls: Option<Arc<calls::Calls<calls::Shard>>>,
    /// The stream the calls of interactive transactions go over (none:
    /// each is a unary call).
    txn_calls: Option<Arc<calls::Calls<calls::Txn>>>,
    /// The largest request this client sends ([`ClientBuilder::max_message_bytes`]).
    max_message_bytes: usize,
}

/// The server's role and progress ([`Client::status`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ServerStatus {
    /// `writer` or `replica`.
    pub role: String,
    /// Every CSN below this is durable (writer) or applied (replica).
    pub durable_token: u64,
    /// Interactive transactions open on the server.
    pub open_transactions: u32,
    /// The server's version.
    pub version: String,
    /// The server process's CPU time so far, in seconds.
    pub cpu_seconds: f64,
    /// A writer's log since it opened: write requests to its stores a
    /// second (`None` on a replica).
    pub log_requests_per_s: Option<f64>,
    /// The same at the stores' prices, in dollars an hour (`None` without
    /// a price, or on a replica).
    pub log_usd_per_hour: Option<f64>,
}

impl Client {
    /// A builder for a connection to `addr` (`host:port`, or a URL with
    /// `http://` or `https://`).
    pub fn builder(addr: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            addr: addr.into(),
            token: None,
            ca_pem: None,
            domain: None,
            connect_timeout: Duration::from_secs(5),
            max_message_bytes: 16 << 20,
            streamed_batches: true,
            streamed_shard_calls: true,
            streamed_calls: true,
        }
    }

    /// Connect to `addr` without a token or TLS.
    pub async fn connect(addr: impl Into<String>) -> Result<Client> {
        Client::builder(addr).connect().await
    }

    /// A request carrying the token.
    pub(crate) fn req<T>(&self, msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        if let Some(t) = &self.token {
            r.metadata_mut().insert("authorization", t.clone());
        }
        r
    }

    /// Refuse a request over the message limit before sending it, with a
    /// message that says the limit and where it is set (the server would
    /// refuse it too, OUT_OF_RANGE, after receiving all of it).
    /// Returns the request's encoded length.
    pub(crate) fn max_message_bytes(&self) -> usize {
        self.max_message_bytes
    }

    pub(crate) fn fits(&self, request: &impl prost::Message) -> Result<usize> {
        let len = request.encoded_len();
        if len > self.max_message_bytes {
            return Err(Error::too_large(len, self.max_message_bytes));
        }
        Ok(len)
    }

    pub(crate) fn stub(&self) -> Stub {
        self.stub.clone()
    }

    /// Create a table (durable when this returns).
    pub async fn create_table(&self, name: &str) -> Result<()> {
        let r = self.req(proto::CreateTableRequest { name: name.into() });
        self.stub().create_table(r).await?;
        Ok(())
    }

    /// Drop a table (durable when this returns).
    pub async fn drop_table(&self, name: &str) -> Result<()> {
        let r = self.req(proto::DropTableRequest { name: name.into() });
        self.stub().drop_table(r).await?;
        Ok(())
    }

    /// The tables' names, in creation order.
    pub async fn list_tables(&self) -> Result<Vec<String>> {
        let r = self.req(proto::ListTablesRequest {});
        Ok(self.stub().list_tables(r).await?.into_inner().names)
    }

    /// Begin an interactive transaction at the server's default isolation.
    pub async fn begin(&self) -> Result<Transaction> {
        self.begin_with(TxnOptions::default()).await
    }

    /// Begin an interactive transaction: it has begun, and taken its
    /// snapshot, when this returns (one round trip).
    pub async fn begin_with(&self, opts: TxnOptions) -> Result<Transaction> {
        Transaction::begin(self.clone(), opts).await
    }

    /// An interactive transaction that begins with its first call, in the
    /// same message, and takes its snapshot there (no round trip of its
    /// own; see [`Transaction`]). A failure to begin (too many open
    /// transactions, a replica behind `at_token`) is its first call's
    /// error. One that never makes a call never reaches the server.
    pub fn transaction(&self, opts: TxnOptions) -> Transaction {
        Transaction::deferred(self.clone(), opts)
    }

    /// Run a batch as one transaction in one round trip.
    pub async fn execute(&self, batch: Batch) -> Result<BatchResult> {
        let request = batch.into_request();
        limits::operations(&request.operations)?;
        let len = self.fits(&request)?;
        let resp = match self.stream_for(len) {
            Some(streams) => streams.execute(self, request, None).await?,
            None => self.stub().execute(self.req(request)).await?.into_inner(),
        };
        BatchResult::from_response(resp)
    }

    /// Run a batch pipelined: it is answered once pre-committed (its
    /// writes visible to other transactions, not yet durable), with an
    /// ack that resolves once the commit is durable. The caller may send
    /// its next transaction at once, as the engine's own pipelined commit
    /// lets a worker go on; it must not report the commit to anyone until
    /// the ack resolves, and must treat an ack that fails as a commit that
    /// may be lost. On the stream the server tells the durability of many
    /// commits in one message; a batch sent as a call (streamed batches
    /// off, or 1 MiB or more) waits for durability before it answers.
    pub async fn execute_pipelined(&self, batch: Batch) -> Result<(BatchResult, CommitAck)> {
        let mut request = batch.durability(Durability::Precommit).into_request();
        limits::operations(&request.operations)?;
        let len = self.fits(&request)?;
        match self.stream_for(len) {
            Some(streams) => {
                let (tell, told) = tokio::sync::oneshot::channel();
                let resp = streams.execute(self, request, Some(tell)).await?;
                Ok((BatchResult::from_response(resp)?, CommitAck::waiting(told)))
            }
            None => {
                request.durability = proto::Durability::Wait as i32;
                let resp = self.stub().execute(self.req(request)).await?.into_inner();
                Ok((BatchResult::from_response(resp)?, CommitAck::already_durable()))
            }
        }
    }

    /// The stream to send a request of `len` encoded bytes on, if it goes
    /// on one. A big batch
    /// goes as a call: on the stream it would hold up the batches behind
    /// it, and one over the server's message limit would end the stream
    /// for all of them.
    fn stream_for(&self, len: usize) -> Option<&stream::Multiplexer> {
        self.streams.as_deref().filter(|_| len < STREAMED_BATCH_MAX)
    }

    /// Read `key` (a one-shot read-only transaction).
    pub async fn get(&self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut b = Batch::new();
        b.get(table, key);
        Ok(self.execute(b).await?.value(0).map(<[u8]>::to_vec))
    }

    /// Write `key` in a transaction of its own; returns once durable,
    /// with the commit's token. Retries conflicts on the server.
    pub async fn put(&self, table: &str, key: &[u8], value: &[u8]) -> Result<u64> {
        let mut b = Batch::new();
        b.put(table, key, value);
        let r = self.execute(b.retries(8)).await?;
        r.token.ok_or_else(|| Error::local("a write committed without a token".into()))
    }

    /// Delete `key` in a transaction of its own; whether it had a value.
    pub async fn delete(&self, table: &str, key: &[u8]) -> Result<bool> {
        let mut b = Batch::new();
        b.delete(table, key);
        Ok(self.execute(b.retries(8)).await?.existed(0))
    }

    /// Wait until `token` is durable (writer) or applied (replica), for at
    /// most `wait` (at most the server's cap); what the server reached.
    pub async fn wait_for(&self, token: u64, wait: Duration) -> Result<u64> {
        let wait_ms = wait.as_millis().clamp(1, u32::MAX as u128) as u32;
        let r = self.req(proto::WaitForRequest { token, wait_ms });
        Ok(self.stub().wait_for(r).await?.into_inner().reached)
    }

    /// The server's role and progress.
    pub async fn status(&self) -> Result<ServerStatus> {
        let s = self.stub().status(self.req(proto::StatusRequest {})).await?.into_inner();
        Ok(ServerStatus {
            role: s.role,
            durable_token: s.durable_token,
            open_transactions: s.open_transactions,
            version: s.version,
            cpu_seconds: s.cpu_seconds,
            log_requests_per_s: s.log_requests_per_s,
            log_usd_per_hour: s.log_usd_per_hour,
        })
    }
}
