//! `milliscale inspect`, `recover` and `dump`: reading a database's stores
//! without writing as its writer (recover takes it over).

use crate::args::{Failure, Usage, require_existing, store_options, stores_of};
use clap::Args;
use std::time::Duration;

#[derive(Args)]
pub(crate) struct RecoverArgs {
    /// A store holding the database (repeat for replicas, in the same order
    /// the writer used).
    #[arg(long)]
    pub(crate) store: Vec<String>,
    /// Replay threads (default: the number of cores).
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Create an empty database if the stores hold none (without it, a
    /// store with no database is an error: most often a mistyped address).
    #[arg(long)]
    pub(crate) create: bool,
}

#[derive(Args)]
pub(crate) struct DumpArgs {
    /// A store holding the database (repeat for replicas).
    #[arg(long)]
    pub(crate) store: Vec<String>,
    /// The table to print.
    #[arg(long)]
    pub(crate) table: String,
    /// One JSON object per row: `key` and `value` as strings where they
    /// are UTF-8, else `key_hex` and `value_hex`.
    #[arg(long)]
    pub(crate) json: bool,
    /// The table as it was at this point of the retention window: `csn:N`
    /// (or a bare number) or an RFC 3339 time (`2026-12-07T06:30:00Z`).
    #[arg(long, value_name = "CSN|TIME")]
    pub(crate) at: Option<String>,
}

#[derive(Args)]
pub(crate) struct InspectArgs {
    /// A store holding the database: file:///path,
    /// s3://bucket/prefix?endpoint=... Repeat for a replicated log: each
    /// store is read and shown in turn.
    #[arg(long)]
    pub(crate) store: Vec<String>,
    /// Also list every part.
    #[arg(long)]
    pub(crate) parts: bool,
    /// Print one JSON document: per store, the manifest, the log's chains
    /// and what recovery would replay.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `writeln!` into the report being built (a `String`: it cannot fail).
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

pub(crate) fn inspect(a: InspectArgs) -> Result<(), Failure> {
    let mut text = String::new();
    let mut docs = Vec::new();
    let stores = stores_of(&a.store)?;
    for url in &stores {
        if stores.len() > 1 && !a.json {
            say!(text, "== {url}");
        }
        let (t, doc) = inspect_store(url, a.parts)?;
        text.push_str(&t);
        docs.push(doc);
    }
    if a.json {
        let doc = serde_json::json!({ "stores": docs });
        text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())? + "\n";
    }
    write_stdout(text.as_bytes())
}

/// Write `bytes` to stdout. A reader that went away (`inspect | head`)
/// ends the output, not the command with an error.
pub(crate) fn write_stdout(bytes: &[u8]) -> Result<(), Failure> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.to_string().into()),
        _ => Ok(()),
    }
}

