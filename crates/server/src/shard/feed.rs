//! A cluster's change feed (design record 0014, "A cluster"): every
//! shard's feed (`milliscale::feed`, read from its log in the object
//! store, no shard asked) decoded into the cluster's changes and merged
//! by commit timestamp, with resolved timestamps.
//!
//! **A shard's changes.** A cluster table's row is a version: its key,
//! its commit timestamp ⟨ts, client⟩ and the value or a tombstone. A row
//! a shard writes is a change at its version; a row the engine deletes
//! (a range that moved away, a move given up, a table dropped) is none.
//!
//! **A shard's resolved timestamp** is just below its forget bound once
//! in its log (`_milana.meta`'s `forgotten`): a shard writes a bound `B`
//! only once every transaction below `B` is decided on every participant
//! and its decision is durable here, and refuses every prepare below it
//! from then on (one at `B` itself is still taken). So once the bound `B`
//! is read from a shard's log, every commit of that shard below `B` was
//! read before it. An idle shard
//! writes its bound every `ShardOptions::resolved_every`.
//!
//! **The cluster's resolved timestamp** is the least of its shards' (the
//! shards of the newest map read). When it rises to `T`, every pending
//! commit at or below `T` is delivered, in version order, as one
//! transaction: a cross-shard transaction's parts, gathered from each
//! participant by their version (a version is one transaction's), once.
//!
//! **Moves.** A move copies rows with their versions. A copy is told from
//! a commit by its version: a row below its shard's bound already
//! read, or at or below the cluster's resolved timestamp, is a copy (no
//! commit can come there any more); a copy above them is pending together
//! with the commit it copies (both read before the cluster's resolved
//! timestamp passes it), and the same key at the same version is one
//! change. A shard's restart or its standby's promotion is a change of
//! writer in its log, which its follower crosses.
//!
//! **Cursor**: the last resolved timestamp consumed. Opened after `T`,
//! each shard's feed starts where its state holds no version above `T`:
//! its newest checkpoint if that holds, else the point its retention
//! window gives for `T` (`past::base_at`); neither: an error, never a
//! gap. Opened with no cursor, the feed starts after the highest version
//! its shards hold.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use milliscale::feed::{Feed, FeedChange, FeedEvent, FeedFilter};
use milliscale::{Direction, Options, ReplicaOptions};
use milliscale_milana::shard_map::MapStore;
use milliscale_milana::types::{CommitTs, ShardId, Timestamp};
use milliscale_milana::versions::split_row;

use super::tables::{FORGOTTEN_KEY, META};

/// How often the map is read for shards added and removed.
const MAP_EVERY: Duration = Duration::from_secs(1);

/// One change of a cluster transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterChange {
    /// The cluster table.
    pub table: String,
    /// The key.
    pub key: Vec<u8>,
    /// The new value; `None`: deleted.
    pub value: Option<Vec<u8>>,
}

/// A committed cluster transaction, whole: its writes on every shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterTxn {
    /// Its version: commit timestamp and client.
    pub version: CommitTs,
    /// Its writes, by table and key.
    pub changes: Vec<ClusterChange>,
}

/// What a cluster's feed delivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterEvent {
    /// A committed transaction.
    Commit(ClusterTxn),
    /// Every transaction at or below this timestamp has been delivered.
    Resolved(Timestamp),
}

/// A shard's engine options from its map entry (shard, log URL).
pub type OptionsOf = Box<dyn Fn(ShardId, &str) -> Result<Options, String> + Send>;

struct ShardFeed {
    feed: Feed,
    /// Its forget bound as read so far.
    bound: Timestamp,
    /// Out of the map: read on, but not waited for.
    removed: bool,
}

/// A cluster's change feed; see the module docs.
pub struct ClusterFeed {
    maps: Arc<MapStore>,
    options_of: OptionsOf,
    replica: ReplicaOptions,
    shards: BTreeMap<ShardId, ShardFeed>,
    map_version: u64,
    map_read: Instant,
    /// Versions at or below this are not delivered (the cursor, then each
    /// resolved timestamp).
    resolved: Timestamp,
    /// Commits read above `resolved`: by version, each key's value.
    pending: Pending,
    ready: VecDeque<ClusterEvent>,
    /// Which changes are delivered.
    filter: FeedFilter,
    /// An error ended it.
    ended: bool,
}

