//! Reading the log format back (`record` draws it): a part, a segment of
//! parts, or a fenced tail. Decoding never panics and never trusts a
//! length: truncated, corrupt or foreign bytes give a [`DecodeError`].

use bytes::{Buf, Bytes};

use super::record::*;

/// Why bytes are not a valid part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the header or the body length says: a torn tail.
    #[error("truncated part: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// Not a Milliscale log part.
    #[error("not a log part (magic {0:02x?})")]
    BadMagic([u8; 4]),
    /// Written by a newer (or unknown) format.
    #[error("log format version {0} is not supported (this build reads {FORMAT_VERSION})")]
    UnsupportedVersion(u8),
    /// The bytes were damaged.
    #[error("part checksum mismatch: stored {stored:08x}, computed {computed:08x}")]
    Checksum {
        /// The CRC32C in the header.
        stored: u32,
        /// The CRC32C of the bytes.
        computed: u32,
    },
    /// The checksum holds but the contents break the format (a bug or a
    /// foreign writer).
    #[error("malformed part: {0}")]
    Malformed(String),
}

fn need(b: &Bytes, n: usize) -> Result<(), DecodeError> {
    if b.remaining() < n {
        Err(DecodeError::Malformed(format!(
            "an entry runs past the body ({n} > {})",
            b.remaining()
        )))
    } else {
        Ok(())
    }
}

/// Decode the part at the start of `bytes`; returns it and its length.
/// Bytes after it are left alone (the next part of the segment).
pub fn decode_part(bytes: &Bytes) -> Result<(Part, usize), DecodeError> {
    let have = bytes.len();
    if have < PART_HEADER_BYTES {
        return Err(DecodeError::Truncated { need: PART_HEADER_BYTES, have });
    }
    let mut h = &bytes[..PART_HEADER_BYTES];
    let magic: [u8; 4] = h[..4].try_into().expect("4 bytes");
    h.advance(4);
    if magic != PART_MAGIC {
        return Err(DecodeError::BadMagic(magic));
    }
    let version = h.get_u8();
    if version != FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion(version));
    }
    let (flags, reserved) = (h.get_u8(), h.get_u16_le());
    let group = h.get_u32_le();
    let body_len = h.get_u32_le() as usize;
    let first_csn = h.get_u64_le();
    let count = h.get_u32_le();
    let stored = h.get_u32_le();
    let total = PART_HEADER_BYTES
        .checked_add(body_len)
        .ok_or_else(|| DecodeError::Malformed("body length overflows".into()))?;
    if have < total {
        return Err(DecodeError::Truncated { need: total, have });
    }
    let computed = part_crc(&bytes[..28], &bytes[PART_HEADER_BYTES..total]);
    if stored != computed {
        return Err(DecodeError::Checksum { stored, computed });
    }
    if reserved != 0 {
        return Err(DecodeError::Malformed("reserved header bytes are not zero".into()));
    }
    if flags == FLAG_FENCE {
        if count != 0 || first_csn != 0 || body_len != 8 {
            return Err(DecodeError::Malformed("a fence part with entries".into()));
        }
        let epoch =
            u64::from_le_bytes(bytes[PART_HEADER_BYTES..total].try_into().expect("8 bytes"));
        return Ok((Part { group, entries: Vec::new(), fence: Some(epoch) }, total));
    }
    if flags != 0 {
        return Err(DecodeError::Malformed(format!("unknown part flags {flags:#x}")));
    }
    let mut body = bytes.slice(PART_HEADER_BYTES..total);
    // Every entry takes at least its header: a count above that is a lie,
    // and must not size an allocation.
    if count as usize > body_len / ENTRY_HEADER_BYTES {
        return Err(DecodeError::Malformed(format!("{count} entries cannot fit {body_len} bytes")));
    }
    let mut entries = Vec::with_capacity(count as usize);
    for i in 0..count {
        entries.push(decode_entry(&mut body).map_err(|e| match e {
            DecodeError::Malformed(m) => DecodeError::Malformed(format!("entry {i}: {m}")),
            e => e,
        })?);
    }
    if body.has_remaining() {
        return Err(DecodeError::Malformed(format!("{} bytes after the last entry", body.len())));
    }
    let first = entries.first().map_or(0, Entry::csn);
    if first != first_csn {
        return Err(DecodeError::Malformed(format!(
            "header says the first CSN is {first_csn}, the first entry has {first}"
        )));
    }
    Ok((Part { group, entries, fence: None }, total))
}

