//! The tap change feeds put on a replica's follower (design record
//! 0014): every run of transactions the follower applies, handed over in
//! CSN order with each write as the row's whole new value, before the
//! run's applied CSN is published.
//!
//! The follower hands over the run as it applied it ([`Run`]: its entries,
//! whose records are slices of the log's parts, and each delta's whole
//! value), once for every feed; each feed builds its own changes from it on
//! its own thread, only those its filter keeps. So the follower, which a
//! replica's pace is set by, copies nothing for its feeds.
//!
//! Invariants:
//! - a transaction is handed over once, whole, in CSN order; the applied
//!   point that comes with a run says every commit below it was handed
//!   over (or was a CSN without a commit: an abort, a CSN the seal left
//!   out);
//! - a delta record is handed over as the whole value it leaves: the value
//!   the apply built for the record's new version (`apply::Whole`; the
//!   delta applied to the chain's head, which is the transaction's earlier
//!   write of the row or else the commits before it), so no row is looked
//!   up again. A record the apply skipped (its table dropped) gets one at
//!   the hand-over from the chains the run was just applied to (the versions of the run and
//!   the ones they replaced are at or above the readers' horizon, taken
//!   before the run: none is trimmed before the next run);
//! - the follower never jumps over changes silently: a catch-up to a
//!   checkpoint is handed over as a gap;
//! - the tap is bounded: a consumer that does not take its runs stops the
//!   follower, which stops reading the log (nothing more is held); a
//!   follower shared by several feeds ([`Taps`]) waits for such a consumer
//!   at most [`SHARED_FEED_STALL`], then lets it go (the feed ends with
//!   `Error::FeedTooSlow`, naming the cursor to open it again after).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, SendTimeoutError, Sender};
use parking_lot::Mutex;

use crate::log::record::{Entry, OpRef, patched};
use crate::mvcc::visibility::{self, View};
use crate::mvcc::{Csn, txn_table::TxnTable};
use crate::replica::apply::Whole;
use crate::table::TableInner;

/// One write of a committed transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedChange {
    /// The table's name.
    pub table: String,
    /// The row's key.
    pub key: Vec<u8>,
    /// The row's whole value after the transaction; `None`: deleted.
    pub value: Option<Vec<u8>>,
}

/// A committed transaction, whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedTxn {
    /// Its CSN: the cursor to save once it is handled.
    pub csn: Csn,
    /// Its writes, in the order it made them (those the filter keeps).
    pub changes: Vec<FeedChange>,
}

/// What the follower hands a feed.
#[derive(Debug, Clone)]
pub(crate) enum TapMsg {
    /// Transactions applied, in CSN order, and the applied point after
    /// them (every commit below it is in this run or an earlier one).
    Run { run: Arc<Run>, applied: Csn },
    /// The follower moved from `from` to `to` by loading a checkpoint:
    /// the changes in between were not read.
    Gap { from: Csn, to: Csn },
}

/// The runs a tap holds for a consumer before the follower waits.
pub(crate) const TAP_RUNS: usize = 64;

/// How long a follower shared by several feeds waits for one whose tap is
/// full before it lets that feed go (`Error::FeedTooSlow`): a slow
/// consumer holds the others back at most this long. A follower with one
/// feed waits for it as long as it takes.
pub const SHARED_FEED_STALL: Duration = Duration::from_secs(10);

/// How often a wait on a full tap looks again at who shares the follower.
const STALL_CHECK: Duration = Duration::from_millis(100);

/// The feeds one follower hands its runs to: every feed of a database
/// object shares one follower (`feed::Feed`), attached while it runs.
///
/// Invariant: a feed attached at `start` is handed every run after the
/// one that made `handed == start`, and no earlier one: the follower
/// moves `handed` and takes its list of feeds under one lock, then sends.
#[derive(Debug)]
pub(crate) struct Taps {
    inner: Mutex<TapsInner>,
    stall: Duration,
}

#[derive(Debug, Default)]
struct TapsInner {
    subs: Vec<Sub>,
    /// Every commit below this was handed to the feeds attached then.
    handed: Csn,
    next_id: u64,
}

#[derive(Debug, Clone)]
struct Sub {
    id: u64,
    tx: Sender<TapMsg>,
    /// Set when the follower let this feed go for holding it back.
    cut: Arc<AtomicBool>,
}

/// A feed's end of a tap.
#[derive(Debug)]
pub(crate) struct Attached {
    pub(crate) runs: Receiver<TapMsg>,
    /// The first CSN it is handed (every commit below was handed before).
    pub(crate) start: Csn,
    /// The follower let it go for holding the others back.
    pub(crate) cut: Arc<AtomicBool>,
}