#[allow(
    clippy::too_many_lines,
    reason = "prints the manifest, the checkpoint, the segments and the replay plan in the order a reader reads them"
)]
/// One store's report, as text and as JSON.
fn inspect_store(url: &str, parts: bool) -> Result<(String, serde_json::Value), Failure> {
    use milliscale::internals::record::Entry;
    require_existing(std::slice::from_ref(&url.to_owned()))?;
    let mut out = String::new();
    let store = objstore::open(url).map_err(|e| format!("{url}: {e}"))?;
    let started = std::time::Instant::now();
    let (m, scan) = milliscale::internals::scan_log(&store).map_err(|e| format!("{url}: {e}"))?;
    say!(
        out,
        "manifest {} (format {}): epoch {}, log format {}, tables {:?}",
        milliscale::internals::keys::manifest_key(m.version),
        m.format(),
        m.epoch,
        m.log_format,
        m.tables
    );
    if !m.dropped.is_empty() {
        say!(out, "dropped table ids: {:?}", m.dropped);
    }
    match &m.checkpoint {
        None => say!(out, "checkpoint: none"),
        Some(c) => {
            say!(
                out,
                "checkpoint at CSN {}: {} chunks, {} rows, {} bytes",
                c.csn,
                c.chunks.len(),
                c.rows,
                c.bytes
            );
            for chunk in &c.chunks {
                say!(out, "  {}: {} bytes, crc32c {:08x}", chunk.key, chunk.bytes, chunk.crc);
            }
        }
    }
    // What a replica follows: sealed logs (as their seals decided), then
    // the current log; and the checkpoints replicas offered a writer.
    for s in &m.sealed {
        say!(
            out,
            "sealed log of epoch {}: CSNs {}..={} as the next writer decided: every CSN below {} \
             and {} commits above it replayed; its segments end before {}",
            s.log.epoch,
            s.from,
            s.max_csn,
            s.prefix,
            s.above.len(),
            s.end_segment
        );
    }
    say!(
        out,
        "a replica opened now loads the checkpoint and follows the log from CSN {}",
        m.replay_from()
    );
    // Readers' registrations: what the writer's collection keeps for them.
    let readers = store.list(milliscale::history::leases::READERS_PREFIX).unwrap_or_default();
    for o in &readers {
        let what = store.get(&o.key).ok().and_then(|b| {
            serde_json::from_slice::<milliscale::history::leases::Registration>(&b).ok()
        });
        match what {
            Some(r) => say!(
                out,
                "registration {} ({}): checkpoints {:?}, {} logs, {}",
                o.key,
                r.kind,
                r.checkpoints,
                r.logs.len(),
                r.expires_ms.map_or("until withdrawn".to_owned(), |e| format!(
                    "lease to {}",
                    humantime::format_rfc3339_millis(
                        std::time::UNIX_EPOCH + Duration::from_millis(e)
                    )
                ))
            ),
            None => say!(out, "registration {}: unreadable", o.key),
        }
    }
    let window = match &m.history {
        None => {
            say!(out, "retention window: none (truncation deletes what the checkpoint covers)");
            serde_json::Value::Null
        }
        Some(h) => window_section(&mut out, &store, &m, h).map_err(|e| format!("{url}: {e}"))?,
    };
    if let Some(w) = m.checkpoint_wanted {
        say!(
            out,
            "checkpoint wanted: the writer offloads its checkpoints and marked its log at CSN \
             {w}; a replica offers one once it has applied that far"
        );
    }
    let named = [(url.to_owned(), std::sync::Arc::clone(&store))];
    let (offers, _) = milliscale::internals::list_offers(&named, Duration::from_secs(30));
    let current = m.checkpoint.as_ref().map_or(0, |c| c.csn);
    for o in &offers {
        let state = match o.csn.cmp(&current) {
            std::cmp::Ordering::Equal => "adopted",
            std::cmp::Ordering::Less => "superseded",
            std::cmp::Ordering::Greater => "not adopted yet",
        };
        say!(
            out,
            "checkpoint offer at CSN {}: {} chunks, {} rows, {} bytes ({state})",
            o.csn,
            o.chunks.len(),
            o.rows,
            o.bytes
        );
    }
    say!(
        out,
        "log of epoch {}: {} groups in {} streams of {} lanes, base CSN {}, segments from {:?}, \
         {} parts per segment",
        m.log.epoch,
        m.log.groups,
        m.log.streams(),
        m.log.lanes,
        m.log.base_csn,
        m.log.group_start,
        m.log.parts_max
    );
    say!(
        out,
        "{}: {} log objects, {} bytes (read in {:.2} s)",
        url,
        scan.objects,
        scan.bytes,
        started.elapsed().as_secs_f64()
    );
    let mut chains = Vec::new();
    for (c, log) in &scan.chains {
        let entries: usize = log.parts.iter().map(|(_, p)| p.entries.len()).sum();
        let csns = |e: Option<&Entry>| e.map_or(0, Entry::csn);
        // A stream's lanes interleave its groups' parts: CSNs by group.
        let all = log.parts.iter().flat_map(|(_, p)| p.entries.iter().map(Entry::csn));
        let first = all.clone().min().unwrap_or(0);
        let last = all.max().unwrap_or(0);
        let objects: std::collections::BTreeSet<&str> =
            log.parts.iter().map(|(k, _)| k.as_str()).collect();
        let groups = m.log.chain_groups(*c);
        chains.push(serde_json::json!({
            "chain": c.to_string(),
            "groups": [groups.start, groups.end.saturating_sub(1)],
            "objects": objects.len(),
            "parts": log.parts.len(),
            "entries": entries,
            "first_csn": first,
            "last_csn": last,
            "fenced_by": log.fenced_by,
            "torn_tail": log.truncated.as_ref().map(|t| serde_json::json!({
                "key": t.key, "offset": t.offset, "bytes": t.bytes, "error": t.error.to_string(),
            })),
        }));
        say!(
            out,
            "{c} (groups {}..={}): {} objects, {} parts, {entries} entries, CSN {first}..={last}{}",
            groups.start,
            groups.end.saturating_sub(1),
            objects.len(),
            log.parts.len(),
            log.fenced_by.map_or(String::new(), |e| format!(", fenced by epoch {e}"))
        );
        if parts {
            for (key, p) in &log.parts {
                say!(
                    out,
                    "  {key}: group {}, {} entries, CSN {}..={}",
                    p.group,
                    p.entries.len(),
                    csns(p.entries.first()),
                    csns(p.entries.last())
                );
            }
        }
        if let Some(t) = &log.truncated {
            say!(
                out,
                "  torn tail cut: {} bytes of {} at offset {}: {}",
                t.bytes,
                t.key,
                t.offset,
                t.error
            );
        }
    }
    let plan = milliscale::internals::plan_replay(&scan).map_err(|e| e.to_string())?;
    say!(
        out,
        "recovery would replay {} transactions from CSN {}: every CSN below {} is in the \
         checkpoint or the log (largest {}); {} commits dropped (their DSN is not below {}), \
         {} aborts",
        plan.replay.len(),
        scan.from,
        plan.prefix,
        plan.max_csn,
        plan.dropped.len(),
        plan.prefix,
        plan.aborts
    );
    let doc = serde_json::json!({
        "store": url,
        "manifest": m,
        "retention_window": window,
        "log_objects": scan.objects,
        "log_bytes": scan.bytes,
        "chains": chains,
        "replay": {
            "transactions": plan.replay.len(),
            "from_csn": scan.from,
            "durable_below": plan.prefix,
            "max_csn": plan.max_csn,
            "dropped": plan.dropped.len(),
            "aborts": plan.aborts,
        },
    });
    Ok((out, doc))
}

