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
//!
//! Layout: a version is one allocation, header then value bytes
//! (`[stamp u64][next ptr][len u32][bytes...]`), so a reader that finds the
//! version finds the value in the same cache lines: one miss, not two.
//! crossbeam-epoch manages it through the [`Pointable`] impl below.

use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_epoch::{Atomic, Owned, Pointable};

use super::Csn;
use crate::limits::VALUE_BYTES_MAX;
use crate::mvcc::txn_table::Tid;

pub(crate) const OWNER_MARKER: u64 = 1 << 63;
pub(crate) const STAMP_ABORTED: u64 = u64::MAX;
/// `len` of a tombstone.
const TOMBSTONE: u32 = u32::MAX;

const _: () = assert!(VALUE_BYTES_MAX < TOMBSTONE as usize);

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

/// A version: fixed header plus the value's bytes, in one allocation.
#[repr(C)]
pub(crate) struct Version {
    stamp: AtomicU64,
    /// The next older version, or null.
    pub(crate) next: Atomic<Version>,
    /// Value length, or `TOMBSTONE`.
    len: u32,
    data: [u8],
}

/// Ask the CPU to start loading the cache line at `p` (and, for a
/// version, the next one, where its stamp and value begin): a hint that
/// never faults, whatever the address, and changes nothing else.
#[inline]
pub(crate) fn prefetch<T: ?Sized>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let p = p.cast::<i8>();
        // SAFETY: x86_64 always has SSE, and a prefetch reads nothing.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p);
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The header as a sized struct, to compute the offset of `data`.
#[repr(C)]
struct Header {
    stamp: AtomicU64,
    next: usize,
    len: u32,
}
const DATA_OFFSET: usize = std::mem::size_of::<u64>() * 2 + std::mem::size_of::<u32>();
const _: () = assert!(std::mem::offset_of!(Header, len) + 4 == DATA_OFFSET);

/// How to build a version; passed to `Owned::init`. Only this module builds
/// one, from slices that outlive the `init` call.
pub(crate) struct VersionInit {
    stamp: u64,
    /// The value (or the base of a patch); `None` for a tombstone.
    value: Option<(*const u8, usize)>,
    /// Bytes to write over the value at an offset.
    patch: Option<(usize, *const u8, usize)>,
}

fn layout(data_len: usize) -> Layout {
    Layout::from_size_align(DATA_OFFSET + data_len, 8)
        .expect("value sizes are bounded by VALUE_BYTES_MAX")
        .pad_to_align()
}

/// Read the data length stored at `ptr`.
///
/// # Safety
/// `ptr` must point to a live version allocated by `Pointable::init`.
unsafe fn data_len(ptr: usize) -> usize {
    // SAFETY: the header is initialized by `init` and `len` never changes.
    let len = unsafe { (*(ptr as *const Header)).len };
    if len == TOMBSTONE { 0 } else { len as usize }
}

impl Pointable for Version {
    const ALIGN: usize = 8;
    type Init = VersionInit;

    unsafe fn init(init: VersionInit) -> usize {
        let (n, len) = match init.value {
            None => (0, TOMBSTONE),
            Some((_, n)) => (n, n as u32),
        };
        let lay = layout(n);
        // SAFETY: the layout has non-zero size (the header).
        let p = unsafe { alloc(lay) };
        if p.is_null() {
            handle_alloc_error(lay);
        }
        // SAFETY: `p` is a fresh allocation of `DATA_OFFSET + n` bytes (at
        // least), aligned for the header. The value and patch pointers come
        // from slices alive for this call (see `build`), and the patch
        // range lies inside the value (checked by `owned_patched`).
        unsafe {
            (p as *mut Header).write(Header { stamp: AtomicU64::new(init.stamp), next: 0, len });
            if let Some((src, n)) = init.value {
                std::ptr::copy_nonoverlapping(src, p.add(DATA_OFFSET), n);
            }
            if let Some((off, src, m)) = init.patch {
                debug_assert!(off + m <= n);
                std::ptr::copy_nonoverlapping(src, p.add(DATA_OFFSET + off), m);
            }
        }
        p as usize
    }

    unsafe fn deref<'a>(ptr: usize) -> &'a Version {
        // SAFETY: caller guarantees `ptr` is live; the metadata is the data length.
        unsafe {
            &*(std::ptr::slice_from_raw_parts(ptr as *const u8, data_len(ptr)) as *const Version)
        }
    }

    unsafe fn deref_mut<'a>(ptr: usize) -> &'a mut Version {
        // SAFETY: as in `deref`, and the caller has exclusive access.
        unsafe {
            &mut *(std::ptr::slice_from_raw_parts_mut(ptr as *mut u8, data_len(ptr))
                as *mut Version)
        }
    }

    unsafe fn drop(ptr: usize) {
        // SAFETY: no field has drop glue (atomics, an epoch pointer that does
        // not own, plain bytes); free with the layout `init` used.
        unsafe { dealloc(ptr as *mut u8, layout(data_len(ptr))) }
    }
}

