//! Transactions: reads at a snapshot, first-updater-wins writes, DSN
//! tracking, pre-commit, and abort.
//!
//! Life of a transaction (ARCHITECTURE.md has the full path):
//! 1. `begin` takes a slot in the transaction table and a snapshot.
//! 2. Reads walk version chains (`mvcc::visibility`); every version read that
//!    another transaction created raises the DSN to its CSN.
//! 3. Writes install an uncommitted version at the head of the chain, stamped
//!    with the owner marker; the overwritten version's CSN raises the DSN.
//!    With a log, each write's record is appended to the redo buffer.
//! 4. `commit` pre-commits. Under its log group's lock (`log::group`): state
//!    COMMITTING, take the CSN, (serializable: VALIDATING and re-check reads;
//!    on failure an abort entry), log the entry. Then state COMMITTED(csn),
//!    stamp the versions, trim chains, release the slot, return the ack.

mod lookup;
mod scan_iter;
mod validate;
mod write;

use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crossbeam_epoch::{Guard, Pointer, Shared};

use crate::commit::durability::OwnPart;
use crate::commit::{CommitAck, CommitInfo};
use crate::engine::{Engine, GC_HORIZON_REFRESH_COMMITS};
use crate::error::{ConflictKind, Error, Result};
use crate::index::Direction;
use crate::limits::{KEY_BYTES_MAX, VALUE_BYTES_MAX};
use crate::log::group::Reservation;
use crate::log::record::ENTRY_HEADER_BYTES;
use crate::mvcc::oid_array::Rid;
use crate::mvcc::txn_table::{SlotLease, TxnState};
use crate::mvcc::version::Version;
use crate::mvcc::visibility::{self, Creator, View};
use crate::mvcc::{Csn, gc};
use crate::options::Isolation;
use crate::reclaim;
use crate::table::{Table, TableInner};
use lookup::LookupKey;
pub use lookup::RowHint;
pub use scan_iter::{SCAN_BATCH_ROWS, ScanIter};
use validate::{ReadEntry, ScanEntry};

pub(crate) struct WriteEntry<'db> {
    pub(crate) table: &'db TableInner,
    pub(crate) rid: Rid,
    /// Address of our uncommitted version, at the head of the record's chain
    /// until we commit or abort (nobody installs over an uncommitted version).
    pub(crate) version: usize,
}

/// A running transaction. Dropping it without `commit` aborts it.
pub struct Transaction<'db> {
    db: &'db Engine,
    lease: Option<SlotLease>,
    isolation: Isolation,
    read_only: bool,
    snapshot: Csn,
    dsn: Csn,
    doomed: Option<ConflictKind>,
    writes: Vec<WriteEntry<'db>>,
    reads: Vec<ReadEntry<'db>>,
    scans: Vec<ScanEntry<'db>>,
    /// The last key looked up and its RID, so that a read-modify-write of
    /// one key descends the index once, not twice. Used only while the
    /// RID's head is not sealed (`reclaim`): a sealed one may have
    /// lost its key since.
    last_lookup: Option<(u32, LookupKey, Rid, Option<u64>)>,
    /// The keys this transaction deleted, for `reclaim` once it
    /// commits.
    deleted: Vec<(Arc<TableInner>, Box<[u8]>, Rid)>,
    /// With a log: the transaction's records, encoded as it writes them
    /// (the body of its log entry), and how many there are.
    logged: bool,
    redo: Vec<u8>,
    redo_records: u32,
}

// A transaction may move between threads (write sets hold version
// addresses as integers, dereferenced only while provably alive).
const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<Transaction<'static>>();
};

