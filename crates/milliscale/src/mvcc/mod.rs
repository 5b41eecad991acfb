//! Multi-versioning: each record is a newest-first chain of versions reached
//! through the table's indirection array (ERMIA's design, paper §4.1).
//!
//! - [`version`]: a version and its stamp (creator's CSN, or its owner marker).
//! - [`oid_array`]: record id -> head of the version chain.
//! - [`visibility`]: which version a snapshot sees, and the DSN it contributes.
//! - [`gc`]: trimming chains below the oldest active snapshot.
//! - [`txn_table`]: one slot per running transaction, which a reader asks
//!   for the state of a version's creator.

pub(crate) mod gc;
pub(crate) mod oid_array;
pub(crate) mod txn_table;
pub(crate) mod version;
pub(crate) mod visibility;

/// A commit sequence number. CSNs start at `CSN_FIRST` (1); 0 means "before
/// every transaction" (the DSN of a transaction that read nothing).
pub type Csn = u64;

/// The first CSN handed out.
pub const CSN_FIRST: Csn = 1;
