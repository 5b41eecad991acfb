//! Autonomous commit (Autonomous Commit, `CommitProtocol::Autonomous`): workers
//! flush the log themselves once their buffer holds a flush unit, force
//! commit when they expect to be idle or wait for an ack, steal their
//! neighbours' buffers, and acknowledge commits themselves. The lanes'
//! threads are only a backstop, which these tests keep out of the way
//! with a long flush timeout unless they test it.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{WriteCounter, read_log_parts};
use milliscale::internals::record::Entry;
use milliscale::{CommitProtocol, Database, Options};
use objstore::pending::Stage;
use std::ops::Range;

use objstore::{Bytes, Hedge, MemoryStore, ObjectMeta, ObjectStore, PendingAppend, Result};

/// Long enough that the backstop never flushes during a test.
const NO_BACKSTOP: Duration = Duration::from_secs(60);

fn autonomous(store: Arc<dyn objstore::ObjectStore>, workers: usize) -> Options {
    Options::new()
        .add_store_handle(store)
        .workers(workers)
        .commit_protocol(CommitProtocol::Autonomous)
        .flush_timeout(NO_BACKSTOP)
        .max_idle(Duration::ZERO)
}

fn put(db: &Database, t: &milliscale::Table, k: &[u8]) -> milliscale::CommitAck {
    let mut tx = db.begin().expect("begin");
    tx.put(t, k, b"v").expect("put");
    tx.commit().expect("commit")
}

fn worker_flushes(db: &Database) -> u64 {
    db.log_metrics().expect("a log").streams.iter().map(|s| s.worker_flushes).sum()
}

/// A buffer that reaches the flush unit is written by the worker that
/// filled it, inside its commit call: the ack is resolved when `commit`
/// returns, and no lane thread wrote anything.
#[test]
fn a_worker_flushes_a_full_unit_itself_and_acknowledges_it() {
    let db =
        Database::open(autonomous(Arc::new(MemoryStore::new()), 1).flush_unit(1)).expect("open");
    let t = db.create_table("t").expect("table");
    for i in 0..20u32 {
        let ack = put(&db, &t, &i.to_be_bytes());
        assert!(ack.is_acknowledged(), "commit {i} was flushed and acknowledged by its worker");
    }
    let m = db.log_metrics().expect("a log");
    let appends: u64 = m.streams.iter().map(|s| s.appends).sum();
    assert!(appends >= 20, "one append per commit at a 1-byte unit, got {appends}");
    assert_eq!(worker_flushes(&db), appends, "every append was a worker's");
    db.close().expect("close");
}

/// Below the flush unit nothing is written at commit; a worker that then
/// waits for its ack is idle, so it flushes (force commit) instead of
/// waiting for the backstop's minute.
#[test]
fn a_waiting_worker_forces_its_commit_out() {
    let db = Database::open(autonomous(Arc::new(MemoryStore::new()), 1)).expect("open");
    let t = db.create_table("t").expect("table");
    let ack = put(&db, &t, b"a");
    std::thread::sleep(Duration::from_millis(20));
    assert!(!ack.is_acknowledged(), "below the flush unit, nothing was written yet");
    assert_eq!(worker_flushes(&db), 0);
    let started = Instant::now();
    ack.wait().expect("acknowledged");
    assert!(started.elapsed() < NO_BACKSTOP / 2, "the waiter flushed, not the backstop");
    assert_eq!(worker_flushes(&db), 1);
    db.close().expect("close");
}

