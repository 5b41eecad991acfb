//! The database at a point of its window (design record 0012, "The past
//! at CSN n"): the newest base at or below the point, then every epoch's
//! log from there as its decision says, up to the point.

use milliscale_seam::Elapsed as _;
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use objstore::ObjectStore;

use super::times::{self, Resolved};
use super::{At, History};
use crate::error::{Error, Result};
use crate::manifest::{CheckpointRef, Manifest, SealedLog};
use crate::mvcc::Csn;
use crate::recovery::{self, ReplayPlan};

/// What reading the past found.
#[derive(Debug, Clone, Default)]
pub struct PastReport {
    /// The point asked for, as given.
    pub at: Option<At>,
    /// The CSN it resolved to: every commit at or below it is in.
    pub csn: Csn,
    /// For a time: the time index sample it resolved to, and whether a
    /// crash may have lost samples there.
    pub time: Option<Resolved>,
    /// The base it was rebuilt from: its CSN (commits below it are in its
    /// checkpoint; 1 for the empty database).
    pub base_csn: Csn,
    /// The window when it was read: the oldest point (CSN, ms since the
    /// Unix epoch) and the newest CSN.
    pub oldest: (Csn, u64),
    /// The newest point the window reaches now.
    pub newest: Csn,
    /// Epoch logs read.
    pub logs: usize,
    /// Log objects and bytes read (all stores).
    pub log_objects: usize,
    /// Log bytes read (all stores).
    pub log_bytes: u64,
    /// Transactions replayed on the base.
    pub replayed: usize,
    /// Time spent reading and planning.
    pub elapsed: Duration,
}

/// The past, planned: what to load and replay.
pub(crate) struct PastPlan {
    pub(crate) checkpoint: Option<CheckpointRef>,
    pub(crate) plan: ReplayPlan,
    /// The catalog at the point: the manifest's table names, and the ids
    /// not there at the point.
    pub(crate) tables: Vec<String>,
    pub(crate) dropped: Vec<u32>,
    pub(crate) report: PastReport,
    /// Keeps what the plan reads from the writer's collection until the
    /// database is rebuilt (dropped then).
    pub(crate) lease: Option<super::leases::Lease>,
}

/// The history of `m`, or the one its current checkpoint alone gives (a
/// database without a window: only its present is reachable).
pub(crate) fn history_of(m: &Manifest) -> History {
    match &m.history {
        Some(h) => h.clone(),
        None => {
            let mut m = m.clone();
            super::on_publish(&m.clone(), &mut m, Some(0), times::Sample { ms: 0, csn: 0 }, None);
            m.history.expect("a history")
        }
    }
}

/// Resolve a time to the CSN it stands for, with the time index on the
/// first store that answers.
fn resolve_time(
    stores: &[(String, Arc<dyn ObjectStore>)],
    t: std::time::SystemTime,
    h: &History,
    live_epoch: u64,
    deadline: Duration,
) -> Result<Resolved> {
    let oldest_ms = h.oldest().1;
    let first = h.bases.first().map_or(live_epoch, |b| b.epoch);
    let mut epochs: Vec<(u64, Option<Csn>)> = h
        .ended
        .iter()
        .filter(|s| s.log.epoch >= first)
        .map(|s| (s.log.epoch, Some(s.max_csn)))
        .collect();
    epochs.push((live_epoch, None));
    // A running writer writes its samples out every second: wait until
    // every sample at or before `t` is out.
    let ms_t = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let settled = ms_t.saturating_add(times::SETTLE.as_millis() as u64);
    let now = times::now_ms();
    if ms_t > now {
        return Err(Error::InvalidArgument(format!(
            "{} is in the future",
            humantime::format_rfc3339_millis(t)
        )));
    }
    if now < settled {
        milliscale_seam::sleep(Duration::from_millis(settled - now));
    }
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| Error::InvalidArgument("a time before 1970".into()))?
        .as_millis() as u64;
    let mut last = None;
    for (name, s) in stores {
        match times::resolve(s, ms, &epochs, deadline) {
            Ok(Some(r)) => return Ok(r),
            Ok(None) => {
                return Err(Error::InvalidArgument(format!(
                    "{} is before the retention window: the oldest reachable time is {}",
                    humantime::format_rfc3339_millis(t),
                    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(oldest_ms))
                )));
            }
            Err(e) => last = Some(format!("{name}: {e}")),
        }
    }
    Err(Error::StoreUnavailable(format!(
        "reading the time index: {}",
        last.unwrap_or_else(|| "no store".into())
    )))
}

