//! The seeded scheduler (design record 0015): every thread started through
//! the seam inside [`run`] is a task; one task runs at a time, the one
//! holding the turn. At each seam call the running task gives the turn back
//! and the scheduler draws the next runnable task with the seed's
//! generator; when none is runnable, simulated time jumps to the earliest
//! sleeper's deadline. So a seed gives one interleaving, one sequence of
//! clock readings and one [`Report::trace`], every time.
//!
//! A wait on a condition ([`crate::wait_until`]) checks it at each of its
//! turns and sleeps in between, from 1 µs doubling to 1 ms of simulated
//! time, so that time moves when every task waits.
//!
//! When `run`'s closure returns, tasks still running (a program that
//! leaves threads behind) are let go: from then on their seam calls are
//! the operating system's.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::JoinHandle;

/// The longest sleep between two checks of a waited condition.
const POLL_MAX: Duration = Duration::from_millis(1);

/// How long a condition variable's wait sleeps before it wakes
/// (spuriously) to check its caller's condition again.
pub(crate) const CV_NAP: Duration = Duration::from_micros(100);

/// What one run did.
#[derive(Debug)]
pub struct Report<T> {
    /// What the closure returned.
    pub value: T,
    /// The hash of the events traced ([`crate::trace`]) and of the order in
    /// which tasks ran, in order.
    pub trace: u64,
    /// Simulated time elapsed.
    pub elapsed: Duration,
    /// How many times the turn passed.
    pub switches: u64,
    /// How many tasks ran (the closure's included).
    pub tasks: usize,
}

/// Run `main` as the first task of a simulation seeded by `seed`.
pub fn run<T>(seed: u64, main: impl FnOnce() -> T) -> Report<T> {
    assert!(current().is_none(), "a simulation inside a simulation");
    let sim = Arc::new(Sim {
        st: Mutex::new(State {
            rng: SmallRng::seed_from_u64(seed),
            base: Instant::now(),
            elapsed: Duration::ZERO,
            running: Some(0),
            tasks: BTreeMap::from([(0, Task::Runnable)]),
            names: vec!["main".into()],
            trace: FNV_OFFSET,
            switches: 0,
            over: false,
        }),
        turns: parking_lot::RwLock::new(vec![Arc::new(Condvar::new())]),
    });
    CURRENT.with(|c| *c.borrow_mut() = Some((Arc::clone(&sim), 0)));
    let value = main();
    CURRENT.with(|c| *c.borrow_mut() = None);
    let mut st = sim.st.lock();
    st.over = true;
    sim.wake_all();
    Report {
        value,
        trace: st.trace,
        elapsed: st.elapsed,
        switches: st.switches,
        tasks: st.names.len(),
    }
}

/// A running simulation.
pub struct Sim {
    st: Mutex<State>,
    /// Per task, what it waits on for its turn (with `st`'s lock).
    turns: parking_lot::RwLock<Vec<Arc<Condvar>>>,
}

