//! The manifest decoder (`milliscale::internals::fuzz::fuzz_manifest`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| milliscale::internals::fuzz::fuzz_manifest(data));
