//! The engine's one public error type.
//!
//! Each variant tells the caller what to do: `Conflict` means retry the
//! transaction; `InvalidArgument`, `NotFound`, `TableNotFound` and
//! `TableExists` mean fix the call; `NoDatabase` means check the store's
//! address (or ask for a new database); `Closed` means the database is gone;
//! `TooManyTransactions` means wait for other transactions to finish;
//! `Stale` means a replica is behind the session's token.

use std::fmt;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why an operation failed. [`Error::kind`] sorts the variants into the
/// few things a caller does about them; the variant keeps the detail.
/// More variants may come: match on `kind()`, or keep a `_` arm.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A concurrent transaction touched the same data first. The transaction
    /// is finished: drop it and run it again.
    #[error("transaction conflict: {0}; retry the transaction")]
    Conflict(ConflictKind),
    /// The caller passed something out of range (a key or value too large, an
    /// offset past the end of a value, a table of another database, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// `update_range` on a key that has no visible value.
    #[error("key not found")]
    NotFound,
    /// No table with this name exists.
    #[error("table {0:?} does not exist")]
    TableNotFound(String),
    /// `create_table` with a name already taken.
    #[error("table {0:?} already exists")]
    TableExists(String),
    /// Every transaction slot is in use (see [`crate::Options::max_transactions`]).
    #[error(
        "all {0} transaction slots are in use; finish some transactions or raise Options::max_transactions"
    )]
    TooManyTransactions(usize),
    /// The database was closed; no further work is accepted.
    #[error("the database is closed")]
    Closed,
    /// The log's stores stayed unavailable past the deadline (or too few
    /// are left for a quorum). The database is poisoned: no commit that was
    /// not yet acknowledged will be, and every later commit fails. Reopen
    /// the database (recovery) once the stores are back.
    #[error("log store unavailable; the database accepts no more commits: {0}")]
    StoreUnavailable(String),
    /// Another writer took over the log. This database can acknowledge
    /// nothing more.
    #[error("fenced: another writer owns the log: {0}")]
    Fenced(String),
    /// The log (or another object) is damaged where damage cannot be a torn
    /// tail; the message names the object. Nothing past it can be trusted.
    #[error("corrupt: {0}")]
    Corrupt(String),
    /// The stores hold no database (no `manifest/` objects) and the caller
    /// did not ask for a new one ([`crate::Options::create_if_missing`]).
    /// Most often a mistyped store URL or prefix.
    #[error("no database at {0} (no manifest/ objects); check the address, or create one")]
    NoDatabase(String),
    /// A read replica had not applied the commit a session asked for
    /// (`Replica::begin_at`) within the deadline. Wait and retry, read
    /// from another replica, or read from the writer.
    #[error(
        "replica is stale: CSN {token} not applied within {waited:?}; it has applied every CSN \
         below {applied} and seen the log up to CSN {seen}"
    )]
    Stale {
        /// The token asked for: a commit's CSN.
        token: u64,
        /// The replica's applied CSN: every commit below it is visible.
        applied: u64,
        /// The largest CSN the replica has read from the log.
        seen: u64,
        /// How long it waited.
        waited: std::time::Duration,
    },
    /// A store could not be used at open (a bad URL, a refused request, a
    /// log that is already there).
    #[error("store error: {0}")]
    Store(String),
    /// A change feed cannot deliver the changes after `cursor`: they are
    /// no longer in the log it reads (covered by a checkpoint). `oldest`
    /// is the oldest cursor it can resume from. Never a silent gap.
    #[error(
        "the changes after CSN {cursor} are not in the log this feed reads: the oldest cursor it \
         can resume from is {oldest}"
    )]
    ChangesGone {
        /// The cursor asked for (or the last one delivered).
        cursor: u64,
        /// The oldest cursor the feed can resume from.
        oldest: u64,
    },
    /// A change feed's consumer did not take its changes for `held` while
    /// other feeds shared its follower and waited: the follower let it go.
    /// Open it again after `cursor` (every transaction at or below it was
    /// delivered).
    #[error(
        "this change feed's consumer held the follower it shares with other feeds back for \
         {held:?} and was let go: open it again after CSN {cursor}"
    )]
    FeedTooSlow {
        /// Every transaction at or below it was delivered.
        cursor: u64,
        /// How long it held the others back.
        held: std::time::Duration,
    },
}

