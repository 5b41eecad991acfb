//! Interactive transactions and one-shot batches.

use std::time::Duration;

use bytes::Bytes;

use crate::Client;
use crate::error::{Error, Result};
use crate::proto::{self, operation, operation_result};

/// The isolation level of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// The server's default (snapshot isolation unless configured).
    #[default]
    Default,
    /// Each read sees the latest committed version.
    ReadCommitted,
    /// Reads see the snapshot taken at begin; first updater wins.
    Snapshot,
    /// Snapshot isolation plus read validation at commit.
    Serializable,
}

impl Isolation {
    fn wire(self) -> i32 {
        (match self {
            Isolation::Default => proto::Isolation::Unspecified,
            Isolation::ReadCommitted => proto::Isolation::ReadCommitted,
            Isolation::Snapshot => proto::Isolation::Snapshot,
            Isolation::Serializable => proto::Isolation::Serializable,
        }) as i32
    }

    fn of_wire(i: i32) -> Isolation {
        match proto::Isolation::try_from(i) {
            Ok(proto::Isolation::ReadCommitted) => Isolation::ReadCommitted,
            Ok(proto::Isolation::Snapshot) => Isolation::Snapshot,
            Ok(proto::Isolation::Serializable) => Isolation::Serializable,
            _ => Isolation::Default,
        }
    }
}

/// What a read-only transaction sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadAt {
    /// The latest committed state (a replica: what it has applied).
    #[default]
    Latest,
    /// Only durable commits (writer only): its reads never wait.
    Durable,
}

/// When a commit answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Once durable on the log's stores.
    #[default]
    Wait,
    /// Once visible to other transactions; wait for the token later with
    /// [`Client::wait_for`].
    Precommit,
}

impl Durability {
    fn wire(self) -> i32 {
        (match self {
            Durability::Wait => proto::Durability::Wait,
            Durability::Precommit => proto::Durability::Precommit,
        }) as i32
    }
}

/// How to begin a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TxnOptions {
    /// The isolation level.
    pub isolation: Isolation,
    /// Refuse writes (required on a replica and with a read-only token).
    pub read_only: bool,
    /// What a read-only transaction sees.
    pub read_at: ReadAt,
    /// Read-your-writes: see the commit with this token and all before it
    /// (a replica waits for it, up to `wait`).
    pub at_token: Option<u64>,
    /// How long a replica may wait for `at_token` (zero: the server's
    /// default).
    pub wait: Duration,
}

impl TxnOptions {
    /// A read-only transaction.
    pub fn read_only() -> TxnOptions {
        TxnOptions { read_only: true, ..TxnOptions::default() }
    }

    /// A read-only transaction that sees the commit `token` (and all
    /// before it).
    pub fn at_token(token: u64) -> TxnOptions {
        TxnOptions { read_only: true, at_token: Some(token), ..TxnOptions::default() }
    }

    /// A transaction at `isolation`.
    pub fn isolation(isolation: Isolation) -> TxnOptions {
        TxnOptions { isolation, ..TxnOptions::default() }
    }
}

fn wait_ms(d: Duration) -> u32 {
    d.as_millis().min(u32::MAX as u128) as u32
}

/// A committed transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commit {
    /// The commit's CSN: a token for [`Client::wait_for`] and for
    /// read-your-writes on a replica. `None` if it wrote nothing.
    pub token: Option<u64>,
    /// True if the commit was durable when the server answered.
    pub durable: bool,
}

/// An interactive transaction on the server. Every call is one round
/// trip. Dropping it unfinished aborts it in the background.
#[derive(Debug)]
pub struct Transaction {
    client: Client,
    id: u64,
    snapshot: u64,
    isolation: Isolation,
    finished: bool,
}

impl Transaction {
    pub(crate) async fn begin(client: Client, o: TxnOptions) -> Result<Transaction> {
        let read_at = match o.read_at {
            ReadAt::Latest => proto::ReadAt::Latest,
            ReadAt::Durable => proto::ReadAt::Durable,
        } as i32;
        let r = proto::BeginRequest {
            isolation: o.isolation.wire(),
            read_only: o.read_only,
            read_at,
            at_token: o.at_token,
            wait_ms: wait_ms(o.wait),
        };
        let b = client.txn_begin(r).await?;
        Ok(Transaction {
            client,
            id: b.txn_id,
            snapshot: b.snapshot,
            isolation: Isolation::of_wire(b.isolation),
            finished: false,
        })
    }

    /// The transaction's id on the server.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Its snapshot: commits with a smaller CSN are visible.
    pub fn snapshot(&self) -> u64 {
        self.snapshot
    }

    /// Its isolation level, as the server chose it.
    pub fn isolation(&self) -> Isolation {
        self.isolation
    }

    /// Read `key`; `None` if it has no visible value.
    pub async fn get(&mut self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        crate::limits::key(key)?;
        let request = proto::GetRequest {
            txn_id: self.id,
            table: table.into(),
            key: Bytes::copy_from_slice(key),
        };
        self.client.fits(&request)?;
        Ok(self.client.txn_get(request).await?.value.map(Vec::from))
    }

