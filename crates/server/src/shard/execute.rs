//! A one-shot batch whose keys are all this shard's, run here whole: the
//! single-shard fast path in one round trip (`ShardExecute`).
//!
//! The shard runs the batch as its client would, with the same rules and
//! the same records: each read is MILANA's read at the batch's begin
//! timestamp `at` (its read mark set, under a durable read lease), each
//! write is buffered in a [`ClientTxn`], and the commit is the lone
//! participant's (`Participant::commit_alone`): validated by Algorithm 1
//! at `version` and committed at once, its prepare and commit in one
//! engine transaction, as a `ShardPrepare` with one participant is. In
//! two steps, as a client's `ShardRead` and then its `ShardPrepare` would:
//! 1. the reads: under the participant's lock, each key the batch reads
//!    from the shard's rows (a get, delete or patch of a key it has not
//!    written before) gets its read mark at `at`, and, when the shard
//!    knows the key's newest version at or below `at` without reading a
//!    row (nearly always), that version; the rows' values are then read
//!    outside the lock (no version at or below `at` can be installed once
//!    the mark is made, and the version read is kept, in its row or, once
//!    replaced, in the shard's memory, while the watermark is at most
//!    `at`); the rows of the keys the batch also writes are kept, and
//!    offered to its install (`EngineVersions::offer_rows`), which uses
//!    one only if it is still its key's newest version, so that a read
//!    and a write of a key read its row once; with each row, where the
//!    engine found it (a `RowHint`), and the read's engine transaction
//!    stays open until the commit wrote (`HeldRead`), so that the write
//!    does not descend the index again;
//! 2. the run: the operations in order, outside the lock when step 1
//!    read every key they need and they scan nothing (the values at `at`
//!    cannot change once marked), else under it (a read not served in
//!    step 1 is served there); then, under the lock, the commit.
//!    Validation refuses the batch if a version newer than one it read
//!    was installed between the steps, as it refuses a client's prepare.
//!
//! The lock is held for the marks and the commit, not for the rows' reads
//! nor the run: at one shard every batch takes it, so its length bounds
//! the shard's throughput.
//!
//! The answer waits for the batch's own write and for the writes of the
//! versions it read that are not yet durable (`Fresh`): a lone commit is
//! visible before it is durable.
//!
//! A read that meets a prepared write at or below `at` waits for its
//! decision, as a `ShardRead` does; if it is still undecided after the
//! termination timeout the batch is refused (run it again). A refusal or
//! a no vote leaves nothing behind but the read marks.

use std::sync::Arc;

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use milliscale::RowHint;
use milliscale_milana::coordinator::{ClientTxn, patch};
use milliscale_milana::engine_versions::{HeldRead, KeptRow};
use milliscale_milana::participant::{ReadReply, Vote};
use milliscale_milana::shard_map::ShardMap;
use milliscale_milana::types::{
    CommitTs, Key, TxnId, TxnStatus, Value, cluster_range, split_cluster_key,
};
use milliscale_milana::versions::write_ok;
use milliscale_proto::v1 as proto;
use proto::{OperationResult, operation, operation_result};
use tonic::Status;

use super::{Shard, State, Wait, ts_from, txn_from};
use crate::errors::{engine, kind_of, refuse};
use crate::ops::EXECUTE_SCAN_ROWS_MAX;

/// One operation, its keys checked and in the cluster's key space.
pub(super) enum Op {
    Get(Key),
    Put(Key, Value),
    Delete(Key),
    Patch { key: Key, offset: usize, bytes: bytes::Bytes },
    Scan { lo: Key, hi: Key, reverse: bool, limit: u64 },
}

impl Op {
    /// The key it writes, if it writes.
    pub(super) fn written(&self) -> Option<&[u8]> {
        match self {
            Op::Put(k, _) | Op::Delete(k) | Op::Patch { key: k, .. } => Some(k),
            Op::Get(_) | Op::Scan { .. } => None,
        }
    }
}

