//! The seam through which a program's threads and time go (design record
//! 0015): [`spawn`], [`now`], [`sleep`], [`yield_now`], [`snooze`], the
//! waits [`wait_until`], [`recv_timeout`], [`recv`], [`cv_wait`],
//! [`cv_wait_for`] and [`cv_wait_until`].
//!
//! Outside a simulation each is the operating system's call. Inside one
//! ([`sim::run`], with the `sim` feature), every thread started through
//! [`spawn`] is a task of one seeded scheduler that runs one task at a
//! time, on simulated time: a seed replays the same interleaving, the same
//! waits and the same clock readings, and [`trace`] hashes what happened,
//! in order, so that two runs of a seed can be compared.
//!
//! The rule a program under simulation keeps: it reaches a seam call only
//! while it holds no lock that another task may need before it runs again
//! (the task holding the scheduler's turn would wait for it forever).

#![deny(clippy::unwrap_used, rust_2018_idioms)]

use std::time::{Duration, Instant};

#[cfg(feature = "sim")]
pub mod sim;

/// A thread started by [`spawn`].
pub struct JoinHandle<T> {
    inner: std::thread::JoinHandle<T>,
    #[cfg(feature = "sim")]
    task: Option<sim::TaskRef>,
}

impl<T> JoinHandle<T> {
    /// Wait for the thread to finish (in a simulation, a wait of the
    /// scheduler's).
    pub fn join(self) -> std::thread::Result<T> {
        #[cfg(feature = "sim")]
        if let Some(task) = &self.task {
            task.wait_done();
        }
        self.inner.join()
    }

    /// Whether the thread has finished.
    pub fn is_finished(&self) -> bool {
        self.inner.is_finished()
    }
}

/// Start a thread named `name` running `f`.
pub fn spawn<F, T>(name: String, f: F) -> std::io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    #[cfg(feature = "sim")]
    if let Some(s) = sim::current() {
        return s.spawn(name, f);
    }
    let inner = std::thread::Builder::new().name(name).spawn(f)?;
    Ok(JoinHandle {
        inner,
        #[cfg(feature = "sim")]
        task: None,
    })
}

/// The time now.
#[inline]
pub fn now() -> Instant {
    #[cfg(feature = "sim")]
    if let Some(s) = sim::current() {
        return s.now();
    }
    Instant::now()
}

/// The time since an instant, on the seam's clock ([`now`]): for
/// `instant.elapsed()`, which reads the operating system's.
pub trait Elapsed {
    /// How long ago this instant was (zero if it is ahead).
    fn elapsed_now(&self) -> Duration;
}

impl Elapsed for Instant {
    #[inline]
    fn elapsed_now(&self) -> Duration {
        now().saturating_duration_since(*self)
    }
}

/// The wall clock now. In a simulation: a fixed day (2026-01-01) plus the
/// simulated time elapsed.
#[inline]
pub fn system_now() -> std::time::SystemTime {
    #[cfg(feature = "sim")]
    if let Some(s) = sim::current() {
        return s.system_now();
    }
    std::time::SystemTime::now()
}

/// Sleep for `d`.
#[inline]
pub fn sleep(d: Duration) {
    #[cfg(feature = "sim")]
    if let Some(s) = sim::current() {
        return s.sleep(d);
    }
    std::thread::sleep(d);
}

/// Let another thread run.
#[inline]
pub fn yield_now() {
    #[cfg(feature = "sim")]
    if let Some(s) = sim::current() {
        return s.yield_now();
    }
    std::thread::yield_now();
}

/// Wait until `ready()` holds or `deadline` passes (none: no deadline);
/// whether it holds. Outside a simulation it checks every `poll` of real
/// time; in one, at the scheduler's points, on simulated time.
pub fn wait_until(deadline: Option<Instant>, poll: Duration, ready: impl FnMut() -> bool) -> bool {
    #[cfg(feature = "sim")]
    if let Some(s) = sim::current() {
        return s.wait_until(deadline, ready);
    }
    wait_until_os(deadline, poll, ready)
}

/// [`wait_until`] on the operating system's clock.
fn wait_until_os(
    deadline: Option<Instant>,
    poll: Duration,
    mut ready: impl FnMut() -> bool,
) -> bool {
    loop {
        if ready() {
            return true;
        }
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left.is_some_and(|l| l.is_zero()) {
            return false;
        }
        std::thread::sleep(left.map_or(poll, |l| l.min(poll)));
    }
}

/// Mix an event, the concatenation of `parts`, into the running
/// simulation's trace hash (nothing outside one, and nothing at all
/// without the `sim` feature: no allocation, no check).
#[inline]
pub fn trace(parts: &[&[u8]]) {
    #[cfg(feature = "sim")]
    if let Some(s) = sim::current() {
        for p in parts {
            s.trace(p);
        }
    }
    let _ = parts;
}

