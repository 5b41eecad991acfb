//! Checkpoints (paper §4.4; invariant 7 and 8).
//!
//! A checkpoint is an MVCC snapshot at a CSN `c` ≤ gCSN, so it holds only
//! durable data. Taking one does not block transactions:
//! 1. Every log group starts a fresh segment for what it logs from now on
//!    (`LogGroup::mark_checkpoint`), which also gives a CSN bound `M`: every
//!    CSN logged later is ≥ `M` and lands in the fresh segment or later.
//! 2. Wait until gCSN ≥ `M`, then read at the durable snapshot `c` = gCSN
//!    (so `c` ≥ `M`).
//! 3. Scan every table at `c` and write chunks
//!    `checkpoint/c<csn>/<table id>/<chunk>`, each to a quorum of stores.
//! 4. Publish a manifest naming the checkpoint and, per group, the fresh
//!    segment as the first one recovery reads.
//! 5. Only then delete what it superseded (`history::truncate`): older
//!    checkpoints' chunks, and log segments before each group's new start
//!    (they hold only CSNs below `M` ≤ `c`), unless a retention window
//!    keeps them.
//!
//! **Offloaded** (`Options::checkpoint_offload`): a read replica builds
//! the chunks from its own state and offers them (`put_offer`); the writer
//! does step 1, then adopts an offer at or above its bound instead of
//! steps 2 and 3, and does 4 and 5 (`Database` in `db.rs`,
//! `adopt_offered`).
//!
//! Chunk format (little endian):
//!
//! ```text
//!  0  4  magic "MSCK"
//!  4  1  format version (1)
//!  5  3  reserved (0)
//!  8  4  table id
//! 12  4  rows
//! 16  8  checkpoint CSN
//! 24  4  body length
//! 28  4  CRC32C of bytes 0..28 followed by the body
//! 32     rows: key length (u16), value length (u32), key, value
//! ```

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use objstore::{ObjectStore, StoreError};

use crate::error::{Error, Result};
use crate::keys::{OFFER_PREFIX, checkpoint_prefix, offer_key};
use crate::manifest::{CheckpointRef, ChunkRef};
use crate::mvcc::Csn;
use crate::mvcc::version::Version;
use crate::recovery::replay::{Folded, Loaded, install};
use crate::retry::retry;
use crate::table::TableInner;

/// "MSCK": Milliscale checkpoint chunk.
pub const CHUNK_MAGIC: [u8; 4] = *b"MSCK";
const CHUNK_VERSION: u8 = 1;
const CHUNK_HEADER_BYTES: usize = 32;

/// Builds chunks of one table, and writes each when it is full.
pub(crate) struct ChunkWriter<'a> {
    stores: &'a [(String, Arc<dyn ObjectStore>)],
    needed: usize,
    deadline: Duration,
    csn: Csn,
    chunk_bytes: usize,
    table: u32,
    buf: Vec<u8>,
    rows: u32,
    next_chunk: u32,
    /// The chunks written so far (all tables).
    pub(crate) chunks: Vec<ChunkRef>,
    pub(crate) total_rows: u64,
    /// Requests made (puts), for the background cost.
    pub(crate) requests: u64,
}

