//! The engine's integration tests, as one test binary: each file of
//! `tests/` is a module of it (one link and one build of the shared code
//! instead of one per file). `tracing_spans.rs` stays a binary of its own:
//! it installs a process-wide tracing subscriber.

#[macro_use]
mod common;

mod api_errors_and_limits;
mod async_api;
mod commit_autonomous;
mod commit_dependency;
mod commit_durability;
mod commit_flush_target;
mod commit_log_layout;
mod drop_table;
mod feed;
mod feed_points;
mod format_compatibility;
mod fuzz_targets;
mod history_disasters;
mod history_window;
mod log_record;
mod log_segments;
mod log_segments_s3;
mod mvcc_gc_keeps_chains_short;
mod mvcc_matches_btreemap_model;
mod mvcc_readers_skip_replaced_versions;
mod mvcc_reclaims_deleted_keys;
mod quorum_recovery;
mod recovery_corruption;
mod recovery_log;
#[cfg(feature = "sim")]
mod replay;
mod replica;
mod replica_tail;
mod txn_bank_transfers_keep_total;
mod txn_row_hints;
mod txn_scan_iterators;
mod txn_write_skew;
