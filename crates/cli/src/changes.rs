//! `milliscale changes`: a database's change feed (`milliscale::feed`)
//! as JSON lines, for pipes. Reads the log from the store as a replica
//! does: the writer is not asked.
//!
//! Each line is one event:
//! - a transaction: `{"csn": N, "changes": [{"table": T, "key": K,
//!   "value": V}, ...]}`, `value` null for a deletion; a key or value
//!   that is not UTF-8 comes as `key_hex` / `value_hex` instead;
//! - a resolved point: `{"resolved": N}` (every transaction below CSN N
//!   was printed).
//!
//! A consumer saves the `csn` of the last transaction it handled and
//! passes it as `--after` to resume exactly after it.
//!
//! With `--map`, a cluster's feed (`milliscale_server::shard::feed`): the
//! shards' logs merged by commit timestamp. A transaction is
//! `{"ts": N, "client": C, "changes": [...]}` (a cross-shard transaction
//! once, whole); `{"resolved": T}` says every transaction at or below
//! timestamp T was printed. A consumer saves the last resolved timestamp
//! it handled everything below, and passes it as `--after`.

use std::io::Write;
use std::time::{Duration, Instant};

use clap::Args;
use milliscale::feed::{Feed, FeedEvent, FeedFilter};
use milliscale_milana::shard_map::MapStore;
use milliscale_server::shard::feed::{ClusterEvent, ClusterFeed};
use serde_json::{Map, Value, json};

use crate::args::{Failure, store_options};

#[derive(Args)]
pub(crate) struct ChangesArgs {
    /// A store holding the database (repeat for replicas, in the writer's
    /// order).
    #[arg(long, required_unless_present = "map", conflicts_with = "map")]
    pub(crate) store: Vec<String>,
    /// A cluster's map store: the feed of the cluster, its shards' logs
    /// merged by commit timestamp.
    #[arg(long)]
    pub(crate) map: Option<String>,
    /// The prefix of the map's objects on that store.
    #[arg(long, default_value = "", requires = "map")]
    pub(crate) map_prefix: String,
    /// Print the transactions after this CSN (a cursor: the last
    /// transaction handled; with `--map`, the last resolved timestamp);
    /// default: from the newest checkpoint (a cluster: from now).
    #[arg(long, value_name = "CSN|TS")]
    pub(crate) after: Option<u64>,
    /// Only these tables (repeat; default: every table).
    #[arg(long)]
    pub(crate) table: Vec<String>,
    /// Only keys that start with this (UTF-8).
    #[arg(long)]
    pub(crate) prefix: Option<String>,
    /// The output format (only `jsonl`).
    #[arg(long, default_value = "jsonl")]
    pub(crate) format: String,
    /// Stop once every transaction up to this CSN (with `--map`: timestamp)
    /// is printed (default: run until killed).
    #[arg(long, value_name = "CSN|TS")]
    pub(crate) until: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long = "for", value_name = "SECONDS")]
    pub(crate) run_for: Option<f64>,
    /// Poll the log at most this often, in ms.
    #[arg(long, default_value_t = 5.0)]
    pub(crate) poll_min_ms: f64,
}

pub(crate) fn changes(a: ChangesArgs) -> Result<(), Failure> {
    if a.format != "jsonl" {
        return Err(format!("--format {}: only jsonl is offered", a.format).into());
    }
    let run_for = a
        .run_for
        .map(Duration::try_from_secs_f64)
        .transpose()
        .map_err(|_| "--for must be a number of seconds, at least 0".to_string())?;
    let poll_min = Duration::try_from_secs_f64(a.poll_min_ms / 1000.0)
        .map_err(|_| "--poll-min-ms must be at least 0".to_string())?;
    let replica = milliscale::ReplicaOptions {
        poll_min,
        poll_max: poll_min.max(Duration::from_secs(1)),
        ..milliscale::ReplicaOptions::default()
    };
    let filter = FeedFilter { tables: a.table, prefix: a.prefix.map(String::into_bytes) };
    if let Some(map) = &a.map {
        let store = milliscale::store::open(map)
            .map_err(|e| Failure::Usage(format!("--map {map}: {e}")))?;
        let maps = std::sync::Arc::new(MapStore::new(store, &a.map_prefix));
        let options_of = Box::new(|_, url: &str| Ok(milliscale::Options::new().store(url)));
        let feed = ClusterFeed::open(maps, options_of, replica, a.after, filter)?;
        return cluster_changes(feed, run_for, a.until);
    }
    let mut feed = Feed::open_with(store_options(&a.store)?, replica, a.after, filter)
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let out = std::io::stdout();
    let mut out = out.lock();
    loop {
        if run_for.is_some_and(|d| started.elapsed() >= d) {
            return Ok(());
        }
        let Some(event) =
            feed.next_timeout(Duration::from_millis(100)).map_err(|e| e.to_string())?
        else {
            continue;
        };
        let done = matches!(event, FeedEvent::Resolved(n) if a.until.is_some_and(|u| n > u));
        writeln!(out, "{}", line(&event)).map_err(|e| format!("writing: {e}"))?;
        if done {
            out.flush().map_err(|e| format!("writing: {e}"))?;
            return Ok(());
        }
        if matches!(event, FeedEvent::Resolved(_)) {
            // A pipe's reader sees each transaction by the next resolved
            // point, not when the buffer fills.
            out.flush().map_err(|e| format!("writing: {e}"))?;
        }
    }
}