/// What one run of the batch under the lock came to.
pub(super) enum Run {
    /// A read met a prepared write at or below `at`: wait and run again.
    Pending,
    /// Validation voted no: why, the clock floor for the client, and the
    /// vote's record to wait for (as `ShardPrepare` waits for it).
    No(String, u64, Option<Wait>),
    /// Done: the results, what the answer waits for, and the CSN that
    /// makes the versions it read durable, if one is not yet (`Fresh`).
    Done(Vec<OperationResult>, Option<Wait>, Option<u64>),
}

impl Shard {
    /// Run a one-shot batch here (see the module's comment). A batch
    /// refused as a wrong shard (its range moved, or is moving) is run
    /// again by its client as another transaction, so a late copy of this
    /// one must not commit, nor may this one have committed here before
    /// (its first answer lost): see [`Shard::refused_batch`].
    pub async fn execute(
        self: &Arc<Self>,
        r: proto::ShardExecuteRequest,
    ) -> Result<proto::ShardExecuteResponse, Status> {
        let txn = txn_from(r.txn)?;
        let ts = r.version.as_ref().map_or(0, |v| v.ts);
        let answer = match self.parse(r) {
            Ok(b) => self.run(b).await,
            Err(e) => Err(e),
        };
        self.answer(txn, ts, answer).await
    }

    /// `answer` for batch `txn` (version `ts`), unless it is a refusal as
    /// a wrong shard: then [`Shard::refused_batch`]'s.
    pub(super) async fn answer(
        self: &Arc<Self>,
        txn: TxnId,
        ts: u64,
        answer: Result<proto::ShardExecuteResponse, Status>,
    ) -> Result<proto::ShardExecuteResponse, Status> {
        match answer {
            Err(e) if kind_of(&e) == Some("wrong_shard") => {
                Err(self.refused_batch(txn, ts, e).await)
            }
            answer => answer,
        }
    }

    /// The error for batch `txn` (version `ts`) refused as a wrong shard
    /// (`e`): unknown here, an abort is logged first (a durable no, as a
    /// vote's), so that a late copy of it is refused once the range is
    /// served here again; committed here already (asked again after its
    /// first answer was lost, and its range moved since), not `e`, which
    /// its client would run again as another transaction, but an outcome
    /// it must not take for an abort.
    async fn refused_batch(self: &Arc<Self>, txn: TxnId, ts: u64, e: Status) -> Status {
        let ack = {
            let mut st = self.lock();
            match st.p.known(txn) {
                Some(TxnStatus::Committed) => return refuse::committed_unreadable(),
                Some(_) => return e,
                None => match st.p.decide(txn, false, ts) {
                    None => return e,
                    Some(r) => match self.write(&mut st, &[r]) {
                        Ok(ack) => ack,
                        Err(w) => return w,
                    },
                },
            }
        };
        match self.wait(Wait::Ack(ack, Some(txn))).await {
            Ok(()) => e,
            Err(w) => w,
        }
    }

    /// The request checked: its transaction, its timestamps and its
    /// operations ([`Shard::ops_of`]).
    pub(super) fn parse(&self, r: proto::ShardExecuteRequest) -> Result<Parsed, Status> {
        let txn = txn_from(r.txn)?;
        let version = ts_from(r.version);
        let ops = self.ops_of(r.operations, &r.table)?;
        let writes = ops.iter().any(|o| !matches!(o, Op::Get(_) | Op::Scan { .. }));
        if writes && self.opts.read_only {
            return Err(super::read_only_refusal());
        }
        if writes && version.ts <= r.at {
            return Err(refuse::invalid("a batch's version must be above its read timestamp"));
        }
        Ok(Parsed { txn, version, at: r.at, client: r.client, low_water: r.low_water, ops })
    }

