//! The shard map: which shard owns which keys, and where each shard's
//! server and log are. It lives on the object store as a sequence of
//! versions, `PREFIX/shard-map/NNNNNNNNNNNNNNNNNNNN` (the version, 20
//! digits, so key order is version order), each created once with a
//! conditional write (`put_if_absent`). The store is the coordination
//! service: two administrators that both read version 7 and both publish
//! version 8 cannot both succeed, and no consensus of our own is needed.
//!
//! Invariants:
//! - a published version is never changed; the newest version is the map;
//! - version `n + 1` is published only by someone who read version `n`
//!   (`publish` refuses any other number), so no change is lost to a
//!   concurrent one: the loser reads the winner's map and tries again;
//! - every key has exactly one owner: the ranges start at the empty key,
//!   are sorted by start key without repeats, and every shard they name
//!   has an address.
//!
//! Clients and shards cache the map; a client reads it again when a shard
//! answers that a key is not its own. Changes that move no data (a shard
//! added or removed, a range split) are [`MapChange`]s, published with
//! [`MapStore::change`]; how a range moves is design record 0009.

use std::collections::BTreeMap;
#[cfg(feature = "engine")]
use std::sync::Arc;

#[cfg(feature = "engine")]
use milliscale::store::{Bytes, ObjectStore, StoreError};
use serde::{Deserialize, Serialize};

use crate::types::{Key, ShardId};

/// Where a shard is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// Its server's address (`host:port`).
    pub addr: String,
    /// Its log's store URL (its own bucket or prefix).
    pub log: String,
}

/// One version of the map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMap {
    /// 1, 2, ...: each change publishes the next.
    pub version: u64,
    /// `(first key, shard)`: the shard owns the keys from its first key up
    /// to the next range's. Sorted; the first starts at the empty key.
    pub ranges: Vec<(Key, ShardId)>,
    /// Every shard of the cluster: each the ranges name, and any that owns
    /// no range (one that joined and awaits a range, or is about to be
    /// removed).
    pub shards: BTreeMap<ShardId, ShardInfo>,
    /// The rebalancer's switch (design record 0009): on, with the row
    /// count past which it splits a range; absent, off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalance: Option<u64>,
    /// With the rebalancer on: the requests a second past which it splits
    /// a range, and moves ranges from the busiest shard while the rows
    /// are balanced; absent, it looks at rows only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_load: Option<u64>,
}

/// The rebalancer's thresholds (design record 0009).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Split a range past this many rows.
    pub split_rows: u64,
    /// Split a range past this many requests a second (none: by rows only).
    pub split_load: Option<u64>,
}

/// A change to the map that moves no data (design record 0009): each
/// gives the next version, or says why it cannot be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapChange {
    /// A new shard, owning no range yet.
    AddShard(ShardId, ShardInfo),
    /// The range holding this key (a cluster key) cut in two at it, both
    /// halves with the range's owner.
    Split(Key),
    /// A shard that owns no range, gone from the map.
    RemoveShard(ShardId),
    /// The rebalancer switched on, with its thresholds, or off.
    Rebalance(Option<Thresholds>),
}

impl ShardMap {
    /// The shard that owns `key`.
    pub fn shard_of(&self, key: &[u8]) -> ShardId {
        self.ranges[self.range_of(key)].1
    }

    /// The shard that owns `key` of `table` ([`ShardMap::shard_of`] its
    /// cluster key), without building the cluster key.
    pub fn shard_of_row(&self, table: &str, key: &[u8]) -> ShardId {
        let parts = [table.as_bytes(), &[0], key];
        self.ranges[self.last_range(|start| cmp_parts(start, parts).is_le())].1
    }

    /// Which of `ranges` holds `key`: its index.
    pub fn range_of(&self, key: &[u8]) -> usize {
        self.last_range(|start| start <= key)
    }

