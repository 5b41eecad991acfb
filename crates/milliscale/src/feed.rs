//! A change feed of one database, read from its log in the object store
//! (design record 0014): every committed write, transaction by
//! transaction in CSN order, each as the row's whole new value (a delta
//! record included) or its deletion.
//!
//! A [`Feed`] reads from a read replica whose follower hands over what it
//! applies (`replica::tap`), so it shows exactly what a replica shows:
//! only commits that no crash of the writer can take back, across a change
//! of writer, without a request to the writer.
//!
//! **One follower for many feeds.** The feeds of one `Database` (or
//! `Replica`) object share one follower, a [`FeedSource`]: one reader of
//! the log and one copy of the database, however many feeds (a server's
//! `Changes` calls). Each run is built once and handed to every feed. The
//! slowest consumer paces the others (each tap holds 64 runs); one that
//! holds them back [`SHARED_FEED_STALL`] is let go with
//! [`Error::FeedTooSlow`], naming the cursor to open it again after. A
//! follower with one feed waits for it as long as it takes. [`Feed::open`]
//! starts a follower of its own.
//!
//! **Cursor.** A transaction's CSN. A feed opened after cursor `c`
//! delivers the transactions with a CSN above `c`; a consumer that saves
//! the CSN of the last transaction it handled, and skips any at or below
//! it, sees each transaction exactly once across restarts (delivery is at
//! least once: one handled but not yet saved comes again).
//!
//! **Resolved point.** [`FeedEvent::Resolved`]`(n)`: every transaction
//! below CSN `n` has been delivered; none will come below it. It moves
//! as the database commits.
//!
//! **Resuming.** A new follower starts at the database's newest
//! checkpoint; a feed that joins a running one starts where it is (a
//! cursor that one has passed gets a follower of its own). A cursor below
//! the start is served from the retention window's
//! history (`Options::retention`): the log the window keeps is read from
//! the cursor to the checkpoint, the deltas applied to the database as it
//! was at the cursor (opened in the past, in memory), that range held in
//! memory whole before the first event. A cursor below the window's oldest
//! point (without a window: the newest checkpoint) is refused with
//! [`Error::ChangesGone`] naming the oldest cursor it can resume from;
//! so is a follower that had to jump to a newer checkpoint (it fell behind
//! the log's truncation): never a silent gap.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError};

use crate::error::{Error, Result};
use crate::mvcc::Csn;
use crate::options::Options;
use crate::replica::tap::{Attached, TapMsg, Taps};
pub use crate::replica::tap::{FeedChange, FeedTxn, SHARED_FEED_STALL};
use crate::replica::{Replica, ReplicaOptions};

/// What a feed delivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedEvent {
    /// A committed transaction.
    Commit(FeedTxn),
    /// Every transaction below this CSN has been delivered.
    Resolved(Csn),
}

/// Which changes a feed delivers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeedFilter {
    /// Only these tables (empty: every table).
    pub tables: Vec<String>,
    /// Only keys that start with this.
    pub prefix: Option<Vec<u8>>,
}

impl FeedFilter {
    /// Whether a change to `key` of `table` is delivered.
    pub fn keeps(&self, table: &str, key: &[u8]) -> bool {
        (self.tables.is_empty() || self.tables.iter().any(|t| t == table))
            && self.prefix.as_ref().is_none_or(|p| key.starts_with(p))
    }
}

/// The followers the feeds of each database object share, by the id of
/// its engine (unique in the process).
static SOURCES: std::sync::Mutex<Vec<(u64, Weak<FeedSource>)>> = std::sync::Mutex::new(Vec::new());

/// The follower change feeds read from: a replica whose follower hands
/// every run it applies to the feeds attached (`replica::tap`).
/// Every feed of one [`crate::Database`] or [`Replica`] object shares
/// one (`Database::changes`); [`Feed::open`] starts one of its own.
pub struct FeedSource {
    replica: Replica,
    taps: Arc<Taps>,
}