    /// Run batch `b` (steps 1 and 2 of the module's comment) and answer.
    pub(super) async fn run(
        self: &Arc<Self>,
        b: Parsed,
    ) -> Result<proto::ShardExecuteResponse, Status> {
        let Parsed { txn, version, at, client, low_water, ref ops } = b;
        let Some((mut pre, rows, marked, held)) = self.pre_read(ops, at, client, low_water).await?
        else {
            return Ok(no(PENDING, 0));
        };
        // The run outside the lock when step 1 read all it needs (it
        // marked the keys under the lease and noted the client), else
        // under it.
        let outside = match marked.then(|| self.operations(None, ops, &mut pre, txn, at)) {
            Some(Ok(batch)) => Some(batch),
            Some(Err(Stop::Refused(s))) => return Err(s),
            Some(Err(Stop::Locked)) | None => None,
        };
        let run = match outside {
            Some(batch) => {
                let run = self.commit(&mut self.lock(), batch, version, &rows);
                // Open until the install wrote: its rows' hints held.
                drop(held);
                run?
            }
            None => {
                // Not held across the wait: a transaction slot.
                drop(held);
                let run = |st: &mut State| match self.operations(
                    Some(st),
                    ops,
                    &mut pre.clone(),
                    txn,
                    at,
                ) {
                    Ok(batch) => self.commit(st, batch, version, &rows),
                    Err(Stop::Refused(s)) => Err(s),
                    Err(Stop::Locked) => unreachable!("the lock is held"),
                };
                let pending = |r: &Result<Run, Status>| matches!(r, Ok(Run::Pending));
                self.settled(at, client, low_water, run, pending).await??
            }
        };
        self.finish(run).await
    }

    /// The answer to a batch whose run came to `run`, once what it waits
    /// for is durable.
    pub(super) async fn finish(
        self: &Arc<Self>,
        run: Run,
    ) -> Result<proto::ShardExecuteResponse, Status> {
        match run {
            Run::Pending => Ok(no(PENDING, 0)),
            Run::No(why, floor, wait) => {
                if let Some(w) = wait {
                    self.wait(w).await?;
                }
                Ok(no(&why, floor))
            }
            Run::Done(results, wait, fresh) => {
                if let Some(w) = wait {
                    self.wait(w).await?;
                }
                if let Some(csn) = fresh {
                    self.barrier(csn).await?;
                }
                Ok(proto::ShardExecuteResponse { yes: true, why: String::new(), floor: 0, results })
            }
        }
    }

    /// The batch's operations, checked (their tables known, their keys
    /// this shard's, their values within the limits) and in the cluster's
    /// key space.
    fn ops_of(&self, operations: Vec<proto::Operation>, table: &str) -> Result<Vec<Op>, Status> {
        fn table_of<'a>(op: &'a proto::Operation, table: &'a str) -> &'a str {
            if op.table.is_empty() { table } else { &op.table }
        }
        {
            let names = self.names.read();
            if let Some((i, op)) =
                operations.iter().enumerate().find(|(_, op)| !names.contains(table_of(op, table)))
            {
                let missing = milliscale::Error::TableNotFound(table_of(op, table).to_owned());
                return Err(numbered(i, engine(&missing)));
            }
        }
        // The map read once for all the keys (not per key: its lock's
        // count is a cache line the shard's threads share).
        let map = self.map.read();
        let ops = operations.into_iter().enumerate().map(|(i, op)| {
            let proto::Operation { table: named, op } = op;
            let table = if named.is_empty() { table } else { &named };
            self.op_of(&map, op, table).map_err(|s| numbered(i, s))
        });
        ops.collect()
    }

