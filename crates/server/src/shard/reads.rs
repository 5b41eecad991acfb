//! A shard's reads at a timestamp: MILANA's read of keys (`ShardRead`)
//! and its range read (`ShardScan`), each under a durable read lease and
//! waiting, up to the termination timeout, for a prepared write below it;
//! answered once the versions read are durable (`Fresh`). Also the lease
//! and the wait every read takes, a batch's included (`Shard::settled`,
//! `Shard::under_lease`, `Shard::lease_covers`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use milliscale_milana::log::Record;
use milliscale_milana::participant::ScanReply;
use milliscale_milana::types::{ClientId, Timestamp};
use milliscale_milana::versions::Gone;
use milliscale_proto::v1 as proto;
use tonic::Status;

use super::{Shard, State, ts_to};
use crate::errors::{engine, refuse};

impl Shard {
    /// Read keys at a timestamp (MILANA's read, with the read lease made
    /// durable first).
    pub async fn read(
        self: &Arc<Self>,
        r: proto::ShardReadRequest,
    ) -> Result<proto::ShardReadResponse, Status> {
        let keys =
            r.keys.into_iter().map(|k| self.key_of(Some(k))).collect::<Result<Vec<_>, _>>()?;
        let at = r.at;
        type Read = Result<(Vec<proto::ShardReadResult>, Option<u64>), Gone>;
        let read = |st: &mut State| -> Result<Read, Status> {
            let map = self.map.read();
            self.refuse_moved(st, &map, keys.iter().map(Vec::as_slice), [])?;
            st.count(&map, keys.iter().map(Vec::as_slice));
            let replies: Vec<_> = match keys.iter().map(|k| st.p.read(k, at)).collect() {
                Ok(r) => r,
                Err(g) => return Ok(Err(g)),
            };
            let fresh = st.fresh.wait_for_all(replies.iter().map(|r| r.version));
            let results = replies
                .into_iter()
                .map(|r| proto::ShardReadResult {
                    version: Some(ts_to(r.version)),
                    value: r.value.map(Into::into),
                    prepared_below: r.prepared_below,
                })
                .collect();
            Ok(Ok((results, fresh)))
        };
        let pending = |r: &Result<Read, Status>| matches!(r, Ok(Ok((r, _))) if r.iter().any(|r| r.prepared_below));
        let (results, fresh) = self
            .settled(at, r.client, r.low_water, read, pending)
            .await??
            .map_err(|g| refuse::stale_read(at, g.oldest))?;
        if let Some(csn) = fresh {
            self.barrier(csn).await?;
        }
        Ok(proto::ShardReadResponse { results })
    }

    /// Scan a range this shard owns at a timestamp (a range read: its
    /// read mark fixes the range's history up to the timestamp).
    pub async fn scan(
        self: &Arc<Self>,
        r: proto::ShardScanRequest,
    ) -> Result<proto::ShardScanResponse, Status> {
        let (start, end) = (r.start.to_vec(), r.end.to_vec());
        let Some((table, _)) = milliscale_milana::types::split_cluster_key(&start) else {
            return Err(refuse::invalid("a scan's start is no table's key"));
        };
        if !self.names.read().contains(table) {
            return Err(engine(&milliscale::Error::TableNotFound(table.to_owned())));
        }
        self.own_range(&start, &end)?;
        let limit = usize::try_from(r.limit).unwrap_or(usize::MAX);
        let at = r.at;
        type Scan = Result<(ScanReply, Option<u64>), Gone>;
        let scan = |st: &mut State| -> Result<Scan, Status> {
            let map = self.map.read();
            self.refuse_moved(st, &map, [], [(start.as_slice(), end.as_slice())])?;
            st.count(&map, [start.as_slice()]);
            let reply = match st.p.scan(&start, &end, at, limit) {
                Ok(r) => r,
                Err(g) => return Ok(Err(g)),
            };
            let fresh = st.fresh.wait_for_all(reply.rows.iter().map(|(_, v, _)| *v));
            Ok(Ok((reply, fresh)))
        };
        let pending = |r: &Result<Scan, Status>| matches!(r, Ok(Ok((r, _))) if r.prepared_below);
        let (reply, fresh) = self
            .settled(at, r.client, r.low_water, scan, pending)
            .await??
            .map_err(|g| refuse::stale_read(at, g.oldest))?;
        if let Some(csn) = fresh {
            self.barrier(csn).await?;
        }
        Ok(proto::ShardScanResponse {
            rows: reply
                .rows
                .into_iter()
                .map(|(key, version, value)| proto::ShardScanRow {
                    key: key.into(),
                    version: Some(ts_to(version)),
                    value: value.into(),
                })
                .collect(),
            prepared_below: reply.prepared_below,
        })
    }
}

