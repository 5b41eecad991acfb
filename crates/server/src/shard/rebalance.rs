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
use std::time::{Duration, Instant};

use milliscale::Direction;
use milliscale_client::handover::{self, MovePlan};
use milliscale_milana::map_lease::MapLease;
use milliscale_milana::shard_map::{MapChange, ShardMap, Thresholds};
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

/// One range of a shard, as the rebalancer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Load {
    /// Its index in the map's ranges.
    pub index: usize,
    /// Its rows.
    pub rows: u64,
    /// A key near its middle, where it may be split (empty: none).
    pub middle: Key,
    /// The requests a second on its keys since the last round (`None`:
    /// not known yet, as in a first round or for a range new since).
    pub rate: Option<u64>,
}

/// Each shard's ranges.
pub type Loads = BTreeMap<ShardId, Vec<Load>>;

/// The change to make, if any (see the module's comment). `loads` has
/// every shard of the map that answered; one that did not is left out.
pub fn decide(map: &ShardMap, loads: &Loads, t: Thresholds) -> Option<Decision> {
    // A range's first key as `table/key`, the key's other bytes escaped.
    let show = |i: usize| match split_cluster_key(&map.ranges[i].0) {
        Some((t, k)) => format!("{t}/{}", k.escape_ascii()),
        None => "the first key".to_owned(),
    };
    let all = || loads.values().flatten().filter(|l| !l.middle.is_empty());
    if let Some(l) = all().filter(|l| l.rows > t.split_rows).max_by_key(|l| l.rows) {
        let why = format!(
            "the range from {} holds {} rows, over {}",
            show(l.index),
            l.rows,
            t.split_rows
        );
        return Some(Decision::Split { at: l.middle.clone(), why });
    }
    if let Some(limit) = t.split_load {
        let hot = all().filter(|l| l.rate.is_some_and(|r| r > limit)).max_by_key(|l| l.rate);
        if let Some(l) = hot {
            let why = format!(
                "the range from {} serves {} requests a second, over {limit}",
                show(l.index),
                l.rate.unwrap_or(0)
            );
            return Some(Decision::Split { at: l.middle.clone(), why });
        }
    }
    let rows: BTreeMap<ShardId, u64> =
        loads.iter().map(|(s, r)| (*s, r.iter().map(|l| l.rows).sum())).collect();
    match gap(&rows) {
        Some((full, most, empty, least, mean))
            if (most - least) * 10 > mean && most - least >= 10 =>
        {
            let gap = most - least;
            // The move that leaves the two closest: rows nearest half the
            // gap, and under the gap (else it only swaps them).
            let pick = loads[&full]
                .iter()
                .filter(|l| l.rows > 0 && l.rows < gap)
                .min_by_key(|l| l.rows.abs_diff(gap / 2));
            if let Some(l) = pick {
                let why = format!(
                    "shard {full} holds {most} rows and shard {empty} {least} (mean {mean}): the \
                     range from {} ({} rows) moves",
                    show(l.index),
                    l.rows
                );
                return Some(Decision::Move { index: l.index, to: empty, why });
            }
            let l = loads[&full].iter().filter(|l| !l.middle.is_empty()).max_by_key(|l| l.rows)?;
            let why = format!(
                "shard {full} holds {most} rows and shard {empty} {least} (mean {mean}), and no \
                 range of shard {full} is under the gap: the range from {} ({} rows) is split, \
                 to move half",
                show(l.index),
                l.rows
            );
            return Some(Decision::Split { at: l.middle.clone(), why });
        }
        _ => {}
    }
    t.split_load?;
    by_load(loads, &rows, &show)
}

/// The shard with the most of `per`, its amount, the one with the least,
/// its amount, and the mean.
fn gap(per: &BTreeMap<ShardId, u64>) -> Option<(ShardId, u64, ShardId, u64, u64)> {
    let (&full, &most) = per.iter().max_by_key(|(s, n)| (**n, std::cmp::Reverse(**s)))?;
    let (&empty, &least) = per.iter().min_by_key(|(s, n)| (**n, **s))?;
    (full != empty)
        .then(|| (full, most, empty, least, per.values().sum::<u64>() / per.len() as u64))
}

