//! The rebalancer (design record 0009): in whichever shard holds the
//! map's lease, while the map says so (`milliscale cluster rebalance on`),
//! it asks every shard for the rows of its ranges, and makes one change
//! a round (a second by default): a range past the map's split threshold is split at its middle
//! key; otherwise, when the fullest and the emptiest shard differ by over
//! a tenth of the mean, the range of the fullest whose move narrows that
//! gap most moves to the emptiest (split first if every range of the
//! fullest is too big to narrow it). One move is in flight at a time.
//! Every decision is logged with its reason, and the first round that
//! finds nothing to do after a change logs `balanced`, with the rows.
//!
//! The lease only keeps two rebalancers from working against each other;
//! what makes each change safe is the map's conditional write, as for a
//! change made by hand.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use milliscale::Direction;
use milliscale_client::handover::{self, MovePlan};
use milliscale_milana::map_lease::MapLease;
use milliscale_milana::shard_map::{MapChange, ShardMap};
use milliscale_milana::types::{Key, ShardId, cluster_key, split_cluster_key};
use milliscale_proto::v1 as proto;
use tokio::sync::watch;
use tonic::Status;

use super::Shard;
use crate::errors::engine;

/// The lease's length.
const LEASE: Duration = Duration::from_secs(10);

/// One change the rebalancer makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Split the range holding `at` at it.
    Split {
        /// The new range's first key.
        at: Key,
        /// Why, for the log.
        why: String,
    },
    /// Move the range at `index` of the map's ranges to `to`.
    Move {
        /// The range's index in the map.
        index: usize,
        /// The shard it goes to.
        to: ShardId,
        /// Why, for the log.
        why: String,
    },
}

/// Each shard's ranges with their rows: `(range index, rows, middle key)`.
pub type Loads = BTreeMap<ShardId, Vec<(usize, u64, Key)>>;

/// The change to make, if any (see the module's comment). `loads` has
/// every shard of the map that answered; one that did not is left out.
pub fn decide(map: &ShardMap, loads: &Loads, split_rows: u64) -> Option<Decision> {
    // A range's first key as `table/key`, the key's other bytes escaped.
    let show = |i: usize| match split_cluster_key(&map.ranges[i].0) {
        Some((t, k)) => format!("{t}/{}", k.escape_ascii()),
        None => "the first key".to_owned(),
    };
    let big = loads
        .values()
        .flatten()
        .filter(|(_, rows, middle)| *rows > split_rows && !middle.is_empty())
        .max_by_key(|(_, rows, _)| *rows);
    if let Some((i, rows, middle)) = big {
        let why = format!("the range from {} holds {rows} rows, over {split_rows}", show(*i));
        return Some(Decision::Split { at: middle.clone(), why });
    }
    let totals: BTreeMap<ShardId, u64> =
        loads.iter().map(|(s, r)| (*s, r.iter().map(|(_, rows, _)| rows).sum())).collect();
    let (&full, &most) = totals.iter().max_by_key(|(s, rows)| (**rows, std::cmp::Reverse(**s)))?;
    let (&empty, &least) = totals.iter().min_by_key(|(s, rows)| (**rows, **s))?;
    let mean = totals.values().sum::<u64>() / totals.len() as u64;
    let gap = most - least;
    if full == empty || gap * 10 <= mean || gap < 10 {
        return None;
    }
    // The move that leaves the two closest: rows nearest half the gap,
    // and under the gap (else it only swaps them).
    let pick = loads[&full]
        .iter()
        .filter(|(_, rows, _)| *rows > 0 && *rows < gap)
        .min_by_key(|(_, rows, _)| rows.abs_diff(gap / 2));
    match pick {
        Some((i, rows, _)) => Some(Decision::Move {
            index: *i,
            to: empty,
            why: format!(
                "shard {full} holds {most} rows and shard {empty} {least} (mean {mean}): the \
                 range from {} ({rows} rows) moves",
                show(*i)
            ),
        }),
        None => {
            let (i, rows, middle) = loads[&full]
                .iter()
                .filter(|(_, _, m)| !m.is_empty())
                .max_by_key(|(_, rows, _)| *rows)?;
            Some(Decision::Split {
                at: middle.clone(),
                why: format!(
                    "shard {full} holds {most} rows and shard {empty} {least} (mean {mean}), \
                     and no range of shard {full} is under the gap: the range from {} ({rows} \
                     rows) is split, to move half",
                    show(*i)
                ),
            })
        }
    }
}

