//! [`Config`]: the database's options as data, read from a TOML file and
//! from environment variables. One schema serves the library
//! ([`Options::from_config`]) and the CLI (`milliscale --config FILE`).
//! Every field is optional (unset: the default of the [`Options`] method
//! of the same name) and carries its unit in its name. Unknown fields are
//! refused, so a misspelt option is an error, not a silent default.
//!
//! ```toml
//! stores = ["s3://my-bucket--use1-az4--x-s3?region=us-east-1"]
//! workers = 8
//! flush_timeout_ms = 10
//! checkpoint_log_bytes = 1073741824
//! isolation = "serializable"
//! ```
//!
//! The environment: `MILLISCALE_OPT_<FIELD>` for each field, upper case
//! (`MILLISCALE_OPT_FLUSH_TIMEOUT_MS=5`); `MILLISCALE_OPT_STORES` is a
//! comma-separated list. A variable's value is read as a TOML value
//! (`5`, `true`, `"text"`) or, failing that, as a string.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{CommitProtocol, FlushPolicy, Hedging, Isolation, Options, Quorum, Tracking};
use crate::error::{Error, Result};

/// The prefix of the environment variables [`Config::from_env`] reads.
pub const ENV_PREFIX: &str = "MILLISCALE_OPT_";

/// The database's options as data. See the module docs; each field's
/// default is that of the [`Options`] method of the same name (without
/// the unit).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Store URLs; several replicate the log to a quorum of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stores: Vec<String>,
    /// Stores that must hold a part: `"majority"` (default) or `"all"`.
    pub quorum: Option<String>,
    /// Create the database if the stores hold none (default true).
    pub create_if_missing: Option<bool>,
    /// Transaction slots: the most transactions running at once.
    pub max_transactions: Option<usize>,
    /// `"read_committed"`, `"snapshot"` (default) or `"serializable"`.
    pub isolation: Option<Isolation>,
    /// Worker threads the log is sized for.
    pub workers: Option<usize>,
    /// Workers per log group (per log buffer).
    pub log_group_size: Option<usize>,
    /// Each log buffer's size, in bytes.
    pub log_buffer_bytes: Option<usize>,
    /// The paper's flush timeout, in milliseconds.
    pub flush_timeout_ms: Option<u64>,
    /// Appends each log stream may keep in flight.
    pub log_lanes: Option<usize>,
    /// Log streams (groups share a stream's appends).
    pub log_streams: Option<usize>,
    /// `"target"` (default), `"adaptive"` or `"timeout"`.
    pub flush_policy: Option<FlushPolicy>,
    /// The least time between two flushes of a stream, in microseconds.
    pub flush_min_interval_us: Option<u64>,
    /// Appends per store round trip; 0 turns pacing off.
    pub flush_pace: Option<f64>,
    /// A transaction-second's worth, in dollars an hour (the target's λ).
    pub millisecond_price_usd_per_hour: Option<f64>,
    /// The longest the target policy lets data wait, in milliseconds.
    pub flush_max_wait_ms: Option<u64>,
    /// A ceiling on the log's appends, a second.
    pub max_appends_per_s: Option<u32>,
    /// A ceiling on the log's spend, in dollars an hour.
    pub max_usd_per_hour: Option<f64>,
    /// The price of one append in dollars, for stores without a price table.
    pub append_price_usd: Option<f64>,
    /// `"record"` (default) or `"txn"`.
    pub tracking: Option<Tracking>,
    /// `"pipelined"` (default), `"autonomous"`, and the baselines.
    pub commit_protocol: Option<String>,
    /// Autonomous commit: a worker flushes once its buffer holds this many
    /// bytes.
    pub flush_unit_bytes: Option<usize>,
    /// Autonomous commit: the idle time that forces a flush, in
    /// microseconds.
    pub max_idle_us: Option<u64>,
    /// Parts per log segment (at most 10,000).
    pub segment_parts_max: Option<u32>,
    /// How long a store request is retried before it counts as failed, in
    /// milliseconds.
    pub store_deadline_ms: Option<u64>,
    /// `"auto"` (default), `"always"` or `"off"`.
    pub hedging: Option<Hedging>,
    /// Threads for recovery's replay.
    pub recovery_threads: Option<usize>,
    /// A checkpoint chunk's size, in bytes.
    pub checkpoint_chunk_bytes: Option<usize>,
    /// Log bytes between background checkpoints (0: never on volume).
    pub checkpoint_log_bytes: Option<u64>,
    /// Also checkpoint once the log since the last checkpoint reaches this
    /// many times its size (0: off).
    pub checkpoint_log_ratio: Option<f64>,
    /// Time between background checkpoints, in seconds.
    pub checkpoint_interval_s: Option<u64>,
    /// Adopt checkpoints replicas offer instead of writing them.
    pub checkpoint_offload: Option<bool>,
    /// Time between metrics publications, in milliseconds (0: only on
    /// `publish_metrics`).
    pub metrics_interval_ms: Option<u64>,
    /// A hash table of each table's keys for lookups of one key (default
    /// true; about 70 bytes a key).
    pub point_index: Option<bool>,
    /// A retention window, in seconds: the past stays readable that far
    /// back (default none).
    pub retention_s: Option<u64>,
}

