//! The bytes of a log record, as a shard writes it to its log.
//!
//! Layout: a format byte (1), a tag byte, then the fields in order:
//! integers little-endian and fixed width, byte strings and lists
//! prefixed with their length (u32). An optional value is a byte (0
//! none, 1 some) then the bytes. Decoding refuses anything left over,
//! anything short, and an unknown format or tag, with an error that says
//! which.

use crate::log::{Prepare, Record};
use crate::tables::TxnRow;
use crate::types::{CommitTs, TxnId, Value};

/// The format byte this version writes and reads.
pub const FORMAT: u8 = 1;

const PREPARE: u8 = 1;
const COMMIT: u8 = 2;
const ABORT: u8 = 3;
const LEASE: u8 = 4;
/// An abort with its commit timestamp (an `ABORT` record, the first
/// layout, has none and decodes with timestamp 0).
const ABORT_AT: u8 = 5;
const FORGET: u8 = 6;
/// A prepare with scanned ranges (a `PREPARE` record, the first layout,
/// has none).
const PREPARE_RANGES: u8 = 9;
/// A move's records (design record 0009).
const FREEZE: u8 = 10;
const ADOPT: u8 = 11;
const RELEASE: u8 = 12;
/// Outcome rows of the transaction table ([`encode_row`]).
const COMMITTED_ROW: u8 = 7;
const ABORTED_ROW: u8 = 8;

/// The bytes of a transaction table row: a prepare row is its prepare
/// record; an outcome is its tag and the commit timestamp.
pub fn encode_row(row: &TxnRow) -> Vec<u8> {
    match row {
        TxnRow::Prepared(p) => encode(&Record::Prepare(p.clone())),
        TxnRow::Committed(ts) | TxnRow::Aborted(ts) => {
            let tag = if matches!(row, TxnRow::Committed(_)) { COMMITTED_ROW } else { ABORTED_ROW };
            let mut out = vec![FORMAT, tag];
            out.extend_from_slice(&ts.to_le_bytes());
            out
        }
    }
}

/// The transaction table row in `b`.
pub fn decode_row(b: &[u8]) -> Result<TxnRow, DecodeError> {
    match b {
        [FORMAT, tag @ (COMMITTED_ROW | ABORTED_ROW), rest @ ..] => {
            let ts: [u8; 8] = rest
                .try_into()
                .map_err(|_| DecodeError(format!("an outcome row of {} bytes", b.len())))?;
            let ts = u64::from_le_bytes(ts);
            Ok(if *tag == COMMITTED_ROW { TxnRow::Committed(ts) } else { TxnRow::Aborted(ts) })
        }
        _ => match decode(b)? {
            Record::Prepare(p) => Ok(TxnRow::Prepared(p)),
            other => Err(DecodeError(format!("a transaction row holding {other:?}"))),
        },
    }
}

/// A record's bytes.
pub fn encode(r: &Record) -> Vec<u8> {
    let mut out = vec![FORMAT];
    match r {
        Record::Prepare(p) => {
            out.push(if p.ranges.is_empty() { PREPARE } else { PREPARE_RANGES });
            txn(&mut out, p.txn);
            version(&mut out, p.version);
            len(&mut out, p.reads.len());
            for (k, v) in &p.reads {
                bytes(&mut out, k);
                version(&mut out, *v);
            }
            len(&mut out, p.writes.len());
            for (k, v) in &p.writes {
                bytes(&mut out, k);
                optional(&mut out, v.as_deref());
            }
            len(&mut out, p.participants.len());
            for s in &p.participants {
                out.extend_from_slice(&s.to_le_bytes());
            }
            if !p.ranges.is_empty() {
                len(&mut out, p.ranges.len());
                for (a, b, at) in &p.ranges {
                    bytes(&mut out, a);
                    bytes(&mut out, b);
                    out.extend_from_slice(&at.to_le_bytes());
                }
            }
        }
        Record::Commit(t) => {
            out.push(COMMIT);
            txn(&mut out, *t);
        }
        Record::Abort(t, ts) => {
            out.push(ABORT_AT);
            txn(&mut out, *t);
            out.extend_from_slice(&ts.to_le_bytes());
        }
        Record::Forget { below, txns } => {
            out.push(FORGET);
            out.extend_from_slice(&below.to_le_bytes());
            len(&mut out, txns.len());
            for t in txns {
                txn(&mut out, *t);
            }
        }
        Record::ReadLease(until) => {
            out.push(LEASE);
            out.extend_from_slice(&until.to_le_bytes());
        }
        Record::Freeze { start, end, to, version } => {
            out.push(FREEZE);
            bytes(&mut out, start);
            bytes(&mut out, end);
            out.extend_from_slice(&to.to_le_bytes());
            out.extend_from_slice(&version.to_le_bytes());
        }
        Record::Adopt { start, end, version: v, clear, rows, floor } => {
            out.push(ADOPT);
            bytes(&mut out, start);
            bytes(&mut out, end);
            out.extend_from_slice(&v.to_le_bytes());
            out.push(u8::from(*clear));
            len(&mut out, rows.len());
            for (k, at, value) in rows {
                bytes(&mut out, k);
                version(&mut out, *at);
                optional(&mut out, value.as_deref());
            }
            out.push(u8::from(floor.is_some()));
            out.extend_from_slice(&floor.unwrap_or(0).to_le_bytes());
        }
        Record::Release { start, end, drop } => {
            out.push(RELEASE);
            bytes(&mut out, start);
            bytes(&mut out, end);
            out.push(u8::from(*drop));
        }
    }
    out
}

