//! A read replica for async code.

use milliscale_seam::Elapsed as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use super::AsyncTransaction;
use crate::error::{Error, Result};
use crate::mvcc::Csn;
use crate::options::{Options, TxnOptions};
use crate::replica::{Replica, ReplicaOptions, Shared};
use crate::table::Table;

/// A read replica (see [`Replica`]) for async code. Cheap to clone; the
/// clones share one replica, which stops when the last one is dropped.
#[derive(Clone, Debug)]
pub struct AsyncReplica {
    pub(super) replica: Arc<Replica>,
}

impl From<Replica> for AsyncReplica {
    fn from(replica: Replica) -> AsyncReplica {
        AsyncReplica { replica: Arc::new(replica) }
    }
}

impl AsyncReplica {
    /// Open a replica with default polling ([`Replica::open`]).
    pub async fn open(options: Options) -> Result<AsyncReplica> {
        AsyncReplica::open_with(options, ReplicaOptions::default()).await
    }

    /// Open a replica: read the manifest, load the checkpoint and start
    /// following the log ([`Replica::open_with`]), on a thread of its own.
    pub async fn open_with(options: Options, replica: ReplicaOptions) -> Result<AsyncReplica> {
        Ok(AsyncReplica::from(super::open_replica(options, replica).await?))
    }

    /// The blocking handle on the same replica.
    pub fn blocking(&self) -> &Replica {
        &self.replica
    }

    /// Every commit below this CSN is visible to new transactions.
    pub fn applied_csn(&self) -> Csn {
        self.replica.applied_csn()
    }

    /// Open a table by name (tables appear as the writer creates them).
    pub fn open_table(&self, name: &str) -> Result<Table> {
        self.replica.open_table(name)
    }

    /// A read-only transaction at the applied CSN.
    pub fn begin(&self) -> Result<AsyncTransaction> {
        let engine = Arc::clone(&self.replica.database().inner);
        AsyncTransaction::begin(engine, TxnOptions::read_only())
    }

    /// A read-only transaction that sees the commit whose CSN is `token`
    /// and everything before it (read-your-writes): awaits
    /// [`AsyncReplica::wait_for`] first. Bound the wait with the runtime's
    /// timeout, e.g. `tokio::time::timeout(d, replica.begin_at(token))`.
    pub async fn begin_at(&self, token: Csn) -> Result<AsyncTransaction> {
        self.wait_for(token).await?;
        self.begin()
    }

    /// A future that resolves once the commit `token` is applied
    /// (visible here); it fails with the follower's error if the follower
    /// stopped on one, and with `Stale` if the replica was closed first.
    /// It waits as long as it takes: bound it with the runtime's timeout.
    pub fn wait_for(&self, token: Csn) -> WaitFor {
        WaitFor {
            shared: Arc::clone(self.replica.shared()),
            token,
            started: milliscale_seam::now(),
        }
    }
}

/// See [`AsyncReplica::wait_for`].
#[must_use = "futures do nothing unless awaited"]
pub struct WaitFor {
    shared: Arc<Shared>,
    token: Csn,
    started: Instant,
}

impl std::fmt::Debug for WaitFor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitFor").field("token", &self.token).finish_non_exhaustive()
    }
}

impl Future for WaitFor {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let mut p = self.shared.progress.lock();
        if p.applied > self.token {
            return Poll::Ready(Ok(()));
        }
        if let Some(e) = &p.error {
            return Poll::Ready(Err(e.clone()));
        }
        if p.stopped {
            return Poll::Ready(Err(Error::Stale {
                token: self.token,
                applied: p.applied,
                seen: p.seen,
                waited: self.started.elapsed_now(),
            }));
        }
        if p.seen <= self.token {
            // Not read from the log yet: ask the tails to poll now (see
            // `Replica::wait_for`). A caller that bounds the wait with a
            // timeout and waits again asks again.
            self.shared.poll_now();
        }
        // Under the lock the follower publishes with: no publication can
        // slip between the check above and this registration.
        if !p.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            p.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}
