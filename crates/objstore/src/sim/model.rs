//! The latency model and price tables, read from `data/sim-presets.toml`.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;
use rand_distr::{Distribution, LogNormal, Pareto};
use serde::Deserialize;

use crate::{Result, StoreError};

/// The preset file, compiled in.
pub const PRESETS_TOML: &str = include_str!("../../data/sim-presets.toml");

/// Which latency row a request uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpClass {
    /// put, conditional put, append.
    Write,
    /// get, range get.
    Read,
    /// head, list, delete.
    Meta,
}

#[derive(Debug, Clone, Copy, Deserialize)]
struct Row {
    p50_ms: f64,
    p99_ms: f64,
}

/// One preset as written in the file.
#[derive(Debug, Clone, Deserialize)]
pub struct Preset {
    /// Name of the price table.
    pub price: String,
    /// An object store (S3, S3 Express), not a block device or disk.
    #[serde(default)]
    pub object: bool,
    flat_bytes: u64,
    bandwidth_mib_s: f64,
    tail_prob: f64,
    tail_scale_x_p50: f64,
    tail_alpha: f64,
    /// Probability of a stall (used only with fault injection on).
    pub stall_prob: f64,
    /// How long a stalled request hangs before it fails.
    pub stall_timeout_ms: u64,
    write: Row,
    read: Row,
    meta: Row,
}

/// A price table, in US$.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, serde::Serialize)]
pub struct Prices {
    /// Per million PUT-class requests (put, conditional put, append, list).
    pub put_per_million: f64,
    /// Per million GET-class requests (get, head).
    pub get_per_million: f64,
    /// Per GB uploaded.
    pub upload_per_gb: f64,
    /// Per GB downloaded.
    pub download_per_gb: f64,
}

#[derive(Debug, Deserialize)]
struct File {
    presets: BTreeMap<String, Preset>,
    prices: BTreeMap<String, Prices>,
}

/// Parsed presets and prices.
#[derive(Debug)]
pub struct Catalog {
    presets: BTreeMap<String, Preset>,
    prices: BTreeMap<String, Prices>,
}

impl Catalog {
    /// The compiled-in catalog.
    pub fn builtin() -> Catalog {
        Catalog::parse(PRESETS_TOML).expect("the compiled-in preset file is valid (tested)")
    }

    /// Parse a preset file, checking every preset's numbers and price name.
    pub fn parse(text: &str) -> Result<Catalog> {
        let f: File = toml::from_str(text)
            .map_err(|e| StoreError::InvalidRequest(format!("bad preset file: {e}")))?;
        for (name, p) in &f.presets {
            p.check(name)?;
            if !f.prices.contains_key(&p.price) {
                return Err(StoreError::InvalidRequest(format!(
                    "preset {name} names unknown price table {:?}",
                    p.price
                )));
            }
        }
        Ok(Catalog { presets: f.presets, prices: f.prices })
    }

    /// A preset by name, or an error listing the known ones.
    pub fn preset(&self, name: &str) -> Result<&Preset> {
        self.presets.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.presets.keys().map(String::as_str).collect();
            StoreError::InvalidRequest(format!(
                "unknown preset {name:?}; known: {}",
                known.join(", ")
            ))
        })
    }

    /// A price table by name.
    pub fn prices(&self, name: &str) -> Result<Prices> {
        self.prices
            .get(name)
            .copied()
            .ok_or_else(|| StoreError::InvalidRequest(format!("unknown price table {name:?}")))
    }

    /// A price table by its name, or by the name of a preset (its table):
    /// `s3-express` or `s3x`.
    pub fn prices_named(&self, name: &str) -> Result<Prices> {
        match self.prices.get(name) {
            Some(p) => Ok(*p),
            None => match self.presets.get(name) {
                Some(p) => self.prices(&p.price),
                None => {
                    let tables: Vec<&str> = self.prices.keys().map(String::as_str).collect();
                    let presets: Vec<&str> = self.presets.keys().map(String::as_str).collect();
                    Err(StoreError::InvalidRequest(format!(
                        "unknown price table {name:?}; tables: {}; presets: {}",
                        tables.join(", "),
                        presets.join(", ")
                    )))
                }
            },
        }
    }

    /// Preset names.
    pub fn preset_names(&self) -> Vec<String> {
        self.presets.keys().cloned().collect()
    }
}

