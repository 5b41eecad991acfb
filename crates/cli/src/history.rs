//! `milliscale restore`: the database at a point of a source's retention
//! window, written to empty stores as a new database; `milliscale backup`:
//! the window's objects copied to other stores (design record 0012).

use clap::Args;
use std::time::Duration;

use crate::args::{Failure, Usage, require_existing, store_options};

#[derive(Args)]
pub(crate) struct RestoreArgs {
    /// A store holding the source database (repeat for replicas); only
    /// read.
    #[arg(long, required = true)]
    pub(crate) from: Vec<String>,
    /// The point of the source's window: `csn:N` (or a bare number), or an
    /// RFC 3339 time (`2026-12-07T06:30:00Z`): every transaction
    /// acknowledged before it and none that pre-committed after it.
    #[arg(long, value_name = "CSN|TIME")]
    pub(crate) at: String,
    /// An empty store for the new database (repeat for replicas).
    #[arg(long, required = true)]
    pub(crate) to: Vec<String>,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn restore(a: RestoreArgs) -> Result<(), Failure> {
    require_existing(&a.from)?;
    let at = milliscale::At::parse(&a.at).map_err(|e| Usage(e.to_string()))?;
    let source = store_options(&a.from)?;
    let target = store_options(&a.to)?;
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {elapsed} {msg}")
            .expect("a valid template"),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let progress = |step: milliscale::RestoreStep| match step {
        milliscale::RestoreStep::Reading => {
            bar.set_message(format!("reading the source's checkpoint and log up to {at}"));
        }
        milliscale::RestoreStep::Writing { rows, of } => {
            bar.set_message(format!("writing the new database's checkpoint: {rows} of {of} rows"));
        }
        milliscale::RestoreStep::Publishing => {
            bar.set_message("publishing the new database's manifest");
        }
    };
    let r = milliscale::restore(source, at, &target, &progress);
    bar.finish_and_clear();
    let r = r.map_err(|e| e.to_string())?;
    let p = &r.past;
    let mb_s = p.log_bytes as f64 / 1e6 / r.read.as_secs_f64().max(1e-9);
    if a.json {
        let doc = serde_json::json!({
            "at": at.to_string(),
            "csn": p.csn,
            "base_csn": p.base_csn,
            "checkpoint_csn": r.checkpoint_csn,
            "tables": r.tables,
            "rows": r.rows,
            "bytes": r.bytes,
            "log_objects": p.log_objects,
            "log_bytes": p.log_bytes,
            "replayed": p.replayed,
            "read_s": r.read.as_secs_f64(),
            "write_s": r.write.as_secs_f64(),
            "log_mb_per_s": mb_s,
            "time_uncertain_above": p.time.and_then(|t| t.uncertain_above),
        });
        println!("{doc}");
        return Ok(());
    }
    println!(
        "restored {} to {}: the source at {at} is CSN {} (from its base at CSN {}, {} \
         transactions replayed from {} log objects, {} bytes, in {:.2?}: {mb_s:.1} MB/s of log)",
        a.from.join(" + "),
        a.to.join(" + "),
        p.csn,
        p.base_csn,
        p.replayed,
        p.log_objects,
        p.log_bytes,
        r.read
    );
    println!(
        "wrote {} tables, {} rows, {} bytes of checkpoint at CSN {} in {:.2?}; a writer opens it \
         with --store {}",
        r.tables,
        r.rows,
        r.bytes,
        r.checkpoint_csn,
        r.write,
        a.to.join(" --store ")
    );
    if let Some(above) = p.time.and_then(|t| t.uncertain_above) {
        println!(
            "note: the time falls after the last time index sample a crashed writer wrote out; \
             transactions up to CSN {above} that it acknowledged after that sample are left out \
             (restore --at csn:N to choose exactly)"
        );
    }
    Ok(())
}

/// `milliscale backup`: copy what a database's retention window needs to
/// other stores, once or continuously; `backup verify` checks a backup.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct BackupArgs {
    #[command(subcommand)]
    pub(crate) verify: Option<BackupCmd>,
    /// A store holding the database to back up (repeat for replicas); or
    /// the `--config` file's stores. Only read.
    #[arg(long, alias = "from")]
    pub(crate) store: Vec<String>,
    /// The backup's store (a bucket, a prefix or a directory; repeat for
    /// copies): empty, or a backup of this database.
    #[arg(long)]
    pub(crate) to: Vec<String>,
    /// Keep following the database: a pass every `--every`, until the
    /// process is stopped (a pass cut short leaves the previous one's
    /// backup whole: its manifest is written last).
    #[arg(long)]
    pub(crate) follow: bool,
    /// With --follow: the time between passes (`1s`, `1m`).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub(crate) every: Duration,
    /// Print each pass's report as one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(clap::Subcommand)]
pub(crate) enum BackupCmd {
    /// Read every object a backup's manifest needs and check it against
    /// its checksum: checkpoint chunks, log parts (and each ended log's
    /// decision), time index objects. Exits 1 if anything is damaged.
    Verify {
        /// The backup's store (repeat for copies).
        #[arg(long, required = true)]
        store: Vec<String>,
        /// Print the report as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

pub(crate) fn backup(a: BackupArgs) -> Result<(), Failure> {
    if let Some(BackupCmd::Verify { store, json }) = a.verify {
        return verify(&store, json);
    }
    if a.to.is_empty() {
        return Err(Usage("give the backup's store: --to URL".into()).into());
    }
    let source = store_options(&a.store)?;
    require_existing(&crate::args::stores_of(&a.store)?)?;
    let target = store_options(&a.to)?;
    let mut passes = 0u64;
    loop {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {elapsed} copying {pos}/{len} objects",
            )
            .expect("a valid template"),
        );
        if a.follow {
            bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        let r = milliscale::history::backup::backup(&source, &target, &|done, of| {
            bar.set_length(of);
            bar.set_position(done);
        });
        bar.finish_and_clear();
        let r = r.map_err(|e| e.to_string())?;
        passes += 1;
        if a.json {
            println!(
                "{}",
                serde_json::json!({
                    "pass": passes,
                    "manifest_version": r.manifest_version,
                    "objects_copied": r.objects_copied,
                    "bytes_copied": r.bytes_copied,
                    "objects_skipped": r.objects_skipped,
                    "bytes_skipped": r.bytes_skipped,
                    "objects_deleted": r.objects_deleted,
                    "seconds": r.elapsed.as_secs_f64(),
                })
            );
        } else {
            println!(
                "backup pass {passes}: manifest version {}: copied {} objects ({} bytes), {} \
                 already there ({} bytes), {} deleted that the window let go, in {:.2?}",
                r.manifest_version,
                r.objects_copied,
                r.bytes_copied,
                r.objects_skipped,
                r.bytes_skipped,
                r.objects_deleted,
                r.elapsed
            );
        }
        if !a.follow {
            return Ok(());
        }
        // A pass cut short by a signal leaves a backup of the previous
        // pass's manifest: the manifest is written last.
        std::thread::sleep(a.every.saturating_sub(r.elapsed));
    }
}

fn verify(store: &[String], json: bool) -> Result<(), Failure> {
    require_existing(store)?;
    let o = store_options(store)?;
    let r = milliscale::history::backup::verify(&o).map_err(|e| e.to_string())?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "manifest_version": r.manifest_version,
                "chunks": r.chunks,
                "log_objects": r.log_objects,
                "time_objects": r.time_objects,
                "bytes": r.bytes,
                "problems": r.problems,
            })
        );
    } else {
        println!(
            "verified manifest version {}: {} checkpoint chunks, {} log objects, {} time index \
             objects, {} bytes read; {} problems",
            r.manifest_version,
            r.chunks,
            r.log_objects,
            r.time_objects,
            r.bytes,
            r.problems.len()
        );
        for p in &r.problems {
            println!("  {p}");
        }
    }
    if r.problems.is_empty() {
        Ok(())
    } else {
        Err(Failure::Run(format!("{} damaged or missing objects", r.problems.len())))
    }
}

