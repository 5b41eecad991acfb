//! The manifest: which log and which checkpoint make up the database, who
//! writes it, and the table catalog (invariant 6).
//!
//! The manifest is a chain of objects `manifest/<version>`, each created
//! with a conditional put (`If-None-Match: *`), so two writers can never
//! both create the same version. The highest version is current. With
//! several stores, a version counts once its create has succeeded on a
//! quorum of them; at most one writer can get a quorum for a version.
//!
//! An object holds one line `MSMF <format> <crc32c>` and then the JSON
//! body; the CRC32C covers the body, so a torn or flipped manifest is
//! `Corrupt`, never half-read.
//!
//! Each writer run is an **epoch**. Opening an existing database creates
//! the next version with a higher epoch first; that create is the moment
//! a new writer takes over (the loser of a race gets `Fenced`). It then
//! fences the old epoch's log (`recovery::fence`), recovers, and publishes
//! a version whose log is its own.

use std::sync::Arc;

use bytes::Bytes;
use objstore::{ObjectStore, StoreError};
use serde::{Deserialize, Serialize};

pub mod history;

use crate::error::{Error, Result};
use crate::keys::{Chain, MANIFEST_PREFIX, manifest_key, manifest_version};
use crate::mvcc::Csn;
use crate::retry::retry;

/// The newest manifest format this code writes and reads. Format 2 added
/// [`Manifest::dropped`], format 3 [`Manifest::history`], format 4
/// [`Manifest::parent`], format 5 a parent with an [`Overlay`]; a manifest is written at the lowest format that
/// can express it (1 while no table was ever dropped, no retention window
/// kept and no clone made), so a database that never used them stays
/// readable by the releases that read only 1.
pub const MANIFEST_FORMAT: u32 = 5;
const MAGIC: &str = "MSMF";

/// One version of the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The version number; its object is `manifest/<version>`.
    pub version: u64,
    /// The writer epoch that created this version.
    pub epoch: u64,
    /// The log record format of the log it names.
    pub log_format: u8,
    /// Table names; a table's id is its index. Dropped tables keep their
    /// place, so ids are never used again.
    pub tables: Vec<String>,
    /// The ids of dropped tables (`Database::drop_table`), in the order
    /// they were dropped: recovery, replicas and checkpoints skip their
    /// rows. Since format 2.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<u32>,
    /// The current checkpoint, if one was taken.
    pub checkpoint: Option<CheckpointRef>,
    /// Earlier epochs' logs whose outcome a new writer decided without
    /// writing a checkpoint (a promoted replica, `replica::promote`),
    /// oldest first. Recovery and replicas replay each as its seal says,
    /// then `log`. The next checkpoint covers them all and drops them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sealed: Vec<SealedLog>,
    /// The log written after the checkpoint (and the sealed logs).
    pub log: LogRef,
    /// A writer that offloads its checkpoints (`Options::checkpoint_offload`)
    /// marked its log here: it will adopt an offered checkpoint at or above
    /// this CSN, and replicas offer one once they have applied it
    /// (`Replica::offer_if_wanted`). Cleared by the next checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_wanted: Option<Csn>,
    /// With a retention window (`Options::retention`): the checkpoints and
    /// logs the window keeps, from which the past is read
    /// (the `history` module). Since format 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<history::History>,
    /// A clone that has not been opened yet (`history::clone`): the
    /// database it was cloned from, and what of it the clone starts from.
    /// Its first writer loads that, writes its own checkpoint, and drops
    /// this. Since format 4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<Parent>,
}

/// What a clone starts from, in the stores of the database it was cloned
/// from (its parent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parent {
    /// The parent's stores, as the clone was given them (URLs; or
    /// `Options::parent_stores` supplies them).
    pub stores: Vec<String>,
    /// How many of them a log part or a chunk needed.
    pub needed: usize,
    /// The clone's registration in the parent's stores, which keeps what it
    /// reads from the parent's collection until its first writer withdraws it.
    pub registration: String,
    /// The clone point: every commit of the parent at or below it.
    pub csn: Csn,
    /// The parent's checkpoint it starts from (its chunks in the parent's
    /// stores).
    pub checkpoint: Option<CheckpointRef>,
    /// The parent's logs after that checkpoint, up to the point, each with
    /// the decision of what it replays (only CSNs at or below the point).
    pub logs: Vec<SealedLog>,
    /// Writes of the clone's own applied on the parent's state at the
    /// point, as one transaction at the CSN after it (a clone that starts
    /// from a state that is not one of the parent's points: a cluster's
    /// shard at a commit timestamp). Since format 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlay: Option<Overlay>,
}

