//! A shard's reads at a timestamp: MILANA's read of keys (`ShardRead`)
//! and its range read (`ShardScan`), each under a durable read lease and
//! waiting, up to the termination timeout, for a prepared write below it;
//! answered once the versions read are durable (`Fresh`).

use std::sync::Arc;

use milliscale_milana::participant::ScanReply;
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
            st.refuse_frozen(keys.iter().map(Vec::as_slice), [])?;
            st.count(&self.map.read(), keys.iter().map(Vec::as_slice));
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
            st.refuse_frozen([], [(start.as_slice(), end.as_slice())])?;
            st.count(&self.map.read(), [start.as_slice()]);
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