impl Taps {
    /// No feed yet; a full tap holds the others back at most `stall`.
    pub(crate) fn new(stall: Duration) -> Arc<Taps> {
        Arc::new(Taps { inner: Mutex::new(TapsInner::default()), stall })
    }

    /// The follower starts at `csn` (before its thread runs).
    pub(crate) fn begin(&self, csn: Csn) {
        self.inner.lock().handed = csn;
    }

    /// A new feed, handed every run from now on.
    pub(crate) fn attach(&self) -> Attached {
        let (tx, runs) = crossbeam_channel::bounded(TAP_RUNS);
        let cut = Arc::new(AtomicBool::new(false));
        let mut t = self.inner.lock();
        let id = t.next_id;
        t.next_id += 1;
        t.subs.push(Sub { id, tx, cut: Arc::clone(&cut) });
        Attached { runs, start: t.handed, cut }
    }

    /// Feeds attached.
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().subs.len()
    }

    /// The feeds to hand the run up to `applied` to; moves `handed`.
    fn turn(&self, applied: Csn) -> Vec<Sub> {
        let mut t = self.inner.lock();
        t.handed = t.handed.max(applied);
        t.subs.clone()
    }

    /// Send `msg` to each of `subs`; drop the ones gone, and the ones that
    /// held the follower back `stall` while another feed shared it.
    fn send(&self, subs: Vec<Sub>, msg: TapMsg) {
        let mut gone = Vec::new();
        let n = subs.len();
        let mut msg = Some(msg);
        for (i, s) in subs.iter().enumerate() {
            let mut m = if i + 1 == n { msg.take() } else { msg.clone() }.expect("one per feed");
            let mut waited = Duration::ZERO;
            loop {
                match s.tx.send_timeout(m, STALL_CHECK) {
                    Ok(()) => break,
                    Err(SendTimeoutError::Disconnected(_)) => {
                        gone.push(s.id);
                        break;
                    }
                    Err(SendTimeoutError::Timeout(back)) => {
                        waited += STALL_CHECK;
                        if waited >= self.stall && self.len() > 1 {
                            s.cut.store(true, Ordering::Release);
                            tracing::warn!(
                                "a change feed held its shared follower back {waited:?}: let go"
                            );
                            gone.push(s.id);
                            break;
                        }
                        m = back;
                    }
                }
            }
        }
        if !gone.is_empty() {
            self.inner.lock().subs.retain(|s| !gone.contains(&s.id));
        }
    }
}

/// A run as the follower hands it over: the entries it applied (their
/// records are slices of the log's parts, not copies) and the whole value
/// each delta record left. Each feed builds its own changes from it, on
/// its own thread ([`Run::txns`]), keeping only what its filter keeps:
/// the follower copies nothing, whatever the number of feeds.
pub(crate) struct Run {
    entries: Vec<Entry>,
    /// Every delta record's whole value, in (entry, record) order.
    wholes: Vec<Whole>,
    /// The tables by id, for their names.
    tables: Vec<Arc<TableInner>>,
}

impl Run {
    /// The transactions above `after`, each with the changes `keep`
    /// keeps (table name, key); those left with none are left out. The
    /// last feed to hold the run moves the deltas' whole values out of it
    /// instead of copying them.
    pub(crate) fn txns(
        self: Arc<Run>,
        after: Csn,
        keep: &dyn Fn(&str, &[u8]) -> bool,
    ) -> Vec<FeedTxn> {
        match Arc::try_unwrap(self) {
            Ok(mut run) => {
                let mut wholes = std::mem::take(&mut run.wholes).into_iter().peekable();
                run.build(after, keep, &mut |at, want| {
                    wholes.next_if(|w| (w.entry, w.record) == at).filter(|_| want).map(|w| w.value)
                })
            }
            Err(run) => {
                let mut wholes = run.wholes.iter().peekable();
                run.build(after, keep, &mut |at, want| {
                    let w = wholes.next_if(|w| (w.entry, w.record) == at)?;
                    want.then(|| w.value.clone())
                })
            }
        }
    }

    /// [`Run::txns`], a delta's whole value taken by `whole((entry,
    /// record), wanted)`, called for every delta record in order.
    fn build(
        &self,
        after: Csn,
        keep: &dyn Fn(&str, &[u8]) -> bool,
        whole: &mut dyn FnMut((u32, u32), bool) -> Option<Vec<u8>>,
    ) -> Vec<FeedTxn> {
        let mut txns = Vec::new();
        for (i, e) in self.entries.iter().enumerate() {
            let Entry::Commit { csn, records, .. } = e else { continue };
            let mut changes = Vec::new();
            for (j, r) in records.refs().enumerate() {
                let name = self.tables.get(r.table as usize).map_or("", |t| t.name.as_str());
                let want = *csn > after && keep(name, r.key);
                let value = match r.op {
                    OpRef::Delta { .. } => whole((i as u32, j as u32), want),
                    OpRef::Insert(v) | OpRef::Update(v) if want => Some(v.to_vec()),
                    _ => None,
                };
                if want {
                    changes.push(FeedChange { table: name.to_owned(), key: r.key.to_vec(), value });
                }
            }
            if !changes.is_empty() {
                txns.push(FeedTxn { csn: *csn, changes });
            }
        }
        txns
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("entries", &self.entries.len())
            .field("wholes", &self.wholes.len())
            .finish()
    }
}

