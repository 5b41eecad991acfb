//! Peers for milliscale's benchmarks.
//!
//! - [`object_store_adapter`]: any milliscale object store (`sim://s3x`
//!   with its latency model and accounting, `file://`, `memory://`) as an
//!   `object_store::ObjectStore`, so another engine runs on the very same
//!   store in the same process.
//! - [`slatedb_ycsb`]: the YCSB operations of `milliscale bench ycsb`
//!   through SlateDB 0.18 transactions, each acknowledged at
//!   `await_durable`.

#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, rust_2018_idioms)]

pub mod object_store_adapter;
pub mod slatedb_ycsb;