impl Config {
    /// Parse TOML text.
    pub fn from_toml(text: &str) -> Result<Config> {
        toml::from_str(text).map_err(|e| Error::InvalidArgument(format!("config: {e}")))
    }

    /// Read a TOML file.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Config> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::InvalidArgument(format!("config {}: {e}", path.display())))?;
        Config::from_toml(&text)
            .map_err(|e| Error::InvalidArgument(format!("{}: {e}", path.display())))
    }

    /// The `MILLISCALE_OPT_*` variables of this process's environment.
    pub fn from_env() -> Result<Config> {
        Config::from_vars(std::env::vars())
    }

    /// The `MILLISCALE_OPT_*` variables among `vars` (name, value).
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Result<Config> {
        let mut table = toml::Table::new();
        for (name, raw) in vars {
            let Some(field) = name.strip_prefix(ENV_PREFIX) else { continue };
            let field = field.to_ascii_lowercase();
            let value = if field == "stores" {
                toml::Value::Array(
                    raw.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(|s| toml::Value::String(s.to_owned()))
                        .collect(),
                )
            } else {
                match format!("v = {raw}").parse::<toml::Table>() {
                    Ok(mut t) => t.remove("v").unwrap_or(toml::Value::String(raw)),
                    Err(_) => toml::Value::String(raw),
                }
            };
            table.insert(field, value);
        }
        Config::deserialize(toml::Value::Table(table))
            .map_err(|e| Error::InvalidArgument(format!("environment ({ENV_PREFIX}*): {e}")))
    }

    /// `self`, with every field `over` sets taken from `over` (the
    /// environment over a file, say).
    pub fn merged(self, over: Config) -> Config {
        let table = |c: Config| match toml::Value::try_from(c) {
            Ok(toml::Value::Table(t)) => t,
            other => unreachable!("a config serializes as a table, not {other:?}"),
        };
        let mut base = table(self);
        base.extend(table(over));
        Config::deserialize(toml::Value::Table(base)).expect("two valid configs merge into one")
    }

    /// Apply onto `o`: each field that is set replaces `o`'s value.
    pub fn apply(&self, mut o: Options) -> Result<Options> {
        let ms = Duration::from_millis;
        let us = Duration::from_micros;
        if !self.stores.is_empty() {
            o.stores.clear();
            for s in &self.stores {
                o = o.add_store(s.clone());
            }
        }
        if let Some(q) = &self.quorum {
            o = o.quorum(match q.as_str() {
                "majority" => Quorum::Majority,
                "all" => Quorum::All,
                other => {
                    return Err(Error::InvalidArgument(format!(
                        "config: quorum {other:?}: expected \"majority\" or \"all\""
                    )));
                }
            });
        }
        if let Some(v) = self.create_if_missing {
            o = o.create_if_missing(v);
        }
        if let Some(v) = self.max_transactions {
            o = o.max_transactions(v);
        }
        if let Some(v) = self.isolation {
            o = o.isolation(v);
        }
        if let Some(v) = self.workers {
            o = o.workers(v);
        }
        if let Some(v) = self.log_group_size {
            o = o.log_group_size(v);
        }
        if let Some(v) = self.log_buffer_bytes {
            o = o.log_buffer_bytes(v);
        }
        if let Some(v) = self.flush_timeout_ms {
            o = o.flush_timeout(ms(v));
        }
        if let Some(v) = self.log_lanes {
            o = o.log_lanes(v);
        }
        if let Some(v) = self.log_streams {
            o = o.log_streams(v);
        }
        if let Some(v) = self.flush_policy {
            o = o.flush_policy(v);
        }
        if let Some(v) = self.flush_min_interval_us {
            o = o.flush_min_interval(us(v));
        }
        if let Some(v) = self.flush_pace {
            o = o.flush_pace((v > 0.0).then_some(v));
        }
        if let Some(v) = self.millisecond_price_usd_per_hour {
            o = o.millisecond_price(v);
        }
        if let Some(v) = self.flush_max_wait_ms {
            o = o.flush_max_wait(ms(v));
        }
        if let Some(v) = self.max_appends_per_s {
            o = o.max_appends_per_s(Some(v));
        }
        if let Some(v) = self.max_usd_per_hour {
            o = o.max_usd_per_hour(Some(v));
        }
        if let Some(v) = self.append_price_usd {
            o = o.append_price(Some(v));
        }
        if let Some(v) = self.tracking {
            o = o.tracking(v);
        }
        if let Some(p) = &self.commit_protocol {
            let p: CommitProtocol =
                p.parse().map_err(|e| Error::InvalidArgument(format!("config: {e}")))?;
            o = o.commit_protocol(p);
        }
        if let Some(v) = self.flush_unit_bytes {
            o = o.flush_unit(v);
        }
        if let Some(v) = self.max_idle_us {
            o = o.max_idle(us(v));
        }
        if let Some(v) = self.segment_parts_max {
            o = o.segment_parts_max(v);
        }
        if let Some(v) = self.store_deadline_ms {
            o = o.store_deadline(ms(v));
        }
        if let Some(v) = self.hedging {
            o = o.hedging(v);
        }
        if let Some(v) = self.recovery_threads {
            o = o.recovery_threads(v);
        }
        o = self.apply_background(o);
        o.validate()?;
        Ok(o)
    }

    /// The background work's fields: checkpoints, metrics, the point
    /// index and the retention window.
    fn apply_background(&self, mut o: Options) -> Options {
        let ms = Duration::from_millis;
        if let Some(v) = self.checkpoint_chunk_bytes {
            o = o.checkpoint_chunk_bytes(v);
        }
        if let Some(v) = self.checkpoint_log_bytes {
            o = o.checkpoint_log_bytes(v);
        }
        if let Some(v) = self.checkpoint_log_ratio {
            o = o.checkpoint_log_ratio(v);
        }
        if let Some(v) = self.checkpoint_interval_s {
            o = o.checkpoint_interval(Some(Duration::from_secs(v)));
        }
        if let Some(v) = self.checkpoint_offload {
            o = o.checkpoint_offload(v);
        }
        if let Some(v) = self.metrics_interval_ms {
            o = o.metrics_interval((v > 0).then(|| ms(v)));
        }
        if let Some(v) = self.point_index {
            o = o.point_index(v);
        }
        if let Some(v) = self.retention_s {
            o = o.retention((v > 0).then(|| Duration::from_secs(v)));
        }
        o
    }
}

