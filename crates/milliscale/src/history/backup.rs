//! Backup (design record 0012): the objects a database's window needs,
//! copied to other stores as a database of the same layout, so that
//! `open_at`, `dump --at` and `restore` read the backup with the source
//! gone. Incremental: an object the target already holds at the same size
//! is skipped, a log segment that grew gets only its new bytes (appended
//! where the target appends, else written whole). The manifest goes last,
//! so a backup's manifest never names an object it lacks; objects the
//! window let go are deleted after it.
//!
//! A backup is for reading. `backup/source` on the target names its
//! source; a pass refuses a target whose manifest was written by anyone
//! else (a writer that opened the backup makes it a database of its own).

use milliscale_seam::Elapsed as _;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use objstore::{ObjectStore, StoreError};
use serde::{Deserialize, Serialize};

use super::{Needed, times};
use crate::error::{Error, Result};
use crate::keys::{CHECKPOINT_PREFIX, LOG_PREFIX, MANIFEST_PREFIX, manifest_key, manifest_version};
use crate::manifest::ManifestStore;
use crate::options::Options;
use crate::retry::retry;

/// The object on a backup that names its source.
pub const BACKUP_MARKER: &str = "backup/source";

/// What one backup pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackupReport {
    /// The source's manifest version the backup now holds.
    pub manifest_version: u64,
    /// Objects written (whole or their new bytes), and bytes.
    pub objects_copied: u64,
    /// Bytes written.
    pub bytes_copied: u64,
    /// Objects the target already held.
    pub objects_skipped: u64,
    /// Bytes the target already held (not copied again).
    pub bytes_skipped: u64,
    /// Objects deleted from the target: the window let them go.
    pub objects_deleted: u64,
    /// How long the pass took.
    pub elapsed: Duration,
}

#[derive(Debug, Serialize, Deserialize)]
struct Marker {
    source: Vec<String>,
    /// The last manifest version a pass wrote.
    version: u64,
}

fn open_stores(o: &Options) -> Result<Vec<(String, Arc<dyn ObjectStore>)>> {
    o.stores.iter().map(|spec| Ok((spec.describe(), spec.open()?))).collect()
}

/// Every object of `store` under the backup's prefixes, by key: its size.
fn listing(store: &Arc<dyn ObjectStore>, deadline: Duration) -> Result<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    for p in [CHECKPOINT_PREFIX, LOG_PREFIX, times::TIME_PREFIX] {
        for o in retry(deadline, || store.list(p)).map_err(|e| Error::Store(format!("{e}")))? {
            out.insert(o.key, o.size);
        }
    }
    Ok(out)
}

