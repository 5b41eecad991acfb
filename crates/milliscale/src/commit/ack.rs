//! The ack handle: what `Transaction::commit` returns. An ack is four
//! numbers and a shared pointer: deciding whether it resolved reads two or
//! three atomics, so it costs nothing per commit beyond the pointer's
//! reference count.

use std::sync::Arc;

use super::durability::OwnPart;
use super::marks::CommitMarks;
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
#[must_use = "a commit is acknowledged only when the ack resolves; call wait()"]
pub struct CommitAck {
    info: CommitInfo,
    own: OwnPart,
    state: Option<Arc<CommitMarks>>,
}

impl std::fmt::Debug for CommitAck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitAck")
            .field("info", &self.info)
            .field("acknowledged", &self.is_acknowledged())
            .finish()
    }
}

impl CommitAck {
    /// An ack that is already resolved (no log, or nothing to wait for).
    pub(crate) fn resolved(info: CommitInfo) -> CommitAck {
        CommitAck { info, own: OwnPart::default(), state: None }
    }

    /// An ack that resolves by the commit rule of `state`.
    pub(crate) fn pending(info: CommitInfo, own: OwnPart, state: Arc<CommitMarks>) -> CommitAck {
        CommitAck { info, own, state: Some(state) }
    }

    /// The CSN (`None` for read-only transactions), available at once.
    pub fn csn(&self) -> Option<Csn> {
        self.info.csn
    }

    /// The transaction's DSN.
    pub fn dsn(&self) -> Csn {
        self.info.dsn
    }

    /// True once the commit is acknowledged: durable, and so is everything
    /// it depends on.
    pub fn is_acknowledged(&self) -> bool {
        self.state
            .as_ref()
            .is_none_or(|s| s.is_acknowledged(self.info.csn, self.info.dsn, self.own))
    }

    /// Block until the transaction is acknowledged or `deadline` passes:
    /// `None` if it was not acknowledged by then (the ack stays valid),
    /// else what [`CommitAck::wait`] returns.
    pub fn wait_until(&self, deadline: std::time::Instant) -> Option<Result<CommitInfo>> {
        match &self.state {
            None => Some(Ok(self.info)),
            Some(s) => s
                .wait_until(self.info.csn, self.info.dsn, self.own, deadline)
                .map(|r| r.map(|()| self.info)),
        }
    }

    /// Block until the transaction is acknowledged. Fails with
    /// `StoreUnavailable` (or `Fenced`) if the log stopped before it was:
    /// then the transaction may or may not survive a restart, and it must
    /// be treated as not committed.
    pub fn wait(self) -> Result<CommitInfo> {
        if let Some(s) = &self.state {
            s.wait(self.info.csn, self.info.dsn, self.own)?;
        }
        Ok(self.info)
    }
}