/// Hand `entries` (just applied, CSNs below `applied`) over to the feeds
/// on `taps`, with `wholes`, the whole values the apply left for their
/// delta records (`apply::apply_batch`, in (entry, record) order). A delta
/// the apply left none for (its table dropped, or no feed attached when it
/// ran) gets one here, from the chains the run was just applied to. With
/// no feed attached nothing is done.
pub(crate) fn hand_over(
    taps: &Option<Arc<Taps>>,
    tables: &[Arc<TableInner>],
    txns: &TxnTable,
    entries: &mut Vec<Entry>,
    wholes: Vec<Whole>,
    applied: Csn,
) {
    let Some(taps) = taps else { return };
    let subs = taps.turn(applied);
    if subs.is_empty() {
        return;
    }
    let mut all = Vec::with_capacity(wholes.len());
    let mut wholes = wholes.into_iter().peekable();
    for (i, e) in entries.iter().enumerate() {
        let Entry::Commit { csn, records, .. } = e else { continue };
        let first = all.len();
        for (j, r) in records.refs().enumerate() {
            let OpRef::Delta { offset, bytes } = r.op else { continue };
            let (entry, record) = (i as u32, j as u32);
            let value = match wholes.next_if(|w| (w.entry, w.record) == (entry, record)) {
                Some(w) => w.value,
                None => {
                    let earlier = before_in_txn(records, j, &all[first..], r.table, r.key);
                    let t = &tables[r.table as usize];
                    let base = earlier.unwrap_or_else(|| value_at(t, r.key, *csn, txns));
                    // (A delta on no row, or past its end, cannot be in a
                    // log the engine wrote: the row's value after the
                    // transaction stands in.)
                    base.and_then(|b| patched(&b, offset, bytes))
                        .or_else(|| value_at(t, r.key, *csn + 1, txns))
                        .unwrap_or_default()
                }
            };
            all.push(Whole { entry, record, value });
        }
    }
    let run = Run { entries: std::mem::take(entries), wholes: all, tables: tables.to_vec() };
    taps.send(subs, TapMsg::Run { run: Arc::new(run), applied });
}

/// The value the transaction's latest write of (`table`, `key`) before
/// its `j`-th record left, if it wrote it before: `Some(None)` for a
/// delete. `wholes`: its delta records' whole values so far.
fn before_in_txn(
    records: &crate::log::record::Records,
    j: usize,
    wholes: &[Whole],
    table: u32,
    key: &[u8],
) -> Option<Option<Vec<u8>>> {
    let earlier: Vec<_> = records.refs().take(j).enumerate().collect();
    let (k, r) = earlier.into_iter().rev().find(|(_, r)| r.table == table && r.key == key)?;
    Some(match r.op {
        OpRef::Insert(v) | OpRef::Update(v) => Some(v.to_vec()),
        OpRef::Delete => None,
        OpRef::Delta { .. } => {
            wholes.iter().find(|w| w.record as usize == k).map(|w| w.value.clone())
        }
    })
}

/// Tell the feeds that the follower jumped from `from` to `to`.
pub(crate) fn gap(taps: &Option<Arc<Taps>>, from: Csn, to: Csn) {
    if let Some(taps) = taps {
        let subs = taps.turn(to);
        taps.send(subs, TapMsg::Gap { from, to });
    }
}