/// A clone's overlay ([`Parent::overlay`]): one log part, holding one
/// committed transaction, in the clone's own stores.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overlay {
    /// The object's key.
    pub key: String,
    /// The transaction's CSN: the clone point's next.
    pub csn: Csn,
    /// Its writes.
    pub records: u64,
    /// The object's size.
    pub bytes: u64,
}

/// An earlier epoch's log, fenced, with the replay decision of the writer
/// that took over from it. The decision is the replay rule applied to the
/// entries that a quorum of stores held, so any quorum of stores can
/// supply it again: every CSN in `from..prefix` (commit or abort) is there,
/// and the commits replayed are those below `prefix` and those listed in
/// `above`. Everything else in the log is ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedLog {
    /// The log, with its starts as the last manifest of its epoch named
    /// them.
    pub log: LogRef,
    /// Its segments are below this one in every chain: where the next
    /// epoch's log starts.
    pub end_segment: u64,
    /// The first CSN it supplies: everything below is in the checkpoint or
    /// an earlier sealed log.
    pub from: Csn,
    /// Every CSN in `from..prefix` is in it.
    pub prefix: Csn,
    /// Commits above `prefix` that are replayed (their DSN is below it),
    /// in CSN order.
    pub above: Vec<Csn>,
    /// The largest CSN the decision reached; the next log starts above it.
    pub max_csn: Csn,
}

impl SealedLog {
    /// Is the entry at `csn` part of the decision (replayed if a commit)?
    pub fn includes(&self, csn: Csn) -> bool {
        (self.from..self.prefix).contains(&csn) || self.above.binary_search(&csn).is_ok()
    }
}

/// Where the live log is: the segments of one epoch's log groups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRef {
    /// The epoch that writes it.
    pub epoch: u64,
    /// Its first CSN: everything below is in the checkpoint.
    pub base_csn: Csn,
    /// Log groups (buffers), numbered from 0.
    pub groups: u32,
    /// Groups per log stream. The groups are split into streams of this
    /// many consecutive groups (the last may have fewer); a stream's lanes
    /// carry the parts of all its groups, and its chains are named after
    /// its first group. Manifests written before streams existed have
    /// none: one group per stream, the paper's layout.
    #[serde(default = "one")]
    pub groups_per_stream: u32,
    /// Lanes per stream, each its own chain of segments (lane 0
    /// `log/gGGGG/sSSSSSSSS`, lane `L` `log/gGGGG/lL/sSSSSSSSS`, where
    /// `GGGG` is the stream's first group). Manifests written before lanes
    /// existed have none: one lane.
    #[serde(default = "one")]
    pub lanes: u32,
    /// Per chain, the first segment recovery reads: stream `s`'s lane `l`
    /// at index `s * lanes + l`. Older segments hold only CSNs the
    /// checkpoint covers (and may not be deleted yet).
    pub group_start: Vec<u64>,
    /// Parts per segment before rollover.
    pub parts_max: u32,
}

fn one() -> u32 {
    1
}

impl LogRef {
    /// Groups per stream, at least 1.
    fn per_stream(&self) -> u32 {
        self.groups_per_stream.max(1)
    }

    /// The number of streams.
    pub fn streams(&self) -> u32 {
        self.groups.div_ceil(self.per_stream())
    }

    /// The groups of stream `s`.
    pub fn stream_groups(&self, s: u32) -> std::ops::Range<u32> {
        let k = self.per_stream();
        (s * k).min(self.groups)..((s + 1) * k).min(self.groups)
    }

    /// The stream a chain belongs to; `None` for a chain this log does not
    /// have.
    fn stream_of_chain(&self, chain: Chain) -> Option<u32> {
        let k = self.per_stream();
        (chain.group < self.groups && chain.group.is_multiple_of(k) && chain.lane < self.lanes)
            .then_some(chain.group / k)
    }