impl<'a> ChunkWriter<'a> {
    pub(crate) fn new(
        stores: &'a [(String, Arc<dyn ObjectStore>)],
        needed: usize,
        deadline: Duration,
        csn: Csn,
        chunk_bytes: usize,
    ) -> ChunkWriter<'a> {
        ChunkWriter {
            stores,
            needed,
            deadline,
            csn,
            chunk_bytes,
            table: 0,
            buf: Vec::new(),
            rows: 0,
            next_chunk: 0,
            chunks: Vec::new(),
            total_rows: 0,
            requests: 0,
        }
    }

    /// Start a table.
    pub(crate) fn table(&mut self, id: u32) -> Result<()> {
        self.flush()?;
        self.table = id;
        self.next_chunk = 0;
        Ok(())
    }

    pub(crate) fn row(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        if self.buf.is_empty() {
            self.buf.resize(CHUNK_HEADER_BYTES, 0);
        }
        self.buf.put_u16_le(key.len() as u16);
        self.buf.put_u32_le(value.len() as u32);
        self.buf.extend_from_slice(key);
        self.buf.extend_from_slice(value);
        self.rows += 1;
        self.total_rows += 1;
        if self.buf.len() >= self.chunk_bytes {
            self.flush()?;
        }
        Ok(())
    }

    /// Seal and write the current chunk, if it has rows.
    pub(crate) fn flush(&mut self) -> Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let mut buf = std::mem::take(&mut self.buf);
        let body_len = u32::try_from(buf.len() - CHUNK_HEADER_BYTES)
            .map_err(|_| Error::InvalidArgument("a checkpoint chunk above 4 GiB".into()))?;
        {
            let mut h = &mut buf[..CHUNK_HEADER_BYTES];
            h.put_slice(&CHUNK_MAGIC);
            h.put_u8(CHUNK_VERSION);
            h.put_bytes(0, 3);
            h.put_u32_le(self.table);
            h.put_u32_le(self.rows);
            h.put_u64_le(self.csn);
            h.put_u32_le(body_len);
        }
        let crc = crc32c::crc32c_append(crc32c::crc32c(&buf[..28]), &buf[CHUNK_HEADER_BYTES..]);
        buf[28..32].copy_from_slice(&crc.to_le_bytes());
        let key =
            format!("{}{:04}/{:06}", checkpoint_prefix(self.csn), self.table, self.next_chunk);
        let bytes = Bytes::from(buf);
        let whole_crc = crc32c::crc32c(&bytes);
        let mut ok = 0;
        let mut errors = Vec::new();
        for (name, s) in self.stores {
            self.requests += 1;
            match retry(self.deadline, || s.put(&key, bytes.clone())) {
                Ok(_) => ok += 1,
                Err(e) => errors.push(format!("{name}: {e}")),
            }
        }
        if ok < self.needed {
            return Err(Error::StoreUnavailable(format!(
                "writing checkpoint chunk {key}: {}",
                errors.join("; ")
            )));
        }
        self.chunks.push(ChunkRef { key, bytes: bytes.len() as u64, crc: whole_crc });
        self.next_chunk += 1;
        self.rows = 0;
        Ok(())
    }

    pub(crate) fn finish(mut self) -> Result<(CheckpointRef, u64)> {
        self.flush()?;
        let bytes = self.chunks.iter().map(|c| c.bytes).sum();
        Ok((
            CheckpointRef { csn: self.csn, chunks: self.chunks, rows: self.total_rows, bytes },
            self.requests,
        ))
    }
}

/// One decoded chunk.
#[derive(Debug)]
pub struct Chunk {
    /// The table id.
    pub table: u32,
    /// The checkpoint CSN it belongs to.
    pub csn: Csn,
    /// Its rows.
    pub rows: Vec<(Bytes, Bytes)>,
}

/// Decode and check a chunk object.
pub fn decode_chunk(key: &str, bytes: &Bytes) -> Result<Chunk> {
    let bad = |what: String| Error::Corrupt(format!("checkpoint chunk {key}: {what}"));
    if bytes.len() < CHUNK_HEADER_BYTES {
        return Err(bad(format!("{} bytes, shorter than a header", bytes.len())));
    }
    let mut h = &bytes[..CHUNK_HEADER_BYTES];
    if h[..4] != CHUNK_MAGIC {
        return Err(bad("bad magic".into()));
    }
    h.advance(4);
    let version = h.get_u8();
    if version != CHUNK_VERSION {
        return Err(bad(format!("format version {version}")));
    }
    h.advance(3);
    let table = h.get_u32_le();
    let rows = h.get_u32_le();
    let csn = h.get_u64_le();
    let body_len = h.get_u32_le() as usize;
    let stored = h.get_u32_le();
    if bytes.len() != CHUNK_HEADER_BYTES + body_len {
        return Err(bad(format!(
            "{} bytes, the header says {}",
            bytes.len(),
            CHUNK_HEADER_BYTES + body_len
        )));
    }
    let computed =
        crc32c::crc32c_append(crc32c::crc32c(&bytes[..28]), &bytes[CHUNK_HEADER_BYTES..]);
    if computed != stored {
        return Err(bad(format!("checksum {computed:08x}, the header says {stored:08x}")));
    }
    let mut body = bytes.slice(CHUNK_HEADER_BYTES..);
    let mut out = Vec::with_capacity(rows as usize);
    for _ in 0..rows {
        if body.remaining() < 6 {
            return Err(bad("a row runs past the body".into()));
        }
        let k = body.get_u16_le() as usize;
        let v = body.get_u32_le() as usize;
        if body.remaining() < k + v {
            return Err(bad("a row runs past the body".into()));
        }
        let key = body.split_to(k);
        let value = body.split_to(v);
        out.push((key, value));
    }
    if body.has_remaining() {
        return Err(bad("bytes after the last row".into()));
    }
    Ok(Chunk { table, csn, rows: out })
}