    /// Write `value` under `key`.
    pub async fn put(&mut self, table: &str, key: &[u8], value: &[u8]) -> Result<()> {
        crate::limits::write(key, value.len())?;
        let request = proto::PutRequest {
            txn_id: self.id,
            table: table.into(),
            key: Bytes::copy_from_slice(key),
            value: Bytes::copy_from_slice(value),
        };
        self.client.fits(&request)?;
        self.client.txn_put(request).await?;
        Ok(())
    }

    /// Delete `key`; whether it had a value.
    pub async fn delete(&mut self, table: &str, key: &[u8]) -> Result<bool> {
        crate::limits::key(key)?;
        let request = proto::DeleteRequest {
            txn_id: self.id,
            table: table.into(),
            key: Bytes::copy_from_slice(key),
        };
        self.client.fits(&request)?;
        Ok(self.client.txn_delete(request).await?.existed)
    }

    /// Overwrite `bytes.len()` bytes of `key`'s value at `offset` (logged
    /// as a delta).
    pub async fn patch(
        &mut self,
        table: &str,
        key: &[u8],
        offset: u32,
        bytes: &[u8],
    ) -> Result<()> {
        crate::limits::patch(key, offset, bytes)?;
        let request = proto::PatchRequest {
            txn_id: self.id,
            table: table.into(),
            key: Bytes::copy_from_slice(key),
            offset,
            bytes: Bytes::copy_from_slice(bytes),
        };
        self.client.fits(&request)?;
        self.client.txn_patch(request).await?;
        Ok(())
    }

    /// The rows in `range`, streamed from the server in batches and
    /// collected.
    pub async fn scan(&mut self, table: &str, range: KeyRange) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut rows = Vec::new();
        let mut stream = self.scan_stream(table, range).await?;
        while let Some(batch) = stream.message().await? {
            rows.extend(batch.rows.into_iter().map(|r| (Vec::from(r.key), Vec::from(r.value))));
        }
        Ok(rows)
    }

    /// The rows in `range` as the server streams them: call `.message()`
    /// until it yields `None`.
    pub async fn scan_stream(
        &mut self,
        table: &str,
        range: KeyRange,
    ) -> Result<tonic::Streaming<proto::ScanResponse>> {
        let r = self.client.req(proto::ScanRequest {
            txn_id: self.id,
            table: table.into(),
            range: Some(range.wire()),
        });
        Ok(self.client.stub().scan(r).await?.into_inner())
    }

    /// Commit, and answer once durable.
    pub async fn commit(self) -> Result<Commit> {
        self.commit_with(Durability::Wait).await
    }

    /// Commit, answering as `durability` says.
    pub async fn commit_with(mut self, durability: Durability) -> Result<Commit> {
        self.finished = true;
        let r = proto::CommitRequest { txn_id: self.id, durability: durability.wire() };
        let c = self.client.txn_commit(r).await?;
        Ok(Commit { token: c.token, durable: c.durable })
    }

    /// Abort: undo every write.
    pub async fn abort(mut self) -> Result<()> {
        self.finished = true;
        self.client.txn_abort(proto::AbortRequest { txn_id: self.id }).await?;
        Ok(())
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        // Abort it on the server now, rather than at its idle timeout.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            let r = proto::AbortRequest { txn_id: self.id };
            rt.spawn(async move {
                let _ = client.txn_abort(r).await;
            });
        }
    }
}

/// A range of keys: `start <= key < end` (either bound may be open), or
/// the keys that start with a prefix; at most `limit` rows (0: all), in
/// key order or reversed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyRange {
    /// The first key, inclusive.
    pub start: Option<Vec<u8>>,
    /// The end, exclusive.
    pub end: Option<Vec<u8>>,
    /// Keys starting with this (instead of start and end).
    pub prefix: Option<Vec<u8>>,
    /// In reverse key order.
    pub reverse: bool,
    /// At most this many rows (0: all).
    pub limit: u64,
}

impl KeyRange {
    /// Every key.
    pub fn all() -> KeyRange {
        KeyRange::default()
    }

    /// The keys that start with `prefix`.
    pub fn prefix(prefix: &[u8]) -> KeyRange {
        KeyRange { prefix: Some(prefix.to_vec()), ..KeyRange::default() }
    }

    /// `start <= key < end`.
    pub fn between(start: &[u8], end: &[u8]) -> KeyRange {
        KeyRange { start: Some(start.to_vec()), end: Some(end.to_vec()), ..KeyRange::default() }
    }

    /// At most `n` rows.
    pub fn limit(mut self, n: u64) -> KeyRange {
        self.limit = n;
        self
    }

    /// In reverse key order.
    pub fn reversed(mut self) -> KeyRange {
        self.reverse = true;
        self
    }

    fn wire(self) -> proto::KeyRange {
        proto::KeyRange {
            start: self.start.map(Bytes::from),
            end: self.end.map(Bytes::from),
            prefix: self.prefix.map(Bytes::from),
            reverse: self.reverse,
            limit: self.limit,
        }
    }
}

