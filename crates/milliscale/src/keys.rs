//! Every object name the engine writes or reads, in one place.
//!
//! ```text
//! manifest/VVVVVVVVVVVVVVVVVVVV              the manifest chain (conditional puts)
//! log/gGGGG/sSSSSSSSS                        a segment: appended parts (lane 0)
//! log/gGGGG/lL/sSSSSSSSS                     a segment of lane L > 0
//! log/gGGGG/[lL/]sSSSSSSSS/pPPPPP            one part, on stores that cannot append
//! checkpoint/cCCCCCCCCCCCCCCCCCCCC/...       a checkpoint's chunks
//! checkpoint/offer/cCCCCCCCCCCCCCCCCCCCC     a checkpoint a read replica offers
//! probe/append-XXXXXXXXXXXXXXXX              the append probe at open (deleted)
//! ```
//!
//! Numbers are zero-padded so that a listing's lexical order is their
//! order.

use crate::mvcc::Csn;

/// Where the log's objects live.
pub const LOG_PREFIX: &str = "log/";
/// Where the manifest chain lives.
pub const MANIFEST_PREFIX: &str = "manifest/";
/// Where checkpoints (and offers) live.
pub const CHECKPOINT_PREFIX: &str = "checkpoint/";
/// Where read replicas offer checkpoints they built from the log
/// (`Options::checkpoint_offload`). The chunks are the usual
/// `checkpoint/c<csn>/...` objects.
pub const OFFER_PREFIX: &str = "checkpoint/offer/";

/// One chain of segment objects: lane `lane` of the log stream whose
/// first group is `group` (with one stream per group, the paper's
/// layout, simply group `group`'s lane).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Chain {
    /// The first log group of its stream; the chain is named after it.
    pub group: u32,
    /// The lane within the stream, from 0.
    pub lane: u32,
}

impl Chain {
    /// Lane `lane` of the stream that starts at group `group`.
    pub const fn new(group: u32, lane: u32) -> Chain {
        Chain { group, lane }
    }

    /// The prefix every segment name of this chain starts with: one LIST
    /// of it finds the chain's objects and no other chain's.
    pub fn prefix(self) -> String {
        match self.lane {
            0 => format!("{LOG_PREFIX}g{:04}/s", self.group),
            lane => format!("{LOG_PREFIX}g{:04}/l{lane}/s", self.group),
        }
    }
}

impl std::fmt::Display for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "chain {LOG_PREFIX}g{:04} lane {}", self.group, self.lane)
    }
}

/// The object name of a segment (append mode), or its prefix (put mode).
pub fn segment_key(chain: Chain, segment: u64) -> String {
    format!("{}{segment:08}", chain.prefix())
}

/// The object name of one part in put mode.
pub fn put_part_key(chain: Chain, segment: u64, part: u32) -> String {
    format!("{}/p{part:05}", segment_key(chain, segment))
}

/// Which object of a chain a key names ([`segment_key`], [`put_part_key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LogObject {
    /// `<chain>/sSSSSSSSS`: an appended segment.
    Segment { chain: Chain, segment: u64 },
    /// `<chain>/sSSSSSSSS/pPPPPP`: one part in put mode.
    Part { chain: Chain, segment: u64, part: u32 },
}

impl LogObject {
    pub(crate) fn segment(&self) -> u64 {
        match self {
            LogObject::Segment { segment, .. } | LogObject::Part { segment, .. } => *segment,
        }
    }

    pub(crate) fn chain(&self) -> Chain {
        match self {
            LogObject::Segment { chain, .. } | LogObject::Part { chain, .. } => *chain,
        }
    }
}

/// Parse a log object name: `log/gGGGG/[lL/]sSSSSSSSS[/pPPPPP]`.
pub(crate) fn parse_log_key(key: &str) -> Option<LogObject> {
    let rest = key.strip_prefix(LOG_PREFIX)?.strip_prefix('g')?;
    let (g, rest) = rest.split_once('/')?;
    let group = digits(g)?;
    let (lane, rest) = match rest.strip_prefix('l') {
        Some(r) => {
            let (l, r) = r.split_once('/')?;
            let lane: u32 = digits(l)?;
            // Lane 0 has no `l` level; `l0` or a padded number is not ours.
            if lane == 0 || l.len() != lane.to_string().len() {
                return None;
            }
            (lane, r)
        }
        None => (0, rest),
    };
    let chain = Chain::new(group, lane);
    let rest = rest.strip_prefix('s')?;
    match rest.split_once("/p") {
        None => Some(LogObject::Segment { chain, segment: digits(rest)? }),
        Some((s, p)) => Some(LogObject::Part { chain, segment: digits(s)?, part: digits(p)? }),
    }
}

/// The chain and segment a log object's key names; `None` if it is not a
/// log object's.
pub fn segment_of(key: &str) -> Option<(Chain, u64)> {
    parse_log_key(key).map(|o| (o.chain(), o.segment()))
}

/// The object key of manifest `version`.
pub fn manifest_key(version: u64) -> String {
    format!("{MANIFEST_PREFIX}{version:020}")
}

/// The version a manifest key names.
pub(crate) fn manifest_version(key: &str) -> Option<u64> {
    key.strip_prefix(MANIFEST_PREFIX)?.parse().ok()
}

/// The prefix of checkpoint `csn`'s chunks.
pub fn checkpoint_prefix(csn: Csn) -> String {
    format!("{CHECKPOINT_PREFIX}c{csn:020}/")
}

/// The object key of an offer of checkpoint `csn`.
pub fn offer_key(csn: Csn) -> String {
    format!("{OFFER_PREFIX}c{csn:020}")
}

/// A fresh key for the append probe at open.
pub(crate) fn probe_key() -> String {
    format!("probe/append-{:016x}", rand::random::<u64>())
}

/// A number written with ASCII digits only.
fn digits<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}