/// What kind of conflict aborted a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConflictKind {
    /// Another transaction holds an uncommitted version of the record
    /// (first-updater-wins).
    WriteWrite,
    /// A version committed after this transaction's snapshot was found where
    /// this transaction wanted to write (first-updater-wins under snapshot isolation).
    SnapshotTooOld,
    /// Serializable validation found that a record or range read by this
    /// transaction changed before its commit point.
    ReadValidation,
    /// An earlier operation of this transaction already failed with a conflict.
    Doomed,
}

impl fmt::Display for ConflictKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            ConflictKind::WriteWrite => "another transaction is writing this record",
            ConflictKind::SnapshotTooOld => "the record changed after this transaction's snapshot",
            ConflictKind::ReadValidation => "serializable validation failed",
            ConflictKind::Doomed => "an earlier operation of this transaction conflicted",
        };
        f.write_str(s)
    }
}

/// What a caller does about an [`Error`]: the small, stable sorting of
/// its variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Run the transaction again (`Conflict`, `TooManyTransactions`); for a
    /// change feed let go (`FeedTooSlow`), open it again after its cursor.
    Retryable,
    /// The stores cannot make commits durable; the database accepts no
    /// more (`StoreUnavailable`): reopen it once they are back.
    Unavailable,
    /// Another writer took the database over (`Fenced`).
    Fenced,
    /// Stored data is damaged where damage cannot be a torn tail
    /// (`Corrupt`).
    Corruption,
    /// The call was wrong: fix it (`InvalidArgument`, `TableExists`).
    InvalidInput,
    /// What was asked for is not there (`NotFound`, `TableNotFound`,
    /// `NoDatabase`).
    NotFound,
    /// The database was closed (`Closed`).
    Closed,
    /// A replica has not caught up with a token yet (`Stale`): wait, or
    /// read elsewhere.
    Stale,
    /// A store could not be used at open (`Store`): a bad address,
    /// refused credentials.
    Store,
}

impl Error {
    /// True if running the same transaction again may succeed.
    pub fn is_retryable(&self) -> bool {
        self.kind() == ErrorKind::Retryable
    }

    /// What to do about this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Conflict(_) | Error::TooManyTransactions(_) | Error::FeedTooSlow { .. } => {
                ErrorKind::Retryable
            }
            Error::StoreUnavailable(_) => ErrorKind::Unavailable,
            Error::Fenced(_) => ErrorKind::Fenced,
            Error::Corrupt(_) => ErrorKind::Corruption,
            Error::InvalidArgument(_) | Error::TableExists(_) | Error::ChangesGone { .. } => {
                ErrorKind::InvalidInput
            }
            Error::NotFound | Error::TableNotFound(_) | Error::NoDatabase(_) => ErrorKind::NotFound,
            Error::Closed => ErrorKind::Closed,
            Error::Stale { .. } => ErrorKind::Stale,
            Error::Store(_) => ErrorKind::Store,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_the_kind_its_docs_give() {
        let cases = [
            (Error::Conflict(ConflictKind::WriteWrite), ErrorKind::Retryable),
            (Error::TooManyTransactions(1), ErrorKind::Retryable),
            (Error::StoreUnavailable("s".into()), ErrorKind::Unavailable),
            (Error::Fenced("f".into()), ErrorKind::Fenced),
            (Error::Corrupt("c".into()), ErrorKind::Corruption),
            (Error::InvalidArgument("i".into()), ErrorKind::InvalidInput),
            (Error::TableExists("t".into()), ErrorKind::InvalidInput),
            (Error::NotFound, ErrorKind::NotFound),
            (Error::TableNotFound("t".into()), ErrorKind::NotFound),
            (Error::NoDatabase("d".into()), ErrorKind::NotFound),
            (Error::Closed, ErrorKind::Closed),
            (Error::Store("s".into()), ErrorKind::Store),
            (Error::ChangesGone { cursor: 1, oldest: 9 }, ErrorKind::InvalidInput),
            (
                Error::FeedTooSlow { cursor: 1, held: std::time::Duration::from_secs(1) },
                ErrorKind::Retryable,
            ),
        ];
        for (e, kind) in cases {
            assert_eq!(e.kind(), kind, "{e}");
            assert_eq!(e.is_retryable(), kind == ErrorKind::Retryable, "{e}");
        }
        let stale = Error::Stale { token: 1, applied: 0, seen: 0, waited: Default::default() };
        assert_eq!(stale.kind(), ErrorKind::Stale);
    }
}
