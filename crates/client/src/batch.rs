//! One-shot transactions: a batch of operations run in order in one
//! transaction and committed, in one round trip ([`Client::execute`]).

use bytes::Bytes;

#[cfg(doc)]
use crate::Client;
use crate::error::{Error, Result};
use crate::proto::{self, operation, operation_result};
use crate::txn::{Durability, KeyRange, ReadAt, TxnOptions, wait_ms};

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
