//! The log part decoder (`milliscale::internals::fuzz::fuzz_part`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| milliscale::internals::fuzz::fuzz_part(data));
