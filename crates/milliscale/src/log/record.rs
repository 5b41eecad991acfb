//! The log record format: parts, transaction entries, records.
//!
//! A **part** is what one flush writes (one S3 Express append, or one object
//! in put mode). A segment is a sequence of parts. All integers are little
//! endian. Layout (ARCHITECTURE.md draws it too):
//!
//! ```text
//! part header, 32 bytes
//!   0  4  magic "MSLP"
//!   4  1  format version (1)
//!   5  1  flags (0; 1 = fence: no entries, the body is the fencing
//!           writer's epoch as 8 bytes, see recovery::fence)
//!   6  2  reserved (0)
//!   8  4  log group
//!  12  4  body length N
//!  16  8  first CSN in the part (0 if it holds no entries)
//!  24  4  entry count
//!  28  4  CRC32C of bytes 0..28 followed by the body
//!  32  N  body: entries, back to back
//!
//! entry header, 24 bytes (one transaction's outcome)
//!   0  1  kind: 1 commit, 2 abort
//!   1  3  reserved (0)
//!   4  4  record count R (0 for an abort)
//!   8  8  CSN
//!  16  8  DSN (0 for an abort)
//!  24     R records
//!
//! record header, 16 bytes
//!   0  1  op: 1 insert, 2 update (whole value), 3 delta, 4 delete
//!   1  1  reserved (0)
//!   2  2  key length K
//!   4  4  table id
//!   8  4  payload length V (value, or delta bytes; 0 for delete)
//!  12  4  delta offset (0 unless op is delta)
//!  16  K  key
//! 16+K V  payload
//! ```
//!
//! A transaction's entry never spans parts, so a part decodes on its own.
//! Decoding never panics and never trusts a length: truncated, corrupt or
//! foreign bytes give a [`DecodeError`](super::decode::DecodeError).

use bytes::{BufMut, Bytes};

/// "MSLP": Milliscale log part.
pub const PART_MAGIC: [u8; 4] = *b"MSLP";
/// The format version this code writes and reads.
pub const FORMAT_VERSION: u8 = 1;
/// Bytes in a part header.
pub const PART_HEADER_BYTES: usize = 32;
/// Bytes in an entry header.
pub const ENTRY_HEADER_BYTES: usize = 24;
/// Bytes in a record header.
pub const RECORD_HEADER_BYTES: usize = 16;

/// What a record does to one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A new record.
    Insert(Bytes),
    /// A whole new value.
    Update(Bytes),
    /// `bytes` written at `offset` in the existing value.
    Delta {
        /// Where in the value.
        offset: u32,
        /// What is written there.
        bytes: Bytes,
    },
    /// The record is gone.
    Delete,
}

impl Op {
    fn code(&self) -> u8 {
        match self {
            Op::Insert(_) => op_code::INSERT,
            Op::Update(_) => op_code::UPDATE,
            Op::Delta { .. } => op_code::DELTA,
            Op::Delete => op_code::DELETE,
        }
    }

    fn payload(&self) -> &[u8] {
        match self {
            Op::Insert(v) | Op::Update(v) | Op::Delta { bytes: v, .. } => v,
            Op::Delete => &[],
        }
    }
}

/// `base` with `bytes` written at `offset`: the value a delta record
/// leaves; `None` if the range passes the value's end.
pub(crate) fn patched(base: &[u8], offset: u32, bytes: &[u8]) -> Option<Vec<u8>> {
    let (at, end) = (offset as usize, (offset as usize).checked_add(bytes.len())?);
    let mut out = base.to_vec();
    out.get_mut(at..end)?.copy_from_slice(bytes);
    Some(out)
}

/// One write of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The table's id.
    pub table: u32,
    /// The record's key.
    pub key: Bytes,
    /// What happened to it.
    pub op: Op,
}

impl Record {
    /// Encoded size in bytes.
    pub fn encoded_len(&self) -> usize {
        RECORD_HEADER_BYTES + self.key.len() + self.op.payload().len()
    }
}

/// One transaction's outcome in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A committed transaction: its CSN, its DSN and its writes.
    Commit {
        /// Commit sequence number.
        csn: u64,
        /// The largest CSN among the versions it read or overwrote.
        dsn: u64,
        /// Its writes, in order.
        records: Records,
    },
    /// A transaction that took a CSN and then aborted (invariant 1: no CSN
    /// goes missing from the log).
    Abort {
        /// The CSN it took.
        csn: u64,
    },
}

impl Entry {
    /// The entry's CSN.
    pub fn csn(&self) -> u64 {
        match self {
            Entry::Commit { csn, .. } | Entry::Abort { csn } => *csn,
        }
    }