/// The value of `key` in `t` as a snapshot at `snapshot` sees it (the
/// commits below it).
fn value_at(t: &TableInner, key: &[u8], snapshot: Csn, txns: &TxnTable) -> Option<Vec<u8>> {
    let guard = crossbeam_epoch::pin();
    let rid = t.index.get(key)?;
    let view = View { snapshot, me: None };
    let (v, _) = visibility::find_visible(t.records.slot(rid), view, txns, &guard)?;
    v.value().map(<[u8]>::to_vec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(applied: Csn) -> TapMsg {
        let run = Run { entries: vec![], wholes: vec![], tables: vec![] };
        TapMsg::Run { run: Arc::new(run), applied }
    }

    fn hand(taps: &Taps, applied: Csn) {
        let subs = taps.turn(applied);
        taps.send(subs, run(applied));
    }

    fn applied(m: TapMsg) -> Csn {
        match m {
            TapMsg::Run { applied, .. } => applied,
            TapMsg::Gap { .. } => panic!("a gap"),
        }
    }

    /// A feed attached between two runs starts at the first one's end and
    /// gets only the runs after it.
    #[test]
    fn a_feed_attached_between_runs_gets_the_later_ones() {
        let taps = Taps::new(Duration::from_millis(200));
        taps.begin(5);
        let a = taps.attach();
        assert_eq!(a.start, 5);
        hand(&taps, 6);
        hand(&taps, 7);
        let b = taps.attach();
        assert_eq!(b.start, 7);
        hand(&taps, 9);
        let got = |x: &Attached| x.runs.try_iter().map(applied).collect::<Vec<_>>();
        assert_eq!(got(&a), [6, 7, 9]);
        assert_eq!(got(&b), [9]);
    }

    /// A full tap is let go only while another feed shares the follower.
    #[test]
    fn a_full_tap_is_let_go_only_while_another_feed_waits() {
        let taps = Taps::new(Duration::from_millis(300));
        let slow = taps.attach();
        for csn in 1..=TAP_RUNS as Csn {
            hand(&taps, csn);
        }
        // Alone: the follower waits (longer than the stall) until it reads.
        std::thread::scope(|s| {
            let h = s.spawn(|| hand(&taps, 100));
            milliscale_seam::sleep(Duration::from_millis(800));
            assert!(!h.is_finished(), "a lone feed's follower does not give up");
            assert_eq!(applied(slow.runs.recv().expect("a run")), 1);
            h.join().expect("handed");
        });
        assert!(!slow.cut.load(Ordering::Acquire));
        // With another feed: let go after the stall, the other served.
        let other = taps.attach();
        let started = milliscale_seam::now();
        hand(&taps, 101);
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(slow.cut.load(Ordering::Acquire), "let go");
        assert_eq!(taps.len(), 1);
        assert_eq!(applied(other.runs.recv().expect("a run")), 101);
        // The slow feed still holds what it was handed, then sees the end.
        assert_eq!(slow.runs.try_iter().count(), TAP_RUNS);
        assert!(slow.runs.recv().is_err());
    }

    /// A run handed over without the apply's values (as for a record the
    /// apply skipped) gets each delta's whole value from the chains,
    /// after the transaction's own earlier writes of the row: checked
    /// against the rows rebuilt op by op, in runs of varying length.
    #[test]
    fn without_the_applys_values_each_delta_is_read_back_from_the_chains() {
        use crate::replica::apply::tests::{tables, workload};
        use std::collections::HashMap;
        for seed in 0..10 {
            let entries = workload(seed, 300);
            let mut rows: HashMap<(u32, Vec<u8>), Vec<u8>> = HashMap::new();
            let mut expected = Vec::new();
            for e in &entries {
                let Entry::Commit { csn, records, .. } = e else { continue };
                let mut changes = Vec::new();
                for r in records.refs() {
                    let id = (r.table, r.key.to_vec());
                    let value = match r.op {
                        OpRef::Insert(v) | OpRef::Update(v) => Some(v.to_vec()),
                        OpRef::Delete => None,
                        OpRef::Delta { offset, bytes } => patched(&rows[&id], offset, bytes),
                    };
                    match &value {
                        Some(v) => rows.insert(id, v.clone()),
                        None => rows.remove(&id),
                    };
                    let table = format!("t{}", r.table);
                    changes.push(FeedChange { table, key: r.key.to_vec(), value });
                }
                expected.push(FeedTxn { csn: *csn, changes });
            }
            let (tables, txns) = (tables(2), TxnTable::new(8));
            let taps = Taps::new(Duration::from_secs(1));
            taps.begin(1);
            let feed = taps.attach();
            let taps = Some(taps);
            let (mut at, mut got) = (0, Vec::new());
            while at < entries.len() {
                let end = (at + 1 + (at * 7 + seed as usize) % 40).min(entries.len());
                let retrims = crate::mvcc::gc::Retrims::default();
                crate::replica::apply::apply_batch(
                    &tables,
                    &entries[at..end],
                    0,
                    1,
                    1,
                    &retrims,
                    false,
                )
                .expect("applied");
                let mut run = entries[at..end].to_vec();
                hand_over(&taps, &tables, &txns, &mut run, Vec::new(), end as Csn + 1);
                while let Ok(TapMsg::Run { run, .. }) = feed.runs.try_recv() {
                    got.extend(run.txns(0, &|_, _| true));
                }
                at = end;
            }
            assert!(expected.iter().flat_map(|t| &t.changes).count() > 100);
            assert_eq!(got, expected, "seed {seed}");
        }
    }
}
