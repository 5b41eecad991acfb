//! The target flush policy (`FlushPolicy::Target`): a stream sends the
//! appends whose price the latency they save is worth, so its appends a
//! second grow with the square root of its load, a lone transaction is
//! not held back, and a dollar ceiling becomes a request budget.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Gate, WriteCounter};
use milliscale::{Database, Error, FlushPolicy, Options};

/// The dollars of one append in these tests (S3 Express's).
const APPEND_USD: f64 = 1.13e-6;

/// A millisecond price that makes the gap 100 ms at 200 transactions a
/// second: `I = sqrt(2 a 3600 / (X R))`, so `X = 2 a 3600 / (R I^2)`.
fn price_for(gap: Duration, rate: f64) -> f64 {
    2.0 * APPEND_USD * 3600.0 / (rate * gap.as_secs_f64().powi(2))
}

fn open(counter: Arc<WriteCounter>, price: f64) -> Database {
    Database::open(
        Options::new()
            .add_store_handle(counter)
            .workers(2)
            .flush_policy(FlushPolicy::Target)
            .append_price(Some(APPEND_USD))
            .millisecond_price(price)
            .flush_max_wait(Duration::from_millis(300)),
    )
    .expect("open")
}

/// Commit (without waiting for acks) at `rate` a second from one thread
/// for `secs`, then wait for every ack. Returns the appends the store got
/// in the last second, and the stream's gap and rate estimate then.
fn drive(db: &Database, counter: &WriteCounter, rate: f64, secs: u64) -> (usize, Duration, f64) {
    let t = db.open_table("t").expect("table");
    let count = || counter.writes.lock().values().map(Vec::len).sum::<usize>();
    let start = Instant::now();
    let every = Duration::from_secs_f64(1.0 / rate);
    let mut acks = Vec::new();
    let mut before = None;
    let mut i = 0u32;
    loop {
        let due = start + every * i;
        let now = Instant::now();
        if now >= start + Duration::from_secs(secs) {
            break;
        }
        if before.is_none() && now >= start + Duration::from_secs(secs - 1) {
            before = Some(count());
        }
        if let Some(wait) = due.checked_duration_since(now) {
            std::thread::sleep(wait);
        }
        let mut tx = db.begin().expect("begin");
        tx.put(&t, &(i % 5000).to_be_bytes(), b"value").expect("put");
        acks.push(tx.commit().expect("commit"));
        i += 1;
    }
    let last_second = count() - before.expect("ran past the last second's start");
    let m = db.log_metrics().expect("a log");
    let stream = &m.streams[0];
    for a in acks {
        a.wait().expect("acknowledged");
    }
    (last_second, stream.interval, stream.txn_per_s)
}

/// Nine times the load: three times the appends (the square root), each
/// at the economic gap; the stream's own rate estimate near the load.
/// Appends take 5 ms, so the pace (its floor) is far below both gaps.
#[test]
fn appends_grow_with_the_square_root_of_the_load() {
    let gate = Gate::new(Arc::new(objstore::MemoryStore::new()));
    gate.set_delay(0, Duration::from_millis(5));
    let counter = WriteCounter::new(gate.clone());
    let price = price_for(Duration::from_millis(100), 200.0);
    let db = open(counter.clone(), price);
    db.create_table("t").expect("table");
    let (low, low_gap, low_rate) = drive(&db, &counter, 200.0, 3);
    let (high, high_gap, high_rate) = drive(&db, &counter, 1800.0, 3);
    db.close().expect("close");
    eprintln!(
        "200/s: {low} appends/s, gap {low_gap:?}, rate {low_rate:.0}; \
         1800/s: {high} appends/s, gap {high_gap:?}, rate {high_rate:.0}"
    );
    assert!((140.0..=260.0).contains(&low_rate), "rate estimate at 200/s: {low_rate:.0}");
    assert!((1300.0..=2300.0).contains(&high_rate), "rate estimate at 1800/s: {high_rate:.0}");
    // 100 ms and 33 ms gaps: 10 and 30 appends a second.
    assert!((60..=150).contains(&low_gap.as_millis()), "gap at 200/s: {low_gap:?}");
    assert!((20..=50).contains(&high_gap.as_millis()), "gap at 1800/s: {high_gap:?}");
    assert!((6..=16).contains(&low), "appends at 200/s: {low}");
    assert!((18..=45).contains(&high), "appends at 1800/s: {high}");
    let ratio = high as f64 / low as f64;
    assert!((2.0..=4.5).contains(&ratio), "9x the load, {ratio:.2}x the appends");
}

