//! `milliscale cluster restore | clone`: a cluster's state at a commit
//! timestamp, read from its shards' logs on the object store alone
//! (design record 0012, "A cluster's past"), made a new cluster: a new
//! store per shard (the rows written there, or a clone of the shard's
//! database with an overlay) and a new shard map.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use clap::Args;
use milliscale::Options;
use milliscale_milana::shard_map::{MapStore, ShardInfo, ShardMap};
use milliscale_milana::types::{ShardId, Timestamp};
use milliscale_server::shard::past::{ShardPastReport, clone_shard, cluster_at, write_shard};

use crate::args::{Failure, MapArgs};

#[derive(Args)]
pub(crate) struct ClusterRestoreArgs {
    #[command(flatten)]
    map: MapArgs,
    /// The point: a commit timestamp (`ts:N`, or a bare number: the
    /// number a cluster commit returns), or an RFC 3339 time
    /// (`2026-12-07T06:30:00Z`). The result holds every
    /// transaction with a commit timestamp at or below it that committed,
    /// and none above; every shard must keep a retention window reaching
    /// a little before it (`serve --cluster ... --retention`).
    #[arg(long, value_name = "TS|TIME")]
    at: String,
    /// The new cluster's map store (nothing may be published there).
    #[arg(long)]
    to_map: String,
    /// The prefix of the new map's objects on that store.
    #[arg(long, default_value = "")]
    to_map_prefix: String,
    /// A shard's new store, as `ID=STORE_URL`: one for each shard of the
    /// map at the point, each empty.
    #[arg(long = "to-shard", value_name = "ID=STORE_URL", required = true)]
    to_shards: Vec<String>,
    /// A shard's address in the new map, as `ID=HOST:PORT` (default: the
    /// address it has in the map at the point).
    #[arg(long = "addr", value_name = "ID=HOST:PORT")]
    addrs: Vec<String>,
    /// Read a shard's log from this store instead of the one the map names
    /// (a backup of it, say), as `ID=STORE_URL`.
    #[arg(long = "from-shard", value_name = "ID=STORE_URL")]
    from_shards: Vec<String>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

/// `ID=VALUE` pairs, by shard.
fn by_shard(flag: &str, pairs: &[String]) -> Result<BTreeMap<ShardId, String>, Failure> {
    let mut out = BTreeMap::new();
    for p in pairs {
        let (id, v) = p
            .split_once('=')
            .and_then(|(id, v)| Some((id.parse::<ShardId>().ok()?, v)))
            .ok_or_else(|| Failure::Usage(format!("--{flag} {p}: expected ID=VALUE")))?;
        if out.insert(id, v.to_owned()).is_some() {
            return Err(Failure::Usage(format!("--{flag}: shard {id} given twice")));
        }
    }
    Ok(out)
}

/// A cluster's point: a commit timestamp in microseconds.
pub(crate) fn parse_ts(s: &str) -> Result<Timestamp, Failure> {
    let s = s.trim();
    let digits = s.strip_prefix("ts:").unwrap_or(s);
    if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) {
        return digits
            .parse()
            .map_err(|_| Failure::Usage(format!("--at {s}: not a commit timestamp")));
    }
    match milliscale::At::parse(s) {
        Ok(milliscale::At::Time(t)) => Ok(t
            .duration_since(UNIX_EPOCH)
            .map_err(|_| Failure::Usage(format!("--at {s}: before 1970")))?
            .as_micros() as Timestamp),
        _ => Err(Failure::Usage(format!(
            "--at {s}: give a commit timestamp (ts:N, microseconds since the Unix epoch) or an \
             RFC 3339 time (2026-12-07T06:30:00Z)"
        ))),
    }
}

fn line(r: &ShardPastReport) -> String {
    format!(
        "shard {}: base at CSN {} ({:?} before), {} transactions read after it ({} bytes) up \
         to CSN {} ({}), {} keys",
        r.shard,
        r.base_csn,
        r.margin,
        r.transactions,
        r.log_bytes,
        r.end_csn,
        if r.settled {
            "where its forget bound passed the point".to_owned()
        } else {
            format!("the end of its log; {} undecided there", r.undecided)
        },
        r.keys
    )
}