/// What the past at a point reads: the base, and each epoch's log after
/// it (ended ones with their decisions; the live one from its starts).
pub(crate) struct Choice {
    pub(crate) n: Csn,
    pub(crate) time: Option<Resolved>,
    pub(crate) oldest: (Csn, u64),
    pub(crate) base: super::Base,
    pub(crate) ended: Vec<SealedLog>,
    pub(crate) live: Option<(crate::manifest::LogRef, Csn)>,
}

impl Choice {
    /// The registration that keeps what it reads (`leases`).
    pub(crate) fn registration(&self) -> super::leases::Registration {
        let mut logs: Vec<_> = self.ended.iter().map(|s| s.log.clone()).collect();
        logs.extend(self.live.iter().map(|(l, _)| l.clone()));
        super::leases::Registration {
            kind: "past".into(),
            expires_ms: Some(0),
            checkpoints: self.base.checkpoint.iter().map(|c| c.csn).collect(),
            logs,
        }
    }
}

/// Step 1: from manifest `m`, the point `at` stands for and what reading
/// it takes.
pub(crate) fn choose(
    stores: &[(String, Arc<dyn ObjectStore>)],
    m: &Manifest,
    at: At,
    deadline: Duration,
) -> Result<Choice> {
    if m.parent.is_some() {
        return Err(Error::InvalidArgument(
            "a clone that has not been opened yet has no past of its own: open it once as its \
             writer (or read its parent)"
                .into(),
        ));
    }
    let h = history_of(m);
    let oldest = h.oldest();
    let (n, time) = match at {
        At::Csn(n) => (n, None),
        At::Time(_) if m.history.is_none() => {
            return Err(Error::InvalidArgument(format!(
                "{at}: the database keeps no retention window (Options::retention, \
                 --retention), so it has no time index and only its present can be read"
            )));
        }
        At::Time(t) => {
            let r = resolve_time(stores, t, &h, m.log.epoch, deadline)?;
            (r.sample.csn, Some(r))
        }
    };
    if n < oldest.0 {
        return Err(Error::InvalidArgument(format!(
            "{at} (CSN {n}) is before the retention window: {}",
            window(oldest)
        )));
    }
    let base = h.base_for(n).cloned().expect("the oldest base reaches n");
    let (ended, live) = logs_after(&h, m, &base, n);
    Ok(Choice { n, time, oldest, base, ended, live })
}

/// The logs that hold the commits from `base` up to `n`: each ended
/// epoch's log from the base's epoch on (the base's own from its
/// starts), and the live one if it begins at or below `n`.
pub(crate) fn logs_after(
    h: &History,
    m: &Manifest,
    base: &super::Base,
    n: Csn,
) -> (Vec<SealedLog>, Option<(crate::manifest::LogRef, Csn)>) {
    let mut ended = Vec::new();
    for s in h.ended.iter().filter(|s| s.log.epoch >= base.epoch && s.log.base_csn <= n) {
        let mut seal: SealedLog = s.clone();
        if s.log.epoch == base.epoch {
            seal.log.group_start = base.starts.clone();
            seal.from = base.csn;
        }
        ended.push(seal);
    }
    let live = (m.log.epoch >= base.epoch && m.log.base_csn <= n).then(|| {
        let mut log = m.log.clone();
        let from = if m.log.epoch == base.epoch {
            log.group_start = base.starts.clone();
            base.csn
        } else {
            log.group_start = h.live_first.clone();
            m.log.base_csn
        };
        (log, from)
    });
    (ended, live)
}

fn window(oldest: (Csn, u64)) -> String {
    format!(
        "the window reaches from CSN {} ({}) on",
        oldest.0,
        humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(oldest.1))
    )
}

/// Plan the database at `at` from the manifest on `stores`: choose what to
/// read, register it (`leases`: the writer's collection keeps it while the
/// plan's lease is held), then read the logs. A window that moved past the
/// choice while registering is read again, up to three times.
pub(crate) fn plan(
    stores: &[(String, Arc<dyn ObjectStore>)],
    needed: usize,
    at: At,
    threads: usize,
    deadline: Duration,
) -> Result<PastPlan> {
    let started = milliscale_seam::now();
    let (m, choice, lease) =
        hold(stores, needed, deadline, at, |m| choose(stores, m, at, deadline))?;
    read(stores, needed, &m, at, choice, lease, threads, deadline, started)
}