fn optional(out: &mut Vec<u8>, v: Option<&[u8]>) {
    match v {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            bytes(out, v);
        }
    }
}

fn len(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&u32::try_from(n).expect("fewer than 4 G items").to_le_bytes());
}

fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    len(out, b.len());
    out.extend_from_slice(b);
}

fn txn(out: &mut Vec<u8>, t: TxnId) {
    out.extend_from_slice(&t.client.to_le_bytes());
    out.extend_from_slice(&t.seq.to_le_bytes());
}

fn version(out: &mut Vec<u8>, v: CommitTs) {
    out.extend_from_slice(&v.ts.to_le_bytes());
    out.extend_from_slice(&v.client.to_le_bytes());
}

/// Why bytes are not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a log record does not decode: {0}")]
pub struct DecodeError(String);

struct Reader<'a> {
    b: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize, what: &str) -> Result<&[u8], DecodeError> {
        if self.b.len() < n {
            return Err(DecodeError(format!("{what}: {n} bytes wanted, {} left", self.b.len())));
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }
    fn u8(&mut self, what: &str) -> Result<u8, DecodeError> {
        Ok(self.take(1, what)?[0])
    }
    fn u32(&mut self, what: &str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self, what: &str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().expect("8 bytes")))
    }
    fn bytes(&mut self, what: &str) -> Result<Vec<u8>, DecodeError> {
        let n = self.u32(what)? as usize;
        Ok(self.take(n, what)?.to_vec())
    }
    fn txn(&mut self) -> Result<TxnId, DecodeError> {
        Ok(TxnId { client: self.u32("txn client")?, seq: self.u64("txn seq")? })
    }
    fn version(&mut self) -> Result<CommitTs, DecodeError> {
        Ok(CommitTs { ts: self.u64("version ts")?, client: self.u32("version client")? })
    }
    fn flag(&mut self, what: &str) -> Result<bool, DecodeError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            f => Err(DecodeError(format!("{what} {f}"))),
        }
    }
    fn optional(&mut self) -> Result<Option<Value>, DecodeError> {
        Ok(if self.flag("value flag")? { Some(self.bytes("value")?) } else { None })
    }
    /// A count of items, each at least `min` bytes: refused when the bytes
    /// left cannot hold it (so a corrupt count cannot ask for gigabytes).
    fn count(&mut self, min: usize, what: &str) -> Result<usize, DecodeError> {
        let n = self.u32(what)? as usize;
        if n.saturating_mul(min) > self.b.len() {
            return Err(DecodeError(format!(
                "{what}: {n} items cannot fit in {} bytes",
                self.b.len()
            )));
        }
        Ok(n)
    }
}