/// `cluster restore` (`clone` false) and `cluster clone`.
pub(crate) fn restore(a: ClusterRestoreArgs, clone: bool) -> Result<(), Failure> {
    let t = parse_ts(&a.at)?;
    let maps = a.map.open()?;
    let to_shards = by_shard("to-shard", &a.to_shards)?;
    let addrs = by_shard("addr", &a.addrs)?;
    let from = by_shard("from-shard", &a.from_shards)?;
    let to_store = milliscale::store::open(&a.to_map)
        .map_err(|e| Failure::Usage(format!("--to-map {}: {e}", a.to_map)))?;
    let to_maps = MapStore::new(to_store, &a.to_map_prefix);
    if let Some(m) = to_maps.latest().map_err(|e| e.to_string())? {
        return Err(Failure::Usage(format!(
            "--to-map: a shard map is already published there (version {}); a restore makes a \
             new cluster",
            m.version
        )));
    }
    let at_map = maps
        .as_of(t)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| Failure::Usage(format!("no shard map was published at or before {t}")))?;
    let missing: Vec<String> = at_map
        .shards
        .keys()
        .filter(|s| !to_shards.contains_key(s))
        .map(|s| s.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(Failure::Usage(format!(
            "the map at the point (version {}) has shards {}: give --to-shard ID=STORE_URL for \
             shard(s) {}",
            at_map.version,
            at_map.shards.keys().map(|s| s.to_string()).collect::<Vec<_>>().join(", "),
            missing.join(", ")
        )));
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {elapsed} {msg}")
            .expect("a valid template"),
    );
    if a.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    bar.set_message(format!("reading {} shards' logs at {t}", at_map.shards.len()));
    let options_of = |id: ShardId, url: &str| {
        Ok(Options::new().store(from.get(&id).map_or(url, String::as_str)))
    };
    let past = cluster_at(&maps, t, options_of, |r| {
        if !a.json {
            bar.suspend(|| eprintln!("{}", line(r)));
        }
    });
    let past = past.map_err(|e| {
        bar.finish_and_clear();
        Failure::Run(e)
    })?;
    let mut shards = BTreeMap::new();
    let mut written = Vec::new();
    for (id, info) in &past.map.shards {
        let url = &to_shards[id];
        let of = past.shards.get(id).map_or(0, BTreeMap::len);
        let target = Options::new().store(url);
        let made = if clone {
            bar.set_message(format!("cloning shard {id} to {url}"));
            let source = options_of(*id, &info.log).map_err(Failure::Run)?;
            clone_shard(&source, &target, &past, *id).map(|r| {
                if !a.json {
                    bar.suspend(|| {
                        eprintln!(
                            "shard {id}: cloned at its CSN {} ({} requests, {:.2?})",
                            r.csn, r.requests, r.elapsed
                        );
                    });
                }
                of
            })
        } else {
            bar.set_message(format!("writing shard {id} to {url}: 0 of {of} rows"));
            write_shard(&target, std::slice::from_ref(url), &past, *id, |n| {
                bar.set_message(format!("writing shard {id} to {url}: {n} of {of} rows"));
            })
            .map(|w| w.rows)
        };
        let rows = made.map_err(|e| {
            bar.finish_and_clear();
            Failure::Run(e)
        })?;
        written.push((*id, rows));
        let addr = addrs.get(id).cloned().unwrap_or_else(|| info.addr.clone());
        shards.insert(*id, ShardInfo { addr, log: url.clone() });
    }
    let map = ShardMap {
        version: 1,
        ranges: past.map.ranges.clone(),
        shards,
        rebalance: None,
        split_load: None,
    };
    to_maps.publish(&map).map_err(|e| Failure::Run(e.to_string()))?;
    bar.finish_and_clear();
    if a.json {
        print_json(&past, &written);
        return Ok(());
    }
    print_summary(&past, &written, &a.to_map, map.shards.len(), clone);
    Ok(())
}

/// The report of `restore --json`: one JSON object.
fn print_json(past: &milliscale_server::shard::past::ClusterPast, written: &[(ShardId, usize)]) {
    let reports: Vec<serde_json::Value> = past
        .reports
        .iter()
        .map(|r| {
            serde_json::json!({
                "shard": r.shard, "base_csn": r.base_csn, "margin_s": r.margin.as_secs_f64(),
                "t_csn": r.t_csn, "end_csn": r.end_csn, "settled": r.settled,
                "transactions": r.transactions, "log_bytes": r.log_bytes, "keys": r.keys,
                "undecided": r.undecided,
            })
        })
        .collect();
    let doc = serde_json::json!({
        "at": past.t,
        "map_version": past.map.version,
        "tables": past.tables,
        "shards": reports,
        "rows": written.iter().map(|(id, n)| (id.to_string(), n)).collect::<BTreeMap<_, _>>(),
        "resolved_committed": past.resolved.0,
        "resolved_aborted": past.resolved.1,
    });
    println!("{doc}");
}

/// The summary of `restore` and `clone`.
fn print_summary(
    past: &milliscale_server::shard::past::ClusterPast,
    written: &[(ShardId, usize)],
    to_map: &str,
    shards: usize,
    clone: bool,
) {
    let t = past.t;
    let rows: usize = written.iter().map(|(_, n)| n).sum();
    println!(
        "{} the cluster at commit timestamp {t} (its map's version {} then) to {}: {} \
         shards, {} tables, {rows} rows{}; start each shard with `milliscale serve --cluster {} \
         --shard ID --store STORE_URL`",
        if clone { "cloned" } else { "restored" },
        past.map.version,
        to_map,
        shards,
        past.tables.len(),
        match past.resolved {
            (0, 0) => String::new(),
            (c, x) => format!(
                "; {c} transactions at or below the point undecided where a log ended were \
                 committed by the termination rule, {x} aborted"
            ),
        },
        to_map
    );
}
