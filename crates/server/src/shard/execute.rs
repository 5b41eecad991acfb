//! A one-shot batch whose keys are all this shard's, run here whole: the
//! single-shard fast path in one round trip (`ShardExecute`).
//!
//! The shard runs the batch as its client would, with the same rules and
//! the same records: each read is MILANA's read at the batch's begin
//! timestamp `at` (its read mark set, under a durable read lease), each
//! write is buffered in a [`ClientTxn`], and the commit is the lone
//! participant's prepare at `version`, validated by Algorithm 1 and
//! committed in the same engine transaction as a `ShardPrepare` with one
//! participant is. All of it happens under the participant's lock, so no
//! other call comes between the reads and the prepare; the validation
//! still runs, and still refuses a version below a read another
//! transaction served.
//!
//! A read that meets a prepared write at or below `at` waits for its
//! decision, as a `ShardRead` does; if it is still undecided after the
//! termination timeout the batch is refused (run it again). A refusal or
//! a no vote leaves nothing behind but the read marks.

use std::sync::Arc;

use milliscale_milana::coordinator::{ClientTxn, patch};
use milliscale_milana::log::Record;
use milliscale_milana::participant::Vote;
use milliscale_milana::types::{CommitTs, Key, Value, cluster_range, split_cluster_key};
use milliscale_milana::versions::write_ok;
use milliscale_proto::v1 as proto;
use proto::{OperationResult, operation, operation_result};
use tonic::Status;

use super::{Shard, State, Wait, ts_from, txn_from};
use crate::errors::{engine, refuse};
use crate::ops::EXECUTE_SCAN_ROWS_MAX;

/// One operation, its keys checked and in the cluster's key space.
enum Op {
    Get(Key),
    Put(Key, Value),
    Delete(Key),
    Patch { key: Key, offset: usize, bytes: Vec<u8> },
    Scan { lo: Key, hi: Key, reverse: bool, limit: u64 },
}

/// What one run of the batch under the lock came to.
enum Run {
    /// A read met a prepared write at or below `at`: wait and run again.
    Pending,
    /// Validation voted no: why, the clock floor for the client, and the
    /// vote's record to wait for (as `ShardPrepare` waits for it).
    No(String, u64, Option<Wait>),
    /// Done: the results, and what the answer waits for.
    Done(Vec<OperationResult>, Option<Wait>),
}

impl Shard {
    /// Run a one-shot batch here (see the module's comment).
    pub async fn execute(
        self: &Arc<Self>,
        r: proto::ShardExecuteRequest,
    ) -> Result<proto::ShardExecuteResponse, Status> {
        let txn = txn_from(r.txn)?;
        let version = ts_from(r.version);
        let at = r.at;
        let ops = {
            let st = self.lock();
            r.operations
                .into_iter()
                .enumerate()
                .map(|(i, op)| self.op_of(&st, op, &r.table).map_err(|s| numbered(i, s)))
                .collect::<Result<Vec<_>, _>>()?
        };
        let writes = ops.iter().any(|o| !matches!(o, Op::Get(_) | Op::Scan { .. }));
        if writes && version.ts <= at {
            return Err(refuse::invalid("a batch's version must be above its read timestamp"));
        }
        let run = |st: &mut State| self.run(st, &ops, txn, at, version);
        let pending = |r: &Result<Run, Status>| matches!(r, Ok(Run::Pending));
        let no = |why: &str, floor| proto::ShardExecuteResponse {
            yes: false,
            why: why.into(),
            floor,
            results: Vec::new(),
        };
        match self.settled(at, r.client, r.low_water, run, pending).await?? {
            Run::Pending => Ok(no(
                "a key read had a prepared write below the read time, still undecided; run it \
                 again",
                0,
            )),
            Run::No(why, floor, wait) => {
                if let Some(w) = wait {
                    self.wait(w).await?;
                }
                Ok(no(&why, floor))
            }
            Run::Done(results, wait) => {
                if let Some(w) = wait {
                    self.wait(w).await?;
                }
                Ok(proto::ShardExecuteResponse { yes: true, why: String::new(), floor: 0, results })
            }
        }
    }

    /// Check operation `op` (its table known, its keys this shard's, its
    /// value within the limits) and put it in the cluster's key space.
    fn op_of(&self, st: &State, op: proto::Operation, table: &str) -> Result<Op, Status> {
        let table = if op.table.is_empty() { table.to_owned() } else { op.table };
        let key = |key: &[u8]| {
            self.key_of(
                st,
                Some(proto::TableKey { table: table.clone(), key: key.to_vec().into() }),
            )
        };
        let value_ok = |k: &[u8], v: &[u8]| write_ok(&table, k, Some(v)).map_err(refuse::invalid);
        Ok(match op.op {
            None => return Err(refuse::invalid("names no operation")),
            Some(operation::Op::Get(k)) => Op::Get(key(&k)?),
            Some(operation::Op::Put(row)) => {
                value_ok(&row.key, &row.value)?;
                Op::Put(key(&row.key)?, row.value.to_vec())
            }
            Some(operation::Op::Delete(k)) => Op::Delete(key(&k)?),
            Some(operation::Op::Patch(p)) => {
                Op::Patch { key: key(&p.key)?, offset: p.offset as usize, bytes: p.bytes.to_vec() }
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
                if !st.names.contains(&table) {
                    return Err(engine(&milliscale::Error::TableNotFound(table)));
                }
                let (lo, hi) = cluster_range(
                    &table,
                    r.start.as_deref(),
                    r.end.as_deref(),
                    r.prefix.as_deref(),
                );
                self.own_range(&lo, &hi)?;
                Op::Scan { lo, hi, reverse: r.reverse, limit: r.limit }
            }
        })
    }

