//! The write-ahead log. So far: the record format (`record.rs`). Log
//! groups, the flusher and segments follow (issue 4).

pub mod record;
