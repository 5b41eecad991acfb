//! One-shot batches on a cluster ([`Cluster::execute`]).
//!
//! A batch whose keys and scanned ranges all lie on one shard goes to it
//! as one `ShardExecute`: the shard runs it whole, with MILANA's rules, and
//! answers once it is durable (the single-shard fast path in one round
//! trip, as `milliscale serve` runs a batch). Any other batch runs here as
//! a [`ClusterTransaction`]: its reads to their shards, its commit the
//! two-phase commit across them.

use std::time::Duration;

use milliscale_milana::shard_map::ShardMap;
use milliscale_milana::types::{CommitTs, ShardId};

use super::transaction::bounds;
use super::{Cluster, lock, physical_now, ts_to};
use crate::proto::{operation, operation_result};
use crate::{Batch, BatchResult, Error, Isolation, KeyRange, Result, proto};

/// How many times a batch is sent again to a shard that did not answer
/// (the shard answers a repeated batch as the first time).
const SENDS: u32 = 3;

impl Cluster {
    /// Run a batch's operations in order as one SERIALIZABLE transaction.
    /// A batch on one shard is one round trip (see the module's comment);
    /// a batch across shards runs as a [`super::ClusterTransaction`]. A
    /// retryable error runs it again, up to the batch's retries (each run
    /// a new transaction); a map that moved is reloaded first.
    ///
    /// The result's token is the commit timestamp (`None` if the batch
    /// wrote nothing), and the batch is durable when this returns
    /// (`Durability::Precommit` is accepted and answered durable). Refused:
    /// an isolation other than SERIALIZABLE, `at_token`, writes in a
    /// read-only batch, a scan without a limit of 1 to 10,000 rows.
    pub async fn execute(&self, batch: Batch) -> Result<BatchResult> {
        check(&batch)?;
        let runs = batch.retries.saturating_add(1);
        let (mut attempts, mut moved) = (0u32, 0u32);
        let mut cap = Duration::from_millis(1);
        loop {
            attempts += 1;
            let map = self.map();
            let r = match one_shard(&batch, &map) {
                Some(s) => self.execute_on(s, &batch).await,
                None => self.execute_spread(&batch).await,
            };
            match r {
                Ok(mut r) => {
                    r.attempts = attempts;
                    return Ok(r);
                }
                // A range moving: wait for the map version its move
                // publishes, not counted as a run.
                Err(e) if self.await_map(&e).await => attempts -= 1,
                // A map that moved: reload it, up to 3 times, not counted
                // as a run.
                Err(e) if e.kind() == "wrong_shard" && moved < 3 => {
                    moved += 1;
                    attempts -= 1;
                    self.reload_after(&e).await?;
                }
                // A range frozen for a move, or the map still moving:
                // read it again after the backoff, counted as a run.
                Err(e) if e.is_retryable() && attempts < runs => {
                    if matches!(e.kind(), "unavailable" | "wrong_shard") {
                        let _ = self.refresh().await;
                    }
                    tokio::time::sleep(cap.mul_f64(rand::random::<f64>())).await;
                    cap = (cap * 2).min(Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Send the batch to shard `s`, to run there whole.
    async fn execute_on(&self, s: ShardId, batch: &Batch) -> Result<BatchResult> {
        let tx = self.begin();
        let at = tx.begin_ts();
        let (client, seq) = tx.id();
        let version = CommitTs { ts: lock(&self.inner.clock).now(physical_now()), client };
        let writes = writes(batch);
        let low_water = self.low_water();
        // The same request each send (the same transaction: a shard that
        // ran it answers as the first time), built from the batch each
        // time rather than copied.
        let req = || proto::ShardExecuteRequest {
            txn: Some(proto::ClusterTxnId { client, seq }),
            at,
            version: Some(ts_to(version)),
            operations: packed(&batch.ops),
            table: batch.table.clone(),
            client,
            low_water,
        };
        let mut failed = None;
        for send in 0..SENDS {
            if send > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let c = self.shard(s)?;
            let call = c.shard_execute(req());
            let answer = match tokio::time::timeout(self.inner.builder.rpc_timeout, call).await {
                Ok(Ok(a)) => a,
                // Refused before it ran (not its key, an unknown table,
                // bad input, below the collected versions): nothing of it
                // committed.
                Ok(Err(st)) if refused(&st) => return Err(self.read_error(s, st)),
                Ok(Err(st)) => {
                    lock(&self.inner.conns).remove(&s);
                    failed = Some(self.read_error(s, st));
                    continue;
                }
                Err(_) => {
                    lock(&self.inner.conns).remove(&s);
                    failed = Some(Error::unavailable(format!(
                        "shard {s}: no answer within the timeout"
                    )));
                    continue;
                }
            };
            if !answer.yes {
                if answer.floor > 0 {
                    lock(&self.inner.clock).observe(answer.floor);
                }
                return Err(Error::conflict(format!("shard {s}: {}", answer.why)));
            }
            if writes {
                lock(&self.inner.clock).observe(version.ts);
            }
            let results = answer
                .results
                .into_iter()
                .map(|o| {
                    o.result.ok_or_else(|| Error::local("an operation without a result".into()))
                })
                .collect::<Result<Vec<_>>>()?;
            if results.len() != batch.ops.len() {
                return Err(Error::local(format!(
                    "shard {s} answered a batch of {} operations with {} results",
                    batch.ops.len(),
                    results.len()
                )));
            }
            let token = writes.then_some(version.ts);
            return Ok(BatchResult { results, token, durable: true, attempts: 1 });
        }
        let why = failed.unwrap_or_else(|| Error::unavailable(format!("shard {s}: no answer")));
        if writes {
            // It may have committed: only the shard knows.
            return Err(Error::unknown(format!(
                "shard {s} did not answer a batch that writes ({}); it may have committed",
                why.message()
            )));
        }
        Err(why)
    }

    /// Run the batch as a transaction coordinated here.
    async fn execute_spread(&self, batch: &Batch) -> Result<BatchResult> {
        let mut tx = self.begin();
        let mut results = Vec::with_capacity(batch.ops.len());
        for (i, op) in batch.ops.iter().enumerate() {
            let table = if op.table.is_empty() { &batch.table } else { &op.table };
            let at = |e: Error| e.context(&format!("operation {i}"));
            let result = match &op.op {
                None => return Err(Error::invalid(format!("operation {i} names no operation"))),
                Some(operation::Op::Get(k)) => {
                    let value = tx.get(table, k).await.map_err(at)?;
                    operation_result::Result::Get(proto::GetResponse {
                        value: value.map(Into::into),
                    })
                }
                Some(operation::Op::Put(row)) => {
                    tx.put(table, &row.key, &row.value).map_err(at)?;
                    operation_result::Result::Put(proto::PutResponse {})
                }
                Some(operation::Op::Delete(k)) => {
                    let existed = tx.delete(table, k).await.map_err(at)?;
                    operation_result::Result::Delete(proto::DeleteResponse { existed })
                }
                Some(operation::Op::Patch(p)) => {
                    tx.patch(table, &p.key, p.offset, &p.bytes).await.map_err(at)?;
                    operation_result::Result::Patch(proto::PatchResponse {})
                }
                Some(operation::Op::Scan(r)) => {
                    let rows = tx.scan(table, range_of(r)).await.map_err(at)?;
                    operation_result::Result::Scan(proto::ScanResponse {
                        rows: rows
                            .into_iter()
                            .map(|(k, v)| proto::Row { key: k.into(), value: v.into() })
                            .collect(),
                        more: false,
                    })
                }
            };
            results.push(result);
        }
        let token = tx.commit().await?;
        Ok(BatchResult { results, token, durable: true, attempts: 1 })
    }
}

/// Refuse what a cluster's batch does not offer.
fn check(batch: &Batch) -> Result<()> {
    let o = &batch.opts;
    if !matches!(o.isolation, Isolation::Default | Isolation::Serializable) {
        return Err(Error::invalid(format!(
            "a cluster's transactions are SERIALIZABLE; {:?} is not offered",
            o.isolation
        )));
    }
    if o.at_token.is_some() {
        return Err(Error::invalid(
            "at_token is not offered on a cluster: a commit's token is its timestamp, and a \
             later transaction of this client reads above it"
                .into(),
        ));
    }
    if o.read_only && writes(batch) {
        return Err(Error::invalid("a read-only batch writes".into()));
    }
    crate::limits::operations(&batch.ops)?;
    for (i, op) in batch.ops.iter().enumerate() {
        if let Some(operation::Op::Scan(r)) = &op.op
            && (r.limit == 0 || r.limit > 10_000)
        {
            return Err(Error::invalid(format!(
                "operation {i}: a scan in a batch needs a limit of 1 to 10,000 rows"
            )));
        }
    }
    Ok(())
}

/// Whether the batch writes.
fn writes(batch: &Batch) -> bool {
    batch.ops.iter().any(proto::Operation::writes)
}

/// The shard holding every key and scanned range of the batch under
/// `map`, if one does.
fn one_shard(batch: &Batch, map: &ShardMap) -> Option<ShardId> {
    let mut on = None;
    let mut same = |s: ShardId| match on {
        None => {
            on = Some(s);
            true
        }
        Some(o) => o == s,
    };
    for op in &batch.ops {
        let table = if op.table.is_empty() { &batch.table } else { &op.table };
        let key =
            match &op.op {
                None => return None,
                Some(operation::Op::Get(k) | operation::Op::Delete(k)) => k,
                Some(operation::Op::Put(row)) => &row.key,
                Some(operation::Op::Patch(p)) => &p.key,
                Some(operation::Op::Scan(r)) => {
                    let (lo, hi) = bounds(table, &range_of(r));
                    let s = map.shard_of(&lo);
                    // Another range starting inside [lo, hi) on another shard.
                    if map.ranges.iter().any(|(first, o)| {
                        first.as_slice() > lo.as_slice() && *first < hi && *o != s
                    }) || !same(s)
                    {
                        return None;
                    }
                    continue;
                }
            };
        if !same(map.shard_of_row(table, key)) {
            return None;
        }
    }
    on
}

/// A copy of `ops` whose keys and values are slices of one buffer. (Their
/// clones would share each key and value with the batch: a count
/// allocated for each of them, and each freed twice over.)
fn packed(ops: &[proto::Operation]) -> Vec<proto::Operation> {
    use operation::Op;
    let bytes = |op: &Option<Op>| match op {
        Some(Op::Get(k) | Op::Delete(k)) => k.len(),
        Some(Op::Put(r)) => r.key.len() + r.value.len(),
        Some(Op::Patch(p)) => p.key.len() + p.bytes.len(),
        Some(Op::Scan(_)) | None => 0,
    };
    let mut buf = bytes::BytesMut::with_capacity(ops.iter().map(|o| bytes(&o.op)).sum());
    let mut spans = Vec::with_capacity(ops.len() * 2);
    let mut put = |b: &[u8]| {
        let start = buf.len();
        buf.extend_from_slice(b);
        spans.push(start..buf.len());
    };
    for o in ops {
        match &o.op {
            Some(Op::Get(k) | Op::Delete(k)) => put(k),
            Some(Op::Put(r)) => {
                put(&r.key);
                put(&r.value);
            }
            Some(Op::Patch(p)) => {
                put(&p.key);
                put(&p.bytes);
            }
            Some(Op::Scan(_)) | None => {}
        }
    }
    let buf = buf.freeze();
    let mut spans = spans.into_iter().map(|s| buf.slice(s));
    let mut next = || spans.next().expect("a span for each key and value");
    let copy = |o: &proto::Operation| {
        let op = match &o.op {
            Some(Op::Get(_)) => Some(Op::Get(next())),
            Some(Op::Delete(_)) => Some(Op::Delete(next())),
            Some(Op::Put(_)) => Some(Op::Put(proto::Row { key: next(), value: next() })),
            Some(Op::Patch(p)) => Some(Op::Patch(proto::PatchRequest {
                txn_id: p.txn_id,
                table: p.table.clone(),
                key: next(),
                offset: p.offset,
                bytes: next(),
            })),
            Some(Op::Scan(r)) => Some(Op::Scan(r.clone())),
            None => None,
        };
        proto::Operation { table: o.table.clone(), op }
    };
    ops.iter().map(copy).collect()
}

fn range_of(r: &proto::KeyRange) -> KeyRange {
    KeyRange {
        start: r.start.as_ref().map(|b| b.to_vec()),
        end: r.end.as_ref().map(|b| b.to_vec()),
        prefix: r.prefix.as_ref().map(|b| b.to_vec()),
        reverse: r.reverse,
        limit: r.limit,
    }
}

/// A shard's refusal of a call before it ran anything: nothing of the
/// batch committed. (Any other failure may have come after its commit.)
fn refused(st: &tonic::Status) -> bool {
    use tonic::Code::*;
    matches!(
        st.code(),
        FailedPrecondition
            | NotFound
            | InvalidArgument
            | PermissionDenied
            | Unauthenticated
            | OutOfRange
            | AlreadyExists
            | Aborted
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use milliscale_milana::types::cluster_key;

    #[test]
    fn a_packed_copy_is_equal() {
        let mut b = Batch::new();
        b.get("t", b"a").put("t", b"b", b"vb").delete("u", b"").patch("t", b"c", 3, b"xyz");
        b.scan("t", KeyRange { start: Some(b"a".to_vec()), limit: 5, ..Default::default() });
        b.put("t", b"", b"");
        assert_eq!(packed(&b.ops), b.ops);
        assert!(packed(&[]).is_empty());
    }

    /// Table `t`'s keys from "m" on belong to shard 1, the rest to shard 0.
    fn map() -> ShardMap {
        ShardMap {
            version: 1,
            ranges: vec![(Vec::new(), 0), (cluster_key("t", b"m"), 1)],
            shards: Default::default(),
            rebalance: None,
            split_load: None,
        }
    }

    #[test]
    fn a_batch_goes_to_a_shard_only_if_all_of_it_is_there() {
        let on = |b: &Batch| one_shard(b, &map());
        let range = |r: KeyRange| {
            let mut b = Batch::new();
            b.scan("t", r.limit(5));
            b
        };
        let mut b = Batch::new();
        b.get("t", b"a").put("t", b"l", b"v").delete("t", b"b");
        assert_eq!(on(&b), Some(0));
        let mut b = Batch::new();
        b.patch("t", b"m", 0, b"v").get("t", b"z");
        assert_eq!(on(&b), Some(1));
        let mut b = Batch::new();
        b.get("t", b"a").put("t", b"m", b"v");
        assert_eq!(on(&b), None);
        assert_eq!(on(&range(KeyRange::between(b"a", b"m"))), Some(0));
        assert_eq!(on(&range(KeyRange::between(b"a", b"n"))), None);
        assert_eq!(on(&range(KeyRange::prefix(b"q"))), Some(1));
        assert_eq!(on(&range(KeyRange::all())), None);
        // Another table's keys sort after t's: all of them on shard 1.
        let mut b = Batch::new();
        b.get("u", b"a").get("t", b"x");
        assert_eq!(on(&b), Some(1));
        assert_eq!(on(&Batch::new()), None, "an empty batch runs at the client");
    }
}
