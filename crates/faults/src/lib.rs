//! Crash and fault simulation for Milliscale: everything that kills,
//! injects or corrupts, and the oracles that check what survived.
//!
//! - [`crash_store`]: a memory store with a seeded fault schedule and a
//!   crash point (a write dropped, landed but unanswered, torn, or
//!   overtaken), the store of the crash and replica simulations
//!   (`tests/crash.rs`, `tests/replica.rs`);
//! - [`bank`]: the bank workload (transfers that keep a total) and its
//!   auditor, which `milliscale bench bank` runs and the kill -9 trials
//!   crash;
//! - [`kill_bank`], [`kill_standby`]: the kill -9 harnesses, which start
//!   the shipped `milliscale` binary, kill it at a seeded moment and check
//!   the recovered (or promoted) database against the client's journal.
//!   Their test entry points are in `crates/cli/tests/`, because only the
//!   crate that builds the binary can name it.
//!
//! README.md says what each simulation seeds and what it does not.

#![deny(clippy::unwrap_used, rust_2018_idioms)]

pub mod bank;
pub mod crash_store;
pub mod kill_bank;
pub mod kill_standby;

use std::path::PathBuf;
use std::sync::Arc;

/// Accounts in the kill trials' bank, and each one's starting balance.
const ACCOUNTS: u64 = 100;
const INITIAL: u64 = 1_000_000;

/// Where a kill trial's database lives.
struct Target {
    /// The `milliscale` binary under test.
    bin: PathBuf,
    /// The URL the bank process logs to.
    url: String,
    /// Extra environment for the bank process.
    env: Vec<(&'static str, String)>,
    /// How this process opens it.
    store: Arc<dyn objstore::ObjectStore>,
}

/// The seeds a simulation runs: `MILLISCALE_SIM_SEEDS` of them (default
/// `default_count`) from `MILLISCALE_SIM_FIRST_SEED` (default 0).
pub fn seeds_from_env(default_count: u64) -> std::ops::Range<u64> {
    let var = |name: &str, default: u64| {
        std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
    };
    let first = var("MILLISCALE_SIM_FIRST_SEED", 0);
    first..first + var("MILLISCALE_SIM_SEEDS", default_count)
}
