//! Benchmarks for milliscale: workloads, the harness, and the one report
//! format every benchmark prints (human table, JSON, CSV row).

pub mod index_bench;
pub mod keys;
pub mod report;
pub mod rss;
pub mod ycsb;
