//! The operations a request runs inside one transaction, kept apart from
//! the RPC plumbing: key ranges, scans in bounded batches, and one-shot
//! batches.

use std::ops::Bound;

use milliscale::{AsyncTransaction, Direction, Table};
use milliscale_proto::v1 as proto;
use proto::{KeyRange, Operation, OperationResult, Row, operation, operation_result};
use tonic::Status;

use crate::errors::{engine, refuse};

/// Most bytes of keys and values in one scan message: a batch stops at
/// the first row that reaches this, so a message stays near it even with
/// the largest values (`VALUE_BYTES_MAX`, 256 KiB).
pub const SCAN_BATCH_BYTES: usize = 1 << 20;
/// Most rows in one scan message.
pub const SCAN_BATCH_ROWS: usize = 1024;
/// Most rows one `Execute` scan returns: its rows travel in one message.
pub const EXECUTE_SCAN_ROWS_MAX: u64 = 10_000;

/// The tables a batch has used, by name, each opened once: the
/// operations borrow them (a clone per operation was an atomic
/// increment and decrement on a count shared by every thread, a tenth of
/// a batch's time outside the engine).
#[derive(Default)]
pub struct Tables(Vec<(String, Table)>);

impl Tables {
    /// The table called `name`, opened with `open` the first time.
    pub fn get(
        &mut self,
        name: &str,
        open: impl Fn(&str) -> Result<Table, Status>,
    ) -> Result<&Table, Status> {
        let at = match self.0.iter().position(|(n, _)| n == name) {
            Some(at) => at,
            None => {
                self.0.push((name.to_owned(), open(name)?));
                self.0.len() - 1
            }
        };
        Ok(&self.0[at].1)
    }
}

/// A key range ready to scan: bounds, direction and how many rows remain.
#[derive(Debug, Clone)]
pub struct Scan {
    pub lower: Bound<Vec<u8>>,
    pub upper: Bound<Vec<u8>>,
    pub direction: Direction,
    /// `None`: no limit.
    pub remaining: Option<u64>,
}

impl Scan {
    pub fn of(range: Option<KeyRange>) -> Result<Scan, Status> {
        let r = range.unwrap_or_default();
        let (lower, upper) = match r.prefix {
            Some(p) => {
                if r.start.is_some() || r.end.is_some() {
                    return Err(refuse::invalid("a key range has a prefix or start/end, not both"));
                }
                let upper = KeyRange::prefix_end(&p).map_or(Bound::Unbounded, Bound::Excluded);
                (Bound::Included(p.to_vec()), upper)
            }
            None => (
                r.start.map_or(Bound::Unbounded, |k| Bound::Included(k.to_vec())),
                r.end.map_or(Bound::Unbounded, |k| Bound::Excluded(k.to_vec())),
            ),
        };
        let direction = if r.reverse { Direction::Backward } else { Direction::Forward };
        let remaining = (r.limit > 0).then_some(r.limit);
        Ok(Scan { lower, upper, direction, remaining })
    }

    pub fn is_done(&self) -> bool {
        self.remaining == Some(0)
    }

