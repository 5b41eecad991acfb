//! The open interactive transactions: who opened each, when it was last
//! used, and the caps on how many may be open.
//!
//! Invariants:
//! - a transaction id names at most one transaction for the server's life
//!   (ids come from a counter, scrambled by a bijection so they cannot
//!   be guessed from one another);
//! - a transaction is used only by the principal (bearer token) that
//!   opened it; to any other caller it does not exist;
//! - at most `per_connection` transactions are open per client connection
//!   and `total` in all; a `Begin` past either cap fails at once
//!   (RESOURCE_EXHAUSTED), it does not queue;
//! - a transaction idle for `idle_timeout` is aborted by the reaper, and
//!   one whose client connection closed is aborted at once; its id is
//!   remembered (the last `EXPIRED_REMEMBERED`) so that the next call
//!   with it is told why (ABORTED, kind `expired`).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use milliscale::AsyncTransaction;
use parking_lot::Mutex;

use crate::auth::Principal;
use crate::errors::{Refusal, refuse};

/// How many expired transaction ids are remembered, to tell a late caller
/// its transaction expired rather than that it never existed.
pub const EXPIRED_REMEMBERED: usize = 1 << 16;

/// One open interactive transaction.
pub struct Session {
    /// `None` once the transaction committed, aborted or expired.
    pub txn: Mutex<Option<AsyncTransaction>>,
    pub owner: Principal,
    pub read_only: bool,
    /// The client connection that began it (`connection::Connection`).
    conn: Option<u64>,
    /// Milliseconds since the table's epoch at the last call.
    last_used_ms: AtomicU64,
    /// Bytes of keys, values and patches written through the server
    /// ([`crate::service::Service::with_txn_writing`]).
    pub written: AtomicU64,
}

/// The caps; see the module docs.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    pub per_connection: usize,
    pub total: usize,
    pub idle_timeout: Duration,
}

#[derive(Default)]
struct Inner {
    open: HashMap<u64, Arc<Session>>,
    per_conn: HashMap<u64, usize>,
    /// Transactions the server ended, and why.
    expired: HashMap<u64, Ended>,
    expired_order: VecDeque<u64>,
}

/// Why the server ended a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// It was idle for longer than the timeout.
    Idle,
    /// The client connection that began it closed.
    Disconnected,
}

/// The table of open transactions.
pub struct Sessions {
    inner: Mutex<Inner>,
    next: AtomicU64,
    /// Scrambles ids: a random odd multiplier and offset (a bijection on
    /// u64), drawn at start.
    mul: u64,
    add: u64,
    epoch: Instant,
    limits: SessionLimits,
    expired_total: AtomicU64,
}

