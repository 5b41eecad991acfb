//! One version of a record, and its stamp.
//!
//! A stamp is one `u64` that is either
//! - the creator's CSN (top bit clear): the creator committed;
//! - `OWNER_MARKER | tid` : the creator is still running or committing; look
//!   up its state in the transaction table;
//! - [`STAMP_ABORTED`]: the creator aborted; readers skip the version.
//!
//! A version's value is immutable once published. Only its stamp changes,
//! from owner marker to CSN or to aborted, exactly once.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_epoch::Atomic;

use super::Csn;
use crate::txn::table::Tid;

pub(crate) const OWNER_MARKER: u64 = 1 << 63;
pub(crate) const STAMP_ABORTED: u64 = u64::MAX;

/// What a stamp says about a version's creator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stamp {
    Committed(Csn),
    Owner(Tid),
    Aborted,
}

impl Stamp {
    pub(crate) fn decode(raw: u64) -> Stamp {
        if raw == STAMP_ABORTED {
            Stamp::Aborted
        } else if raw & OWNER_MARKER != 0 {
            Stamp::Owner(Tid(raw & !OWNER_MARKER))
        } else {
            Stamp::Committed(raw)
        }
    }
}

pub(crate) struct Version {
    stamp: AtomicU64,
    /// The next older version, or null.
    pub(crate) next: Atomic<Version>,
    /// `None` is a tombstone: the record was deleted by this version's creator.
    value: Option<Box<[u8]>>,
}

impl Version {
    pub(crate) fn new_owned(owner: Tid, value: Option<Box<[u8]>>) -> Version {
        debug_assert!(owner.0 & OWNER_MARKER == 0, "tid must not use the marker bit");
        Version { stamp: AtomicU64::new(OWNER_MARKER | owner.0), next: Atomic::null(), value }
    }

    /// A version committed before any running transaction (used by tests and,
    /// later, by recovery).
    #[cfg(test)]
    pub(crate) fn new_committed(csn: Csn, value: Option<Box<[u8]>>) -> Version {
        assert!(csn & OWNER_MARKER == 0);
        Version { stamp: AtomicU64::new(csn), next: Atomic::null(), value }
    }

    pub(crate) fn stamp(&self) -> Stamp {
        Stamp::decode(self.stamp.load(Ordering::Acquire))
    }

    /// Publish the creator's commit. Called once, by the owner, after its
    /// state in the transaction table says COMMITTED(csn).
    pub(crate) fn set_committed(&self, csn: Csn) {
        debug_assert!(matches!(self.stamp(), Stamp::Owner(_)));
        assert!(csn & OWNER_MARKER == 0, "CSN space exhausted");
        self.stamp.store(csn, Ordering::Release);
    }

    /// Mark the version dead. Called once, by the owner, before unlinking it.
    pub(crate) fn set_aborted(&self) {
        debug_assert!(matches!(self.stamp(), Stamp::Owner(_)));
        self.stamp.store(STAMP_ABORTED, Ordering::Release);
    }

    pub(crate) fn value(&self) -> Option<&[u8]> {
        self.value.as_deref()
    }

    pub(crate) fn is_tombstone(&self) -> bool {
        self.value.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_round_trip() {
        assert_eq!(Stamp::decode(42), Stamp::Committed(42));
        assert_eq!(Stamp::decode(OWNER_MARKER | 7), Stamp::Owner(Tid(7)));
        assert_eq!(Stamp::decode(STAMP_ABORTED), Stamp::Aborted);
        let v = Version::new_owned(Tid(9), Some(b"x".to_vec().into()));
        assert_eq!(v.stamp(), Stamp::Owner(Tid(9)));
        v.set_committed(5);
        assert_eq!(v.stamp(), Stamp::Committed(5));
        let w = Version::new_owned(Tid(9), None);
        assert!(w.is_tombstone());
        w.set_aborted();
        assert_eq!(w.stamp(), Stamp::Aborted);
    }
}
