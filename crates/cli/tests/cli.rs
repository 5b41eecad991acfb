//! The CLI's integration tests (they run the `milliscale` binary), as one test binary: each file of `tests/` is a module of
//! it (one link and one build of the shared code instead of one per file).

mod bank_kill;
mod bench_server;
mod changes;
mod cli_usage;
mod cluster_change;
mod cluster_changes;
mod cluster_move;
mod config_file;
mod credentials;
mod emulator_clients;
mod fencing;
mod history_moves;
mod inspect;
mod metrics_endpoint;
mod move_kill;
mod rebalance;
mod shard_kill;
mod standby_kill;