/// A worker whose transactions arrive with idle gaps of at least
/// `max_idle` predicts that it will be idle after this one too, and
/// flushes at once, below the flush unit.
#[test]
fn a_worker_that_idles_between_transactions_flushes_each_one() {
    let db = Database::open(
        autonomous(Arc::new(MemoryStore::new()), 1).max_idle(Duration::from_millis(2)),
    )
    .expect("open");
    let t = db.create_table("t").expect("table");
    // A busy worker first: no idle time, nothing flushed.
    for i in 0..20u32 {
        let _ack = put(&db, &t, &i.to_be_bytes());
    }
    assert_eq!(worker_flushes(&db), 0, "a busy worker does not force");
    // Then gaps of 10 ms: the average idle time climbs past 2 ms within a
    // few transactions, and from then on every commit goes out at once.
    let mut flushed_at_once = 0;
    for i in 0..30u32 {
        std::thread::sleep(Duration::from_millis(10));
        let ack = put(&db, &t, &(100 + i).to_be_bytes());
        if i >= 10 {
            assert!(ack.is_acknowledged(), "an idle worker's commit {i} went out at once");
            flushed_at_once += 1;
        }
    }
    assert!(worker_flushes(&db) >= flushed_at_once);
    db.close().expect("close");
}

/// What no worker flushes, the backstop does, `flush_timeout` after the
/// entry arrived: a worker that commits and leaves is not stranded.
#[test]
fn the_backstop_flushes_what_no_worker_did() {
    let db = Database::open(
        autonomous(Arc::new(MemoryStore::new()), 1).flush_timeout(Duration::from_millis(20)),
    )
    .expect("open");
    let t = db.create_table("t").expect("table");
    let ack = put(&db, &t, b"a");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ack.is_acknowledged() {
        assert!(Instant::now() < deadline, "the backstop never flushed");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(worker_flushes(&db), 0, "no worker flushed");
    db.close().expect("close");
}

/// Log stealing: a worker's flush takes its neighbours' buffers of the
/// same stream along, so a neighbour's commit that sat below the flush
/// unit is durable after the other worker's flush.
#[test]
fn a_flush_takes_the_neighbours_buffers_along() {
    let db = Database::open(autonomous(Arc::new(MemoryStore::new()), 2)).expect("open");
    let t = db.create_table("t").expect("table");
    // Worker 0 (group 0) commits and leaves its entry in its buffer.
    let parked = put(&db, &t, b"a");
    std::thread::scope(|s| {
        s.spawn(|| {
            // Worker 1 (group 1, the same stream) commits and waits: its
            // forced flush cuts group 0's buffer too.
            put(&db, &t, b"b").wait().expect("acknowledged");
        });
    });
    assert!(parked.is_acknowledged(), "worker 0's commit went out with worker 1's flush");
    let m = db.log_metrics().expect("a log");
    assert_eq!(m.streams.len(), 1, "both groups in one stream");
    assert_eq!(worker_flushes(&db), 1, "one flush carried both");
    db.close().expect("close");
}

/// Many workers flushing at once on a stream's lanes, with segments
/// rolling over every 3 appends: every CSN is in the log exactly once,
/// and each chain holds each group's entries in CSN order.
#[test]
fn concurrent_worker_flushes_log_every_csn_once_in_order() {
    let store = WriteCounter::new(Arc::new(MemoryStore::new()));
    let db = Database::open(
        autonomous(store.clone(), 4)
            .flush_unit(200)
            .segment_parts_max(3)
            .max_idle(Duration::from_micros(50)),
    )
    .expect("open");
    let t = db.create_table("t").expect("table");
    std::thread::scope(|s| {
        for w in 0..4u32 {
            let (db, t) = (&db, &t);
            s.spawn(move || {
                let mut acks = Vec::new();
                for i in 0..300u32 {
                    acks.push(put(db, t, format!("w{w}-{}", i % 11).as_bytes()));
                    if i % 50 == 49 {
                        for a in acks.drain(..) {
                            a.wait().expect("acknowledged");
                        }
                    }
                }
            });
        }
    });
    let next = db.stats().next_csn;
    assert!(worker_flushes(&db) > 10, "workers flushed: {}", worker_flushes(&db));
    db.close().expect("close");
    for (key, writes) in store.writes.lock().iter() {
        assert!(writes.len() <= 3, "{key} took {} appends", writes.len());
    }
    let mut seen = BTreeMap::new();
    let mut last = BTreeMap::<(String, u32), u64>::new();
    for (key, parts) in read_log_parts(&*store) {
        let chain = key[..key.rfind("/s").expect("a segment key")].to_owned();
        for part in parts {
            for e in part.entries {
                let l = last.entry((chain.clone(), part.group)).or_default();
                assert!(e.csn() > *l, "{key}: a chain holds each group's log in CSN order");
                *l = e.csn();
                assert!(matches!(e, Entry::Commit { .. }), "no aborts here");
                assert!(seen.insert(e.csn(), ()).is_none(), "CSN {} logged twice", e.csn());
            }
        }
    }
    let all: Vec<u64> = seen.into_keys().collect();
    assert_eq!(all, (1..next).collect::<Vec<_>>(), "CSNs are dense and all logged");
}

/// A memory store with an asynchronous client whose appends answer only
/// while the gate is open (the tests open the database with it open: the
/// catalog's commits wait for their acks): what a worker does with an append in flight.
#[derive(Debug)]
struct AsyncGate {
    inner: MemoryStore,
    open: std::sync::atomic::AtomicBool,
}

impl AsyncGate {
    fn new(open: bool) -> Arc<AsyncGate> {
        Arc::new(AsyncGate { inner: MemoryStore::new(), open: open.into() })
    }

    fn set_open(&self, open: bool) {
        self.open.store(open, std::sync::atomic::Ordering::SeqCst);
    }

    /// The append's stage: lands once the gate is open (it looks again
    /// every 200 µs).
    fn stage(self: Arc<Self>, key: String, offset: u64, body: Bytes) -> Stage {
        Stage::At(
            Instant::now(),
            Box::new(move || {
                if self.open.load(std::sync::atomic::Ordering::SeqCst) {
                    Stage::Done((self.inner.append(&key, offset, body), Hedge::NotSent))
                } else {
                    Stage::At(
                        Instant::now() + Duration::from_micros(200),
                        Box::new(move || self.stage(key, offset, body)),
                    )
                }
            }),
        )
    }
}

impl ObjectStore for AsyncGate {
    fn put(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        self.inner.put(key, body)
    }
    fn put_if_absent(&self, key: &str, body: Bytes) -> Result<ObjectMeta> {
        self.inner.put_if_absent(key, body)
    }
    fn put_if_match(&self, key: &str, body: Bytes, etag: &str) -> Result<ObjectMeta> {
        self.inner.put_if_match(key, body, etag)
    }
    fn append(&self, key: &str, offset: u64, body: Bytes) -> Result<ObjectMeta> {
        // The synchronous call waits at the gate too.
        while !self.open.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_micros(200));
        }
        self.inner.append(key, offset, body)
    }
    fn start_append(
        self: Arc<Self>,
        key: &str,
        offset: u64,
        body: Bytes,
        _hedge_after: Option<Duration>,
    ) -> Option<PendingAppend> {
        let key = key.to_owned();
        Some(PendingAppend::new(self.stage(key, offset, body)))
    }
    delegate_reads!();
}