struct State {
    rng: SmallRng,
    /// The real time the simulation began: simulated instants are
    /// `base + elapsed`.
    base: Instant,
    elapsed: Duration,
    running: Option<usize>,
    tasks: BTreeMap<usize, Task>,
    names: Vec<String>,
    trace: u64,
    switches: u64,
    /// `run`'s closure returned: tasks left run freely.
    over: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Task {
    Runnable,
    /// Until this much simulated time has elapsed.
    Sleeping(Duration),
    Done,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

thread_local! {
    static CURRENT: RefCell<Option<(Arc<Sim>, usize)>> = const { RefCell::new(None) };
}

/// The simulation this thread is a task of, if any.
pub(crate) fn current() -> Option<Current> {
    CURRENT.with(|c| c.borrow().as_ref().map(|(s, id)| Current { sim: Arc::clone(s), id: *id }))
}

/// This thread's simulation and its task.
pub(crate) struct Current {
    sim: Arc<Sim>,
    id: usize,
}

/// A task started by [`crate::spawn`], to wait for.
pub(crate) struct TaskRef {
    sim: Arc<Sim>,
    id: usize,
}

impl TaskRef {
    /// Wait, as a task of the simulation (if it is still on), until the
    /// task is done.
    pub(crate) fn wait_done(&self) {
        let Some(me) = current() else { return };
        if !Arc::ptr_eq(&me.sim, &self.sim) {
            return;
        }
        me.wait_until(None, || self.sim.st.lock().tasks.get(&self.id) == Some(&Task::Done));
    }
}

impl State {
    /// Choose who runs next, moving time to the earliest sleeper's
    /// deadline when no task is runnable.
    fn pick(&mut self) -> Option<usize> {
        loop {
            let runnable: Vec<usize> = self
                .tasks
                .iter()
                .filter(|(_, t)| **t == Task::Runnable)
                .map(|(id, _)| *id)
                .collect();
            if !runnable.is_empty() {
                let next = runnable[self.rng.random_range(0..runnable.len())];
                self.trace = fnv(self.trace, &(next as u64).to_le_bytes());
                return Some(next);
            }
            let wake = self
                .tasks
                .values()
                .filter_map(|t| match t {
                    Task::Sleeping(until) => Some(*until),
                    _ => None,
                })
                .min()?;
            self.elapsed = self.elapsed.max(wake);
            for t in self.tasks.values_mut() {
                if matches!(t, Task::Sleeping(until) if *until <= wake) {
                    *t = Task::Runnable;
                }
            }
        }
    }
}

impl Sim {
    /// Hand the turn on (this task now in state `task`) and wait for it to
    /// come back.
    fn switch(&self, me: usize, task: Task) {
        let mine = self.turn_of(me);
        let mut st = self.st.lock();
        if st.over {
            return;
        }
        st.tasks.insert(me, task);
        st.switches += 1;
        st.running = st.pick();
        if st.running != Some(me) {
            self.wake(st.running);
            while st.running != Some(me) && !st.over {
                mine.wait(&mut st);
            }
        }
    }

    fn turn_of(&self, id: usize) -> Arc<Condvar> {
        Arc::clone(&self.turns.read()[id])
    }

    /// Wake the task given the turn.
    fn wake(&self, running: Option<usize>) {
        if let Some(id) = running {
            self.turns.read()[id].notify_one();
        }
    }

    fn wake_all(&self) {
        for c in self.turns.read().iter() {
            c.notify_all();
        }
    }
}

impl Current {
    pub(crate) fn now(&self) -> Instant {
        let st = self.sim.st.lock();
        st.base + st.elapsed
    }

    pub(crate) fn system_now(&self) -> std::time::SystemTime {
        // 2026-01-01T00:00:00Z.
        let day = std::time::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
        day + self.sim.st.lock().elapsed
    }

    fn free(&self) -> bool {
        self.sim.st.lock().over
    }

    pub(crate) fn sleep(&self, d: Duration) {
        if self.free() {
            return std::thread::sleep(d);
        }
        let until = self.sim.st.lock().elapsed + d;
        self.sim.switch(self.id, Task::Sleeping(until));
    }

    pub(crate) fn yield_now(&self) {
        self.sim.switch(self.id, Task::Runnable);
    }

    pub(crate) fn wait_until(
        &self,
        deadline: Option<Instant>,
        mut ready: impl FnMut() -> bool,
    ) -> bool {
        let mut poll = Duration::from_micros(1);
        loop {
            if ready() {
                return true;
            }
            if self.free() {
                return crate::wait_until_os(deadline, POLL_MAX, ready);
            }
            let now = self.now();
            let left = deadline.map(|d| d.saturating_duration_since(now));
            if left.is_some_and(|l| l.is_zero()) {
                return false;
            }
            self.sleep(left.map_or(poll, |l| l.min(poll)));
            poll = (poll * 2).min(POLL_MAX);
        }
    }

    /// Wait until `try_take` gives something (a message, or the end of
    /// its channel) or `deadline` passes (`None` then).
    pub(crate) fn take<R>(
        &self,
        deadline: Option<Instant>,
        mut try_take: impl FnMut() -> Option<R>,
    ) -> Option<R> {
        let mut got = None;
        self.wait_until(deadline, || {
            got = try_take();
            got.is_some()
        });
        got
    }

    pub(crate) fn trace(&self, event: &[u8]) {
        let mut st = self.sim.st.lock();
        st.trace = fnv(st.trace, event);
    }

    /// Start `f` as a task: it waits for its turn before it runs, and the
    /// caller gives the turn up once (so the new task may run first).
    pub(crate) fn spawn<F, T>(&self, name: String, f: F) -> std::io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let id = {
            let mut st = self.sim.st.lock();
            let id = st.names.len();
            st.names.push(name.clone());
            st.tasks.insert(id, Task::Runnable);
            self.sim.turns.write().push(Arc::new(Condvar::new()));
            id
        };
        let sim = Arc::clone(&self.sim);
        let body = move || {
            CURRENT.with(|c| *c.borrow_mut() = Some((Arc::clone(&sim), id)));
            {
                let mine = sim.turn_of(id);
                let mut st = sim.st.lock();
                while st.running != Some(id) && !st.over {
                    mine.wait(&mut st);
                }
            }
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let mut st = sim.st.lock();
            st.tasks.insert(id, Task::Done);
            if !st.over {
                st.switches += 1;
                st.running = st.pick();
                sim.wake(st.running);
            }
            drop(st);
            CURRENT.with(|c| *c.borrow_mut() = None);
            out.unwrap_or_else(|e| std::panic::resume_unwind(e))
        };
        let inner = std::thread::Builder::new().name(name).spawn(body)?;
        self.yield_now();
        Ok(JoinHandle { inner, task: Some(TaskRef { sim: Arc::clone(&self.sim), id }) })
    }
}
