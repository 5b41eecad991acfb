//! A cluster's change feed under kills, with real processes: three
//! `milliscale serve --cluster` shards keeping a retention window, a
//! `cluster bank` coordinator, and a consumer (`milliscale changes
//! --map`) killed -9 ten times (or `MILLISCALE_CLUSTER_FEED_KILL_TRIALS`)
//! and started again after the last resolved timestamp it printed, while,
//! halfway, shard 1's primary is killed -9 and its standby promotes.
//!
//! The consumer applies a transaction once a resolved timestamp at or
//! above it is printed (what comes after the last one when it is killed is
//! not handled). Checked: transactions come in version order across the
//! restarts, none twice; the bank's total holds at every resolved
//! timestamp; and in the end the consumer's map equals the cluster's
//! table as a scan reads it, every acknowledged transfer and batch there.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use milliscale_client::KeyRange;
use serde_json::Value;

use crate::shard_kill::{
    ACCOUNTS, BIN, INITIAL, Oracle, cluster_with, coordinator, delay, shard_but, standby_with, url,
};

/// What the consumer has handled.
#[derive(Default)]
struct Consumer {
    /// The last resolved timestamp handled: the cursor.
    cursor: u64,
    /// The last version handled.
    last: (u64, u64),
    /// The bank table: key to value.
    rows: BTreeMap<String, String>,
    resolved: usize,
    txns: usize,
}

impl Consumer {
    /// Handle a run's output up to its last resolved timestamp.
    fn take(&mut self, out: &[u8]) {
        let text = String::from_utf8_lossy(out);
        let mut batch: Vec<Value> = Vec::new();
        // A line cut by the kill has no newline: not handled.
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        for line in whole.lines() {
            let v: Value = serde_json::from_str(line).expect("a whole JSON line");
            if let Some(t) = v["resolved"].as_u64() {
                for txn in batch.drain(..) {
                    let version =
                        (txn["ts"].as_u64().expect("ts"), txn["client"].as_u64().expect("c"));
                    assert!(version > self.last, "{version:?} after {:?}", self.last);
                    assert!(
                        version.0 > self.cursor && version.0 <= t,
                        "{version:?} outside its point"
                    );
                    self.last = version;
                    self.txns += 1;
                    for c in txn["changes"].as_array().expect("changes") {
                        assert_eq!(c["table"], "bank");
                        let key = c["key"].as_str().expect("a UTF-8 key").to_owned();
                        match c["value"].as_str() {
                            Some(value) => self.rows.insert(key, value.to_owned()),
                            None => self.rows.remove(&key),
                        };
                    }
                }
                assert!(t >= self.cursor);
                self.cursor = t;
                self.resolved += 1;
                let total: i64 = (0..ACCOUNTS)
                    .map(|i| {
                        let k =
                            String::from_utf8(milliscale_bench::retwis::key_of(i)).expect("utf8");
                        self.rows.get(&k).map_or(INITIAL, |v| v.parse().expect("a balance"))
                    })
                    .sum();
                assert_eq!(total, INITIAL * ACCOUNTS as i64, "the bank's total at {t}");
            } else {
                batch.push(v);
            }
        }
    }
}

fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_micros() as u64
}

fn consumer(dir: &Path, after: u64, extra: &[&str]) -> std::process::Child {
    Command::new(BIN)
        .args(["changes", "--map", &url(dir, "map"), "--poll-min-ms", "1"])
        .args(["--after", &after.to_string()])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a consumer")
}

/// Run a consumer to its end; its output.
fn finish(mut child: std::process::Child) -> Vec<u8> {
    let mut out = Vec::new();
    child.stdout.take().expect("stdout").read_to_end(&mut out).expect("read");
    let mut err = String::new();
    child.stderr.take().expect("stderr").read_to_string(&mut err).expect("read");
    let status = child.wait().expect("reaped");
    assert!(status.success(), "the consumer failed: {err}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_feed_resumes_across_consumer_and_shard_kills_without_loss_or_repeat() {
    let trials: u32 = std::env::var("MILLISCALE_CLUSTER_FEED_KILL_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let dir = tempfile::tempdir().expect("dir");
    let dir = dir.path();
    let keep = ["--retention", "1h"];
    let mut primaries = cluster_with(dir, &keep);
    let mut standby_1 = Some(standby_with(dir, 1, &keep));
    let mut c = Consumer::default();
    // Before anything is written: the feed's first point.
    let start = now_us();
    let first = consumer(dir, 0, &["--until", &start.to_string(), "--for", "30"]);
    c.take(&finish(first));
    assert!(c.cursor >= start, "the first consumer stopped at {}", c.cursor);
    let oracle = Oracle::new(dir).await;
    let writer = coordinator(dir, 300, 0, &shard_but(dir, None));
    for t in 0..trials {
        let mut run = consumer(dir, c.cursor, &[]);
        tokio::time::sleep(delay(t, 400, 1200)).await;
        if t == trials / 2 {
            // Shard 1's primary dies; its standby promotes.
            drop(std::mem::replace(&mut primaries[1], standby_1.take().expect("a standby")));
        }
        run.kill().expect("kill -9");
        let mut out = Vec::new();
        run.stdout.take().expect("stdout").read_to_end(&mut out).expect("read");
        run.wait().expect("reaped");
        c.take(&out);
    }
    drop(writer); // kill -9
    oracle.settled().await;
    let transfers = oracle.check(dir, 300).await;
    let end = now_us();
    let last = consumer(dir, c.cursor, &["--until", &end.to_string(), "--for", "60"]);
    c.take(&finish(last));
    assert!(c.cursor >= end, "the last consumer stopped at {} before {end}", c.cursor);
    let scan = oracle.client.scan("bank", KeyRange::all()).await.expect("scan");
    let table: BTreeMap<String, String> = scan
        .into_iter()
        .map(|(k, v)| (String::from_utf8(k).expect("utf8"), String::from_utf8(v).expect("utf8")))
        .collect();
    assert!(transfers > 0, "nothing was acknowledged");
    assert_eq!(c.rows.len(), table.len(), "the consumer's keys");
    assert!(c.rows == table, "the consumer's map is not the cluster's table");
    eprintln!(
        "{trials} consumer kills and a primary's: {transfers} acknowledged transfers, {} \
         transactions, {} resolved timestamps",
        c.txns, c.resolved
    );
}
