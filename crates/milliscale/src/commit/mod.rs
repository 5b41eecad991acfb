//! The commit path: pre-commit now, acknowledgment later.
//!
//! `Transaction::commit` *pre-commits*: it takes the CSN, makes the writes
//! visible and frees the worker. It returns a [`CommitAck`] that resolves once
//! the transaction is durably committed. Without a log (`store("none")`),
//! pre-commit is the commit: the ack is resolved at once and `wait` returns
//! immediately. The log and the committer (dependency tracking against gCSN)
//! resolve acks later in the pipelined design; the API does not change.

use crate::error::Result;
use crate::mvcc::Csn;

/// What a committed transaction was assigned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitInfo {
    /// The commit sequence number; `None` for a read-only transaction.
    pub csn: Option<Csn>,
    /// The largest CSN among the versions the transaction read or overwrote
    /// (0 if none): the transaction may be acknowledged only after every
    /// transaction up to its DSN is durable.
    pub dsn: Csn,
}

/// A pre-committed transaction's handle; resolves once it is committed.
#[derive(Debug)]
#[must_use = "a commit is acknowledged only when the ack resolves; call wait()"]
pub struct CommitAck {
    info: CommitInfo,
}

impl CommitAck {
    pub(crate) fn resolved(info: CommitInfo) -> CommitAck {
        CommitAck { info }
    }

    /// The CSN (`None` for read-only transactions), available at once.
    pub fn csn(&self) -> Option<Csn> {
        self.info.csn
    }

    /// The transaction's DSN.
    pub fn dsn(&self) -> Csn {
        self.info.dsn
    }

    /// True once the commit is acknowledged (always, without a log).
    pub fn is_acknowledged(&self) -> bool {
        true
    }

    /// Block until the transaction is acknowledged.
    pub fn wait(self) -> Result<CommitInfo> {
        Ok(self.info)
    }
}
