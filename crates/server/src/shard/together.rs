//! One-shot batches that arrived together on a client's stream, run as a
//! group: the read marks of all of them under one taking of the shard's
//! lock, their reads and runs outside it, then all their commits under one
//! more. Each batch is the one [`Shard::execute`] runs, with the same
//! rules, records and answers; only the lock is taken twice for the group
//! instead of twice per batch.
//!
//! Why: at one shard every batch takes the lock, and with the shard's
//! runtime threads all running batches, most takings met it held; the
//! spins, sleeps and wake-ups around it were about a tenth of the shard's
//! CPU per one-shot transaction, against a thirtieth for `milliscale
//! serve` (BENCHMARKS.md). Under load the stream's chunks hold 8 batches
//! on average.
//!
//! A batch that needs what the group does not do runs alone, as
//! [`Shard::execute`] would run it, after the group's commits: one that
//! reads nothing from the rows (blind writes, scans), one whose timestamp
//! the durable read lease does not cover yet, one that meets a prepared
//! write at or below its timestamp (it waits for the decision), and one
//! whose run needs the lock (a read step 1 did not serve). Its read marks,
//! if the group made them, stay: marks only make validation more
//! conservative, and its own run marks the same keys again.
//!
//! Invariants (beyond [`Shard::execute`]'s):
//! - a batch's commit comes after its own marks and reads, as alone;
//!   batches of a group commit in their order in the chunk, each
//!   validated against every commit before it (the lock is held across
//!   them, and each commit is the participant's, one at a time);
//! - every request gets exactly one answer, and a refusal as a wrong shard
//!   goes through [`Shard::refused_batch`], as alone.

use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::sync::Arc;

use foldhash::HashSet;

use milliscale_milana::engine_versions::HeldRead;
use milliscale_milana::types::TxnId;
use milliscale_proto::v1 as proto;
use tonic::Status;

use super::execute::{Batch, Marked, Op, Parsed, Rows, Run, Stop, mark, pending, store_reads};
use super::{Shard, State, txn_from};

/// A batch's answer, to await.
pub type Answer<'a> =
    Pin<Box<dyn Future<Output = Result<proto::ShardExecuteResponse, Status>> + Send + 'a>>;

/// Where a batch of the group is.
enum Step {
    /// Refused (its own error, perhaps as a wrong shard).
    Refused(Status),
    /// To run alone ([`Shard::run`]).
    Alone(Parsed),
    /// Its reads marked under the group's lock.
    Marked(Parsed, Vec<Marked>),
    /// Its commit's outcome.
    Committed(Result<Run, Status>),
}

/// The key hashes of the batches admitted to a group so far: each key
/// they read or write, and each key they write.
#[derive(Default)]
struct Seen {
    touched: HashSet<u64>,
    written: HashSet<u64>,
}

