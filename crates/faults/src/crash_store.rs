//! A memory store with a fault schedule and a crash point: the store of
//! the crash simulations (`tests/crash.rs`, `tests/replica.rs`). See `tests/crash.rs`
//! for what the crash modes mean.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use objstore::pending::Stage;
use objstore::{
    Bytes, Hedge, MemoryStore, ObjectMeta, ObjectStore, PendingAppend, Result, StoreError,
};
use parking_lot::Mutex;
use rand::Rng;
use rand::rngs::SmallRng;

/// How the crashing write ends.
#[derive(Debug, Clone, Copy)]
pub enum CrashMode {
    /// It never reached the store.
    Dropped,
    /// It landed, but the process died before hearing so.
    Landed,
    /// An append landed partly (a torn write); other writes are dropped.
    Torn,
    /// The first append from `crash_at / 4` writes on is held back; if
    /// another append lands meanwhile (within 30 ms), the process dies with
    /// the held one still on its way. With lanes, that is a part lost
    /// behind a later part of its group.
    Overtaken,
}

#[derive(Debug)]
pub struct Schedule {
    pub writes: u64,
    pub crash_at: u64,
    pub mode: CrashMode,
    pub crashed: bool,
    pub rng: SmallRng,
    /// Fault rates per request before the crash.
    pub throttle: f64,
    pub ambiguous: f64,
    /// Appends take up to this many microseconds...
    pub append_us: u64,
    /// ...and one in 8 takes 5 ms more.
    pub slow_appends: bool,
    /// `Overtaken`: an append is being held back, and how many appends
    /// landed since.
    pub holding: Option<u32>,
    pub held_once: bool,
    /// Offer `start_append`: the log's appends then go out without their
    /// sender waiting (workers poll them), else through the synchronous
    /// call.
    pub asynchronous: bool,
}

/// A memory store with a fault schedule and a crash point.
#[derive(Debug)]
pub struct CrashStore {
    pub inner: Arc<MemoryStore>,
    pub s: Mutex<Schedule>,
}

pub enum Verdict {
    Go,
    /// Apply, then report a transient error (an ambiguous outcome).
    GoThenFail,
    Refuse(StoreError),
    Torn,
}

impl CrashStore {
    pub fn write(&self) -> Verdict {
        let mut s = self.s.lock();
        if s.crashed {
            return Verdict::Refuse(StoreError::Fatal("the process crashed".into()));
        }
        s.writes += 1;
        if s.writes == s.crash_at {
            match s.mode {
                CrashMode::Dropped => {
                    s.crashed = true;
                    return Verdict::Refuse(StoreError::Fatal("crashed".into()));
                }
                CrashMode::Landed => {
                    s.crashed = true;
                    return Verdict::GoThenFail;
                }
                CrashMode::Torn => {
                    s.crashed = true;
                    return Verdict::Torn;
                }
                CrashMode::Overtaken => {}
            }
        }
        let x: f64 = s.rng.random();
        if x < s.throttle {
            Verdict::Refuse(StoreError::Throttled("slow down".into()))
        } else if x < s.throttle + s.ambiguous {
            Verdict::GoThenFail
        } else {
            Verdict::Go
        }
    }

    fn read(&self) -> Result<()> {
        let mut s = self.s.lock();
        if s.crashed {
            return Err(StoreError::Fatal("the process crashed".into()));
        }
        if s.rng.random::<f64>() < s.throttle {
            return Err(StoreError::Throttled("slow down".into()));
        }
        Ok(())
    }

    /// `Overtaken`: hold this append back if it is the one, until another
    /// lands; returns true if the process died meanwhile (then this one
    /// never arrives).
    fn hold_back(&self) -> bool {
        {
            let mut s = self.s.lock();
            let due = matches!(s.mode, CrashMode::Overtaken) && s.writes >= s.crash_at / 4;
            if !due || s.crashed || s.held_once {
                return false;
            }
            s.held_once = true;
            s.holding = Some(0);
        }
        for _ in 0..30 {
            std::thread::sleep(Duration::from_millis(1));
            let mut s = self.s.lock();
            if s.holding.is_some_and(|n| n > 0) {
                s.crashed = true;
                return true;
            }
        }
        self.s.lock().holding = None;
        false
    }

    /// An append's time on the wire, before it reaches the store: a
    /// crash meanwhile refuses it.
    fn wire_time(&self) -> Duration {
        let mut s = self.s.lock();
        let most = s.append_us;
        let mut us = s.rng.random_range(0..=most);
        if s.slow_appends && s.rng.random_bool(0.125) {
            us += 5_000;
        }
        Duration::from_micros(us)
    }

    /// An append reaches the store.
    fn arrive(&self, key: &str, offset: u64, body: Bytes) -> Result<ObjectMeta> {
        if self.hold_back() {
            return Err(StoreError::Fatal("crashed while this append was on its way".into()));
        }
        match self.write() {
            Verdict::Go => {
                let r = self.inner.append(key, offset, body);
                if let Some(n) = &mut self.s.lock().holding {
                    *n += u32::from(r.is_ok());
                }
                r
            }
            Verdict::GoThenFail => {
                let _ = self.inner.append(key, offset, body);
                Err(StoreError::Transient("the response was lost".into()))
            }
            Verdict::Refuse(e) => Err(e),
            Verdict::Torn => {
                let cut = (body.len() / 2).max(1);
                let _ = self.inner.append(key, offset, body.slice(..cut));
                Err(StoreError::Fatal("crashed mid-append".into()))
            }
        }
    }

    pub fn crashed(&self) -> bool {
        self.s.lock().crashed
    }

    fn apply<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        match self.write() {
            Verdict::Go => f(),
            Verdict::GoThenFail => {
                let _ = f();
                Err(StoreError::Transient("the response was lost".into()))
            }
            Verdict::Refuse(e) => Err(e),
            Verdict::Torn => Err(StoreError::Fatal("crashed".into())),
        }
    }
}

impl ObjectStore for CrashStore {
    fn put(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        self.apply(|| self.inner.put(key, body))
    }
    fn put_if_absent(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        self.apply(|| self.inner.put_if_absent(key, body))
    }
    fn put_if_match(&self, key: &str, body: Bytes, etag: &str) -> Result<ObjectMeta> {
        self.apply(|| self.inner.put_if_match(key, body, etag))
    }
    fn append(&self, key: &str, offset: u64, body: Bytes) -> Result<ObjectMeta> {
        let delay = self.wire_time();
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        self.arrive(key, offset, body)
    }
    fn start_append(
        self: Arc<Self>,
        key: &str,
        offset: u64,
        body: Bytes,
        _hedge_after: Option<Duration>,
    ) -> Option<PendingAppend> {
        if !self.s.lock().asynchronous {
            return None;
        }
        // The same request, answered to whoever polls once its time is up.
        let at = Instant::now() + self.wire_time();
        let key = key.to_owned();
        Some(PendingAppend::new(Stage::At(
            at,
            Box::new(move || Stage::Done((self.arrive(&key, offset, body), Hedge::NotSent))),
        )))
    }
    fn get(&self, key: &str) -> Result<Bytes> {
        self.read()?;
        self.inner.get(key)
    }
    fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        self.read()?;
        self.inner.get_range(key, range)
    }
    fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.read()?;
        self.inner.head(key)
    }
    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        self.read()?;
        self.inner.list(prefix)
    }
    fn delete(&self, key: &str) -> Result<()> {
        self.apply(|| self.inner.delete(key))
    }
}