    /// The first segment recovery reads in `chain`; `None` for a chain this
    /// log does not have.
    pub fn start(&self, chain: Chain) -> Option<u64> {
        let s = self.stream_of_chain(chain)?;
        self.group_start.get((s * self.lanes + chain.lane) as usize).copied()
    }

    /// The groups whose parts `chain` may hold (those of its stream).
    pub fn chain_groups(&self, chain: Chain) -> std::ops::Range<u32> {
        self.stream_of_chain(chain).map_or(0..0, |s| self.stream_groups(s))
    }

    /// The first segments of stream `s`'s lanes, lane by lane.
    pub fn stream_starts(&self, s: u32) -> &[u64] {
        let lanes = self.lanes as usize;
        &self.group_start[lanes * s as usize..lanes * (s as usize + 1)]
    }

    /// Lane `lane` of stream `s`.
    pub fn chain(&self, s: u32, lane: u32) -> Chain {
        Chain::new(s * self.per_stream(), lane)
    }

    /// Every chain of this log, stream by stream.
    pub fn chains(&self) -> impl Iterator<Item = Chain> + '_ {
        (0..self.streams()).flat_map(move |s| (0..self.lanes).map(move |l| self.chain(s, l)))
    }
}

/// A published checkpoint: every committed version below `csn`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRef {
    /// The snapshot: versions with a smaller CSN are in it.
    pub csn: Csn,
    /// Its chunks, all of which must be read.
    pub chunks: Vec<ChunkRef>,
    /// Rows in all chunks.
    pub rows: u64,
    /// Bytes in all chunks.
    pub bytes: u64,
}

/// One checkpoint chunk object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRef {
    /// Its object key.
    pub key: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// The CRC32C of the whole object.
    pub crc: u32,
}

impl Manifest {
    /// The first manifest of a new database, whose log is written in
    /// part format `log_format` (`log::record::FORMAT_VERSION`).
    pub fn initial(
        log_format: u8,
        groups: u32,
        groups_per_stream: u32,
        lanes: u32,
        parts_max: u32,
    ) -> Manifest {
        Manifest {
            version: 1,
            epoch: 1,
            log_format,
            tables: Vec::new(),
            dropped: Vec::new(),
            checkpoint: None,
            sealed: Vec::new(),
            log: LogRef {
                epoch: 1,
                base_csn: crate::mvcc::CSN_FIRST,
                groups,
                groups_per_stream,
                lanes,
                group_start: vec![0; (groups.div_ceil(groups_per_stream.max(1)) * lanes) as usize],
                parts_max,
            },
            checkpoint_wanted: None,
            history: None,
            parent: None,
        }
    }

    /// The CSN recovery starts replaying at: the first sealed log's first,
    /// or else the checkpoint's or the log's base.
    pub fn replay_from(&self) -> Csn {
        self.sealed.first().map_or_else(|| self.log_from(), |s| s.from)
    }

    /// The first CSN the current log (`log`) supplies: below it, the
    /// checkpoint and the sealed logs hold everything.
    pub fn log_from(&self) -> Csn {
        self.checkpoint.as_ref().map_or(self.log.base_csn, |c| c.csn).max(self.log.base_csn)
    }

    /// The logs to replay, in order: the sealed ones with their seals,
    /// then the current one.
    pub fn logs(&self) -> impl Iterator<Item = (&LogRef, Option<&SealedLog>)> {
        self.sealed.iter().map(|s| (&s.log, Some(s))).chain(std::iter::once((&self.log, None)))
    }

    /// The format this manifest is written in: the lowest that can
    /// express it.
    pub fn format(&self) -> u32 {
        if self.parent.as_ref().is_some_and(|p| p.overlay.is_some()) {
            5
        } else if self.parent.is_some() {
            4
        } else if self.history.is_some() {
            3
        } else if self.dropped.is_empty() {
            1
        } else {
            2
        }
    }

    /// Encode: header line, then JSON.
    pub fn encode(&self) -> Bytes {
        let body = serde_json::to_vec_pretty(self).expect("a manifest serializes");
        let mut out =
            format!("{MAGIC} {} {:08x}\n", self.format(), crc32c::crc32c(&body)).into_bytes();
        out.extend_from_slice(&body);
        Bytes::from(out)
    }

