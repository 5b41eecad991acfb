//! The paper's system variants (§5.1), as log settings.
//!
//! | variant       | store              | group | buffer  | tracking | writes          | streams x lanes, flushes |
//! |---------------|--------------------|-------|---------|----------|-----------------|--------------------------|
//! | `milliscale`  | `sim://s3x`        | 2     | 1 MiB   | record   | append          | 1 x 3, adaptive          |
//! | `s3x`         | `sim://s3x`        | 1     | 512 KiB | txn      | append          | per group x 1, 10 ms timeout |
//! | `s3-standard` | `sim://s3-standard`| 1     | 512 KiB | txn      | object per flush| per group x 1, 10 ms timeout |
//! | `gp3`         | `sim://gp3`        | 1     | 512 KiB | txn      | append          | per group x 1, 10 ms timeout |
//! | `io2`         | `sim://io2`        | 1     | 512 KiB | txn      | append          | per group x 1, 10 ms timeout |
//! | `naive-pages` | `sim://s3-standard`| -     | -       | -        | page PUTs at commit | no log (Database on S3's Naïve) |
//! | `atomic-pages`| `sim://s3-standard`| -     | -       | -        | ATOMIC-queue PUT at commit, pages at checkpoints | no log (Database on S3's Atomicity) |
//!
//! The two page variants (`crate::pages`) run the transactions in the
//! engine's memory without a log and make them durable as Database on S3 did:
//! the first store holds the pages, `--checkpoint-interval` paces the
//! atomic variant's checkpoints.
//!
//! The baselines keep the paper's log: each buffer its own log, one append
//! in flight per buffer, flushed by the timeout, never hedged, the
//! kernel's scheduler slice. `milliscale` is the engine's
//! defaults (hedging where the store's client can, `Hedging::Auto`).
//!
//! Every setting can be overridden on its own (`--store`,
//! `--log-group-size`, `--log-buffer`, `--tracking`, ...), which is how the
//! ablations (`s3x` + record tracking, `s3x` + groups) are run.

use std::time::Duration;

use crate::pages::PageProtocol;
use milliscale::{CommitProtocol, FlushPolicy, Hedging, Options, Quorum, Tracking};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Milliscale,
    S3x,
    S3Standard,
    Gp3,
    Io2,
    NaivePages,
    AtomicPages,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Milliscale => "milliscale",
            Variant::S3x => "s3x",
            Variant::S3Standard => "s3-standard",
            Variant::Gp3 => "gp3",
            Variant::Io2 => "io2",
            Variant::NaivePages => "naive-pages",
            Variant::AtomicPages => "atomic-pages",
        }
    }

    /// The variant's settings, before overrides.
    pub fn settings(self) -> LogSettings {
        let per_thread = |store: &str| LogSettings {
            stores: vec![store.to_owned()],
            log_group_size: 1,
            log_buffer_bytes: 512 * 1024,
            tracking: Tracking::Txn,
            log_lanes: 1,
            log_streams: milliscale::options::LOG_STREAMS_PER_GROUP,
            log_thread_slice: None,
            flush_policy: FlushPolicy::Timeout,
            hedging: Hedging::Off,
            ..LogSettings::default()
        };
        match self {
            Variant::Milliscale => LogSettings::default(),
            Variant::S3x => per_thread("sim://s3x"),
            Variant::S3Standard => {
                LogSettings { put_per_flush: true, ..per_thread("sim://s3-standard") }
            }
            Variant::Gp3 => per_thread("sim://gp3"),
            Variant::Io2 => per_thread("sim://io2"),
            Variant::NaivePages => {
                LogSettings { pages: Some(PageProtocol::Naive), ..per_thread("sim://s3-standard") }
            }
            Variant::AtomicPages => {
                LogSettings { pages: Some(PageProtocol::Atomic), ..per_thread("sim://s3-standard") }
            }
        }
    }
}