impl std::fmt::Debug for FeedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedSource").field("feeds", &self.taps.len()).finish()
    }
}

impl FeedSource {
    /// A follower of the database on `options`' (opened) stores, and a
    /// first feed's tap, attached before the follower runs (so it is
    /// handed every run from the follower's start).
    fn open(options: Options, replica: ReplicaOptions) -> Result<(FeedSource, Attached)> {
        let taps = Taps::new(SHARED_FEED_STALL);
        let mut first = taps.attach();
        let (replica, start) = Replica::open_tapped(options, replica, Some(Arc::clone(&taps)))?;
        first.start = start;
        Ok((FeedSource { replica, taps }, first))
    }

    /// The one the feeds of the database object `engine` share if it
    /// still runs, else a new one, with its first feed's tap. (Opening
    /// one holds the process's list, so two feeds opened at once share.)
    fn shared(engine: u64, options: &Options) -> Result<(Arc<FeedSource>, Option<Attached>)> {
        let mut sources = SOURCES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        sources.retain(|(_, s)| s.strong_count() > 0);
        let running = sources.iter().find(|(e, _)| *e == engine).and_then(|(_, s)| s.upgrade());
        if let Some(f) = running.filter(|f| f.replica.metrics().stopped.is_none()) {
            return Ok((f, None));
        }
        let (f, first) = FeedSource::open(options.clone(), ReplicaOptions::default())?;
        let f = Arc::new(f);
        sources.retain(|(e, _)| *e != engine);
        sources.push((engine, Arc::downgrade(&f)));
        Ok((f, Some(first)))
    }
}

/// A change feed; see the module docs. Iterate it (each item waits for
/// the next event), or call [`Feed::next_timeout`]. Dropping it detaches
/// it from its follower (the last feed of a follower stops it).
pub struct Feed {
    // Dropped before the source, so that a follower waiting on a full tap
    // is let go.
    runs: Receiver<TapMsg>,
    /// The follower let this feed go for holding the others back.
    cut: Arc<AtomicBool>,
    source: Arc<FeedSource>,
    /// Transactions at or below this are not delivered.
    after: Csn,
    filter: FeedFilter,
    ready: VecDeque<FeedEvent>,
    resolved: Csn,
    /// The oldest cursor this feed could resume from.
    oldest: Csn,
    /// An error ended it.
    ended: bool,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed")
            .field("after", &self.after)
            .field("resolved", &self.resolved)
            .field("filter", &self.filter)
            .finish()
    }
}

impl Feed {
    /// A feed of the database on `options`' stores, after `cursor` (`None`:
    /// from where the feed starts, its newest checkpoint), with a
    /// replica's default polling, by a follower of its own.
    pub fn open(options: Options, cursor: Option<Csn>, filter: FeedFilter) -> Result<Feed> {
        Feed::open_with(options, ReplicaOptions::default(), cursor, filter)
    }

    /// [`Feed::open`] with the follower's polling set by `replica`.
    pub fn open_with(
        options: Options,
        replica: ReplicaOptions,
        cursor: Option<Csn>,
        filter: FeedFilter,
    ) -> Result<Feed> {
        let options = Feed::logged(options)?.open_stores()?;
        let (source, first) = FeedSource::open(options, replica)?;
        Ok(Feed::attach(Arc::new(source), Some(first), cursor, filter)?.expect("not refused"))
    }

    /// A feed by the follower of the database object `engine` (started if
    /// none runs), shared with its other feeds. A cursor the running follower has
    /// passed is served by a follower of its own (from its newest
    /// checkpoint, or the retention window).
    fn shared(
        engine: u64,
        options: Options,
        cursor: Option<Csn>,
        filter: FeedFilter,
    ) -> Result<Feed> {
        let options = Feed::logged(options)?;
        let (source, first) = FeedSource::shared(engine, &options)?;
        match Feed::attach(source, first, cursor, filter.clone())? {
            Some(feed) => Ok(feed),
            None => Feed::open_with(options, ReplicaOptions::default(), cursor, filter),
        }
    }