/// Reads under the read lease.
impl Shard {
    /// Serve a read under the lease; while its answer has a prepared
    /// write below the read (`pending`), wait for a decision and serve it
    /// again, up to the termination timeout (then the reader is told).
    pub(super) async fn settled<T>(
        self: &Arc<Self>,
        at: Timestamp,
        client: ClientId,
        low_water: Timestamp,
        serve: impl Fn(&mut State) -> T,
        pending: impl Fn(&T) -> bool,
    ) -> Result<T, Status> {
        let deadline = Instant::now() + self.opts.termination_timeout;
        loop {
            // Listening first: a decision after the read is not missed.
            let decided = self.decided.notified();
            tokio::pin!(decided);
            decided.as_mut().enable();
            let answer = self.under_lease(at, client, low_water, &serve).await?;
            let left = deadline.saturating_duration_since(Instant::now());
            if !pending(&answer) || left.is_zero() {
                return Ok(answer);
            }
            let _ = tokio::time::timeout(left, decided).await;
        }
    }

    /// Serve `serve` under the lock once a durable read lease covers `at`
    /// ([`Shard::lease_covers`]).
    pub(super) async fn under_lease<T>(
        self: &Arc<Self>,
        at: Timestamp,
        client: ClientId,
        low_water: Timestamp,
        serve: impl FnOnce(&mut State) -> T,
    ) -> Result<T, Status> {
        let mut serve = Some(serve);
        loop {
            let wait = {
                let mut st = self.lock();
                if self.lease_covers(&mut st, at, client, low_water)?
                    && let Some(f) = serve.take()
                {
                    return Ok(f(&mut st));
                }
                self.lease.subscribe()
            };
            let mut wait = wait;
            let got = tokio::time::timeout(
                self.opts.peer_timeout.max(Duration::from_secs(1)),
                wait.wait_for(|l| *l > at),
            )
            .await;
            if !matches!(got, Ok(Ok(_))) {
                return Err(Status::unavailable("the read lease could not be made durable"));
            }
        }
    }

    /// Under the lock (`st`), before a read at `at`: note the client's
    /// low-water mark, refuse a read below the collected versions, renew
    /// the read lease (once at a time) when `at` is outside it or past its
    /// middle; whether a durable lease covers `at` now (else wait for the
    /// renewal: `Shard::lease`).
    pub(super) fn lease_covers(
        self: &Arc<Self>,
        st: &mut State,
        at: Timestamp,
        client: ClientId,
        low_water: Timestamp,
    ) -> Result<bool, Status> {
        let span = self.opts.lease_span;
        if client != 0 {
            let low = st.clients.get(&client).map_or(0, |c| c.0).max(low_water);
            st.clients.insert(client, (low, Instant::now()));
        }
        let floor = st.p.collected();
        if at < floor {
            return Err(refuse::stale_read(at, floor));
        }
        let covered = st.p.lease_needed(at).is_none();
        if (!covered || at.saturating_add(span / 2) >= st.p.lease()) && !st.renewing {
            let until = at.saturating_add(span);
            let ack = self.write(st, &[Record::ReadLease(until)])?;
            st.renewing = true;
            let me = Arc::clone(self);
            tokio::spawn(async move {
                let ok = ack.await.is_ok();
                me.note_durable();
                let mut st = me.lock();
                if ok {
                    st.p.lease_durable(until);
                    me.lease.send_replace(st.p.lease());
                }
                st.renewing = false;
            });
        }
        Ok(covered)
    }
}
