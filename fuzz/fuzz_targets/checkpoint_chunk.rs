//! The checkpoint chunk and offer decoders
//! (`milliscale::internals::fuzz::fuzz_chunk`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| milliscale::internals::fuzz::fuzz_chunk(data));
