//! Restore (design record 0012): the database at a point of a source's
//! window (`Database::open_at`, `crate::history::past`), written to empty
//! stores as a new database that a writer opens. The source is only read.

use milliscale_seam::Elapsed as _;
use std::sync::Arc;
use std::time::Duration;

use objstore::ObjectStore;

use super::Database;
use crate::checkpoint::ChunkWriter;
use crate::error::{Error, Result};
use crate::history::At;
use crate::history::past::PastReport;
use crate::manifest::{Manifest, ManifestStore};
use crate::mvcc::Csn;
use crate::options::{Options, TxnOptions};

/// Where a restore is, for a progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreStep {
    /// Reading the source's checkpoint and log, and replaying them.
    Reading,
    /// Writing the new database's checkpoint: rows written so far, of all.
    Writing {
        /// Rows written.
        rows: u64,
        /// Rows in all.
        of: u64,
    },
    /// Publishing the new database's first manifest.
    Publishing,
}

/// What a restore did.
#[derive(Debug, Clone, Default)]
pub struct RestoreReport {
    /// What reading the past found (the point, the base, the log read).
    pub past: PastReport,
    /// The new database's checkpoint CSN: every commit below it (the
    /// source's at or below the point) is in it; its log starts there.
    pub checkpoint_csn: Csn,
    /// Tables, rows and bytes written.
    pub tables: usize,
    /// Rows written.
    pub rows: u64,
    /// Bytes of checkpoint written (one store's copy).
    pub bytes: u64,
    /// Time reading the source (plan, load, replay).
    pub read: Duration,
    /// Time writing the new database.
    pub write: Duration,
}

/// Restore the database on `source`'s stores at `at` onto `target`'s
/// stores, which must hold no database. The new database keeps the
/// source's table ids (dropped and not-yet-created tables as dropped
/// ids), starts its own manifest chain at epoch 1 and its log above the
/// point. `progress` is told each step.
pub fn restore(
    source: Options,
    at: At,
    target: &Options,
    progress: &dyn Fn(RestoreStep),
) -> Result<RestoreReport> {
    target.validate()?;
    if !target.is_logged() {
        return Err(Error::InvalidArgument("restore needs a target store".into()));
    }
    let named: Vec<(String, Arc<dyn ObjectStore>)> = target
        .stores
        .iter()
        .map(|spec| Ok((spec.describe(), spec.open()?)))
        .collect::<Result<Vec<_>>>()?;
    // Refuse a target that holds a database before reading anything.
    crate::history::clone::ensure_empty(&named, target.store_deadline, "restore")?;
    let started = milliscale_seam::now();
    progress(RestoreStep::Reading);
    let past = Database::open_at(source, at)?;
    let report = past.past_report().cloned().unwrap_or_default();
    let read = started.elapsed_now();
    let written_at = milliscale_seam::now();
    let csn = report.csn + 1;
    let needed = target.quorum.needed(named.len());
    let inner = &past.inner;
    let tables = inner.tables.read().by_id.clone();
    let mut tx = past.begin_with(TxnOptions::read_only())?;
    // Keys in the indexes: deleted ones not yet reclaimed count too, so
    // an upper bound of the rows.
    let of: u64 = tables.iter().filter(|t| !t.is_dropped()).map(|t| t.index.len() as u64).sum();
    let mut w =
        ChunkWriter::new(&named, needed, target.store_deadline, csn, target.checkpoint_chunk_bytes);
    let mut live = 0;
    for t in tables.iter().filter(|t| !t.is_dropped()) {
        live += 1;
        w.table(t.id)?;
        let mut rows = 0u64;
        tx.for_each_visible(t, |k, v| {
            rows += 1;
            if rows.is_multiple_of(65_536) {
                progress(RestoreStep::Writing { rows: w.total_rows, of });
            }
            w.row(k, v)
        })?;
    }
    drop(tx);
    let (cref, _) = w.finish()?;
    progress(RestoreStep::Writing { rows: cref.rows, of: cref.rows.max(of) });
    progress(RestoreStep::Publishing);
    let m = {
        let mut m = Manifest::initial(
            crate::log::record::FORMAT_VERSION,
            target.log_groups() as u32,
            target.groups_per_stream() as u32,
            target.log_lanes as u32,
            target.segment_parts_max,
        );
        // The source's ids: its records name them. Tables dropped by the
        // point, or created after it, stay as dropped ids.
        m.tables = tables.iter().map(|t| t.name.clone()).collect();
        m.dropped = tables.iter().filter(|t| t.is_dropped()).map(|t| t.id).collect();
        m.log.base_csn = csn;
        m.checkpoint = Some(cref.clone());
        m
    };
    ManifestStore::new(named.clone(), needed, target.store_deadline).create(&m)?;
    Ok(RestoreReport {
        past: report,
        checkpoint_csn: csn,
        tables: live,
        rows: cref.rows,
        bytes: cref.bytes,
        read,
        write: written_at.elapsed_now(),
    })
}