impl std::fmt::Debug for ClusterFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterFeed")
            .field("resolved", &self.resolved)
            .field("shards", &self.shards.keys().collect::<Vec<_>>())
            .field("pending", &self.pending.len())
            .finish()
    }
}

fn shard_err(s: ShardId, e: impl std::fmt::Display) -> String {
    format!("shard {s}: {e}")
}

impl ClusterFeed {
    /// The feed of the cluster whose map is on `maps`, after resolved
    /// timestamp `cursor` (`None`: from now), each shard's log opened
    /// through `options_of` and followed with `replica`'s polling.
    pub fn open(
        maps: Arc<MapStore>,
        options_of: OptionsOf,
        replica: ReplicaOptions,
        cursor: Option<Timestamp>,
        filter: FeedFilter,
    ) -> Result<ClusterFeed, String> {
        let map = maps
            .latest()
            .map_err(|e| format!("the shard map: {e}"))?
            .ok_or("the shard map store holds no map")?;
        let mut feed = ClusterFeed {
            maps,
            options_of,
            replica,
            shards: BTreeMap::new(),
            map_version: map.version,
            map_read: Instant::now(),
            resolved: 0,
            pending: BTreeMap::new(),
            ready: VecDeque::new(),
            filter,
            ended: false,
        };
        match cursor {
            Some(t) => {
                feed.resolved = t;
                for (s, info) in &map.shards {
                    feed.add_shard(*s, &info.log)?;
                }
            }
            None => {
                // Every shard from its newest checkpoint; the feed starts
                // after the highest version any of them holds.
                let mut high = 0;
                for (s, info) in &map.shards {
                    let options = (feed.options_of)(*s, &info.log).map_err(|e| shard_err(*s, e))?;
                    let f =
                        Feed::open_with(options, feed.replica.clone(), None, Default::default())
                            .map_err(|e| shard_err(*s, e))?;
                    high = high.max(highest_version(&f).map_err(|e| shard_err(*s, e))?);
                    feed.shards.insert(*s, ShardFeed { feed: f, bound: 0, removed: false });
                }
                feed.resolved = high;
            }
        }
        Ok(feed)
    }

    /// Follow shard `s` (log at `log`) from where its state holds no
    /// version above the resolved timestamp.
    fn add_shard(&mut self, s: ShardId, log: &str) -> Result<(), String> {
        let t = self.resolved;
        let options = (self.options_of)(s, log).map_err(|e| shard_err(s, e))?;
        let f = Feed::open_with(options.clone(), self.replica.clone(), None, Default::default())
            .map_err(|e| shard_err(s, e))?;
        let f = if highest_version(&f).map_err(|e| shard_err(s, e))? <= t {
            f
        } else {
            drop(f);
            // Back in the window's history: a point with no version above t.
            let (csn, ..) = super::past::base_at(s, &options, t)
                .map_err(|e| format!("the feed cannot resume after timestamp {t}: {e}"))?;
            Feed::open_with(options, self.replica.clone(), Some(csn), Default::default())
                .map_err(|e| shard_err(s, format!("resuming after timestamp {t}: {e}")))?
        };
        self.shards.insert(s, ShardFeed { feed: f, bound: 0, removed: false });
        Ok(())
    }

