//! The history a database with a retention window keeps in its manifest
//! (format 3): the data; what keeps it and reads it is the `history`
//! module.

use serde::{Deserialize, Serialize};

use super::{CheckpointRef, SealedLog};
use crate::mvcc::Csn;

/// The history a database with a retention window keeps in its manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// The window, in milliseconds.
    pub retention_ms: u64,
    /// The points the past is rebuilt from, oldest first; the last is the
    /// manifest's current checkpoint (or the empty database).
    pub bases: Vec<Base>,
    /// Earlier epochs' logs the window reaches, oldest first: each with its
    /// first segments (`group_start`), the segment where the next epoch's
    /// log starts, and the replay decision of the writer that took over.
    pub ended: Vec<SealedLog>,
    /// The current epoch's log's first segments (the manifest's `log`
    /// moves its starts forward at each checkpoint).
    pub live_first: Vec<u64>,
    /// By table id: the first CSN at which the table exists (0: before the
    /// history began). A table is created by a manifest write, before any
    /// transaction can write it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub created: Vec<Csn>,
    /// Dropped tables and the first CSN at which each is gone (0: before
    /// the history began), in the order they were dropped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped_at: Vec<(u32, Csn)>,
}

/// A point the past can be rebuilt from: a checkpoint, or the empty
/// database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Base {
    /// It holds every commit below this CSN (1 for the empty database).
    pub csn: Csn,
    /// Its checkpoint; `None` for the empty database.
    pub checkpoint: Option<CheckpointRef>,
    /// The epoch whose log follows it.
    pub epoch: u64,
    /// That log's first segment per chain after it (`LogRef::group_start`
    /// when it was published).
    pub starts: Vec<u64>,
    /// When it was published (ms since the Unix epoch), read after a time
    /// index sample that reaches `csn - 1`: a time at or after this
    /// resolves to a CSN the base reaches.
    pub at_ms: u64,
}

impl History {
    /// The oldest point the window reaches: a CSN and a time.
    pub fn oldest(&self) -> (Csn, u64) {
        self.bases.first().map_or((0, 0), |b| (b.csn.saturating_sub(1), b.at_ms))
    }

    /// The newest base that can rebuild the database at CSN `n`.
    pub fn base_for(&self, n: Csn) -> Option<&Base> {
        self.bases.iter().rev().find(|b| b.csn <= n + 1)
    }

    /// The table ids that are not there at CSN `n` of a database whose
    /// manifest names `tables` and drops `dropped`: created after `n`, or
    /// dropped at or before it.
    pub fn dropped_at_csn(&self, tables: usize, dropped: &[u32], n: Csn) -> Vec<u32> {
        (0..tables as u32)
            .filter(|&id| {
                let created = self.created.get(id as usize).copied().unwrap_or(0);
                let gone = match self.dropped_at.iter().find(|(d, _)| *d == id) {
                    Some((_, at)) => *at <= n,
                    // Dropped before the history began.
                    None => dropped.contains(&id),
                };
                created > n || gone
            })
            .collect()
    }

    /// The ended log of `epoch`, if the window holds it.
    pub fn ended_log(&self, epoch: u64) -> Option<&SealedLog> {
        self.ended.iter().find(|s| s.log.epoch == epoch)
    }
}