/// At a low load a transaction does not wait for company: the first
/// commit after a quiet spell goes out at once, so it waits about one
/// append (20 ms), not the 300 ms gap the load would allow.
#[test]
fn a_lone_transaction_gets_its_own_append_at_once() {
    let gate = Gate::new(Arc::new(objstore::MemoryStore::new()));
    gate.set_delay(0, Duration::from_millis(20));
    let counter = WriteCounter::new(gate.clone());
    let db = open(counter.clone(), price_for(Duration::from_millis(100), 200.0));
    let t = db.create_table("t").expect("table");
    for i in 0..5u32 {
        std::thread::sleep(Duration::from_millis(350));
        let started = Instant::now();
        let mut tx = db.begin().expect("begin");
        tx.put(&t, &i.to_be_bytes(), b"v").expect("put");
        tx.commit_and_wait().expect("commit");
        let took = started.elapsed();
        assert!(took < Duration::from_millis(150), "commit {i} took {took:?}");
    }
    db.close().expect("close");
}

/// A dollar ceiling is a request budget at the append's price: $0.0018 an
/// hour at $1.13 per million appends is 0.44 appends a second, rounded up
/// to the budget's floor of 1, so 6 commits that each wait take about 5 s;
/// a ceiling without a price, or a bad one, is refused at open.
#[test]
fn a_dollar_ceiling_is_a_request_budget() {
    let counter = WriteCounter::new(Arc::new(objstore::MemoryStore::new()));
    let db = Database::open(
        Options::new()
            .add_store_handle(counter.clone())
            .append_price(Some(APPEND_USD))
            .max_usd_per_hour(Some(0.0018)),
    )
    .expect("open");
    let t = db.create_table("t").expect("table");
    let started = Instant::now();
    for i in 0..6u32 {
        let mut tx = db.begin().expect("begin");
        tx.put(&t, &i.to_be_bytes(), b"v").expect("put");
        tx.commit_and_wait().expect("commit");
    }
    let took = started.elapsed();
    db.close().expect("close");
    assert!(took >= Duration::from_secs(4), "6 waited commits at 1 append/s: {took:?}");

    let free = || Options::new().add_store_handle(Arc::new(objstore::MemoryStore::new()));
    match Database::open(free().max_usd_per_hour(Some(1.0))) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("price"), "{m}"),
        other => panic!("a ceiling on a free store: {:?}", other.err()),
    }
    for bad in [free().max_usd_per_hour(Some(0.0)), free().millisecond_price(-1.0)] {
        assert!(matches!(Database::open(bad), Err(Error::InvalidArgument(_))));
    }
    assert!(matches!(
        Database::open(free().flush_max_wait(Duration::ZERO)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Database::open(free().append_price(Some(f64::NAN))),
        Err(Error::InvalidArgument(_))
    ));
}

/// The metrics say what the log cost: requests per transaction, dollars
/// an hour and a month, at the append price given.
#[test]
fn the_metrics_price_the_log() {
    let counter = WriteCounter::new(Arc::new(objstore::MemoryStore::new()));
    let db = Database::open(
        Options::new().add_store_handle(counter.clone()).append_price(Some(APPEND_USD)),
    )
    .expect("open");
    let t = db.create_table("t").expect("table");
    for i in 0..20u32 {
        let mut tx = db.begin().expect("begin");
        tx.put(&t, &i.to_be_bytes(), b"v").expect("put");
        tx.commit_and_wait().expect("commit");
    }
    let cost = db.log_metrics().expect("a log").cost;
    let appends: usize = counter.writes.lock().values().map(Vec::len).sum();
    db.close().expect("close");
    assert!(cost.transactions >= 20, "{cost:?}");
    assert!(cost.requests >= 20 && cost.requests as usize <= appends, "{cost:?} {appends}");
    let usd = cost.usd.expect("priced");
    assert!((usd - cost.requests as f64 * APPEND_USD).abs() < 1e-12, "{cost:?}");
    let per_txn = cost.requests_per_txn().expect("transactions");
    assert!((0.5..=1.5).contains(&per_txn), "{per_txn}");
    let hour = cost.usd_per_hour().expect("priced");
    assert!(
        (cost.usd_per_month().expect("priced") - hour * milliscale::HOURS_PER_MONTH).abs() < 1e-9
    );
    // A store without a price and no append price: requests, no dollars.
    let db = Database::open(Options::new().store("memory://")).expect("open");
    let t = db.create_table("t").expect("table");
    let mut tx = db.begin().expect("begin");
    tx.put(&t, b"k", b"v").expect("put");
    tx.commit_and_wait().expect("commit");
    let cost = db.log_metrics().expect("a log").cost;
    assert!(cost.requests >= 1 && cost.usd.is_none(), "{cost:?}");
}