/// A cluster's feed, printed until `run_for` passes or its resolved
/// timestamp reaches `until`.
fn cluster_changes(
    mut feed: ClusterFeed,
    run_for: Option<Duration>,
    until: Option<u64>,
) -> Result<(), Failure> {
    let started = Instant::now();
    let out = std::io::stdout();
    let mut out = out.lock();
    while run_for.is_none_or(|d| started.elapsed() < d) {
        let Some(event) = feed.next_timeout(Duration::from_millis(100))? else { continue };
        let line = match &event {
            ClusterEvent::Resolved(t) => json!({ "resolved": t }),
            ClusterEvent::Commit(t) => {
                let changes: Vec<Value> = t
                    .changes
                    .iter()
                    .map(|c| change(&c.table, &c.key, c.value.as_deref()))
                    .collect();
                json!({ "ts": t.version.ts, "client": t.version.client, "changes": changes })
            }
        };
        writeln!(out, "{line}").map_err(|e| format!("writing: {e}"))?;
        if let ClusterEvent::Resolved(t) = event {
            out.flush().map_err(|e| format!("writing: {e}"))?;
            if until.is_some_and(|u| t >= u) {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// One change as a JSON object.
fn change(table: &str, key: &[u8], value: Option<&[u8]>) -> Value {
    let mut m = Map::new();
    m.insert("table".into(), json!(table));
    bytes(&mut m, "key", Some(key));
    bytes(&mut m, "value", value);
    Value::Object(m)
}

/// One event as a JSON line.
fn line(e: &FeedEvent) -> Value {
    match e {
        FeedEvent::Resolved(n) => json!({ "resolved": n }),
        FeedEvent::Commit(t) => {
            let changes: Vec<Value> =
                t.changes.iter().map(|c| change(&c.table, &c.key, c.value.as_deref())).collect();
            json!({ "csn": t.csn, "changes": changes })
        }
    }
}

/// `name` as a string if `b` is UTF-8, else `name_hex`; null if absent.
fn bytes(m: &mut Map<String, Value>, name: &str, b: Option<&[u8]>) {
    match b {
        None => {
            m.insert(name.into(), Value::Null);
        }
        Some(b) => match std::str::from_utf8(b) {
            Ok(s) => {
                m.insert(name.into(), json!(s));
            }
            Err(_) => {
                let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
                m.insert(format!("{name}_hex"), json!(hex));
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use milliscale::feed::{FeedChange, FeedTxn};

    #[test]
    fn a_transaction_is_one_line_with_utf8_or_hex_bytes() {
        let t = FeedTxn {
            csn: 7,
            changes: vec![
                FeedChange { table: "t".into(), key: b"k".to_vec(), value: Some(b"v".to_vec()) },
                FeedChange { table: "t".into(), key: vec![0xff, 0x00], value: None },
            ],
        };
        assert_eq!(
            line(&FeedEvent::Commit(t)).to_string(),
            r#"{"changes":[{"key":"k","table":"t","value":"v"},{"key_hex":"ff00","table":"t","value":null}],"csn":7}"#
        );
        assert_eq!(line(&FeedEvent::Resolved(9)).to_string(), r#"{"resolved":9}"#);
    }
}
