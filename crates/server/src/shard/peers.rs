//! What a shard does with the other shards, in the background:
//! cooperative termination (asking about transactions left prepared),
//! collection and forgetting below the bound the others publish, and
//! reloading the shard map; a client that leaves.

use std::sync::Arc;
use std::time::{Duration, Instant};

use milliscale_milana::coordinator::terminate;
use milliscale_milana::types::{ClientId, ShardId, Timestamp, TxnId, TxnStatus};
use milliscale_proto::v1 as proto;
use proto::milliscale_client::MilliscaleClient;
use tokio::sync::watch;
use tonic::transport::Channel;

use super::{Shard, latest_map, status_from, txn_to};

impl Shard {
    /// A client for shard `s`, from the current map.
    fn peer(&self, s: ShardId) -> Option<MilliscaleClient<Channel>> {
        let mut peers = self.peers.lock();
        if let Some(c) = peers.get(&s) {
            return Some(c.clone());
        }
        let map = self.map.read();
        let addr = &map.shards.get(&s)?.addr;
        let scheme = if self.opts.peer_tls_ca.is_some() { "https" } else { "http" };
        let mut endpoint = Channel::from_shared(format!("{scheme}://{addr}"))
            .ok()?
            .connect_timeout(self.opts.peer_timeout);
        if let Some(ca) = &self.opts.peer_tls_ca {
            let tls = tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(ca));
            endpoint = endpoint.tls_config(tls).ok()?;
        }
        let c = MilliscaleClient::new(endpoint.connect_lazy());
        peers.insert(s, c.clone());
        Some(c)
    }

    /// A client of the shard at `addr`, with the peer token and TLS (for
    /// the rebalancer's calls as a mover).
    pub(super) async fn peer_client(
        &self,
        addr: &str,
    ) -> Result<milliscale_client::Client, String> {
        let mut b = milliscale_client::Client::builder(addr.to_owned());
        if let Some(t) = &self.opts.peer_token {
            b = b.token(t.clone());
        }
        if let Some(ca) = &self.opts.peer_tls_ca {
            b = b.tls(ca.clone());
        }
        b.connect().await.map_err(|e| format!("the shard at {addr}: {e}"))
    }

    /// This shard's address, as the map has it.
    pub(super) fn addr(&self) -> String {
        self.map.read().shards.get(&self.opts.shard).map(|i| i.addr.clone()).unwrap_or_default()
    }

    fn request<T>(&self, msg: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(msg);
        req.set_timeout(self.opts.peer_timeout);
        if let Some(t) = &self.opts.peer_token
            && let Ok(v) = format!("Bearer {t}").parse()
        {
            req.metadata_mut().insert("authorization", v);
        }
        req
    }

    /// The tables shard `s` knows (`None`: it did not answer).
    pub(super) async fn peer_tables(&self, s: ShardId) -> Option<Vec<String>> {
        let mut c = self.peer(s)?;
        let q = c.list_tables(self.request(proto::ListTablesRequest::default()));
        match tokio::time::timeout(self.opts.peer_timeout, q).await {
            Ok(Ok(r)) => Some(r.into_inner().names),
            _ => {
                self.peers.lock().remove(&s);
                None
            }
        }
    }

    async fn ask(&self, s: ShardId, txn: TxnId, ts: Timestamp) -> Option<TxnStatus> {
        let mut c = self.peer(s)?;
        let q =
            c.shard_query(self.request(proto::ShardQueryRequest { txn: Some(txn_to(txn)), ts }));
        match tokio::time::timeout(self.opts.peer_timeout, q).await {
            Ok(Ok(r)) => status_from(r.into_inner().status),
            _ => {
                // Its address may have changed (a standby promoted).
                self.peers.lock().remove(&s);
                None
            }
        }
    }

    /// One round of cooperative termination: ask about every multi-shard
    /// transaction prepared here past the timeout (or found at start-up),
    /// and decide those the answers settle. False if a peer could not be
    /// reached.
    async fn terminate_stale(self: &Arc<Self>) -> bool {
        let timeout = self.opts.termination_timeout;
        let stale: Vec<(TxnId, Timestamp, Vec<ShardId>)> = {
            let st = self.lock();
            st.p.prepared()
                .into_iter()
                .filter(|(t, parts)| {
                    parts.len() > 1
                        && st.prepared_at.get(t).is_none_or(|at| at.elapsed() >= timeout)
                })
                .map(|(t, parts)| (t, st.p.prepared_ts(t).unwrap_or(0), parts))
                .collect()
        };
        let mut reached = true;
        for (txn, ts, parts) in stale {
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
                // A failed write leaves it prepared: asked again.
                let _ = self.decide(txn, commit, ts).await;
            }
        }
        reached
    }

    /// Client `client` closed (`ShardLeave`): its low-water mark no
    /// longer holds the watermark. Safe as its silence is: a client that
    /// leaves has no transaction under way, and a late copy of anything
    /// it sent before is refused as a silent client's is: a read below
    /// the collected versions, and a prepare or batch whose version is
    /// below the forgotten decisions (`Participant::validate`).
    pub fn leave(&self, client: ClientId) {
        self.lock().clients.remove(&client);
    }

    /// Collect versions below the clients' watermark, then forget the
    /// decisions below it and every shard's oldest undecided timestamp.
    async fn collect_and_forget(&self) {
        let watermark = {
            let mut st = self.lock();
            let silence = self.opts.client_silence;
            st.clients.retain(|_, (_, heard)| heard.elapsed() < silence);
            let Some(w) = st.clients.values().map(|(low, _)| *low).min() else { return };
            st.p.collect_marks(w);
            w
        };
        // The versions outside the lock, a part at a time: there may be
        // thousands (each commit replaces its keys' rows).
        let dropped = self.tables.rows.collect(watermark);
        self.lock().versions -= dropped as i64;
        let mut bound = watermark;
        let others: Vec<ShardId> =
            self.map.read().shards.keys().copied().filter(|s| *s != self.opts.shard).collect();
        for s in others {
            let Some(mut c) = self.peer(s) else { return };
            let info = c.shard_info(self.request(proto::ShardInfoRequest::default()));
            match tokio::time::timeout(self.opts.peer_timeout, info).await {
                Ok(Ok(r)) => {
                    if let Some(t) = r.into_inner().oldest_undecided {
                        bound = bound.min(t);
                    }
                }
                // A shard that does not answer publishes nothing: nothing
                // is forgotten until it does.
                _ => return,
            }
        }
        let wait = {
            let mut st = self.lock();
            match st.p.forget(bound) {
                Some(r) => match self.write(&mut st, &[r]) {
                    Ok(ack) => ack,
                    Err(_) => return,
                },
                None => return,
            }
        };
        if wait.await.is_ok() {
            self.note_durable();
        }
    }

    pub(super) async fn refresh_map(&self) {
        if let Ok(m) = latest_map(&self.maps).await {
            *self.map_read.lock() = Instant::now();
            let mut map = self.map.write();
            if m.version > map.version {
                *map = m;
                self.peers.lock().clear();
            }
        }
    }
}

/// Cooperative termination every quarter timeout, collection and
/// forgetting every `collect_every`, until stopped; the shard map is
/// reloaded when a peer could not be reached, and every few seconds;
/// while a range is frozen here, its move is settled by the map each
/// round ([`super::moves`]).
pub(super) async fn background(shard: Arc<Shard>, mut stop: watch::Receiver<bool>) {
    let tick = (shard.opts.termination_timeout / 4).max(Duration::from_millis(5));
    let (mut collected, mut refreshed) = (Instant::now(), Instant::now());
    loop {
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        if !shard.terminate_stale().await || refreshed.elapsed() >= Duration::from_secs(5) {
            shard.refresh_map().await;
            refreshed = Instant::now();
        }
        if !shard.lock().frozen.is_empty() {
            shard.settle_frozen().await;
        }
        shard.forget_silent_copies();
        if !shard.lock().incoming.is_empty() {
            shard.settle_incoming().await;
        }
        if collected.elapsed() >= shard.opts.collect_every {
            shard.collect_and_forget().await;
            collected = Instant::now();
        }
    }
}