/// Fetch a chunk from whichever store has it intact.
pub(crate) fn fetch_chunk(
    stores: &[(String, Arc<dyn ObjectStore>)],
    c: &ChunkRef,
    deadline: Duration,
) -> Result<Chunk> {
    let mut last = None;
    for (name, s) in stores {
        match retry(deadline, || s.get(&c.key)) {
            Ok(b) if b.len() as u64 == c.bytes && crc32c::crc32c(&b) == c.crc => {
                return decode_chunk(&c.key, &b);
            }
            Ok(b) => {
                // Damaged here: say how, and try another store.
                last = Some(match decode_chunk(&c.key, &b) {
                    Err(e) => e,
                    Ok(_) => Error::Corrupt(format!(
                        "checkpoint chunk {} on {name}: not the chunk the manifest names",
                        c.key
                    )),
                });
            }
            Err(StoreError::NotFound(_)) => {
                last =
                    Some(Error::Corrupt(format!("checkpoint chunk {} is missing on {name}", c.key)))
            }
            Err(e) => last = Some(Error::Store(format!("{name}: reading {}: {e}", c.key))),
        }
    }
    Err(last.unwrap_or_else(|| Error::Store("no stores".into())))
}

/// Load checkpoint `cref` into `tables`, `threads` chunks at a time, each
/// row merged with what recovery's log does to its key (`folded`: kept,
/// patched, or left out for the log's own value or deletion). Returns the
/// rows loaded (patched ones included).
pub(crate) fn load(
    stores: &[(String, Arc<dyn ObjectStore>)],
    cref: &CheckpointRef,
    tables: &[Arc<TableInner>],
    threads: usize,
    deadline: Duration,
    folded: &Folded<'_>,
) -> Result<u64> {
    let results = crate::parallel::parallel_map(&cref.chunks, threads, |c| -> Result<u64> {
        let chunk = fetch_chunk(stores, c, deadline)?;
        if chunk.csn != cref.csn {
            return Err(Error::Corrupt(format!(
                "checkpoint chunk {} belongs to checkpoint {}",
                c.key, chunk.csn
            )));
        }
        let table = tables.get(chunk.table as usize).ok_or_else(|| {
            Error::Corrupt(format!("checkpoint chunk {} names table id {}", c.key, chunk.table))
        })?;
        if table.is_dropped() {
            // Written before the table was dropped.
            return Ok(0);
        }
        let mut loaded = 0;
        folded.merge_rows(chunk.table, &chunk.rows, |k, v, how| {
            match how {
                Loaded::Keep => install(table, k, Version::committed(cref.csn - 1, Some(v)))?,
                Loaded::Patched(version) => install(table, k, version)?,
                Loaded::Skip => return Ok(()),
            }
            loaded += 1;
            Ok(())
        })?;
        Ok(loaded)
    });
    results.into_iter().sum()
}

/// Encode an offer.
pub(crate) fn encode_offer(c: &CheckpointRef) -> Bytes {
    let body = serde_json::to_vec(c).expect("a checkpoint ref serializes");
    let mut out = format!("MSCO {:08x}\n", crc32c::crc32c(&body)).into_bytes();
    out.extend_from_slice(&body);
    Bytes::from(out)
}

/// Decode and check an offer.
pub(crate) fn decode_offer(key: &str, bytes: &[u8]) -> Result<CheckpointRef> {
    let c = decode_ref(key, bytes)?;
    if offer_key(c.csn) != key {
        return Err(Error::Corrupt(format!("checkpoint offer {key}: names another checkpoint")));
    }
    Ok(c)
}

/// Decode and check a checkpoint's description in the offer format (an
/// offer, or a retention window's chunk list, `history::chunk_list_key`).
pub(crate) fn decode_ref(key: &str, bytes: &[u8]) -> Result<CheckpointRef> {
    let bad = |what: &str| Error::Corrupt(format!("checkpoint description {key}: {what}"));
    let nl = bytes.iter().position(|&b| b == b'\n').ok_or_else(|| bad("no header"))?;
    let header = std::str::from_utf8(&bytes[..nl]).map_err(|_| bad("bad header"))?;
    let crc = header
        .strip_prefix("MSCO ")
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .ok_or_else(|| bad("bad header"))?;
    let body = &bytes[nl + 1..];
    if crc32c::crc32c(body) != crc {
        return Err(bad("checksum mismatch"));
    }
    let c: CheckpointRef = serde_json::from_slice(body).map_err(|_| bad("bad JSON"))?;
    if c.chunks.iter().any(|k| !k.key.starts_with(&checkpoint_prefix(c.csn))) {
        return Err(bad("names another checkpoint"));
    }
    Ok(c)
}

