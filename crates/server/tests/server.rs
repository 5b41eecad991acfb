//! The server's integration tests, as one test binary (one build and one
//! link instead of one per file): each file of `tests/` is a module.
//! - `calls.rs`: tables, transactions at each isolation level, one-shot
//!   batches, conflicts and retry, auth, caps, idle expiry, limits and
//!   read-your-writes on a replica;
//! - `cluster.rs`: three shards (`--cluster`) reached by the cluster
//!   client: a bank across them, write skew, a shard's restart;
//! - `cluster_batches.rs`: one-shot batches racing on one shard's keys;
//! - `cluster_freeze.rs`: a range frozen, copied and moved, and its freeze
//!   settled by the map;
//! - `cluster_loads.rs`: each range's rows and requests, for the rebalancer;
//! - `cluster_standby.rs`: a shard's standby as `Cluster::status` shows it;
//! - `cluster_stream.rs`: a cluster client's calls to a shard on one stream;
//! - `cluster_waited.rs`: a call that waited while its range moved away;
//! - `connections.rs`: connections, TLS, the standard services, shutdown;
//! - `changes.rs`: the change feed (`Changes`);
//! - `first_call.rs`: a transaction begun by its first call;
//! - `fuzz.rs`: bad input, seeded.
//!
//! Run one file's tests with `cargo test -p milliscale-server --test
//! server calls::`.

mod call_stream;
mod calls;
mod changes;
mod cluster;
mod cluster_batches;
mod cluster_clients;
mod cluster_feed;
mod cluster_fixture;
mod cluster_freeze;
mod cluster_loads;
mod cluster_past;
mod cluster_standby;
mod cluster_stream;
mod cluster_waited;
mod common;
mod connections;
mod first_call;
mod fuzz;