pub(crate) fn recover(a: RecoverArgs) -> Result<(), Failure> {
    let stores = stores_of(&a.store)?.join(", ");
    let mut o = store_options(&a.store)?.checkpoint_log_bytes(0).create_if_missing(a.create);
    if let Some(t) = a.threads {
        o = o.recovery_threads(t);
    }
    let started = std::time::Instant::now();
    let db = milliscale::Database::open(o).map_err(|e| e.to_string())?;
    let took = started.elapsed();
    let Some(r) = db.recovery_report() else {
        println!("{stores}: no database there; created an empty one (--create)");
        return Ok(());
    };
    if a.json {
        let chains: Vec<_> = r
            .chains
            .iter()
            .map(|(c, parts, t)| {
                serde_json::json!({
                    "group": c.group,
                    "lane": c.lane,
                    "parts": parts,
                    "truncated": t.as_ref().map(|t| serde_json::json!({
                        "key": t.key, "offset": t.offset, "bytes": t.bytes, "error": t.error.to_string()
                    })),
                })
            })
            .collect();
        let j = serde_json::json!({
            "found_version": r.found_version,
            "old_epoch": r.old_epoch,
            "new_epoch": r.new_epoch,
            "checkpoint_csn": r.checkpoint.map(|c| c.0),
            "checkpoint_chunks": r.checkpoint.map(|c| c.1),
            "checkpoint_rows": r.checkpoint_rows_loaded,
            "log_objects": r.log_objects,
            "log_bytes": r.log_bytes,
            "chains": chains,
            "repaired": r.repaired,
            "prefix": r.prefix,
            "max_csn": r.max_csn,
            "replayed": r.replayed,
            "dropped": r.dropped.len(),
            "aborts": r.aborts,
            "records_applied": r.records_applied,
            "threads": r.threads,
            "new_checkpoint_csn": r.new_checkpoint_csn,
            "seconds": {
                "fence": r.timings.fence.as_secs_f64(),
                "scan": r.timings.scan.as_secs_f64(),
                "load_checkpoint": r.timings.load_checkpoint.as_secs_f64(),
                "replay": r.timings.replay.as_secs_f64(),
                "checkpoint_and_publish": r.timings.checkpoint_and_publish.as_secs_f64(),
                "total": r.timings.total.as_secs_f64(),
                "open": took.as_secs_f64(),
            },
            "log_mb_per_s": r.log_bytes as f64 / 1e6 / (r.timings.scan + r.timings.replay).as_secs_f64().max(1e-9),
        });
        println!("{}", serde_json::to_string_pretty(&j).map_err(|e| e.to_string())?);
        return Ok(());
    }
    println!(
        "recovered {} (manifest version {}, epoch {} -> {}), {} threads",
        stores, r.found_version, r.old_epoch, r.new_epoch, r.threads
    );
    match r.checkpoint {
        Some((csn, chunks, rows)) => {
            println!(
                "checkpoint: CSN {csn}, {chunks} chunks, {rows} rows ({} loaded)",
                r.checkpoint_rows_loaded
            )
        }
        None => println!("checkpoint: none"),
    }
    println!("log: {} objects, {} bytes", r.log_objects, r.log_bytes);
    for (c, parts, t) in &r.chains {
        let (g, l) = (c.group, c.lane);
        match t {
            None => println!("  group {g} lane {l}: {parts} parts"),
            Some(t) => println!(
                "  group {g} lane {l}: {parts} parts; torn tail cut: {} bytes of {} at offset {}: {}",
                t.bytes, t.key, t.offset, t.error
            ),
        }
    }
    for x in &r.repaired {
        println!("  repaired from another store: {x}");
    }
    println!(
        "replayed {} transactions ({} records, {} keys); every CSN below {} was durable \
         (largest {}); dropped {} (DSN not below the prefix); {} aborts",
        r.replayed,
        r.records_applied,
        r.keys_installed,
        r.prefix,
        r.max_csn,
        r.dropped.len(),
        r.aborts
    );
    if let Some(c) = r.new_checkpoint_csn {
        println!("wrote checkpoint at CSN {c}");
    }
    let t = &r.timings;
    println!(
        "time: fence {:.3} s, scan {:.3} s, load checkpoint {:.3} s, replay {:.3} s, \
         checkpoint+publish {:.3} s, total {:.3} s; log {:.1} MB/s (scan+replay)",
        t.fence.as_secs_f64(),
        t.scan.as_secs_f64(),
        t.load_checkpoint.as_secs_f64(),
        t.replay.as_secs_f64(),
        t.checkpoint_and_publish.as_secs_f64(),
        t.total.as_secs_f64(),
        r.log_bytes as f64 / 1e6 / (t.scan + t.replay).as_secs_f64().max(1e-9)
    );
    db.close().map_err(|e| format!("closing the recovered database: {e}"))?;
    Ok(())
}

