//! Benchmarks for milliscale: workloads, the harness, and the one report
//! format every benchmark prints (human table, JSON, CSV row).

#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, rust_2018_idioms)]

pub mod emulator_bench;
pub mod failover;
pub mod feed_bench;
pub mod harness;
pub mod index_bench;
pub mod keys;
pub mod pages;
pub mod plot;
pub mod replica_bench;
pub mod report;
pub mod retwis;
pub mod rss;
pub mod scan_bench;
pub mod store_bench;
pub mod sweep;
mod sweep_config;
pub mod tpcc;
pub mod variant;
pub mod ycsb;
mod ycsb_baselines;
pub mod ycsb_server;
pub mod ycsb_tasks;
pub mod ycsb_workload;
