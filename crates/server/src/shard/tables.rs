//! A shard's tables in the engine (design record 0008): what
//! `milana::tables` describes, as engine rows.
//!
//! - one engine table per cluster table, of the same name: the newest
//!   committed version of each of its keys, under the key, its version
//!   stamped before its value (`milana::versions`; the versions it
//!   replaced are in memory, `milana::engine_versions`);
//! - `_milana.txns`: the transaction table, keyed by transaction
//!   (`milana::tables::txn_key`), a prepare row then its outcome. A
//!   prepare row longer than [`CHUNK_BYTES`] (a transaction writing much
//!   on this shard) is cut into pieces: the first under the transaction's
//!   key, the others under the key and a 4-byte piece number, so that no
//!   engine value passes the engine's limit; the decision deletes them;
//! - `_milana.meta`: the read lease and the forget bound;
//! - `_milana.tables`: the cluster's table names this shard knows.
//!
//! Each log record of the protocol is one engine transaction
//! ([`Tables::write`]), pre-committed under the shard's lock so that the
//! engine's order is the protocol's, and waited for outside it. What each
//! record writes follows `ShardTables::apply`, the simulation's model;
//! [`Tables::load`] reads back what `Participant::restart` needs.

use std::collections::BTreeMap;
use std::ops::Bound;

use milliscale::{AsyncDatabase, CommitAck, Direction, Table};
use milliscale_milana::codec::{decode_row, encode_row};
use milliscale_milana::engine_versions::{EngineVersions, VersionRows};
use milliscale_milana::log::Record;
use milliscale_milana::participant::Participant;
use milliscale_milana::tables::{ShardTables, TxnRow, txn_key};
use milliscale_milana::types::{Key, TxnId};
use tonic::Status;

use crate::errors::engine;

/// Where layout 2 kept every cluster table's rows (layout 3 keeps each
/// table's in an engine table of its name).
pub const ROWS: &str = "_milana.rows";
/// The transaction table.
pub const TXNS: &str = "_milana.txns";
/// The read lease and the forget bound.
pub const META: &str = "_milana.meta";
/// The cluster tables' names.
pub const NAMES: &str = "_milana.tables";

/// The longest piece of a transaction table row, below the engine's
/// value limit (`milliscale::limits::VALUE_BYTES_MAX`, 256 KiB).
pub const CHUNK_BYTES: usize = 192 << 10;

pub(crate) const LEASE_KEY: &[u8] = b"lease";
/// The layout of the rows this shard wrote: [`LAYOUT`].
pub(crate) const LAYOUT_KEY: &[u8] = b"layout";
/// The rows' layout: 3, each cluster table's rows in an engine table of
/// its name, each key's newest version under the key (record 0008).
/// Layout 1 (before it had a number) kept one row per version under a
/// versioned key in `_milana.rows`, layout 2 each key's newest version
/// there; a shard refuses to open either.
pub(crate) const LAYOUT: u64 = 3;
pub(crate) const FORGOTTEN_KEY: &[u8] = b"forgotten";

/// The engine tables of one shard.
pub struct Tables {
    pub(crate) db: AsyncDatabase,
    pub(crate) txns: Table,
    pub(crate) meta: Table,
    pub(crate) names: Table,
    /// The version rows' values, read without the shard's lock.
    pub(crate) rows: VersionRows,
}

pub(crate) async fn open_or_create(db: &AsyncDatabase, name: &str) -> milliscale::Result<Table> {
    match db.open_table(name) {
        Err(milliscale::Error::TableNotFound(_)) => db.create_table(name).await,
        t => t,
    }
}

fn u64_of(row: Option<Vec<u8>>, what: &str) -> milliscale::Result<u64> {
    match row {
        None => Ok(0),
        Some(b) => b.try_into().map(u64::from_be_bytes).map_err(|b: Vec<u8>| {
            milliscale::Error::Corrupt(format!("{META} {what}: {} bytes, not 8", b.len()))
        }),
    }
}