    /// Check operation `op` of table `table`, known to exist (its keys
    /// this shard's under `map`, the current map, its value within the
    /// limits) and put it in the cluster's key space.
    fn op_of(&self, map: &ShardMap, op: Option<operation::Op>, table: &str) -> Result<Op, Status> {
        let key = |key: &[u8]| self.key_in(map, table, key);
        let value_ok = |k: &[u8], v: &[u8]| write_ok(table, k, Some(v)).map_err(refuse::invalid);
        Ok(match op {
            None => return Err(refuse::invalid("names no operation")),
            Some(operation::Op::Get(k)) => Op::Get(key(&k)?),
            Some(operation::Op::Put(row)) => {
                value_ok(&row.key, &row.value)?;
                Op::Put(key(&row.key)?, row.value.to_vec())
            }
            Some(operation::Op::Delete(k)) => Op::Delete(key(&k)?),
            Some(operation::Op::Patch(p)) => {
                Op::Patch { key: key(&p.key)?, offset: p.offset as usize, bytes: p.bytes }
            }
            Some(operation::Op::Scan(r)) => {
                if r.prefix.is_some() && (r.start.is_some() || r.end.is_some()) {
                    return Err(refuse::invalid("a key range has a prefix or start/end, not both"));
                }
                if r.limit == 0 || r.limit > EXECUTE_SCAN_ROWS_MAX {
                    return Err(refuse::invalid(format!(
                        "a scan in a batch needs a limit of 1 to {EXECUTE_SCAN_ROWS_MAX} rows"
                    )));
                }
                let (lo, hi) =
                    cluster_range(table, r.start.as_deref(), r.end.as_deref(), r.prefix.as_deref());
                self.own_range_in(map, &lo, &hi)?;
                Op::Scan { lo, hi, reverse: r.reverse, limit: r.limit }
            }
        })
    }

