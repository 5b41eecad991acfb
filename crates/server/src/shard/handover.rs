//! A range's rows on the move (design record 0009): exported by the old
//! owner once the range is frozen there (so they no longer change, and
//! the freeze waited until they were durable), imported by the new owner
//! before the map gives it the range, with the latest read the old owner
//! served there as the range's read floor, and deleted at the old owner once the
//! map has given the range away.
//!
//! The new owner's floor is written with the last rows, in the same
//! engine transaction, and kept in `_milana.meta` (`adopted/START`): a
//! restart raises the range's read mark to it again. So whenever the map
//! gives the range to the new owner, no write commits there at or below
//! a read the old owner served (MILANA §4.5's pitfall, met again).

use std::ops::{Bound, RangeBounds};
use std::time::Instant;

use milliscale::Direction;
use milliscale_milana::types::{Key, cluster_key, split_cluster_key};
use milliscale_milana::versions::in_range;
use milliscale_proto::v1 as proto;
use tonic::Status;

use super::Shard;
use super::tables::{Tables, delete_rows, meta_range};
use crate::errors::{engine, refuse};

/// The prefix of an adopted range's row in `_milana.meta`.
const ADOPTED_PREFIX: &[u8] = b"adopted/";

/// The most rows one export answers.
const EXPORT_ROWS_MAX: usize = 10_000;

/// The ranges adopted here, with their read floors: `(start, end, floor)`.
pub(super) fn load_adopted(tables: &Tables) -> milliscale::Result<Vec<(Key, Key, u64)>> {
    tables.meta_ranges(ADOPTED_PREFIX, "an adopted range")
}

impl Shard {
    /// `ShardExport`: up to `limit` rows of a range frozen here, after
    /// `after`, in key order.
    pub async fn export(
        &self,
        r: proto::ShardExportRequest,
    ) -> Result<proto::ShardExportResponse, Status> {
        let (start, end, after) = (r.start.to_vec(), r.end.to_vec(), r.after.to_vec());
        let limit = match r.limit as usize {
            0 => 1_000,
            n => n.min(EXPORT_ROWS_MAX),
        };
        let now = Instant::now();
        let mut served = false;
        let ranges = {
            let mut st = self.lock();
            match st.frozen.iter_mut().find(|f| f.start == start && f.end == end) {
                // Frozen: its rows no longer change, and are durable.
                Some(f) => f.heard = now,
                // Served: a copy before the freeze, the keys written from
                // its first page on recorded under this lock (so a commit
                // is in the pages' snapshots or recorded, or both).
                None => {
                    self.own_range(&start, &end)?;
                    st.refuse_frozen([], [(&start[..], &end[..])])?;
                    let tracked = st.p.versions_mut().tracked();
                    if after.is_empty() && r.keys.is_empty() {
                        tracked.start(&start, &end);
                    } else if !tracked.is_recording(&start, &end) {
                        return Err(Status::failed_precondition(
                            "the copy of this range is no longer recorded here (the shard \
                             restarted, or the copy was silent past the move timeout): begin \
                             it again",
                        ));
                    }
                    st.copies.insert((start.clone(), end.clone()), now);
                    served = true;
                }
            }
            st.p.versions_mut().table_ranges(&start, &end)
        };
        let tables = self.table_names();
        let mut tx = self.tables.db.begin().map_err(|e| engine(&e))?;
        let page = if r.keys.is_empty() {
            self.export_page(&mut tx, after, limit, ranges, tables)
        } else {
            self.export_keys(&mut tx, r.keys, ranges, tables)
        }?;
        if served {
            // A lone commit is visible before it is durable: answer the
            // page only once what it read is, so that the new owner never
            // holds a version a crash here takes back (a cluster's past
            // reads every version a shard's log holds).
            let csn = self.lock().last_csn;
            self.barrier(csn).await?;
        }
        Ok(page)
    }

