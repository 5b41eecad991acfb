//! Every shard's state, asked now: `milliscale cluster status`.

use super::Cluster;
use crate::{Error, proto};
use milliscale_milana::types::split_cluster_key;

impl Cluster {
    /// Every shard's state, asked now (a shard that does not answer has
    /// its error instead).
    pub async fn status(&self) -> Vec<ShardStatus> {
        let map = self.map();
        let mut out = Vec::new();
        for (s, info) in &map.shards {
            let ranges = map
                .ranges
                .iter()
                .filter(|(_, owner)| owner == s)
                .map(|(start, _)| start.clone())
                .collect();
            let asked = async {
                let c = self.shard(*s)?;
                let i = c.stub().shard_info(c.req(proto::ShardInfoRequest::default())).await?;
                Ok::<_, Error>((i.into_inner(), c.status().await?))
            };
            let (info_r, server, error) =
                match tokio::time::timeout(self.inner.builder.rpc_timeout, asked).await {
                    Ok(Ok((i, st))) => (Some(i), Some(st), None),
                    Ok(Err(e)) => (None, None, Some(e.to_string())),
                    Err(_) => (None, None, Some("no answer within the timeout".into())),
                };
            out.push(ShardStatus {
                shard: *s,
                addr: info.addr.clone(),
                ranges,
                info: info_r,
                server,
                error,
            });
        }
        out
    }
}

/// One shard's state ([`Cluster::status`]).
#[derive(Clone, Debug)]
pub struct ShardStatus {
    /// The shard.
    pub shard: u32,
    /// Its address in the map.
    pub addr: String,
    /// The first key of each range it owns (a cluster key: the table's
    /// name, 0x00, the key).
    pub ranges: Vec<Vec<u8>>,
    /// What it says of its transactions, if it answered.
    pub info: Option<proto::ShardInfoResponse>,
    /// What its server says of itself, if it answered.
    pub server: Option<crate::ServerStatus>,
    /// Why it did not answer.
    pub error: Option<String>,
}

/// A cluster key as `table/key` (the map's first range: its empty key).
fn key_text(r: &[u8]) -> String {
    match split_cluster_key(r) {
        Some((t, k)) => format!("{t}/{}", String::from_utf8_lossy(k)),
        None => format!("{:?}", String::from_utf8_lossy(r)),
    }
}

impl std::fmt::Display for ShardStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ranges: Vec<String> = self.ranges.iter().map(|r| key_text(r)).collect();
        let owns = if ranges.is_empty() {
            "no range".to_owned()
        } else {
            format!("ranges from {}", ranges.join(", "))
        };
        write!(f, "shard {} at {} ({owns}): ", self.shard, self.addr)?;
        match (&self.info, &self.server, &self.error) {
            (Some(i), Some(s), _) => write!(
                f,
                "{}, map version {}, {} prepared, {} decisions remembered, oldest undecided {}, \
                 {:.1} s CPU, durable below token {}, {} store writes/s, {}",
                s.role,
                i.map_version,
                i.prepared,
                i.remembered,
                i.oldest_undecided.map_or("none".into(), |t| t.to_string()),
                s.cpu_seconds,
                s.durable_token,
                s.log_requests_per_s.map_or("no".into(), |r| format!("{r:.1}")),
                s.log_usd_per_hour.map_or("no price".into(), |u| format!("${u:.4}/h"))
            ),
            (_, _, Some(e)) => return write!(f, "unreachable: {e}"),
            _ => return write!(f, "no answer"),
        }?;
        let moving = self.info.as_ref().map_or(&[][..], |i| &i.moving[..]);
        for m in moving {
            write!(
                f,
                "; moving the range from {} to shard {} (map version {}, mover heard {} ms ago)",
                key_text(&m.start),
                m.to,
                m.map_version,
                m.silent_ms
            )?;
        }
        let standbys = self.info.as_ref().map_or(&[][..], |i| &i.standbys[..]);
        if standbys.is_empty() {
            return write!(f, "; no standby has checked in");
        }
        for s in standbys {
            write!(
                f,
                "; standby at {}: {} behind, last check {} ms ago",
                s.addr, s.behind, s.last_seen_ms
            )?;
        }
        Ok(())
    }
}