impl Shard {
    /// The rows of each range of the map this shard owns and is not
    /// moving away, and a key near each one's middle (a scan of them).
    pub fn loads(&self) -> Result<Vec<proto::RangeLoad>, Status> {
        let map = self.map.read().clone();
        let mut out = Vec::new();
        for (i, (start, owner)) in map.ranges.iter().enumerate() {
            if *owner != self.opts.shard {
                continue;
            }
            let end = map.ranges.get(i + 1).map(|(k, _)| k.clone()).unwrap_or_default();
            let parts = {
                let mut st = self.lock();
                if st.refuse_frozen([start.as_slice()], []).is_err() {
                    continue;
                }
                st.p.versions_mut().table_ranges(start, &end)
            };
            let mut tx = self.tables.db.begin().map_err(|e| engine(&e))?;
            // Each table's rows in the range, then the middle one: a pass
            // over the rows and half a pass more.
            let mut counts = Vec::with_capacity(parts.len());
            for (table, lo, hi) in &parts {
                let (lo, hi) = (lo.as_ref().map(Vec::as_slice), hi.as_ref().map(Vec::as_slice));
                counts.push(tx.range(table, lo, hi, Direction::Forward).count() as u64);
            }
            let rows: u64 = counts.iter().sum();
            let mut middle = Vec::new();
            let mut left = rows / 2;
            for ((table, lo, hi), n) in parts.iter().zip(counts) {
                if rows < 2 {
                    break;
                }
                if left >= n {
                    left -= n;
                    continue;
                }
                let (lo, hi) = (lo.as_ref().map(Vec::as_slice), hi.as_ref().map(Vec::as_slice));
                let row = tx.range(table, lo, hi, Direction::Forward).nth(left as usize);
                if let Some(Ok((k, _))) = row {
                    middle = cluster_key(table.name(), &k);
                }
                break;
            }
            // A split at the range's own start is no split.
            if middle == *start {
                middle.clear();
            }
            out.push(proto::RangeLoad { start: start.clone().into(), rows, middle: middle.into() });
        }
        Ok(out)
    }
}

/// The rebalancer's loop, in every shard: each round, if the map asks
/// for it and this shard holds the map's lease, one decision.
pub(super) async fn background(shard: Arc<Shard>, mut stop: watch::Receiver<bool>) {
    let me = format!("shard {} at {}", shard.opts.shard, shard.addr());
    let lease = Arc::new(MapLease::new(shard.maps.store(), &shard.opts.map_prefix));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(shard.opts.rebalance_every) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let Some(split_rows) = shard.map.read().rebalance else { continue };
        let (l, who) = (Arc::clone(&lease), me.clone());
        let held = tokio::task::spawn_blocking(move || l.hold(&who, LEASE)).await;
        if !matches!(held, Ok(Ok(true))) {
            continue;
        }
        shard.refresh_map().await;
        if let Err(e) = round(&shard, split_rows).await {
            tracing::warn!(target: "milliscale::rebalance", error = %e, "rebalancing");
        }
    }
}

