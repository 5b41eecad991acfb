//! What recovery and promotion report.

use std::time::Duration;

use super::{LogScan, ReplayPlan};
use crate::keys::Chain;
use crate::log::decode::DecodeError;
use crate::manifest::Manifest;
use crate::mvcc::Csn;

/// What a replica's promotion to writer found and did
/// (`Replica::promote`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PromotionReport {
    /// The epoch of the writer it replaced.
    pub old_epoch: u64,
    /// The epoch it writes as.
    pub new_epoch: u64,
    /// The replica's applied CSN when promotion began.
    pub applied_before: Csn,
    /// The sealed log's contiguous prefix (on a quorum of stores).
    pub prefix: Csn,
    /// Commits above the prefix replayed (DSN below it).
    pub above: usize,
    /// Commits seen but not replayed.
    pub dropped: usize,
    /// Transactions applied during promotion (the rest of the old log).
    pub applied: u64,
    /// The new log's first CSN.
    pub base_csn: Csn,
    /// Time per step.
    pub timings: PromotionTimings,
}

/// How long each step of a promotion took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PromotionTimings {
    /// Reading the manifest until the replica follows the current log.
    pub catch_up: Duration,
    /// Creating the next manifest version with the next epoch.
    pub claim: Duration,
    /// Fencing the old writer's log.
    pub fence: Duration,
    /// Reading every chain up to its fence.
    pub drain: Duration,
    /// Deciding and applying the rest of the old log.
    pub apply: Duration,
    /// Starting the log and publishing the manifest with the seal.
    pub publish: Duration,
    /// All of it.
    pub total: Duration,
}

/// Where a group's log was cut, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Truncated {
    /// The object holding the damaged bytes.
    pub key: String,
    /// Byte offset of the first dropped byte in that object.
    pub offset: u64,
    /// Bytes dropped.
    pub bytes: u64,
    /// What was wrong with them.
    pub error: DecodeError,
}

/// How long each step of recovery took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    /// Taking over and fencing the old writer.
    pub fence: std::time::Duration,
    /// Listing, fetching and decoding the log, and planning.
    pub scan: std::time::Duration,
    /// Loading the checkpoint.
    pub load_checkpoint: std::time::Duration,
    /// Replaying the log.
    pub replay: std::time::Duration,
    /// Writing the new checkpoint and publishing the manifest.
    pub checkpoint_and_publish: std::time::Duration,
    /// All of it.
    pub total: std::time::Duration,
}

/// What recovery found and did when it opened an existing database.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// The manifest version and epoch it found.
    pub found_version: u64,
    /// The epoch of the writer it took over from.
    pub old_epoch: u64,
    /// The epoch it writes as.
    pub new_epoch: u64,
    /// The checkpoint it loaded: CSN, chunks, rows.
    pub checkpoint: Option<(Csn, usize, u64)>,
    /// Rows loaded from it.
    pub checkpoint_rows_loaded: u64,
    /// Log objects and bytes read (all stores).
    pub log_objects: usize,
    /// Log bytes read (all stores).
    pub log_bytes: u64,
    /// Per chain (group and lane): parts found, and a torn tail cut off,
    /// if any.
    pub chains: Vec<(Chain, usize, Option<Truncated>)>,
    /// Damage on one store that another store's copy covered.
    pub repaired: Vec<String>,
    /// The contiguous durable CSN prefix.
    pub prefix: Csn,
    /// The largest CSN in the log.
    pub max_csn: Csn,
    /// Sealed logs replayed as their seals decided (logs of writers that a
    /// promoted replica replaced without a checkpoint).
    pub sealed_logs: usize,
    /// Transactions replayed.
    pub replayed: usize,
    /// Transactions found but not replayed (DSN not below the prefix), as
    /// (CSN, DSN).
    pub dropped: Vec<(Csn, Csn)>,
    /// Abort entries found.
    pub aborts: usize,
    /// Records applied and keys installed by replay.
    pub records_applied: u64,
    /// Keys installed by replay.
    pub keys_installed: u64,
    /// The checkpoint recovery wrote, if the log held anything.
    pub new_checkpoint_csn: Option<Csn>,
    /// Instead of a checkpoint, recovery sealed the old log with its
    /// decision (a writer on one store that takes checkpoints in the
    /// background or offloads them): the next checkpoint covers it.
    pub sealed_old_log: bool,
    /// Requests spent deleting what the new checkpoint superseded.
    pub cleanup_requests: u64,
    /// Threads used.
    pub threads: usize,
    /// Time per step.
    pub timings: Timings,
}

impl RecoveryReport {
    pub(crate) fn new(
        old: &Manifest,
        claim: &Manifest,
        scan: &LogScan,
        threads: usize,
    ) -> RecoveryReport {
        RecoveryReport {
            found_version: old.version,
            old_epoch: old.epoch,
            new_epoch: claim.epoch,
            checkpoint: old.checkpoint.as_ref().map(|c| (c.csn, c.chunks.len(), c.rows)),
            log_objects: scan.objects,
            log_bytes: scan.bytes,
            chains: scan
                .chains
                .iter()
                .map(|(c, l)| (*c, l.parts.len(), l.truncated.clone()))
                .collect(),
            repaired: scan.repaired.clone(),
            threads,
            ..RecoveryReport::default()
        }
    }

    pub(crate) fn set_plan(&mut self, plan: &ReplayPlan) {
        self.prefix = plan.prefix;
        self.max_csn = plan.max_csn;
        self.replayed = plan.replay.len();
        self.dropped = plan.dropped.clone();
        self.aborts = plan.aborts;
    }
}