/// Everything the benchmark sets on the log.
#[derive(Debug, Clone)]
pub struct LogSettings {
    /// Store URLs; `["none"]` means no log.
    pub stores: Vec<String>,
    pub quorum: Quorum,
    pub log_group_size: usize,
    pub log_buffer_bytes: usize,
    pub flush_timeout: Duration,
    pub log_lanes: usize,
    /// `Options::log_streams`; `LOG_STREAMS_PER_GROUP` is one per group.
    pub log_streams: usize,
    /// `Options::log_thread_slice`.
    pub log_thread_slice: Option<Duration>,
    pub flush_policy: FlushPolicy,
    pub flush_min_interval: Duration,
    /// `Options::flush_pace`.
    pub flush_pace: Option<f64>,
    pub max_appends_per_s: Option<u32>,
    /// `Options::millisecond_price` (the target policy).
    pub millisecond_price: f64,
    /// `Options::flush_max_wait` (the target policy).
    pub flush_max_wait: Duration,
    /// `Options::max_usd_per_hour`.
    pub max_usd_per_hour: Option<f64>,
    /// `Options::append_price`.
    pub append_price: Option<f64>,
    pub tracking: Tracking,
    pub put_per_flush: bool,
    /// Where slow appends are sent a second time (`Options::hedging`).
    pub hedging: Hedging,
    /// `Options::hedge_multiple`.
    pub hedge_multiple: f64,
    /// `Options::hedge_budget`.
    pub hedge_budget: f64,
    /// Background checkpoint after this many log bytes; 0 (the benchmark
    /// default) takes none.
    pub checkpoint_log_bytes: u64,
    /// `Options::checkpoint_offload`: adopt checkpoints replicas offer
    /// instead of taking them.
    pub checkpoint_offload: bool,
    /// `Options::commit_protocol`. Autonomous commit brings its own layout
    /// (a buffer per worker, streams of `steal_group` buffers, as many
    /// lanes), which replaces the group size, lanes and streams above.
    pub commit_protocol: CommitProtocol,
    /// Autonomous: `Options::flush_unit` (`None`: the engine's default for
    /// the store).
    pub flush_unit: Option<usize>,
    /// Autonomous: `Options::max_idle`.
    pub max_idle: Duration,
    /// Autonomous: `Options::steal_group`.
    pub steal_group: usize,
    /// `Options::checkpoint_interval`; for the atomic page variant, how
    /// often its checkpointer applies the ATOMIC queue to the pages.
    pub checkpoint_interval: Option<Duration>,
    /// No log: page-at-commit on the first store (Database on S3's baselines).
    pub pages: Option<PageProtocol>,
    /// `Options::point_index` (not the log's: every option the benchmark
    /// sets on the database is here).
    pub point_index: bool,
    /// `Options::retention`: keep a window of history (and a time index).
    pub retention: Option<Duration>,
}

impl Default for LogSettings {
    /// The `milliscale` variant.
    fn default() -> Self {
        LogSettings {
            stores: vec!["sim://s3x".to_owned()],
            quorum: Quorum::Majority,
            log_group_size: milliscale::options::LOG_GROUP_SIZE_DEFAULT,
            log_buffer_bytes: milliscale::options::LOG_BUFFER_BYTES_DEFAULT,
            flush_timeout: milliscale::options::FLUSH_TIMEOUT_DEFAULT,
            log_lanes: milliscale::options::LOG_LANES_DEFAULT,
            log_streams: milliscale::options::LOG_STREAMS_DEFAULT,
            log_thread_slice: Some(milliscale::options::LOG_THREAD_SLICE_DEFAULT),
            flush_policy: FlushPolicy::Target,
            flush_min_interval: milliscale::options::FLUSH_MIN_INTERVAL_DEFAULT,
            flush_pace: Some(milliscale::options::FLUSH_PACE_DEFAULT),
            max_appends_per_s: None,
            millisecond_price: milliscale::options::MILLISECOND_PRICE_DEFAULT,
            flush_max_wait: milliscale::options::FLUSH_MAX_WAIT_DEFAULT,
            max_usd_per_hour: None,
            append_price: None,
            tracking: Tracking::Record,
            put_per_flush: false,
            hedging: Hedging::Auto,
            hedge_multiple: 1.0,
            hedge_budget: 0.1,
            checkpoint_log_bytes: 0,
            checkpoint_offload: false,
            commit_protocol: CommitProtocol::Pipelined,
            flush_unit: None,
            max_idle: milliscale::options::MAX_IDLE_DEFAULT,
            steal_group: milliscale::options::STEAL_GROUP_DEFAULT,
            checkpoint_interval: None,
            pages: None,
            point_index: true,
            retention: None,
        }
    }
}