    /// Up to `limit` rows of `ranges` after the cluster key `after`.
    fn export_page(
        &self,
        tx: &mut milliscale::AsyncTransaction,
        after: Vec<u8>,
        limit: usize,
        ranges: Vec<(milliscale::Table, Bound<Key>, Bound<Key>)>,
        tables: Vec<String>,
    ) -> Result<proto::ShardExportResponse, Status> {
        let after = split_cluster_key(&after);
        let mut rows = Vec::new();
        for (table, lo, hi) in ranges {
            let lo = match after {
                Some((t, _)) if t > table.name() => continue,
                Some((t, k)) if t == table.name() => match &lo {
                    Bound::Included(l) | Bound::Excluded(l) if l.as_slice() > k => lo,
                    _ => Bound::Excluded(k.to_vec()),
                },
                _ => lo,
            };
            let lo = lo.as_ref().map(Vec::as_slice);
            let hi = hi.as_ref().map(Vec::as_slice);
            for row in tx.range(&table, lo, hi, Direction::Forward) {
                let (k, v) = row.map_err(|e| engine(&e))?;
                if rows.len() == limit {
                    let absent = Vec::new();
                    return Ok(proto::ShardExportResponse { rows, more: true, tables, absent });
                }
                let key = cluster_key(table.name(), &k);
                rows.push(proto::ShardRow { key: key.into(), row: v.into() });
            }
        }
        Ok(proto::ShardExportResponse { rows, more: false, tables, absent: Vec::new() })
    }

    /// The rows of `keys` (each in one of `ranges`, the range's parts by
    /// table), and those of them that have none.
    fn export_keys(
        &self,
        tx: &mut milliscale::AsyncTransaction,
        keys: Vec<bytes::Bytes>,
        ranges: Vec<(milliscale::Table, Bound<Key>, Bound<Key>)>,
        tables: Vec<String>,
    ) -> Result<proto::ShardExportResponse, Status> {
        if keys.len() > EXPORT_ROWS_MAX {
            return Err(refuse::invalid(format!("at most {EXPORT_ROWS_MAX} keys an export")));
        }
        let (mut rows, mut absent) = (Vec::new(), Vec::new());
        for key in keys {
            let Some((name, k)) = split_cluster_key(&key) else {
                return Err(refuse::invalid("an exported key is no table's"));
            };
            let table = ranges.iter().find(|(t, lo, hi)| {
                let bounds = (lo.as_ref().map(Vec::as_slice), hi.as_ref().map(Vec::as_slice));
                t.name() == name && RangeBounds::<[u8]>::contains(&bounds, k)
            });
            let row = match table {
                Some((t, _, _)) => tx.get(t, k).map_err(|e| engine(&e))?,
                None if ranges.iter().any(|(t, _, _)| t.name() == name) => {
                    return Err(refuse::invalid("an exported key outside the range"));
                }
                // Its table is gone: so is its row.
                None => None,
            };
            match row {
                Some(v) => rows.push(proto::ShardRow { key, row: v.into() }),
                None => absent.push(key),
            }
        }
        Ok(proto::ShardExportResponse { rows, more: false, tables, absent })
    }

