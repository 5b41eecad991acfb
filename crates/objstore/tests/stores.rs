//! The stores' integration tests, as one test binary: each file of `tests/` is a module of
//! it (one link and one build of the shared code instead of one per file).

mod conformance_fs;
mod conformance_memory;
mod probe_detects_broken_appends;
mod s3_minio;
mod sim_store;