impl LogSettings {
    /// Add the log's settings to a report's config map (nothing else when
    /// there is no log).
    pub fn describe_into(&self, m: &mut std::collections::BTreeMap<String, String>) {
        m.insert("store".into(), self.stores.join(" + "));
        if !self.point_index {
            m.insert("point_index".into(), "false".into());
        }
        if let Some(d) = self.retention {
            m.insert("retention_s".into(), d.as_secs().to_string());
        }
        if let Some(p) = self.pages {
            m.insert("pages".into(), p.to_string());
            if let Some(d) = self.checkpoint_interval {
                m.insert("checkpoint_interval_s".into(), d.as_secs_f64().to_string());
            }
            return;
        }
        if !self.is_logged() {
            return;
        }
        if self.checkpoint_log_bytes > 0 {
            m.insert("checkpoint_every".into(), self.checkpoint_log_bytes.to_string());
        }
        if let Some(d) = self.checkpoint_interval {
            m.insert("checkpoint_interval_s".into(), d.as_secs_f64().to_string());
        }
        m.insert("commit_protocol".into(), self.commit_protocol.to_string());
        if self.commit_protocol == CommitProtocol::Autonomous {
            m.insert(
                "flush_unit".into(),
                self.flush_unit.map_or("default".to_owned(), |u| u.to_string()),
            );
            m.insert("max_idle_us".into(), self.max_idle.as_micros().to_string());
            m.insert("steal_group".into(), self.steal_group.to_string());
            m.insert("tracking".into(), format!("{:?}", self.tracking).to_lowercase());
            m.insert("log_buffer_bytes".into(), self.log_buffer_bytes.to_string());
            m.insert(
                "flush_timeout_ms".into(),
                (self.flush_timeout.as_secs_f64() * 1e3).to_string(),
            );
            m.insert("hedging".into(), format!("{:?}", self.hedging).to_lowercase());
            return;
        }
        m.insert("log_group_size".into(), self.log_group_size.to_string());
        m.insert("log_buffer_bytes".into(), self.log_buffer_bytes.to_string());
        m.insert("flush_timeout_ms".into(), (self.flush_timeout.as_secs_f64() * 1e3).to_string());
        m.insert("log_lanes".into(), self.log_lanes.to_string());
        m.insert(
            "log_streams".into(),
            if self.log_streams >= milliscale::options::LOG_STREAMS_PER_GROUP {
                "per-group".to_owned()
            } else {
                self.log_streams.to_string()
            },
        );
        m.insert(
            "log_thread_slice_ms".into(),
            self.log_thread_slice.map_or("off".to_owned(), |d| (d.as_secs_f64() * 1e3).to_string()),
        );
        m.insert("flush_policy".into(), format!("{:?}", self.flush_policy).to_lowercase());
        if self.flush_policy == FlushPolicy::Target {
            m.insert("millisecond_price".into(), self.millisecond_price.to_string());
            m.insert(
                "flush_max_wait_ms".into(),
                (self.flush_max_wait.as_secs_f64() * 1e3).to_string(),
            );
        }
        if self.flush_policy != FlushPolicy::Timeout {
            m.insert(
                "flush_min_interval_ms".into(),
                (self.flush_min_interval.as_secs_f64() * 1e3).to_string(),
            );
            m.insert(
                "flush_pace".into(),
                self.flush_pace.map_or("off".to_owned(), |p| p.to_string()),
            );
        }
        if let Some(n) = self.max_appends_per_s {
            m.insert("max_appends_per_s".into(), n.to_string());
        }
        if let Some(u) = self.max_usd_per_hour {
            m.insert("max_usd_per_hour".into(), u.to_string());
        }
        if let Some(p) = self.append_price {
            m.insert("append_price".into(), p.to_string());
        }
        m.insert("tracking".into(), format!("{:?}", self.tracking).to_lowercase());
        if self.stores.len() > 1 {
            m.insert("quorum".into(), format!("{:?}", self.quorum).to_lowercase());
        }
        if self.put_per_flush {
            m.insert("put_per_flush".into(), "true".into());
        }
        m.insert("hedging".into(), format!("{:?}", self.hedging).to_lowercase());
        if self.hedge_multiple != 1.0 {
            m.insert("hedge_multiple".into(), self.hedge_multiple.to_string());
        }
        if self.hedge_budget != 0.1 {
            m.insert("hedge_budget".into(), self.hedge_budget.to_string());
        }
    }

