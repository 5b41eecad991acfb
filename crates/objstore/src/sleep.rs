//! The timed wait of a simulated request: what the `sim` store and its
//! pending appends sleep through.

use std::time::Duration;

/// Sleep `d`. This used to spin (yield) through the last 200 µs to cut
/// the OS sleep's ~0.1 ms overshoot, but under load a yielding thread loses
/// the CPU to busy worker threads for a whole time slice (milliseconds),
/// while a thread waking from sleep is scheduled promptly. A plain sleep is
/// the better model of a request waiting on the network. Most of the
/// overshoot was the kernel's timer slack, which `precise_timers` removes.
pub fn latency_sleep(d: Duration) {
    if !d.is_zero() {
        precise_timers();
        // The seam's: simulated time under its scheduler (design record
        // 0015), the OS's sleep otherwise.
        milliscale_seam::sleep(d);
    }
}

thread_local! {
    static PRECISE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Linux lets a sleeping thread wake up as late as its timer slack, 50 µs
/// by default: more than a whole simulated NVMe write (35 µs p50), so a
/// 35 µs request took about 0.1 ms. A device completes its write by
/// interrupt, with no such delay. The first simulated request on a thread
/// sets that thread's slack to 1 ns (`PR_SET_TIMERSLACK`); it stays so for
/// the thread's other timed waits too (the engine's own threads wake a
/// little more promptly after that). Elsewhere, nothing.
fn precise_timers() {
    #[cfg(target_os = "linux")]
    PRECISE.with(|done| {
        if !done.get() {
            done.set(true);
            // SAFETY: prctl(PR_SET_TIMERSLACK, n) takes plain integers and
            // changes only the calling thread's timer slack; it touches no
            // memory of ours.
            #[allow(unsafe_code)]
            unsafe {
                libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
            }
        }
    });
}
