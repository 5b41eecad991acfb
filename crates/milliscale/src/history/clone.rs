//! Clone (design record 0012): a new database, on its own stores, that
//! starts as its parent was at a point of the parent's window, without
//! copying anything. Its first manifest names the parent's base checkpoint
//! and the parent's logs up to the point ([`Parent`]), and its own empty
//! log above the point; a registration in the parent's stores keeps those
//! objects from the parent's collection (`leases`). The clone's first
//! writer loads them (recovery), writes its own checkpoint, drops the
//! parent from its manifest and withdraws the registration: from then on
//! the two databases share nothing, and neither sees the other's writes.
//!
//! Making a clone reads the parent's manifest, its time index and one
//! chunk list, and writes one registration and one manifest: its cost does
//! not grow with the database.

use milliscale_seam::Elapsed as _;
use std::sync::Arc;
use std::time::Duration;

use objstore::ObjectStore;

use super::At;
use super::leases::{self, Registration};
use crate::error::{Error, Result};
use crate::manifest::{Manifest, ManifestStore, Parent, SealedLog};
use crate::mvcc::Csn;
use crate::options::{Options, StoreSpec};

/// What making a clone did.
#[derive(Debug, Clone, Default)]
pub struct CloneReport {
    /// The clone point: every commit of the parent at or below it.
    pub csn: Csn,
    /// The parent's base the clone starts from (its checkpoint's CSN).
    pub base_csn: Csn,
    /// Requests made to the parent's and the clone's stores.
    pub requests: u64,
    /// How long it took.
    pub elapsed: Duration,
}

type Named = Vec<(String, Arc<dyn ObjectStore>)>;

fn open_named(specs: &[StoreSpec]) -> Result<Named> {
    specs.iter().map(|s| Ok((s.describe(), s.open()?))).collect()
}

/// Refuse stores that hold any manifest or log object: clones and
/// restores write new databases.
pub(crate) fn ensure_empty(named: &Named, deadline: Duration, what: &str) -> Result<()> {
    for (name, s) in named {
        for prefix in [crate::keys::MANIFEST_PREFIX, crate::keys::LOG_PREFIX] {
            let found = crate::retry::retry(deadline, || s.list(prefix))
                .map_err(|e| Error::Store(format!("{name}: {e}")))?;
            if let Some(o) = found.first() {
                return Err(Error::InvalidArgument(format!(
                    "the {what} target {name} is not empty (it holds {}): {what} writes a new \
                     database, into an empty bucket, prefix or directory",
                    o.key
                )));
            }
        }
    }
    Ok(())
}

/// Make a clone of the database on `source`'s stores at `at`, on
/// `target`'s stores (empty). Open it with `Database::open(target)` (its
/// first writer loads the parent's objects; give
/// `Options::parent_stores` if the source's stores are handles, not URLs).
pub fn clone_at(source: &Options, at: At, target: &Options) -> Result<CloneReport> {
    clone_with(source, at, target, &[])
}

/// One write of a clone's overlay: a table (by name), a key, and its
/// value (`None`: deleted).
pub type OverlayWrite = (String, Vec<u8>, Option<Vec<u8>>);

/// The key of a clone's overlay object.
pub(crate) fn overlay_key(csn: Csn) -> String {
    format!("clone/overlay-{csn:020}")
}