    fn logged(options: Options) -> Result<Options> {
        if !options.is_logged() {
            return Err(Error::InvalidArgument(
                "a change feed reads the database's log, and this one has no store".into(),
            ));
        }
        Ok(options)
    }

    /// A feed on `source`'s follower by `first`, the tap attached before
    /// it ran, or else one attached now, from the point the follower has
    /// handed over up to now; the window's history before it if `cursor`
    /// is older (only by `first`: a follower already running answers
    /// `None` then).
    fn attach(
        source: Arc<FeedSource>,
        first: Option<Attached>,
        cursor: Option<Csn>,
        filter: FeedFilter,
    ) -> Result<Option<Feed>> {
        let running = first.is_none();
        let tap = first.unwrap_or_else(|| source.taps.attach());
        let start = tap.start;
        if running && cursor.is_some_and(|c| c + 1 < start) {
            return Ok(None);
        }
        let options = source.replica.options().clone();
        // Every commit below `start` was applied before this feed came;
        // the tap hands over every one from `start` on. Before it, the
        // window's history.
        let (window, _) = crate::history::changes::oldest_point(&options)?;
        let oldest = window.min(start.saturating_sub(1));
        let after = cursor.unwrap_or(start.saturating_sub(1));
        if after < oldest {
            return Err(Error::ChangesGone { cursor: after, oldest });
        }
        let mut ready = VecDeque::new();
        if after + 1 < start {
            for t in history_gap(&options, after, start - 1)? {
                let changes: Vec<_> =
                    t.changes.into_iter().filter(|c| filter.keeps(&c.table, &c.key)).collect();
                if !changes.is_empty() {
                    ready.push_back(FeedEvent::Commit(FeedTxn { csn: t.csn, changes }));
                }
            }
        }
        // Everything below the follower's start is delivered once these are.
        ready.push_back(FeedEvent::Resolved(start));
        let resolved = start;
        Ok(Some(Feed {
            runs: tap.runs,
            cut: tap.cut,
            source,
            after,
            filter,
            ready,
            resolved,
            oldest,
            ended: false,
        }))
    }

    /// The next event, waiting at most `wait` for one: `None` if none came.
    /// An error ends the feed (the follower stopped, or could not go on
    /// without a gap).
    pub fn next_timeout(&mut self, wait: Duration) -> Result<Option<FeedEvent>> {
        if let Some(e) = self.ready.pop_front() {
            return Ok(Some(e));
        }
        let msg = match milliscale_seam::recv_timeout(&self.runs, wait) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => return self.stopped().map(|()| None),
            Err(RecvTimeoutError::Disconnected) => {
                if self.cut.load(Ordering::Acquire) {
                    return Err(Error::FeedTooSlow {
                        cursor: self.after.max(self.resolved.saturating_sub(1)),
                        held: SHARED_FEED_STALL,
                    });
                }
                self.stopped()?;
                return Err(Error::Closed);
            }
        };
        match msg {
            TapMsg::Gap { from, to } => {
                let cursor = self.after.max(from.saturating_sub(1));
                return Err(Error::ChangesGone { cursor, oldest: to.saturating_sub(1) });
            }
            TapMsg::Run { run, applied } => {
                let filter = &self.filter;
                let txns = run.txns(self.after, &|table, key| filter.keeps(table, key));
                self.ready.extend(txns.into_iter().map(FeedEvent::Commit));
                if applied > self.resolved {
                    self.resolved = applied;
                    self.ready.push_back(FeedEvent::Resolved(applied));
                }
            }
        }
        Ok(self.ready.pop_front())
    }

    /// The follower's error, if it stopped on one.
    fn stopped(&self) -> Result<()> {
        match self.source.replica.metrics().stopped {
            Some(e) => Err(Error::StoreUnavailable(format!("the feed's follower stopped: {e}"))),
            None => Ok(()),
        }
    }

    /// Every transaction below this CSN has been delivered (or is about to
    /// be, from what was read).
    pub fn resolved(&self) -> Csn {
        self.resolved
    }

    /// The oldest cursor this feed could have started after.
    pub fn oldest_cursor(&self) -> Csn {
        self.oldest
    }

    /// The replica under the feed: its lag, requests and cost.
    pub fn replica(&self) -> &Replica {
        &self.source.replica
    }

    /// The feeds sharing this one's follower (this one included, and any
    /// dropped since its last run).
    pub fn sharing(&self) -> usize {
        self.source.taps.len()
    }
}