pub(crate) fn dump(a: DumpArgs) -> Result<(), Failure> {
    use std::io::Write;
    require_existing(&stores_of(&a.store)?)?;
    let options = store_options(&a.store)?;
    let db = match &a.at {
        None => milliscale::Database::open_read_only(options),
        Some(at) => {
            let at = milliscale::At::parse(at).map_err(|e| Usage(e.to_string()))?;
            milliscale::Database::open_at(options, at)
        }
    }
    .map_err(|e| e.to_string())?;
    let table = db.open_table(&a.table).map_err(|e| e.to_string())?;
    let mut tx = db.begin().map_err(|e| e.to_string())?;
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    let mut lower: Vec<u8> = Vec::new();
    let mut first = true;
    let written = loop {
        let bound = if first {
            std::ops::Bound::Unbounded
        } else {
            std::ops::Bound::Excluded(lower.as_slice())
        };
        let rows = tx
            .scan(&table, bound, std::ops::Bound::Unbounded, milliscale::Direction::Forward, 10_000)
            .map_err(|e| e.to_string())?;
        let Some((last, _)) = rows.last() else { break out.flush() };
        let last = last.clone();
        let mut w = Ok(());
        for (k, v) in &rows {
            w = if a.json {
                let mut row = serde_json::Map::new();
                json_bytes(&mut row, "key", k);
                json_bytes(&mut row, "value", v);
                writeln!(out, "{}", serde_json::Value::Object(row))
            } else {
                writeln!(out, "{} {}", printable(k), printable(v))
            };
            if w.is_err() {
                break;
            }
        }
        if w.is_err() {
            break w;
        }
        lower = last;
        first = false;
    };
    match written {
        // A reader that went away (`dump | head`) ends the output.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.to_string().into()),
        _ => Ok(()),
    }
}

