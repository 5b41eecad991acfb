//! A shard primary over the network: the [`Participant`] of one shard,
//! its [`ShardLog`], and the gRPC service of `milana.proto`.
//!
//! Each request changes the participant and appends the record the change
//! needs under one lock, so the log's order is the order of the changes;
//! it answers once that record and everything logged before it are
//! durable (the log's pipelined appends share the engine's flushes).
//!
//! Invariants, beyond the participant's own:
//! - a yes vote, a termination answer and a served read leave only after
//!   the records that justify them are durable (the prepare, the abort
//!   of an unknown transaction, the read lease);
//! - a single-shard transaction commits at its durable prepare (the fast
//!   path): its commit record is logged after the vote, and a recovery
//!   commits a lone prepare by itself;
//! - a multi-shard transaction prepared here and undecided past the
//!   termination timeout is decided by asking the other participants
//!   (cooperative termination), so a dead coordinator blocks its keys
//!   for about one timeout; at start-up, the undecided ones found in the
//!   log are asked about at once;
//! - a key the current shard map does not give this shard is refused
//!   (FAILED_PRECONDITION, "wrong shard ...").

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::convert::{prepare_from, read_to, status_from, status_to, txn_from, txn_to};
use super::proto::{self, shard_client::ShardClient, shard_server};
use crate::coordinator::terminate;
use crate::log::Record;
use crate::participant::{Mutations, Participant, Recovered, Vote};
use crate::shard_log::{LogError, ShardLog};
use crate::shard_map::{MapStore, ShardMap};
use crate::types::{ClientId, ShardId, Timestamp, TxnId, TxnStatus};

/// How to run a shard primary.
#[derive(Debug, Clone)]
pub struct ShardOptions {
    /// The shard it serves.
    pub shard: ShardId,
    /// How far past a read a new read lease reaches (µs). A read past
    /// the lease waits for a new lease record; past the lease's middle, a
    /// read renews it in the background. A recovered primary refuses
    /// writes below its last lease, so a longer span means fewer lease
    /// records and more aborts right after a crash.
    pub lease_span: Timestamp,
    /// How long a multi-shard transaction may stay prepared here before
    /// this primary asks the other participants.
    pub termination_timeout: Duration,
    /// How long to wait for another participant's answer.
    pub peer_timeout: Duration,
    /// How often to collect versions below the clients' watermark.
    pub collect_every: Duration,
    /// A client not heard from for this long no longer holds the
    /// watermark back (a read of its below the watermark is refused).
    pub client_silence: Duration,
}

impl ShardOptions {
    /// Shard `shard`, with a 500 ms lease span and a 1 s termination
    /// timeout.
    pub fn new(shard: ShardId) -> ShardOptions {
        ShardOptions {
            shard,
            lease_span: 500_000,
            termination_timeout: Duration::from_secs(1),
            peer_timeout: Duration::from_millis(500),
            collect_every: Duration::from_secs(1),
            client_silence: Duration::from_secs(10),
        }
    }
}

/// Why a shard primary could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Its log.
    #[error("the shard's log: {0}")]
    Log(#[from] LogError),
    /// The shard map.
    #[error("the shard map: {0}")]
    Map(String),
    /// Its address.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// Where.
        addr: SocketAddr,
        /// Why not.
        source: std::io::Error,
    },
}

struct State {
    p: Participant,
    /// When each multi-shard transaction was prepared here (absent: ask
    /// at the next round; it was found at start-up).
    prepared_at: HashMap<TxnId, Instant>,
    /// A lease renewal is on its way to the log.
    renewing: bool,
    /// Each client's low-water mark, and when it was heard.
    clients: HashMap<ClientId, (Timestamp, Instant)>,
    /// When versions were last collected.
    collected_at: Instant,
}

/// One shard's primary (see the module's comment).
struct Primary {
    opts: ShardOptions,
    maps: Arc<MapStore>,
    map: RwLock<ShardMap>,
    state: Mutex<State>,
    log: ShardLog,
    peers: Mutex<HashMap<ShardId, ShardClient<Channel>>>,
}