    /// Encoded size in bytes.
    pub fn encoded_len(&self) -> usize {
        ENTRY_HEADER_BYTES
            + match self {
                Entry::Commit { records, .. } => records.bytes.len(),
                Entry::Abort { .. } => 0,
            }
    }

    /// Append the encoding to `out`.
    ///
    /// # Panics
    /// If a key is longer than `u16::MAX` or a payload or the record count
    /// is above `u32::MAX`; the engine's limits (limits.rs) keep them far
    /// below.
    pub fn encode(&self, out: &mut impl BufMut) {
        match self {
            Entry::Commit { csn, dsn, records } => {
                encode_entry_header(out, EntryKind::Commit, records.count, *csn, *dsn);
                out.put_slice(&records.bytes);
            }
            Entry::Abort { csn } => encode_entry_header(out, EntryKind::Abort, 0, *csn, 0),
        }
    }
}

/// A transaction's records, kept as encoded in the part and decoded on
/// demand: recovery walks millions of them, and materializing each one
/// cost more than replaying it. Decoding checked their structure, so
/// iterating cannot fail.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Records {
    pub(super) bytes: Bytes,
    pub(super) count: u32,
}

/// One record, borrowed from its [`Records`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// The table's id.
    pub table: u32,
    /// The record's key.
    pub key: &'a [u8],
    /// What happened to it.
    pub op: OpRef<'a>,
}

/// [`Op`], borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpRef<'a> {
    /// A new record.
    Insert(&'a [u8]),
    /// A whole new value.
    Update(&'a [u8]),
    /// `bytes` written at `offset` in the existing value.
    Delta {
        /// Where in the value.
        offset: u32,
        /// What is written there.
        bytes: &'a [u8],
    },
    /// The record is gone.
    Delete,
}

impl Records {
    /// Encode `records`.
    ///
    /// # Panics
    /// As [`Entry::encode`].
    pub fn new(records: &[Record]) -> Records {
        let mut out = Vec::with_capacity(records.iter().map(Record::encoded_len).sum());
        for r in records {
            let offset = match r.op {
                Op::Delta { offset, .. } => offset,
                _ => 0,
            };
            encode_record(&mut out, r.op.code(), r.table, &r.key, offset, r.op.payload());
        }
        let count = u32::try_from(records.len()).expect("records per transaction fit u32");
        Records { bytes: Bytes::from(out), count }
    }

    /// How many records.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// No records.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The records, borrowed, in order.
    pub fn refs(&self) -> impl Iterator<Item = RecordRef<'_>> + '_ {
        let mut at = 0usize;
        let b = &self.bytes[..];
        (0..self.count).map(move |_| {
            let h = &b[at..at + RECORD_HEADER_BYTES];
            let op = h[0];
            let key_len = usize::from(u16::from_le_bytes([h[2], h[3]]));
            let table = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
            let len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
            let offset = u32::from_le_bytes([h[12], h[13], h[14], h[15]]);
            let k = at + RECORD_HEADER_BYTES;
            let (key, payload) = (&b[k..k + key_len], &b[k + key_len..k + key_len + len]);
            at = k + key_len + len;
            let op = match op {
                op_code::INSERT => OpRef::Insert(payload),
                op_code::UPDATE => OpRef::Update(payload),
                op_code::DELTA => OpRef::Delta { offset, bytes: payload },
                _ => OpRef::Delete,
            };
            RecordRef { table, key, op }
        })
    }

    /// The records, owned (their bytes share this buffer).
    pub fn to_vec(&self) -> Vec<Record> {
        let own = |s: &[u8]| self.bytes.slice_ref(s);
        self.refs()
            .map(|r| Record {
                table: r.table,
                key: own(r.key),
                op: match r.op {
                    OpRef::Insert(v) => Op::Insert(own(v)),
                    OpRef::Update(v) => Op::Update(own(v)),
                    OpRef::Delta { offset, bytes } => Op::Delta { offset, bytes: own(bytes) },
                    OpRef::Delete => Op::Delete,
                },
            })
            .collect()
    }
}

impl From<Vec<Record>> for Records {
    fn from(records: Vec<Record>) -> Records {
        Records::new(&records)
    }
}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.to_vec()).finish()
    }
}

/// The two kinds of entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKind {
    Commit = 1,
    Abort = 2,
}

/// Record op codes, as [`encode_record`] takes them.
pub(crate) mod op_code {
    pub(crate) const INSERT: u8 = 1;
    pub(crate) const UPDATE: u8 = 2;
    pub(crate) const DELTA: u8 = 3;
    pub(crate) const DELETE: u8 = 4;
}

