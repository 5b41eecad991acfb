//! How the server's refusals and the engine's errors reach a client: a
//! gRPC status code, a message that says what to do, and two metadata
//! keys a client can act on without parsing the message:
//! `milliscale-error` (the kind) and `milliscale-retryable: true` (run the
//! whole transaction again).
//!
//! | engine error / refusal       | status              | kind          | retryable |
//! |------------------------------|---------------------|---------------|-----------|
//! | `Conflict`                   | ABORTED             | conflict      | yes       |
//! | `TooManyTransactions`        | RESOURCE_EXHAUSTED  | busy          | yes       |
//! | a server cap (open txns)     | RESOURCE_EXHAUSTED  | limit         | yes       |
//! | idle transaction aborted     | ABORTED             | expired       | yes       |
//! | `StoreUnavailable`           | UNAVAILABLE         | unavailable   | no        |
//! | `Closed`, shutting down      | UNAVAILABLE         | closed        | no        |
//! | `Stale` (replica behind)     | UNAVAILABLE         | stale         | yes       |
//! | `Fenced`                     | FAILED_PRECONDITION | fenced        | no        |
//! | writes to a replica / a read-only token | PERMISSION_DENIED / FAILED_PRECONDITION | read_only | no |
//! | `Corrupt`                    | DATA_LOSS           | corruption    | no        |
//! | `InvalidArgument`            | INVALID_ARGUMENT    | invalid_input | no        |
//! | `TableExists`                | ALREADY_EXISTS      | invalid_input | no        |
//! | `NotFound`, `TableNotFound`, unknown transaction | NOT_FOUND | not_found | no |
//! | `Store`                      | INTERNAL            | store         | no        |
//! | a stream's answer over the message limit | OUT_OF_RANGE | limit | no |
//! | a cluster key this shard does not own | FAILED_PRECONDITION | wrong_shard | yes (reload the map) |
//! | a shard's read below its collected versions | ABORTED | stale | yes (past `milliscale-floor`) |
//! | a shard's call on a server that is no shard, a single server's call on a shard | FAILED_PRECONDITION | cluster | no |

use std::time::Duration;

use milliscale::{Error, ErrorKind};
use tonic::{Code, Status};

/// A refusal on its way to the client.
pub type Refusal = Status;

/// The metadata key naming the error's kind.
pub const KIND_KEY: &str = "milliscale-error";
/// The metadata key set to `true` on errors a client may retry.
pub const RETRYABLE_KEY: &str = "milliscale-retryable";

fn status(code: Code, kind: &'static str, retryable: bool, message: String) -> Status {
    let mut s = Status::new(code, message);
    s.metadata_mut().insert(KIND_KEY, tonic::metadata::MetadataValue::from_static(kind));
    if retryable {
        s.metadata_mut().insert(RETRYABLE_KEY, tonic::metadata::MetadataValue::from_static("true"));
    }
    s
}

/// The kind a status names (`milliscale-error`), if any.
pub fn kind_of(s: &Status) -> Option<&str> {
    s.metadata().get(KIND_KEY).and_then(|v| v.to_str().ok())
}

/// The status for an engine error.
pub fn engine(e: &Error) -> Status {
    let msg = e.to_string();
    match e {
        Error::Conflict(_) => status(Code::Aborted, "conflict", true, msg),
        Error::TooManyTransactions(_) => status(Code::ResourceExhausted, "busy", true, msg),
        Error::Stale { .. } => status(Code::Unavailable, "stale", true, msg),
        Error::TableExists(_) => status(Code::AlreadyExists, "invalid_input", false, msg),
        Error::ChangesGone { .. } => status(Code::OutOfRange, "cursor", false, msg),
        // Opened again after its cursor, the feed goes on.
        Error::FeedTooSlow { .. } => status(Code::Aborted, "feed_too_slow", true, msg),
        _ => match e.kind() {
            ErrorKind::Unavailable => status(Code::Unavailable, "unavailable", false, msg),
            ErrorKind::Closed => status(Code::Unavailable, "closed", false, msg),
            ErrorKind::Fenced => status(Code::FailedPrecondition, "fenced", false, msg),
            ErrorKind::Corruption => status(Code::DataLoss, "corruption", false, msg),
            ErrorKind::InvalidInput => status(Code::InvalidArgument, "invalid_input", false, msg),
            ErrorKind::NotFound => status(Code::NotFound, "not_found", false, msg),
            ErrorKind::Retryable => status(Code::Aborted, "conflict", true, msg),
            ErrorKind::Stale => status(Code::Unavailable, "stale", true, msg),
            _ => status(Code::Internal, "store", false, msg),
        },
    }
}