/// A running shard primary.
pub struct ShardServer {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    serving: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
    primary: Arc<Primary>,
    recovery: Recovery,
}

/// What a shard primary's start-up found in its log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// Log records read.
    pub records: usize,
    /// Lone (single-shard) prepares it committed by itself.
    pub committed: usize,
    /// Multi-shard prepares left undecided: asked about at once.
    pub asked: usize,
}

impl std::fmt::Debug for ShardServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardServer").field("addr", &self.addr).finish()
    }
}

impl ShardServer {
    /// Open the shard's log on `log` (recovering it and fencing any
    /// earlier primary), rebuild the participant from it, and serve on
    /// `listen`. The shard map must name this shard.
    pub async fn start(
        opts: ShardOptions,
        log: milliscale::Options,
        maps: Arc<MapStore>,
        listen: SocketAddr,
    ) -> Result<ShardServer, StartError> {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|source| StartError::Listen { addr: listen, source })?;
        ShardServer::start_on(opts, log, maps, listener).await
    }

    /// [`ShardServer::start`] on a listener already bound (so that its
    /// address can go in the map first).
    pub async fn start_on(
        opts: ShardOptions,
        log: milliscale::Options,
        maps: Arc<MapStore>,
        listener: tokio::net::TcpListener,
    ) -> Result<ShardServer, StartError> {
        let (log, records) = tokio::task::spawn_blocking(move || ShardLog::open(log))
            .await
            .map_err(|e| StartError::Map(format!("opening the log: {e}")))??;
        ShardServer::start_with_log(opts, (log, records), maps, listener).await
    }

    /// [`ShardServer::start_on`] with the log already open (by a promoted
    /// standby, [`super::standby`]): its records are what the primary is
    /// rebuilt from.
    pub async fn start_with_log(
        opts: ShardOptions,
        (log, records): (ShardLog, Vec<Record>),
        maps: Arc<MapStore>,
        listener: tokio::net::TcpListener,
    ) -> Result<ShardServer, StartError> {
        let map = load_map(&maps).await?;
        if !map.shards.contains_key(&opts.shard) {
            return Err(StartError::Map(format!(
                "version {} does not name shard {}",
                map.version, opts.shard
            )));
        }
        let Recovered { participant, logged, ask } =
            Participant::recover(opts.shard, opts.lease_span, Mutations::default(), &records);
        let mut last = None;
        for r in &logged {
            last = Some(log.append(r)?);
        }
        if let Some(a) = last {
            a.durable().await?;
        }
        let recovery =
            Recovery { records: records.len(), committed: logged.len(), asked: ask.len() };
        let state = State {
            p: participant,
            prepared_at: HashMap::new(),
            renewing: false,
            clients: HashMap::new(),
            collected_at: Instant::now(),
        };
        let primary = Arc::new(Primary {
            opts,
            maps,
            map: RwLock::new(map),
            state: Mutex::new(state),
            log,
            peers: Mutex::new(HashMap::new()),
        });
        let addr = listener.local_addr().map_err(|source| StartError::Listen {
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            source,
        })?;
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let (stop, mut stopped) = watch::channel(false);
        let svc = shard_server::ShardServer::new(Service(Arc::clone(&primary)));
        let serving = tokio::spawn(
            tonic::transport::Server::builder().add_service(svc).serve_with_incoming_shutdown(
                incoming,
                async move {
                    let _ = stopped.wait_for(|s| *s).await;
                },
            ),
        );
        tokio::spawn(terminator(Arc::clone(&primary), stop.subscribe()));
        Ok(ShardServer { addr, stop, serving, primary, recovery })
    }

    /// What the start-up found in the log.
    pub fn recovery(&self) -> Recovery {
        self.recovery
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Multi-shard transactions prepared here and not decided.
    pub fn prepared(&self) -> usize {
        self.primary.lock().p.prepared().len()
    }

    /// Committed versions held, and the watermark collected below.
    pub fn versions(&self) -> (usize, Timestamp) {
        let st = self.primary.lock();
        (st.p.versions(), st.p.collected())
    }

    /// Stop serving, then close the log (flushing it).
    pub async fn shutdown(self) -> Result<(), LogError> {
        let _ = self.stop.send(true);
        let _ = self.serving.await;
        self.primary.log.database().close().await?;
        Ok(())
    }
}

