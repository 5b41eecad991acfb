//! A shard's committed versions (MILANA §4.1: every key's versions,
//! stamped with their [`CommitTs`]), behind the trait the participant's
//! rules ask ([`Versions`]), and the engine's layout of them
//! ([`versioned_key`], [`row_value`]; design record 0008).
//!
//! The participant decides; a [`Versions`] only stores and answers:
//! - [`MapVersions`] keeps them in a map (the simulation's reference);
//! - [`crate::engine_versions::EngineVersions`] keeps them as rows of an engine table, one row per
//!   version under a versioned key, so that a shard's data is the
//!   engine's, with its checkpoints, log truncation and replicas.
//!
//! Invariants (both stores):
//! - a key's versions are installed in increasing `CommitTs` order (the
//!   participant's validation guarantees it; a store may rely on it);
//! - `read_at(k, t)` is the newest version of `k` with a timestamp at or
//!   below `t`, or [`CommitTs::INITIAL`] and no value;
//! - `collect(w)` keeps, per key, the newest version at or below `w` and
//!   every version above it: a read at `w` or later sees what it saw.

use std::collections::BTreeMap;

use crate::types::{ClientId, CommitTs, Key, Timestamp, Value};

/// The committed versions of a shard's keys.
pub trait Versions {
    /// The newest committed version of `key` ([`CommitTs::INITIAL`] if
    /// none).
    fn latest(&self, key: &[u8]) -> CommitTs;
    /// The newest version of `key` at or below `at`, and its value
    /// (`None`: deleted, or never written).
    fn read_at(&self, key: &[u8], at: Timestamp) -> (CommitTs, Option<Value>);
    /// The version [`Versions::read_at`] would return, if known without
    /// reading a row (`None`: not known so; read it).
    fn version_at(&self, _key: &[u8], _at: Timestamp) -> Option<CommitTs> {
        None
    }
    /// Install one transaction's writes at `version`, all or none. Each
    /// key's newest version is below `version`.
    fn install(&mut self, version: CommitTs, writes: &[(Key, Option<Value>)]);
    /// Keep, per key, the newest version at or below `watermark` and all
    /// above it; how many versions were dropped.
    fn collect(&mut self, watermark: Timestamp) -> usize;
    /// How many versions are held.
    fn count(&self) -> usize;
    /// Every key's versions, oldest first (for the simulation's oracle).
    fn all(&self) -> BTreeMap<Key, Vec<(CommitTs, Option<Value>)>>;
    /// The keys in `[start, end)` (an empty `end`: no end) with a value at
    /// `at`: each key's newest version at or below `at`, deletions left
    /// out; at most `limit` (0: all), in key order.
    fn scan_at(
        &self,
        start: &[u8],
        end: &[u8],
        at: Timestamp,
        limit: usize,
    ) -> Vec<(Key, CommitTs, Value)>;
    /// Whether a key in `[start, end)` has a version newer than `at`.
    fn changed_after(&self, start: &[u8], end: &[u8], at: Timestamp) -> bool;
}

/// Whether `key` is in `[start, end)` (an empty `end`: no end).
pub fn in_range(key: &[u8], start: &[u8], end: &[u8]) -> bool {
    key >= start && (end.is_empty() || key < end)
}

/// Versions in a map: the reference the engine's layout is checked against.
#[derive(Debug, Clone, Default)]
pub struct MapVersions {
    /// Per key, oldest first.
    keys: BTreeMap<Key, Vec<(CommitTs, Option<Value>)>>,
}

impl Versions for MapVersions {
    fn latest(&self, key: &[u8]) -> CommitTs {
        self.keys.get(key).and_then(|v| v.last()).map_or(CommitTs::INITIAL, |v| v.0)
    }

    fn read_at(&self, key: &[u8], at: Timestamp) -> (CommitTs, Option<Value>) {
        let visible = self.keys.get(key).and_then(|v| v.iter().rev().find(|(c, _)| c.ts <= at));
        visible.cloned().unwrap_or((CommitTs::INITIAL, None))
    }

    fn install(&mut self, version: CommitTs, writes: &[(Key, Option<Value>)]) {
        for (key, value) in writes {
            let k = self.keys.entry(key.clone()).or_default();
            debug_assert!(k.last().is_none_or(|v| v.0 < version), "versions go up");
            k.push((version, value.clone()));
        }
    }