/// A status as one answer of a stream (`ExecuteStream`): the same code,
/// message, kind and retry flag a call's status and metadata carry.
pub fn failure(s: &Status) -> milliscale_proto::v1::Failure {
    let meta = |k: &str| s.metadata().get(k).and_then(|v| v.to_str().ok()).map(str::to_owned);
    milliscale_proto::v1::Failure {
        code: s.code() as i32,
        message: s.message().to_owned(),
        kind: meta(KIND_KEY).unwrap_or_default(),
        retryable: meta(RETRYABLE_KEY).as_deref() == Some("true"),
        floor: meta(refuse::FLOOR_KEY).and_then(|v| v.parse().ok()).unwrap_or(0),
        map_version: meta(refuse::MAP_VERSION_KEY).and_then(|v| v.parse().ok()).unwrap_or(0),
    }
}

/// The server's own refusals.
pub mod refuse {
    use super::*;

    pub fn limit(message: String) -> Status {
        status(Code::ResourceExhausted, "limit", true, message)
    }

    pub fn expired(id: u64, idle: Duration) -> Status {
        status(
            Code::Aborted,
            "expired",
            true,
            format!(
                "transaction {id:#x} was aborted after {} s idle (the server's idle timeout); \
                 run it again",
                idle.as_secs_f64()
            ),
        )
    }

    pub fn disconnected(id: u64) -> Status {
        status(
            Code::Aborted,
            "expired",
            true,
            format!(
                "transaction {id:#x} was aborted when the connection that began it closed; \
                 run it again"
            ),
        )
    }

    pub fn no_transaction(id: u64) -> Status {
        status(
            Code::NotFound,
            "not_found",
            false,
            format!("no open transaction {id:#x} (it committed, aborted or never began)"),
        )
    }

    pub fn invalid(message: impl Into<String>) -> Status {
        status(Code::InvalidArgument, "invalid_input", false, message.into())
    }

    pub fn read_only_token(what: &str) -> Status {
        status(
            Code::PermissionDenied,
            "read_only",
            false,
            format!("{what} writes, and this token is read-only"),
        )
    }

    pub fn read_only_txn(what: &str) -> Status {
        status(
            Code::FailedPrecondition,
            "read_only",
            false,
            format!("{what} writes, and the transaction is read-only"),
        )
    }

    pub fn replica(what: &str) -> Status {
        status(
            Code::FailedPrecondition,
            "read_only",
            false,
            format!("{what} writes, and this server is a read replica; send writes to the writer"),
        )
    }

    pub fn unauthenticated(message: &str) -> Status {
        status(Code::Unauthenticated, "unauthenticated", false, message.to_owned())
    }

    pub fn shutting_down() -> Status {
        status(Code::Unavailable, "closed", false, "the server is shutting down".into())
    }

    /// A write that would take an interactive transaction over the
    /// server's limit on what one transaction writes.
    pub fn txn_too_large(written: u64, adding: u64, max: u64) -> Status {
        status(
            Code::ResourceExhausted,
            "limit",
            false,
            format!(
                "this write of {adding} bytes would take the transaction past the server's \
                 limit of {max} bytes written by one transaction (--max-txn-bytes; it has \
                 written {written}); the write did not run (nor a commit it came with): split \
                 the work into smaller transactions"
            ),
        )
    }