impl Preset {
    fn check(&self, name: &str) -> Result<()> {
        let bad = |what: &str| Err(StoreError::InvalidRequest(format!("preset {name}: {what}")));
        for (row_name, r) in [("write", self.write), ("read", self.read), ("meta", self.meta)] {
            if !(r.p50_ms >= 0.0 && r.p99_ms >= r.p50_ms && r.p99_ms.is_finite()) {
                return bad(&format!("{row_name} needs 0 <= p50 <= p99"));
            }
            if r.p50_ms == 0.0 && r.p99_ms != 0.0 {
                return bad(&format!("{row_name}: p99 without p50"));
            }
        }
        if !(0.0..=1.0).contains(&self.tail_prob) || !(0.0..=1.0).contains(&self.stall_prob) {
            return bad("probabilities must be in 0..=1");
        }
        if self.tail_prob > 0.0 && !(self.tail_alpha > 0.0 && self.tail_scale_x_p50 > 0.0) {
            return bad("a tail needs a positive scale and alpha");
        }
        if self.bandwidth_mib_s < 0.0 || !self.bandwidth_mib_s.is_finite() {
            return bad("bandwidth must be >= 0 (0 = no transfer time)");
        }
        Ok(())
    }

    fn row(&self, class: OpClass) -> Row {
        match class {
            OpClass::Write => self.write,
            OpClass::Read => self.read,
            OpClass::Meta => self.meta,
        }
    }

    /// The configured body p50 of a class (for reports and checks).
    pub fn p50(&self, class: OpClass) -> Duration {
        Duration::from_secs_f64(self.row(class).p50_ms / 1e3)
    }

    /// Draw one request's latency for `bytes` of payload.
    pub fn sample(&self, class: OpClass, bytes: u64, rng: &mut impl Rng) -> Duration {
        let row = self.row(class);
        let mut ms = 0.0;
        if row.p50_ms > 0.0 {
            let sigma = (row.p99_ms / row.p50_ms).ln() / 2.326;
            ms += if sigma > 0.0 {
                LogNormal::new(row.p50_ms.ln(), sigma).map_or(row.p50_ms, |d| d.sample(rng))
            } else {
                row.p50_ms
            };
        }
        if self.bandwidth_mib_s > 0.0 {
            let extra = bytes.saturating_sub(self.flat_bytes) as f64;
            ms += extra / (self.bandwidth_mib_s * 1024.0 * 1024.0) * 1e3;
        }
        if self.tail_prob > 0.0 && rng.random::<f64>() < self.tail_prob {
            let scale = self.tail_scale_x_p50 * row.p50_ms;
            if scale > 0.0 {
                ms += Pareto::new(scale, self.tail_alpha).map_or(scale, |d| d.sample(rng));
            }
        }
        Duration::from_secs_f64(ms.max(0.0) / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn quantile(v: &mut [f64], q: f64) -> f64 {
        v.sort_by(f64::total_cmp);
        v[((v.len() as f64 - 1.0) * q) as usize]
    }

    #[test]
    fn builtin_presets_parse_and_reference_known_prices() {
        let c = Catalog::builtin();
        for name in ["s3x", "s3-standard", "gp3", "io2", "nvme", "none"] {
            let p = c.preset(name).expect("preset");
            c.prices(&p.price).expect("price table");
            assert_eq!(p.object, name.starts_with("s3"), "{name}: object store or not");
        }
        assert!(c.preset("s4").is_err());
        assert!(Catalog::parse("presets = 3").is_err());
    }

    #[test]
    fn the_body_has_the_configured_median_and_the_size_term_is_linear() {
        let c = Catalog::builtin();
        let p = c.preset("s3x").expect("s3x");
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut small: Vec<f64> = (0..100_000)
            .map(|_| p.sample(OpClass::Write, 256 << 10, &mut rng).as_secs_f64() * 1e3)
            .collect();
        let p50 = quantile(&mut small, 0.5);
        assert!((p50 - 8.0).abs() < 0.2, "s3x append p50 {p50:.2} ms");
        let p99 = quantile(&mut small, 0.99);
        assert!(p99 > 19.0 && p99 < 30.0, "p99 {p99:.1} ms: body 20 ms plus the 1% tail");
        let mut big: Vec<f64> = (0..100_000)
            .map(|_| p.sample(OpClass::Write, 2 << 20, &mut rng).as_secs_f64() * 1e3)
            .collect();
        let p50_2m = quantile(&mut big, 0.5);
        assert!((p50_2m - 22.0).abs() < 0.5, "s3x 2 MB append p50 {p50_2m:.2} ms (paper: ~22 ms)");
        let none = c.preset("none").expect("none");
        assert_eq!(none.sample(OpClass::Write, 1 << 30, &mut rng), Duration::ZERO);
    }
}
