//! What a shard primary writes to its log before it answers, and reads
//! back at recovery (MILANA §4.1, §4.5).
//!
//! - `Prepare`: a transaction passed validation here; written (and
//!   durable) before the primary votes yes. It carries the writes, the
//!   keys read and the participants, which is all recovery needs to
//!   commit it or to ask the others about it.
//! - `Commit`, `Abort`: the decision, as this primary learned it. An
//!   `Abort` is also written for a transaction this primary never
//!   prepared when a termination query asks about it, so that its prepare,
//!   arriving late, is refused.
//! - `Forget`: the decided transactions below a bound were forgotten
//!   (their outcome rows deleted); a prepare below the bound is refused
//!   from now on, since it can only be a late copy (design record 0008).
//! - `Freeze`, `Adopt`, `Release`: a range changing hands (design record
//!   0009): frozen at its old owner for a move, its rows copied to the new
//!   owner with the read floor, and its freeze or its copy ending (with
//!   its rows deleted when it moved away, or when the move it was copied
//!   for did not happen). The simulation logs them; the server's shard
//!   writes the same as rows of its meta table and of the range's tables
//!   (`shard/moves.rs`, `shard/handover.rs`).
//! - `ReadLease(until)`: the primary may serve reads at timestamps below
//!   `until`. Latest-read timestamps live only in memory; after a
//!   recovery every key's latest read is taken to be the highest lease
//!   logged (the pitfall of MILANA §4.5, closed by logging a bound
//!   instead of waiting out ε).

use crate::types::{CommitTs, Key, ShardId, Timestamp, TxnId, Value};

/// A row copied from a range's old owner: its key, version and value.
pub type MovedRow = (Key, CommitTs, Option<Value>);

/// A transaction as one participant prepared it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Prepare {
    /// The transaction.
    pub txn: TxnId,
    /// The version its writes get: ⟨commit timestamp, client⟩.
    pub version: CommitTs,
    /// The keys it read on this shard, and the versions it read.
    pub reads: Vec<(Key, CommitTs)>,
    /// The key ranges it scanned on this shard, `[start, end)` (an empty
    /// `end`: to the end of the keys), each at the timestamp it was
    /// scanned at: nothing in them may have changed since (no phantom).
    pub ranges: Vec<(Key, Key, Timestamp)>,
    /// Its writes on this shard (`None`: delete).
    pub writes: Vec<(Key, Option<Value>)>,
    /// Every shard it touches, this one included.
    pub participants: Vec<ShardId>,
}

/// One record of a shard's log.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Record {
    /// Validated here; the vote is yes.
    Prepare(Prepare),
    /// Committed.
    Commit(TxnId),
    /// Aborted; its commit timestamp.
    Abort(TxnId, Timestamp),
    /// Reads below this timestamp may be served.
    ReadLease(u64),
    /// `[start, end)` (an empty `end`: no end) is frozen here for its move
    /// to shard `to` by map version `version`: nothing there is served.
    Freeze {
        /// The range's first key.
        start: Key,
        /// The next range's first key.
        end: Key,
        /// Its new owner.
        to: ShardId,
        /// The map version that gives it there.
        version: u64,
    },
    /// Rows of `[start, end)` copied here for its move by map version
    /// `version`, each held as its key's newest version; with `clear`,
    /// the range's rows here are deleted first; with `floor`, the range's
    /// read floor (the latest read its old owner served there).
    Adopt {
        /// The range's first key.
        start: Key,
        /// The next range's first key.
        end: Key,
        /// The map version the move publishes.
        version: u64,
        /// Delete the range's rows here first.
        clear: bool,
        /// The rows.
        rows: Vec<MovedRow>,
        /// The read floor, on the copy's last part.
        floor: Option<Timestamp>,
    },
    /// The freeze of `[start, end)`, or its copy here, is over; with
    /// `drop`, its rows here are deleted.
    Release {
        /// The range's first key.
        start: Key,
        /// The next range's first key.
        end: Key,
        /// Delete its rows.
        drop: bool,
    },
    /// These decided transactions are forgotten, and every decided one
    /// below `below` may be.
    Forget {
        /// The forget bound.
        below: Timestamp,
        /// The outcomes dropped.
        txns: Vec<TxnId>,
    },
}