/// One round: the loads, a decision, and the change made.
async fn round(shard: &Arc<Shard>, split_rows: u64) -> Result<(), String> {
    let map = shard.map.read().clone();
    let mut loads = Loads::new();
    for (s, info) in &map.shards {
        let Ok(c) = shard.peer_client(&info.addr).await else { continue };
        let req = proto::ShardInfoRequest { loads: true, ..Default::default() };
        let Ok(Ok(info)) = tokio::time::timeout(Duration::from_secs(5), c.shard_info(req)).await
        else {
            continue;
        };
        if !info.moving.is_empty() {
            return Ok(()); // a move in flight: one at a time
        }
        let ranges = info
            .loads
            .into_iter()
            .filter_map(|l| {
                let i = map.ranges.iter().position(|(k, _)| k[..] == l.start[..])?;
                Some((i, l.rows, l.middle.to_vec()))
            })
            .collect();
        loads.insert(*s, ranges);
    }
    if loads.len() < map.shards.len() {
        return Ok(()); // a shard did not answer: wait for it
    }
    match decide(&map, &loads, split_rows) {
        None => {
            let rows: BTreeMap<ShardId, u64> =
                loads.iter().map(|(s, r)| (*s, r.iter().map(|(_, n, _)| n).sum())).collect();
            if shard.rebalanced.swap(true, std::sync::atomic::Ordering::Relaxed) {
                return Ok(());
            }
            tracing::info!(target: "milliscale::rebalance", ?rows, "balanced");
            Ok(())
        }
        Some(Decision::Split { at, why }) => {
            shard.rebalanced.store(false, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(target: "milliscale::rebalance", %why, "splitting");
            let maps = Arc::clone(&shard.maps);
            let change = MapChange::Split(at);
            let r = tokio::task::spawn_blocking(move || maps.change(&change)).await;
            match r {
                Ok(Ok(m)) => {
                    tracing::info!(target: "milliscale::rebalance", version = m.version, "split");
                    Ok(())
                }
                Ok(Err(e)) => Err(format!("splitting: {e}")),
                Err(e) => Err(e.to_string()),
            }
        }
        Some(Decision::Move { index, to, why }) => {
            shard.rebalanced.store(false, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(target: "milliscale::rebalance", %why, to, "moving");
            let plan = MovePlan::new(map.clone(), index, to)?;
            let src = shard.peer_client(&map.shards[&plan.from].addr).await?;
            let dst = shard.peer_client(&map.shards[&to].addr).await?;
            let maps = Arc::clone(&shard.maps);
            let publish = async move |next: ShardMap| {
                tokio::task::spawn_blocking(move || maps.publish(&next)).await.unwrap_or_else(|e| {
                    Err(milliscale_milana::shard_map::MapError::Invalid(e.to_string()))
                })
            };
            let said = |s: String| tracing::info!(target: "milliscale::rebalance", "{s}");
            let moved = handover::move_range(&plan, &src, &dst, publish, said).await?;
            tracing::info!(
                target: "milliscale::rebalance",
                rows = moved.rows,
                changed = ?moved.changed,
                version = moved.map_version,
                frozen_ms = moved.frozen.as_millis() as u64,
                "moved"
            );
            shard.refresh_map().await;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use milliscale_milana::shard_map::ShardInfo;

    fn map(owners: &[ShardId], shards: u32) -> ShardMap {
        let ranges = owners
            .iter()
            .enumerate()
            .map(|(i, s)| {
                (if i == 0 { Vec::new() } else { cluster_key("t", &[b'a' + i as u8]) }, *s)
            })
            .collect();
        let shards = (0..shards)
            .map(|s| (s, ShardInfo { addr: format!("127.0.0.1:{s}"), log: String::new() }))
            .collect();
        ShardMap { version: 1, ranges, shards, rebalance: Some(1000) }
    }

    fn loads(rows: &[(ShardId, usize, u64)], shards: u32) -> Loads {
        let mut l: Loads = (0..shards).map(|s| (s, Vec::new())).collect();
        for (s, i, r) in rows {
            l.get_mut(s).expect("a shard").push((*i, *r, b"mid".to_vec()));
        }
        l
    }

    #[test]
    fn a_big_range_splits_first_then_the_fullest_gives_to_the_emptiest() {
        let m = map(&[0, 0, 1], 3);
        // Past the threshold: split the biggest at its middle.
        let d = decide(&m, &loads(&[(0, 0, 1500), (0, 1, 200), (1, 2, 300)], 3), 1000);
        assert!(matches!(d, Some(Decision::Split { ref at, .. }) if at == b"mid"), "{d:?}");
        // Under it: shard 0 (700) gives shard 2 (100) the range nearest
        // half the gap, 300: range 1.
        let m4 = map(&[0, 0, 1, 2], 3);
        let d = decide(&m4, &loads(&[(0, 0, 400), (0, 1, 300), (1, 2, 300), (2, 3, 100)], 3), 1000);
        assert!(matches!(d, Some(Decision::Move { index: 1, to: 2, .. })), "{d:?}");
        // Every range of the fullest is as big as the gap: split one.
        let d = decide(&m, &loads(&[(0, 0, 700), (1, 2, 300)], 3), 1000);
        assert!(matches!(d, Some(Decision::Split { .. })), "{d:?}");
        // Within a tenth of the mean: nothing to do.
        let d = decide(&m, &loads(&[(0, 0, 330), (1, 1, 320), (2, 2, 310)], 3), 1000);
        assert_eq!(d, None);
        // Nothing anywhere: nothing to do.
        assert_eq!(decide(&m, &loads(&[], 3), 1000), None);
    }
}
