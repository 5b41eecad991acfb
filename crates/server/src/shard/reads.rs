//! A shard's reads at a timestamp: MILANA's read of keys (`ShardRead`)
//! and its range read (`ShardScan`), each under a durable read lease and
//! waiting, up to the termination timeout, for a prepared write below it.

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
        let keys = {
            let st = self.lock();
            r.keys.into_iter().map(|k| self.key_of(&st, Some(k))).collect::<Result<Vec<_>, _>>()?
        };
        let at = r.at;
        let read = |st: &mut State| -> Result<Vec<proto::ShardReadResult>, Gone> {
            keys.iter()
                .map(|k| {
                    let r = st.p.read(k, at)?;
                    Ok(proto::ShardReadResult {
                        version: Some(ts_to(r.version)),
                        value: r.value.map(Into::into),
                        prepared_below: r.prepared_below,
                    })
                })
                .collect()
        };
        let pending = |r: &Result<Vec<proto::ShardReadResult>, Gone>| {
            r.as_ref().is_ok_and(|r| r.iter().any(|r| r.prepared_below))
        };
        let results = self
            .settled(at, r.client, r.low_water, read, pending)
            .await?
            .map_err(|g| refuse::stale_read(at, g.oldest))?;
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
        if !self.lock().names.contains(table) {
            return Err(engine(&milliscale::Error::TableNotFound(table.to_owned())));
        }
        self.own_range(&start, &end)?;
        let limit = usize::try_from(r.limit).unwrap_or(usize::MAX);
        let at = r.at;
        let scan = |st: &mut State| st.p.scan(&start, &end, at, limit);
        let pending = |r: &Result<ScanReply, Gone>| r.as_ref().is_ok_and(|r| r.prepared_below);
        let reply = self
            .settled(at, r.client, r.low_water, scan, pending)
            .await?
            .map_err(|g| refuse::stale_read(at, g.oldest))?;
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