    /// Step 1 of a batch (see the module's comment): the read marks of
    /// the keys it reads from the shard's rows, under the lock, then the
    /// values of those whose version was known, outside it; and whether
    /// it marked any (then the lease covered `at` and the client was
    /// noted); with the rows read of the keys the batch also writes, for
    /// its install. `None`: a prepared write at or below `at` stayed
    /// undecided past the termination timeout.
    async fn pre_read<'a>(
        self: &Arc<Self>,
        ops: &'a [Op],
        at: u64,
        client: u32,
        low_water: u64,
    ) -> Result<Option<(PreRead<'a>, Rows<'a>, bool, HeldRead)>, Status> {
        let keys = store_reads(ops);
        if keys.is_empty() {
            return Ok(Some((PreRead::new(), Vec::new(), false, HeldRead::none())));
        }
        let marking = |st: &mut State| mark(self, st, &keys, at);
        let waiting = |m: &Result<Vec<Marked>, Status>| m.as_ref().is_ok_and(|m| pending(m));
        let marks = self.settled(at, client, low_water, marking, waiting).await??;
        if pending(&marks) {
            return Ok(None);
        }
        let (read, rows, held) = self.read_known(ops, &keys, &marks);
        Ok(Some((read, rows, true, held)))
    }

    /// The second half of step 1, outside the lock: the values of the
    /// versions known in `marks` (of `keys`, the batch's `store_reads`), in
    /// one engine transaction, left open (`HeldRead`); the rows of those
    /// the batch writes are kept for its install.
    pub(super) fn read_known<'a>(
        &self,
        ops: &'a [Op],
        keys: &[&'a Key],
        marks: &[Marked],
    ) -> (PreRead<'a>, Rows<'a>, HeldRead) {
        let written: HashSet<&[u8]> = ops.iter().filter_map(Op::written).collect();
        let known: Vec<(&[u8], CommitTs, bool, Option<RowHint>)> = keys
            .iter()
            .zip(marks)
            .filter_map(|(k, (version, _, hint))| Some((k.as_slice(), (*version)?, *hint)))
            .map(|(k, version, hint)| (k, version, written.contains(k), hint))
            .collect();
        let (values, held) = self.tables.rows.values_held(known.iter().copied());
        let (mut read, mut rows) = (PreRead::with_capacity(known.len()), Vec::new());
        for ((k, version, _, _), (value, row)) in known.into_iter().zip(values) {
            // A row gone (its table dropped meanwhile) is read in step 2.
            let Some(value) = value else { continue };
            read.insert(k, ReadReply { version, value, prepared_below: false });
            rows.extend(row.map(|row| (k, row)));
        }
        (read, rows, held)
    }

    /// Step 2 of a batch: its operations in order, as its client would
    /// run them, each read at `at` from `pre` (step 1) or, under the lock
    /// (`st`), from the shard. Without the lock, a read or scan step 1
    /// did not serve stops the run (`Stop::Locked`): run it again under
    /// the lock.
    pub(super) fn operations(
        &self,
        mut st: Option<&mut State>,
        ops: &[Op],
        pre: &mut PreRead<'_>,
        txn: TxnId,
        at: u64,
    ) -> Result<Batch, Stop> {
        let mut t = ClientTxn::new(txn, at);
        let mut results = Vec::with_capacity(ops.len());
        let mut scanned = Vec::new();
        // Gets of keys each read once (step 1 read every one): no later
        // operation needs a value read, and the commit needs only the
        // versions, so each value moves into its answer uncopied.
        let once = ops.iter().all(|o| matches!(o, Op::Get(_))) && pre.len() == ops.len();
        for (i, op) in ops.iter().enumerate() {
            let result = match op {
                Op::Get(k) if once => {
                    current(st.as_deref_mut(), &mut t, pre, k, i)?;
                    let value = t.reads.get_mut(k).and_then(|r| r.value.take());
                    operation_result::Result::Get(proto::GetResponse {
                        value: value.map(Into::into),
                    })
                }
                Op::Get(k) => {
                    let value = current(st.as_deref_mut(), &mut t, pre, k, i)?;
                    operation_result::Result::Get(proto::GetResponse {
                        value: value.map(|v| v.clone().into()),
                    })
                }
                Op::Put(k, v) => {
                    t.writes.insert(k.clone(), Some(v.clone()));
                    operation_result::Result::Put(proto::PutResponse {})
                }
                Op::Delete(k) => {
                    let existed = current(st.as_deref_mut(), &mut t, pre, k, i)?.is_some();
                    t.writes.insert(k.clone(), None);
                    operation_result::Result::Delete(proto::DeleteResponse { existed })
                }
                Op::Patch { key, offset, bytes } => {
                    let Some(old) = current(st.as_deref_mut(), &mut t, pre, key, i)? else {
                        return Err(numbered(i, engine(&milliscale::Error::NotFound)).into());
                    };
                    let new = patch(old, *offset, bytes)
                        .map_err(|e| numbered(i, engine(&milliscale::Error::InvalidArgument(e))))?;
                    t.writes.insert(key.clone(), Some(new));
                    operation_result::Result::Patch(proto::PatchResponse {})
                }
                Op::Scan { lo, hi, reverse, limit } => {
                    let Some(st) = st.as_deref_mut() else { return Err(Stop::Locked) };
                    let ask = t.scan_ask(lo, hi, *reverse, *limit);
                    let reply =
                        st.p.scan(lo, hi, at, usize::try_from(ask).unwrap_or(usize::MAX))
                            .map_err(|g| numbered(i, refuse::stale_read(at, g.oldest)))?;
                    t.ranges.entry(self.opts.shard).or_default().push((lo.clone(), hi.clone()));
                    t.scanned_prepared |= reply.prepared_below;
                    scanned.extend(reply.rows.iter().map(|(_, v, _)| *v));
                    let read = reply.rows.into_iter().map(|(k, _, v)| (k, v)).collect();
                    let rows = t
                        .own_view(lo, hi, read, *reverse, *limit)
                        .into_iter()
                        .map(|(k, v)| proto::Row {
                            key: split_cluster_key(&k)
                                .map_or(Vec::new(), |(_, k)| k.to_vec())
                                .into(),
                            value: v.into(),
                        })
                        .collect();
                    operation_result::Result::Scan(proto::ScanResponse { rows, more: false })
                }
            };
            results.push(OperationResult { result: Some(result) });
        }
        Ok(Batch { t, results, scanned })
    }

    /// The end of step 2, under the lock: if no read is pending and the
    /// batch wrote, the lone participant's validation and commit
    /// (`Participant::commit_alone`).
    pub(super) fn commit(
        &self,
        st: &mut State,
        batch: Batch,
        version: CommitTs,
        rows: &Rows<'_>,
    ) -> Result<Run, Status> {
        let Batch { t, results, scanned } = batch;
        // Under the lock: a range frozen or moved away since step 1 is
        // served no more.
        let keys = t.reads.keys().chain(t.writes.keys()).map(Vec::as_slice);
        let ranges = t.ranges.values().flatten().map(|(a, b)| (a.as_slice(), b.as_slice()));
        let map = self.map.read();
        self.refuse_moved(st, &map, keys.clone(), ranges)?;
        st.count(&map, keys);
        if !t.locally_valid() {
            return Ok(Run::Pending);
        }
        let read = t.reads.values().map(|r| r.version).chain(scanned);
        let fresh = st.fresh.wait_for_all(read);
        if t.read_only() {
            // Every read at `at` on this shard, none with a prepared write
            // below it: the batch is a consistent snapshot at `at`, and
            // its read marks keep later writes above it (MILANA §4.3).
            return Ok(Run::Done(results, None, fresh));
        }
        // A table dropped since the batch's keys were checked: its rows
        // are gone, and must not come back.
        let names = self.names.read();
        let mut tables = t.writes.keys().filter_map(|k| split_cluster_key(k)).map(|(t, _)| t);
        let dropped = tables.find(|t| !names.contains(*t));
        drop(names);
        if let Some(table) = dropped {
            return Err(engine(&milliscale::Error::TableNotFound(table.to_owned())));
        }
        let p = t.into_prepare(version, self.opts.shard);
        let floor = st.p.clock_floor(&p);
        // The rows step 1 read, so that the install need not read them.
        st.p.versions_mut().offer_rows(rows.iter().map(|(k, row)| (*k, row.clone())));
        let (vote, records) = st.p.commit_alone(p);
        let wait = if records.is_empty() {
            // The same transaction asked again: answer once what is
            // written so far (its first vote's records) is durable.
            Wait::Barrier(st.last_csn)
        } else {
            Wait::Ack(self.write(st, &records)?, None)
        };
        Ok(match vote {
            Vote::No(why) => Run::No(why.into(), floor, Some(wait)),
            Vote::Yes => Run::Done(results, Some(wait), fresh),
        })
    }
}

