//! The names the protocol is written in: keys, values, shards, clients,
//! transactions and versions.

/// A key: bytes, ordered as bytes.
pub type Key = Vec<u8>;
/// A key held in one of a shard's per-key maps (read marks, newest
/// versions, replaced versions): up to [`HELD_KEY_INLINE`] bytes (a YCSB
/// key with its table's name) inline, so that a lookup compares the bytes
/// beside its slot instead of following a pointer to them (a cache miss
/// in a map of many keys), and holding a key allocates nothing. Hashes and
/// compares as its bytes, so a map of them is looked up by `&[u8]`.
pub type HeldKey = smallvec::SmallVec<[u8; HELD_KEY_INLINE]>;
/// The longest key a [`HeldKey`] holds inline.
pub const HELD_KEY_INLINE: usize = 24;
/// A value; `None` in a write deletes the key.
pub type Value = Vec<u8>;
/// A shard (its primary is the participant in two-phase commit).
pub type ShardId = u32;
/// A client: the coordinator of its transactions.
pub type ClientId = u32;
/// Microseconds on a clock (a client's hybrid clock, or a shard's).
pub type Timestamp = u64;

/// A version stamp, ⟨timestamp, client id⟩ (MILANA §4.1; the paper calls
/// it a version): the commit timestamp of the transaction that wrote it,
/// made unique and totally ordered by the client id. Named `CommitTs` so
/// that `Version` means one thing: the engine's version of a row in its
/// chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct CommitTs {
    /// The writer's commit timestamp.
    pub ts: Timestamp,
    /// The writer.
    pub client: ClientId,
}

impl CommitTs {
    /// The version every key has before its first write.
    pub const INITIAL: CommitTs = CommitTs { ts: 0, client: 0 };
}

/// A transaction: its client and the client's sequence number for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxnId {
    /// The coordinator.
    pub client: ClientId,
    /// The client's count of its transactions.
    pub seq: u64,
}

/// What a participant knows of a transaction (the states of the
/// cooperative termination protocol, MILANA §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnStatus {
    /// Validated, its prepare record durable; the decision is not known.
    Prepared,
    /// Committed here.
    Committed,
    /// Aborted here (it failed validation, the coordinator said so, or a
    /// termination query found it unknown here and aborted it).
    Aborted,
}

/// The key a cluster's shards, map and protocol use for `key` of `table`:
/// the table's name, a `0x00`, then the key. Table names hold no `0x00`
/// ([`table_name_ok`]), so a table's keys are one contiguous range in
/// key order, sorted as the table sorts them, and a shard map's ranges
/// can split a table or hold many.
pub fn cluster_key(table: &str, key: &[u8]) -> Key {
    let mut out = Vec::with_capacity(table.len() + 1 + key.len());
    out.extend_from_slice(table.as_bytes());
    out.push(0);
    out.extend_from_slice(key);
    out
}

/// A range of `table`'s keys in the cluster's key space, `[lo, hi)`:
/// from `start` (none: the table's first key) to `end` (none: past its
/// last), narrowed to the keys starting with `prefix` if one is given.
pub fn cluster_range(
    table: &str,
    start: Option<&[u8]>,
    end: Option<&[u8]>,
    prefix: Option<&[u8]>,
) -> (Key, Key) {
    // Past every key of the table: its name, then 0x01.
    let table_end = {
        let mut k = table.as_bytes().to_vec();
        k.push(0x01);
        k
    };
    let mut lo = cluster_key(table, start.unwrap_or_default());
    let mut hi = end.map_or_else(|| table_end.clone(), |e| cluster_key(table, e));
    if let Some(p) = prefix {
        lo = lo.max(cluster_key(table, p));
        // The first key past every key starting with `p`.
        let mut next = p.to_vec();
        while next.last() == Some(&0xFF) {
            next.pop();
        }
        let past = match next.last_mut() {
            Some(b) => {
                *b += 1;
                cluster_key(table, &next)
            }
            None => table_end,
        };
        hi = hi.min(past);
    }
    (lo, hi)
}

/// The table and key of a [`cluster_key`]; `None` for bytes it cannot
/// have made.
pub fn split_cluster_key(k: &[u8]) -> Option<(&str, &[u8])> {
    let at = k.iter().position(|b| *b == 0)?;
    Some((std::str::from_utf8(&k[..at]).ok()?, &k[at + 1..]))
}

/// The longest table name, in bytes: the engine's
/// (`milliscale::limits::TABLE_NAME_BYTES_MAX`).
pub const TABLE_NAME_BYTES_MAX: usize = 255;

#[cfg(feature = "engine")]
const _: () = assert!(TABLE_NAME_BYTES_MAX == milliscale::limits::TABLE_NAME_BYTES_MAX);

/// The largest value: the engine's (`milliscale::limits::VALUE_BYTES_MAX`).
pub const VALUE_BYTES_MAX: usize = 256 * 1024;

#[cfg(feature = "engine")]
const _: () = assert!(VALUE_BYTES_MAX == milliscale::limits::VALUE_BYTES_MAX);

/// Whether a cluster may have a table of this name: 1 to 255 bytes,
/// without `0x00` (which ends the name in a [`cluster_key`]) and not
/// starting with `_milana.` (the shards' own tables).
pub fn table_name_ok(name: &str) -> Result<(), String> {
    let max = TABLE_NAME_BYTES_MAX;
    if name.is_empty() || name.len() > max {
        return Err(format!("a table name is 1 to {max} bytes, not {}", name.len()));
    }
    if name.contains('\0') {
        return Err("a cluster's table names hold no NUL byte".into());
    }
    if name.starts_with("_milana.") {
        return Err("table names starting with `_milana.` are the shards' own".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_keys_keep_each_table_contiguous_and_in_order() {
        let a = [cluster_key("t", b""), cluster_key("t", b"\x00"), cluster_key("t", b"z")];
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        // Every key of "t" sorts before every key of "t2" and "u".
        assert!(cluster_key("t", b"\xff\xff") < cluster_key("t2", b""));
        assert!(cluster_key("t2", b"\xff") < cluster_key("u", b""));
        assert_eq!(split_cluster_key(&cluster_key("t", b"a\x00b")), Some(("t", &b"a\x00b"[..])));
        assert_eq!(split_cluster_key(b"no-nul"), None);
        assert!(table_name_ok("a\0b").is_err() && table_name_ok("_milana.txns").is_err());
        assert!(table_name_ok("").is_err() && table_name_ok("accounts").is_ok());
    }
}