/// [`clone_at`], and then `overlay` written on the parent's state at the
/// point as one transaction of the clone's own (CSN point + 1): a clone
/// that starts from a state near one of the parent's points (a cluster's
/// shard at a commit timestamp, whose versions above it the overlay puts
/// back). Each table it writes must exist at the point. The overlay is
/// one object in the clone's stores, read by the clone's first writer;
/// making the clone costs one request per store more, and the overlay's
/// bytes.
pub fn clone_with(
    source: &Options,
    at: At,
    target: &Options,
    overlay: &[OverlayWrite],
) -> Result<CloneReport> {
    let started = milliscale_seam::now();
    target.validate()?;
    let deadline = source.store_deadline;
    if source.stores.iter().any(|s| matches!(s, StoreSpec::Handle(_)))
        && target.parent_stores.is_empty()
    {
        return Err(Error::InvalidArgument(
            "a clone names its parent's stores by URL; these are handles: give the clone's \
             options `parent_stores` to open it"
                .into(),
        ));
    }
    let dst = open_named(&target.stores)?;
    if dst.is_empty() {
        return Err(Error::InvalidArgument("clone needs a target store".into()));
    }
    ensure_empty(&dst, target.store_deadline, "clone")?;
    let src = open_named(&source.stores)?;
    let needed = source.quorum.needed(src.len());
    let ms = ManifestStore::new(src.clone(), needed, deadline);
    let names = || source.stores.iter().map(StoreSpec::describe).collect::<Vec<_>>();
    let mut requests = 2;
    let mut m = ms.read_latest()?.ok_or_else(|| Error::NoDatabase(names().join(", ")))?;
    if m.parent.is_some() {
        return Err(Error::InvalidArgument(
            "the source is a clone that has not been opened yet: open it once as its writer, \
             then clone it"
                .into(),
        ));
    }
    // Choose, register (without expiry: the clone's first writer
    // withdraws it), and check that the parent still keeps it.
    let mut tries = 0;
    let (choice, key) = loop {
        let choice = super::past::choose(&src, &m, at, deadline)?;
        let mut reg: Registration = choice.registration();
        reg.kind = "clone".into();
        reg.expires_ms = None;
        requests += 4;
        match super::collect::hold(&src, needed, deadline, reg)? {
            Some((lease, _)) => break (choice, lease.keep()),
            None if tries < 3 => {
                tries += 1;
                m = ms.read_latest()?.ok_or_else(|| Error::NoDatabase(names().join(", ")))?;
            }
            None => {
                return Err(Error::InvalidArgument(format!(
                    "{at}: the window's start moved past it while the clone was made"
                )));
            }
        }
    };
    let withdraw = |e: Error| {
        leases::withdraw(&src, &key);
        e
    };
    let n = choice.n;
    let (logs, r) = logs_to(&src, needed, &m, &choice, at, deadline);
    requests += r;
    let logs = logs.map_err(withdraw)?;
    let checkpoint = match (&choice.base.checkpoint, &m.checkpoint) {
        (Some(c), Some(cur)) if c.csn == cur.csn => Some(cur.clone()),
        (Some(c), _) => {
            requests += 1;
            Some(super::base_checkpoint(&src, c, deadline).map_err(withdraw)?)
        }
        (None, _) => None,
    };
    let h = super::past::history_of(&m);
    let mut clone = Manifest::initial(
        m.log_format,
        target.log_groups() as u32,
        target.groups_per_stream() as u32,
        target.log_lanes as u32,
        target.segment_parts_max,
    );
    // Epochs go on from the parent's: its logs keep theirs.
    clone.epoch = m.epoch + 1;
    clone.log.epoch = m.epoch + 1;
    clone.log.base_csn = n + 1;
    clone.tables = m.tables.clone();
    clone.dropped = h.dropped_at_csn(m.tables.len(), &m.dropped, n);
    let dst_needed = target.quorum.needed(dst.len());
    let overlay = if overlay.is_empty() {
        None
    } else {
        let o = put_overlay(&dst, dst_needed, target.store_deadline, &clone, n, overlay);
        requests += dst.len() as u64;
        clone.log.base_csn = n + 2;
        Some(o.map_err(withdraw)?)
    };
    clone.parent = Some(Parent {
        stores: names(),
        needed,
        registration: key.clone(),
        csn: n,
        checkpoint,
        logs,
        overlay,
    });
    requests += dst.len() as u64;
    ManifestStore::new(dst, dst_needed, target.store_deadline).create(&clone).map_err(withdraw)?;
    Ok(CloneReport { csn: n, base_csn: choice.base.csn, requests, elapsed: started.elapsed_now() })
}

/// The parent's logs a clone at `choice` replays, each cut at the point
/// (every CSN at or below it must be durable in the live log: the
/// parent's time index says how far its log was durable), and the
/// requests made.
fn logs_to(
    src: &Named,
    needed: usize,
    m: &Manifest,
    choice: &super::past::Choice,
    at: At,
    deadline: Duration,
) -> (Result<Vec<SealedLog>>, u64) {
    let n = choice.n;
    let mut logs: Vec<SealedLog> = choice
        .ended
        .iter()
        .map(|s| {
            let mut s = s.clone();
            s.prefix = s.prefix.min(n + 1);
            s.above.retain(|c| *c <= n);
            s.max_csn = s.max_csn.min(n);
            s
        })
        .collect();
    let mut requests = 0;
    if let Some((log, from)) = &choice.live {
        let (durable, r) = durable_below(src, needed, m.log.epoch, n, log, *from, deadline);
        requests += r;
        let durable = match durable {
            Ok(d) => d,
            Err(e) => return (Err(e), requests),
        };
        if n >= durable {
            let e = Error::InvalidArgument(format!(
                "{at} (CSN {n}) is past the newest durable point, CSN {}",
                durable.saturating_sub(1)
            ));
            return (Err(e), requests);
        }
        logs.push(SealedLog {
            log: log.clone(),
            end_segment: u64::MAX,
            from: *from,
            prefix: n + 1,
            above: Vec::new(),
            max_csn: n,
        });
    }
    (Ok(logs), requests)
}

