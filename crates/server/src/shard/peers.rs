//! What a shard does with the other shards, in the background:
//! cooperative termination (asking about transactions left prepared),
//! collection and forgetting below the bound the others publish, and
//! reloading the shard map; a client that leaves.

use std::sync::Arc;
use std::time::{Duration, Instant};

use milliscale_milana::coordinator::terminate;
use milliscale_milana::shard_map::ShardMap;
use milliscale_milana::types::{ClientId, ShardId, Timestamp, TxnId, TxnStatus};
use milliscale_proto::v1 as proto;
use proto::milliscale_client::MilliscaleClient;
use tokio::sync::watch;
use tonic::transport::Channel;

use super::{Shard, latest_map, now_us, status_from, txn_to};

impl Shard {
    /// A client for shard `s`, from the current map: the one made before
    /// if the map has not changed since, else a new one.
    ///
    /// `peers` and `map` are never held together, here or in
    /// [`Shard::refresh_map`]. (Holding `peers` while reading `map`, as
    /// this once did, deadlocked against a refresh that held `map` for
    /// writing while it cleared `peers`: both of a shard's runtime threads
    /// stopped, and the shard answered nothing.) A client is kept with the
    /// map version it was made from, so a refresh need not clear them.
    fn peer(&self, s: ShardId) -> Option<MilliscaleClient<Channel>> {
        let (version, addr) = {
            let map = self.map.read();
            (map.version, map.shards.get(&s)?.addr.clone())
        };
        if let Some((v, c)) = self.peers.lock().get(&s)
            && *v == version
        {
            return Some(c.clone());
        }
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
        self.peers.lock().insert(s, (version, c.clone()));
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
    /// With no client heard from, nothing is collected, and the bound may
    /// rise to the lease span before now: a client unknown here that
    /// prepares below it is refused, as a silent client's prepare is.
    async fn collect_and_forget(&self) {
        let watermark = {
            let mut st = self.lock();
            let silence = self.opts.client_silence;
            st.clients.retain(|_, (_, heard)| heard.elapsed() < silence);
            match st.clients.values().map(|(low, _)| *low).min() {
                Some(w) => {
                    st.p.collect_marks(w);
                    Some(w)
                }
                None => None,
            }
        };
        // The versions outside the lock, a part at a time: there may be
        // thousands (each commit replaces its keys' rows).
        if let Some(w) = watermark {
            let dropped = self.tables.rows.collect(w);
            self.lock().versions -= dropped as i64;
        }
        let idle =
            self.opts.resolved_every.is_some_and(|e| self.lock().forget_written.elapsed() >= e);
        if watermark.is_none() && !idle {
            return;
        }
        let mut bound = watermark.unwrap_or_else(|| now_us().saturating_sub(self.opts.lease_span));
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
            match st.p.forget(bound, idle && !self.opts.read_only) {
                Some(r) => match self.write(&mut st, &[r]) {
                    Ok(ack) => {
                        st.forget_written = Instant::now();
                        ack
                    }
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
            self.adopt_map(m);
        }
    }

    /// Serve under map `m` if it is newer than the map served.
    fn adopt_map(&self, m: ShardMap) {
        let mut map = self.map.write();
        if m.version > map.version {
            *map = m;
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use milliscale::{AsyncDatabase, Options};
    use milliscale_milana::shard_map::{MapStore, ShardInfo};

    use super::*;
    use crate::shard::ShardOptions;

    /// A shard that looks up its peers (termination queries, collection)
    /// while it adopts newer maps goes on doing both: `peer` and
    /// `adopt_map` never wait for one of the two locks while holding the
    /// other. With `peers` held across the map's read in `peer` and taken
    /// under the map's write lock to clear it in the refresh (the bug this
    /// guards against), this test fails within 3 s: the threads, and the
    /// shard's runtime with its background tasks, stop. The watchdog is
    /// this thread, off the runtime; on a deadlock the runtime is leaked
    /// (its threads cannot be joined) and the test fails.
    #[test]
    fn peer_lookups_and_map_refreshes_never_wait_for_each_other() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let dir = tempfile::tempdir().expect("tempdir");
        let map_url = format!("file://{}/map", dir.path().display());
        let maps = MapStore::new(milliscale::store::open(&map_url).expect("map store"), "");
        let info = |port| ShardInfo { addr: format!("127.0.0.1:{port}"), log: String::new() };
        let mut map = ShardMap {
            version: 1,
            ranges: vec![(Vec::new(), 0)],
            shards: [(0, info(1)), (1, info(2)), (2, info(3))].into_iter().collect(),
            rebalance: None,
            split_load: None,
        };
        maps.publish(&map).expect("publish");
        let data = format!("file://{}/shard-0", dir.path().display());
        let shard = rt.block_on(async {
            let db = AsyncDatabase::open(Options::new().store(&data)).await.expect("open");
            Shard::start(db, ShardOptions::new(0, map_url)).await.expect("start")
        });

        let (stop, done) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let mut threads = Vec::new();
        for t in 0..3u32 {
            let (shard, stop, done, rt) =
                (Arc::clone(&shard), Arc::clone(&stop), Arc::clone(&done), rt.handle().clone());
            threads.push(std::thread::spawn(move || {
                let _rt = rt.enter(); // a lazy channel spawns its task
                while !stop.load(Ordering::Relaxed) {
                    assert!(shard.peer(1 + t % 2).is_some());
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        let (shard2, stop2, done2) = (Arc::clone(&shard), Arc::clone(&stop), Arc::clone(&done));
        threads.push(std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                map.version += 1;
                shard2.adopt_map(map.clone());
                done2.fetch_add(1, Ordering::Relaxed);
            }
        }));
        // Progress for 2 s; none for 3 s is a deadlock.
        let started = Instant::now();
        let (mut seen, mut moved) = (0, Instant::now());
        loop {
            std::thread::sleep(Duration::from_millis(50));
            let now = done.load(Ordering::Relaxed);
            let progressed = now != seen;
            if progressed {
                (seen, moved) = (now, Instant::now());
            }
            if moved.elapsed() > Duration::from_secs(3) {
                std::mem::forget(rt);
                panic!("peer and adopt_map deadlocked");
            }
            if started.elapsed() > Duration::from_secs(2) && progressed {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().expect("a thread");
        }
        assert!(shard.map.read().version > 1000, "the map was adopted again and again");
        shard.stop();
    }
}
