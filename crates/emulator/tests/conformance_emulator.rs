//! The conformance suite against the emulator, through the `s3` backend
//! (aws-sdk-s3 over loopback HTTP, SigV4-signed): memory and directory
//! backings, the part limit at a small setting and at the real 10,000, the
//! append probe, restarts of a directory emulator, credentials, and the
//! accounting endpoint.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use emulator::{
    ACCOUNTING_PATH, Backing, DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY, Emulator, EmulatorOptions,
};
use objstore::probe::{AppendSupport, probe_appends};
use objstore::{Bytes, ObjectStore, S3Store, StoreError, conformance};

static NEXT: AtomicU64 = AtomicU64::new(0);

fn start(backing: Backing, parts_max: u32) -> Emulator {
    Emulator::start(EmulatorOptions { backing, parts_max, ..Default::default() }).expect("start")
}

/// An s3 store on `bucket` (created if needed) under a fresh prefix.
fn store_in(e: &Emulator, bucket: &str, fresh_prefix: bool) -> Arc<dyn ObjectStore> {
    let prefix = if fresh_prefix {
        format!("/run-{}", NEXT.fetch_add(1, Ordering::Relaxed))
    } else {
        String::new()
    };
    let url = format!("s3://{bucket}{prefix}?endpoint={}", e.endpoint());
    let s = S3Store::with_credentials(&url, DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY).expect("s3");
    s.create_bucket().expect("bucket");
    Arc::new(s)
}

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("milliscale-emu-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Everything but the key-length check (a prefix eats into the 1,024
/// bytes), which runs on a bucket without a prefix.
fn suite(e: &Emulator) {
    conformance::run_all_but_keys(&|| store_in(e, "conf", true));
    conformance::keys(&*store_in(e, "keys", false));
}

#[test]
fn the_emulator_in_memory_conforms() {
    suite(&start(Backing::Memory, objstore::PARTS_MAX));
}

#[test]
fn the_emulator_on_a_directory_conforms() {
    let d = TempDir::new();
    suite(&start(Backing::Dir(d.0.clone()), objstore::PARTS_MAX));
}

#[test]
fn the_part_limit_small_and_at_the_real_10000() {
    let e = start(Backing::Memory, 4);
    conformance::part_limit(&*store_in(&e, "parts", true), 4);
    let e = start(Backing::Memory, objstore::PARTS_MAX);
    conformance::part_limit(&*store_in(&e, "parts", true), objstore::PARTS_MAX);
}

#[test]
fn the_probe_finds_real_appends() {
    let e = start(Backing::Memory, objstore::PARTS_MAX);
    let got = probe_appends(&*store_in(&e, "probe", true), "probe/k").expect("decides");
    assert_eq!(got, AppendSupport::Appends);
}

#[test]
fn a_directory_emulator_keeps_buckets_and_objects_across_restarts() {
    let d = TempDir::new();
    {
        let e = start(Backing::Dir(d.0.clone()), objstore::PARTS_MAX);
        let s = store_in(&e, "durable", false);
        s.append("log/1", 0, Bytes::from_static(b"abc")).expect("append");
        s.append("log/1", 3, Bytes::from_static(b"def")).expect("append");
        e.stop();
    }
    let e = start(Backing::Dir(d.0.clone()), objstore::PARTS_MAX);
    let url = format!("s3://durable?endpoint={}", e.endpoint());
    let s = S3Store::with_credentials(&url, DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY).expect("s3");
    assert_eq!(s.get("log/1").expect("get"), Bytes::from_static(b"abcdef"));
    s.append("log/1", 6, Bytes::from_static(b"g")).expect("appends continue");
    assert!(matches!(
        s.append("log/1", 6, Bytes::from_static(b"g")),
        Err(StoreError::InvalidWriteOffset { actual_size: 7 })
    ));
}

#[test]
fn wrong_credentials_are_refused() {
    let e = start(Backing::Memory, objstore::PARTS_MAX);
    let url = format!("s3://bbb?endpoint={}", e.endpoint());
    let s = S3Store::with_credentials(&url, DEFAULT_ACCESS_KEY, "not-the-secret").expect("s3");
    let err = s.create_bucket().expect_err("a bad signature");
    assert!(matches!(err, StoreError::Fatal(_)), "{err}");
    let s = S3Store::with_credentials(&url, "someone-else", DEFAULT_SECRET_KEY).expect("s3");
    assert!(matches!(s.create_bucket(), Err(StoreError::Fatal(_))));
}

fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    write!(c, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("send");
    let mut out = String::new();
    c.read_to_string(&mut out).expect("read");
    out
}

#[test]
fn accounting_is_served_as_json() {
    let e = start(Backing::Memory, objstore::PARTS_MAX);
    let s = store_in(&e, "acct", false);
    s.put("a", Bytes::from(vec![7u8; 1000])).expect("put");
    s.append("b", 0, Bytes::from(vec![7u8; 500])).expect("append");
    s.get("a").expect("get");
    let resp = http_get(e.addr(), ACCOUNTING_PATH);
    let (head, body) = resp.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("application/json"), "{head}");
    let v: serde_json::Value = serde_json::from_str(body).expect("JSON");
    let a = &v["accounting"];
    assert_eq!(v["preset"], "none");
    assert_eq!(a["requests"]["put"], 1, "{v}");
    assert_eq!(a["requests"]["append"], 1, "{v}");
    assert_eq!(a["requests"]["get"], 1, "{v}");
    assert_eq!(a["bytes_up"], 1500, "{v}");
    assert_eq!(a["bytes_down"], 1000, "{v}");
    assert!(a["cost_usd"].as_f64().expect("a number") > 0.0, "{v}");
    assert_eq!(e.accounting().bytes_up, 1500);
}

