//! The defaults and bounds of [`super::Options`], each with why.

use std::time::Duration;

use crate::limits::LOG_GROUPS_MAX;

/// Default [`Options::flush_unit`](crate::Options::flush_unit) on block devices and local disks: seed
/// 001's 16 KiB.
pub const FLUSH_UNIT_DEFAULT: usize = 16 << 10;

/// Default [`Options::flush_unit`](crate::Options::flush_unit) when a log store is an object store
/// (`ObjectStore::is_object_store`): 256 KiB, inside S3 Express's flat
/// latency up to 512 KB; measured best of 16 KiB-1 MiB (BENCHMARKS.md,
/// "Commit protocols per store").
pub const OBJECT_FLUSH_UNIT_DEFAULT: usize = 256 << 10;

/// Default [`Options::max_idle`](crate::Options::max_idle): Autonomous Commit's 50 µs.
pub const MAX_IDLE_DEFAULT: Duration = Duration::from_micros(50);

/// Default [`Options::steal_group`](crate::Options::steal_group): log groups whose buffers one worker
/// may write together (Autonomous Commit's worker groups are 2-4 workers).
pub const STEAL_GROUP_DEFAULT: usize = 4;

/// Default [`Options::checkpoint_chunk_bytes`](crate::Options::checkpoint_chunk_bytes).
pub const CHECKPOINT_CHUNK_BYTES_DEFAULT: usize = 8 << 20;

/// Default [`Options::checkpoint_log_bytes`](crate::Options::checkpoint_log_bytes).
pub const CHECKPOINT_LOG_BYTES_DEFAULT: u64 = 1 << 30;

/// The least log [`Options::checkpoint_log_ratio`](crate::Options::checkpoint_log_ratio)
/// waits for: a small database is not checkpointed after every few writes.
pub const CHECKPOINT_LOG_RATIO_FLOOR_BYTES: u64 = 16 << 20;

/// Default [`Options::flush_timeout`](crate::Options::flush_timeout).
pub const FLUSH_TIMEOUT_DEFAULT: Duration = Duration::from_millis(10);

/// Default [`Options::log_lanes`](crate::Options::log_lanes): the most appends a stream keeps in
/// flight. The pace ([`Options::flush_pace`](crate::Options::flush_pace)) sets how many it sends; the
/// spare lanes keep the pace when some appends are slow (BENCHMARKS.md,
/// "The commit tail").
pub const LOG_LANES_DEFAULT: usize = 8;

/// Default [`Options::log_streams`](crate::Options::log_streams): every group flushes through one set of
/// lanes, so the appends a second do not grow with the number of groups.
pub const LOG_STREAMS_DEFAULT: usize = 1;

/// [`Options::log_streams`](crate::Options::log_streams) for one stream per group, the paper's layout.
pub const LOG_STREAMS_PER_GROUP: usize = LOG_GROUPS_MAX;

/// Most lanes a log group may have.
pub const LOG_LANES_MAX: usize = 16;

/// Default [`Options::flush_min_interval`](crate::Options::flush_min_interval).
pub const FLUSH_MIN_INTERVAL_DEFAULT: Duration = Duration::from_millis(1);

/// Default [`Options::flush_pace`](crate::Options::flush_pace): 2.75 appends per store round trip (on
/// `sim://s3x`, one every 2.9 ms). Measured on `sim://s3x`, YCSB-A, 8
/// threads, seeds 1-3: paces of 2.5, 2.75 and 3 commit at 1.32x, 1.29x and
/// 1.27x one append's p50, at 0.23x, 0.24x and 0.26x SlateDB's dollars per
/// transaction; three lanes flushing whenever free took 1.42x at 0.22x
/// (BENCHMARKS.md, "The commit tail").
pub const FLUSH_PACE_DEFAULT: f64 = 2.75;

/// Largest [`Options::flush_pace`](crate::Options::flush_pace).
pub const FLUSH_PACE_MAX: f64 = 64.0;

/// Default [`Options::log_buffer_bytes`](crate::Options::log_buffer_bytes): 512 KiB per worker of a
/// two-worker group (the paper's §4.2 choice).
pub const LOG_BUFFER_BYTES_DEFAULT: usize = 1 << 20;

/// Default [`Options::log_group_size`](crate::Options::log_group_size).
pub const LOG_GROUP_SIZE_DEFAULT: usize = 2;

/// Default [`Options::millisecond_price`](crate::Options::millisecond_price): a millisecond off the commit
/// latency of 1,000 transactions a second is worth $0.016 an hour. Chosen
/// from the price of a millisecond across loads (BENCHMARKS.md, "What does
/// the log cost at each load?"): on S3 Express ($1.13 per million
/// appends) the gap between flushes is then 3.45 ms at 42,500 logging
/// transactions a second (the paper's 30M-record setting at 8 threads,
/// where the request cut against per-thread logging is measured), and at
/// most the pace's 2.9 ms above about 50,000; below about 1,800 a second
/// [`FLUSH_MAX_WAIT_DEFAULT`] bounds it. Measured on `sim://s3x`, YCSB-A
/// in open loop, 3 seeds: 54 appends a second at 1,000 offered
/// transactions ($0.22 an hour, 0.71x SlateDB's with a 10 ms WAL flush, at
/// 0.76x its commit p99), 107 at 10,000, 236 at 60,000, about 300 at
/// saturation (commit p50 1.26x one append at 2 threads).
pub const MILLISECOND_PRICE_DEFAULT: f64 = 0.016;

/// Default [`Options::flush_max_wait`](crate::Options::flush_max_wait): the target policy's latency bound
/// at low load. 20 ms keeps commit p99 under SlateDB's with a 10 ms WAL
/// flush at 1,000 transactions a second (36.5 against 48.1 ms) for 0.71x
/// its dollars an hour; 8 ms gets 0.54x its p99 for 1.74x its dollars.
pub const FLUSH_MAX_WAIT_DEFAULT: Duration = Duration::from_millis(20);

/// The shortest retention window (`Options::retention`): the time index is
/// written out every second, so a shorter window would not outlast it.
pub const RETENTION_MIN: Duration = Duration::from_secs(1);
