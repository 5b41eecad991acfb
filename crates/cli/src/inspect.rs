//! `milliscale inspect`, `recover` and `dump`: reading a database's stores
//! without writing as its writer (recover takes it over).

use crate::args::store_options;
use clap::Args;
use std::time::Duration;

#[derive(Args)]
pub(crate) struct RecoverArgs {
    /// A store holding the database (repeat for replicas, in the same order
    /// the writer used).
    #[arg(long, required = true)]
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
    #[arg(long, required = true)]
    pub(crate) store: Vec<String>,
    /// The table to print.
    #[arg(long)]
    pub(crate) table: String,
}

#[derive(Args)]
pub(crate) struct InspectArgs {
    /// The store holding the database: file:///path, s3://bucket/prefix?endpoint=...
    #[arg(long)]
    pub(crate) store: String,
    /// Also list every part.
    #[arg(long)]
    pub(crate) parts: bool,
}

#[allow(
    clippy::too_many_lines,
    reason = "prints the manifest, the checkpoint, the segments and the replay plan in the order a reader reads them"
)]
pub(crate) fn inspect(a: InspectArgs) -> Result<(), String> {
    use milliscale::internals::record::Entry;
    let store = objstore::open(&a.store).map_err(|e| format!("{}: {e}", a.store))?;
    let started = std::time::Instant::now();
    let (m, scan) =
        milliscale::internals::scan_log(&store).map_err(|e| format!("{}: {e}", a.store))?;
    println!(
        "manifest {}: epoch {}, log format {}, tables {:?}",
        milliscale::internals::keys::manifest_key(m.version),
        m.epoch,
        m.log_format,
        m.tables
    );
    match &m.checkpoint {
        None => println!("checkpoint: none"),
        Some(c) => {
            println!(
                "checkpoint at CSN {}: {} chunks, {} rows, {} bytes",
                c.csn,
                c.chunks.len(),
                c.rows,
                c.bytes
            );
            for chunk in &c.chunks {
                println!("  {}: {} bytes, crc32c {:08x}", chunk.key, chunk.bytes, chunk.crc);
            }
        }
    }
    // What a replica follows: sealed logs (as their seals decided), then
    // the current log; and the checkpoints replicas offered a writer.
    for s in &m.sealed {
        println!(
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
    println!(
        "a replica opened now loads the checkpoint and follows the log from CSN {}",
        m.replay_from()
    );
    if let Some(w) = m.checkpoint_wanted {
        println!(
            "checkpoint wanted: the writer offloads its checkpoints and marked its log at CSN \
             {w}; a replica offers one once it has applied that far"
        );
    }
    let named = [(a.store.clone(), std::sync::Arc::clone(&store))];
    let (offers, _) = milliscale::internals::list_offers(&named, Duration::from_secs(30));
    let current = m.checkpoint.as_ref().map_or(0, |c| c.csn);
    for o in &offers {
        let state = match o.csn.cmp(&current) {
            std::cmp::Ordering::Equal => "adopted",
            std::cmp::Ordering::Less => "superseded",
            std::cmp::Ordering::Greater => "not adopted yet",
        };
        println!(
            "checkpoint offer at CSN {}: {} chunks, {} rows, {} bytes ({state})",
            o.csn,
            o.chunks.len(),
            o.rows,
            o.bytes
        );
    }
    println!(
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
    println!(
        "{}: {} log objects, {} bytes (read in {:.2} s)",
        a.store,
        scan.objects,
        scan.bytes,
        started.elapsed().as_secs_f64()
    );
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
        println!(
            "{c} (groups {}..={}): {} objects, {} parts, {entries} entries, CSN {first}..={last}{}",
            groups.start,
            groups.end.saturating_sub(1),
            objects.len(),
            log.parts.len(),
            log.fenced_by.map_or(String::new(), |e| format!(", fenced by epoch {e}"))
        );
        if a.parts {
            for (key, p) in &log.parts {
                println!(
                    "  {key}: group {}, {} entries, CSN {}..={}",
                    p.group,
                    p.entries.len(),
                    csns(p.entries.first()),
                    csns(p.entries.last())
                );
            }
        }
        if let Some(t) = &log.truncated {
            println!(
                "  torn tail cut: {} bytes of {} at offset {}: {}",
                t.bytes, t.key, t.offset, t.error
            );
        }
    }
    let plan = milliscale::internals::plan_replay(&scan).map_err(|e| e.to_string())?;
    println!(
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
    Ok(())
}

pub(crate) fn recover(a: RecoverArgs) -> Result<(), String> {
    let mut o = store_options(&a.store).checkpoint_log_bytes(0).create_if_missing(a.create);
    if let Some(t) = a.threads {
        o = o.recovery_threads(t);
    }
    let started = std::time::Instant::now();
    let db = milliscale::Database::open(o).map_err(|e| e.to_string())?;
    let took = started.elapsed();
    let Some(r) = db.recovery_report() else {
        println!("{}: no database there; created an empty one (--create)", a.store.join(", "));
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
        a.store.join(", "),
        r.found_version,
        r.old_epoch,
        r.new_epoch,
        r.threads
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

pub(crate) fn dump(a: DumpArgs) -> Result<(), String> {
    use std::io::Write;
    let db =
        milliscale::Database::open_read_only(store_options(&a.store)).map_err(|e| e.to_string())?;
    let table = db.open_table(&a.table).map_err(|e| e.to_string())?;
    let mut tx = db.begin().map_err(|e| e.to_string())?;
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    let mut lower: Vec<u8> = Vec::new();
    let mut first = true;
    loop {
        let bound = if first {
            std::ops::Bound::Unbounded
        } else {
            std::ops::Bound::Excluded(lower.as_slice())
        };
        let rows = tx
            .scan(&table, bound, std::ops::Bound::Unbounded, milliscale::Direction::Forward, 10_000)
            .map_err(|e| e.to_string())?;
        let Some((last, _)) = rows.last() else { break };
        let last = last.clone();
        for (k, v) in &rows {
            writeln!(out, "{} {}", hex(k), hex(v)).map_err(|e| e.to_string())?;
        }
        lower = last;
        first = false;
    }
    out.flush().map_err(|e| e.to_string())
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
