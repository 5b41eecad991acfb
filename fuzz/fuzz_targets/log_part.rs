//! The log decoder on arbitrary bytes: it must never panic, never read out
//! of bounds, and anything it accepts must re-encode to the same bytes.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use milliscale::log::record::{PartBuilder, decode_part, decode_segment};

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    if let Ok((part, n)) = decode_part(&bytes) {
        let mut b = PartBuilder::new(part.group, 0);
        for e in &part.entries {
            b.push(e);
        }
        assert_eq!(&b.finish()[..], &data[..n], "a decoded part re-encodes to its bytes");
    }
    let _ = decode_segment(&bytes);
});