/// One pass: bring `target`'s stores up to `source`'s current manifest.
/// `progress` is told (objects done, objects to look at).
pub fn backup(
    source: &Options,
    target: &Options,
    progress: &dyn Fn(u64, u64),
) -> Result<BackupReport> {
    let started = milliscale_seam::now();
    let deadline = source.store_deadline;
    let src = open_stores(source)?;
    let needed = source.quorum.needed(src.len());
    let dst = open_stores(target)?;
    if src.is_empty() || dst.is_empty() {
        return Err(Error::InvalidArgument("backup needs a source and a target store".into()));
    }
    let names: Vec<String> = source.stores.iter().map(|s| s.describe()).collect();
    check_marker(&dst, &names, deadline)?;
    // The manifest first: it says what to copy; registered (`leases`), so
    // that the writer's collection keeps it until the pass ends.
    let ms = ManifestStore::new(src.clone(), needed, deadline);
    let read = || ms.read_latest()?.ok_or_else(|| Error::NoDatabase(names.join(", ")));
    let mut m = read()?;
    if m.parent.is_some() {
        return Err(Error::InvalidArgument(
            "the source is a clone that has not been opened yet (its data is its parent's): \
             open it once as its writer, then back it up"
                .into(),
        ));
    }
    let mut tries = 0;
    let _lease = loop {
        let (ended, (live, _)) = super::window_logs(&m);
        let mut checkpoints: Vec<_> = m.checkpoint.iter().map(|c| c.csn).collect();
        checkpoints.extend(
            m.history
                .iter()
                .flat_map(|h| &h.bases)
                .filter_map(|b| b.checkpoint.as_ref())
                .map(|c| c.csn),
        );
        let r = super::leases::Registration {
            kind: "backup".into(),
            expires_ms: Some(0),
            checkpoints,
            logs: ended.into_iter().map(|s| s.log).chain(std::iter::once(live)).collect(),
        };
        match super::collect::hold(&src, needed, deadline, r)? {
            Some((lease, _)) => break lease,
            None if tries < 3 => {
                tries += 1;
                m = read()?;
            }
            None => {
                return Err(Error::StoreUnavailable("the window moved during the backup".into()));
            }
        }
    };
    let want = Needed::of(&m);
    // What the source has of it, from the first store that lists.
    let (from, have) = src
        .iter()
        .find_map(|(_, s)| listing(s, deadline).ok().map(|l| (Arc::clone(s), l)))
        .ok_or_else(|| Error::StoreUnavailable("no source store lists its objects".into()))?;
    let copy: Vec<(String, u64)> = have.into_iter().filter(|(k, _)| want.keeps(k)).collect();
    let mut report = BackupReport { manifest_version: m.version, ..BackupReport::default() };
    let total = copy.len() as u64;
    for (_, d) in &dst {
        let there = listing(d, deadline)?;
        let results = crate::parallel::parallel_map(&copy, 8, |(key, size)| {
            copy_one(&from, d, key, *size, there.get(key).copied(), deadline)
        });
        for (i, r) in results.into_iter().enumerate() {
            match r? {
                Copied::Skipped(b) => {
                    report.objects_skipped += 1;
                    report.bytes_skipped += b;
                }
                Copied::Wrote(b) => {
                    report.objects_copied += 1;
                    report.bytes_copied += b;
                }
            }
            if i % 64 == 0 {
                progress(i as u64, total);
            }
        }
    }
    progress(total, total);
    // Then the manifest, and the marker; then what the window let go.
    let key = manifest_key(m.version);
    let body = m.encode();
    for (name, d) in &dst {
        retry(deadline, || d.put(&key, body.clone()))
            .map_err(|e| Error::Store(format!("{name}: writing {key}: {e}")))?;
        let marker = serde_json::to_vec(&Marker { source: names.clone(), version: m.version })
            .expect("a marker serializes");
        retry(deadline, || d.put(BACKUP_MARKER, marker.clone().into()))
            .map_err(|e| Error::Store(format!("{name}: writing {BACKUP_MARKER}: {e}")))?;
        let (_, deleted) = super::truncate(
            std::slice::from_ref(&(name.clone(), Arc::clone(d))),
            1,
            &m,
            Default::default(),
        );
        report.objects_deleted += deleted;
        if let Ok(list) = d.list(MANIFEST_PREFIX) {
            for o in list {
                if manifest_version(&o.key).is_some_and(|v| v < m.version) {
                    let _ = d.delete(&o.key);
                }
            }
        }
    }
    report.elapsed = started.elapsed_now();
    Ok(report)
}

/// A target that holds a manifest must be a backup of this source whose
/// newest manifest a pass wrote.
fn check_marker(
    dst: &[(String, Arc<dyn ObjectStore>)],
    source: &[String],
    deadline: Duration,
) -> Result<()> {
    for (name, d) in dst {
        let manifests = retry(deadline, || d.list(MANIFEST_PREFIX))
            .map_err(|e| Error::Store(format!("{name}: {e}")))?;
        let Some(newest) = manifests.iter().filter_map(|o| manifest_version(&o.key)).max() else {
            continue;
        };
        let marker = match retry(deadline, || d.get(BACKUP_MARKER)) {
            Ok(b) => serde_json::from_slice::<Marker>(&b).ok(),
            Err(StoreError::NotFound(_)) => None,
            Err(e) => return Err(Error::Store(format!("{name}: reading {BACKUP_MARKER}: {e}"))),
        };
        match marker {
            Some(mk) if mk.source == source && mk.version == newest => {}
            Some(mk) if mk.source != source => {
                return Err(Error::InvalidArgument(format!(
                    "{name} is a backup of {}, not of {}",
                    mk.source.join(", "),
                    source.join(", ")
                )));
            }
            Some(mk) => {
                return Err(Error::InvalidArgument(format!(
                    "{name}: manifest version {newest} was written after the last backup pass \
                     (version {}): a writer opened the backup, which is now a database of its own",
                    mk.version
                )));
            }
            None => {
                return Err(Error::InvalidArgument(format!(
                    "{name} holds a database that is not a backup; back up into an empty bucket, \
                     prefix or directory"
                )));
            }
        }
    }
    Ok(())
}

enum Copied {
    Skipped(u64),
    Wrote(u64),
}

