//! The protocol core of a cluster's transactions, after MILANA (Misra,
//! Chase, Gehrke, Lebeck, "Enabling Lightweight Transactions with
//! Precision Time", ASPLOS 2017): client-coordinated optimistic
//! concurrency control with two-phase commit across shards, read-only
//! transactions validated locally at the client, and recovery that
//! rebuilds a shard's transaction table from its tables and asks the other
//! participants about what it cannot decide.
//!
//! The rules are written without I/O: the server's shards
//! (`crates/server/src/shard`), the cluster client
//! (`crates/client/src/cluster.rs`) and the deterministic simulation
//! ([`dst`]) run the same code (design record 0008):
//!
//! | mechanism (MILANA) | where |
//! |---|---|
//! | versions ⟨timestamp, client id⟩; a table's key in the cluster's key space | [`types::CommitTs`], [`types::cluster_key`] |
//! | hybrid clocks with skew ε at the clients | [`clock`] |
//! | latestRead / prepared / latestCommitted per key; Algorithm 1 (validation) | [`participant::Participant::prepare`] |
//! | each key's committed versions: in a map, or as engine rows under versioned keys | [`versions`], `engine_versions` |
//! | the prepare, commit, abort, read-lease and forget records | [`log`], their bytes [`codec`] |
//! | a shard's durable tables: versions, the transaction table, the lease and forget bound | [`tables`] |
//! | the shard map: versions on the store, published with conditional writes | [`shard_map`] |
//! | local validation of read-only transactions (§4.3) | [`coordinator::ClientTxn::locally_valid`] |
//! | the client as coordinator: one prepare per shard, the decision | [`coordinator::ClientTxn::prepares`], [`dst`] |
//! | cooperative termination (§4.5) | [`coordinator::terminate`], [`participant::Participant::status`] |
//! | recovery, Algorithm 2 (the merge), the latest-read pitfall: a restart from the tables | [`participant::Participant::restart`] |
//! | watermark garbage collection (§4.4) | [`participant::Participant::collect`] |
//! | forgetting decided transactions below the watermark and every shard's oldest undecided | [`participant::Participant::forget`] |
//!
//! The single-shard fast path: a transaction with one participant is
//! validated and committed by that participant at once
//! ([`participant::Participant::commit_alone`]), its prepare and commit
//! made durable in one write, one round trip, no second phase; a read of
//! its versions is answered once that write is durable ([`fresh`]).
//!
//! Without its default feature `engine` the crate is the core alone (no
//! engine, no store): what the cluster client builds.

pub mod clock;
pub mod codec;
pub mod coordinator;
pub mod dst;
#[cfg(feature = "engine")]
pub mod engine_versions;
pub mod fresh;
pub mod log;
#[cfg(feature = "engine")]
pub mod map_lease;
pub mod participant;
pub mod shard_map;
pub mod tables;
pub mod types;
pub mod versions;
