//! The commit path's state: pre-commit now, acknowledgment later
//! (pipelined group commit, Milliscale §2.4 and §4.3).
//!
//! `Transaction::commit` *pre-commits*: it takes the CSN and logs the
//! transaction into its group's buffer in one step (`log::group`), makes
//! the writes visible and frees the worker. It returns a [`CommitAck`]
//! that resolves once the transaction is durably committed under the
//! tracking policy. Without a log (`store("none")`), pre-commit is the
//! commit and every ack is resolved at once.
//!
//! This module holds what the commit rule reads, and nothing that writes
//! the log (it imports nothing from `log`):
//! - [`marks`]: the CSN counter, gCSN, the poison flag and the ack
//!   waiters: the numbers an ack decides by (record-level dependency
//!   tracking, DSN vs gCSN);
//! - [`durability`]: one log group's durability state, owned in one place:
//!   its parts in flight, its contiguous durable mark, the ring of parts
//!   that landed out of order, and the transactions whose part landed;
//! - [`committer`]: the committer's round (publish gCSN, release, wake the
//!   waiters, measure);
//! - [`ack`]: the handle a pre-committed transaction gets.
//!
//! The log drives it: a lane that lands a part calls
//! [`durability::GroupDurability::landed`] and runs a committer round. The
//! one path back, from a waiting ack to the log, is the [`ForceFlush`]
//! trait, which autonomous commit implements (`log::autonomous`).

pub(crate) mod ack;
pub(crate) mod committer;
pub(crate) mod durability;
pub(crate) mod marks;

pub use ack::{CommitAck, CommitInfo, Durable};
pub use marks::CommitMetrics;
pub(crate) use marks::{AckClock, CommitMarks, ForceFlush};