async fn load_map(maps: &Arc<MapStore>) -> Result<ShardMap, StartError> {
    super::latest_map(maps).await.map_err(StartError::Map)
}

/// Refuse a read below the collection watermark: its version may be
/// gone. The client's clock moves past the floor sent back.
fn too_old(p: &Participant, at: Timestamp) -> Result<(), Status> {
    let floor = p.collected();
    if at >= floor {
        return Ok(());
    }
    let mut s = Status::aborted(format!(
        "snapshot too old: read at {at}, versions below {floor} are collected"
    ));
    if let Ok(v) = floor.to_string().parse() {
        s.metadata_mut().insert("milana-floor", v);
    }
    Err(s)
}

fn log_status(e: &LogError) -> Status {
    Status::unavailable(format!("the shard's log: {e}"))
}

impl Primary {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change under the lock is a participant call and an
        // append, consistent at each step.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn own(&self, key: &[u8]) -> Result<(), Status> {
        let map = self.map.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let owner = map.shard_of(key);
        if owner == self.opts.shard {
            return Ok(());
        }
        Err(Status::failed_precondition(format!(
            "wrong shard: map version {} gives this key to shard {owner}, not {}",
            map.version, self.opts.shard
        )))
    }

    async fn read(self: &Arc<Self>, r: proto::ReadRequest) -> Result<proto::ReadResponse, Status> {
        let (key, at) = (r.key, r.at);
        self.own(&key)?;
        let span = self.opts.lease_span;
        let lease = {
            let mut st = self.lock();
            if r.client != 0 {
                let low = st.clients.get(&r.client).map_or(0, |c| c.0).max(r.low_water);
                st.clients.insert(r.client, (low, Instant::now()));
            }
            too_old(&st.p, at)?;
            if let Some(r @ Record::ReadLease(until)) = st.p.lease_needed(at) {
                // Outside the lease: this read waits for a new one.
                Some((until, self.log.append(&r).map_err(|e| log_status(&e))?))
            } else {
                // Inside it, but past its middle: renew it in the
                // background, so that reads seldom wait for the log.
                if at.saturating_add(span / 2) >= st.p.lease() && !st.renewing {
                    let until = at + span;
                    let appended =
                        self.log.append(&Record::ReadLease(until)).map_err(|e| log_status(&e))?;
                    st.renewing = true;
                    let me = Arc::clone(self);
                    tokio::spawn(async move {
                        let ok = appended.durable().await.is_ok();
                        let mut st = me.lock();
                        if ok {
                            st.p.lease_durable(until);
                        }
                        st.renewing = false;
                    });
                }
                None
            }
        };
        if let Some((until, appended)) = lease {
            appended.durable().await.map_err(|e| log_status(&e))?;
            self.lock().p.lease_durable(until);
        }
        let mut st = self.lock();
        too_old(&st.p, at)?;
        if st.p.lease_needed(at).is_some() {
            // Cannot happen (the lease only grows), but a read outside it
            // must not be served.
            return Err(Status::unavailable("the read lease does not cover this read yet"));
        }
        Ok(read_to(st.p.read(&key, at)))
    }

    async fn prepare(
        self: &Arc<Self>,
        req: proto::PrepareRequest,
    ) -> Result<proto::PrepareResponse, Status> {
        let p = prepare_from(req)?;
        if !p.participants.contains(&self.opts.shard) {
            return Err(Status::invalid_argument(
                "a prepare whose participants leave this shard out",
            ));
        }
        for key in p.reads.iter().map(|(k, _)| k).chain(p.writes.iter().map(|(k, _)| k)) {
            self.own(key)?;
        }
        let (txn, single) = (p.txn, p.participants.len() == 1);
        let (vote, already, logged) = {
            let mut st = self.lock();
            let already = st.p.known(txn);
            let (vote, rec) = st.p.prepare(p);
            let logged = match &rec {
                Some(r) => self.log.append(r),
                // Asked again: answer as the first time, once what is
                // logged so far (the first vote's record) is durable.
                None => Ok(self.log.barrier()),
            }
            .map_err(|e| log_status(&e))?;
            if vote == Vote::Yes && rec.is_some() && !single {
                st.prepared_at.insert(txn, Instant::now());
            }
            (vote, already, logged)
        };
        // The rest runs as a task of its own, which finishes even if this
        // call's client goes away: a handler is dropped with its call, and
        // a single-shard prepare left without its fast-path commit stayed
        // prepared (cooperative termination asks only about multi-shard
        // transactions), blocking its keys until a restart. The
        // coordinator-kill trials of crates/cli/tests/shard_kill.rs caught
        // it.
        let fast_path = vote == Vote::Yes && single && already != Some(TxnStatus::Committed);
        let me = Arc::clone(self);
        let finish = tokio::spawn(async move {
            logged.durable().await.map_err(|e| log_status(&e))?;
            if fast_path {
                // Committed by its durable prepare; the commit record only
                // saves a recovery the work.
                let mut st = me.lock();
                if let Some(r) = st.p.decide(txn, true, 0) {
                    drop(me.log.append(&r).map_err(|e| log_status(&e))?);
                }
            }
            Ok::<(), Status>(())
        });
        finish.await.map_err(|e| Status::internal(format!("a prepare's task failed: {e}")))??;
        match vote {
            Vote::No(why) => Ok(proto::PrepareResponse { yes: false, why: why.into() }),
            Vote::Yes => Ok(proto::PrepareResponse { yes: true, why: String::new() }),
        }
    }

    /// Apply a decision; wait until it is durable.
    async fn decide(&self, txn: TxnId, commit: bool, ts: Timestamp) -> Result<(), Status> {
        let logged = {
            let mut st = self.lock();
            st.prepared_at.remove(&txn);
            match st.p.decide(txn, commit, ts) {
                Some(r) => Some(self.log.append(&r).map_err(|e| log_status(&e))?),
                None => None,
            }
        };
        if let Some(a) = logged {
            a.durable().await.map_err(|e| log_status(&e))?;
        }
        Ok(())
    }

    async fn query(&self, txn: TxnId, ts: Timestamp) -> Result<TxnStatus, Status> {
        let (status, logged) = {
            let mut st = self.lock();
            let (status, rec) = st.p.status(txn, ts);
            let logged = match rec {
                Some(r) => self.log.append(&r),
                None => Ok(self.log.barrier()),
            }
            .map_err(|e| log_status(&e))?;
            (status, logged)
        };
        logged.durable().await.map_err(|e| log_status(&e))?;
        Ok(status)
    }

    /// Collect versions below the lowest low-water mark of the clients
    /// heard from lately, if it is time.
    fn collect(&self) {
        let mut st = self.lock();
        if st.collected_at.elapsed() < self.opts.collect_every {
            return;
        }
        st.collected_at = Instant::now();
        let silence = self.opts.client_silence;
        st.clients.retain(|_, (_, heard)| heard.elapsed() < silence);
        if let Some(watermark) = st.clients.values().map(|(low, _)| *low).min() {
            st.p.collect(watermark);
        }
    }

    /// A client for shard `s`, from the current map.
    fn peer(&self, s: ShardId) -> Option<ShardClient<Channel>> {
        let mut peers = self.peers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = peers.get(&s) {
            return Some(c.clone());
        }
        let map = self.map.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let addr = &map.shards.get(&s)?.addr;
        let channel = Channel::from_shared(format!("http://{addr}"))
            .ok()?
            .connect_timeout(self.opts.peer_timeout)
            .connect_lazy();
        let c = ShardClient::new(channel);
        peers.insert(s, c.clone());
        Some(c)
    }

    /// One round of cooperative termination: ask about every multi-shard
    /// transaction prepared here past the timeout (or found at
    /// start-up), and decide those the answers settle. False if a peer
    /// could not be reached.
    async fn terminate_stale(&self) -> bool {
        let timeout = self.opts.termination_timeout;
        let stale: Vec<(TxnId, Vec<ShardId>)> = {
            let st = self.lock();
            st.p.prepared()
                .into_iter()
                .filter(|(t, parts)| {
                    parts.len() > 1
                        && st.prepared_at.get(t).is_none_or(|at| at.elapsed() >= timeout)
                })
                .collect()
        };
        let mut reached = true;
        for (txn, parts) in stale {
            let ts = self.lock().p.prepared_ts(txn).unwrap_or(0);
            let mut answers = Vec::new();
            for s in parts {
                answers.push(if s == self.opts.shard {
                    Some(TxnStatus::Prepared)
                } else {
                    let asked = self.ask(s, txn, ts).await;
                    reached &= asked.is_some();
                    asked
                });
            }
            if let Some(commit) = terminate(&answers) {
                // A failed log append leaves it prepared: asked again.
                let _ = self.decide(txn, commit, ts).await;
            }
        }
        reached
    }

    async fn ask(&self, s: ShardId, txn: TxnId, ts: Timestamp) -> Option<TxnStatus> {
        let mut c = self.peer(s)?;
        let q = c.query(proto::QueryRequest { txn: Some(txn_to(txn)), ts });
        match tokio::time::timeout(self.opts.peer_timeout, q).await {
            Ok(Ok(r)) => status_from(r.into_inner().status),
            _ => {
                // Its address may have changed (a standby promoted).
                self.peers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&s);
                None
            }
        }
    }
}