impl<'db> Transaction<'db> {
    pub(crate) fn new(
        db: &'db Engine,
        lease: SlotLease,
        snapshot: Csn,
        isolation: Isolation,
        read_only: bool,
    ) -> Transaction<'db> {
        Transaction {
            db,
            lease: Some(lease),
            isolation,
            read_only,
            snapshot,
            dsn: 0,
            doomed: None,
            writes: Vec::new(),
            reads: Vec::new(),
            scans: Vec::new(),
            last_lookup: None,
            deleted: Vec::new(),
            logged: db.log.is_some(),
            redo: Vec::new(),
            redo_records: 0,
        }
    }

    /// The isolation level.
    pub fn isolation(&self) -> Isolation {
        self.isolation
    }

    /// The begin snapshot: versions with a smaller CSN are visible.
    pub fn snapshot(&self) -> Csn {
        self.snapshot
    }

    /// The largest CSN among versions read or overwritten so far (0 if none).
    pub fn dsn(&self) -> Csn {
        self.dsn
    }

    /// Read `key`; `None` if absent or deleted.
    pub fn get(&mut self, table: &Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_with(table, key, <[u8]>::to_vec)
    }

    /// Read `key` and pass the value to `f` without copying it.
    pub fn get_with<R>(
        &mut self,
        table: &Table,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>> {
        let t = self.check_op(table, key)?;
        let view = self.read_view();
        let guard = crossbeam_epoch::pin();
        let found = self.lookup(t, key).and_then(|rid| {
            visibility::find_visible(t.records.slot(rid), view, &self.db.txns, &guard)
        });
        if self.isolation == Isolation::Serializable {
            self.track_read(t, key, &guard);
        }
        let Some((v, creator)) = found else { return Ok(None) };
        self.note_dependency(creator);
        Ok(v.value().map(f))
    }

    /// Insert or replace `key` with `value`.
    pub fn put(&mut self, table: &Table, key: &[u8], value: &[u8]) -> Result<()> {
        check_value(value)?;
        self.write(table, key, Mutation::Put(value)).map(|_| ())
    }

    /// Overwrite `bytes.len()` bytes of the value of `key` at `offset`; the
    /// log records only the changed bytes. Fails with `NotFound` if the key
    /// has no value, and `InvalidArgument` if the range passes its end.
    pub fn update_range(
        &mut self,
        table: &Table,
        key: &[u8],
        offset: usize,
        bytes: &[u8],
    ) -> Result<()> {
        self.update_ranges(table, key, &[(offset, bytes)])
    }

    /// [`Transaction::update_range`] of each of `patches` (offset and
    /// bytes), in order, as one new version of `key`: one copy of the
    /// value, where a call per patch copies it once each. The log records
    /// each patch's bytes. Fails as `update_range` does, and with
    /// `InvalidArgument` for no patches.
    pub fn update_ranges(
        &mut self,
        table: &Table,
        key: &[u8],
        patches: &[(usize, &[u8])],
    ) -> Result<()> {
        if patches.is_empty() {
            return Err(Error::InvalidArgument("update_ranges with no ranges".into()));
        }
        for (offset, bytes) in patches {
            if offset.checked_add(bytes.len()).is_none_or(|e| e > VALUE_BYTES_MAX) {
                return Err(Error::InvalidArgument(format!(
                    "update_range past the largest value ({VALUE_BYTES_MAX} bytes)"
                )));
            }
        }
        let m = match patches {
            [(offset, bytes)] => Mutation::Patch { offset: *offset, bytes },
            _ => Mutation::Patches(patches),
        };
        match self.write(table, key, m)? {
            Written::Yes(_) => Ok(()),
            Written::NoRecord => Err(Error::NotFound),
        }
    }

    /// Delete `key`. Returns whether it had a visible value.
    pub fn delete(&mut self, table: &Table, key: &[u8]) -> Result<bool> {
        match self.write(table, key, Mutation::Delete)? {
            Written::Yes(rid) => {
                self.deleted.push((Arc::clone(&table.inner), key.into(), rid));
                Ok(true)
            }
            Written::NoRecord => Ok(false),
        }
    }

    /// Up to `limit` visible key/value pairs with keys in `(lower, upper)`, in
    /// `direction` order.
    pub fn scan(
        &mut self,
        table: &Table,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        direction: Direction,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        // A limit of 0 reads no row but checks its arguments and, under
        // serializable isolation, still tracks the whole range.
        self.scan_rows(table, lower, upper, direction, limit > 0, |key, value| {
            out.push((key.to_vec(), value.to_vec()));
            out.len() < limit
        })?;
        Ok(out)
    }

    /// Pass each visible key/value pair with its key in `(lower, upper)`, in
    /// `direction` order, to `visit` without copying it, until `visit`
    /// returns false. What was read is what was visited: under
    /// serializable isolation the range tracked ends at the row `visit`
    /// stopped at.
    pub fn scan_with(
        &mut self,
        table: &Table,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        direction: Direction,
        visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.scan_rows(table, lower, upper, direction, true, visit)
    }

    /// [`Transaction::scan_with`], reading no row unless `read`.
    fn scan_rows(
        &mut self,
        table: &Table,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        direction: Direction,
        read: bool,
        mut visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let t = self.check_op(table, &[])?;
        for b in [lower, upper] {
            if let Bound::Included(k) | Bound::Excluded(k) = b {
                check_key(k)?;
            }
        }
        let view = self.read_view();
        let guard = crossbeam_epoch::pin();
        let mut deps = Vec::new();
        let mut stopped_at = None;
        if read {
            t.index.scan(lower, upper, direction, |key, rid| {
                let found =
                    visibility::find_visible(t.records.slot(rid), view, &self.db.txns, &guard);
                if let Some((v, creator)) = found {
                    deps.push(creator);
                    if let Some(value) = v.value()
                        && !visit(key, value)
                    {
                        stopped_at = Some(key.to_vec());
                        return false;
                    }
                }
                true
            });
        }
        for c in deps {
            self.note_dependency(c);
        }
        if self.isolation == Isolation::Serializable {
            self.track_scan(t, lower, upper, direction, stopped_at.as_deref(), &guard);
        }
        Ok(())
    }

    /// Pre-commit: take a CSN, make the writes visible, free this thread.
    /// The returned ack resolves once the transaction is durably committed.
    pub fn commit(mut self) -> Result<CommitAck> {
        // Disabled (the default), a span costs one check of its callsite.
        let span = tracing::debug_span!(
            "commit",
            writes = self.writes.len(),
            csn = tracing::field::Empty,
            dsn = tracing::field::Empty,
        );
        let _in_commit = span.enter();
        if let Err(e) = self.db.check_open() {
            self.abort_inner();
            return Err(e);
        }
        if let Some(kind) = self.doomed {
            self.abort_inner();
            return Err(Error::Conflict(kind));
        }
        if self.writes.is_empty() {
            // Read-only: no CSN (invariant 1); waits for what it saw.
            let info = CommitInfo { csn: None, dsn: self.dsn };
            self.finish();
            return Ok(self.ack(info, OwnPart::default()));
        }
        let lease = self.lease.take().expect("a running transaction holds its slot");
        // Pin before the state says COMMITTED: once it does, other writers may
        // install over our versions and retire them, and we still stamp them.
        let guard = crossbeam_epoch::pin();
        let mut logged = None;
        let (csn, own) = match self.db.log.as_ref() {
            None => match self.take_csn(&lease, &guard, None) {
                Ok(csn) => (csn, OwnPart::default()),
                Err(e) => return Err(self.fail(lease, e)),
            },
            Some(log) => {
                let group = log.my_group();
                let entry_len = ENTRY_HEADER_BYTES + self.redo.len();
                let mut r = match group.reserve(entry_len) {
                    Ok(r) => r,
                    Err(e) => return Err(self.fail(lease, e)),
                };
                match self.take_csn(&lease, &guard, Some(&mut r)) {
                    Ok(_) => {
                        let (p, buffered) = r.write_commit(self.dsn, self.redo_records, &self.redo);
                        logged = Some((log, group, buffered));
                        (p.csn, OwnPart { group: group.id as usize, part: p.part })
                    }
                    Err(e) => {
                        r.write_abort();
                        return Err(self.fail(lease, e));
                    }
                }
            }
        };
        self.db.txns.set_state(&lease, TxnState::Committed(csn));
        for w in &self.writes {
            // SAFETY: pinned since before COMMITTED, so not yet freed.
            unsafe { Version::from_addr(w.version) }.set_committed(csn);
        }
        self.collect_garbage(csn, &guard);
        if !self.deleted.is_empty() {
            let deleted = self.deleted.drain(..);
            self.db.reclaim.push(deleted.map(|(table, key, rid)| reclaim::Doomed {
                table,
                key,
                rid,
                csn,
            }));
        }
        span.record("csn", csn).record("dsn", self.dsn);
        let info = CommitInfo { csn: Some(csn), dsn: self.dsn };
        self.lease = Some(lease);
        self.finish();
        if let Some((log, group, buffered)) = logged {
            // Autonomous commit: the worker may flush and acknowledge now.
            log.after_commit(group, buffered);
        }
        Ok(self.ack(info, own))
    }

    /// COMMITTING, take the CSN (from the group reservation with a log),
    /// and validate under serializable isolation. On a validation failure
    /// the state is ABORTED and the caller logs an abort for the CSN.
    fn take_csn(
        &self,
        lease: &SlotLease,
        guard: &Guard,
        reservation: Option<&mut Reservation<'_>>,
    ) -> Result<Csn> {
        self.db.txns.set_state(lease, TxnState::Committing);
        let csn = match reservation {
            Some(r) => r.take_csn(),
            None => self.db.commit.next_csn.fetch_add(1, Ordering::SeqCst),
        };
        if self.isolation == Isolation::Serializable {
            self.db.txns.set_state(lease, TxnState::Validating(csn));
            if !self.validate(csn, guard) {
                self.db.txns.set_state(lease, TxnState::Aborted);
                return Err(Error::Conflict(ConflictKind::ReadValidation));
            }
        }
        Ok(csn)
    }

    /// Abort after a failed pre-commit and pass the error on.
    fn fail(&mut self, lease: SlotLease, e: Error) -> Error {
        self.lease = Some(lease);
        self.abort_inner();
        e
    }

    fn ack(&self, info: CommitInfo, own: OwnPart) -> CommitAck {
        let c = &self.db.commit;
        if !c.logged || c.is_acknowledged(info.csn, info.dsn, own) {
            CommitAck::resolved(info)
        } else {
            CommitAck::pending(info, own, Arc::clone(c))
        }
    }

    /// Pre-commit and wait for the acknowledgment.
    pub fn commit_and_wait(self) -> Result<CommitInfo> {
        self.commit()?.wait()
    }

    /// Abort: unlink every version this transaction installed.
    pub fn abort(mut self) {
        self.abort_inner();
    }

    // ---- internals ----

    /// Pass every visible key and value of `t` at the snapshot to `f`, in
    /// key order (checkpoints). Nothing is tracked: for read-only snapshot
    /// reads only. Stops at `f`'s first error.
    pub(crate) fn for_each_visible(
        &mut self,
        t: &TableInner,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<()> {
        debug_assert!(self.read_only && self.isolation != Isolation::ReadCommitted);
        let view = self.read_view();
        let mut result = Ok(());
        t.index.scan(Bound::Unbounded, Bound::Unbounded, Direction::Forward, |key, rid| {
            // A guard per row, so that a long scan does not hold back the
            // reclamation of versions that GC unlinks meanwhile.
            let guard = crossbeam_epoch::pin();
            let found = visibility::find_visible(t.records.slot(rid), view, &self.db.txns, &guard);
            if let Some(value) = found.and_then(|(v, _)| v.value())
                && let Err(e) = f(key, value)
            {
                result = Err(e);
                return false;
            }
            true
        });
        result
    }

    fn read_view(&self) -> View {
        let snapshot = match self.isolation {
            Isolation::ReadCommitted => self.db.commit.next_csn.load(Ordering::SeqCst),
            Isolation::Snapshot | Isolation::Serializable => self.snapshot,
        };
        View { snapshot, me: self.lease.as_ref().map(|l| l.tid) }
    }

    fn note_dependency(&mut self, creator: Creator) {
        if let Creator::Committed(c) = creator {
            if self.db.options.bugs.on(crate::DeliberateBug::UntrackedDependency) {
                return;
            }
            self.dsn = self.dsn.max(c);
        }
    }

    fn check_op(&self, table: &Table, key: &[u8]) -> Result<&'db TableInner> {
        self.db.check_open()?;
        if let Some(kind) = self.doomed {
            return Err(Error::Conflict(kind));
        }
        if table.inner.db_id != self.db.id {
            return Err(Error::InvalidArgument(format!(
                "table {:?} belongs to another database",
                table.inner.name
            )));
        }
        if table.inner.is_dropped() {
            return Err(Error::TableNotFound(table.inner.name.clone()));
        }
        check_key(key)?;
        // SAFETY: the catalog holds an Arc to each table while it is in
        // the database, and a dropped one (which we found not dropped
        // above, while holding our slot in the transaction table) until
        // no transaction holds a slot taken before the drop: this one
        // ends before it is freed (`Engine::retire_table`).
        Ok(unsafe { &*std::sync::Arc::as_ptr(&table.inner) })
    }

    fn collect_garbage(&self, csn: Csn, guard: &Guard) {
        if csn.is_multiple_of(GC_HORIZON_REFRESH_COMMITS) {
            self.db.refresh_gc_horizon();
        }
        let horizon = self.db.gc_horizon.load(Ordering::Acquire);
        if horizon <= crate::mvcc::CSN_FIRST {
            return;
        }
        let mut retired = 0;
        let mut again = smallvec::SmallVec::<[gc::Retrim; 8]>::new();
        // Below each new version, the one it replaced (read a moment ago)
        // and the one below that, cold, which the trim retires.
        let slots = self.writes.iter().map(|w| w.table.records.slot(w.rid));
        gc::prefetch_chains(slots, 2, guard);
        for w in &self.writes {
            let full = csn.is_multiple_of(gc::FULL_WALK_EVERY);
            let slot = w.table.records.slot(w.rid);
            retired += gc::trim_chain(slot, horizon, full, guard);
            if gc::holds_older(slot, guard) {
                again.push(gc::Retrim { table: w.table.id, rid: w.rid, csn });
            }
        }
        retired += self.retrim(&again, horizon, guard);
        retired +=
            self.db.reclaim.drain(horizon, self.db.gc_counter(), reclaim::DRAIN_PER_COMMIT, guard);
        if retired > 0 {
            self.db.versions_retired.fetch_add(retired as u64, Ordering::Relaxed);
        }
    }

    /// Queue `again` (records this commit left holding the version it
    /// replaced) and trim the queued records the horizon has passed: as
    /// many as this commit queued and up to [`gc::RETRIMS_PER_COMMIT`]
    /// more, so that the queue drains while commits continue.
    ///
    /// The catalog is only tried: a table created or dropped holds it
    /// across a store's round trip, which no commit waits for (nothing is
    /// taken from the queue then).
    fn retrim(&self, again: &[gc::Retrim], horizon: Csn, guard: &Guard) -> usize {
        // Nothing to queue or trim (an insert-only load): not even the
        // catalog's lock word is touched.
        if again.is_empty() && self.db.retrims.queued() == 0 {
            return 0;
        }
        let tables = self.db.tables.try_read();
        let max = match tables {
            Some(_) => again.len() + gc::RETRIMS_PER_COMMIT,
            None => 0,
        };
        let mut due = gc::Due::new();
        self.db.retrims.cycle(again, horizon, max, &mut due);
        let Some(tables) = tables.filter(|_| !due.is_empty()) else { return 0 };
        crate::table::trim_due(&tables.by_id, &due, horizon, guard)
    }

    fn abort_inner(&mut self) {
        if self.lease.is_none() {
            return;
        }
        let guard = crossbeam_epoch::pin();
        // Newest first, so a record written twice is unlinked in order.
        for w in self.writes.drain(..).rev() {
            // SAFETY: our uncommitted version is alive and at the head of its chain.
            let v = unsafe { Version::from_addr(w.version) };
            v.set_aborted();
            let slot = w.table.records.slot(w.rid);
            // SAFETY: `w.version` came from `into_usize` of a live version.
            let ours = unsafe { Shared::<Version>::from_usize(w.version) };
            let next = v.next.load(Ordering::Acquire, &guard);
            let unlinked =
                slot.compare_exchange(ours, next, Ordering::AcqRel, Ordering::Acquire, &guard);
            assert!(unlinked.is_ok(), "an uncommitted version stays at the head of its chain");
            // SAFETY: unlinked above; only pinned readers can still hold it.
            unsafe { guard.defer_destroy(ours) };
        }
        self.finish();
    }

    fn finish(&mut self) {
        if let Some(lease) = self.lease.take() {
            self.db.txns.end(lease);
        }
        self.writes.clear();
        self.deleted.clear();
        self.reads.clear();
        self.scans.clear();
        self.redo.clear();
        self.redo_records = 0;
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        self.abort_inner();
    }
}

