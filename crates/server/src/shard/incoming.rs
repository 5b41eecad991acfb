//! Rows copied here for a move not known to have happened yet (design
//! record 0009): the first page of a move's copy writes an *incoming*
//! row to `_milana.meta` (`incoming/START`: the range's end and the map
//! version the move publishes), in the same engine transaction as the
//! rows. Once the map reaches that version, the shard keeps the rows if
//! that version gives it the range (and deletes the row), and otherwise
//! deletes the rows with it, in one engine transaction: a move given up
//! leaves nothing behind. A later move's first page here replaces an
//! overlapping incoming row (and clears the range).

use std::sync::Arc;

use milliscale_milana::tables::overlap;
use milliscale_milana::types::Key;
use tonic::Status;

use super::Shard;
use super::tables::Tables;
use crate::errors::engine;

/// The prefix of an incoming range's row in `_milana.meta`.
const INCOMING_PREFIX: &[u8] = b"incoming/";

/// Rows of `[start, end)` copied here for the move that publishes map
/// version `map_version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Incoming {
    pub(super) start: Key,
    pub(super) end: Key,
    pub(super) map_version: u64,
}

fn row_key(start: &[u8]) -> Vec<u8> {
    [INCOMING_PREFIX, start].concat()
}

/// The incoming ranges, from `_milana.meta` (at a restart).
pub(super) fn load(tables: &Tables) -> milliscale::Result<Vec<Incoming>> {
    let rows = tables.meta_ranges(INCOMING_PREFIX, "an incoming range")?;
    Ok(rows
        .into_iter()
        .map(|(start, end, map_version)| Incoming { start, end, map_version })
        .collect())
}

/// In `tx`: `i` replaces the incoming rows of `list` it overlaps. The
/// list once `tx` commits.
pub(super) fn replace(
    tx: &mut milliscale::AsyncTransaction,
    tables: &Tables,
    list: &[Incoming],
    i: Incoming,
) -> milliscale::Result<Vec<Incoming>> {
    let (gone, mut kept): (Vec<_>, Vec<_>) =
        list.iter().cloned().partition(|o| overlap(&o.start, &o.end, &i.start, &i.end));
    for old in gone {
        tx.delete(&tables.meta, &row_key(&old.start))?;
    }
    let value = super::tables::meta_range(i.map_version, &i.end);
    tx.put(&tables.meta, &row_key(&i.start), &value)?;
    kept.push(i);
    Ok(kept)
}

impl Shard {
    /// Keep or drop each incoming range whose move is decided (run in
    /// the background while one is here).
    pub(super) async fn settle_incoming(self: &Arc<Self>) {
        let list = self.lock().incoming.clone();
        if list.iter().any(|i| self.map.read().version < i.map_version) {
            self.refresh_map().await;
        }
        for i in list {
            if self.map.read().version < i.map_version {
                continue;
            }
            let (maps, v) = (Arc::clone(&self.maps), i.map_version);
            let at = match tokio::task::spawn_blocking(move || maps.get(v)).await {
                Ok(Ok(Some(m))) => m,
                Ok(Ok(None)) => continue,
                Ok(Err(e)) => return tracing::warn!(error = %e, "settling an incoming range"),
                Err(e) => return tracing::warn!(error = %e, "settling an incoming range"),
            };
            let kept = at.sole_owner(&i.start, &i.end) == Some(self.opts.shard);
            match self.let_in(&i, kept).await {
                Ok(0) if kept => {}
                Ok(rows) => tracing::warn!(
                    map_version = i.map_version,
                    rows,
                    kept,
                    "a move here did not happen: the rows copied for it are deleted"
                ),
                Err(e) => tracing::warn!(error = %e, "settling an incoming range"),
            }
        }
    }

    /// End the incoming range `i` here, in one engine transaction: its
    /// row deleted, and with `!kept` its rows too (how many).
    async fn let_in(&self, i: &Incoming, kept: bool) -> Result<u64, Status> {
        let (ack, deleted) = {
            let mut st = self.lock();
            let Some(at) = st.incoming.iter().position(|o| o == i) else { return Ok(0) };
            let mut tx = self.tables.db.begin().map_err(|e| engine(&e))?;
            let mut deleted = 0;
            if !kept {
                let versions = st.p.versions_mut();
                deleted = super::tables::delete_rows(&mut tx, versions, &i.start, &i.end)?;
                versions.forget_range(&i.start, &i.end);
            }
            tx.delete(&self.tables.meta, &row_key(&i.start)).map_err(|e| engine(&e))?;
            let ack = tx.precommit().map_err(|e| engine(&e))?;
            st.incoming.remove(at);
            st.versions -= deleted as i64;
            (ack, deleted)
        };
        ack.await.map_err(|e| engine(&e))?;
        Ok(deleted)
    }
}