impl Options {
    /// The default options with `config` applied; checked as `open` would.
    pub fn from_config(config: &Config) -> Result<Options> {
        config.apply(Options::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn a_toml_file_sets_each_option_in_its_unit() {
        let c = Config::from_toml(
            r#"
            stores = ["memory://", "memory://"]
            quorum = "all"
            workers = 3
            flush_timeout_ms = 7
            flush_min_interval_us = 250
            isolation = "serializable"
            flush_policy = "adaptive"
            commit_protocol = "autonomous"
            checkpoint_interval_s = 60
            metrics_interval_ms = 0
            "#,
        )
        .expect("parses");
        let o = Options::from_config(&c).expect("valid");
        assert_eq!(o.stores.len(), 2);
        assert_eq!(o.quorum, Quorum::All);
        assert_eq!(o.workers, 3);
        assert_eq!(o.flush_timeout, Duration::from_millis(7));
        assert_eq!(o.flush_min_interval, Duration::from_micros(250));
        assert_eq!(o.isolation, Isolation::Serializable);
        assert_eq!(o.flush_policy, FlushPolicy::Adaptive);
        assert_eq!(o.commit_protocol, CommitProtocol::Autonomous);
        assert_eq!(o.checkpoint_interval, Some(Duration::from_secs(60)));
        assert_eq!(o.metrics_interval, None);
        // Unset fields keep the defaults.
        assert_eq!(o.log_buffer_bytes, Options::new().log_buffer_bytes);
    }

    #[test]
    fn mistakes_are_errors_that_name_them() {
        let e = Config::from_toml("flush_timeout = 5").expect_err("no unit: not a field");
        assert!(e.to_string().contains("flush_timeout"), "{e}");
        let e = Config::from_toml("isolation = \"linearizable\"").expect_err("no such level");
        assert!(e.to_string().contains("linearizable"), "{e}");
        let e = Config::from_toml("workers = \"many\"").expect_err("a string for a number");
        assert!(e.to_string().contains("workers"), "{e}");
        let zero = Config::from_toml("workers = 0").expect("parses");
        assert!(Options::from_config(&zero).is_err(), "checked as open checks");
        let q = Config::from_toml("quorum = \"most\"").expect("parses");
        assert!(Options::from_config(&q).expect_err("bad quorum").to_string().contains("most"));
        let e = Config::from_vars(vars(&[("MILLISCALE_OPT_FLUSH_TIMEOUT", "5")]))
            .expect_err("a misspelt variable");
        assert!(e.to_string().contains("flush_timeout"), "{e}");
    }

    #[test]
    fn the_environment_sets_options_and_overrides_a_file() {
        let env = Config::from_vars(vars(&[
            ("MILLISCALE_OPT_FLUSH_TIMEOUT_MS", "5"),
            ("MILLISCALE_OPT_STORES", "memory://, memory://,memory://"),
            ("MILLISCALE_OPT_ISOLATION", "serializable"),
            ("MILLISCALE_OPT_CHECKPOINT_OFFLOAD", "true"),
            ("MILLISCALE_OPT_MAX_USD_PER_HOUR", "0.5"),
            // Other variables, even of this project, are not options.
            ("MILLISCALE_SIM_SEEDS", "7"),
            ("PATH", "/bin"),
        ]))
        .expect("reads");
        assert_eq!(env.flush_timeout_ms, Some(5));
        assert_eq!(env.stores.len(), 3);
        assert_eq!(env.isolation, Some(Isolation::Serializable));
        assert_eq!(env.checkpoint_offload, Some(true));
        assert_eq!(env.max_usd_per_hour, Some(0.5));

        let file = Config::from_toml("flush_timeout_ms = 20\nworkers = 4").expect("parses");
        let both = file.merged(env);
        assert_eq!(both.flush_timeout_ms, Some(5), "the environment wins");
        assert_eq!(both.workers, Some(4), "the file's own fields stay");
        assert_eq!(both.stores.len(), 3);
    }

    #[test]
    fn the_example_config_in_the_repository_is_valid() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/milliscale.toml");
        let c = Config::from_file(&path).expect("the example parses");
        Options::from_config(&c).expect("and is valid");
        // It documents every field: each one appears in it.
        let text = std::fs::read_to_string(&path).expect("read");
        for field in FIELDS {
            assert!(text.contains(&format!("{field} =")), "the example lacks {field}");
        }
    }

    /// Every field of `Config`, for the example's check.
    const FIELDS: &[&str] = &[
        "stores",
        "quorum",
        "create_if_missing",
        "max_transactions",
        "isolation",
        "workers",
        "log_group_size",
        "log_buffer_bytes",
        "flush_timeout_ms",
        "log_lanes",
        "log_streams",
        "flush_policy",
        "flush_min_interval_us",
        "flush_pace",
        "millisecond_price_usd_per_hour",
        "flush_max_wait_ms",
        "max_appends_per_s",
        "max_usd_per_hour",
        "append_price_usd",
        "tracking",
        "commit_protocol",
        "flush_unit_bytes",
        "max_idle_us",
        "segment_parts_max",
        "store_deadline_ms",
        "hedging",
        "recovery_threads",
        "checkpoint_chunk_bytes",
        "checkpoint_log_bytes",
        "checkpoint_log_ratio",
        "checkpoint_interval_s",
        "checkpoint_offload",
        "metrics_interval_ms",
        "point_index",
        "retention_s",
    ];
}