impl Shard {
    /// Under the lock (`st`): admit batch `b` to the group and make its
    /// read marks, if it reads from the rows, overlaps no batch admitted
    /// before it (`seen`), its timestamp is under the durable lease and no
    /// prepared write at or below it is on a key it reads. `None`: it runs
    /// alone; an error: it is refused.
    fn marked_now(
        self: &Arc<Self>,
        st: &mut State,
        b: &Parsed,
        seen: &mut Seen,
    ) -> Option<Result<Vec<Marked>, Status>> {
        let keys = store_reads(&b.ops);
        if keys.is_empty() {
            return None;
        }
        let hash = |k: &[u8]| foldhash::fast::FixedState::with_seed(0).hash_one(k);
        let writes: Vec<u64> = b.ops.iter().filter_map(Op::written).map(hash).collect();
        let reads: Vec<u64> = keys.iter().map(|k| hash(k)).collect();
        if reads.iter().chain(&writes).any(|h| seen.written.contains(h))
            || writes.iter().any(|h| seen.touched.contains(h))
        {
            return None;
        }
        seen.touched.extend(reads.iter().chain(&writes).copied());
        seen.written.extend(writes);
        match self.lease_covers(st, b.at, b.client, b.low_water) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => return Some(Err(e)),
        }
        match mark(self, st, &keys, b.at) {
            Ok(marks) if pending(&marks) => None,
            marks => Some(marks),
        }
    }

    /// Run `requests`, one-shot batches that arrived together (see the
    /// module's comment): the answers in the requests' order, each to be
    /// awaited (a batch's answer waits for its own durability only).
    pub fn execute_together(
        self: &Arc<Self>,
        requests: Vec<proto::ShardExecuteRequest>,
    ) -> Vec<Answer<'_>> {
        // The batches checked, each with its name for a wrong shard's
        // refusal.
        let mut names: Vec<Option<(TxnId, u64)>> = Vec::with_capacity(requests.len());
        let mut steps: Vec<Step> = Vec::with_capacity(requests.len());
        for r in requests {
            let name = txn_from(r.txn).ok().map(|t| (t, r.version.as_ref().map_or(0, |v| v.ts)));
            names.push(name);
            steps.push(match self.parse(r) {
                Ok(b) => Step::Alone(b),
                Err(e) => Step::Refused(e),
            });
        }
        // Step 1's marks, all under one lock. A batch that touches a key
        // that a batch before it in the group writes, or writes a key that
        // one reads, runs alone (after the group's commits): marked
        // together, one would refuse the other (a key written below a
        // read mark, or a version newer than the one read), where run one
        // after the other both commit.
        let steps: Vec<Step> = {
            let mut st = self.lock();
            let mut seen = Seen::default();
            steps
                .into_iter()
                .map(|step| match step {
                    Step::Alone(b) => match self.marked_now(&mut st, &b, &mut seen) {
                        None => Step::Alone(b),
                        Some(Ok(marks)) => Step::Marked(b, marks),
                        Some(Err(e)) => Step::Refused(e),
                    },
                    step => step,
                })
                .collect()
        };
        // The rows' values and the runs, outside the lock; then the
        // commits, all under one. Each marked batch's outcome: its run
        // (`None`: it needs the lock, so it runs alone) or its refusal.
        let mut outcomes: Vec<Option<Result<Option<Run>, Status>>> =
            steps.iter().map(|_| None).collect();
        let mut ran: Vec<(usize, Batch, Rows<'_>, HeldRead)> = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            let Step::Marked(b, marks) = step else { continue };
            let keys = store_reads(&b.ops);
            let (mut pre, rows, held) = self.read_known(&b.ops, &keys, marks);
            match self.operations(None, &b.ops, &mut pre, b.txn, b.at) {
                Ok(batch) => ran.push((i, batch, rows, held)),
                Err(Stop::Refused(s)) => outcomes[i] = Some(Err(s)),
                Err(Stop::Locked) => outcomes[i] = Some(Ok(None)),
            }
        }
        let (commits, held): (Vec<_>, Vec<HeldRead>) =
            ran.into_iter().map(|(i, batch, rows, held)| ((i, batch, rows), held)).unzip();
        if !commits.is_empty() {
            self.together.fetch_add(commits.len() as u64, std::sync::atomic::Ordering::Relaxed);
            let mut st = self.lock();
            for (i, batch, rows) in commits {
                let Step::Marked(b, _) = &steps[i] else { unreachable!("only marked batches ran") };
                outcomes[i] = Some(self.commit(&mut st, batch, b.version, &rows).map(Some));
            }
        }
        // Open until the installs wrote: their rows' hints held.
        drop(held);
        let steps = steps.into_iter().zip(outcomes).map(|(step, outcome)| match (step, outcome) {
            (Step::Marked(b, _), Some(Ok(None))) => Step::Alone(b),
            (Step::Marked(..), Some(Ok(Some(run)))) => Step::Committed(Ok(run)),
            (Step::Marked(..), Some(Err(e))) => Step::Committed(Err(e)),
            (Step::Marked(..), None) => unreachable!("every marked batch ran"),
            (step, None) => step,
            (_, Some(_)) => unreachable!("only marked batches ran"),
        });
        steps
            .zip(names)
            .map(|(step, name)| -> Answer<'_> {
                Box::pin(async move {
                    let answer = match step {
                        Step::Refused(e) => Err(e),
                        Step::Alone(b) => self.run(b).await,
                        Step::Committed(run) => match run {
                            Ok(run) => self.finish(run).await,
                            Err(e) => Err(e),
                        },
                        Step::Marked(..) => unreachable!("every marked batch committed or not"),
                    };
                    match name {
                        Some((txn, ts)) => self.answer(txn, ts, answer).await,
                        None => answer,
                    }
                })
            })
            .collect()
    }
}
