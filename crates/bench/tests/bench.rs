//! The bench crate's tests, as one test binary: each file of `tests/` is a
//! module, named after the module of `src/` it tests (`tpcc_remote.rs`
//! tests `tpcc::remote`). The library itself builds no test target
//! (`[lib] test = false`): compiling the whole crate a second time with the
//! test harness took longer than any other unit of the test command.
//!
//! Run one module's tests with `cargo test -p milliscale-bench --test
//! bench sweep::`.

mod index_bench;
mod keys;
mod pages;
mod plot;
mod report;
mod scan_bench;
mod store_bench;
mod sweep;
mod tpcc;
mod tpcc_random;
mod tpcc_remote;
mod variant;
mod ycsb;
