//! The one configuration type for a database.

use crate::error::{Error, Result};
use crate::limits::TRANSACTIONS_MAX;

/// Transaction isolation levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Each read sees the latest committed version; writes still follow
    /// first-updater-wins against uncommitted versions.
    ReadCommitted,
    /// Reads see the snapshot taken at `begin`; a write over a version
    /// committed after that snapshot aborts (first-updater-wins).
    #[default]
    Snapshot,
    /// Snapshot isolation plus read-set and scan-set validation at commit:
    /// the transaction commits only if everything it read is still the latest
    /// committed state at its commit point (its CSN).
    Serializable,
}

/// Options for [`crate::Database::open`].
#[derive(Debug, Clone)]
pub struct Options {
    pub(crate) store: String,
    pub(crate) max_transactions: usize,
    pub(crate) isolation: Isolation,
}

impl Default for Options {
    fn default() -> Self {
        Options { store: "none".to_owned(), max_transactions: 1024, isolation: Isolation::Snapshot }
    }
}

impl Options {
    /// Default options: no log (`store("none")`), 1,024 transaction slots,
    /// snapshot isolation.
    pub fn new() -> Options {
        Options::default()
    }

    /// Where the log goes. Only `"none"` (no logging: commits are
    /// acknowledged at pre-commit and nothing survives the process) is
    /// available in this version; object-store URLs come with the log.
    pub fn store(mut self, url: impl Into<String>) -> Options {
        self.store = url.into();
        self
    }

    /// How many transactions may run at once (1..=65,536). Default 1,024.
    pub fn max_transactions(mut self, n: usize) -> Options {
        self.max_transactions = n;
        self
    }

    /// Isolation level of [`crate::Database::begin`]. Default snapshot.
    pub fn isolation(mut self, isolation: Isolation) -> Options {
        self.isolation = isolation;
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.max_transactions == 0 || self.max_transactions > TRANSACTIONS_MAX {
            return Err(Error::InvalidArgument(format!(
                "max_transactions must be in 1..={TRANSACTIONS_MAX}, got {}",
                self.max_transactions
            )));
        }
        if self.store != "none" {
            return Err(Error::InvalidArgument(format!(
                "store {:?} is not supported by this version; use \"none\"",
                self.store
            )));
        }
        Ok(())
    }
}

/// Per-transaction options for [`crate::Database::begin_with`].
#[derive(Debug, Clone, Copy, Default)]
pub struct TxnOptions {
    /// The isolation level; `None` uses the database default.
    pub isolation: Option<Isolation>,
    /// Refuse writes. A read-only transaction never takes a CSN.
    pub read_only: bool,
}

impl TxnOptions {
    /// Options with the given isolation level.
    pub fn isolation(isolation: Isolation) -> TxnOptions {
        TxnOptions { isolation: Some(isolation), read_only: false }
    }

    /// A read-only transaction at the database's default isolation.
    pub fn read_only() -> TxnOptions {
        TxnOptions { isolation: None, read_only: true }
    }
}
