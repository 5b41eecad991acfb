//! The committer's round and the gCSN publication (pipelined group
//! commit's committer, Milliscale §2.4; gCSN, §4.3).
//!
//! **gCSN.** Every CSN below gCSN, in every group, is durable. It is the
//! minimum over groups of the oldest CSN not yet durable there
//! ([`super::durability::GroupDurability::oldest_not_durable`]), where a
//! group with nothing pending contributes the CSN counter, **read before
//! the scan** (invariant 2): a CSN taken after that read is at least the
//! value read, and one taken before it is already registered as pending in
//! its group (a worker registers a lower bound of its CSN before it takes
//! it, under its group's buffer lock, see `log::group`).
//!
//! **The round** publishes gCSN, releases what it allows, wakes the ack
//! waiters and measures commit latency. Acks decide by the marks alone
//! ([`super::marks`]); the round's lists are for the metrics: each landed
//! part brings its transactions ([`super::durability`]), and a transaction
//! whose own records are durable but that waits on a dependency is held
//! until gCSN passes its DSN. One committer per database with a log,
//! behind a mutex: the lane that lands a part runs a round at once, a
//! worker may run one (autonomous acknowledgment), and a thread runs one
//! every 50 ms as the safety net and the closer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use parking_lot::Mutex;

use super::durability::Pending;
use super::marks::CommitMarks;
use crate::mvcc::Csn;
use crate::options::Tracking;

/// Compute gCSN by the rule in the module docs and publish it; returns the
/// published value (which never goes back). The committer runs this each
/// round; a durable-snapshot reader runs it before it reads gCSN, because
/// an ack can be seen before the committer's next round (under record
/// tracking an ack needs `durable[g]`, which the lane publishes).
pub(crate) fn publish_gcsn(marks: &CommitMarks) -> Csn {
    // Invariant 2: read the counter before scanning the groups.
    let counter = marks.next_csn.load(Ordering::SeqCst);
    let gcsn = marks
        .groups()
        .iter()
        .map(|g| g.oldest_not_durable().unwrap_or(counter))
        .fold(counter, Csn::min);
    let before = marks.gcsn.fetch_max(gcsn, Ordering::SeqCst);
    if gcsn > before {
        // gCSN moved: acknowledgments follow, for a simulation's trace.
        milliscale_seam::trace(&[&b"gcsn"[..], &gcsn.to_le_bytes()]);
    }
    marks.gcsn.load(Ordering::SeqCst)
}

/// See the module docs.
pub(crate) struct Committer {
    marks: Arc<CommitMarks>,
    /// Per group: transactions whose records are durable but that wait on
    /// dependencies, with when the committer found them durable.
    held: Vec<Vec<(Pending, Instant)>>,
    stop: Arc<AtomicBool>,
    /// Each released transaction's latency, for the `metrics` facade.
    latency: metrics::Histogram,
}

impl Committer {
    pub(crate) fn new(marks: Arc<CommitMarks>, stop: Arc<AtomicBool>) -> Committer {
        let held = marks.groups().iter().map(|_| Vec::new()).collect();
        let latency = metrics::histogram!("milliscale_commit_latency_seconds");
        Committer { marks, held, stop, latency }
    }

    /// The committer thread: a round every 50 ms or when woken, until
    /// stopped (the last round runs after `stop` is seen).
    pub(crate) fn run(shared: Arc<Mutex<Committer>>) {
        let (marks, stop) = {
            let c = shared.lock();
            (Arc::clone(&c.marks), Arc::clone(&c.stop))
        };
        loop {
            let stopping = stop.load(Ordering::Acquire);
            shared.lock().round();
            if stopping || marks.is_poisoned() {
                return;
            }
            marks.sleep(Duration::from_millis(50));
        }
    }

    /// Compute gCSN, release what it allows, wake the waiters.
    pub(crate) fn round(&mut self) {
        let gcsn = publish_gcsn(&self.marks);
        let now = milliscale_seam::now();
        let tracking = self.marks.tracking;
        let releasable = |p: &Pending| match tracking {
            Tracking::Record => p.dsn < gcsn,
            Tracking::Txn => p.csn < gcsn,
        };
        let mut m = self.marks.metrics.lock();
        let latency = &self.latency;
        for (held, group) in self.held.iter_mut().zip(self.marks.groups()) {
            held.retain(|(p, durable_at)| {
                if !releasable(p) {
                    return true;
                }
                m.released += 1;
                m.waited += 1;
                record(&mut m.latency_us, now - p.at);
                latency.record(now - p.at);
                record(&mut m.dependency_wait_us, now - *durable_at);
                false
            });
            let landed = group.take_landed();
            for p in &landed {
                if releasable(p) {
                    m.released += 1;
                    record(&mut m.latency_us, now - p.at);
                    latency.record(now - p.at);
                } else {
                    held.push((*p, now));
                }
            }
            group.recycle(landed);
        }
        drop(m);
        self.marks.notify_acks();
    }
}

fn record(h: &mut Histogram<u64>, d: Duration) {
    h.saturating_record((d.as_micros() as u64).max(1));
}