    /// `ShardImport`: rows of a range moving here, written in one engine
    /// transaction and durable when it answers. Refused for a range this
    /// shard's map gives it already (it would overwrite what it serves).
    pub async fn import(
        &self,
        r: proto::ShardImportRequest,
    ) -> Result<proto::ShardImportResponse, Status> {
        if self.opts.read_only {
            return Err(super::read_only_refusal());
        }
        let (start, end) = (r.start.to_vec(), r.end.to_vec());
        let keys = r.rows.iter().map(|row| &row.key).chain(&r.deleted);
        if keys.into_iter().any(|k| !in_range(k, &start, &end)) {
            return Err(refuse::invalid("an imported row outside its range"));
        }
        if self.own_range(&start, &end).is_ok() {
            return Err(refuse::invalid("the map gives this shard the range already"));
        }
        // The tables first: a client that created one with a map that did
        // not name this shard yet created it elsewhere only.
        for name in &r.tables {
            match self.create_table(name).await {
                Ok(()) => tracing::info!(table = %name, "created for a range moving here"),
                Err(e) if e.code() == tonic::Code::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        let ack = {
            let mut st = self.lock();
            // A range that moved away from here and was not released yet
            // (its mover stopped after publishing) must be released first:
            // its freeze would refuse the range once it is back, and its
            // release would delete the rows imported now.
            let stale = st
                .frozen
                .iter()
                .find(|f| (f.end.is_empty() || start < f.end) && (end.is_empty() || f.start < end));
            if let Some(f) = stale {
                return Err(Status::failed_precondition(format!(
                    "a range frozen here for its move to shard {} (map version {}) overlaps this one: \
                     release it first (`milliscale cluster release`)",
                    f.to, f.map_version
                )));
            }
            let mut tx = self.tables.db.begin().map_err(|e| engine(&e))?;
            // The first page marks the range incoming, for the move's map
            // version: dropped here if that version does not give it here.
            let incoming = match r.first && r.map_version > 0 {
                true => {
                    let i = super::incoming::Incoming {
                        start: start.clone(),
                        end: end.clone(),
                        map_version: r.map_version,
                    };
                    let list = super::incoming::replace(&mut tx, &self.tables, &st.incoming, i);
                    Some(list.map_err(|e| engine(&e))?)
                }
                false => None,
            };
            let versions = st.p.versions_mut();
            let mut cleared = 0i64;
            if r.first {
                cleared += delete_rows(&mut tx, versions, &start, &end)? as i64;
                cleared += versions.forget_range(&start, &end) as i64;
            }
            // Rows of a page, or changed since the copy began (then
            // perhaps copied already: counted once).
            let mut added = 0i64;
            for row in &r.rows {
                let Some((name, k)) = split_cluster_key(&row.key) else {
                    return Err(refuse::invalid("an imported row's key is no table's"));
                };
                let table = versions.table_for(name);
                if r.first || tx.get(&table, k).map_err(|e| engine(&e))?.is_none() {
                    added += 1;
                }
                tx.put(&table, k, &row.row).map_err(|e| engine(&e))?;
            }
            for key in &r.deleted {
                let Some((name, k)) = split_cluster_key(key) else {
                    return Err(refuse::invalid("an imported deletion's key is no table's"));
                };
                let table = versions.table_for(name);
                if tx.delete(&table, k).map_err(|e| engine(&e))? {
                    cleared += 1;
                }
            }
            if r.floor > 0 {
                let key = [ADOPTED_PREFIX, &start].concat();
                let value = meta_range(r.floor, &end);
                tx.put(&self.tables.meta, &key, &value).map_err(|e| engine(&e))?;
                st.p.raise_read_floor(&start, &end, r.floor);
            }
            st.versions += added - cleared;
            let ack = tx.precommit().map_err(|e| engine(&e))?;
            if let Some(list) = incoming {
                st.incoming = list;
            }
            ack
        };
        ack.await.map_err(|e| engine(&e))?;
        Ok(proto::ShardImportResponse {})
    }

    /// `ShardRelease`: once the map (read again now) gives a range frozen
    /// here to another shard, delete its rows and lift the freeze, in one
    /// engine transaction.
    pub async fn release(
        &self,
        r: proto::ShardReleaseRequest,
    ) -> Result<proto::ShardReleaseResponse, Status> {
        let (start, end) = (r.start.to_vec(), r.end.to_vec());
        self.refresh_map().await;
        let deleted = self
            .let_go(&start, &end, |f| {
                let map = self.map.read();
                if map.version < f.map_version || map.shard_of(&start) != f.to {
                    return Err(Status::failed_precondition(format!(
                        "the map (version {}) does not give the range to shard {} yet",
                        map.version, f.to
                    )));
                }
                Ok(())
            })
            .await?;
        Ok(proto::ShardReleaseResponse { deleted })
    }

    /// Delete the rows of the range `[start, end)` frozen here and its
    /// freeze, in one engine transaction, if `moved` (asked under the
    /// lock) says its move is published; how many rows. The caller has
    /// read the map that gives the range away, so the shard refuses the
    /// range by its map once the freeze no longer does.
    pub(super) async fn let_go(
        &self,
        start: &[u8],
        end: &[u8],
        moved: impl FnOnce(&super::moves::Frozen) -> Result<(), Status>,
    ) -> Result<u64, Status> {
        let (ack, deleted) = {
            let mut st = self.lock();
            let Some(i) = st.frozen.iter().position(|f| f.start == start && f.end == end) else {
                return Err(Status::not_found("no such range is frozen here"));
            };
            moved(&st.frozen[i])?;
            let mut tx = self.tables.db.begin().map_err(|e| engine(&e))?;
            let versions = st.p.versions_mut();
            let deleted = delete_rows(&mut tx, versions, start, end)?;
            let replaced = versions.forget_range(start, end) as i64;
            tx.delete(&self.tables.meta, &super::moves::row_key(start)).map_err(|e| engine(&e))?;
            let ack = tx.precommit().map_err(|e| engine(&e))?;
            st.frozen.remove(i);
            st.versions -= deleted as i64 + replaced;
            (ack, deleted)
        };
        ack.await.map_err(|e| engine(&e))?;
        Ok(deleted)
    }
}
