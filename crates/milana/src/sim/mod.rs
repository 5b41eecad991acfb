//! A deterministic simulation of MILANA: shard primaries with logs that
//! become durable after a delay and lose their tail in a crash, clients
//! with skewed hybrid clocks running a bank across the shards, a network
//! that delays, drops and partitions, and coordinators that die
//! mid-commit. One seed drives everything; the same seed replays the same
//! history (its hash is in the report).
//!
//! One event queue, ordered by (time, sequence number), and only ordered
//! maps: nothing depends on a hash seed or a thread. The oracle
//! ([`oracle`]) runs at the end, after a quiet period in which every shard
//! is up and nothing is dropped.

mod client;
pub mod oracle;
mod primary;
mod world;

pub use world::{Outcome, Reported, SimConfig, SimReport, run};