/// A one-shot transaction: operations run in order, then commit, in one
/// round trip ([`Client::execute`]).
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pub(crate) ops: Vec<proto::Operation>,
    /// The first operation's table: sent once, in the request, and left
    /// out of every operation on it.
    pub(crate) table: String,
    pub(crate) opts: TxnOptions,
    durability: Durability,
    pub(crate) retries: u32,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }

    fn op(&mut self, table: &str, op: operation::Op) -> &mut Batch {
        if self.ops.is_empty() {
            self.table = table.into();
        }
        let table = if table == self.table { String::new() } else { table.into() };
        self.ops.push(proto::Operation { table, op: Some(op) });
        self
    }

    /// Read `key`.
    pub fn get(&mut self, table: &str, key: &[u8]) -> &mut Batch {
        self.op(table, operation::Op::Get(Bytes::copy_from_slice(key)))
    }

    /// Write `value` under `key`.
    pub fn put(&mut self, table: &str, key: &[u8], value: &[u8]) -> &mut Batch {
        self.op(
            table,
            operation::Op::Put(proto::Row {
                key: Bytes::copy_from_slice(key),
                value: Bytes::copy_from_slice(value),
            }),
        )
    }

    /// Delete `key`.
    pub fn delete(&mut self, table: &str, key: &[u8]) -> &mut Batch {
        self.op(table, operation::Op::Delete(Bytes::copy_from_slice(key)))
    }

    /// Patch `key`'s value at `offset`.
    pub fn patch(&mut self, table: &str, key: &[u8], offset: u32, bytes: &[u8]) -> &mut Batch {
        let p = proto::PatchRequest {
            key: Bytes::copy_from_slice(key),
            offset,
            bytes: Bytes::copy_from_slice(bytes),
            ..Default::default()
        };
        self.op(table, operation::Op::Patch(p))
    }

    /// Read the rows of `range` (it needs a limit, at most 10,000).
    pub fn scan(&mut self, table: &str, range: KeyRange) -> &mut Batch {
        self.op(table, operation::Op::Scan(range.wire()))
    }

    /// Begin the batch's transaction with these options.
    pub fn options(mut self, opts: TxnOptions) -> Batch {
        self.opts = opts;
        self
    }

    /// Answer once pre-committed rather than durable.
    pub fn durability(mut self, d: Durability) -> Batch {
        self.durability = d;
        self
    }

    /// Let the server run the batch again up to `n` more times on a
    /// conflict.
    pub fn retries(mut self, n: u32) -> Batch {
        self.retries = n;
        self
    }

    pub(crate) fn into_request(self) -> proto::ExecuteRequest {
        proto::ExecuteRequest {
            operations: self.ops,
            isolation: self.opts.isolation.wire(),
            durability: self.durability.wire(),
            read_at: match self.opts.read_at {
                ReadAt::Latest => proto::ReadAt::Latest,
                ReadAt::Durable => proto::ReadAt::Durable,
            } as i32,
            at_token: self.opts.at_token,
            wait_ms: wait_ms(self.opts.wait),
            max_retries: self.retries,
            table: self.table,
        }
    }
}

/// What a batch returned.
#[derive(Debug, Clone)]
pub struct BatchResult {
    pub(crate) results: Vec<operation_result::Result>,
    /// The commit's token (`None` if the batch wrote nothing).
    pub token: Option<u64>,
    /// True if it was durable when the server answered.
    pub durable: bool,
    /// How many times the server ran it.
    pub attempts: u32,
}

impl BatchResult {
    pub(crate) fn from_response(r: proto::ExecuteResponse) -> Result<BatchResult> {
        let results = r
            .results
            .into_iter()
            .map(|o| o.result.ok_or_else(|| Error::local("an operation without a result".into())))
            .collect::<Result<_>>()?;
        Ok(BatchResult { results, token: r.token, durable: r.durable, attempts: r.attempts })
    }

    /// The value operation `i` read (`None` if absent, or not a read).
    pub fn value(&self, i: usize) -> Option<&[u8]> {
        match self.results.get(i) {
            Some(operation_result::Result::Get(g)) => g.value.as_deref(),
            _ => None,
        }
    }

    /// Whether delete `i` found a value.
    pub fn existed(&self, i: usize) -> bool {
        matches!(self.results.get(i), Some(operation_result::Result::Delete(d)) if d.existed)
    }

    /// The rows scan `i` read.
    pub fn rows(&self, i: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        match self.results.get(i) {
            Some(operation_result::Result::Scan(s)) => {
                s.rows.iter().map(|r| (r.key.to_vec(), r.value.to_vec())).collect()
            }
            _ => Vec::new(),
        }
    }

    /// How many operations it ran.
    pub fn len(&self) -> usize {
        self.results.len()
    }

    /// True for an empty batch.
    pub fn is_empty(&self) -> bool {
        self.results.is_empty()
    }
}
