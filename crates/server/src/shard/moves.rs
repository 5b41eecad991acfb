//! Which keys this shard serves: those the map gives it, less the ranges
//! frozen here for a move to another shard (design record 0009).
//!
//! A freeze (`ShardFreeze`) is the old owner's side of a move's handover.
//! It takes effect under the shard's lock, so every read, scan, prepare
//! and batch that touches the range either ran wholly before it (its
//! reads are at or below the floor the freeze answers with, and its
//! writes are in the rows the new owner copies) or is refused after it,
//! retryably, as a wrong shard naming the map version the move
//! publishes. The check is made under the lock at each of those points
//! ([`State::refuse_frozen`]), not only where a call's keys are first
//! checked, since a call may wait between the two. Its record is written
//! to `_milana.meta` (`frozen/START`) and read again at a restart, so a
//! shard that crashes frozen stays frozen until the freeze is lifted.
//! Decisions of transactions prepared before the freeze still commit:
//! the freeze answers once none is left that writes in the range, and
//! what the shard wrote before is durable. Its rows then move
//! ([`super::handover`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use milliscale::Direction;
use milliscale_milana::types::{Key, ShardId};
use milliscale_milana::versions::in_range;
use milliscale_proto::v1 as proto;
use tonic::Status;

use super::tables::Tables;
use super::{Shard, State};
use crate::errors::{engine, refuse};

/// A range frozen here for its move to shard `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frozen {
    /// `[start, end)` in the cluster's key space; an empty `end`: no end.
    pub start: Key,
    pub end: Key,
    pub to: ShardId,
    /// The map version that gives it to `to` once published.
    pub map_version: u64,
}

/// The prefix of a frozen range's row in `_milana.meta`.
const FROZEN_PREFIX: &[u8] = b"frozen/";

pub(super) fn row_key(start: &[u8]) -> Vec<u8> {
    [FROZEN_PREFIX, start].concat()
}

fn row_value(f: &Frozen) -> Vec<u8> {
    [&f.to.to_be_bytes()[..], &f.map_version.to_be_bytes(), &f.end].concat()
}

/// The ranges frozen here, from `_milana.meta` (at a restart).
pub(super) fn load(tables: &Tables) -> milliscale::Result<Vec<Frozen>> {
    let mut tx = tables.db.begin()?;
    let mut out = Vec::new();
    let (lo, hi) = (std::ops::Bound::Included(FROZEN_PREFIX), std::ops::Bound::Unbounded);
    for row in tx.range(&tables.meta, lo, hi, Direction::Forward) {
        let (k, v) = row?;
        let Some(start) = k.strip_prefix(FROZEN_PREFIX) else { break };
        if v.len() < 12 {
            return Err(milliscale::Error::Corrupt(format!("a frozen range's row of {v:?}")));
        }
        out.push(Frozen {
            start: start.to_vec(),
            end: v[12..].to_vec(),
            to: u32::from_be_bytes(v[..4].try_into().expect("4 bytes")),
            map_version: u64::from_be_bytes(v[4..12].try_into().expect("8 bytes")),
        });
    }
    Ok(out)
}

/// Whether `[start, end)` and `[a, b)` share a key (empty ends: no end).
fn overlap(start: &[u8], end: &[u8], a: &[u8], b: &[u8]) -> bool {
    (b.is_empty() || start < b) && (end.is_empty() || a < end)
}

impl State {
    /// Refuse, as a wrong shard, a call that touches a frozen range:
    /// any of `keys`, or any of `ranges` (`[start, end)`).
    pub(super) fn refuse_frozen<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k [u8]>,
        ranges: impl IntoIterator<Item = (&'k [u8], &'k [u8])>,
    ) -> Result<(), Status> {
        if self.frozen.is_empty() {
            return Ok(());
        }
        let hit = keys
            .into_iter()
            .find_map(|k| self.frozen.iter().find(|f| in_range(k, &f.start, &f.end)))
            .or_else(|| {
                ranges
                    .into_iter()
                    .find_map(|(a, b)| self.frozen.iter().find(|f| overlap(&f.start, &f.end, a, b)))
            });
        match hit {
            None => Ok(()),
            Some(f) => Err(refuse::wrong_shard(
                format!(
                    "range from {:?} is moving to shard {}: map version {} gives it there",
                    String::from_utf8_lossy(&f.start),
                    f.to,
                    f.map_version
                ),
                f.map_version,
            )),
        }
    }
}