    /// The index of the last range whose first key is at or below a key
    /// (`at_or_below`, asked of a range's first key).
    fn last_range(&self, at_or_below: impl Fn(&[u8]) -> bool) -> usize {
        self.ranges.partition_point(|(start, _)| at_or_below(start)).saturating_sub(1)
    }

    /// The shard that owns every key of `[start, end)` (an empty `end`:
    /// no end), if one does.
    pub fn sole_owner(&self, start: &[u8], end: &[u8]) -> Option<ShardId> {
        let owner = self.shard_of(start);
        let split = self.ranges.iter().any(|(first, s)| {
            first.as_slice() > start && (end.is_empty() || first.as_slice() < end) && *s != owner
        });
        (!split).then_some(owner)
    }

    /// Whether `shard` owns a range.
    pub fn owns_any(&self, shard: ShardId) -> bool {
        self.ranges.iter().any(|(_, s)| *s == shard)
    }

    /// The version after this one, with `change` made; refused
    /// ([`MapError::Invalid`]) if it cannot be: a shard added that
    /// exists, a split at a key where a range already begins, a shard
    /// removed that does not exist or still owns a range.
    pub fn changed(&self, change: &MapChange) -> Result<ShardMap, MapError> {
        let bad = |why: String| Err(MapError::Invalid(why));
        let mut next = self.clone();
        next.version = self.version + 1;
        match change {
            MapChange::AddShard(id, info) => {
                if let Some(old) = self.shards.get(id) {
                    return bad(format!("shard {id} is in the map already, at {}", old.addr));
                }
                if info.addr.is_empty() {
                    return bad(format!("shard {id} needs an address"));
                }
                next.shards.insert(*id, info.clone());
            }
            MapChange::Split(key) => {
                let i = self.ranges.partition_point(|(start, _)| start <= key);
                if key.is_empty() || self.ranges[i - 1].0 == *key {
                    return bad(format!(
                        "a range already begins at {:?}",
                        String::from_utf8_lossy(key)
                    ));
                }
                next.ranges.insert(i, (key.clone(), self.ranges[i - 1].1));
            }
            MapChange::RemoveShard(id) => {
                if !self.shards.contains_key(id) {
                    return bad(format!("shard {id} is not in the map"));
                }
                let owned = self.ranges.iter().filter(|(_, s)| s == id).count();
                if owned > 0 {
                    return bad(format!(
                        "shard {id} still owns {owned} range(s); move them away first"
                    ));
                }
                next.shards.remove(id);
            }
            MapChange::Rebalance(t) => {
                if t.is_some_and(|t| t.split_rows == 0) {
                    return bad("the rebalancer's split threshold must be at least one row".into());
                }
                if t.is_some_and(|t| t.split_load == Some(0)) {
                    return bad(
                        "the rebalancer's load threshold must be at least one request a second"
                            .into(),
                    );
                }
                next.rebalance = t.map(|t| t.split_rows);
                next.split_load = t.and_then(|t| t.split_load);
            }
        }
        next.check()?;
        Ok(next)
    }

    /// Refuse a map that leaves a key without exactly one owner.
    pub fn check(&self) -> Result<(), MapError> {
        let bad = |why: String| Err(MapError::Invalid(why));
        if self.version == 0 {
            return bad("versions start at 1".into());
        }
        match self.ranges.first() {
            Some((start, _)) if start.is_empty() => {}
            _ => return bad("the first range must start at the empty key".into()),
        }
        if let Some(w) = self.ranges.windows(2).find(|w| w[0].0 >= w[1].0) {
            return bad(format!("ranges out of order or repeated at {:?}", w[1].0));
        }
        if let Some((_, s)) = self.ranges.iter().find(|(_, s)| !self.shards.contains_key(s)) {
            return bad(format!("shard {s} owns keys but has no address"));
        }
        Ok(())
    }
}