    /// The next batch of rows (at most `max_rows`, and stopping at
    /// `max_bytes`); moves the range past them. An empty batch is the end.
    pub fn next_batch(
        &mut self,
        tx: &mut AsyncTransaction,
        table: &Table,
        max_rows: usize,
        max_bytes: usize,
    ) -> Result<Vec<Row>, Status> {
        let mut rows = Vec::new();
        let mut bytes = 0;
        let cap = self.remaining.map_or(max_rows, |r| r.min(max_rows as u64) as usize);
        if cap == 0 {
            return Ok(rows);
        }
        let iter = tx.range(table, as_ref(&self.lower), as_ref(&self.upper), self.direction);
        for row in iter {
            let (key, value) = row.map_err(|e| engine(&e))?;
            bytes += key.len() + value.len();
            rows.push(Row { key: key.into(), value: value.into() });
            if rows.len() >= cap || bytes >= max_bytes {
                break;
            }
        }
        if let Some(last) = rows.last() {
            let past = Bound::Excluded(last.key.to_vec());
            match self.direction {
                Direction::Forward => self.lower = past,
                Direction::Backward => self.upper = past,
            }
        }
        if let Some(r) = &mut self.remaining {
            *r -= rows.len() as u64;
        }
        if rows.len() < cap && bytes < max_bytes {
            // The range is exhausted.
            self.remaining = Some(0);
        }
        Ok(rows)
    }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Whether an operation writes.
pub fn writes(op: &Operation) -> bool {
    matches!(
        op.op,
        Some(operation::Op::Put(_) | operation::Op::Delete(_) | operation::Op::Patch(_))
    )
}

/// The bytes a write adds to its transaction (its key, and its value or
/// patch), for the server's limit on a transaction's writes.
pub fn written_bytes(op: &Operation) -> u64 {
    let n = match &op.op {
        Some(operation::Op::Put(r)) => r.key.len() + r.value.len(),
        Some(operation::Op::Delete(key)) => key.len(),
        Some(operation::Op::Patch(p)) => p.key.len() + p.bytes.len(),
        _ => 0,
    };
    n as u64
}

/// Run the operations of a batch, in order, in `tx`; an operation that
/// names no table is on `batch_table`; `table` resolves a name (the
/// caller caches).
pub fn run_batch(
    tx: &mut AsyncTransaction,
    ops: &[Operation],
    batch_table: &str,
    tables: &mut Tables,
    open: impl Fn(&str) -> Result<Table, Status>,
) -> Result<Vec<OperationResult>, Status> {
    let mut results = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        let at = |s: Status| {
            Status::with_metadata(
                s.code(),
                format!("operation {i}: {}", s.message()),
                s.metadata().clone(),
            )
        };
        let t = tables.get(if op.table.is_empty() { batch_table } else { &op.table }, &open);
        let t = t.map_err(at)?;
        let result = match &op.op {
            None => return Err(refuse::invalid(format!("operation {i} names no operation"))),
            Some(operation::Op::Get(key)) => {
                let value = tx.get(t, key).map_err(|e| at(engine(&e)))?;
                operation_result::Result::Get(proto::GetResponse { value: value.map(Into::into) })
            }
            Some(operation::Op::Put(row)) => {
                tx.put(t, &row.key, &row.value).map_err(|e| at(engine(&e)))?;
                operation_result::Result::Put(proto::PutResponse {})
            }
            Some(operation::Op::Delete(key)) => {
                let existed = tx.delete(t, key).map_err(|e| at(engine(&e)))?;
                operation_result::Result::Delete(proto::DeleteResponse { existed })
            }
            Some(operation::Op::Patch(p)) => {
                tx.update_range(t, &p.key, p.offset as usize, &p.bytes)
                    .map_err(|e| at(engine(&e)))?;
                operation_result::Result::Patch(proto::PatchResponse {})
            }
            Some(operation::Op::Scan(range)) => {
                let mut scan = Scan::of(Some(range.clone())).map_err(at)?;
                let cap = scan.remaining.unwrap_or(u64::MAX);
                if cap > EXECUTE_SCAN_ROWS_MAX {
                    return Err(at(refuse::invalid(format!(
                        "a scan in Execute needs a limit of at most {EXECUTE_SCAN_ROWS_MAX} rows \
                         (its rows travel in one message); use Begin and Scan for more"
                    ))));
                }
                let rows = scan.next_batch(tx, t, cap as usize, usize::MAX).map_err(at)?;
                operation_result::Result::Scan(proto::ScanResponse { rows, more: false })
            }
        };
        results.push(OperationResult { result: Some(result) });
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_at_its_successor() {
        assert_eq!(KeyRange::prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(KeyRange::prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(KeyRange::prefix_end(b"\xff\xff"), None);
        assert_eq!(KeyRange::prefix_end(b""), None);
    }

    #[test]
    fn a_range_with_both_a_prefix_and_bounds_is_refused() {
        let r = KeyRange {
            prefix: Some(b"a".to_vec().into()),
            start: Some(b"b".to_vec().into()),
            ..Default::default()
        };
        assert_eq!(Scan::of(Some(r)).expect_err("both").code(), tonic::Code::InvalidArgument);
    }
}