fn appends(db: &Database) -> u64 {
    db.log_metrics().expect("a log").streams.iter().map(|s| s.appends).sum()
}

/// On a store with an asynchronous client a worker sends its append and
/// goes on (Autonomous Commit's workers submit their I/O and poll it): the commit
/// returns with the append in flight, and the worker finishes it after a
/// later transaction of its own, which acknowledges it. The lanes' threads
/// take no part.
#[test]
fn a_worker_sends_its_append_and_finishes_it_after_its_next_transaction() {
    let store = AsyncGate::new(true);
    let db = Database::open(autonomous(store.clone(), 1).flush_unit(200)).expect("open");
    let t = db.create_table("t").expect("table");
    store.set_open(false);
    // Over the unit: flushed at commit, and in flight at the closed gate.
    let mut tx = db.begin().expect("begin");
    tx.put(&t, b"big", &[7u8; 300]).expect("put");
    let big = tx.commit().expect("commit");
    assert_eq!(worker_flushes(&db), 1, "the worker sent it");
    std::thread::sleep(Duration::from_millis(20));
    assert!(!big.is_acknowledged(), "the append has not answered");
    assert_eq!(appends(&db), 0, "nothing finished");
    store.set_open(true);
    // Under the unit: no flush; the worker finishes what landed.
    let small = put(&db, &t, b"s");
    assert!(big.is_acknowledged(), "the worker's next transaction finished the append");
    assert!(!small.is_acknowledged(), "the small commit was not flushed");
    assert_eq!((worker_flushes(&db), appends(&db)), (1, 1));
    db.close().expect("close");
}

