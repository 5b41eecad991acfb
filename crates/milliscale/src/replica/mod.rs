//! Read replicas: processes that follow a database's log in the shared
//! object store without asking its writer (paper §2.3; issue 15). Not to
//! be confused with the store replicas of `log::replica`, the several
//! buckets every part is written to.
//!
//! - [`tail`]: following one chain of the live log, reading only new
//!   bytes.

pub mod tail;