/// The retention window: its span, bases and ended logs, and what it
/// keeps on the store at what price.
fn window_section(
    out: &mut String,
    store: &std::sync::Arc<dyn objstore::ObjectStore>,
    m: &milliscale::Manifest,
    h: &milliscale::history::History,
) -> milliscale::Result<serde_json::Value> {
    use milliscale::history::{S3_EXPRESS_USD_PER_GB_MONTH, S3_STANDARD_USD_PER_GB_MONTH};
    let time = |ms: u64| {
        humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + Duration::from_millis(ms))
            .to_string()
    };
    let (oldest_csn, oldest_ms) = h.oldest();
    let w = milliscale::history::window_bytes(store, m)?;
    let kept = w.present + w.window + w.time_index;
    let gb = |b: u64| b as f64 / 1e9;
    say!(
        out,
        "retention window: {} ({} s); the oldest reachable point is CSN {oldest_csn} ({})",
        humantime::format_duration(Duration::from_millis(h.retention_ms)),
        h.retention_ms / 1000,
        time(oldest_ms)
    );
    say!(
        out,
        "  {} bases (checkpoints the past is rebuilt from) and {} ended logs of earlier writers",
        h.bases.len(),
        h.ended.len()
    );
    // The oldest and newest few; a week of checkpoints is thousands.
    let shown = |i: usize| i < 5 || i + 5 >= h.bases.len();
    for (i, b) in h.bases.iter().enumerate() {
        if !shown(i) {
            if shown(i - 1) {
                say!(out, "  ... {} more bases ...", h.bases.len() - 10);
            }
            continue;
        }
        say!(
            out,
            "  base at CSN {} (epoch {}, {}): {}",
            b.csn,
            b.epoch,
            time(b.at_ms),
            b.checkpoint.as_ref().map_or("the empty database".to_owned(), |c| format!(
                "{} rows, {} bytes",
                c.rows, c.bytes
            ))
        );
    }
    for s in &h.ended {
        say!(
            out,
            "  ended log of epoch {}: CSNs {}..={}, segments before {}",
            s.log.epoch,
            s.from,
            s.max_csn,
            s.end_segment
        );
    }
    say!(
        out,
        "  on this store: {} bytes for the present, {} more for the window, {} of time index \
         ({} objects; {} bytes no longer needed, deleted at the next checkpoint)",
        w.present,
        w.window,
        w.time_index,
        w.objects,
        w.garbage
    );
    say!(
        out,
        "  storage: ${:.4}/month at S3 Express One Zone's ${S3_EXPRESS_USD_PER_GB_MONTH}/GB-month \
         (the window's share ${:.4}); ${:.4}/month at S3 Standard's",
        gb(kept) * S3_EXPRESS_USD_PER_GB_MONTH,
        gb(w.window + w.time_index) * S3_EXPRESS_USD_PER_GB_MONTH,
        gb(kept) * S3_STANDARD_USD_PER_GB_MONTH
    );
    Ok(serde_json::json!({
        "retention_ms": h.retention_ms,
        "oldest_csn": oldest_csn,
        "oldest_time": time(oldest_ms),
        "bases": h.bases.iter().map(|b| serde_json::json!({
            "csn": b.csn, "epoch": b.epoch, "at": time(b.at_ms),
            "bytes": b.checkpoint.as_ref().map_or(0, |c| c.bytes),
        })).collect::<Vec<_>>(),
        "ended_logs": h.ended.iter().map(|s| serde_json::json!({
            "epoch": s.log.epoch, "from": s.from, "max_csn": s.max_csn,
        })).collect::<Vec<_>>(),
        "present_bytes": w.present,
        "window_bytes": w.window,
        "time_index_bytes": w.time_index,
        "garbage_bytes": w.garbage,
        "usd_per_month_s3_express": gb(kept) * S3_EXPRESS_USD_PER_GB_MONTH,
        "window_usd_per_month_s3_express": gb(w.window + w.time_index) * S3_EXPRESS_USD_PER_GB_MONTH,
    }))
}

/// Bytes as text where they are printable ASCII (quoted, with `"` and `\`
/// escaped), else as `0x` and hex: a key or value per column.
pub(crate) fn printable(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) if s.bytes().all(|c| (0x20..0x7f).contains(&c)) => format!("{s:?}"),
        _ => format!("0x{}", hex(b)),
    }
}

/// `name` as a string if `b` is UTF-8, else `name_hex` as hex.
fn json_bytes(row: &mut serde_json::Map<String, serde_json::Value>, name: &str, b: &[u8]) {
    match std::str::from_utf8(b) {
        Ok(s) => row.insert(name.to_owned(), s.into()),
        Err(_) => row.insert(format!("{name}_hex"), hex(b).into()),
    };
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn printable_bytes_print_as_text_and_the_rest_as_hex() {
        assert_eq!(printable(b"user:42"), "\"user:42\"");
        assert_eq!(printable(b"say \"hi\""), "\"say \\\"hi\\\"\"");
        assert_eq!(printable(&[0, 1, 0xff]), "0x0001ff");
        assert_eq!(printable("é".as_bytes()), "0xc3a9", "non-ASCII is not assumed printable");
        assert_eq!(printable(b"tab\there"), "0x7461620968657265");
    }
}