/// Write `writes` as the overlay of `clone` (made at point `n`): one log
/// part holding one commit at CSN `n + 1`, on at least `needed` of `dst`.
fn put_overlay(
    dst: &Named,
    needed: usize,
    deadline: Duration,
    clone: &Manifest,
    n: Csn,
    writes: &[OverlayWrite],
) -> Result<crate::manifest::Overlay> {
    use crate::log::record::{Entry, Op, PartBuilder, Record, Records};
    let live = |name: &str| {
        let ids = clone.tables.iter().enumerate().filter(|(_, t)| t.as_str() == name);
        ids.map(|(i, _)| i as u32).find(|i| !clone.dropped.contains(i))
    };
    let mut records = Vec::with_capacity(writes.len());
    for (table, key, value) in writes {
        let table = live(table).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "the clone's overlay writes table {table}, which the parent does not have at \
                 CSN {n}"
            ))
        })?;
        let op = match value {
            Some(v) => Op::Update(v.clone().into()),
            None => Op::Delete,
        };
        records.push(Record { table, key: key.clone().into(), op });
    }
    let entry = Entry::Commit { csn: n + 1, dsn: n, records: Records::new(&records) };
    let mut part = PartBuilder::new(0, entry.encoded_len());
    part.push(&entry);
    let bytes = part.finish();
    let key = overlay_key(n + 1);
    let mut put = 0;
    let mut last = None;
    for (name, s) in dst {
        match crate::retry::retry(deadline, || s.put(&key, bytes.clone())) {
            Ok(_) => put += 1,
            Err(e) => last = Some(format!("{name}: {e}")),
        }
    }
    if put < needed {
        return Err(Error::StoreUnavailable(format!(
            "writing the clone's overlay: {}",
            last.unwrap_or_default()
        )));
    }
    Ok(crate::manifest::Overlay {
        key,
        csn: n + 1,
        records: records.len() as u64,
        bytes: bytes.len() as u64,
    })
}

/// The transaction of a clone's overlay, read from the first of `named`
/// that holds it whole.
pub(crate) fn read_overlay(
    named: &[(String, Arc<dyn ObjectStore>)],
    o: &crate::manifest::Overlay,
    deadline: Duration,
) -> Result<crate::log::record::Entry> {
    let mut last = String::new();
    for (name, s) in named {
        let bytes = match crate::retry::retry(deadline, || s.get(&o.key)) {
            Ok(b) => b,
            Err(e) => {
                last = format!("{name}: {e}");
                continue;
            }
        };
        match crate::log::decode::decode_part(&bytes) {
            Ok((mut part, _)) if part.entries.len() == 1 && part.entries[0].csn() == o.csn => {
                return Ok(part.entries.remove(0));
            }
            Ok(_) => last = format!("{name}: {} holds another transaction", o.key),
            Err(e) => last = format!("{name}: {}: {e}", o.key),
        }
    }
    Err(Error::Corrupt(format!("the clone's overlay: {last}")))
}

/// Every CSN below the returned one was durable in the live log: from the
/// parent's time index (its newest object of `epoch` says how far its
/// writer's log was durable when written; waited for up to 3 s), else by
/// reading the live log from `from`. Also the requests made.
fn durable_below(
    src: &Named,
    needed: usize,
    epoch: u64,
    n: Csn,
    log: &crate::manifest::LogRef,
    from: Csn,
    deadline: Duration,
) -> (Result<Csn>, u64) {
    let mut requests = 0;
    let until = milliscale_seam::now() + Duration::from_secs(3);
    loop {
        requests += 2;
        let durable = src
            .iter()
            .find_map(|(_, s)| super::times::newest_durable(s, epoch, deadline))
            .unwrap_or(0);
        if durable > n {
            return (Ok(durable), requests);
        }
        if milliscale_seam::now() >= until {
            break;
        }
        milliscale_seam::sleep(Duration::from_millis(200));
    }
    // No index (a database without a window), or an idle writer: read the
    // live log.
    let scan = crate::recovery::scan_stores(src, needed, log, from, 1, deadline);
    requests += 16;
    let r = scan.and_then(crate::recovery::plan_replay_owned).map(|p| p.prefix);
    (r, requests)
}

/// The parent's stores of a clone not opened yet: `options.parent_stores`
/// if given, else the URLs its manifest names.
pub(crate) fn parent_stores(options: &Options, p: &Parent) -> Result<Named> {
    if !options.parent_stores.is_empty() {
        return open_named(&options.parent_stores);
    }
    p.stores
        .iter()
        .map(|u| {
            let s = objstore::open(u).map_err(|e| {
                Error::Store(format!(
                    "the clone's parent store {u}: {e} (give Options::parent_stores to open it)"
                ))
            })?;
            Ok((u.clone(), s))
        })
        .collect()
}
