//! `milliscale replica` (a read replica or hot standby) and `milliscale
//! checkpoint` (a checkpoint built from the log, offered to the writer).

use crate::args::Failure;
use crate::args::{store_options, threads};
use crate::inspect::printable;
use clap::Args;
use std::time::Duration;

#[derive(Args)]
pub(crate) struct CheckpointArgs {
    /// A store holding the database (repeat for replicas, in the writer's
    /// order).
    #[arg(long)]
    pub(crate) store: Vec<String>,
    /// Build it from the log (the only way offered: the writer is not
    /// asked, and its memory is not scanned).
    #[arg(long, required = true)]
    pub(crate) from_log: bool,
    /// Give up if the replica has not caught up with the log within this
    /// many seconds.
    #[arg(long = "timeout-s", alias = "timeout", default_value_t = 60.0)]
    pub(crate) timeout: f64,
    /// Print what was offered as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
pub(crate) struct ReplicaArgs {
    /// A store holding the database (repeat for replicas, in the writer's
    /// order).
    #[arg(long)]
    pub(crate) store: Vec<String>,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long = "for", value_name = "SECONDS")]
    pub(crate) run_for: Option<f64>,
    /// Stop once this CSN (a commit's token) is applied, or fail after
    /// `--for` seconds (default 30) without it.
    #[arg(long, value_name = "CSN")]
    pub(crate) until_csn: Option<u64>,
    /// Print a progress line this often, in seconds (0: never).
    #[arg(long = "every-s", alias = "every", default_value_t = 1.0)]
    pub(crate) every: f64,
    /// Poll a chain at most this often, in ms.
    #[arg(long, default_value_t = 5.0)]
    pub(crate) poll_min_ms: f64,
    /// Poll a chain at least this often (while the database is idle, this
    /// often), in ms.
    #[arg(long, default_value_t = 1000.0)]
    pub(crate) poll_max_ms: f64,
    /// While the database is active, dollars an hour that a millisecond
    /// off the replica's lag is worth, for 1,000 transactions a second: a
    /// chain is polled every sqrt(2 GET price / (price/3600 x its
    /// transactions a second)). [default: 0.016]
    #[arg(long)]
    pub(crate) ms_price_usd: Option<f64>,
    /// Threads that apply the log, split by key (default: the cores, at
    /// most 4).
    #[arg(long)]
    pub(crate) apply_threads: Option<usize>,
    /// Never send a slow read a second time (by default a read slower than
    /// twice the 90th percentile of recent ones is raced by a second, where the
    /// store's client can: s3://, sim://).
    #[arg(long)]
    pub(crate) no_hedge_reads: bool,
    /// When it stops, print this table's rows (hex `key value` lines, in
    /// key order) as the replica sees them.
    #[arg(long)]
    pub(crate) dump: Option<String>,
    /// When it stops, print the metrics as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Build a checkpoint of the replica's state and offer it to the
    /// writer this often, in seconds (a writer with --checkpoint-offload
    /// adopts it and truncates its log).
    #[arg(long, value_name = "SECONDS")]
    pub(crate) offer_checkpoint_every: Option<f64>,
    /// Offer a checkpoint whenever a writer with --checkpoint-offload wants
    /// one (it publishes where it marked its log; the replica offers once
    /// it has applied that far).
    #[arg(long)]
    pub(crate) offer_checkpoints: bool,
}

