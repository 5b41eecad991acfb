//! A shard's committed versions (MILANA §4.1: every key's versions,
//! stamped with their [`CommitTs`]), behind the trait the participant's
//! rules ask ([`Versions`]), and the engine's layout of them
//! ([`row_value`], [`split_row`]; design record 0008).
//!
//! The participant decides; a [`Versions`] only stores and answers:
//! - [`MapVersions`] keeps them in a map (the simulation's reference);
//! - [`crate::engine_versions::EngineVersions`] keeps each key's newest
//!   version as an engine row under the key itself, updated in place, so
//!   that a shard's data is the engine's, with its checkpoints, log
//!   truncation and replicas; the older versions that a read at an
//!   earlier timestamp may still ask for are kept in memory until the
//!   watermark passes them.
//!
//! Invariants (both stores):
//! - a key's versions are installed in increasing `CommitTs` order (the
//!   participant's validation guarantees it; a store may rely on it);
//! - `read_at(k, t)` is the newest version of `k` with a timestamp at or
//!   below `t`, or [`CommitTs::INITIAL`] and no value if `k` had none,
//!   or [`Gone`] if that version is no longer held: collected, or older
//!   than the newest at the last restart ([`Versions::drop_history`]);
//! - `collect(w)` keeps, per key, the newest version at or below `w` and
//!   every version above it: a read at `w` or later sees what it saw.

use std::collections::BTreeMap;

use crate::types::{ClientId, CommitTs, Key, Timestamp, Value};

/// A read needs a version that is no longer held (collected, or dropped
/// at a restart with the rest of the history kept in memory). Reading
/// again at `oldest` or later finds what it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Gone {
    /// The timestamp of the oldest version held of the key.
    pub oldest: Timestamp,
}

/// The committed versions of a shard's keys.
pub trait Versions {
    /// The newest committed version of `key` ([`CommitTs::INITIAL`] if
    /// none).
    fn latest(&self, key: &[u8]) -> CommitTs;
    /// The newest version of `key` at or below `at`, and its value
    /// (`None`: deleted, or never written); [`Gone`] if it is no longer
    /// held.
    fn read_at(&self, key: &[u8], at: Timestamp) -> Result<(CommitTs, Option<Value>), Gone>;
    /// The version [`Versions::read_at`] would return, if known without
    /// reading a row (`None`: not known so; read it).
    fn version_at(&self, _key: &[u8], _at: Timestamp) -> Option<CommitTs> {
        None
    }
    /// Install one transaction's writes at `version`, all or none. Each
    /// key's newest version is below `version`.
    fn install(&mut self, version: CommitTs, writes: &[(Key, Option<Value>)]);
    /// Hold `version` as `key`'s newest and only version, unless it holds
    /// a newer one: a row copied from its range's old owner (design
    /// record 0009). A read below it is [`Gone`], as after a restart.
    /// A version is one transaction's write: adopted again (the range
    /// moved away and back), it comes with the same value.
    fn adopt(&mut self, key: &[u8], version: CommitTs, value: Option<Value>);
    /// Drop every version of the keys in `[start, end)` (an empty `end`:
    /// no end): a range moved away, or rows copied for a move that did
    /// not happen. How many versions.
    fn drop_range(&mut self, start: &[u8], end: &[u8]) -> usize;
    /// Keep, per key, the newest version at or below `watermark` and all
    /// above it; how many versions were dropped.
    fn collect(&mut self, watermark: Timestamp) -> usize;
    /// Keep only each key's newest version: what a restart leaves, since
    /// the older ones are held in memory (design record 0008).
    fn drop_history(&mut self);
    /// How many versions are held.
    fn count(&self) -> usize;
    /// Every key's versions held, oldest first (for the simulation's
    /// oracle).
    fn all(&self) -> BTreeMap<Key, Vec<(CommitTs, Option<Value>)>>;
    /// The keys in `[start, end)` (an empty `end`: no end) with a value at
    /// `at`: each key's newest version at or below `at`, deletions left
    /// out; at most `limit` (0: all), in key order. [`Gone`] if a key's
    /// version at `at` is no longer held.
    fn scan_at(
        &self,
        start: &[u8],
        end: &[u8],
        at: Timestamp,
        limit: usize,
    ) -> Result<Vec<(Key, CommitTs, Value)>, Gone>;
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
    keys: BTreeMap<Key, KeyVersions>,
}

/// One key's versions in a [`MapVersions`].
#[derive(Debug, Clone, Default)]
struct KeyVersions {
    /// Oldest first.
    held: Vec<(CommitTs, Option<Value>)>,
    /// Whether something older than `held` was dropped (collected, or at
    /// a restart): a read below `held` is then [`Gone`], not "none".
    dropped: bool,
}

impl KeyVersions {
    fn at(&self, at: Timestamp) -> Result<(CommitTs, Option<Value>), Gone> {
        match self.held.iter().rev().find(|(c, _)| c.ts <= at) {
            Some(v) => Ok(v.clone()),
            None if self.dropped => Err(Gone { oldest: self.held.first().map_or(0, |v| v.0.ts) }),
            None => Ok((CommitTs::INITIAL, None)),
        }
    }
}

impl Versions for MapVersions {
    fn latest(&self, key: &[u8]) -> CommitTs {
        self.keys.get(key).and_then(|v| v.held.last()).map_or(CommitTs::INITIAL, |v| v.0)
    }

    fn read_at(&self, key: &[u8], at: Timestamp) -> Result<(CommitTs, Option<Value>), Gone> {
        self.keys.get(key).map_or(Ok((CommitTs::INITIAL, None)), |k| k.at(at))
    }