/// A worker that sent an append and then left (no transaction after it)
/// does not strand it: the lanes' threads finish appends left in flight
/// past `flush_timeout`.
#[test]
fn the_backstop_finishes_an_append_a_worker_left_in_flight() {
    let store = AsyncGate::new(true);
    let db = Database::open(
        autonomous(store.clone(), 1).flush_unit(1).flush_timeout(Duration::from_millis(20)),
    )
    .expect("open");
    let t = db.create_table("t").expect("table");
    store.set_open(false);
    let ack = put(&db, &t, b"a");
    assert!(!ack.is_acknowledged());
    store.set_open(true);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ack.is_acknowledged() {
        assert!(Instant::now() < deadline, "the backstop never finished the append");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!((worker_flushes(&db), appends(&db)), (1, 1), "finished, not written again");
    db.close().expect("close");
}

/// A worker that waits for its ack while its append is in flight waits
/// for that append (force commit leaves nothing of its stream out), not
/// for the backstop.
#[test]
fn a_waiting_worker_finishes_its_append_in_flight() {
    let store = AsyncGate::new(true);
    let db = Database::open(autonomous(store.clone(), 1).flush_unit(1)).expect("open");
    let t = db.create_table("t").expect("table");
    store.set_open(false);
    let ack = put(&db, &t, b"a");
    let opener = {
        let store = store.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            store.set_open(true);
        })
    };
    let started = Instant::now();
    ack.wait().expect("acknowledged");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(40), "it waited for the gate: {waited:?}");
    assert!(waited < NO_BACKSTOP / 2, "the waiter finished it, not the backstop");
    opener.join().expect("opener");
    assert_eq!((worker_flushes(&db), appends(&db)), (1, 1));
    db.close().expect("close");
}

/// A worker that expects to be idle (force commit) sends its append and,
/// if the answer is not in after a brief poll, hands it to a lane's
/// thread, which waits for it: the commit is acknowledged while the worker
/// idles, with no later transaction and long before the backstop.
#[test]
fn an_idle_worker_hands_its_append_in_flight_to_a_lane() {
    let store = AsyncGate::new(true);
    let db = Database::open(autonomous(store.clone(), 1).max_idle(Duration::from_millis(2)))
        .expect("open");
    let t = db.create_table("t").expect("table");
    // Gaps of 10 ms teach the worker that it idles between transactions.
    for i in 0..20u32 {
        std::thread::sleep(Duration::from_millis(10));
        put(&db, &t, &i.to_be_bytes()).wait().expect("acknowledged");
    }
    store.set_open(false);
    std::thread::sleep(Duration::from_millis(10));
    let flushes = worker_flushes(&db);
    let ack = put(&db, &t, b"idle");
    assert_eq!(worker_flushes(&db), flushes + 1, "an idle worker flushes below the unit");
    std::thread::sleep(Duration::from_millis(20));
    assert!(!ack.is_acknowledged(), "the gate holds the append");
    store.set_open(true);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !ack.is_acknowledged() {
        assert!(Instant::now() < deadline, "no lane finished the idle worker's append");
        std::thread::sleep(Duration::from_millis(1));
    }
    db.close().expect("close");
}