/// Write `c` (whose chunks are written) as an offer on a quorum of
/// `stores`. Returns the requests made.
pub(crate) fn put_offer(
    stores: &[(String, Arc<dyn ObjectStore>)],
    needed: usize,
    deadline: Duration,
    c: &CheckpointRef,
) -> Result<u64> {
    let key = offer_key(c.csn);
    let body = encode_offer(c);
    let (mut ok, mut errors) = (0, Vec::new());
    for (name, s) in stores {
        match retry(deadline, || s.put(&key, body.clone())) {
            Ok(_) => ok += 1,
            Err(e) => errors.push(format!("{name}: {e}")),
        }
    }
    if ok < needed {
        return Err(Error::StoreUnavailable(format!(
            "writing checkpoint offer {key}: {}",
            errors.join("; ")
        )));
    }
    Ok(stores.len() as u64)
}

/// The offers on `stores` (any store that answers), newest first; damaged
/// ones are skipped. Returns them and the requests made.
pub fn list_offers(
    stores: &[(String, Arc<dyn ObjectStore>)],
    deadline: Duration,
) -> (Vec<CheckpointRef>, u64) {
    let mut requests = 0;
    let mut keys = std::collections::BTreeSet::new();
    for (_, s) in stores {
        requests += 1;
        if let Ok(list) = retry(deadline, || s.list(OFFER_PREFIX)) {
            keys.extend(list.into_iter().map(|o| o.key));
        }
    }
    let mut out = Vec::new();
    for key in keys.into_iter().rev() {
        for (_, s) in stores {
            requests += 1;
            if let Ok(b) = retry(deadline, || s.get(&key)) {
                match decode_offer(&key, &b) {
                    Ok(c) => out.push(c),
                    Err(e) => tracing::warn!("skipping a checkpoint offer: {e}"),
                }
                break;
            }
        }
    }
    (out, requests)
}

/// Check that every chunk of `c` is on a quorum of `stores` with the size
/// it names (a HEAD each). Returns the requests made.
pub(crate) fn check_chunks(
    stores: &[(String, Arc<dyn ObjectStore>)],
    needed: usize,
    deadline: Duration,
    c: &CheckpointRef,
) -> Result<u64> {
    let mut requests = 0;
    for chunk in &c.chunks {
        let mut ok = 0;
        for (_, s) in stores {
            requests += 1;
            if retry(deadline, || s.head(&chunk.key)).is_ok_and(|m| m.size == chunk.bytes) {
                ok += 1;
            }
        }
        if ok < needed {
            return Err(Error::Corrupt(format!(
                "checkpoint offer {}: chunk {} is on {ok} stores with its size, {needed} needed",
                c.csn, chunk.key
            )));
        }
    }
    Ok(requests)
}

/// What checkpoints have cost so far: the background column of the cost
/// report (the log's requests are the foreground column).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CheckpointStats {
    /// Checkpoints published.
    pub checkpoints: u64,
    /// CSN of the last one.
    pub last_csn: u64,
    /// Rows and bytes in the last one.
    pub last_rows: u64,
    /// Bytes of the last one.
    pub last_bytes: u64,
    /// PUT-class requests made by checkpoints (chunk puts, manifest puts,
    /// lists), all stores.
    pub put_requests: u64,
    /// Deletes of superseded objects (free on S3), all stores.
    pub delete_requests: u64,
    /// Bytes uploaded by checkpoints, all stores.
    pub bytes_uploaded: u64,
    /// Of `checkpoints`, those built by a replica and adopted
    /// (`Options::checkpoint_offload`).
    pub adopted: u64,
    /// Time spent in checkpoints.
    pub busy: Duration,
    /// Log bytes written when the last one started.
    pub log_bytes_at_last: u64,
    /// What those requests and uploads cost at the stores' price tables,
    /// for stores that have one (`sim://`); `None` otherwise.
    pub cost_usd: Option<f64>,
}

/// Fuzz target: the chunk and offer decoders on arbitrary bytes, which
/// must answer `Corrupt` (or a chunk) and never panic. See
/// `log::decode::fuzz_part` for where fuzz targets run.
pub fn fuzz_chunk(data: &[u8]) {
    let key = "checkpoint/c00000000000000000001/0000/000000";
    let _ = decode_chunk(key, &Bytes::copy_from_slice(data));
    let _ = decode_offer(&crate::keys::offer_key(1), data);
}