/// `milliscale clone`: a new database that starts as the source was at a
/// point of its window, without copying anything.
#[derive(Args)]
pub(crate) struct CloneArgs {
    /// A store holding the source database (repeat for replicas); only
    /// read, but for the clone's registration there.
    #[arg(long, required = true)]
    pub(crate) from: Vec<String>,
    /// The point of the source's window: `csn:N` (or a bare number), or an
    /// RFC 3339 time.
    #[arg(long, value_name = "CSN|TIME")]
    pub(crate) at: String,
    /// An empty store for the clone (repeat for replicas).
    #[arg(long, required = true)]
    pub(crate) to: Vec<String>,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn clone(a: CloneArgs) -> Result<(), Failure> {
    require_existing(&a.from)?;
    let at = milliscale::At::parse(&a.at).map_err(|e| Usage(e.to_string()))?;
    let source = store_options(&a.from)?;
    let target = store_options(&a.to)?;
    let r = milliscale::clone_at(&source, at, &target).map_err(|e| e.to_string())?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "at": at.to_string(),
                "csn": r.csn,
                "base_csn": r.base_csn,
                "requests": r.requests,
                "seconds": r.elapsed.as_secs_f64(),
            })
        );
    } else {
        println!(
            "cloned {} at {at} (CSN {}, from its base at CSN {}) to {} in {:.2?}, {} requests; \
             its first writer (--store {}) loads the source's objects and writes its own \
             checkpoint, after which the two share nothing",
            a.from.join(" + "),
            r.csn,
            r.base_csn,
            a.to.join(" + "),
            r.elapsed,
            r.requests,
            a.to.join(" --store ")
        );
    }
    Ok(())
}
