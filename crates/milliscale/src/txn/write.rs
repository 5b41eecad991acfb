//! Writes: install a new version at the head of a record's chain, first
//! updater wins (`mvcc::visibility::check_write`); a sealed head (a key
//! being reclaimed, `crate::reclaim`) is looked up again.

use std::sync::atomic::Ordering;

use crossbeam_epoch::{Guard, Pointer, Shared};
use crossbeam_utils::Backoff;

use super::{Mutation, Transaction, WriteEntry, Written, check_patch};
use crate::error::{Error, Result};
use crate::mvcc::oid_array::{Rid, SEALED};
use crate::mvcc::version::Version;
use crate::mvcc::visibility::{self, WriteCheck};
use crate::options::Isolation;
use crate::table::{Table, TableInner};

impl<'db> Transaction<'db> {
    /// Install a new version of `key`, or find there is nothing to do
    /// (`Written::NoRecord`: delete or patch of a key without a value).
    pub(super) fn write(&mut self, table: &Table, key: &[u8], m: Mutation<'_>) -> Result<Written> {
        let t = self.check_op(table, key)?;
        if self.read_only {
            return Err(Error::InvalidArgument("write in a read-only transaction".into()));
        }
        let Some(mut rid) = self.resolve(t, key, m)? else {
            return self.nothing_to_write(t, key, m);
        };
        let me = self.lease.as_ref().expect("running").tid;
        let ww_snapshot = match self.isolation {
            Isolation::ReadCommitted => None,
            _ => Some(self.snapshot),
        };
        let backoff = Backoff::new();
        loop {
            let guard = crossbeam_epoch::pin();
            let slot = t.records.slot(rid);
            let head = slot.load(Ordering::Acquire, &guard);
            if head.tag() == SEALED {
                // Reclaimed, or being reclaimed: look the key up again
                // (until the reclaimer has removed the entry, it finds
                // this RID again).
                self.last_lookup = None;
                milliscale_seam::snooze(&backoff);
                match self.resolve(t, key, m)? {
                    Some(r) => rid = r,
                    None => return self.nothing_to_write(t, key, m),
                }
                continue;
            }
            let check = match visibility::check_write(head, me, ww_snapshot, &self.db.txns) {
                Ok(c) => c,
                Err(kind) => {
                    self.doomed = Some(kind);
                    return Err(Error::Conflict(kind));
                }
            };
            // SAFETY: pinned by `guard`.
            let head_ref = unsafe { head.as_ref() };
            let (base, next) = match check {
                WriteCheck::Retry => {
                    milliscale_seam::snooze(&backoff);
                    continue;
                }
                WriteCheck::Empty => (None, Shared::null()),
                WriteCheck::Overwrite(_) => (head_ref.and_then(Version::value), head),
                WriteCheck::ReplaceOwn => {
                    let h = head_ref.expect("own head exists");
                    (h.value(), h.next.load(Ordering::Acquire, &guard))
                }
            };
            let new = match (m, base) {
                (Mutation::Put(v), _) => Version::owned(me, Some(v)),
                (Mutation::Delete, Some(_)) => Version::owned(me, None),
                (Mutation::Patch { offset, bytes }, Some(b)) => {
                    check_patch(b, offset, bytes)?;
                    Version::owned_patched(me, b, offset, bytes)
                }
                (Mutation::Patches(patches), Some(b)) => {
                    for &(offset, bytes) in patches {
                        check_patch(b, offset, bytes)?;
                    }
                    let (first, rest) = patches.split_first().expect("callers send a patch");
                    let mut new = Version::owned_patched(me, b, first.0, first.1);
                    for &(offset, bytes) in rest {
                        new.overwrite(offset, bytes);
                    }
                    new
                }
                (Mutation::Delete | Mutation::Patch { .. } | Mutation::Patches(_), None) => {
                    return self.nothing_to_write(t, key, m);
                }
            };
            new.next.store(next, Ordering::Relaxed);
            match slot.compare_exchange(head, new, Ordering::AcqRel, Ordering::Acquire, &guard) {
                Ok(installed) => {
                    if self.logged {
                        self.redo_records +=
                            m.encode(&mut self.redo, t.id, key, check == WriteCheck::Empty);
                    }
                    self.record_write(t, rid, installed.into_usize(), check, head, &guard);
                    return Ok(Written::Yes(rid));
                }
                Err(_) => continue, // the head moved; look again
            }
        }
    }

    /// The RID of `key` for a write of `m`: its entry's, or, for a put of
    /// a key without one, a RID inserted for it; `None` for a delete or a
    /// patch of a key without one.
    fn resolve(&mut self, t: &'db TableInner, key: &[u8], m: Mutation<'_>) -> Result<Option<Rid>> {
        if let Some(rid) = self.lookup(t, key) {
            return Ok(Some(rid));
        }
        let Mutation::Put(_) = m else { return Ok(None) };
        let mine = t.records.allocate(self.db.gc_horizon.load(Ordering::Acquire))?;
        // A concurrent insert of the same key may win; use its RID.
        let rid = match t.index.insert(key, mine) {
            Ok(()) => mine,
            Err(theirs) => {
                t.records.give_back_unused(mine);
                theirs
            }
        };
        self.last_lookup = Some((t.id, key.into(), rid, None));
        Ok(Some(rid))
    }

    /// A delete or patch found no value: a read of "absent" (tracked under
    /// serializable), and `NotFound` for a patch.
    pub(super) fn nothing_to_write(
        &mut self,
        t: &'db TableInner,
        key: &[u8],
        m: Mutation<'_>,
    ) -> Result<Written> {
        if self.isolation == Isolation::Serializable {
            let guard = crossbeam_epoch::pin();
            self.track_read(t, key, &guard);
        }
        match m {
            Mutation::Patch { .. } | Mutation::Patches(_) => Err(Error::NotFound),
            _ => Ok(Written::NoRecord),
        }
    }

    fn record_write(
        &mut self,
        t: &'db TableInner,
        rid: Rid,
        version: usize,
        check: WriteCheck,
        old_head: Shared<'_, Version>,
        guard: &Guard,
    ) {
        match check {
            WriteCheck::ReplaceOwn => {
                let old = old_head.into_usize();
                let entry = self
                    .writes
                    .iter_mut()
                    .rev()
                    .find(|w| w.version == old)
                    .expect("our own head version is in the write set");
                entry.version = version;
                // A reader that loaded the replaced version before our CAS
                // must skip it: it would otherwise keep our owner marker
                // forever and the reader would wait on it after we finish.
                // Skipping is right: we take our CSN after that reader took
                // its snapshot, so none of our versions is visible to it.
                // SAFETY: unlinked by our CAS; only reachable by pinned readers.
                let replaced = unsafe { old_head.deref() };
                replaced.set_aborted();
                // SAFETY: as above.
                unsafe { guard.defer_destroy(old_head) };
            }
            WriteCheck::Overwrite(c) => {
                if !self.db.options.bugs.on(crate::DeliberateBug::UntrackedDependency) {
                    self.dsn = self.dsn.max(c);
                }
                self.writes.push(WriteEntry { table: t, rid, version });
            }
            WriteCheck::Empty => self.writes.push(WriteEntry { table: t, rid, version }),
            WriteCheck::Retry => unreachable!("retry never installs"),
        }
    }
}