impl Iterator for Feed {
    type Item = Result<FeedEvent>;

    /// The next event, waiting as long as it takes; an error ends the feed.
    fn next(&mut self) -> Option<Result<FeedEvent>> {
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

/// The transactions of `(cursor, end]` from the window's history (the
/// log the retention window keeps), each write as the row's whole value:
/// a delta applied to the row as an earlier write in the range left it,
/// else as the database at `cursor` holds it (opened in the past, in
/// memory, for that). The range is held in memory whole.
fn history_gap(options: &Options, cursor: Csn, end: Csn) -> Result<Vec<FeedTxn>> {
    use crate::history::At;
    use std::collections::HashMap;
    let changes =
        crate::history::changes::read_changes(options, At::Csn(cursor), Some(At::Csn(end)))?;
    let past = crate::Database::open_at(options.clone(), At::Csn(cursor))?;
    let mut rows: HashMap<(String, Vec<u8>), Option<Vec<u8>>> = HashMap::new();
    let mut out: Vec<FeedTxn> = Vec::new();
    for c in changes.iter() {
        if out.last().is_none_or(|t| t.csn != c.csn) {
            out.push(FeedTxn { csn: c.csn, changes: Vec::new() });
        }
        let id = (c.table.to_owned(), c.key.to_vec());
        let before = match rows.get(&id) {
            Some(v) => v.clone(),
            // A table created after `cursor` has no rows there.
            None => match past.open_table(c.table) {
                Ok(t) => past.begin_with(crate::TxnOptions::read_only())?.get(&t, c.key)?,
                Err(_) => None,
            },
        };
        let value = c.op.apply(before.as_deref())?;
        rows.insert(id, value.clone());
        let change = FeedChange { table: c.table.to_owned(), key: c.key.to_vec(), value };
        out.last_mut().expect("pushed above").changes.push(change);
    }
    Ok(out)
}

impl crate::Database {
    /// A change feed of this database ([`Feed`]), read from its log in its
    /// stores as a replica reads it: the writer's memory is not touched.
    /// Every feed of this object shares one follower (one replica's copy
    /// of the database, one reader of the log): the slowest consumer
    /// paces them, and one that holds the others back
    /// [`SHARED_FEED_STALL`] is let go ([`Error::FeedTooSlow`]). A cursor
    /// the shared follower has passed gets a follower of its own.
    pub fn changes(&self, cursor: Option<Csn>, filter: FeedFilter) -> Result<Feed> {
        let Some(m) = &self.inner.manifest else {
            return Err(Error::InvalidArgument(
                "a change feed reads the database's log, and this one has no store".into(),
            ));
        };
        let options = self.inner.options.clone().with_opened(&m.stores);
        Feed::shared(self.inner.id, options, cursor, filter)
    }
}

impl Replica {
    /// A change feed of the database this replica follows ([`Feed`]), by
    /// a follower the feeds of this replica share (as
    /// [`crate::Database::changes`]).
    pub fn changes(&self, cursor: Option<Csn>, filter: FeedFilter) -> Result<Feed> {
        Feed::shared(self.engine_id(), self.options().clone(), cursor, filter)
    }
}