/// Write an entry header. The engine writes a transaction's records as it
/// runs (its redo buffer) and puts this header in front at pre-commit.
pub(crate) fn encode_entry_header(
    out: &mut impl BufMut,
    kind: EntryKind,
    records: u32,
    csn: u64,
    dsn: u64,
) {
    out.put_u8(kind as u8);
    out.put_bytes(0, 3);
    out.put_u32_le(records);
    out.put_u64_le(csn);
    out.put_u64_le(dsn);
}

/// Write one record: `op` is an [`op_code`], `offset` is 0 unless it is a
/// delta.
///
/// # Panics
/// If the key is longer than `u16::MAX` or the payload longer than
/// `u32::MAX`; the engine's limits (limits.rs) keep them far below.
pub(crate) fn encode_record(
    out: &mut impl BufMut,
    op: u8,
    table: u32,
    key: &[u8],
    offset: u32,
    payload: &[u8],
) {
    out.put_u8(op);
    out.put_u8(0);
    out.put_u16_le(u16::try_from(key.len()).expect("key length fits u16"));
    out.put_u32_le(table);
    out.put_u32_le(u32::try_from(payload.len()).expect("payload length fits u32"));
    out.put_u32_le(offset);
    out.put_slice(key);
    out.put_slice(payload);
}

/// A decoded part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The log group that wrote it.
    pub group: u32,
    /// Its transactions, in CSN order.
    pub entries: Vec<Entry>,
    /// For a fence part: the epoch of the writer that fenced the log here.
    /// Nothing after a fence part belongs to the fenced writer's log.
    pub fence: Option<u64>,
}

/// The part flag that marks a fence part.
pub const FLAG_FENCE: u8 = 1;

/// A fence part for `group`, written by the writer of `epoch`.
pub fn fence_part(group: u32, epoch: u64) -> Bytes {
    let mut buf = vec![0u8; PART_HEADER_BYTES];
    buf.extend_from_slice(&epoch.to_le_bytes());
    seal_part_with_flags(&mut buf, group, 0, 0, FLAG_FENCE);
    Bytes::from(buf)
}

/// Builds one part: entries are appended, then [`PartBuilder::finish`]
/// writes the header and the checksum.
#[derive(Debug)]
pub struct PartBuilder {
    group: u32,
    buf: Vec<u8>,
    first_csn: u64,
    entries: u32,
}

impl PartBuilder {
    /// An empty part for `group`, with room for `capacity` body bytes.
    pub fn new(group: u32, capacity: usize) -> PartBuilder {
        let mut buf = Vec::with_capacity(PART_HEADER_BYTES + capacity);
        buf.resize(PART_HEADER_BYTES, 0);
        PartBuilder { group, buf, first_csn: 0, entries: 0 }
    }

    /// Append one entry.
    pub fn push(&mut self, e: &Entry) {
        if self.entries == 0 {
            self.first_csn = e.csn();
        }
        self.entries += 1;
        e.encode(&mut self.buf);
    }

    /// Body bytes so far.
    pub fn body_len(&self) -> usize {
        self.buf.len() - PART_HEADER_BYTES
    }

    /// Entries so far.
    pub fn entry_count(&self) -> u32 {
        self.entries
    }

    /// The encoded part.
    pub fn finish(mut self) -> Bytes {
        seal_part(&mut self.buf, self.group, self.first_csn, self.entries);
        Bytes::from(self.buf)
    }
}

/// Write the part header and checksum into `buf[..PART_HEADER_BYTES]`; the
/// body (`entries` entries, the first with CSN `first_csn`) follows it.
///
/// # Panics
/// If `buf` is shorter than a header or the body is 4 GiB or more.
pub(crate) fn seal_part(buf: &mut [u8], group: u32, first_csn: u64, entries: u32) {
    seal_part_with_flags(buf, group, first_csn, entries, 0);
}

fn seal_part_with_flags(buf: &mut [u8], group: u32, first_csn: u64, entries: u32, flags: u8) {
    let body_len = u32::try_from(buf.len() - PART_HEADER_BYTES).expect("a part body fits u32");
    let mut h = &mut buf[..PART_HEADER_BYTES];
    h.put_slice(&PART_MAGIC);
    h.put_u8(FORMAT_VERSION);
    h.put_u8(flags);
    h.put_u16_le(0);
    h.put_u32_le(group);
    h.put_u32_le(body_len);
    h.put_u64_le(first_csn);
    h.put_u32_le(entries);
    let crc = part_crc(&buf[..28], &buf[PART_HEADER_BYTES..]);
    buf[28..32].copy_from_slice(&crc.to_le_bytes());
}

pub(super) fn part_crc(header: &[u8], body: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(header), body)
}