#[test]
fn readiness_and_the_request_log() {
    let dir = TempDir::new();
    std::fs::create_dir_all(&dir.0).expect("dir");
    let log = dir.0.join("requests.jsonl");
    let e = Emulator::start(EmulatorOptions {
        request_log: Some(emulator::RequestLog::File(log.clone())),
        ..Default::default()
    })
    .expect("start");
    let ready = http_get(e.addr(), emulator::READY_PATH);
    assert!(ready.starts_with("HTTP/1.1 200") && ready.ends_with(r#"{"ready":true}"#), "{ready}");
    let s = store_in(&e, "logged", false);
    s.put("k", Bytes::from_static(b"12345")).expect("put");
    assert!(matches!(s.get("missing"), Err(StoreError::NotFound(_))));
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .expect("the log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    // The readiness probe, CreateBucket, the PUT and the GET, in order.
    let seen: Vec<(String, u64)> = lines
        .iter()
        .map(|l| (l["method"].as_str().unwrap_or("").to_owned(), l["status"].as_u64().unwrap_or(0)))
        .collect();
    assert_eq!(
        seen,
        [("GET".into(), 200), ("PUT".into(), 200), ("PUT".into(), 200), ("GET".into(), 404)],
        "{lines:?}"
    );
    let put = &lines[2];
    assert_eq!((put["path"].as_str(), put["bytes_in"].as_u64()), (Some("/logged/k"), Some(5)));
    assert!(put["ms"].as_f64().is_some() && put["id"].as_str().is_some_and(|i| !i.is_empty()));
    // Every answer names its request, and an error's body does too.
    let missing = http_get(e.addr(), "/logged/missing");
    assert!(missing.to_ascii_lowercase().contains("x-amz-request-id:"), "{missing}");
    assert!(missing.contains("<RequestId>"), "{missing}");
}

#[test]
fn injected_faults_reach_clients_as_aws_errors() {
    let faults = |f: objstore::sim::Faults| {
        Emulator::start(EmulatorOptions { faults: f, ..Default::default() }).expect("start")
    };
    // Buckets are created outside the model, so they work under any fault rate.
    let e = faults(objstore::sim::Faults { throttle: 1.0, ..Default::default() });
    let s = store_in(&e, "slow", false);
    let r = s.put("k", Bytes::from_static(b"v"));
    assert!(matches!(r, Err(StoreError::Throttled(ref m)) if m.contains("SlowDown")), "{r:?}");

    // An ambiguous append is applied, and the client is told it failed.
    let e = faults(objstore::sim::Faults { ambiguous: 1.0, ..Default::default() });
    let s = store_in(&e, "amb", false);
    let r = s.append("seg", 0, Bytes::from_static(b"abc"));
    assert!(matches!(r, Err(StoreError::Transient(_))), "{r:?}");
    assert_eq!(s.head("seg").expect("head").size, 3, "the append landed");
    assert!(matches!(
        s.append("seg", 0, Bytes::from_static(b"abc")),
        Err(StoreError::InvalidWriteOffset { actual_size: 3 })
    ));

    // A whole-store outage fails every request until it ends.
    let e = faults(objstore::sim::Faults::default());
    let s = store_in(&e, "outage", false);
    e.set_unavailable_for(std::time::Duration::from_millis(300));
    assert!(matches!(s.put("k", Bytes::from_static(b"v")), Err(StoreError::Transient(_))));
    std::thread::sleep(std::time::Duration::from_millis(350));
    s.put("k", Bytes::from_static(b"v")).expect("back after the outage");
}

/// The `s3` backend counts every request on the client side and prices it:
/// with `?price=` naming a table or a preset, S3 Express by default for a
/// directory-bucket name, S3 Standard otherwise. The emulator's own
/// accounting (server side) agrees on the requests it served.
#[test]
fn the_s3_client_counts_and_prices_its_requests() {
    let e = start(Backing::Memory, objstore::PARTS_MAX);
    let url = format!("s3://priced?endpoint={}&price=s3x", e.endpoint());
    let s = S3Store::with_credentials(&url, DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY).expect("s3");
    s.create_bucket().expect("bucket");
    s.put("a", Bytes::from(vec![1u8; 1000])).expect("put");
    s.append("seg", 0, Bytes::from(vec![2u8; 300])).expect("append");
    s.append("seg", 300, Bytes::from(vec![3u8; 200])).expect("append");
    let (r, _) = s
        .append_hedged("seg", 500, Bytes::from(vec![4u8; 100]), std::time::Duration::from_secs(5))
        .expect("the s3 client hedges itself");
    r.expect("hedged append");
    assert_eq!(s.get("a").expect("get").len(), 1000);
    s.head("seg").expect("head");
    assert_eq!(s.list("").expect("list").len(), 2);
    s.delete("a").expect("delete");
    let r = s.accounting().expect("the s3 client counts");
    assert_eq!(r.requests["put"], 1);
    assert_eq!(r.requests["append"], 3, "an unhedged hedged-append call is one request");
    assert_eq!((r.requests["get"], r.requests["head"], r.requests["list"]), (1, 1, 1));
    assert_eq!(r.requests["delete"], 1);
    assert_eq!((r.bytes_up, r.bytes_down), (1600, 1000));
    let express = objstore::sim::model::Catalog::builtin().prices("s3-express").expect("table");
    assert_eq!(r.prices, express, "?price=s3x is the s3x preset's table");
    let want = 5.0 / 1e6 * express.put_per_million
        + 2.0 / 1e6 * express.get_per_million
        + 1600.0 / 1e9 * express.upload_per_gb
        + 1000.0 / 1e9 * express.download_per_gb;
    assert!((r.cost_usd - want).abs() < 1e-12, "{} vs {want}", r.cost_usd);
    let a = r.append_latency.expect("append latencies are recorded");
    assert_eq!(a.count, 3);
    assert!(e.accounting().requests["append"] >= 3, "the server saw them too");

    // Defaults by bucket name, and a bad table name.
    let prices = |bucket: &str| {
        let url = format!("s3://{bucket}?endpoint={}", e.endpoint());
        let s = S3Store::with_credentials(&url, DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY);
        s.expect("s3").accounting().expect("counts").prices
    };
    assert_eq!(prices("logs--use1-az4--x-s3"), express, "a directory bucket is S3 Express");
    let standard = objstore::sim::model::Catalog::builtin().prices("s3-standard").expect("table");
    assert_eq!(prices("logs"), standard);
    let bad = format!("s3://logs?endpoint={}&price=nope", e.endpoint());
    match S3Store::with_credentials(&bad, DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY) {
        Err(StoreError::InvalidRequest(m)) => assert!(m.contains("nope"), "{m}"),
        other => panic!("expected InvalidRequest, got {other:?}"),
    }
}

/// The `s3` client's hedged reads (`get_range_hedged`, `head_hedged`) over
/// HTTP: with a zero delay both requests go out and either answer is
/// right; a 416 is `InvalidRange` with the size, a missing key
/// `NotFound`; with a long delay one request goes out. Both count.
#[test]
fn the_s3_client_hedges_reads() {
    let e = start(Backing::Memory, objstore::PARTS_MAX);
    let s = store_in(&e, "hedged-reads", true);
    s.append("seg", 0, Bytes::from_static(b"abcdef")).expect("append");
    let zero = std::time::Duration::ZERO;
    for _ in 0..10 {
        let (r, h) = s.get_range_hedged("seg", 2..u64::MAX, zero).expect("the s3 client hedges");
        assert_eq!(&r.expect("read")[..], b"cdef");
        assert!(h.sent());
        let (m, _) = s.head_hedged("seg", zero).expect("the s3 client hedges");
        assert_eq!(m.expect("head").size, 6);
    }
    let (r, _) = s.get_range_hedged("seg", 6..u64::MAX, zero).expect("hedges");
    assert!(matches!(r, Err(StoreError::InvalidRange { start: 6, size: 6 })), "{r:?}");
    let (r, _) = s.head_hedged("nope", zero).expect("hedges");
    assert!(matches!(r, Err(StoreError::NotFound(_))), "{r:?}");
    let long = std::time::Duration::from_secs(10);
    let (r, h) = s.get_range_hedged("seg", 0..3, long).expect("hedges");
    assert_eq!(&r.expect("read")[..], b"abc");
    assert!(!h.sent());
    let a = s.accounting().expect("the s3 client counts");
    // 11 hedged range reads (two requests each) and the unhedged one; 11
    // hedged HEADs, and the HEAD that sized the 416.
    assert_eq!(a.requests["get_range"], 23);
    assert_eq!(a.requests["head"], 23);
}

/// The `s3` client's appends in flight (`ObjectStore::start_append`): the
/// request runs on the client's runtime while the caller goes on; polling
/// finds the answer once it is in, a refused offset comes back as
/// `InvalidWriteOffset` with the object's size (the HEAD runs on the
/// caller's thread), a hedged one lands once, and a pending append dropped
/// unanswered still lands.
#[test]
fn the_s3_client_sends_appends_without_waiting() {
    let e = start(Backing::Memory, objstore::PARTS_MAX);
    let s = store_in(&e, "inflight", true);
    let wait = |mut p: objstore::PendingAppend| loop {
        if let Some(answer) = p.poll() {
            break answer;
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    };
    let p = Arc::clone(&s).start_append("seg", 0, Bytes::from_static(b"abc"), None);
    let (r, hedge) = wait(p.expect("the s3 client sends appends asynchronously"));
    assert_eq!((r.expect("landed").size, hedge), (3, objstore::Hedge::NotSent));
    // A stale offset, waited for rather than polled.
    let p = Arc::clone(&s).start_append("seg", 0, Bytes::from_static(b"xyz"), None);
    let (r, _) = p.expect("sent").wait();
    assert!(matches!(r, Err(StoreError::InvalidWriteOffset { actual_size: 3 })), "{r:?}");
    // Hedged as soon as the runtime's timer fires: whether the first
    // request or both went out, the bytes land once (checked below).
    let zero = std::time::Duration::ZERO;
    let p = Arc::clone(&s).start_append("seg", 3, Bytes::from_static(b"de"), Some(zero));
    let (r, _) = wait(p.expect("sent"));
    assert_eq!(r.expect("landed").size, 5);
    // Dropped in flight: the request still runs.
    drop(Arc::clone(&s).start_append("seg", 5, Bytes::from_static(b"f"), None));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while s.head("seg").expect("head").size < 6 {
        assert!(std::time::Instant::now() < deadline, "the dropped append never landed");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(s.get("seg").expect("get"), Bytes::from_static(b"abcdef"));
    // Bad input is answered at once.
    let p = Arc::clone(&s).start_append("seg", 6, Bytes::new(), None).expect("answered");
    assert!(matches!(p.wait().0, Err(StoreError::InvalidRequest(_))));
}

/// Buckets named at start exist before the listener answers: a client
/// that connects at once (the engine's log, started beside the
/// emulator) finds them; a bad name is refused at start.
#[test]
fn buckets_given_at_start_exist_when_the_first_request_arrives() {
    let e = Emulator::start(EmulatorOptions {
        buckets: vec!["early".into(), "early".into()],
        ..Default::default()
    })
    .expect("start");
    let (access, secret) = (emulator::DEFAULT_ACCESS_KEY, emulator::DEFAULT_SECRET_KEY);
    let s = objstore::S3Store::with_credentials(&e.bucket_url("early"), access, secret)
        .expect("client");
    s.put("k", Bytes::from_static(b"v")).expect("the bucket is there");
    let bad =
        Emulator::start(EmulatorOptions { buckets: vec!["../up".into()], ..Default::default() });
    assert!(bad.is_err(), "an invalid bucket name was accepted");
}