    fn collect(&mut self, watermark: Timestamp) -> usize {
        let mut dropped = 0;
        for k in self.keys.values_mut() {
            let below = k.iter().take_while(|(v, _)| v.ts <= watermark).count();
            if below > 1 {
                k.drain(..below - 1);
                dropped += below - 1;
            }
        }
        dropped
    }

    fn count(&self) -> usize {
        self.keys.values().map(Vec::len).sum()
    }

    fn all(&self) -> BTreeMap<Key, Vec<(CommitTs, Option<Value>)>> {
        self.keys
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn scan_at(
        &self,
        start: &[u8],
        end: &[u8],
        at: Timestamp,
        limit: usize,
    ) -> Vec<(Key, CommitTs, Value)> {
        let rows = self.keys.range(start.to_vec()..).take_while(|(k, _)| in_range(k, start, end));
        let visible = rows.filter_map(|(k, versions)| {
            let (v, value) = versions.iter().rev().find(|(c, _)| c.ts <= at)?;
            Some((k.clone(), *v, value.clone()?))
        });
        if limit == 0 { visible.collect() } else { visible.take(limit).collect() }
    }

    fn changed_after(&self, start: &[u8], end: &[u8], at: Timestamp) -> bool {
        self.keys
            .range(start.to_vec()..)
            .take_while(|(k, _)| in_range(k, start, end))
            .any(|(_, versions)| versions.last().is_some_and(|(c, _)| c.ts > at))
    }
}

/// The bytes after a user key's escaped bytes that end it.
const KEY_END: [u8; 2] = [0x00, 0x01];
/// How many bytes a version adds after the key: its timestamp and client.
const STAMP_BYTES: usize = 12;

/// The engine range holding every version of the keys in `[start, end)`
/// (an empty `end`: no end).
#[cfg_attr(not(feature = "engine"), allow(dead_code))]
pub(crate) fn range_of(start: &[u8], end: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
    (escaped(start), (!end.is_empty()).then(|| escaped(end)))
}

/// A user key escaped so that byte order is kept and no escaped key is a
/// prefix of another: `0x00` becomes `0x00 0xFF`, and `0x00 0x01` ends it.
fn escaped(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 2 + STAMP_BYTES);
    for &b in key {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&KEY_END);
    out
}

/// The engine key of `key`'s version `version`: the escaped key, then the
/// complement of the timestamp and of the client (big-endian), so that a
/// key's versions sort newest first and keys sort as their user keys do.
pub fn versioned_key(key: &[u8], version: CommitTs) -> Vec<u8> {
    let mut out = escaped(key);
    out.extend_from_slice(&(!version.ts).to_be_bytes());
    out.extend_from_slice(&(!version.client).to_be_bytes());
    out
}

/// The longest user key whose versioned key fits in `max` bytes, whatever
/// its bytes (every byte a `0x00`, escaped to two).
pub const fn key_bytes_max(max: usize) -> usize {
    (max - KEY_END.len() - STAMP_BYTES) / 2
}

/// The longest key of `table` a cluster holds: its versioned row key
/// (`_milana.rows`: table, `0x00`, the key escaped, a version stamp) must
/// fit the engine's key limit (1024 bytes), so it is 505 bytes less the
/// table name's length and 1, whatever the key's bytes.
pub fn table_key_bytes_max(table: &str) -> usize {
    key_bytes_max(ENGINE_KEY_BYTES_MAX).saturating_sub(table.len() + 1)
}

/// The engine's key limit (`milliscale::limits::KEY_BYTES_MAX`).
const ENGINE_KEY_BYTES_MAX: usize = 1024;

#[cfg(feature = "engine")]
const _: () = assert!(ENGINE_KEY_BYTES_MAX == milliscale::limits::KEY_BYTES_MAX);

/// Whether a cluster takes `value` under `key` of `table` (the sizes).
pub fn write_ok(table: &str, key: &[u8], value: Option<&[u8]>) -> Result<(), String> {
    let max = table_key_bytes_max(table);
    if key.len() > max {
        return Err(format!(
            "a key of {} bytes is over a cluster's limit of {max} bytes for table {table:?}",
            key.len()
        ));
    }
    if let Some(v) = value.filter(|v| v.len() > crate::types::VALUE_BYTES_MAX) {
        return Err(format!(
            "value of {} bytes exceeds the {}-byte limit",
            v.len(),
            crate::types::VALUE_BYTES_MAX
        ));
    }
    Ok(())
}