    /// Run the batch once under the lock: its reads at `at`, then, if it
    /// wrote and no read is pending, the lone prepare and its commit.
    fn run(
        &self,
        st: &mut State,
        ops: &[Op],
        txn: milliscale_milana::types::TxnId,
        at: u64,
        version: CommitTs,
    ) -> Result<Run, Status> {
        let mut t = ClientTxn::new(txn, at);
        let mut results = Vec::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            let result = match op {
                Op::Get(k) => {
                    let value = current(st, &mut t, k);
                    operation_result::Result::Get(proto::GetResponse {
                        value: value.map(Into::into),
                    })
                }
                Op::Put(k, v) => {
                    t.writes.insert(k.clone(), Some(v.clone()));
                    operation_result::Result::Put(proto::PutResponse {})
                }
                Op::Delete(k) => {
                    let existed = current(st, &mut t, k).is_some();
                    t.writes.insert(k.clone(), None);
                    operation_result::Result::Delete(proto::DeleteResponse { existed })
                }
                Op::Patch { key, offset, bytes } => {
                    let Some(old) = current(st, &mut t, key) else {
                        return Err(numbered(i, engine(&milliscale::Error::NotFound)));
                    };
                    let new = patch(&old, *offset, bytes)
                        .map_err(|e| numbered(i, engine(&milliscale::Error::InvalidArgument(e))))?;
                    t.writes.insert(key.clone(), Some(new));
                    operation_result::Result::Patch(proto::PatchResponse {})
                }
                Op::Scan { lo, hi, reverse, limit } => {
                    let ask = t.scan_ask(lo, hi, *reverse, *limit);
                    let reply = st.p.scan(lo, hi, at, usize::try_from(ask).unwrap_or(usize::MAX));
                    t.ranges.entry(self.opts.shard).or_default().push((lo.clone(), hi.clone()));
                    t.scanned_prepared |= reply.prepared_below;
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
                    operation_result::Result::Scan(proto::ScanResponse { rows })
                }
            };
            results.push(OperationResult { result: Some(result) });
        }
        if !t.locally_valid() {
            return Ok(Run::Pending);
        }
        if t.read_only() {
            // Every read at `at` on this shard, none with a prepared write
            // below it: the batch is a consistent snapshot at `at`, and
            // its read marks keep later writes above it (MILANA §4.3).
            return Ok(Run::Done(results, None));
        }
        let shard = self.opts.shard;
        let mut prepares = t.prepares(version, |_| shard);
        let p = prepares.remove(&shard).expect("a batch that writes has a prepare");
        let floor = st.p.clock_floor(&p);
        let (vote, rec) = st.p.prepare(p);
        if let Vote::No(why) = vote {
            // The no vote's record, if any, as ShardPrepare writes it.
            let wait = match rec {
                Some(r) => Some(Wait::Ack(self.write(st, &[r])?, None)),
                None => None,
            };
            return Ok(Run::No(why.into(), floor, wait));
        }
        let wait = match rec {
            // The same transaction asked again: answer once what is
            // written so far (its first commit) is durable.
            None => Wait::Barrier(st.last_csn),
            Some(r @ Record::Prepare(_)) => {
                let commit = st.p.decide(txn, true, version.ts).expect("a prepare just made");
                Wait::Ack(self.write(st, &[r, commit])?, Some(txn))
            }
            Some(r) => Wait::Ack(self.write(st, &[r])?, None),
        };
        Ok(Run::Done(results, Some(wait)))
    }
}

/// The value of `k` as the batch sees it: its own write, or MILANA's read
/// at the batch's timestamp (kept as a read, validated at the prepare).
fn current(st: &mut State, t: &mut ClientTxn, k: &Key) -> Option<Value> {
    if let Some(w) = t.writes.get(k) {
        return w.clone();
    }
    if let Some(r) = t.reads.get(k) {
        return r.value.clone();
    }
    let r = st.p.read(k, t.begin);
    let value = r.value.clone();
    t.reads.insert(k.clone(), r);
    value
}

/// `s` with the number of the operation it is about.
fn numbered(i: usize, s: Status) -> Status {
    Status::with_metadata(s.code(), format!("operation {i}: {}", s.message()), s.metadata().clone())
}