/// Why the map could not be read or published.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    /// The store failed.
    #[cfg(feature = "engine")]
    #[error("shard map store: {0}")]
    Store(#[from] StoreError),
    /// The map breaks an invariant (see the module's comment).
    #[error("invalid shard map: {0}")]
    Invalid(String),
    /// Someone else published this version first: read the map again,
    /// redo the change on it, and publish the version after it.
    #[error("shard map version {0} was published by someone else first")]
    Lost(u64),
    /// The version is past the one after the newest.
    #[error("shard map version {wanted} cannot follow version {newest}")]
    NotNext {
        /// The version offered.
        wanted: u64,
        /// The newest published.
        newest: u64,
    },
}

/// The folder `leaf/` under `prefix` (`""`: the store's root), as keys
/// begin.
#[cfg(feature = "engine")]
pub(crate) fn dir_under(prefix: &str, leaf: &str) -> String {
    let prefix = prefix.trim_end_matches('/');
    if prefix.is_empty() { format!("{leaf}/") } else { format!("{prefix}/{leaf}/") }
}

/// The field of a stored version that says when its publisher wrote it
/// (microseconds since the Unix epoch on the publisher's clock; absent in
/// versions written before it was kept): which version was the map at a
/// moment of the past ([`MapStore::as_of`]). Beside the map's own fields,
/// which older readers read without it.
#[cfg(feature = "engine")]
const PUBLISHED_US: &str = "published_us";

/// The map's versions on a store.
#[cfg(feature = "engine")]
pub struct MapStore {
    store: Arc<dyn ObjectStore>,
    dir: String,
}

#[cfg(feature = "engine")]
impl std::fmt::Debug for MapStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapStore").field("dir", &self.dir).finish()
    }
}