    /// Decode and check a manifest object.
    pub fn decode(key: &str, bytes: &[u8]) -> Result<Manifest> {
        let bad = |what: String| Error::Corrupt(format!("{key}: {what}"));
        let nl = bytes.iter().position(|&b| b == b'\n').ok_or_else(|| bad("no header".into()))?;
        let header = std::str::from_utf8(&bytes[..nl]).map_err(|_| bad("bad header".into()))?;
        let mut words = header.split(' ');
        if words.next() != Some(MAGIC) {
            return Err(bad("not a manifest".into()));
        }
        let format: u32 =
            words.next().and_then(|w| w.parse().ok()).ok_or_else(|| bad("bad format".into()))?;
        if !(1..=MANIFEST_FORMAT).contains(&format) {
            return Err(bad(format!(
                "manifest format {format}; this version reads 1 to {MANIFEST_FORMAT}"
            )));
        }
        let crc = words
            .next()
            .and_then(|w| u32::from_str_radix(w, 16).ok())
            .ok_or_else(|| bad("bad checksum field".into()))?;
        let body = &bytes[nl + 1..];
        let computed = crc32c::crc32c(body);
        if computed != crc {
            return Err(bad(format!("checksum {computed:08x}, header says {crc:08x}")));
        }
        let m: Manifest = serde_json::from_slice(body).map_err(|e| bad(format!("{e}")))?;
        if manifest_key(m.version) != key {
            return Err(bad(format!("holds version {}", m.version)));
        }
        if m.format() != format {
            return Err(bad(format!("says format {format} but is written as {}", m.format())));
        }
        if let Some(id) = m.dropped.iter().find(|&&id| id as usize >= m.tables.len()) {
            return Err(bad(format!("drops table id {id} of {}", m.tables.len())));
        }
        if m.log.lanes == 0 || m.log.lanes as usize > crate::options::LOG_LANES_MAX {
            return Err(bad(format!("{} lanes per stream", m.log.lanes)));
        }
        if m.log.groups as usize > crate::limits::LOG_GROUPS_MAX || m.log.groups_per_stream == 0 {
            return Err(bad(format!(
                "{} groups, {} per stream",
                m.log.groups, m.log.groups_per_stream
            )));
        }
        if m.log.group_start.len() as u64 != u64::from(m.log.streams()) * u64::from(m.log.lanes) {
            return Err(bad("group_start does not hold one segment per stream and lane".into()));
        }
        Ok(m)
    }
}

/// The manifest chain on the database's stores.
#[derive(Debug, Clone)]
pub struct ManifestStore {
    stores: Vec<(String, Arc<dyn ObjectStore>)>,
    needed: usize,
    deadline: std::time::Duration,
}

impl ManifestStore {
    /// The chain on `stores` (named for messages); a version needs
    /// `needed` of them.
    pub fn new(
        stores: Vec<(String, Arc<dyn ObjectStore>)>,
        needed: usize,
        deadline: std::time::Duration,
    ) -> ManifestStore {
        ManifestStore { stores, needed, deadline }
    }

    /// The current manifest, or `None` for an empty database. Fails if
    /// fewer than a quorum of stores answer, or if the stores hold
    /// different manifests under the highest version and none has a
    /// quorum.
    pub fn read_latest(&self) -> Result<Option<Manifest>> {
        let mut answered = 0;
        let mut latest: Vec<(u64, usize)> = Vec::new();
        let mut errors = Vec::new();
        for (i, (name, s)) in self.stores.iter().enumerate() {
            match retry(self.deadline, || s.list(MANIFEST_PREFIX)) {
                Ok(list) => {
                    answered += 1;
                    let v = list.iter().filter_map(|o| manifest_version(&o.key)).max();
                    if let Some(v) = v {
                        latest.push((v, i));
                    }
                }
                Err(e) => errors.push(format!("{name}: {e}")),
            }
        }
        if answered < self.needed {
            return Err(Error::StoreUnavailable(format!(
                "reading the manifest: {answered} of {} stores answered, {} needed: {}",
                self.stores.len(),
                self.needed,
                errors.join("; ")
            )));
        }
        let Some(top) = latest.iter().map(|(v, _)| *v).max() else {
            return Ok(None);
        };
        let key = manifest_key(top);
        let mut found: Vec<(Manifest, usize)> = Vec::new();
        for (_, i) in latest.iter().filter(|(v, _)| *v == top) {
            let (name, s) = &self.stores[*i];
            let bytes = retry(self.deadline, || s.get(&key))
                .map_err(|e| Error::Store(format!("{name}: reading {key}: {e}")))?;
            let m = Manifest::decode(&key, &bytes)?;
            match found.iter_mut().find(|(f, _)| *f == m) {
                Some((_, n)) => *n += 1,
                None => found.push((m, 1)),
            }
        }
        if found.len() == 1 {
            return Ok(found.pop().map(|(m, _)| m));
        }
        // Two writers raced for this version on different stores; the one
        // with a quorum won.
        found.into_iter().find(|(_, n)| *n >= self.needed).map(|(m, _)| Some(m)).ok_or_else(|| {
            Error::StoreUnavailable(format!(
                "{key} differs between stores and no version has a quorum yet"
            ))
        })
    }