/// The transaction table's rows, from its engine rows in key order: a
/// transaction's key, then its row's other pieces (its key and a piece
/// number), if it has any.
pub fn txn_rows(
    rows: impl IntoIterator<Item = milliscale::Result<(Vec<u8>, Vec<u8>)>>,
) -> milliscale::Result<BTreeMap<TxnId, TxnRow>> {
    let mut pieces: Vec<(TxnId, Vec<u8>)> = Vec::new();
    for row in rows {
        let (k, v) = row?;
        let txn = txn_of(&k[..k.len().min(12)])?;
        match (k.len(), pieces.last_mut()) {
            (12, _) => pieces.push((txn, v)),
            (16, Some((last, row))) if *last == txn => row.extend_from_slice(&v),
            _ => {
                return Err(milliscale::Error::Corrupt(format!(
                    "{TXNS}: a piece of {txn:?}'s row without its first"
                )));
            }
        }
    }
    let mut txns = BTreeMap::new();
    for (txn, v) in pieces {
        let row = decode_row(&v)
            .map_err(|e| milliscale::Error::Corrupt(format!("{TXNS} row {txn:?}: {e}")))?;
        txns.insert(txn, row);
    }
    Ok(txns)
}

impl Tables {
    /// Open (creating what is missing) and read back the shard's tables.
    pub async fn load(
        db: AsyncDatabase,
    ) -> milliscale::Result<(Tables, ShardTables<EngineVersions>)> {
        // Created with a durable wait each, before anything is written.
        let mut versions = EngineVersions::staged(db.clone());
        let tables = Tables {
            txns: open_or_create(&db, TXNS).await?,
            meta: open_or_create(&db, META).await?,
            names: open_or_create(&db, NAMES).await?,
            rows: versions.rows(),
            db,
        };
        let mut tx = tables.db.begin()?;
        let rows = tx.range(&tables.txns, Bound::Unbounded, Bound::Unbounded, Direction::Forward);
        let txns = txn_rows(rows)?;
        let lease = u64_of(tx.get(&tables.meta, LEASE_KEY)?, "lease")?;
        let forgotten = u64_of(tx.get(&tables.meta, FORGOTTEN_KEY)?, "forgotten")?;
        let layout = u64_of(tx.get(&tables.meta, LAYOUT_KEY)?, "layout")?;
        let old_rows = match tables.db.open_table(ROWS) {
            Ok(t) => {
                !tx.scan(&t, Bound::Unbounded, Bound::Unbounded, Direction::Forward, 1)?.is_empty()
            }
            Err(_) => false,
        };
        tx.abort();
        match layout {
            LAYOUT => {}
            0 if !old_rows => {
                let mut tx = tables.db.begin()?;
                tx.put(&tables.meta, LAYOUT_KEY, &LAYOUT.to_be_bytes())?;
                tx.precommit()?.await?;
            }
            found => {
                return Err(milliscale::Error::Corrupt(format!(
                    "this shard's rows are in layout {} and this version reads layout {LAYOUT} \
                     only (an engine table per cluster table, a row per key: CHANGELOG.md): \
                     serve it with the version that wrote it, or load its tables into a new \
                     cluster",
                    found.max(1)
                )));
            }
        }
        // Each cluster table's engine table (one may be missing after a
        // restart in the middle of its drop: the drop is asked again).
        for name in tables.names()? {
            versions.register(open_or_create(&tables.db, &name).await?);
        }
        // A move's records are rows of the meta table here, read by the
        // shard itself (`moves.rs`, `handover.rs`).
        let (frozen, incoming, adopted) = (Vec::new(), Vec::new(), Vec::new());
        let shard = ShardTables { versions, txns, lease, forgotten, frozen, incoming, adopted };
        Ok((tables, shard))
    }

