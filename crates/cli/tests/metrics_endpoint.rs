//! `--metrics-addr` serves the engine's metrics for Prometheus while a
//! command runs: a benchmark's commit latency histogram, appends,
//! requests, hedges and dollars per store.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn scrape(addr: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let req = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}

#[test]
fn a_benchmark_serves_its_metrics_for_prometheus() {
    // A free port below the ephemeral range (see `free_port`).
    let addr = super::shard_kill::free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_milliscale"))
        .args(["--metrics-addr", &addr, "bench", "ycsb", "--records", "20000"])
        .args(["--warmup", "0", "--duration", "30", "--threads", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the benchmark");
    let wanted = [
        "milliscale_commit_latency_seconds_count",
        "milliscale_commits_total",
        "milliscale_log_appends_total{stream=\"0\"}",
        "milliscale_store_requests_total{store=",
        "milliscale_store_usd{store=",
        "milliscale_store_hedges_total{store=",
        "milliscale_log_usd_per_hour",
    ];
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    let found = loop {
        if let Some(body) = scrape(&addr) {
            if wanted.iter().all(|w| body.contains(w)) && commits(&body) > 0.0 {
                break Some(body);
            }
            last = body;
        }
        if Instant::now() > deadline || child.try_wait().expect("poll").is_some() {
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(found.is_some(), "no scrape had all of {wanted:?} and commits:\n{last}");
}

/// The value of `milliscale_commits_total` in a scrape (0 if absent).
fn commits(body: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix("milliscale_commits_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn an_address_that_cannot_be_bound_is_a_run_time_failure() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_milliscale"))
        .args(["--metrics-addr", &addr, "inspect", "--store", "memory://"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--metrics-addr"));
}
