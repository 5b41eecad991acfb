//! Typed store errors: each variant tells the caller what to do.

/// Result alias for store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// No object under this key (`404 NoSuchKey`).
    #[error("no such key: {0}")]
    NotFound(String),
    /// `put_if_absent` on a key that exists (`412 PreconditionFailed` for
    /// `If-None-Match: *`).
    #[error("object already exists: {0}")]
    AlreadyExists(String),
    /// `put_if_match` with an ETag that is not the current one (`412`).
    #[error("precondition failed: {0}")]
    PreconditionFailed(String),
    /// An append's offset is not the object's size (`400 InvalidWriteOffset`).
    /// A fact to reconcile (the append may already have landed), never an
    /// error to retry blindly.
    #[error("invalid write offset; the object is {actual_size} bytes")]
    InvalidWriteOffset {
        /// The object's size when the append was refused.
        actual_size: u64,
    },
    /// The object already has the maximum number of parts (`400 TooManyParts`).
    #[error("too many parts: the object already has {parts} parts")]
    TooManyParts {
        /// Parts the object has.
        parts: u32,
    },
    /// A range that starts at or past the object's end (`416 InvalidRange`).
    #[error("invalid range {start}.. for an object of {size} bytes")]
    InvalidRange {
        /// Requested start offset.
        start: u64,
        /// The object's size.
        size: u64,
    },
    /// A malformed request (`400 InvalidRequest`): an empty append, a bad key.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// Slow down (`503 SlowDown`): back off with jitter and retry.
    #[error("throttled: {0}")]
    Throttled(String),
    /// A transient failure (`500`, `503`, a reset): the request may or may
    /// not have been applied.
    #[error("transient failure: {0}")]
    Transient(String),
    /// Anything that retrying will not fix.
    #[error("fatal store error: {0}")]
    Fatal(String),
}

impl StoreError {
    /// True for failures worth retrying after a back-off. An append that
    /// failed this way has an unknown outcome: reconcile with `head` first.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Throttled(_) | StoreError::Transient(_))
    }
}