    /// Write `records` (the participant has just made them) as one engine
    /// transaction, pre-committed: the caller holds the shard's lock, and
    /// awaits the returned ack outside it before it answers. A commit's
    /// version rows are the ones the participant staged. Returns the ack
    /// and how many version rows it wrote.
    pub fn write(
        &self,
        p: &mut Participant<EngineVersions>,
        records: &[Record],
    ) -> milliscale::Result<(CommitAck, usize)> {
        let mut tx = self.db.begin()?;
        for (i, r) in records.iter().enumerate() {
            // A prepare committed in the same engine transaction (a
            // single-shard commit) leaves only its outcome: its row would
            // be overwritten here, and no piece of it exists yet.
            let committed_here = |t: TxnId| {
                records[..i].iter().any(|r| matches!(r, Record::Prepare(p) if p.txn == t))
            };
            match r {
                Record::Prepare(prep)
                    if records[i + 1..]
                        .iter()
                        .any(|r| matches!(r, Record::Commit(t) if *t == prep.txn)) => {}
                Record::Prepare(prep) => {
                    let row = encode_row(&TxnRow::Prepared(prep.clone()));
                    for (i, piece) in row.chunks(CHUNK_BYTES).enumerate() {
                        tx.put(&self.txns, &piece_key(prep.txn, i as u32), piece)?;
                    }
                }
                Record::Commit(t) => {
                    let ts = p.decided_ts(*t).unwrap_or(0);
                    tx.put(&self.txns, &txn_key(*t), &encode_row(&TxnRow::Committed(ts)))?;
                    if !committed_here(*t) {
                        self.delete_pieces(&mut tx, *t)?;
                    }
                }
                Record::Abort(t, ts) => {
                    tx.put(&self.txns, &txn_key(*t), &encode_row(&TxnRow::Aborted(*ts)))?;
                    self.delete_pieces(&mut tx, *t)?;
                }
                Record::ReadLease(until) => {
                    tx.put(&self.meta, LEASE_KEY, &until.to_be_bytes())?;
                }
                Record::Freeze { .. } | Record::Adopt { .. } | Record::Release { .. } => {
                    return Err(milliscale::Error::InvalidArgument(
                        "a move's records are the shard's handover rows here, not log records"
                            .into(),
                    ));
                }
                Record::Forget { below, txns } => {
                    for t in txns {
                        tx.delete(&self.txns, &txn_key(*t))?;
                    }
                    tx.put(&self.meta, FORGOTTEN_KEY, &below.to_be_bytes())?;
                }
            }
        }
        let rows = p.versions_mut().take_staged();
        let n = rows.len();
        for w in &rows {
            w.apply(&mut tx)?;
        }
        Ok((tx.precommit()?, n))
    }

    /// Delete the pieces of `txn`'s prepare row after its first (a
    /// decision replaces the first).
    fn delete_pieces(
        &self,
        tx: &mut milliscale::AsyncTransaction,
        txn: TxnId,
    ) -> milliscale::Result<()> {
        let (from, to) = (piece_key(txn, 1), piece_key(txn, u32::MAX));
        let keys = tx
            .range(
                &self.txns,
                Bound::Included(&from[..]),
                Bound::Included(&to[..]),
                Direction::Forward,
            )
            .map(|r| r.map(|(k, _)| k))
            .collect::<milliscale::Result<Vec<_>>>()?;
        for k in keys {
            tx.delete(&self.txns, &k)?;
        }
        Ok(())
    }

    /// The cluster table names this shard knows.
    pub fn names(&self) -> milliscale::Result<Vec<String>> {
        let mut tx = self.db.begin()?;
        let names = tx
            .range(&self.names, Bound::Unbounded, Bound::Unbounded, Direction::Forward)
            .map(|r| r.map(|(k, _)| String::from_utf8_lossy(&k).into_owned()))
            .collect();
        tx.abort();
        names
    }
}

impl Tables {
    /// The rows of the meta table under `prefix`: each key past the
    /// prefix, and its value.
    pub(super) fn meta_rows(&self, prefix: &[u8]) -> milliscale::Result<Vec<(Key, Vec<u8>)>> {
        let mut tx = self.db.begin()?;
        let mut out = Vec::new();
        for row in
            tx.range(&self.meta, Bound::Included(prefix), Bound::Unbounded, Direction::Forward)
        {
            let (k, v) = row?;
            let Some(rest) = k.strip_prefix(prefix) else { break };
            out.push((rest.to_vec(), v));
        }
        Ok(out)
    }

    /// The meta rows under `prefix` that each name a range and a number
    /// ([`meta_range`]): `(start, end, number)`; `what` names them in an
    /// error.
    pub(super) fn meta_ranges(
        &self,
        prefix: &[u8],
        what: &str,
    ) -> milliscale::Result<Vec<(Key, Key, u64)>> {
        let mut out = Vec::new();
        for (start, v) in self.meta_rows(prefix)? {
            let Some((n, end)) = v.split_first_chunk::<8>() else {
                return Err(milliscale::Error::Corrupt(format!("{what}'s row of {v:?}")));
            };
            out.push((start, end.to_vec(), u64::from_be_bytes(*n)));
        }
        Ok(out)
    }
}

