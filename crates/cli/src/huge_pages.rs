//! Transparent huge pages for the process: on or off, by command.
//!
//! The binary's allocator (mimalloc) asks the kernel for transparent huge
//! pages on its arenas (`madvise`), which the kernel grants where
//! `/sys/kernel/mm/transparent_hugepage/enabled` is `madvise` or `always`.
//! They trade loading for reading (BENCHMARKS.md, "The engine in memory"):
//! - a loaded database reads faster with them: a point read is an index
//!   descent, a record id slot and a version, each a load from anywhere in
//!   hundreds of MiB, and 2 MiB pages keep those addresses in the CPU's
//!   TLB (YCSB-C in memory 1.16x, YCSB-A 1.18x, the main job 1.11x);
//! - loading one is slower with them: the kernel zeroes a whole 2 MiB page
//!   at its first touch, and a recovery touches all of its memory for the
//!   first time (`recover` of a 1M-record log 1.3x the time), and
//!   half-used huge pages hold more resident memory (the main job's peak
//!   1.6x, most of it the simulated store's log objects).
//!
//! So they are on where a process mostly works on loaded data (the
//! benchmarks, replicas, checkpoints from the log) and off where its
//! time is mostly loading: `recover`, `dump`, `restore` and `inspect`.
//! `serve` does both, in turn ([`HugePages::OnceOpen`]): off while its
//! database opens (a restart is downtime, and a shard's restart time is
//! one of the cluster's goals), on from the moment it serves, since the
//! engine's reads are most of a server's CPU once its calls are cheap
//! (pipelined one-shot YCSB-A through `serve`: 1.15-1.2x the throughput,
//! BENCHMARKS.md). `--huge-pages on|off` decides instead, for the whole
//! run. Off is `PR_SET_THP_DISABLE`: no huge page for this process until
//! it is cleared, whatever the kernel's setting (`always` included); a
//! page touched while off stays small until the kernel's `khugepaged`
//! gathers it.

use clap::ValueEnum;

/// `--huge-pages`: whether the process takes transparent huge pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum HugePages {
    /// The allocator asks for them (the kernel decides).
    On,
    /// None for this process (`PR_SET_THP_DISABLE`).
    Off,
    /// Off until the command says it has opened its database, then on
    /// ([`allow`]): `serve`'s default, not a flag's value.
    #[value(skip)]
    OnceOpen,
}

/// Apply `choice`: nothing for `On`, and for `Off` tell the kernel to give
/// this process no huge page from now on. Call it before any database
/// opens: memory touched before keeps the pages it got.
pub(crate) fn apply(choice: HugePages) -> Result<(), String> {
    match choice {
        HugePages::On => Ok(()),
        HugePages::Off | HugePages::OnceOpen => set_disabled(true),
    }
}

/// For [`HugePages::OnceOpen`], once the database is open: huge pages from
/// now on (a failure is reported and changes nothing else).
pub(crate) fn allow(choice: HugePages) {
    if choice == HugePages::OnceOpen
        && let Err(e) = set_disabled(false)
    {
        eprintln!("milliscale: huge pages stay off: {e}");
    }
}

#[cfg(target_os = "linux")]
fn set_disabled(off: bool) -> Result<(), String> {
    nix::sys::prctl::set_thp_disable(off).map_err(|e| format!("huge pages: prctl: {e}"))
}

#[cfg(not(target_os = "linux"))]
fn set_disabled(_: bool) -> Result<(), String> {
    // No transparent huge pages to refuse.
    Ok(())
}

/// Whether this process has huge pages turned off (`PR_GET_THP_DISABLE`).
#[cfg(all(test, target_os = "linux"))]
pub(crate) fn disabled() -> bool {
    nix::sys::prctl::get_thp_disable().unwrap_or(false)
}