/// Steps 1 to 3: read the manifest, `choose` what to read from it, and
/// register the choice, choosing again (up to three times) if the window
/// moved past it meanwhile. The manifest the choice was made from, the
/// choice, and the registration's lease (none when the stores refuse
/// this reader's writes: then it reads unregistered, and says so).
pub(crate) fn hold(
    stores: &[(String, Arc<dyn ObjectStore>)],
    needed: usize,
    deadline: Duration,
    at: At,
    choose: impl Fn(&Manifest) -> Result<Choice>,
) -> Result<(Manifest, Choice, Option<super::leases::Lease>)> {
    let ms = crate::manifest::ManifestStore::new(stores.to_vec(), needed, deadline);
    let names = || stores.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ");
    let mut m = ms.read_latest()?.ok_or_else(|| Error::NoDatabase(names()))?;
    let mut tries = 0;
    loop {
        let choice = choose(&m)?;
        let held = match super::collect::hold(stores, needed, deadline, choice.registration()) {
            Ok(h) => h.map(|(lease, _)| Some(lease)),
            // A store this reader may not write (read-only credentials):
            // read unregistered, and say that a collection may race it.
            Err(e @ (Error::Store(_) | Error::StoreUnavailable(_))) => {
                tracing::warn!(
                    "reading the past unregistered ({e}): a checkpoint of the writer that \
                     moves its window past this point meanwhile can delete what it reads"
                );
                Some(None)
            }
            Err(e) => return Err(e),
        };
        match held {
            Some(lease) => return Ok((m, choice, lease)),
            None if tries < 3 => {
                tries += 1;
                m = ms.read_latest()?.ok_or_else(|| Error::NoDatabase(names()))?;
            }
            None => {
                return Err(Error::InvalidArgument(format!(
                    "{at}: the window's start moved past it while it was being read"
                )));
            }
        }
    }
}

/// Scan the logs `choice` names, and plan each: the plans in order, and
/// the newest point the window reaches (every CSN at or below it is in
/// the logs). Counts what it read in `report`.
pub(crate) fn scan_logs(
    stores: &[(String, Arc<dyn ObjectStore>)],
    needed: usize,
    m: &Manifest,
    choice: &Choice,
    threads: usize,
    deadline: Duration,
    report: &mut PastReport,
) -> Result<(Vec<ReplayPlan>, Csn)> {
    let mut plans = Vec::new();
    for seal in &choice.ended {
        let scan = recovery::scan_sealed(stores, needed, seal, threads, deadline)?;
        report.log_objects += scan.objects;
        report.log_bytes += scan.bytes;
        plans.push(recovery::plan_sealed(scan, seal)?);
    }
    let mut newest = history_of(m).ended.last().map_or(0, |s| s.max_csn);
    if let Some((log, from)) = &choice.live {
        let scan = recovery::scan_stores(stores, needed, log, *from, threads, deadline)?;
        report.log_objects += scan.objects;
        report.log_bytes += scan.bytes;
        let plan = recovery::plan_replay_owned(scan)?;
        // Every CSN below the prefix is in the log: the newest point.
        newest = newest.max(plan.prefix.saturating_sub(1));
        plans.push(plan);
    }
    report.newest = newest;
    report.logs = plans.len();
    Ok((plans, newest))
}

/// Step 4: read what `choice` names, under `lease`.
#[allow(clippy::too_many_arguments)]
fn read(
    stores: &[(String, Arc<dyn ObjectStore>)],
    needed: usize,
    m: &Manifest,
    at: At,
    choice: Choice,
    lease: Option<super::leases::Lease>,
    threads: usize,
    deadline: Duration,
    started: Instant,
) -> Result<PastPlan> {
    let mut report = PastReport {
        at: Some(at),
        csn: choice.n,
        time: choice.time,
        base_csn: choice.base.csn,
        oldest: choice.oldest,
        ..PastReport::default()
    };
    let (plans, newest) = scan_logs(stores, needed, m, &choice, threads, deadline, &mut report)?;
    let (n, oldest, base) = (choice.n, choice.oldest, choice.base);
    if n > newest {
        return Err(Error::InvalidArgument(format!(
            "{at} (CSN {n}) is past the newest durable point, CSN {newest}: {}",
            window(oldest)
        )));
    }
    let mut plan = ReplayPlan { prefix: n + 1, max_csn: n, ..ReplayPlan::default() };
    for p in plans {
        plan.replay.extend(p.replay.into_iter().filter(|e| e.csn() <= n));
        plan.dropped.extend(p.dropped.into_iter().filter(|(c, _)| *c <= n));
        plan.aborts += p.aborts;
    }
    report.replayed = plan.replay.len();
    let checkpoint = match (&base.checkpoint, &m.checkpoint) {
        (Some(c), Some(current)) if c.csn == current.csn => Some(current.clone()),
        (Some(c), _) => Some(super::base_checkpoint(stores, c, deadline)?),
        (None, _) => None,
    };
    let h = history_of(m);
    report.elapsed = started.elapsed_now();
    Ok(PastPlan {
        checkpoint,
        plan,
        tables: m.tables.clone(),
        dropped: h.dropped_at_csn(m.tables.len(), &m.dropped, n),
        report,
        lease,
    })
}