/// A batch's run (step 2) before its commit.
pub(super) struct Batch {
    t: ClientTxn,
    results: Vec<OperationResult>,
    /// The versions its scans read.
    scanned: Vec<CommitTs>,
}

/// Why a run stopped.
pub(super) enum Stop {
    /// Refused.
    Refused(Status),
    /// A read needs the lock.
    Locked,
}

impl From<Status> for Stop {
    fn from(s: Status) -> Stop {
        Stop::Refused(s)
    }
}

/// A key's read mark in step 1: its version at the batch's timestamp if
/// known, whether a prepared write is at or below it, and where the engine
/// last found its row if known.
pub(super) type Marked = (Option<CommitTs>, bool, Option<RowHint>);

/// Under the lock (`st`), the read marks at `at` of `keys` (the batch's
/// `store_reads`): each key's version at `at` if known, whether a
/// prepared write is at or below it, and where the engine last found its
/// row if known. Refused in a range frozen for a move or moved away.
pub(super) fn mark(
    shard: &Shard,
    st: &mut State,
    keys: &[&Key],
    at: u64,
) -> Result<Vec<Marked>, Status> {
    shard.refuse_moved(st, &shard.map.read(), keys.iter().map(|k| k.as_slice()), [])?;
    let marked = keys.iter().map(|k| {
        // The hint in the same lookup as the version.
        let (known, prepared_below) =
            st.p.read_version_with(k, at, |v, k, at| v.version_and_hint_at(k, at));
        (known.map(|(v, _)| v), prepared_below, known.and_then(|(_, h)| h))
    });
    Ok(marked.collect())
}