/// With the rows balanced: from the busiest shard to the least busy,
/// while they differ by over half the mean load, the range whose load is
/// nearest half that gap (and under it), if moving its rows leaves the
/// rows balanced (so that the next round does not move them back).
fn by_load(
    loads: &Loads,
    rows: &BTreeMap<ShardId, u64>,
    show: &dyn Fn(usize) -> String,
) -> Option<Decision> {
    let rates: BTreeMap<ShardId, u64> =
        loads.iter().map(|(s, r)| (*s, r.iter().filter_map(|l| l.rate).sum())).collect();
    let (busy, most, idle, least, mean) = gap(&rates)?;
    let gap = most - least;
    if gap * 2 <= mean || gap < 10 {
        return None;
    }
    let mean_rows = rows.values().sum::<u64>() / rows.len() as u64;
    let still_balanced = |moved: u64| {
        let mut after = rows.clone();
        *after.get_mut(&busy)? -= moved;
        *after.get_mut(&idle)? += moved;
        let (hi, lo) = (after.values().max()?, after.values().min()?);
        ((hi - lo) * 10 <= mean_rows).then_some(())
    };
    let l = loads[&busy]
        .iter()
        .filter(|l| l.rate.is_some_and(|r| r > 0 && r < gap) && still_balanced(l.rows).is_some())
        .min_by_key(|l| l.rate.unwrap_or(0).abs_diff(gap / 2))?;
    let why = format!(
        "shard {busy} serves {most} requests a second and shard {idle} {least} (mean {mean}): \
         the range from {} ({} a second, {} rows) moves",
        show(l.index),
        l.rate.unwrap_or(0),
        l.rows
    );
    Some(Decision::Move { index: l.index, to: idle, why })
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
            let (parts, requests) = {
                let mut st = self.lock();
                if st.refuse_frozen([start.as_slice()], []).is_err() {
                    continue;
                }
                let requests = st.requests.get(start).copied().unwrap_or(0);
                (st.p.versions_mut().table_ranges(start, &end), requests)
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
            let (start, middle) = (start.clone().into(), middle.into());
            out.push(proto::RangeLoad { start, rows, middle, requests });
        }
        Ok(out)
    }
}

/// The rebalancer's loop, in every shard: each round, if the map asks
/// for it and this shard holds the map's lease, one decision.
pub(super) async fn background(shard: Arc<Shard>, mut stop: watch::Receiver<bool>) {
    let me = format!("shard {} at {}", shard.opts.shard, shard.addr());
    let lease = Arc::new(MapLease::new(shard.maps.store(), &shard.opts.map_prefix));
    let mut seen = Seen::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(shard.opts.rebalance_every) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let t = {
            let map = shard.map.read();
            let Some(split_rows) = map.rebalance else { continue };
            Thresholds { split_rows, split_load: map.split_load }
        };
        let (l, who) = (Arc::clone(&lease), me.clone());
        let held = tokio::task::spawn_blocking(move || l.hold(&who, LEASE)).await;
        if !matches!(held, Ok(Ok(true))) {
            continue;
        }
        shard.refresh_map().await;
        if let Err(e) = round(&shard, t, &mut seen).await {
            tracing::warn!(target: "milliscale::rebalance", error = %e, "rebalancing");
        }
    }
}

/// Each range's requests as last seen, by shard and first key, and when.
type Seen = BTreeMap<(ShardId, Key), (u64, Instant)>;

