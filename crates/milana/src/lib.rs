//! Sharded transactions after MILANA (Misra, Chase, Gehrke, Lebeck,
//! "Enabling Lightweight Transactions with Precision Time", ASPLOS 2017):
//! client-coordinated optimistic concurrency control with two-phase commit
//! across shard primaries, read-only transactions validated locally at the
//! client, and recovery that rebuilds a primary's transaction table from
//! its log and asks the other participants about what it cannot decide.
//!
//! The protocol is written without I/O, so that the deterministic
//! simulation ([`dst`]) and, later, the shard servers run the same code:
//!
//! | mechanism (MILANA) | where |
//! |---|---|
//! | versions ⟨timestamp, client id⟩ | [`types::CommitTs`] |
//! | hybrid clocks with skew ε at the clients | [`clock`] |
//! | latestRead / prepared / latestCommitted per key; Algorithm 1 (validation) | [`participant::Participant::prepare`] |
//! | each key's committed versions: in a map, or as engine rows under versioned keys (design record 0008) | [`versions`], `engine_versions` |
//! | the prepare, commit, abort and read-lease records | [`log`], their bytes [`codec`] |
//! | a shard's log on the engine (object store, quorum, fencing, standby) | [`shard_log`] |
//! | the shard map: versions on the store, published with conditional writes | [`shard_map`] |
//! | local validation of read-only transactions (§4.3) | [`coordinator::ClientTxn::locally_valid`] |
//! | the client as coordinator: one prepare per shard, the decision | [`coordinator::ClientTxn::prepares`], [`dst`] |
//! | cooperative termination (§4.5) | [`coordinator::terminate`], [`participant::Participant::status`] |
//! | a shard's durable tables: versions, the transaction table, the lease and forget bound | [`tables`] |
//! | recovery, Algorithm 2 (the merge), the latest-read pitfall: a restart from the tables | [`participant::Participant::restart`] |
//! | forgetting decided transactions below the watermark and every shard's oldest prepare | [`participant::Participant::forget`] |
//! | watermark garbage collection (§4.4) | [`participant::Participant::collect`] |
//!
//! The single-shard fast path: a transaction with one participant is
//! committed by that participant as soon as its prepare record is
//! durable, one round trip and one log write, no second phase.

pub mod clock;
pub mod codec;
pub mod coordinator;
pub mod dst;
#[cfg(feature = "engine")]
pub mod engine_versions;
pub mod log;
#[cfg(feature = "engine")]
pub mod net;
pub mod participant;
#[cfg(feature = "engine")]
pub mod shard_log;
pub mod shard_map;
pub mod tables;
pub mod types;
pub mod versions;