/// The user key and version of an engine key made by [`versioned_key`];
/// `None` for bytes it cannot have made.
pub fn split_versioned_key(bytes: &[u8]) -> Option<(Key, CommitTs)> {
    let (body, stamp) = bytes.split_at_checked(bytes.len().checked_sub(STAMP_BYTES)?)?;
    let body = body.strip_suffix(&KEY_END)?;
    let mut key = Vec::with_capacity(body.len());
    let mut bytes = body.iter();
    while let Some(&b) = bytes.next() {
        key.push(b);
        if b == 0 && bytes.next() != Some(&0xFF) {
            return None;
        }
    }
    let ts = !u64::from_be_bytes(stamp[..8].try_into().ok()?);
    let client: ClientId = !u32::from_be_bytes(stamp[8..].try_into().ok()?);
    Some((key, CommitTs { ts, client }))
}

/// The engine row value of a version: a tag byte (`1` a value, `0` a
/// deletion) and the value.
pub fn row_value(value: Option<&[u8]>) -> Vec<u8> {
    match value {
        None => vec![0],
        Some(v) => {
            let mut out = Vec::with_capacity(1 + v.len());
            out.push(1);
            out.extend_from_slice(v);
            out
        }
    }
}

/// The engine range of `key`'s versions at or below `at`: from the version
/// `⟨at, u32::MAX⟩` (the newest possible at `at`) to the key's end.
#[cfg_attr(not(feature = "engine"), allow(dead_code))]
pub(crate) fn range_at(key: &[u8], at: Timestamp) -> (Vec<u8>, Vec<u8>) {
    let lower = versioned_key(key, CommitTs { ts: at, client: ClientId::MAX });
    let mut upper = escaped(key);
    let last = upper.len() - 1;
    upper[last] += 1; // 0x00 0x01 → 0x00 0x02: past every version of `key`
    (lower, upper)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> impl Strategy<Value = Key> {
        // Small alphabets with 0x00, 0x01 and 0xFF, so that escapes,
        // prefixes and the end marker's bytes all meet.
        prop::collection::vec(prop::sample::select(vec![0x00u8, 0x01, 0x02, 0xFE, 0xFF]), 0..4)
    }

    fn version() -> impl Strategy<Value = CommitTs> {
        (prop::sample::select(vec![0, 1, 2, u64::MAX - 1, u64::MAX]), any::<u32>())
            .prop_map(|(ts, client)| CommitTs { ts, client })
    }

    proptest! {
        /// Engine keys sort as (user key, newest version first), and
        /// split back into what made them.
        #[test]
        fn versioned_keys_sort_by_key_then_newest_first(
            a in (key(), version()), b in (key(), version()),
        ) {
            let (ea, eb) = (versioned_key(&a.0, a.1), versioned_key(&b.0, b.1));
            let order = a.0.cmp(&b.0).then(b.1.cmp(&a.1));
            prop_assert_eq!(ea.cmp(&eb), order);
            prop_assert_eq!(split_versioned_key(&ea), Some(a.clone()));
            let (lower, upper) = range_at(&a.0, a.1.ts);
            prop_assert!(lower <= ea && ea < upper, "a version at `at` is in its key's range");
        }
    }

    #[test]
    fn bytes_it_did_not_make_are_refused() {
        assert_eq!(split_versioned_key(b""), None);
        assert_eq!(split_versioned_key(&[0; 11]), None);
        // The end marker missing, and a 0x00 not escaped.
        assert_eq!(split_versioned_key(&[7; 14]), None);
        let mut bad = vec![b'a', 0x00, b'b', 0x00, 0x01];
        bad.extend_from_slice(&[0; STAMP_BYTES]);
        assert_eq!(split_versioned_key(&bad), None);
        assert_eq!(key_bytes_max(1024), 505);
        let longest = vec![0u8; key_bytes_max(1024)];
        assert!(versioned_key(&longest, CommitTs::INITIAL).len() <= 1024);
    }
}
