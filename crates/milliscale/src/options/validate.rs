//! [`Options`]' checks: every option within its bounds (`defaults` and
//! `crate::limits` hold them), run when a database opens and when a
//! config is applied.

use std::time::Duration;

use super::{FLUSH_PACE_MAX, LOG_LANES_MAX, Options, RETENTION_MIN, StoreSpec};
use crate::error::{Error, Result};
use crate::limits::{
    LOG_BUFFER_BYTES_MAX, LOG_BUFFER_BYTES_MIN, LOG_GROUPS_MAX, STORES_MAX, TRANSACTIONS_MAX,
};

impl Options {
    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if self.max_transactions == 0 || self.max_transactions > TRANSACTIONS_MAX {
            return bad(format!(
                "max_transactions must be in 1..={TRANSACTIONS_MAX}, got {}",
                self.max_transactions
            ));
        }
        if self.workers == 0 || self.log_group_size == 0 {
            return bad("workers and log_group_size must be at least 1".into());
        }
        if !(LOG_BUFFER_BYTES_MIN..=LOG_BUFFER_BYTES_MAX).contains(&self.log_buffer_bytes) {
            return bad(format!(
                "log_buffer_bytes must be in {LOG_BUFFER_BYTES_MIN}..={LOG_BUFFER_BYTES_MAX}, got {}",
                self.log_buffer_bytes
            ));
        }
        if self.segment_parts_max == 0 || self.segment_parts_max > objstore::PARTS_MAX {
            return bad(format!(
                "segment_parts_max must be in 1..={}, got {}",
                objstore::PARTS_MAX,
                self.segment_parts_max
            ));
        }
        if self.stores.len() > STORES_MAX {
            return bad(format!("at most {STORES_MAX} stores, got {}", self.stores.len()));
        }
        if self.flush_timeout.is_zero() || self.flush_timeout > Duration::from_secs(60) {
            return bad(format!(
                "flush_timeout must be in (0, 60 s], got {:?}",
                self.flush_timeout
            ));
        }
        if self.log_lanes == 0 || self.log_lanes > LOG_LANES_MAX {
            return bad(format!(
                "log_lanes must be in 1..={LOG_LANES_MAX}, got {}",
                self.log_lanes
            ));
        }
        if let Some(s) = self.log_thread_slice
            && !(Duration::from_micros(100)..=Duration::from_millis(100)).contains(&s)
        {
            return bad(format!("log_thread_slice must be in 0.1..=100 ms, got {s:?}"));
        }
        if self.log_streams == 0 {
            return bad("log_streams must be at least 1".into());
        }
        if self.flush_min_interval > Duration::from_secs(1) {
            return bad(format!(
                "flush_min_interval must be at most 1 s, got {:?}",
                self.flush_min_interval
            ));
        }
        if let Some(p) = self.flush_pace
            && !(p > 0.0 && p <= FLUSH_PACE_MAX)
        {
            return bad(format!("flush_pace must be in (0, {FLUSH_PACE_MAX}], got {p}"));
        }
        if !(self.millisecond_price.is_finite() && self.millisecond_price >= 0.0) {
            return bad(format!(
                "millisecond_price must be a finite number of dollars, at least 0, got {}",
                self.millisecond_price
            ));
        }
        if !(Duration::from_millis(1)..=Duration::from_secs(10)).contains(&self.flush_max_wait) {
            return bad(format!(
                "flush_max_wait must be in 1 ms..=10 s, got {:?}",
                self.flush_max_wait
            ));
        }
        if let Some(u) = self.max_usd_per_hour
            && !(u.is_finite() && u > 0.0)
        {
            return bad(format!("max_usd_per_hour must be above 0 (or unset), got {u}"));
        }
        if let Some(p) = self.append_price
            && !(p.is_finite() && p >= 0.0)
        {
            return bad(format!("append_price must be at least 0 (or unset), got {p}"));
        }
        if self.max_appends_per_s == Some(0) {
            return bad("max_appends_per_s must be at least 1 (or unset)".into());
        }
        if self.flush_unit == Some(0) {
            return bad("flush_unit must be at least 1 byte".into());
        }
        if self.max_idle > Duration::from_secs(1) {
            return bad(format!("max_idle must be at most 1 s, got {:?}", self.max_idle));
        }
        if self.steal_group == 0 || self.steal_group > LOG_GROUPS_MAX {
            return bad(format!(
                "steal_group must be in 1..={LOG_GROUPS_MAX}, got {}",
                self.steal_group
            ));
        }
        if self.recovery_threads == 0 || self.recovery_threads > 256 {
            return bad(format!(
                "recovery_threads must be in 1..=256, got {}",
                self.recovery_threads
            ));
        }
        if self.metrics_interval.is_some_and(|d| d.is_zero()) {
            return bad("metrics_interval must be above zero".into());
        }
        for s in &self.stores {
            if let StoreSpec::Url(u) = s
                && u == "none"
            {
                return bad("\"none\" cannot be combined with other stores".into());
            }
        }
        self.validate_checkpoints()
    }

    fn validate_checkpoints(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if !(4096..=(1 << 30)).contains(&self.checkpoint_chunk_bytes) {
            return bad(format!(
                "checkpoint_chunk_bytes must be in 4 KiB..=1 GiB, got {}",
                self.checkpoint_chunk_bytes
            ));
        }
        if self.retention.is_some_and(|d| d < RETENTION_MIN) {
            return bad(format!(
                "retention must be at least {}s (or none)",
                RETENTION_MIN.as_secs()
            ));
        }
        if self.checkpoint_interval.is_some_and(|d| d.is_zero()) {
            return bad("checkpoint_interval must be above zero".into());
        }
        if !(self.checkpoint_log_ratio >= 0.0 && self.checkpoint_log_ratio.is_finite()) {
            return bad(format!(
                "checkpoint_log_ratio must be 0 or more, got {}",
                self.checkpoint_log_ratio
            ));
        }
        Ok(())
    }
}
