//! Which version a transaction sees, and whether it may write over a record.
//!
//! Visibility rule: a version is visible to a view with snapshot `s` if its
//! creator committed with CSN `c < s`, or if the viewer itself created it.
//! A snapshot is the CSN counter's value ("next CSN to hand out") when it was
//! taken, so every CSN below it was already assigned.

use std::sync::atomic::Ordering;

use crossbeam_epoch::{Atomic, Guard, Shared};

use super::Csn;
use super::version::{Stamp, Version};
use crate::error::ConflictKind;
use crate::mvcc::txn_table::{Tid, TxnState, TxnTable};

/// Who made the version a reader found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Creator {
    /// The reading transaction itself.
    Own,
    /// A transaction that committed (or pre-committed) with this CSN.
    Committed(Csn),
}

/// What a reader reads at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View {
    pub(crate) snapshot: Csn,
    pub(crate) me: Option<Tid>,
}

/// The creator of `v` as `view` sees it, or `None` if `v` is invisible.
fn creator_if_visible(v: &Version, view: View, txns: &TxnTable) -> Option<Creator> {
    loop {
        match v.stamp() {
            Stamp::Committed(c) => return (c < view.snapshot).then_some(Creator::Committed(c)),
            Stamp::Aborted => return None,
            Stamp::Owner(t) if Some(t) == view.me => return Some(Creator::Own),
            Stamp::Owner(t) => {
                let settled = txns.wait_while(t, |st| match st {
                    TxnState::Committing => true,
                    TxnState::Validating(c) => c < view.snapshot,
                    _ => false,
                });
                match settled {
                    // The owner finished meanwhile: its final stamp is in place.
                    None => continue,
                    Some(TxnState::Committed(c)) => {
                        return (c < view.snapshot).then_some(Creator::Committed(c));
                    }
                    // Active: its CSN will be >= our snapshot (it was not yet
                    // COMMITTING when we looked). Validating with c >= snapshot
                    // and Aborted are invisible too.
                    Some(_) => return None,
                }
            }
        }
    }
}

/// The newest version of the chain at `head` visible to `view`, with its creator.
pub(crate) fn find_visible<'g>(
    head: &Atomic<Version>,
    view: View,
    txns: &TxnTable,
    guard: &'g Guard,
) -> Option<(&'g Version, Creator)> {
    let mut cur = head.load(Ordering::Acquire, guard);
    // SAFETY: versions reachable from a head are retired only through the
    // epoch collector, and `guard` pins the epoch.
    while let Some(v) = unsafe { cur.as_ref() } {
        if let Some(creator) = creator_if_visible(v, view, txns) {
            return Some((v, creator));
        }
        cur = v.next.load(Ordering::Acquire, guard);
    }
    None
}

/// What a writer may do with the current head of a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteCheck {
    /// The chain is empty: insert the first version.
    Empty,
    /// Install a new version over a committed one with this CSN.
    Overwrite(Csn),
    /// The head is the writer's own uncommitted version: replace it.
    ReplaceOwn,
    /// The head is settling (an aborted version being unlinked, or an owner
    /// that just released its slot): look again.
    Retry,
}

/// First-updater-wins. `snapshot` is `None` under read committed, where a
/// newer committed head may be overwritten.
pub(crate) fn check_write(
    head: Shared<'_, Version>,
    me: Tid,
    snapshot: Option<Csn>,
    txns: &TxnTable,
) -> Result<WriteCheck, ConflictKind> {
    // SAFETY: `head` was loaded under the caller's pinned guard.
    let Some(v) = (unsafe { head.as_ref() }) else { return Ok(WriteCheck::Empty) };
    let committed = |c: Csn| match snapshot {
        Some(s) if c >= s => Err(ConflictKind::SnapshotTooOld),
        _ => Ok(WriteCheck::Overwrite(c)),
    };
    match v.stamp() {
        Stamp::Committed(c) => committed(c),
        Stamp::Aborted => Ok(WriteCheck::Retry),
        Stamp::Owner(t) if t == me => Ok(WriteCheck::ReplaceOwn),
        Stamp::Owner(t) => match txns.state_of(t) {
            None | Some(TxnState::Aborted) => Ok(WriteCheck::Retry),
            Some(TxnState::Committed(c)) => committed(c),
            Some(_) => Err(ConflictKind::WriteWrite),
        },
    }
}