    /// Create `m` as version `m.version`. Succeeds once a quorum of stores
    /// holds it; fails with `Fenced` if another writer created that version
    /// first.
    pub fn create(&self, m: &Manifest) -> Result<()> {
        let key = manifest_key(m.version);
        let body = m.encode();
        let mut ok = 0;
        let mut taken = 0;
        let mut errors = Vec::new();
        for (name, s) in &self.stores {
            let r = retry(self.deadline, || match s.put_if_absent(&key, body.clone()) {
                Ok(_) => Ok(true),
                // An earlier attempt of ours may have landed.
                Err(StoreError::AlreadyExists(_)) => s.get(&key).map(|b| b == body),
                Err(e) => Err(e),
            });
            match r {
                Ok(true) => ok += 1,
                Ok(false) => taken += 1,
                Err(e) => errors.push(format!("{name}: {e}")),
            }
        }
        if ok >= self.needed {
            return Ok(());
        }
        if taken > 0 {
            return Err(Error::Fenced(format!(
                "{key} was created by another writer on {taken} of {} stores",
                self.stores.len()
            )));
        }
        Err(Error::StoreUnavailable(format!(
            "writing {key}: {ok} of {} stores took it, {} needed: {}",
            self.stores.len(),
            self.needed,
            errors.join("; ")
        )))
    }

    /// Delete manifest versions below `keep` (best effort).
    pub fn delete_below(&self, keep: u64) {
        for (_, s) in &self.stores {
            if let Ok(list) = s.list(MANIFEST_PREFIX) {
                for o in list {
                    if manifest_version(&o.key).is_some_and(|v| v < keep) {
                        let _ = s.delete(&o.key);
                    }
                }
            }
        }
    }
}

/// Fuzz target: the manifest decoder on arbitrary bytes, which must
/// answer `Corrupt` (or a manifest that re-encodes to an equal one)
/// and never panic. See `log::decode::fuzz_part` for where fuzz targets
/// run.
pub fn fuzz_manifest(data: &[u8]) {
    if let Ok(m) = Manifest::decode(&manifest_key(1), data) {
        assert_eq!(Manifest::decode(&manifest_key(1), &m.encode()).ok(), Some(m));
    }
}

/// Stores with the names messages give them.
pub(crate) type NamedStores = Vec<(String, Arc<dyn ObjectStore>)>;