/// Copy `key` (`size` bytes on `from`) to `to`, which holds `there` bytes
/// of it: nothing if the same size, the tail if it grew (appended), else
/// the whole object.
fn copy_one(
    from: &Arc<dyn ObjectStore>,
    to: &Arc<dyn ObjectStore>,
    key: &str,
    size: u64,
    there: Option<u64>,
    deadline: Duration,
) -> Result<Copied> {
    let store_err = |e: StoreError| Error::Store(format!("{key}: {e}"));
    match there {
        Some(t) if t == size => return Ok(Copied::Skipped(size)),
        Some(t) if t > 0 && t < size && key.starts_with(LOG_PREFIX) => {
            // A segment that grew: its first `t` bytes do not change.
            let tail = retry(deadline, || from.get_range(key, t..size)).map_err(store_err)?;
            let n = tail.len() as u64;
            // A store that cannot append (or a copy that is not a prefix
            // after all): written whole below.
            if retry(deadline, || to.append(key, t, tail.clone())).is_ok() {
                return Ok(Copied::Wrote(n));
            }
        }
        _ => {}
    }
    let body = retry(deadline, || from.get(key)).map_err(store_err)?;
    let n = body.len() as u64;
    retry(deadline, || to.put(key, body.clone())).map_err(store_err)?;
    Ok(Copied::Wrote(n))
}

/// What `backup verify` found.
#[derive(Debug, Clone, Default)]
pub struct VerifyReport {
    /// The manifest version checked.
    pub manifest_version: u64,
    /// Checkpoint chunks read and checked against their CRC32C.
    pub chunks: u64,
    /// Log objects read, every part's checksum checked.
    pub log_objects: u64,
    /// Time index objects decoded.
    pub time_objects: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Damage found, one line per object.
    pub problems: Vec<String>,
}

/// Read every object the manifest on `stores` needs and check it: the
/// manifest's own checksum, each chunk against the CRC32C its checkpoint
/// names, each log part against its checksum (and each ended log against
/// its decision), each time index object.
pub fn verify(options: &Options) -> Result<VerifyReport> {
    let deadline = options.store_deadline;
    let stores = open_stores(options)?;
    let needed = options.quorum.needed(stores.len());
    let m = ManifestStore::new(stores.clone(), needed, deadline)
        .read_latest()?
        .ok_or_else(|| Error::NoDatabase(options.stores.iter().map(|s| s.describe()).collect()))?;
    let mut r = VerifyReport { manifest_version: m.version, ..VerifyReport::default() };
    let h = m.history.clone();
    let mut checkpoints: Vec<crate::manifest::CheckpointRef> =
        m.checkpoint.iter().cloned().collect();
    for b in h.iter().flat_map(|h| &h.bases) {
        if let Some(c) = &b.checkpoint
            && !checkpoints.iter().any(|k| k.csn == c.csn)
        {
            match super::base_checkpoint(&stores, c, deadline) {
                Ok(full) => checkpoints.push(full),
                Err(e) => r.problems.push(e.to_string()),
            }
        }
    }
    for c in &checkpoints {
        for chunk in &c.chunks {
            match crate::checkpoint::fetch_chunk(&stores, chunk, deadline) {
                Ok(_) => {
                    r.chunks += 1;
                    r.bytes += chunk.bytes;
                }
                Err(e) => r.problems.push(e.to_string()),
            }
        }
    }
    // The log: every epoch's from the oldest base (or the present's).
    let threads = options.recovery_threads;
    let (ended, (live, from)) = super::window_logs(&m);
    for seal in &ended {
        match crate::recovery::scan_sealed(&stores, needed, seal, threads, deadline).and_then(
            |scan| {
                r.log_objects += scan.objects as u64;
                r.bytes += scan.bytes;
                crate::recovery::plan_sealed(scan, seal)
            },
        ) {
            Ok(_) => {}
            Err(e) => r.problems.push(e.to_string()),
        }
    }
    match crate::recovery::scan_stores(&stores, needed, &live, from, threads, deadline) {
        Ok(scan) => {
            r.log_objects += scan.objects as u64;
            r.bytes += scan.bytes;
            r.problems.extend(scan.repaired.iter().map(|p| format!("repaired from a copy: {p}")));
            for (c, l) in &scan.chains {
                if let Some(t) = &l.truncated {
                    r.problems.push(format!(
                        "{c}: a torn tail at {} byte {}: {}",
                        t.key, t.offset, t.error
                    ));
                }
            }
        }
        Err(e) => r.problems.push(e.to_string()),
    }
    for (name, s) in &stores {
        let Ok(list) = retry(deadline, || s.list(times::TIME_PREFIX)) else {
            r.problems.push(format!("{name}: the time index does not list"));
            continue;
        };
        for o in list {
            match retry(deadline, || s.get(&o.key)) {
                Ok(b) => match times::decode(&o.key, &b) {
                    Ok(_) => {
                        r.time_objects += 1;
                        r.bytes += b.len() as u64;
                    }
                    Err(e) => r.problems.push(format!("{name}: {e}")),
                },
                Err(e) => r.problems.push(format!("{name}: {}: {e}", o.key)),
            }
        }
    }
    Ok(r)
}
