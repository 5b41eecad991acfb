//! Documented hard limits. Every limit is checked on the way in and reported
//! as [`crate::Error::InvalidArgument`]; none of them panics.

/// Largest key, in bytes. Keys may be empty.
pub const KEY_BYTES_MAX: usize = 1024;
/// Largest value, in bytes. Chosen so a single record always fits in one log
/// part of the default 1 MiB group buffer with room to spare.
pub const VALUE_BYTES_MAX: usize = 256 * 1024;
/// Largest table name, in bytes (UTF-8). Names may not be empty.
pub const TABLE_NAME_BYTES_MAX: usize = 255;
/// Most tables in one database, dropped ones included: table ids are
/// not used again.
pub const TABLES_MAX: usize = 4096;
/// Most records (distinct keys ever inserted) in one table: the indirection
/// array has `DIRECTORY_LEN` chunks of `CHUNK_LEN` slots.
pub const RECORDS_PER_TABLE_MAX: u64 = 1 << 28;
/// Upper bound for [`crate::Options::max_transactions`].
pub const TRANSACTIONS_MAX: usize = 1 << 16;

/// Smallest [`crate::Options::log_buffer_bytes`].
pub const LOG_BUFFER_BYTES_MIN: usize = 4 * 1024;
/// Largest [`crate::Options::log_buffer_bytes`]. A transaction bigger than
/// the buffer still commits: it goes out alone, as one larger part.
pub const LOG_BUFFER_BYTES_MAX: usize = 64 << 20;
/// Most log groups (and so flusher threads) in one database.
pub const LOG_GROUPS_MAX: usize = 256;
/// Most stores a log is replicated to.
pub const STORES_MAX: usize = 7;

const _: () = assert!(KEY_BYTES_MAX < VALUE_BYTES_MAX);
const _: () =
    assert!(VALUE_BYTES_MAX + KEY_BYTES_MAX < 1 << 20, "a record must fit a 1 MiB log buffer");
