//! The client's error: the server's status code, the engine's error kind
//! from the `milliscale-error` metadata, and whether the transaction may
//! be run again (`milliscale-retryable`).

use std::future::Future;
use std::time::Duration;

/// Result alias of the client.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a call failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message} ({kind}, {code:?})")]
pub struct Error {
    code: tonic::Code,
    kind: String,
    retryable: bool,
    message: String,
    /// For a cluster's `wrong_shard`: the map version the shard named
    /// (the one it serves under, or the one a move in flight publishes).
    map_version: u64,
}

impl Error {
    fn new(code: tonic::Code, kind: &str, retryable: bool, message: String) -> Error {
        Error { code, kind: kind.into(), retryable, message, map_version: 0 }
    }

    /// An error raised in the client itself (bad address, no connection).
    pub(crate) fn local(message: String) -> Error {
        Error::new(tonic::Code::Unavailable, "client", false, message)
    }

    /// A cluster transaction that failed validation: nothing of it
    /// committed; run it again.
    pub(crate) fn conflict(message: String) -> Error {
        Error::new(tonic::Code::Aborted, "conflict", true, message)
    }

    /// A shard that did not answer before anything was prepared: nothing
    /// of the transaction committed.
    pub(crate) fn unavailable(message: String) -> Error {
        Error::new(tonic::Code::Unavailable, "unavailable", true, message)
    }

    /// A cluster commit whose votes did not all come back: it may commit
    /// or abort (the shards settle it).
    pub(crate) fn unknown(message: String) -> Error {
        Error::new(tonic::Code::Unavailable, "unknown", false, message)
    }

    /// Bad input, refused by the client.
    pub(crate) fn invalid(message: String) -> Error {
        Error::new(tonic::Code::InvalidArgument, "invalid_input", false, message)
    }

    /// A write in a read-only transaction, refused by the client as the
    /// server would refuse it.
    pub(crate) fn read_only_txn() -> Error {
        let message = "a write, and the transaction is read-only".into();
        Error::new(tonic::Code::FailedPrecondition, "read_only", false, message)
    }

    /// A key with no value where one was needed (a patch on a cluster).
    pub(crate) fn not_found(message: &str) -> Error {
        Error::new(tonic::Code::NotFound, "not_found", false, message.into())
    }

    /// The same error, its message prefixed with what was being done.
    pub(crate) fn context(mut self, what: &str) -> Error {
        self.message = format!("{what}: {}", self.message);
        self
    }

    /// A request over the message limit, refused before it was sent.
    pub(crate) fn too_large(len: usize, max: usize) -> Error {
        let message = format!(
            "the request is {len} bytes, over the message limit of {max} bytes ({:.1} MiB): \
             send less per call, or raise the limit on both sides (`milliscale serve \
             --max-message-bytes`, `ClientBuilder::max_message_bytes`)",
            max as f64 / f64::from(1u32 << 20)
        );
        Error::new(tonic::Code::OutOfRange, "limit", false, message)
    }

    /// One failed answer of a stream of batches: what a call's status and
    /// metadata would have said.
    pub(crate) fn from_failure(f: crate::proto::Failure) -> Error {
        Error {
            code: tonic::Code::from_i32(f.code),
            kind: if f.kind.is_empty() { "transport".into() } else { f.kind },
            retryable: f.retryable,
            message: f.message,
            map_version: f.map_version,
        }
    }

    /// A batch sent on a stream that ended before its answer came: it may
    /// or may not have committed, so it is not marked retryable.
    pub(crate) fn unanswered(why: &Error) -> Error {
        let message = format!(
            "the stream ended before this batch's answer ({}); it may or may not have committed",
            why.message
        );
        Error::new(tonic::Code::Unavailable, "transport", false, message)
    }

    /// A pipelined batch whose stream ended after its pre-commit answer
    /// but before the server said it was durable.
    pub(crate) fn durability_unknown(why: &Error) -> Error {
        let message = format!(
            "the stream ended before the server said this pre-committed batch was durable \
             ({}); it may or may not survive",
            why.message
        );
        Error::new(tonic::Code::Unavailable, "transport", false, message)
    }