fn decode_entry(b: &mut Bytes) -> Result<Entry, DecodeError> {
    need(b, ENTRY_HEADER_BYTES)?;
    let kind = b.get_u8();
    if b[..3] != [0, 0, 0] {
        return Err(DecodeError::Malformed("reserved entry bytes are not zero".into()));
    }
    b.advance(3);
    let count = b.get_u32_le();
    let csn = b.get_u64_le();
    let dsn = b.get_u64_le();
    match kind {
        2 if count == 0 && dsn == 0 => return Ok(Entry::Abort { csn }),
        2 => return Err(DecodeError::Malformed("an abort entry with records or a DSN".into())),
        1 => {}
        k => return Err(DecodeError::Malformed(format!("unknown entry kind {k}"))),
    }
    if count as usize > b.remaining() / RECORD_HEADER_BYTES {
        return Err(DecodeError::Malformed(format!("{count} records cannot fit the body")));
    }
    // Check every record's structure now, so that `Records` can be read
    // without checks later; keep the bytes as they are.
    let start = b.clone();
    let mut len = 0usize;
    for _ in 0..count {
        need(b, RECORD_HEADER_BYTES)?;
        let h = &b[..RECORD_HEADER_BYTES];
        let op = h[0];
        if h[1] != 0 {
            return Err(DecodeError::Malformed("a reserved record byte is not zero".into()));
        }
        let key_len = usize::from(u16::from_le_bytes([h[2], h[3]]));
        let payload_len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
        let offset = u32::from_le_bytes([h[12], h[13], h[14], h[15]]);
        match op {
            op_code::INSERT | op_code::UPDATE | op_code::DELTA => {}
            op_code::DELETE if payload_len == 0 => {}
            op_code::DELETE => {
                return Err(DecodeError::Malformed("a delete with a payload".into()));
            }
            o => return Err(DecodeError::Malformed(format!("unknown record op {o}"))),
        }
        if offset != 0 && op != op_code::DELTA {
            return Err(DecodeError::Malformed("an offset on a record that is not a delta".into()));
        }
        b.advance(RECORD_HEADER_BYTES);
        need(b, key_len + payload_len)?;
        b.advance(key_len + payload_len);
        len += RECORD_HEADER_BYTES + key_len + payload_len;
    }
    Ok(Entry::Commit { csn, dsn, records: Records { bytes: start.slice(..len), count } })
}

/// Decode a segment: its parts in order. The first part that does not
/// decode ends the segment; it is returned with its byte offset, so
/// recovery can truncate a torn tail there (invariant 7).
pub fn decode_segment(bytes: &Bytes) -> (Vec<Part>, Option<(usize, DecodeError)>) {
    let (mut parts, mut at) = (Vec::new(), 0);
    while at < bytes.len() {
        match decode_part(&bytes.slice(at..)) {
            Ok((p, n)) => {
                parts.push(p);
                at += n;
            }
            Err(e) => return (parts, Some((at, e))),
        }
    }
    (parts, None)
}