#[allow(
    clippy::too_many_lines,
    reason = "the replica command read in order: open, follow and print, then promote, offer or dump"
)]
pub(crate) fn replica(a: ReplicaArgs) -> Result<(), Failure> {
    let ms = |x: f64, what: &str| {
        Duration::try_from_secs_f64(x / 1000.0).map_err(|_| format!("--{what} must be >= 0"))
    };
    let poll = milliscale::ReplicaOptions {
        poll_min: ms(a.poll_min_ms, "poll-min-ms")?,
        poll_max: ms(a.poll_max_ms, "poll-max-ms")?,
        millisecond_price: a.ms_price_usd.unwrap_or(milliscale::options::MILLISECOND_PRICE_DEFAULT),
        apply_threads: threads("apply-threads", a.apply_threads)?,
        hedge_reads: !a.no_hedge_reads,
        ..milliscale::ReplicaOptions::default()
    };
    let run_for = a
        .run_for
        .or(a.until_csn.map(|_| 30.0))
        .map(Duration::try_from_secs_f64)
        .transpose()
        .map_err(|_| "--for must be >= 0".to_string())?;
    let every = Duration::try_from_secs_f64(a.every).map_err(|_| "--every-s must be >= 0")?;
    let started = std::time::Instant::now();
    let r = milliscale::Replica::open_with(store_options(&a.store)?, poll)
        .map_err(|e| e.to_string())?;
    eprintln!(
        "replica of {}: checkpoint loaded in {:.2?}, following the log from CSN {}",
        crate::args::stores_of(&a.store)?.join(", "),
        started.elapsed(),
        r.applied_csn()
    );
    let offer_every = a
        .offer_checkpoint_every
        .map(Duration::try_from_secs_f64)
        .transpose()
        .map_err(|_| "--offer-checkpoint-every must be >= 0".to_string())?;
    let mut last_offer = std::time::Instant::now();
    let step = if every.is_zero() { Duration::from_millis(100) } else { every };
    let step = offer_every.map_or(step, |o| step.min(o.max(Duration::from_millis(10))));
    let step = if a.offer_checkpoints { step.min(Duration::from_millis(100)) } else { step };
    let mut last_print = std::time::Instant::now();
    let mut last_records = 0;
    loop {
        let left = run_for.map(|d| d.saturating_sub(started.elapsed()));
        if left.is_some_and(|l| l.is_zero()) {
            break;
        }
        let wait = left.map_or(step, |l| l.min(step));
        if let Some(csn) = a.until_csn {
            match r.wait_for(csn, wait) {
                Ok(()) => break,
                Err(milliscale::Error::Stale { .. }) => {}
                Err(e) => return Err(e.to_string().into()),
            }
        } else {
            std::thread::sleep(wait);
        }
        if let Some(e) = r.error() {
            return Err(format!("the replica stopped: {e}").into());
        }
        r.publish_metrics();
        let timed = offer_every.is_some_and(|o| last_offer.elapsed() >= o);
        if timed || a.offer_checkpoints {
            let t0 = std::time::Instant::now();
            let offer = if timed { r.offer_checkpoint().map(Some) } else { r.offer_if_wanted() };
            match offer {
                Ok(None) => {}
                Ok(Some(c)) => eprintln!(
                    "offered checkpoint {}: {} rows, {} bytes in {:.1?}",
                    c.csn,
                    c.rows,
                    c.bytes,
                    t0.elapsed()
                ),
                Err(e) => eprintln!("offering a checkpoint failed (will retry): {e}"),
            }
            if timed {
                last_offer = std::time::Instant::now();
            }
        }
        if !every.is_zero() && last_print.elapsed() >= every {
            let m = r.metrics();
            let per_s = (m.records_applied - last_records) as f64
                / last_print.elapsed().as_secs_f64().max(1e-9);
            eprintln!(
                "applied CSN {} (seen {}), epoch {}, {:.0} records/s, lag p50 {:.1?} p99 {:.1?}, \
                 {:.0} requests/h{}",
                m.applied_csn,
                m.seen_csn,
                m.epoch,
                per_s,
                m.lag_p50,
                m.lag_p99,
                m.requests_per_hour(),
                m.usd_per_hour().map(|u| format!(", ${u:.4}/h")).unwrap_or_default()
            );
            last_records = m.records_applied;
            last_print = std::time::Instant::now();
        }
    }
    if let Some(csn) = a.until_csn
        && r.applied_csn() <= csn
    {
        let m = r.metrics();
        return Err(format!(
            "CSN {csn} was not applied within {:.1?}: the replica has applied every CSN below {} \
             and read the log up to CSN {}",
            started.elapsed(),
            m.applied_csn,
            m.seen_csn
        )
        .into());
    }
    r.close();
    let m = r.metrics();
    if let Some(table) = &a.dump {
        use std::io::Write;
        let t = r.open_table(table).map_err(|e| e.to_string())?;
        let mut tx = r.begin().map_err(|e| e.to_string())?;
        let rows = tx
            .scan(
                &t,
                std::ops::Bound::Unbounded,
                std::ops::Bound::Unbounded,
                milliscale::Direction::Forward,
                usize::MAX,
            )
            .map_err(|e| e.to_string())?;
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        for (k, v) in &rows {
            writeln!(out, "{} {}", printable(k), printable(v)).map_err(|e| e.to_string())?;
        }
    }
    if a.json {
        let j = serde_json::json!({
            "applied_csn": m.applied_csn,
            "seen_csn": m.seen_csn,
            "epoch": m.epoch,
            "manifest_version": m.manifest_version,
            "elapsed_s": m.elapsed.as_secs_f64(),
            "entries_applied": m.entries_applied,
            "records_applied": m.records_applied,
            "records_per_s": m.records_per_s(),
            "lag_ms": {
                "p50": m.lag_p50.as_secs_f64() * 1e3,
                "p99": m.lag_p99.as_secs_f64() * 1e3,
                "max": m.lag_max.as_secs_f64() * 1e3,
            },
            "polls": m.polls,
            "poll_errors": m.poll_errors,
            "get_requests": m.get_requests,
            "put_requests": m.put_requests,
            "bytes_read": m.bytes_read,
            "requests_per_hour": m.requests_per_hour(),
            "cost_usd": m.cost_usd,
            "usd_per_hour": m.usd_per_hour(),
            "catch_ups": m.catch_ups,
            "epochs_followed": m.epochs_followed,
            "last_error": m.last_error,
        });
        println!("{}", serde_json::to_string_pretty(&j).map_err(|e| e.to_string())?);
    } else {
        eprintln!(
            "stopped at CSN {}: {} transactions ({} records) applied in {:.1?}, lag p50 {:.1?} \
             p99 {:.1?} max {:.1?}, {} GET-class and {} PUT-class requests",
            m.applied_csn,
            m.entries_applied,
            m.records_applied,
            m.elapsed,
            m.lag_p50,
            m.lag_p99,
            m.lag_max,
            m.get_requests,
            m.put_requests
        );
    }
    Ok(())
}