    /// The next event, waiting at most `wait` for one: `None` if none
    /// came. An error ends the feed (a shard's follower stopped, or could
    /// not go on without a gap).
    pub fn next_timeout(&mut self, wait: Duration) -> Result<Option<ClusterEvent>, String> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(e) = self.ready.pop_front() {
                return Ok(Some(e));
            }
            if self.map_read.elapsed() >= MAP_EVERY {
                self.watch_map()?;
            }
            let mut read = false;
            for (s, sf) in &mut self.shards {
                while let Some(e) =
                    sf.feed.next_timeout(Duration::ZERO).map_err(|e| shard_err(*s, e))?
                {
                    read = true;
                    let FeedEvent::Commit(txn) = e else { continue };
                    read_txn(self.resolved, &mut self.pending, &mut sf.bound, txn.changes)
                        .map_err(|e| shard_err(*s, format!("CSN {}: {e}", txn.csn)))?;
                }
            }
            self.release();
            if self.ready.is_empty() {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(None);
                }
                if !read {
                    std::thread::sleep(left.min(Duration::from_millis(5)));
                }
            }
        }
    }

    /// Deliver every pending commit below the shards' least bound.
    fn release(&mut self) {
        let Some(bound) = self.shards.values().filter(|s| !s.removed).map(|s| s.bound).min() else {
            return;
        };
        if let Some((txns, low)) = release(&mut self.pending, self.resolved, bound, &self.filter) {
            self.ready.extend(txns.into_iter().map(ClusterEvent::Commit));
            self.resolved = low;
            self.ready.push_back(ClusterEvent::Resolved(low));
        }
    }

    /// Read the newest map: follow shards added, stop waiting for shards
    /// removed (their logs are still read: what they hold is pending, or a
    /// copy elsewhere).
    fn watch_map(&mut self) -> Result<(), String> {
        self.map_read = Instant::now();
        let Ok(Some(map)) = self.maps.latest() else { return Ok(()) };
        if map.version <= self.map_version {
            return Ok(());
        }
        self.map_version = map.version;
        for (s, info) in &map.shards {
            if !self.shards.contains_key(s) {
                self.add_shard(*s, &info.log)?;
            }
        }
        for (s, sf) in &mut self.shards {
            sf.removed = !map.shards.contains_key(s);
        }
        Ok(())
    }

    /// Every transaction at or below this has been delivered (or is about
    /// to be, from what was read).
    pub fn resolved(&self) -> Timestamp {
        self.resolved
    }

    /// The shards followed and each one's forget bound read.
    pub fn bounds(&self) -> Vec<(ShardId, Timestamp)> {
        self.shards.iter().map(|(s, f)| (*s, f.bound)).collect()
    }
}

impl Iterator for ClusterFeed {
    type Item = Result<ClusterEvent, String>;