impl Version {
    /// A new uncommitted version owned by `owner` holding `value` (`None`: tombstone).
    pub(crate) fn owned(owner: Tid, value: Option<&[u8]>) -> Owned<Version> {
        debug_assert!(owner.0 & OWNER_MARKER == 0, "tid must not use the marker bit");
        Version::with_stamp(OWNER_MARKER | owner.0, value)
    }

    /// A new uncommitted version: `base` with `bytes` written at `offset`.
    /// The caller has checked that the range lies inside `base`.
    pub(crate) fn owned_patched(
        owner: Tid,
        base: &[u8],
        offset: usize,
        bytes: &[u8],
    ) -> Owned<Version> {
        let end = offset.checked_add(bytes.len()).expect("callers check patch ranges");
        assert!(end <= base.len(), "callers check patch ranges");
        Version::build(OWNER_MARKER | owner.0, Some(base), Some((offset, bytes)))
    }

    /// Write `bytes` over this version's value at `offset`: for a version
    /// not yet published (its builder holds it alone). The caller has
    /// checked that the range lies inside the value.
    pub(crate) fn overwrite(&mut self, offset: usize, bytes: &[u8]) {
        assert!(self.len != TOMBSTONE, "a patch of a tombstone");
        self.data[offset..offset + bytes.len()].copy_from_slice(bytes);
    }

    fn with_stamp(stamp: u64, value: Option<&[u8]>) -> Owned<Version> {
        Version::build(stamp, value, None)
    }

    fn build(stamp: u64, value: Option<&[u8]>, patch: Option<(usize, &[u8])>) -> Owned<Version> {
        if let Some(v) = value {
            assert!(v.len() <= VALUE_BYTES_MAX, "callers check value sizes");
        }
        // The slices outlive `init`, which copies them.
        Owned::<Version>::init(VersionInit {
            stamp,
            value: value.map(|v| (v.as_ptr(), v.len())),
            patch: patch.map(|(off, b)| (off, b.as_ptr(), b.len())),
        })
    }

    /// A version committed before any running transaction (recovery, tests).
    pub(crate) fn committed(csn: Csn, value: Option<&[u8]>) -> Owned<Version> {
        assert!(csn & OWNER_MARKER == 0);
        Version::with_stamp(csn, value)
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
        (self.len != TOMBSTONE).then_some(&self.data)
    }

    pub(crate) fn is_tombstone(&self) -> bool {
        self.len == TOMBSTONE
    }

    /// The version at `addr`.
    ///
    /// # Safety
    /// `addr` must come from [`Version::addr`] (or `Pointer::into_usize`) of
    /// a version that has not been freed yet.
    pub(crate) unsafe fn from_addr<'a>(addr: usize) -> &'a Version {
        // SAFETY: forwarded to the caller.
        unsafe { <Version as Pointable>::deref(addr) }
    }

    /// The version's address, used as an identity token.
    pub(crate) fn addr(&self) -> usize {
        self as *const Version as *const u8 as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_epoch::Shared;

    #[test]
    fn stamps_round_trip() {
        assert_eq!(Stamp::decode(42), Stamp::Committed(42));
        assert_eq!(Stamp::decode(OWNER_MARKER | 7), Stamp::Owner(Tid(7)));
        assert_eq!(Stamp::decode(STAMP_ABORTED), Stamp::Aborted);
        let v = Version::owned(Tid(9), Some(b"x"));
        assert_eq!(v.stamp(), Stamp::Owner(Tid(9)));
        v.set_committed(5);
        assert_eq!(v.stamp(), Stamp::Committed(5));
        let w = Version::owned(Tid(9), None);
        assert!(w.is_tombstone());
        assert_eq!(w.value(), None);
        w.set_aborted();
        assert_eq!(w.stamp(), Stamp::Aborted);
    }

    #[test]
    fn values_live_inline_and_patch() {
        for n in [0usize, 1, 7, 8, 80, 4096] {
            let base: Vec<u8> = (0..n).map(|i| i as u8).collect();
            let v = Version::owned(Tid(1), Some(&base));
            assert_eq!(v.value(), Some(&base[..]));
            assert!(!v.is_tombstone());
            if n >= 4 {
                let p = Version::owned_patched(Tid(1), &base, 1, &[9, 9]);
                let mut want = base.clone();
                want[1..3].copy_from_slice(&[9, 9]);
                assert_eq!(p.value(), Some(&want[..]));
            }
            // Through an Atomic and back, as chains use it.
            let a: Atomic<Version> = Atomic::from(v);
            let guard = crossbeam_epoch::pin();
            let s = a.load(Ordering::Acquire, &guard);
            // SAFETY: just stored, still owned by `a`.
            let r: &Version = unsafe { s.deref() };
            assert_eq!(r.value().map(<[u8]>::len), Some(n));
            assert_eq!(r.addr(), s.into_usize_for_test());
            // SAFETY: `a` is the only reference.
            drop(unsafe { a.into_owned() });
        }
    }

    trait IntoUsize {
        fn into_usize_for_test(self) -> usize;
    }
    impl IntoUsize for Shared<'_, Version> {
        fn into_usize_for_test(self) -> usize {
            use crossbeam_epoch::Pointer;
            self.into_usize()
        }
    }
}