#[cfg(feature = "engine")]
impl MapStore {
    /// The map under `prefix` (`""` for the store's root) of `store`.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str) -> MapStore {
        MapStore { store, dir: dir_under(prefix, "shard-map") }
    }

    fn key(&self, version: u64) -> String {
        format!("{}{version:020}", self.dir)
    }

    /// The store the map is on.
    pub fn store(&self) -> Arc<dyn ObjectStore> {
        Arc::clone(&self.store)
    }

    /// The newest version, if any was published.
    pub fn latest(&self) -> Result<Option<ShardMap>, MapError> {
        let Some(newest) = self.versions()?.pop() else {
            return Ok(None);
        };
        self.get(newest)
    }

    /// The versions on the store, oldest first.
    fn versions(&self) -> Result<Vec<u64>, MapError> {
        let mut versions = Vec::new();
        for m in self.store.list(&self.dir)? {
            let v = m.key[self.dir.len()..]
                .parse::<u64>()
                .map_err(|_| MapError::Invalid(format!("{}: not a map version's name", m.key)))?;
            versions.push(v);
        }
        versions.sort_unstable();
        Ok(versions)
    }

    /// Version `version`, if it was published.
    pub fn get(&self, version: u64) -> Result<Option<ShardMap>, MapError> {
        Ok(self.read(version)?.map(|(map, _)| map))
    }

    /// Version `version` and when it was published, if it was.
    fn read(&self, version: u64) -> Result<Option<(ShardMap, Option<u64>)>, MapError> {
        let key = self.key(version);
        let bytes = match self.store.get(&key) {
            Ok(b) => b,
            Err(StoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let invalid = |e: serde_json::Error| MapError::Invalid(format!("{key}: {e}"));
        let mut stored: serde_json::Value = serde_json::from_slice(&bytes).map_err(invalid)?;
        let published = stored.as_object_mut().and_then(|o| o.remove(PUBLISHED_US));
        let published = published.and_then(|p| p.as_u64());
        let map: ShardMap = serde_json::from_value(stored).map_err(invalid)?;
        if map.version != version {
            return Err(MapError::Invalid(format!("{key} holds version {}", map.version)));
        }
        map.check()?;
        Ok(Some((map, published)))
    }

    /// The map at `t` (microseconds since the Unix epoch): the newest
    /// version published at or before it, by its publisher's clock (a
    /// version written without its time counts as published before every
    /// version with one). `None` if none was published by then.
    pub fn as_of(&self, t: u64) -> Result<Option<ShardMap>, MapError> {
        for v in self.versions()?.into_iter().rev() {
            match self.read(v)? {
                Some((map, published)) if published.is_none_or(|p| p <= t) => return Ok(Some(map)),
                _ => {}
            }
        }
        Ok(None)
    }

    /// Make `change` on the newest version and publish the result, read
    /// again and made again each time another change wins the version
    /// (up to 16 times); the version published.
    pub fn change(&self, change: &MapChange) -> Result<ShardMap, MapError> {
        let mut lost = 0;
        loop {
            let newest = self
                .latest()?
                .ok_or_else(|| MapError::Invalid("no shard map is published".into()))?;
            let next = newest.changed(change)?;
            match self.publish(&next) {
                Err(MapError::Lost(_)) if lost < 16 => lost += 1,
                Err(e) => return Err(e),
                Ok(()) => return Ok(next),
            }
        }
    }

    /// Publish `next`, which must be the version after the newest (1 on
    /// an empty store) and valid.
    pub fn publish(&self, next: &ShardMap) -> Result<(), MapError> {
        next.check()?;
        let newest = self.latest()?.map_or(0, |m| m.version);
        if next.version <= newest {
            return Err(MapError::Lost(next.version));
        }
        if next.version != newest + 1 {
            return Err(MapError::NotNext { wanted: next.version, newest });
        }
        let published_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let mut stored = serde_json::to_value(next).expect("a map serializes");
        if let Some(o) = stored.as_object_mut() {
            o.insert(PUBLISHED_US.into(), published_us.into());
        }
        let body = serde_json::to_vec_pretty(&stored).expect("a map serializes");
        match self.store.put_if_absent(&self.key(next.version), Bytes::from(body)) {
            Ok(_) => Ok(()),
            Err(StoreError::AlreadyExists(_)) => Err(MapError::Lost(next.version)),
            Err(e) => Err(e.into()),
        }
    }
}

/// `a` against the concatenation of `parts`, as bytes.
fn cmp_parts(mut a: &[u8], parts: [&[u8]; 3]) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    for p in parts {
        let n = a.len().min(p.len());
        match a[..n].cmp(&p[..n]) {
            Ordering::Equal if a.len() < p.len() => return Ordering::Less,
            Ordering::Equal => a = &a[n..],
            o => return o,
        }
    }
    if a.is_empty() { Ordering::Equal } else { Ordering::Greater }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::cluster_key;

    fn map(version: u64, ranges: &[(&str, ShardId)]) -> ShardMap {
        let ranges: Vec<(Key, ShardId)> =
            ranges.iter().map(|(k, s)| (k.as_bytes().to_vec(), *s)).collect();
        let shards = ranges
            .iter()
            .map(|(_, s)| {
                (
                    *s,
                    ShardInfo {
                        addr: format!("127.0.0.1:{}", 7000 + s),
                        log: format!("memory://{s}"),
                    },
                )
            })
            .collect();
        ShardMap { version, ranges, shards, rebalance: None, split_load: None }
    }

    #[test]
    fn every_key_has_one_owner() {
        let m = map(1, &[("", 0), ("g", 1), ("p", 2)]);
        m.check().expect("valid");
        assert_eq!(m.shard_of(b""), 0);
        assert_eq!(m.shard_of(b"apple"), 0);
        assert_eq!(m.shard_of(b"g"), 1);
        assert_eq!(m.shard_of(b"oz"), 1);
        assert_eq!(m.shard_of(b"p"), 2);
        assert_eq!(m.shard_of(b"zzz"), 2);
        assert!(map(1, &[("a", 0)]).check().is_err(), "keys below the first range unowned");
        assert!(map(1, &[("", 0), ("p", 1), ("g", 2)]).check().is_err(), "out of order");
        assert!(map(0, &[("", 0)]).check().is_err(), "version 0");
        let mut no_addr = map(1, &[("", 0), ("g", 1)]);
        no_addr.shards.remove(&1);
        assert!(no_addr.check().is_err());
    }

    #[test]
    fn a_rows_owner_is_its_cluster_keys_owner() {
        // Range starts inside a table's name, at its first key, inside and
        // past keys; tables and keys that are prefixes of each other.
        let starts = ["", "a", "ab", "ab\0", "ab\0k", "ab\0kk", "ab\x01", "abc", "b\0", "b\0\0"];
        for n in 1..=starts.len() {
            let mut ranges: Vec<(&str, ShardId)> =
                starts[..n].iter().enumerate().map(|(i, s)| (*s, i as ShardId)).collect();
            ranges.sort();
            let m = map(1, &ranges);
            for table in ["a", "ab", "abc", "b"] {
                for key in [&b""[..], b"\0", b"k", b"kk", b"kkk", b"l", b"\xff"] {
                    assert_eq!(
                        m.shard_of_row(table, key),
                        m.shard_of(&cluster_key(table, key)),
                        "{table} {key:?} in {ranges:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn changes_give_the_next_version_or_say_why_not() {
        let info = |port: u16| ShardInfo {
            addr: format!("127.0.0.1:{port}"),
            log: format!("memory://{port}"),
        };
        let m = map(4, &[("", 0), ("g", 1)]);
        let added = m.changed(&MapChange::AddShard(2, info(9002))).expect("add");
        assert_eq!(added.version, 5);
        assert_eq!(added.ranges, m.ranges, "a new shard owns nothing");
        assert_eq!(added.shards.get(&2), Some(&info(9002)));
        assert!(matches!(m.changed(&MapChange::AddShard(1, info(1))), Err(MapError::Invalid(_))));
        assert!(matches!(
            m.changed(&MapChange::AddShard(3, ShardInfo { addr: String::new(), log: "x".into() })),
            Err(MapError::Invalid(_))
        ));

        let split = added.changed(&MapChange::Split(b"c".to_vec())).expect("split");
        assert_eq!(split.version, 6);
        assert_eq!(split, map(6, &[("", 0), ("c", 0), ("g", 1)]).with(2, info(9002)));
        // Every key keeps its owner.
        for k in [&b""[..], b"b", b"c", b"f", b"g", b"zz"] {
            assert_eq!(split.shard_of(k), added.shard_of(k));
        }
        let split = split.changed(&MapChange::Split(b"x".to_vec())).expect("split the last");
        assert_eq!(split.ranges.last(), Some(&(b"x".to_vec(), 1)));
        for at in [&b""[..], b"c", b"x"] {
            assert!(
                matches!(split.changed(&MapChange::Split(at.to_vec())), Err(MapError::Invalid(_))),
                "a split where a range begins"
            );
        }

        let removed = split.changed(&MapChange::RemoveShard(2)).expect("remove");
        assert!(!removed.shards.contains_key(&2));
        assert!(matches!(
            removed.changed(&MapChange::RemoveShard(1)),
            Err(MapError::Invalid(why)) if why.contains("owns")
        ));
        assert!(matches!(removed.changed(&MapChange::RemoveShard(7)), Err(MapError::Invalid(_))));
    }

    impl ShardMap {
        fn with(mut self, id: ShardId, info: ShardInfo) -> ShardMap {
            self.shards.insert(id, info);
            self
        }
    }

    #[test]
    fn a_change_is_made_again_on_the_map_that_won() {
        let store: Arc<dyn ObjectStore> = Arc::new(milliscale::store::MemoryStore::new());
        let maps = MapStore::new(store, "");
        assert!(matches!(maps.change(&MapChange::Split(b"m".to_vec())), Err(MapError::Invalid(_))));
        maps.publish(&map(1, &[("", 0), ("m", 1)])).expect("v1");
        // Eight splits at once, each at its own key: each is made once,
        // on the map the others left, none lost.
        std::thread::scope(|s| {
            for k in ["b", "d", "f", "h", "p", "r", "t", "v"] {
                let maps = &maps;
                s.spawn(move || maps.change(&MapChange::Split(k.as_bytes().to_vec())).expect(k));
            }
        });
        let m = maps.latest().expect("read").expect("a map");
        assert_eq!(m.version, 9);
        let starts: Vec<&[u8]> = m.ranges.iter().map(|(k, _)| k.as_slice()).collect();
        assert_eq!(starts, [&b""[..], b"b", b"d", b"f", b"h", b"m", b"p", b"r", b"t", b"v"]);
        assert_eq!(m.shard_of(b"c"), 0);
        assert_eq!(m.shard_of(b"w"), 1);
    }

    #[test]
    fn a_range_has_a_sole_owner_only_if_no_other_shard_owns_part_of_it() {
        let m = map(1, &[("", 0), ("g", 1), ("p", 1), ("t", 2)]);
        assert_eq!(m.sole_owner(b"g", b"p"), Some(1));
        assert_eq!(m.sole_owner(b"g", b"t"), Some(1), "two ranges of one shard");
        assert_eq!(m.sole_owner(b"h", b"i"), Some(1), "inside a range");
        assert_eq!(m.sole_owner(b"a", b"h"), None, "across shards 0 and 1");
        assert_eq!(m.sole_owner(b"p", b""), None, "to the end, across shards 1 and 2");
        assert_eq!(m.sole_owner(b"t", b""), Some(2));
    }

    #[test]
    fn versions_are_published_once_in_order_and_a_racing_publisher_loses() {
        let store: Arc<dyn ObjectStore> = Arc::new(milliscale::store::MemoryStore::new());
        let maps = MapStore::new(Arc::clone(&store), "cluster/");
        assert!(maps.latest().expect("read").is_none());
        assert!(matches!(
            maps.publish(&map(2, &[("", 0)])),
            Err(MapError::NotNext { wanted: 2, newest: 0 })
        ));
        maps.publish(&map(1, &[("", 0)])).expect("v1");
        maps.publish(&map(2, &[("", 0), ("m", 1)])).expect("v2");
        assert_eq!(maps.latest().expect("read"), Some(map(2, &[("", 0), ("m", 1)])));
        // Eight publishers read version 2 and race to publish version 3:
        // exactly one wins; the others are told they lost.
        let winners: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8u32)
                .map(|i| {
                    let maps = &maps;
                    s.spawn(move || {
                        let m = map(3, &[("", 0), ("m", 1), ("t", 2 + i)]);
                        match maps.publish(&m) {
                            Ok(()) => true,
                            Err(MapError::Lost(3)) => false,
                            Err(e) => panic!("{e}"),
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        assert_eq!(winners.iter().filter(|w| **w).count(), 1);
        let v3 = maps.latest().expect("read").expect("a map");
        assert_eq!(v3.version, 3);
        let winner = winners.iter().position(|w| *w).expect("one") as u32;
        assert_eq!(v3.shard_of(b"zebra"), 2 + winner, "the map is the winner's");
        // Each version stays readable by its number.
        assert_eq!(maps.get(2).expect("read"), Some(map(2, &[("", 0), ("m", 1)])));
        assert_eq!(maps.get(3).expect("read"), Some(v3.clone()));
        assert_eq!(maps.get(9).expect("read"), None);
        // A damaged object is refused, not taken for a map.
        store.put("cluster/shard-map/00000000000000000004", Bytes::from_static(b"{")).expect("put");
        assert!(matches!(maps.latest(), Err(MapError::Invalid(_))));
    }
}