    pub fn is_logged(&self) -> bool {
        self.pages.is_none() && !(self.stores.is_empty() || self.stores.iter().all(|s| s == "none"))
    }

    /// Give every `sim://` store without an explicit seed this one, so
    /// repetitions draw different latencies (and tails) from the model.
    pub fn seed_sims(&mut self, seed: u64) {
        for url in &mut self.stores {
            let Some(rest) = url.strip_prefix("sim://") else { continue };
            let (preset, query) = rest.split_once('?').unwrap_or((rest, ""));
            if query.split('&').any(|kv| kv.starts_with("seed=")) {
                continue;
            }
            *url = if query.is_empty() {
                format!("sim://{preset}?seed={seed}")
            } else {
                format!("sim://{preset}?seed={seed}&{query}")
            };
        }
    }

    /// Database options for `workers` threads.
    pub fn options(&self, workers: usize) -> Options {
        let mut o = Options::new().workers(workers).point_index(self.point_index);
        if !self.is_logged() {
            return o;
        }
        o = o
            .retention(self.retention)
            .quorum(self.quorum)
            .log_group_size(self.log_group_size)
            .log_buffer_bytes(self.log_buffer_bytes)
            .flush_timeout(self.flush_timeout)
            .log_lanes(self.log_lanes)
            .log_streams(self.log_streams)
            .log_thread_slice(self.log_thread_slice)
            .flush_policy(self.flush_policy)
            .flush_min_interval(self.flush_min_interval)
            .flush_pace(self.flush_pace)
            .max_appends_per_s(self.max_appends_per_s)
            .millisecond_price(self.millisecond_price)
            .flush_max_wait(self.flush_max_wait)
            .max_usd_per_hour(self.max_usd_per_hour)
            .append_price(self.append_price)
            .tracking(self.tracking)
            .put_per_flush(self.put_per_flush)
            .hedging(self.hedging)
            .hedge_multiple(self.hedge_multiple)
            .hedge_budget(self.hedge_budget)
            .checkpoint_log_bytes(self.checkpoint_log_bytes)
            .checkpoint_interval(self.checkpoint_interval)
            .checkpoint_offload(self.checkpoint_offload);
        if self.commit_protocol == CommitProtocol::Autonomous {
            o = o
                .steal_group(self.steal_group)
                .commit_protocol(CommitProtocol::Autonomous)
                .max_idle(self.max_idle);
            if let Some(u) = self.flush_unit {
                o = o.flush_unit(u);
            }
        }
        for s in &self.stores {
            o = o.add_store(s.clone());
        }
        o
    }
}
