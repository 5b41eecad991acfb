//! A transaction that owns its handle on the engine, for async code.

use std::ops::Bound;
use std::sync::Arc;

use crate::commit::{CommitAck, CommitInfo};
use crate::engine::Engine;
use crate::error::Result;
use crate::index::Direction;
use crate::mvcc::Csn;
use crate::options::{Isolation, TxnOptions};
use crate::table::Table;
use crate::txn::Transaction;

/// A running transaction of an [`super::AsyncDatabase`] or
/// [`super::AsyncReplica`]: the same operations as
/// [`crate::Transaction`], and it is `Send + 'static`, so it can be held
/// across `.await` and moved into a spawned task. Its reads and writes are
/// in memory and return at once; [`AsyncTransaction::commit`] awaits
/// durability. Dropping it without committing aborts it.
pub struct AsyncTransaction {
    /// Borrows `*engine`: declared first, so dropped first.
    tx: Transaction<'static>,
    /// Keeps the engine (and its tables) alive while `tx` borrows it.
    engine: Arc<Engine>,
}

// A transaction may move between threads and tasks.
const _: () = {
    const fn assert_send<T: Send + 'static>() {}
    assert_send::<AsyncTransaction>();
};

impl std::fmt::Debug for AsyncTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncTransaction")
            .field("snapshot", &self.tx.snapshot())
            .field("isolation", &self.tx.isolation())
            .finish_non_exhaustive()
    }
}

impl AsyncTransaction {
    pub(crate) fn begin(engine: Arc<Engine>, opts: TxnOptions) -> Result<AsyncTransaction> {
        let tx = engine.begin_with(opts)?;
        // SAFETY: `tx` borrows the engine behind the `Arc`, whose address
        // does not move, and `engine` keeps it alive for as long as `tx`
        // exists: the fields drop in declaration order, `tx` first, and
        // `commit`/`abort` consume `tx` before `engine` goes. The tables
        // `tx` will refer to live as long as the engine (its catalog holds
        // them). No method hands out a reference of the `'static` lifetime:
        // each reborrows `tx` for the length of the call.
        let tx = unsafe { std::mem::transmute::<Transaction<'_>, Transaction<'static>>(tx) };
        Ok(AsyncTransaction { tx, engine })
    }

    /// The isolation level.
    pub fn isolation(&self) -> Isolation {
        self.tx.isolation()
    }

    /// The begin snapshot: versions with a smaller CSN are visible.
    pub fn snapshot(&self) -> Csn {
        self.tx.snapshot()
    }

    /// Read `key`; `None` if absent or deleted.
    pub fn get(&mut self, table: &Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.tx.get(table, key)
    }

    /// Read `key` and pass the value to `f` without copying it.
    pub fn get_with<R>(
        &mut self,
        table: &Table,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>> {
        self.tx.get_with(table, key, f)
    }

    /// Where this transaction last found `key`, for another transaction
    /// that writes it; see [`crate::Transaction::row_hint`].
    pub fn row_hint(&self, table: &Table, key: &[u8]) -> Option<crate::RowHint> {
        self.tx.row_hint(table, key)
    }

    /// Take `hint` as where `key` is, skipping its index lookup; see
    /// [`crate::Transaction::assume_row`].
    pub fn assume_row(&mut self, table: &Table, key: &[u8], hint: crate::RowHint) {
        self.tx.assume_row(table, key, hint);
    }

    /// Insert or replace `key`'s value.
    pub fn put(&mut self, table: &Table, key: &[u8], value: &[u8]) -> Result<()> {
        self.tx.put(table, key, value)
    }

    /// Overwrite `patch.len()` bytes of `key`'s value at `offset` (logged
    /// as a delta); see [`crate::Transaction::update_range`].
    pub fn update_range(
        &mut self,
        table: &Table,
        key: &[u8],
        offset: usize,
        patch: &[u8],
    ) -> Result<()> {
        self.tx.update_range(table, key, offset, patch)
    }

    /// Several patches of `key`'s value, in order, as one new version;
    /// see [`crate::Transaction::update_ranges`].
    pub fn update_ranges(
        &mut self,
        table: &Table,
        key: &[u8],
        patches: &[(usize, &[u8])],
    ) -> Result<()> {
        self.tx.update_ranges(table, key, patches)
    }

    /// Delete `key`; `false` if it had no value.
    pub fn delete(&mut self, table: &Table, key: &[u8]) -> Result<bool> {
        self.tx.delete(table, key)
    }

    /// Up to `limit` visible pairs with keys in `(lower, upper)`, in
    /// `direction` order; see [`crate::Transaction::scan`].
    pub fn scan(
        &mut self,
        table: &Table,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        direction: Direction,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.tx.scan(table, lower, upper, direction, limit)
    }

    /// Visit the visible pairs with keys in `(lower, upper)` without
    /// copying them, until `visit` returns false; see
    /// [`crate::Transaction::scan_with`].
    pub fn scan_with(
        &mut self,
        table: &Table,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        direction: Direction,
        visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.tx.scan_with(table, lower, upper, direction, visit)
    }

    /// The visible rows with keys in `(lower, upper)` as an iterator in
    /// bounded memory; see [`crate::Transaction::range`].
    pub fn range(
        &mut self,
        table: &Table,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        direction: Direction,
    ) -> crate::ScanIter<'_, 'static> {
        self.tx.range(table, lower, upper, direction)
    }

    /// The visible rows whose keys start with `prefix`; see
    /// [`crate::Transaction::prefix`].
    pub fn prefix(
        &mut self,
        table: &Table,
        prefix: &[u8],
        direction: Direction,
    ) -> crate::ScanIter<'_, 'static> {
        self.tx.prefix(table, prefix, direction)
    }

    /// Commit and await durability: pre-commit (the writes become
    /// visible), then wait, without blocking the runtime, until the
    /// transaction is durably committed. A conflict is returned as
    /// `Error::Conflict` (run the transaction again).
    pub async fn commit(self) -> Result<CommitInfo> {
        self.precommit()?.durable().await
    }

    /// Pre-commit only: the writes become visible and the returned ack
    /// resolves (`.await`) once they are durable. A pipelined caller may
    /// go on with other work and await the ack later.
    pub fn precommit(self) -> Result<CommitAck> {
        let AsyncTransaction { tx, engine } = self;
        let ack = tx.commit();
        drop(engine);
        ack
    }

    /// Abort: undo every write.
    pub fn abort(self) {
        let AsyncTransaction { tx, engine } = self;
        tx.abort();
        drop(engine);
    }
}