impl Shard {
    /// `ShardFreeze` (see the module's comment). Refused for a range not
    /// all this shard's under its map, or one that overlaps another
    /// frozen range; the same freeze asked again is answered again.
    pub async fn freeze(
        self: &Arc<Self>,
        r: proto::ShardFreezeRequest,
    ) -> Result<proto::ShardFreezeResponse, Status> {
        let f = Frozen {
            start: r.start.to_vec(),
            end: r.end.to_vec(),
            to: r.to,
            map_version: r.map_version,
        };
        if !f.end.is_empty() && f.end <= f.start {
            return Err(refuse::invalid("a frozen range's end must be past its start"));
        }
        if r.unfreeze {
            return self.unfreeze(&f).await;
        }
        if f.to == self.opts.shard {
            return Err(refuse::invalid("a range moves to another shard"));
        }
        self.own_range(&f.start, &f.end)?;
        let ack = {
            let mut st = self.lock();
            let other = st.frozen.iter().find(|o| overlap(&o.start, &o.end, &f.start, &f.end));
            match other {
                Some(o) if *o == f => None,
                Some(o) => {
                    return Err(refuse::invalid(format!(
                        "the range overlaps one frozen for shard {} (map version {})",
                        o.to, o.map_version
                    )));
                }
                None => {
                    // Frozen here once its record is on its way: a freeze
                    // answered again must be one a restart keeps.
                    let mut tx = self.tables.db.begin().map_err(|e| engine(&e))?;
                    tx.put(&self.tables.meta, &row_key(&f.start), &row_value(&f))
                        .map_err(|e| engine(&e))?;
                    let ack = tx.precommit().map_err(|e| engine(&e))?;
                    if let Some(csn) = ack.csn() {
                        // The answer's barrier covers the record too.
                        st.last_csn = st.last_csn.max(csn);
                    }
                    st.frozen.push(f.clone());
                    Some(ack)
                }
            }
        };
        if let Some(ack) = ack {
            ack.await.map_err(|e| engine(&e))?;
        }
        // Wait out the transactions prepared here that write in the
        // range: their decisions come from their coordinators, or from
        // cooperative termination after the termination timeout.
        let patience = self.opts.termination_timeout * 4 + Duration::from_secs(1);
        let deadline = Instant::now() + patience;
        loop {
            let decided = self.decided.notified();
            tokio::pin!(decided);
            decided.as_mut().enable();
            let done = {
                let st = self.lock();
                let reads = st.p.latest_read_in(&f.start, &f.end);
                (!st.p.prepared_in(&f.start, &f.end)).then_some((reads, st.last_csn))
            };
            if let Some((floor, csn)) = done {
                // And what was written before it durable: a commit the
                // range's next owner copies is one no crash takes back.
                self.barrier(csn).await?;
                return Ok(proto::ShardFreezeResponse { floor });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Status::unavailable(format!(
                    "frozen, but transactions prepared here still write in the range after \
                     {patience:?}; ask again"
                )));
            }
            let _ = tokio::time::timeout(left.min(Duration::from_millis(100)), decided).await;
        }
    }

    /// Lift the freeze of `f` (the same range): its record deleted, then
    /// the range served again.
    async fn unfreeze(&self, f: &Frozen) -> Result<proto::ShardFreezeResponse, Status> {
        let ack = {
            let mut st = self.lock();
            let Some(i) = st.frozen.iter().position(|o| o.start == f.start && o.end == f.end)
            else {
                return Ok(proto::ShardFreezeResponse {
                    floor: st.p.latest_read_in(&f.start, &f.end),
                });
            };
            let mut tx = self.tables.db.begin().map_err(|e| engine(&e))?;
            tx.delete(&self.tables.meta, &row_key(&f.start)).map_err(|e| engine(&e))?;
            let ack = tx.precommit().map_err(|e| engine(&e))?;
            st.frozen.remove(i);
            ack
        };
        ack.await.map_err(|e| engine(&e))?;
        Ok(proto::ShardFreezeResponse { floor: self.lock().p.latest_read_in(&f.start, &f.end) })
    }

    /// Refuse a key the current map does not give this shard.
    pub(super) fn own(&self, key: &[u8]) -> Result<(), Status> {
        let map = self.map.read();
        let owner = map.shard_of(key);
        if owner == self.opts.shard {
            return Ok(());
        }
        Err(refuse::wrong_shard(
            format!(
                "wrong shard: map version {} gives this key to shard {owner}, not {}",
                map.version, self.opts.shard
            ),
            map.version,
        ))
    }

    /// Refuse a range `[start, end)` (an empty `end`: no end) that is not
    /// all this shard's under the current map.
    pub(super) fn own_range(&self, start: &[u8], end: &[u8]) -> Result<(), Status> {
        self.own(start)?;
        let map = self.map.read();
        let other = map.ranges.iter().find(|(first, owner)| {
            first.as_slice() > start
                && (end.is_empty() || first.as_slice() < end)
                && *owner != self.opts.shard
        });
        match other {
            None => Ok(()),
            Some((first, owner)) => Err(refuse::wrong_shard(
                format!(
                    "wrong shard: map version {} gives part of this range (from {:?}) to shard \
                     {owner}, not {}",
                    map.version,
                    String::from_utf8_lossy(first),
                    self.opts.shard
                ),
                map.version,
            )),
        }
    }
}