pub(crate) fn checkpoint_from_log(a: CheckpointArgs) -> Result<(), Failure> {
    debug_assert!(a.from_log);
    let timeout = Duration::try_from_secs_f64(a.timeout).map_err(|_| "--timeout-s must be >= 0")?;
    let started = std::time::Instant::now();
    let r = milliscale::Replica::open(store_options(&a.store)?).map_err(|e| e.to_string())?;
    // Caught up: after a second of following (every chain polled several
    // times, even idle ones backing off), wait until everything read by
    // then is applied. The log may still be growing: this is a point in it.
    std::thread::sleep(Duration::from_secs(1).min(timeout));
    let target = r.metrics().seen_csn;
    r.wait_for(target.saturating_sub(1), timeout.saturating_sub(started.elapsed()))
        .map_err(|e| format!("not caught up with CSN {target} within {timeout:?}: {e}"))?;
    let caught_up = started.elapsed();
    let c = r.offer_checkpoint().map_err(|e| e.to_string())?;
    r.close();
    if a.json {
        let j = serde_json::json!({
            "csn": c.csn, "rows": c.rows, "bytes": c.bytes, "chunks": c.chunks.len(),
            "caught_up_s": caught_up.as_secs_f64(), "total_s": started.elapsed().as_secs_f64(),
        });
        println!("{}", serde_json::to_string_pretty(&j).map_err(|e| e.to_string())?);
    } else {
        println!(
            "offered checkpoint {}: {} rows, {} bytes in {} chunks (caught up in {:.1?}, {:.1?} in \
             all); a writer with checkpoint offloading adopts it",
            c.csn,
            c.rows,
            c.bytes,
            c.chunks.len(),
            caught_up,
            started.elapsed()
        );
    }
    Ok(())
}
