//! The simulation's mover (design record 0009): one change of the map at
//! a time, its state kept here, its steps in [`super::moves`].

use crate::log::Record;
use crate::tables::Frozen;
use crate::types::{ShardId, Timestamp};

/// The mover: the CLI's `cluster move` or the rebalancer, with one job at
/// a time.
pub(super) struct Mover {
    pub(super) up: bool,
    /// The last job's number.
    pub(super) last: u64,
    pub(super) work: Option<Job>,
}

impl Mover {
    pub(super) fn new() -> Mover {
        Mover { up: true, last: 0, work: None }
    }
}

/// A move in flight.
pub(super) struct Job {
    pub(super) id: u64,
    /// The range, its new owner and the map version the move publishes.
    pub(super) f: Frozen,
    /// Its old owner.
    pub(super) from: ShardId,
    pub(super) step: Step,
    /// Times the current step's call was sent again.
    pub(super) tries: u32,
    /// Its entry in the world's `moves`.
    pub(super) stat: usize,
    /// The import being sent (kept to send again).
    pub(super) adopt: Option<Record>,
    /// When the freeze was asked for.
    pub(super) frozen_at: Timestamp,
}

/// A move's steps, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Export,
    Import,
    Freeze,
    Reimport,
    Release,
}