    fn install(&mut self, version: CommitTs, writes: &[(Key, Option<Value>)]) {
        for (key, value) in writes {
            let k = &mut self.keys.entry(key.clone()).or_default().held;
            debug_assert!(k.last().is_none_or(|v| v.0 < version), "versions go up");
            k.push((version, value.clone()));
        }
    }

    fn adopt(&mut self, key: &[u8], version: CommitTs, value: Option<Value>) {
        let k = self.keys.entry(key.to_vec()).or_default();
        if k.held.last().is_none_or(|v| v.0 < version) {
            k.held = vec![(version, value)];
            k.dropped = true;
        }
    }

    fn drop_range(&mut self, start: &[u8], end: &[u8]) -> usize {
        let keys: Vec<Key> = self
            .keys
            .range(start.to_vec()..)
            .take_while(|(k, _)| in_range(k, start, end))
            .map(|(k, _)| k.clone())
            .collect();
        keys.iter().filter_map(|k| self.keys.remove(k)).map(|v| v.held.len()).sum()
    }

    fn collect(&mut self, watermark: Timestamp) -> usize {
        let mut dropped = 0;
        for k in self.keys.values_mut() {
            let below = k.held.iter().take_while(|(v, _)| v.ts <= watermark).count();
            // A version at or below the watermark: nothing older is read
            // again, not even the key's absence before its first version.
            k.dropped |= below > 0;
            if below > 1 {
                k.held.drain(..below - 1);
                dropped += below - 1;
            }
        }
        dropped
    }

    fn drop_history(&mut self) {
        for k in self.keys.values_mut() {
            let n = k.held.len();
            k.held.drain(..n.saturating_sub(1));
            k.dropped = true;
        }
    }

    fn count(&self) -> usize {
        self.keys.values().map(|k| k.held.len()).sum()
    }

    fn all(&self) -> BTreeMap<Key, Vec<(CommitTs, Option<Value>)>> {
        self.keys
            .iter()
            .filter(|(_, v)| !v.held.is_empty())
            .map(|(k, v)| (k.clone(), v.held.clone()))
            .collect()
    }

    fn scan_at(
        &self,
        start: &[u8],
        end: &[u8],
        at: Timestamp,
        limit: usize,
    ) -> Result<Vec<(Key, CommitTs, Value)>, Gone> {
        let mut out = Vec::new();
        for (k, versions) in self.keys.range(start.to_vec()..) {
            if !in_range(k, start, end) || (limit > 0 && out.len() >= limit) {
                break;
            }
            if let (v, Some(value)) = versions.at(at)? {
                out.push((k.clone(), v, value));
            }
        }
        Ok(out)
    }

    fn changed_after(&self, start: &[u8], end: &[u8], at: Timestamp) -> bool {
        self.keys
            .range(start.to_vec()..)
            .take_while(|(k, _)| in_range(k, start, end))
            .any(|(_, versions)| versions.held.last().is_some_and(|(c, _)| c.ts > at))
    }
}

/// How many bytes a row holds before its value: the version's timestamp
/// (8, big-endian), its client (4), and a tag (`1` a value, `0` a
/// deletion).
pub const STAMP_BYTES: usize = 13;

/// The engine row of a key's newest version: its stamp, then the value
/// (design record 0008).
pub fn row_value(version: CommitTs, value: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(STAMP_BYTES + value.map_or(0, <[u8]>::len));
    out.extend_from_slice(&version.ts.to_be_bytes());
    out.extend_from_slice(&version.client.to_be_bytes());
    out.push(u8::from(value.is_some()));
    out.extend_from_slice(value.unwrap_or_default());
    out
}

/// The version and value of a row made by [`row_value`] (`None` inside:
/// a deletion); `None` for bytes it cannot have made.
pub fn split_row(row: &[u8]) -> Option<(CommitTs, Option<&[u8]>)> {
    let (stamp, value) = row.split_at_checked(STAMP_BYTES)?;
    let ts = u64::from_be_bytes(stamp[..8].try_into().ok()?);
    let client: ClientId = u32::from_be_bytes(stamp[8..12].try_into().ok()?);
    let value = match stamp[12] {
        1 => Some(value),
        0 if value.is_empty() => None,
        _ => return None,
    };
    Some((CommitTs { ts, client }, value))
}

/// The longest key of `table` a cluster holds: the engine's key limit
/// (1024 bytes), as on one server, since a shard keeps each cluster
/// table's rows in an engine table of its own, under the keys themselves.
pub fn table_key_bytes_max(_table: &str) -> usize {
    ENGINE_KEY_BYTES_MAX
}

/// The engine's key limit (`milliscale::limits::KEY_BYTES_MAX`).
pub const ENGINE_KEY_BYTES_MAX: usize = 1024;

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A row splits back into what made it.
        #[test]
        fn rows_split_back(ts in any::<u64>(), client in any::<u32>(), value in prop::option::of(prop::collection::vec(any::<u8>(), 0..20))) {
            let v = CommitTs { ts, client };
            let row = row_value(v, value.as_deref());
            prop_assert_eq!(split_row(&row), Some((v, value.as_deref())));
        }
    }

    #[test]
    fn bytes_it_did_not_make_are_refused() {
        assert_eq!(split_row(b""), None);
        assert_eq!(split_row(&[0; 12]), None);
        // A tag that is neither, and a deletion with bytes after it.
        assert_eq!(split_row(&[[0; 12].as_slice(), &[2]].concat()), None);
        assert_eq!(split_row(&[[0; 12].as_slice(), &[0, 7]].concat()), None);
        assert_eq!(table_key_bytes_max("t"), 1024);
    }
}
