//! The log decoder on arbitrary bytes: it must never panic, never read out
//! of bounds, and anything it accepts must re-encode to the same bytes.
//!
//! Random bytes almost never carry a valid CRC32C, so each input is also
//! decoded once more with its checksum field recomputed ("resealed"): that
//! drives the fuzzer past the checksum into the entry and record parsers.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use milliscale::log::record::{PART_HEADER_BYTES, PartBuilder, decode_part, decode_segment};

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

fuzz_target!(|data: &[u8]| {
    check(data);
    if data.len() >= PART_HEADER_BYTES {
        let mut v = data.to_vec();
        let body_len = u32::from_le_bytes(v[12..16].try_into().expect("4 bytes")) as usize;
        let end = PART_HEADER_BYTES.saturating_add(body_len).min(v.len());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&v[..28]), &v[PART_HEADER_BYTES..end]);
        v[28..32].copy_from_slice(&crc.to_le_bytes());
        check(&v);
    }
});