    pub fn too_large(len: usize, max: usize) -> Status {
        status(
            Code::OutOfRange,
            "limit",
            false,
            format!(
                "the answer is {len} bytes, over the message limit of {max}; it committed, but \
                 read less per batch to see it"
            ),
        )
    }

    /// A one-shot batch asked again after its range moved away, which had
    /// committed here the first time: its outcome, not a refusal to run it
    /// again.
    pub fn committed_unreadable() -> Status {
        status(
            Code::Unavailable,
            "unknown",
            false,
            "the batch committed here before its range moved away, and its answer was lost; \
             its results cannot be read again (do not run it again)"
                .into(),
        )
    }

    pub fn timeout(message: String) -> Status {
        status(Code::DeadlineExceeded, "timeout", true, message)
    }

    /// The metadata key of a shard's map version, on a wrong-shard refusal.
    pub const MAP_VERSION_KEY: &str = "milliscale-map-version";
    /// The metadata key of a shard's collection floor, on a stale read.
    pub const FLOOR_KEY: &str = "milliscale-floor";

    pub fn wrong_shard(message: String, map_version: u64) -> Status {
        let mut s = status(Code::FailedPrecondition, "wrong_shard", true, message);
        s.metadata_mut().insert(MAP_VERSION_KEY, map_version.into());
        s
    }

    pub fn stale_read(at: u64, floor: u64) -> Status {
        let mut s = status(
            Code::Aborted,
            "stale",
            true,
            format!(
                "snapshot too old: read at {at}, versions below {floor} are no longer held \
                 (collected, or from before the shard's restart); begin again (the client's \
                 clock moves past the floor)"
            ),
        );
        s.metadata_mut().insert(FLOOR_KEY, floor.into());
        s
    }

    pub fn not_a_shard(what: &str) -> Status {
        status(
            Code::FailedPrecondition,
            "cluster",
            false,
            format!("{what} is a cluster shard's call, and this server is no shard (no --cluster)"),
        )
    }

    pub fn a_shard(what: &str, shard: u32) -> Status {
        status(
            Code::FailedPrecondition,
            "cluster",
            false,
            format!(
                "{what}: this server is shard {shard} of a cluster, whose rows are read and \
                 written through a cluster client (milliscale_client::Cluster, or \
                 milliscale.connect_cluster in Python)"
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflicts_are_retryable_aborts_and_outages_are_unavailable() {
        let c = engine(&Error::Conflict(milliscale::ConflictKind::WriteWrite));
        assert_eq!(c.code(), Code::Aborted);
        assert_eq!(c.metadata().get(RETRYABLE_KEY).and_then(|v| v.to_str().ok()), Some("true"));
        let u = engine(&Error::StoreUnavailable("down".into()));
        assert_eq!(u.code(), Code::Unavailable);
        assert!(u.metadata().get(RETRYABLE_KEY).is_none());
        assert_eq!(u.metadata().get(KIND_KEY).and_then(|v| v.to_str().ok()), Some("unavailable"));
        assert_eq!(engine(&Error::TableNotFound("t".into())).code(), Code::NotFound);
        assert_eq!(engine(&Error::TableExists("t".into())).code(), Code::AlreadyExists);
        assert_eq!(engine(&Error::Corrupt("x".into())).code(), Code::DataLoss);
        assert_eq!(engine(&Error::Fenced("x".into())).code(), Code::FailedPrecondition);
    }

    #[test]
    fn a_stream_failure_carries_what_the_status_and_metadata_say() {
        let f = failure(&engine(&Error::Conflict(milliscale::ConflictKind::WriteWrite)));
        assert_eq!(
            (f.code, f.kind.as_str(), f.retryable),
            (Code::Aborted as i32, "conflict", true)
        );
        let f = failure(&refuse::shutting_down());
        assert_eq!(
            (f.code, f.kind.as_str(), f.retryable),
            (Code::Unavailable as i32, "closed", false)
        );
        assert_eq!(f.message, "the server is shutting down");
    }
}