/// The record in `b`.
pub fn decode(b: &[u8]) -> Result<Record, DecodeError> {
    let mut r = Reader { b };
    let format = r.u8("format")?;
    if format != FORMAT {
        return Err(DecodeError(format!("format {format}, this version reads {FORMAT}")));
    }
    let record = match r.u8("tag")? {
        tag @ (PREPARE | PREPARE_RANGES) => {
            let txn = r.txn()?;
            let version = r.version()?;
            let mut reads = Vec::new();
            for _ in 0..r.count(16, "reads")? {
                reads.push((r.bytes("read key")?, r.version()?));
            }
            let mut writes = Vec::new();
            for _ in 0..r.count(5, "writes")? {
                let key = r.bytes("write key")?;
                writes.push((key, r.optional()?));
            }
            let mut participants = Vec::new();
            for _ in 0..r.count(4, "participants")? {
                participants.push(r.u32("participant")?);
            }
            let mut ranges = Vec::new();
            if tag == PREPARE_RANGES {
                for _ in 0..r.count(16, "ranges")? {
                    ranges.push((
                        r.bytes("range start")?,
                        r.bytes("range end")?,
                        r.u64("range at")?,
                    ));
                }
            }
            Record::Prepare(Prepare { txn, version, reads, ranges, writes, participants })
        }
        COMMIT => Record::Commit(r.txn()?),
        ABORT => Record::Abort(r.txn()?, 0),
        ABORT_AT => Record::Abort(r.txn()?, r.u64("abort ts")?),
        FORGET => {
            let below = r.u64("forget bound")?;
            let mut txns = Vec::new();
            for _ in 0..r.count(12, "forgotten")? {
                txns.push(r.txn()?);
            }
            Record::Forget { below, txns }
        }
        LEASE => Record::ReadLease(r.u64("lease")?),
        FREEZE => Record::Freeze {
            start: r.bytes("range start")?,
            end: r.bytes("range end")?,
            to: r.u32("new owner")?,
            version: r.u64("map version")?,
        },
        ADOPT => {
            let (start, end) = (r.bytes("range start")?, r.bytes("range end")?);
            let (version, clear) = (r.u64("map version")?, r.flag("clear")?);
            let mut rows = Vec::new();
            for _ in 0..r.count(17, "rows")? {
                rows.push((r.bytes("row key")?, r.version()?, r.optional()?));
            }
            let (has_floor, floor) = (r.flag("floor flag")?, r.u64("floor")?);
            Record::Adopt { start, end, version, clear, rows, floor: has_floor.then_some(floor) }
        }
        RELEASE => Record::Release {
            start: r.bytes("range start")?,
            end: r.bytes("range end")?,
            drop: r.flag("drop")?,
        },
        tag => return Err(DecodeError(format!("unknown tag {tag}"))),
    };
    if !r.b.is_empty() {
        return Err(DecodeError(format!("{} bytes left over", r.b.len())));
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record() -> impl Strategy<Value = Record> {
        let txn = (any::<u32>(), any::<u64>()).prop_map(|(client, seq)| TxnId { client, seq });
        let version = (any::<u64>(), any::<u32>()).prop_map(|(ts, client)| CommitTs { ts, client });
        let key = proptest::collection::vec(any::<u8>(), 0..20);
        let value = proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40));
        let prepare = (
            txn.clone(),
            version.clone(),
            proptest::collection::vec((key.clone(), version.clone()), 0..4),
            proptest::collection::vec((key.clone(), value.clone()), 0..4),
            proptest::collection::vec(any::<u32>(), 0..4),
            proptest::collection::vec((key.clone(), key.clone(), any::<u64>()), 0..3),
        )
            .prop_map(|(txn, version, reads, writes, participants, ranges)| {
                Record::Prepare(Prepare { txn, version, reads, ranges, writes, participants })
            });
        prop_oneof![
            prepare,
            txn.clone().prop_map(Record::Commit),
            (txn.clone(), any::<u64>()).prop_map(|(t, ts)| Record::Abort(t, ts)),
            any::<u64>().prop_map(Record::ReadLease),
            (any::<u64>(), proptest::collection::vec(txn, 0..4))
                .prop_map(|(below, txns)| Record::Forget { below, txns }),
            (key.clone(), key.clone(), any::<u32>(), any::<u64>())
                .prop_map(|(start, end, to, version)| Record::Freeze { start, end, to, version }),
            (
                (key.clone(), key.clone(), any::<u64>(), any::<bool>()),
                proptest::collection::vec((key.clone(), version.clone(), value.clone()), 0..3),
                proptest::option::of(any::<u64>()),
            )
                .prop_map(|((start, end, version, clear), rows, floor)| {
                    Record::Adopt { start, end, version, clear, rows, floor }
                }),
            (key.clone(), key, any::<bool>()).prop_map(|(start, end, drop)| Record::Release {
                start,
                end,
                drop
            }),
        ]
    }

    proptest! {
        #[test]
        fn every_record_decodes_to_itself(r in record()) {
            prop_assert_eq!(decode(&encode(&r)), Ok(r));
        }

        #[test]
        fn a_cut_or_padded_record_is_refused(r in record(), cut in 1usize..8) {
            let b = encode(&r);
            let short = &b[..b.len().saturating_sub(cut)];
            prop_assert!(decode(short).is_err());
            let mut long = b.clone();
            long.push(0);
            prop_assert!(decode(&long).is_err());
        }
    }

    #[test]
    fn every_row_decodes_to_itself() {
        let p = Prepare {
            txn: TxnId { client: 1, seq: 2 },
            version: CommitTs { ts: 3, client: 1 },
            reads: vec![(b"r".to_vec(), CommitTs::INITIAL)],
            ranges: vec![(b"a".to_vec(), b"b".to_vec(), 5)],
            writes: vec![(b"w".to_vec(), Some(b"v".to_vec()))],
            participants: vec![0, 1],
        };
        for row in [TxnRow::Prepared(p), TxnRow::Committed(u64::MAX), TxnRow::Aborted(7)] {
            assert_eq!(decode_row(&encode_row(&row)), Ok(row));
        }
        assert!(decode_row(&encode(&Record::ReadLease(1))).is_err(), "a lease is no row");
        assert!(decode_row(&[FORMAT, COMMITTED_ROW, 1, 2]).is_err(), "a short outcome");
    }

    #[test]
    fn an_abort_of_the_first_layout_decodes_with_timestamp_zero() {
        let t = TxnId { client: 3, seq: 9 };
        let mut b = vec![FORMAT, ABORT];
        txn(&mut b, t);
        assert_eq!(decode(&b), Ok(Record::Abort(t, 0)));
    }

    #[test]
    fn another_format_or_tag_is_refused_by_name() {
        let mut b = encode(&Record::ReadLease(7));
        b[0] = 9;
        assert!(decode(&b).expect_err("format").to_string().contains("format 9"));
        b[0] = FORMAT;
        b[1] = 77;
        assert!(decode(&b).expect_err("tag").to_string().contains("unknown tag 77"));
    }
}