/// Fuzz target: the part decoder on arbitrary bytes. It must never panic
/// or read out of bounds, and a part it accepts must re-encode to the same
/// bytes. Random bytes almost never carry a valid CRC32C, so the input is
/// also decoded with its checksum field recomputed ("resealed"), which
/// drives the fuzzer past the checksum into the entry and record parsers.
/// Run by `fuzz/` (cargo-fuzz, coverage-guided) and, for a fixed time on
/// every test run, by `tests/fuzz_targets.rs`.
pub fn fuzz_part(data: &[u8]) {
    fn check(data: &[u8]) {
        let bytes = Bytes::copy_from_slice(data);
        if let Ok((part, n)) = decode_part(&bytes) {
            let mut b = PartBuilder::new(part.group, 0);
            for e in &part.entries {
                b.push(e);
            }
            assert_eq!(&b.finish()[..], &data[..n], "a decoded part re-encodes to its bytes");
        }
        let _ = decode_segment(&bytes);
    }
    check(data);
    if data.len() >= PART_HEADER_BYTES {
        let mut v = data.to_vec();
        let body_len = u32::from_le_bytes([v[12], v[13], v[14], v[15]]) as usize;
        let end = PART_HEADER_BYTES.saturating_add(body_len).min(v.len());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&v[..28]), &v[PART_HEADER_BYTES..end]);
        v[28..32].copy_from_slice(&crc.to_le_bytes());
        check(&v);
    }
}

#[cfg(test)]
mod tests {
    //! Round trips: what `record` encodes, this module decodes.
    use super::*;

    fn b(s: &[u8]) -> Bytes {
        Bytes::copy_from_slice(s)
    }

    fn sample() -> Vec<Entry> {
        vec![
            Entry::Commit {
                csn: 7,
                dsn: 3,
                records: vec![
                    Record { table: 1, key: b(b"k1"), op: Op::Insert(b(b"v1")) },
                    Record {
                        table: 1,
                        key: b(b"k2"),
                        op: Op::Delta { offset: 8, bytes: b(b"\x01") },
                    },
                ]
                .into(),
            },
            Entry::Abort { csn: 8 },
            Entry::Commit {
                csn: 9,
                dsn: 7,
                records: vec![
                    Record { table: 2, key: b(b""), op: Op::Update(b(b"")) },
                    Record { table: 2, key: b(b"gone"), op: Op::Delete },
                ]
                .into(),
            },
        ]
    }

    fn part(entries: &[Entry]) -> Bytes {
        let mut p = PartBuilder::new(3, 0);
        for e in entries {
            p.push(e);
        }
        p.finish()
    }

    #[test]
    fn parts_round_trip_and_sizes_add_up() {
        let entries = sample();
        let bytes = part(&entries);
        let body: usize = entries.iter().map(Entry::encoded_len).sum();
        assert_eq!(bytes.len(), PART_HEADER_BYTES + body);
        let (p, n) = decode_part(&bytes).expect("decodes");
        assert_eq!(n, bytes.len());
        assert_eq!(p, Part { group: 3, entries, fence: None });
        let (p, n) = decode_part(&part(&[])).expect("an empty part");
        assert_eq!((p.entries.len(), n), (0, PART_HEADER_BYTES));
    }

    #[test]
    fn every_truncation_and_every_bit_flip_is_an_error() {
        let bytes = part(&sample());
        for cut in 0..bytes.len() {
            assert!(decode_part(&bytes.slice(..cut)).is_err(), "cut at {cut}");
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut v = bytes.to_vec();
                v[i] ^= 1 << bit;
                assert!(decode_part(&Bytes::from(v)).is_err(), "flip byte {i} bit {bit}");
            }
        }
    }

    #[test]
    fn a_torn_tail_ends_the_segment_at_its_offset() {
        let (a, c) = (part(&sample()[..1]), part(&sample()[1..]));
        let mut seg = a.to_vec();
        seg.extend_from_slice(&c[..c.len() - 5]);
        let (parts, tail) = decode_segment(&Bytes::from(seg));
        assert_eq!(parts.len(), 1);
        let (at, e) = tail.expect("a torn tail");
        assert_eq!(at, a.len());
        assert!(matches!(e, DecodeError::Truncated { .. }), "{e}");
    }

    #[test]
    fn foreign_and_future_parts_are_named() {
        assert!(matches!(decode_part(&Bytes::from(vec![b'P'; 64])), Err(DecodeError::BadMagic(_))));
        let mut v = part(&sample()).to_vec();
        v[4] = 2;
        assert_eq!(decode_part(&Bytes::from(v)), Err(DecodeError::UnsupportedVersion(2)));
    }
}