    /// The gRPC status code.
    pub fn code(&self) -> tonic::Code {
        self.code
    }

    /// The error's kind: `conflict`, `busy`, `limit`, `expired`,
    /// `unavailable`, `closed`, `stale`, `fenced`, `read_only`,
    /// `corruption`, `invalid_input`, `not_found`, `unauthenticated`,
    /// `timeout`, `store`; for a cluster also `wrong_shard` (the map
    /// moved; retryable) and `unknown` (a commit whose outcome is not
    /// known; never retry it blindly); `client` for an error of the client's own, and
    /// `transport` for one without a kind (the connection failed).
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// True if running the whole transaction again may succeed.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// The server's message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// For a cluster's `wrong_shard`, the shard map version the shard
    /// named: the one it serves under, or the one that a move of the
    /// range, frozen there meanwhile, publishes (0: none named).
    pub fn map_version(&self) -> u64 {
        self.map_version
    }
}

impl From<tonic::Status> for Error {
    fn from(s: tonic::Status) -> Error {
        let meta = |k: &str| s.metadata().get(k).and_then(|v| v.to_str().ok()).map(str::to_owned);
        Error {
            code: s.code(),
            kind: meta("milliscale-error").unwrap_or_else(|| "transport".into()),
            retryable: meta("milliscale-retryable").as_deref() == Some("true"),
            message: s.message().to_owned(),
            map_version: meta("milliscale-map-version").and_then(|v| v.parse().ok()).unwrap_or(0),
        }
    }
}

/// Run `attempt` until it succeeds, fails with an error that is not
/// retryable, or has run `max_attempts` times; between runs, sleep a
/// random pause that doubles each time (from 1 ms, up to 100 ms). The
/// closure runs a whole transaction: begin, reads, writes, commit.
pub async fn retry<T, F, Fut>(max_attempts: u32, mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut cap = Duration::from_millis(1);
    let mut n = 0;
    loop {
        n += 1;
        match attempt().await {
            Err(e) if e.is_retryable() && n < max_attempts.max(1) => {
                let pause = cap.mul_f64(rand::random::<f64>());
                tokio::time::sleep(pause).await;
                cap = (cap * 2).min(Duration::from_millis(100));
            }
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_and_retry_flag_come_from_the_metadata() {
        let mut s = tonic::Status::aborted("conflict");
        s.metadata_mut().insert("milliscale-error", "conflict".parse().expect("ascii"));
        s.metadata_mut().insert("milliscale-retryable", "true".parse().expect("ascii"));
        let e = Error::from(s);
        assert!(e.is_retryable());
        assert_eq!(e.kind(), "conflict");
        let plain = Error::from(tonic::Status::unavailable("connection reset"));
        assert!(!plain.is_retryable());
        assert_eq!(plain.kind(), "transport");
    }

    #[tokio::test]
    async fn retry_stops_at_success_at_a_final_error_and_at_its_cap() {
        let retryable = || {
            let mut s = tonic::Status::aborted("x");
            s.metadata_mut().insert("milliscale-retryable", "true".parse().expect("ascii"));
            Error::from(s)
        };
        let mut runs = 0;
        let r: Result<u32> = retry(5, || {
            runs += 1;
            let n = runs;
            async move { if n < 3 { Err(retryable()) } else { Ok(n) } }
        })
        .await;
        assert_eq!(r.expect("third run"), 3);
        let mut runs = 0;
        let r: Result<()> = retry(4, || {
            runs += 1;
            async { Err(retryable()) }
        })
        .await;
        assert!(r.is_err());
        assert_eq!(runs, 4);
        let mut runs = 0;
        let r: Result<()> = retry(4, || {
            runs += 1;
            async { Err(Error::from(tonic::Status::invalid_argument("no"))) }
        })
        .await;
        assert!(r.is_err());
        assert_eq!(runs, 1);
    }
}