/// One round: the loads, a decision, and the change made.
async fn round(shard: &Arc<Shard>, t: Thresholds, seen: &mut Seen) -> Result<(), String> {
    let map = shard.map.read().clone();
    let mut loads = Loads::new();
    let mut now_seen = Seen::new();
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
        let now = Instant::now();
        let ranges = info
            .loads
            .into_iter()
            .filter_map(|l| {
                let index = map.ranges.iter().position(|(k, _)| k[..] == l.start[..])?;
                let key = (*s, l.start.to_vec());
                let rate = seen.get(&key).and_then(|(before, at)| {
                    let secs = now.duration_since(*at).as_secs_f64();
                    (secs > 0.0 && l.requests >= *before)
                        .then(|| ((l.requests - before) as f64 / secs) as u64)
                });
                now_seen.insert(key, (l.requests, now));
                Some(Load { index, rows: l.rows, middle: l.middle.to_vec(), rate })
            })
            .collect();
        loads.insert(*s, ranges);
    }
    *seen = now_seen;
    if loads.len() < map.shards.len() {
        return Ok(()); // a shard did not answer: wait for it
    }
    match decide(&map, &loads, t) {
        None => {
            let rows: BTreeMap<ShardId, u64> =
                loads.iter().map(|(s, r)| (*s, r.iter().map(|l| l.rows).sum())).collect();
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
        ShardMap { version: 1, ranges, shards, rebalance: Some(1000), split_load: None }
    }

    /// Loads of `(shard, range, rows)`, no rate known.
    fn loads(rows: &[(ShardId, usize, u64)], shards: u32) -> Loads {
        let rated: Vec<_> = rows.iter().map(|&(s, i, r)| (s, i, r, None)).collect();
        loads_rated(&rated, shards)
    }

    /// Loads of `(shard, range, rows, requests a second)`.
    fn loads_rated(rows: &[(ShardId, usize, u64, Option<u64>)], shards: u32) -> Loads {
        let mut l: Loads = (0..shards).map(|s| (s, Vec::new())).collect();
        for &(s, index, rows, rate) in rows {
            let load = Load { index, rows, middle: b"mid".to_vec(), rate };
            l.get_mut(&s).expect("a shard").push(load);
        }
        l
    }

    const ROWS: Thresholds = Thresholds { split_rows: 1000, split_load: None };
    const LOAD: Thresholds = Thresholds { split_rows: 1000, split_load: Some(500) };

    #[test]
    fn a_hot_range_splits_and_load_moves_only_while_the_rows_stay_balanced() {
        let m = map(&[0, 0, 1, 2], 3);
        // Range 1 serves 900 a second, over 500: split, by load only.
        let hot = loads_rated(
            &[(0, 0, 100, Some(10)), (0, 1, 100, Some(900)), (1, 2, 200, None), (2, 3, 200, None)],
            3,
        );
        assert_eq!(decide(&m, &hot, ROWS), None, "rows only: balanced");
        let d = decide(&m, &hot, LOAD);
        assert!(matches!(d, Some(Decision::Split { ref why, .. }) if why.contains("900")), "{d:?}");
        // Under the threshold, shard 0 busy (400 + 300) and shard 2 idle:
        // range 1 (300 a second, 10 rows) moves there; range 0 (400 a
        // second) would leave the rows unbalanced (it holds 190).
        let busy = loads_rated(
            &[
                (0, 0, 190, Some(400)),
                (0, 1, 10, Some(300)),
                (1, 2, 200, Some(50)),
                (2, 3, 200, Some(0)),
            ],
            3,
        );
        let d = decide(&m, &busy, LOAD);
        assert!(matches!(d, Some(Decision::Move { index: 1, to: 2, .. })), "{d:?}");
        // Moving it would unbalance the rows: nothing.
        let heavy = loads_rated(
            &[
                (0, 0, 100, Some(400)),
                (0, 1, 100, Some(300)),
                (1, 2, 200, Some(50)),
                (2, 3, 200, Some(0)),
            ],
            3,
        );
        assert_eq!(decide(&m, &heavy, LOAD), None);
        // Rates unknown yet (a first round): nothing by load.
        assert_eq!(
            decide(&m, &loads(&[(0, 0, 100), (0, 1, 100), (1, 2, 200), (2, 3, 200)], 3), LOAD),
            None
        );
    }

    #[test]
    fn a_big_range_splits_first_then_the_fullest_gives_to_the_emptiest() {
        let m = map(&[0, 0, 1], 3);
        // Past the threshold: split the biggest at its middle.
        let d = decide(&m, &loads(&[(0, 0, 1500), (0, 1, 200), (1, 2, 300)], 3), ROWS);
        assert!(matches!(d, Some(Decision::Split { ref at, .. }) if at == b"mid"), "{d:?}");
        // Under it: shard 0 (700) gives shard 2 (100) the range nearest
        // half the gap, 300: range 1.
        let m4 = map(&[0, 0, 1, 2], 3);
        let d = decide(&m4, &loads(&[(0, 0, 400), (0, 1, 300), (1, 2, 300), (2, 3, 100)], 3), ROWS);
        assert!(matches!(d, Some(Decision::Move { index: 1, to: 2, .. })), "{d:?}");
        // Every range of the fullest is as big as the gap: split one.
        let d = decide(&m, &loads(&[(0, 0, 700), (1, 2, 300)], 3), ROWS);
        assert!(matches!(d, Some(Decision::Split { .. })), "{d:?}");
        // Within a tenth of the mean: nothing to do.
        let d = decide(&m, &loads(&[(0, 0, 330), (1, 1, 320), (2, 2, 310)], 3), ROWS);
        assert_eq!(d, None);
        // Nothing anywhere: nothing to do.
        assert_eq!(decide(&m, &loads(&[], 3), ROWS), None);
    }
}
