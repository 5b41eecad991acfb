//! The write-ahead log. So far: the record format (`record.rs`) and the
//! segment writer with its failure handling (`segment.rs`). Log groups,
//! flushers and group commit follow (issue 4).

pub mod record;
pub mod segment;