/// Open the stores without probing them (nothing is written) and read the
/// current manifest: the stores by name, the quorum, and the manifest.
/// Fails with `NoDatabase` if there is none.
pub(crate) fn read_manifest_unprobed(
    options: &crate::options::Options,
) -> Result<(NamedStores, usize, Manifest)> {
    let named = options
        .stores
        .iter()
        .map(|spec| Ok((spec.describe(), spec.open()?)))
        .collect::<Result<Vec<_>>>()?;
    let needed = options.quorum.needed(named.len());
    let ms = ManifestStore::new(named.clone(), needed, options.store_deadline);
    let m = ms.read_latest()?.ok_or_else(|| {
        Error::NoDatabase(named.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", "))
    })?;
    Ok((named, needed, m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_from_before_lanes_and_streams_reads_as_one_log_per_group() {
        let m = Manifest::initial(1, 3, 1, 1, 10_000);
        let mut json: serde_json::Value = serde_json::to_value(&m).expect("json");
        let log = json["log"].as_object_mut().expect("log");
        log.remove("lanes");
        log.remove("groups_per_stream");
        let old: Manifest = serde_json::from_value(json).expect("an old manifest");
        assert_eq!((old.log.lanes, old.log.streams()), (1, 3));
        let chains: Vec<Chain> = old.log.chains().collect();
        assert_eq!(chains, [Chain::new(0, 0), Chain::new(1, 0), Chain::new(2, 0)]);
        assert_eq!(old.log.chain_groups(Chain::new(2, 0)), 2..3);
        let shared = Manifest::initial(1, 3, 2, 2, 10_000).log;
        assert_eq!(shared.streams(), 2);
        let chains: Vec<Chain> = shared.chains().collect();
        assert_eq!(
            chains,
            [Chain::new(0, 0), Chain::new(0, 1), Chain::new(2, 0), Chain::new(2, 1)],
            "named after each stream's first group"
        );
        assert_eq!(shared.chain_groups(Chain::new(0, 1)), 0..2);
        assert_eq!(shared.chain_groups(Chain::new(1, 0)), 0..0, "not a chain of this log");
        assert_eq!(shared.start(Chain::new(1, 0)), None);
    }

    #[test]
    fn encode_decode_and_damage() {
        let mut m = Manifest::initial(1, 2, 1, 1, 10_000);
        m.tables = vec!["a".into(), "b".into()];
        let bytes = m.encode();
        let key = manifest_key(1);
        assert_eq!(Manifest::decode(&key, &bytes).expect("decodes"), m);
        let mut bad = bytes.to_vec();
        let n = bad.len();
        bad[n - 3] ^= 1;
        assert!(matches!(Manifest::decode(&key, &bad), Err(Error::Corrupt(_))));
        assert!(matches!(Manifest::decode(&manifest_key(2), &bytes), Err(Error::Corrupt(_))));
        assert!(matches!(Manifest::decode(&key, &bytes[..n / 2]), Err(Error::Corrupt(_))));
    }

    #[test]
    fn a_manifest_is_written_at_the_lowest_format_that_holds_it() {
        let key = manifest_key(1);
        let header = |m: &Manifest| {
            let b = m.encode();
            String::from_utf8_lossy(&b[..b.iter().position(|&c| c == b'\n').unwrap_or(0)])
                .into_owned()
        };
        let mut m = Manifest::initial(1, 1, 1, 1, 10_000);
        m.tables = vec!["a".into(), "b".into()];
        assert!(header(&m).starts_with("MSMF 1 "), "{}", header(&m));
        m.dropped = vec![0];
        assert!(header(&m).starts_with("MSMF 2 "), "{}", header(&m));
        assert_eq!(Manifest::decode(&key, &m.encode()).expect("format 2 decodes"), m);
        // A format-1 header on a manifest that drops a table is refused: a
        // reader of format 1 alone would bring the table back.
        let body = serde_json::to_vec_pretty(&m).expect("serializes");
        let mut lying = format!("MSMF 1 {:08x}\n", crc32c::crc32c(&body)).into_bytes();
        lying.extend_from_slice(&body);
        assert!(matches!(Manifest::decode(&key, &lying), Err(Error::Corrupt(_))));
        // A dropped id the list does not name is corrupt.
        m.dropped = vec![5];
        assert!(matches!(Manifest::decode(&key, &m.encode()), Err(Error::Corrupt(_))));
        // A format from the future is refused, naming it.
        let future = format!("MSMF 5 {:08x}\n", crc32c::crc32c(&body)).into_bytes();
        let e = Manifest::decode(&key, &[future, body].concat()).expect_err("format 5");
        assert!(e.to_string().contains("format 5"), "{e}");
    }

    #[test]
    fn a_version_is_created_once() {
        let s: Arc<dyn ObjectStore> = Arc::new(objstore::MemoryStore::new());
        let ms = ManifestStore::new(vec![("m".into(), s)], 1, std::time::Duration::from_secs(1));
        assert_eq!(ms.read_latest().expect("reads"), None);
        let m = Manifest::initial(1, 1, 1, 1, 10);
        ms.create(&m).expect("first create");
        ms.create(&m).expect("the same body again is ours");
        let mut other = m.clone();
        other.epoch = 7;
        assert!(matches!(ms.create(&other), Err(Error::Fenced(_))));
        let mut next = m.clone();
        next.version = 2;
        next.epoch = 2;
        ms.create(&next).expect("next version");
        assert_eq!(ms.read_latest().expect("reads"), Some(next));
    }
}