impl Sessions {
    pub fn new(limits: SessionLimits) -> Sessions {
        Sessions {
            inner: Mutex::new(Inner::default()),
            next: AtomicU64::new(1),
            mul: rand::random::<u64>() | 1,
            add: rand::random::<u64>(),
            epoch: Instant::now(),
            limits,
            expired_total: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Register a transaction that `owner` began on connection `conn`;
    /// its id.
    pub fn open(
        &self,
        txn: AsyncTransaction,
        owner: Principal,
        read_only: bool,
        conn: Option<u64>,
    ) -> Result<u64, Refusal> {
        let mut inner = self.inner.lock();
        if inner.open.len() >= self.limits.total {
            return Err(refuse::limit(format!(
                "the server has {} open transactions, its cap (--max-open-txns); commit or abort some",
                self.limits.total
            )));
        }
        if let Some(c) = conn {
            let n = inner.per_conn.get(&c).copied().unwrap_or(0);
            if n >= self.limits.per_connection {
                return Err(refuse::limit(format!(
                    "this connection has {n} open transactions, the cap per connection \
                     (--max-open-txns-per-conn); commit or abort some"
                )));
            }
            inner.per_conn.insert(c, n + 1);
        }
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let id = seq.wrapping_mul(self.mul).wrapping_add(self.add);
        let session = Session {
            txn: Mutex::new(Some(txn)),
            owner,
            read_only,
            conn,
            last_used_ms: AtomicU64::new(self.now_ms()),
            written: AtomicU64::new(0),
        };
        inner.open.insert(id, Arc::new(session));
        publish_open(inner.open.len());
        Ok(id)
    }

    /// The open transaction `id` of `caller`, marked as used now.
    pub fn get(&self, id: u64, caller: Principal) -> Result<Arc<Session>, Refusal> {
        let inner = self.inner.lock();
        match inner.open.get(&id) {
            Some(s) if s.owner == caller => {
                s.last_used_ms.store(self.now_ms(), Ordering::Relaxed);
                Ok(Arc::clone(s))
            }
            _ => match inner.expired.get(&id) {
                Some(Ended::Idle) => Err(refuse::expired(id, self.limits.idle_timeout)),
                Some(Ended::Disconnected) => Err(refuse::disconnected(id)),
                None => Err(refuse::no_transaction(id)),
            },
        }
    }

    /// Mark `session` as used now (a long scan calls this per batch).
    pub fn touch(&self, session: &Session) {
        session.last_used_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Take transaction `id` out of the table to finish it.
    pub fn take(&self, id: u64, caller: Principal) -> Result<AsyncTransaction, Refusal> {
        let session = self.get(id, caller)?;
        let txn = session.txn.lock().take();
        self.remove(id);
        txn.ok_or_else(|| refuse::no_transaction(id))
    }

    fn remove(&self, id: u64) -> Option<Arc<Session>> {
        let mut inner = self.inner.lock();
        let s = inner.open.remove(&id)?;
        publish_open(inner.open.len());
        if let Some(c) = s.conn
            && let Some(n) = inner.per_conn.get_mut(&c)
        {
            *n -= 1;
            if *n == 0 {
                inner.per_conn.remove(&c);
            }
        }
        Some(s)
    }

    /// Abort every transaction idle for longer than the timeout; how many.
    pub fn reap_idle(&self) -> usize {
        let cutoff = self.now_ms().saturating_sub(self.limits.idle_timeout.as_millis() as u64);
        let idle: Vec<u64> = {
            let inner = self.inner.lock();
            inner
                .open
                .iter()
                .filter(|(_, s)| s.last_used_ms.load(Ordering::Relaxed) < cutoff)
                .map(|(id, _)| *id)
                .collect()
        };
        let reaped = idle.into_iter().filter(|id| self.end(*id, Ended::Idle)).count();
        self.expired_total.fetch_add(reaped as u64, Ordering::Relaxed);
        reaped
    }

    /// Abort every transaction begun on connection `conn`, which closed;
    /// how many.
    pub fn connection_closed(&self, conn: u64) -> usize {
        let begun: Vec<u64> = {
            let inner = self.inner.lock();
            if !inner.per_conn.contains_key(&conn) {
                return 0;
            }
            inner.open.iter().filter(|(_, s)| s.conn == Some(conn)).map(|(id, _)| *id).collect()
        };
        begun.into_iter().filter(|id| self.end(*id, Ended::Disconnected)).count()
    }

    /// Abort open transaction `id` and remember why; whether it was open.
    fn end(&self, id: u64, why: Ended) -> bool {
        let Some(s) = self.remove(id) else { return false };
        // A call in progress holds the lock; it finishes first, and the
        // transaction is aborted after it.
        if let Some(txn) = s.txn.lock().take() {
            txn.abort();
        }
        let mut inner = self.inner.lock();
        inner.expired.insert(id, why);
        inner.expired_order.push_back(id);
        if inner.expired_order.len() > EXPIRED_REMEMBERED
            && let Some(old) = inner.expired_order.pop_front()
        {
            inner.expired.remove(&old);
        }
        true
    }

    /// Abort every open transaction (at shutdown); how many.
    pub fn abort_all(&self) -> usize {
        let all: Vec<Arc<Session>> = {
            let mut inner = self.inner.lock();
            inner.per_conn.clear();
            publish_open(0);
            inner.open.drain().map(|(_, s)| s).collect()
        };
        let mut n = 0;
        for s in all {
            if let Some(txn) = s.txn.lock().take() {
                txn.abort();
                n += 1;
            }
        }
        n
    }

    pub fn open_count(&self) -> usize {
        self.inner.lock().open.len()
    }

    pub fn expired_total(&self) -> u64 {
        self.expired_total.load(Ordering::Relaxed)
    }
}

/// The open-transactions gauge, set wherever the table changes size.
fn publish_open(n: usize) {
    metrics::gauge!("milliscale_server_open_transactions").set(n as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrambled_ids_are_distinct() {
        let s = Sessions::new(SessionLimits {
            per_connection: 1,
            total: 1,
            idle_timeout: Duration::from_secs(1),
        });
        let ids: std::collections::HashSet<u64> =
            (1..10_000u64).map(|seq| seq.wrapping_mul(s.mul).wrapping_add(s.add)).collect();
        assert_eq!(ids.len(), 9_999);
    }
}