impl std::fmt::Debug for Transaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("isolation", &self.isolation)
            .field("snapshot", &self.snapshot)
            .field("dsn", &self.dsn)
            .field("writes", &self.writes.len())
            .finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    /// A version was installed, at this RID.
    Yes(Rid),
    NoRecord,
}

/// A requested change to one record.
#[derive(Debug, Clone, Copy)]
enum Mutation<'a> {
    Put(&'a [u8]),
    Patch {
        offset: usize,
        bytes: &'a [u8],
    },
    /// Several patches, in order, as one new version.
    Patches(&'a [(usize, &'a [u8])]),
    Delete,
}

impl Mutation<'_> {
    /// Append this write's log records to `redo` (a delta per patch, in
    /// order: a replay applies them one after the other, as the version
    /// was built); `insert` if the record had no version before. Returns
    /// how many it appended.
    fn encode(self, redo: &mut Vec<u8>, table: u32, key: &[u8], insert: bool) -> u32 {
        use crate::log::record::{encode_record, op_code};
        match self {
            Mutation::Put(v) => {
                let op = if insert { op_code::INSERT } else { op_code::UPDATE };
                encode_record(redo, op, table, key, 0, v);
            }
            Mutation::Patch { offset, bytes } => {
                encode_record(redo, op_code::DELTA, table, key, offset as u32, bytes)
            }
            Mutation::Patches(patches) => {
                for &(offset, bytes) in patches {
                    encode_record(redo, op_code::DELTA, table, key, offset as u32, bytes);
                }
                return patches.len() as u32;
            }
            Mutation::Delete => encode_record(redo, op_code::DELETE, table, key, 0, &[]),
        }
        1
    }
}

fn check_patch(base: &[u8], offset: usize, bytes: &[u8]) -> Result<()> {
    let end = offset + bytes.len(); // no overflow: checked against VALUE_BYTES_MAX
    if end > base.len() {
        return Err(Error::InvalidArgument(format!(
            "update_range {offset}..{end} is past the end of a {}-byte value",
            base.len()
        )));
    }
    Ok(())
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > KEY_BYTES_MAX {
        return Err(Error::InvalidArgument(format!(
            "key of {} bytes exceeds the {KEY_BYTES_MAX}-byte limit",
            key.len()
        )));
    }
    Ok(())
}

fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > VALUE_BYTES_MAX {
        return Err(Error::InvalidArgument(format!(
            "value of {} bytes exceeds the {VALUE_BYTES_MAX}-byte limit",
            value.len()
        )));
    }
    Ok(())
}