    /// The next event, waiting as long as it takes; an error ends it.
    fn next(&mut self) -> Option<Self::Item> {
        while !self.ended {
            match self.next_timeout(Duration::from_millis(100)) {
                Ok(Some(e)) => return Some(Ok(e)),
                Ok(None) => {}
                Err(e) => {
                    self.ended = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

/// Commits read above the resolved timestamp: by version, each key's
/// value.
type Pending = BTreeMap<CommitTs, BTreeMap<(String, Vec<u8>), Option<Vec<u8>>>>;

/// One engine transaction of a shard whose forget bound read so far is
/// `bound`: its rows' versions above `resolved` and not below `bound`
/// added to `pending` (the rest are copies), then `bound` raised if it
/// writes one.
fn read_txn(
    resolved: Timestamp,
    pending: &mut Pending,
    bound: &mut Timestamp,
    changes: Vec<FeedChange>,
) -> Result<(), String> {
    let mut new_bound = None;
    for c in changes {
        if c.table == META && c.key == FORGOTTEN_KEY {
            if let Some(v) = c.value {
                let b: [u8; 8] = v.try_into().map_err(|_| "a forget bound of no 8 bytes")?;
                new_bound = Some(u64::from_be_bytes(b));
            }
            continue;
        }
        if c.table.starts_with("_milana.") {
            continue;
        }
        // A row deleted by the engine is no change.
        let Some(row) = c.value else { continue };
        let (v, value) = split_row(&row).ok_or("a row with no version")?;
        // Resolved already, or below a bound read: a copy.
        if v.ts <= resolved || v.ts < *bound {
            continue;
        }
        pending.entry(v).or_default().insert((c.table, c.key), value.map(<[u8]>::to_vec));
    }
    if let Some(b) = new_bound {
        *bound = (*bound).max(b);
    }
    Ok(())
}

/// The pending commits below `bound`, the least of the shards' bounds,
/// in version order (those `filter` keeps), and the new resolved
/// timestamp; `None` if it does not rise above `resolved`.
fn release(
    pending: &mut Pending,
    resolved: Timestamp,
    bound: Timestamp,
    filter: &FeedFilter,
) -> Option<(Vec<ClusterTxn>, Timestamp)> {
    // A bound `B` settles what is below it: a prepare at `B` itself is
    // still taken (`Participant::validate`).
    let low = bound.saturating_sub(1);
    if low <= resolved {
        return None;
    }
    let above = pending.split_off(&CommitTs { ts: low + 1, client: 0 });
    let mut txns = Vec::new();
    for (version, writes) in std::mem::replace(pending, above) {
        let changes: Vec<_> = writes
            .into_iter()
            .filter(|((table, key), _)| filter.keeps(table, key))
            .map(|((table, key), value)| ClusterChange { table, key, value })
            .collect();
        if !changes.is_empty() {
            txns.push(ClusterTxn { version, changes });
        }
    }
    Some((txns, low))
}

/// The highest version's timestamp among the cluster tables' rows the
/// feed's replica holds now.
fn highest_version(f: &Feed) -> milliscale::Result<Timestamp> {
    let r = f.replica();
    let mut high = 0;
    let mut tx = r.begin()?;
    for name in r.table_names() {
        if name.starts_with("_milana.") {
            continue;
        }
        let table = r.open_table(&name)?;
        for row in tx.range(&table, Bound::Unbounded, Bound::Unbounded, Direction::Forward) {
            let (_, row) = row?;
            if let Some((v, _)) = split_row(&row) {
                high = high.max(v.ts);
            }
        }
    }
    Ok(high)
}

#[cfg(test)]
mod tests {
    use super::*;
    use milliscale_milana::versions::row_value;

    fn v(ts: Timestamp, client: u32) -> CommitTs {
        CommitTs { ts, client }
    }

    fn row(key: &str, at: CommitTs, value: &str) -> FeedChange {
        let value = Some(row_value(at, Some(value.as_bytes())));
        FeedChange { table: "t".into(), key: key.into(), value }
    }

    fn bound(b: Timestamp) -> FeedChange {
        let value = Some(b.to_be_bytes().to_vec());
        FeedChange { table: META.into(), key: FORGOTTEN_KEY.to_vec(), value }
    }

    fn keys(t: &ClusterTxn) -> Vec<&[u8]> {
        t.changes.iter().map(|c| c.key.as_slice()).collect()
    }

    #[test]
    fn a_commit_at_a_shards_bound_itself_comes_after_it_and_is_delivered() {
        let (mut pending, mut b0) = (Pending::new(), 0);
        read_txn(0, &mut pending, &mut b0, vec![bound(50)]).expect("read");
        // A prepare at 50 was still taken: its commit follows the bound.
        read_txn(0, &mut pending, &mut b0, vec![row("a", v(50, 1), "x")]).expect("read");
        // A copy below the bound is no commit.
        read_txn(0, &mut pending, &mut b0, vec![row("b", v(49, 1), "old")]).expect("read");
        let (txns, low) = release(&mut pending, 0, 51, &FeedFilter::default()).expect("risen");
        assert_eq!(low, 50);
        assert_eq!(txns.len(), 1);
        assert_eq!((txns[0].version, keys(&txns[0])), (v(50, 1), vec![&b"a"[..]]));
        // Nothing below 50 is released while the least bound is 50.
        assert!(release(&mut pending, 49, 50, &FeedFilter::default()).is_none());
    }

    #[test]
    fn a_cross_shard_transaction_waits_for_every_bound_and_comes_once_whole() {
        let mut pending = Pending::new();
        let (mut b0, mut b1) = (0, 0);
        read_txn(0, &mut pending, &mut b0, vec![row("a", v(10, 7), "1"), bound(5)]).expect("r");
        // Shard 1's bound (none read yet) holds it back; then shard 0's.
        assert!(release(&mut pending, 0, b0.min(b1), &FeedFilter::default()).is_none());
        read_txn(0, &mut pending, &mut b1, vec![row("z", v(10, 7), "2")]).expect("r");
        // A move's copy of `a` at the same version on the other shard.
        read_txn(0, &mut pending, &mut b1, vec![row("a", v(10, 7), "1"), bound(20)]).expect("r");
        let (txns, low) =
            release(&mut pending, 0, b0.min(b1), &FeedFilter::default()).expect("risen");
        assert_eq!((txns, low), (vec![], 4));
        read_txn(4, &mut pending, &mut b0, vec![bound(30)]).expect("r");
        let (txns, low) =
            release(&mut pending, 4, b0.min(b1), &FeedFilter::default()).expect("risen");
        assert_eq!(low, 19);
        assert_eq!(txns.len(), 1);
        assert_eq!(keys(&txns[0]), vec![&b"a"[..], &b"z"[..]]);
        // Once resolved, a late copy of it is no change.
        read_txn(low, &mut pending, &mut b1, vec![row("z", v(10, 7), "2")]).expect("r");
        assert!(pending.is_empty());
    }
}