/// Whether a key marked has a prepared write at or below the batch's
/// timestamp (then it waits for the decision).
pub(super) fn pending(marks: &[Marked]) -> bool {
    marks.iter().any(|(_, p, _)| *p)
}

/// A batch's request, checked ([`Shard::parse`]).
pub(super) struct Parsed {
    pub(super) txn: TxnId,
    pub(super) version: CommitTs,
    pub(super) at: u64,
    pub(super) client: u32,
    pub(super) low_water: u64,
    pub(super) ops: Vec<Op>,
}

/// The refusal of a run that met a prepared write still undecided.
const PENDING: &str = "a key read had a prepared write below the read time, still undecided; \
                       run it again";

/// A no to a batch: why, and the clock floor for its client.
fn no(why: &str, floor: u64) -> proto::ShardExecuteResponse {
    proto::ShardExecuteResponse { yes: false, why: why.into(), floor, results: Vec::new() }
}

/// What step 1 read, by key (the batch's own).
pub(super) type PreRead<'a> = HashMap<&'a [u8], ReadReply>;

/// The rows step 1 read of keys the batch writes (key, whole row and
/// where the engine found it).
pub(super) type Rows<'a> = Vec<(&'a [u8], KeptRow)>;

/// The keys a batch reads from the shard's rows, each once, in order: those
/// of its gets, deletes and patches that it has not written before.
pub(super) fn store_reads(ops: &[Op]) -> Vec<&Key> {
    let n = ops.len();
    let (mut written, mut seen) = (HashSet::with_capacity(n), HashSet::with_capacity(n));
    let mut keys = Vec::with_capacity(n);
    for op in ops {
        let (read, write) = match op {
            Op::Get(k) => (Some(k), None),
            Op::Put(k, _) => (None, Some(k)),
            Op::Delete(k) | Op::Patch { key: k, .. } => (Some(k), Some(k)),
            Op::Scan { .. } => (None, None),
        };
        if let Some(k) = read
            && !written.contains(k)
            && seen.insert(k)
        {
            keys.push(k);
        }
        if let Some(k) = write {
            written.insert(k);
        }
    }
    keys
}

/// The value of `k` as the batch sees it, borrowed from `t`: its own
/// write, or MILANA's read at the batch's timestamp (from step 1 if it was
/// read there, taken out of `pre`; a run that stops after taking some
/// reads the rest under the lock; kept as a read, validated at the
/// prepare); refused if that version is no longer held (operation `i`'s).
fn current<'t>(
    st: Option<&mut State>,
    t: &'t mut ClientTxn,
    pre: &mut PreRead<'_>,
    k: &Key,
    i: usize,
) -> Result<Option<&'t Value>, Stop> {
    if t.writes.contains_key(k) {
        return Ok(t.writes[k].as_ref());
    }
    if t.reads.contains_key(k) {
        return Ok(t.reads[k].value.as_ref());
    }
    let r = match (pre.remove(k.as_slice()), st) {
        (Some(r), _) => r,
        (None, Some(st)) => {
            st.p.read(k, t.begin).map_err(|g| numbered(i, refuse::stale_read(t.begin, g.oldest)))?
        }
        (None, None) => return Err(Stop::Locked),
    };
    Ok(t.reads.entry(k.clone()).or_insert(r).value.as_ref())
}

/// `s` with the number of the operation it is about.
fn numbered(i: usize, s: Status) -> Status {
    Status::with_metadata(s.code(), format!("operation {i}: {}", s.message()), s.metadata().clone())
}
