//! The ack handle: what `Transaction::commit` returns. An ack is four
//! numbers and a shared pointer: deciding whether it resolved reads two or
//! three atomics, so it costs nothing per commit beyond the pointer's
//! reference count.
//!
//! An ack is waited for by blocking ([`CommitAck::wait`]) or awaited as a
//! future ([`CommitAck::durable`], or `.await` on the ack itself), which
//! any executor can poll: the committer wakes it in the round that
//! acknowledges it, and nothing runs on the executor meanwhile.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

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

    /// A future that resolves as [`CommitAck::wait`] returns, without
    /// blocking a thread: for async code (`ack.await` does the same).
    /// Under autonomous commit a blocking waiter writes its group's records
    /// out at once; an awaiting task does not (it must not block its
    /// executor), so its ack comes with the group's next flush, at most
    /// `Options::max_idle` later.
    pub fn durable(self) -> Durable {
        Durable { ack: self, id: None }
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

impl IntoFuture for CommitAck {
    type Output = Result<CommitInfo>;
    type IntoFuture = Durable;

    fn into_future(self) -> Durable {
        self.durable()
    }
}

/// An ack awaited: resolves once the transaction is durably committed
/// (see [`CommitAck::durable`]). Dropping it stops the wait; the
/// transaction's fate does not change.
#[must_use = "futures do nothing unless awaited"]
#[derive(Debug)]
pub struct Durable {
    ack: CommitAck,
    /// The registration with the committer, once polled while pending.
    id: Option<u64>,
}

impl Future for Durable {
    type Output = Result<CommitInfo>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let info = this.ack.info;
        let Some(state) = this.ack.state.clone() else { return Poll::Ready(Ok(info)) };
        let decided = |s: &CommitMarks| {
            if s.is_acknowledged(info.csn, info.dsn, this.ack.own) {
                Some(Ok(info))
            } else {
                s.poison_error().map(Err)
            }
        };
        if let Some(r) = decided(&state) {
            return Poll::Ready(r);
        }
        let id = state.register_async(this.id, info.csn, info.dsn, this.ack.own, cx.waker());
        this.id = Some(id);
        // A round that published before the registration did not see it.
        match decided(&state) {
            Some(r) => {
                state.deregister_async(id);
                this.id = None;
                Poll::Ready(r)
            }
            None => Poll::Pending,
        }
    }
}

impl Drop for Durable {
    fn drop(&mut self) {
        if let (Some(id), Some(state)) = (self.id, &self.ack.state) {
            state.deregister_async(id);
        }
    }
}