/// Run cooperative termination every quarter timeout until stopped;
/// reload the shard map when a peer could not be reached.
async fn terminator(primary: Arc<Primary>, mut stop: watch::Receiver<bool>) {
    let tick = (primary.opts.termination_timeout / 4).max(Duration::from_millis(5));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        primary.collect();
        if !primary.terminate_stale().await
            && let Ok(m) = load_map(&primary.maps).await
        {
            let mut map = primary.map.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            if m.version > map.version {
                *map = m;
            }
        }
    }
}

struct Service(Arc<Primary>);

#[tonic::async_trait]
impl shard_server::Shard for Service {
    async fn read(
        &self,
        req: Request<proto::ReadRequest>,
    ) -> Result<Response<proto::ReadResponse>, Status> {
        self.0.read(req.into_inner()).await.map(Response::new)
    }

    async fn prepare(
        &self,
        req: Request<proto::PrepareRequest>,
    ) -> Result<Response<proto::PrepareResponse>, Status> {
        self.0.prepare(req.into_inner()).await.map(Response::new)
    }

    async fn decide(
        &self,
        req: Request<proto::DecideRequest>,
    ) -> Result<Response<proto::DecideResponse>, Status> {
        let d = req.into_inner();
        self.0.decide(txn_from(d.txn)?, d.commit, d.ts).await?;
        Ok(Response::new(proto::DecideResponse {}))
    }

    async fn query(
        &self,
        req: Request<proto::QueryRequest>,
    ) -> Result<Response<proto::QueryResponse>, Status> {
        let q = req.into_inner();
        let status = self.0.query(txn_from(q.txn)?, q.ts).await?;
        Ok(Response::new(proto::QueryResponse { status: status_to(status) as i32 }))
    }

    async fn info(
        &self,
        _req: Request<proto::InfoRequest>,
    ) -> Result<Response<proto::InfoResponse>, Status> {
        let map_version =
            self.0.map.read().unwrap_or_else(std::sync::PoisonError::into_inner).version;
        let prepared = self.0.lock().p.prepared().len() as u64;
        Ok(Response::new(proto::InfoResponse { shard: self.0.opts.shard, map_version, prepared }))
    }
}