/// The value of a meta row naming a range that ends at `end` and a
/// number (a read floor, a map version): the number, big-endian, then
/// `end`.
pub(super) fn meta_range(n: u64, end: &[u8]) -> Vec<u8> {
    [&n.to_be_bytes()[..], end].concat()
}

impl Tables {
    /// Count the shard's version rows for `ShardInfo`, in the background:
    /// a scan of every row, about 0.14 s of a restart of a shard of 1M
    /// rows when it ran before the shard listened (BENCHMARKS.md, "Does a
    /// shard's state stay bounded"). Called before anything can write:
    /// the count is of a snapshot taken here, and the shard's count keeps
    /// what is written and deleted after it, so the sum is exact once the
    /// scan ends (until then `ShardInfo` shows only the change since).
    pub(crate) fn count_versions(shard: &std::sync::Arc<super::Shard>) {
        let tables = shard.lock().p.versions_mut().tables();
        let mut tx = match shard.tables.db.begin() {
            Ok(tx) => tx,
            Err(e) => return tracing::warn!("cannot count the shard's version rows: {e}"),
        };
        let shard = std::sync::Arc::downgrade(shard);
        tokio::task::spawn_blocking(move || {
            let n: usize = tables
                .iter()
                .map(|t| {
                    tx.range(t, Bound::Unbounded, Bound::Unbounded, Direction::Forward).count()
                })
                .sum();
            tx.abort();
            if let Some(shard) = shard.upgrade() {
                shard.lock().versions += n as i64;
            }
        });
    }
}

/// The key of piece `i` of `txn`'s row: the transaction's key for the
/// first, then the key and the piece's number.
fn piece_key(txn: TxnId, i: u32) -> Vec<u8> {
    let mut k = txn_key(txn).to_vec();
    if i > 0 {
        k.extend_from_slice(&i.to_be_bytes());
    }
    k
}

fn txn_of(k: &[u8]) -> milliscale::Result<TxnId> {
    let bad = || milliscale::Error::Corrupt(format!("{TXNS}: a key of {} bytes", k.len()));
    let k: [u8; 12] = k.try_into().map_err(|_| bad())?;
    let client = u32::from_be_bytes(k[..4].try_into().map_err(|_| bad())?);
    let seq = u64::from_be_bytes(k[4..].try_into().map_err(|_| bad())?);
    Ok(TxnId { client, seq })
}

/// Delete in `tx` every row in `[start, end)` (cluster keys); how many.
pub(super) fn delete_rows(
    tx: &mut milliscale::AsyncTransaction,
    versions: &EngineVersions,
    start: &[u8],
    end: &[u8],
) -> Result<u64, Status> {
    let mut deleted = 0;
    for (table, lo, hi) in versions.table_ranges(start, end) {
        let (lo, hi) = (lo.as_ref().map(Vec::as_slice), hi.as_ref().map(Vec::as_slice));
        let keys: Vec<Vec<u8>> = tx
            .range(&table, lo, hi, Direction::Forward)
            .map(|row| row.map(|(k, _)| k))
            .collect::<milliscale::Result<_>>()
            .map_err(|e| engine(&e))?;
        for k in &keys {
            tx.delete(&table, k).map_err(|e| engine(&e))?;
        }
        deleted += keys.len() as u64;
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use milliscale::Options;

    async fn memory() -> AsyncDatabase {
        AsyncDatabase::open(Options::new().store("memory://")).await.expect("open")
    }

    /// A fresh shard writes its layout and opens again; one whose rows are
    /// in an earlier layout (rows in `_milana.rows`) is refused, saying
    /// so, and nothing of it is changed.
    #[tokio::test]
    async fn a_shard_in_an_earlier_layout_is_refused() {
        let db = memory().await;
        Tables::load(db.clone()).await.expect("a fresh shard");
        Tables::load(db.clone()).await.expect("the same shard again");

        let db = memory().await;
        let rows = db.create_table(ROWS).await.expect("table");
        db.put(&rows, b"t\x00k", b"old").await.expect("put");
        let err = Tables::load(db.clone()).await.err().expect("refused");
        assert!(err.to_string().contains("layout 1"), "{err}");
        assert_eq!(db.get(&rows, b"t\x00k").expect("read"), Some(b"old".to_vec()));
    }
}
