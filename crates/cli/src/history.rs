//! `milliscale restore`: the database at a point of a source's retention
//! window, written to empty stores as a new database (design record 0012).

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
