//! Prompt wake-ups for the threads on the commit path.
//!
//! The log's threads (the streams' lanes, the committer, the replica
//! writers and the hedge helpers they start) sleep most of the time and
//! run briefly: an append's answer wakes a lane, which publishes the part
//! and releases its transactions. When the workers keep every core busy,
//! a thread that wakes up waits for a running worker's time slice to end
//! before it gets a core; on Linux's EEVDF scheduler that is up to the
//! slice (about 3 ms), and it is paid on every commit's path. Measured on
//! 2 cores with 8 closed-loop workers: the lanes saw an append of 8.1 ms
//! (drawn) after 9.2 ms at the median.
//!
//! Since Linux 6.12 a thread can ask for a shorter slice (`sched_setattr`
//! with `sched_runtime`, 0.1 to 100 ms). A shorter slice gives the thread
//! an earlier deadline, so it preempts a running thread when it wakes; its
//! share of the CPU stays the same (the weight is the nice value's). It
//! needs no privilege. Older kernels ignore the field; on other systems
//! this does nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The slice the log's threads ask for by default
/// ([`crate::Options::log_thread_slice`]): the kernel's smallest.
pub const LOG_THREAD_SLICE_DEFAULT: Duration = Duration::from_micros(100);

/// Whether a request failed once (it is said once per process).
static FAILED: AtomicBool = AtomicBool::new(false);

/// Ask the scheduler for `slice` for the calling thread (and the threads
/// it starts later, which inherit it). `None` leaves the thread alone.
/// Best effort: a refusal is logged once and otherwise ignored.
pub(crate) fn request_slice(slice: Option<Duration>) {
    let Some(slice) = slice else { return };
    if let Err(e) = set_slice(slice)
        && !FAILED.swap(true, Ordering::Relaxed)
    {
        tracing::debug!("cannot shorten the log threads' scheduler slice: {e}");
    }
}

#[cfg(target_os = "linux")]
fn set_slice(slice: Duration) -> std::io::Result<()> {
    // SAFETY: `sched_attr` is plain data; the kernel reads `size` bytes of
    // it, and `size` is the struct's own. Thread 0 is the caller.
    let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
    attr.size = std::mem::size_of::<libc::sched_attr>() as u32;
    attr.sched_policy = libc::SCHED_OTHER as u32;
    attr.sched_runtime = slice.as_nanos().clamp(100_000, 100_000_000) as u64;
    // The nice value is part of the request: keep the thread's own.
    // SAFETY: getpriority has no memory effects.
    attr.sched_nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    // SAFETY: a valid pointer to an initialized `sched_attr`, flags 0.
    let r = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const _, 0) };
    if r == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

#[cfg(not(target_os = "linux"))]
fn set_slice(_slice: Duration) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_can_ask_for_a_short_slice_without_privilege() {
        // Linux answers for any kernel since 3.14 (older than 6.12 ignore
        // the runtime of a normal thread); it must not refuse the request.
        let r = std::thread::spawn(|| set_slice(LOG_THREAD_SLICE_DEFAULT)).join().expect("thread");
        assert!(r.is_ok(), "{r:?}");
    }
}