/// A spin-wait's pause (`backoff.snooze()`); in a simulation, a turn
/// given up for a simulated microsecond: the task waited for must run,
/// and may be asleep.
#[inline]
pub fn snooze(backoff: &crossbeam_utils::Backoff) {
    #[cfg(feature = "sim")]
    if let Some(s) = sim::current() {
        return s.sleep(Duration::from_micros(1));
    }
    backoff.snooze();
}

/// One turn of a spin loop (`std::hint::spin_loop()`); in a simulation,
/// as [`snooze`].
#[inline]
pub fn spin_loop() {
    #[cfg(feature = "sim")]
    if let Some(s) = sim::current() {
        return s.sleep(Duration::from_micros(1));
    }
    std::hint::spin_loop();
}

/// A message from `rx` (a crossbeam channel), waiting as long as it takes.
pub fn recv<T>(rx: &crossbeam_channel::Receiver<T>) -> Result<T, crossbeam_channel::RecvError> {
    #[cfg(feature = "sim")]
    if let Some(s) = sim::current() {
        use crossbeam_channel::{RecvError, TryRecvError};
        let got = s.take(None, || match rx.try_recv() {
            Ok(v) => Some(Ok(v)),
            Err(TryRecvError::Disconnected) => Some(Err(RecvError)),
            Err(TryRecvError::Empty) => None,
        });
        return got.unwrap_or(Err(RecvError));
    }
    rx.recv()
}

/// A message from `rx` (a crossbeam channel) within `timeout`: the
/// channel's own timed receive outside a simulation; in one, a wait of the
/// scheduler's.
pub fn recv_timeout<T>(
    rx: &crossbeam_channel::Receiver<T>,
    timeout: Duration,
) -> Result<T, crossbeam_channel::RecvTimeoutError> {
    #[cfg(feature = "sim")]
    if let Some(s) = sim::current() {
        use crossbeam_channel::{RecvTimeoutError, TryRecvError};
        let got = s.take(Some(s.now() + timeout), || match rx.try_recv() {
            Ok(v) => Some(Ok(v)),
            Err(TryRecvError::Disconnected) => Some(Err(RecvTimeoutError::Disconnected)),
            Err(TryRecvError::Empty) => None,
        });
        return got.unwrap_or(Err(RecvTimeoutError::Timeout));
    }
    rx.recv_timeout(timeout)
}

/// Wait on `cv`, giving `guard`'s lock up meanwhile. In a simulation the
/// lock is given up for a short simulated sleep and taken again: a
/// spurious wakeup, which a condition variable's caller handles already.
pub fn cv_wait<T>(cv: &parking_lot::Condvar, guard: &mut parking_lot::MutexGuard<'_, T>) {
    #[cfg(feature = "sim")]
    if let Some(s) = sim::current() {
        return parking_lot::MutexGuard::unlocked(guard, || s.sleep(sim::CV_NAP));
    }
    cv.wait(guard);
}

/// [`cv_wait`] for at most `timeout`; whether it timed out.
pub fn cv_wait_for<T>(
    cv: &parking_lot::Condvar,
    guard: &mut parking_lot::MutexGuard<'_, T>,
    timeout: Duration,
) -> bool {
    #[cfg(feature = "sim")]
    if let Some(s) = sim::current() {
        let deadline = s.now() + timeout;
        parking_lot::MutexGuard::unlocked(guard, || s.sleep(sim::CV_NAP.min(timeout)));
        return s.now() >= deadline;
    }
    cv.wait_for(guard, timeout).timed_out()
}

/// [`cv_wait`] until `deadline` at the latest; whether it timed out.
pub fn cv_wait_until<T>(
    cv: &parking_lot::Condvar,
    guard: &mut parking_lot::MutexGuard<'_, T>,
    deadline: Instant,
) -> bool {
    #[cfg(feature = "sim")]
    if let Some(s) = sim::current() {
        let left = deadline.saturating_duration_since(s.now());
        parking_lot::MutexGuard::unlocked(guard, || s.sleep(sim::CV_NAP.min(left)));
        return s.now() >= deadline;
    }
    cv.wait_until(guard, deadline).timed_out()
}

/// Lock `m`, for a lock that may be held across a seam call (a store
/// request, a sleep): in a simulation a task that finds it held gives its
/// turn up until the holder lets it go, instead of blocking the scheduler.
#[inline]
pub fn lock<T>(m: &parking_lot::Mutex<T>) -> parking_lot::MutexGuard<'_, T> {
    #[cfg(feature = "sim")]
    if let Some(s) = sim::current() {
        loop {
            if let Some(g) = m.try_lock() {
                return g;
            }
            s.sleep(Duration::from_micros(1));
        }
    }
    m.lock()
}
