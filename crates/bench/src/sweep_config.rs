//! A sweep's config file: its grid, its plots, and how it is checked and
//! expanded into runs (the format is in `sweep`'s module docs).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

/// A sweep's config (see the module docs).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepConfig {
    pub name: String,
    pub benchmark: String,
    #[serde(default = "one")]
    pub repetitions: usize,
    #[serde(default)]
    pub args: BTreeMap<String, toml::Value>,
    #[serde(default)]
    pub grid: BTreeMap<String, Vec<toml::Value>>,
    #[serde(default)]
    pub plot: Vec<PlotSpec>,
    /// Named sets of flags, for a `set` grid flag (see the module docs).
    #[serde(default)]
    pub sets: BTreeMap<String, BTreeMap<String, toml::Value>>,
}

fn one() -> usize {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlotSpec {
    pub file: String,
    pub title: String,
    pub x: String,
    pub y: Vec<String>,
    #[serde(default)]
    pub series: Option<String>,
    #[serde(default = "line")]
    pub kind: String,
    #[serde(default)]
    pub x_label: Option<String>,
    #[serde(default)]
    pub y_label: Option<String>,
    /// Multiply every y value by this (e.g. 0.001 for µs to ms).
    #[serde(default = "unit")]
    pub y_scale: f64,
    /// `category` (the default): x values evenly spaced, in grid order;
    /// `linear`: a numeric axis, for line plots of a numeric grid flag
    /// (offered load, for instance), so spacing shows the values.
    #[serde(default = "category")]
    pub x_axis: String,
    /// `linear` (the default) or `log` (decades evenly spaced, so a p50
    /// shows next to a p99.9).
    #[serde(default = "linear")]
    pub y_axis: String,
}

fn line() -> String {
    "line".into()
}

fn category() -> String {
    "category".into()
}

fn linear() -> String {
    "linear".into()
}

fn unit() -> f64 {
    1.0
}

impl SweepConfig {
    pub fn load(path: &Path) -> Result<SweepConfig, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let cfg: SweepConfig =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        cfg.validate().map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(cfg)
    }

    /// Apply command-line overrides, each `KEY=VALUE`, then check the
    /// result: `repetitions=N` sets the repetitions; a grid flag gets the
    /// comma-separated values (`threads=1,2,4,8,16`); any other key sets
    /// (or adds) that flag in `[args]` (`records=30000000`). So one config
    /// runs on this machine and, with `--set`, at the paper's scale.
    pub fn apply_overrides(&mut self, sets: &[String]) -> Result<(), String> {
        for set in sets {
            let (key, value) = set
                .split_once('=')
                .filter(|(k, v)| !k.is_empty() && !v.is_empty())
                .ok_or_else(|| format!("--set {set:?}: expected KEY=VALUE"))?;
            if key == "repetitions" {
                self.repetitions =
                    value.parse().map_err(|_| format!("--set {set:?}: not a count"))?;
            } else if let Some(values) = self.grid.get_mut(key) {
                *values =
                    value.split(',').map(|v| toml::Value::String(v.trim().to_owned())).collect();
            } else {
                self.args.insert(key.to_owned(), toml::Value::String(value.to_owned()));
            }
        }
        self.validate()
    }

    pub fn validate(&self) -> Result<(), String> {
        if !matches!(self.benchmark.as_str(), "ycsb" | "tpcc") {
            return Err(format!("benchmark must be ycsb or tpcc, got {:?}", self.benchmark));
        }
        if self.repetitions == 0 {
            return Err("repetitions must be at least 1".into());
        }
        for name in self.grid.get("set").into_iter().flatten().map(flag_value) {
            if !self.sets.contains_key(&name) {
                return Err(format!("grid.set names {name:?}, which [sets] does not define"));
            }
        }
        for (k, v) in &self.grid {
            if v.is_empty() {
                return Err(format!("grid.{k} has no values"));
            }
            if self.args.contains_key(k) {
                return Err(format!("{k} is both in [args] and in [grid]"));
            }
        }
        for p in &self.plot {
            if p.y.is_empty() {
                return Err(format!("plot {}: y names no field", p.file));
            }
            if !matches!(p.y_axis.as_str(), "linear" | "log") {
                return Err(format!("plot {}: y_axis must be linear or log", p.file));
            }
            if p.kind == "scatter" {
                // x and series are report fields (or series a grid flag):
                // checked against the reports when drawn.
                continue;
            }
            if p.x != "@y" && !self.grid.contains_key(&p.x) {
                return Err(format!(
                    "plot {}: x = {:?} is not a grid flag (or \"@y\")",
                    p.file, p.x
                ));
            }
            if let Some(s) = p.series.as_ref().filter(|s| !self.grid.contains_key(*s)) {
                return Err(format!("plot {}: series = {s:?} is not a grid flag", p.file));
            }
            if !matches!(p.kind.as_str(), "line" | "bar") {
                return Err(format!("plot {}: kind must be line, bar or scatter", p.file));
            }
            match p.x_axis.as_str() {
                "category" => {}
                "linear" if p.kind == "line" && p.x != "@y" => {
                    let values = &self.grid[&p.x];
                    if let Some(v) = values.iter().find(|v| flag_value(v).parse::<f64>().is_err()) {
                        return Err(format!(
                            "plot {}: x_axis = \"linear\" needs numbers, {} has {v}",
                            p.file, p.x
                        ));
                    }
                }
                "linear" => {
                    return Err(format!(
                        "plot {}: x_axis = \"linear\" is for line plots of a grid flag",
                        p.file
                    ));
                }
                other => {
                    return Err(format!(
                        "plot {}: x_axis must be category or linear, got {other:?}",
                        p.file
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every combination of the grid, in a fixed order (the last flag
    /// varies fastest).
    pub fn points(&self) -> Vec<BTreeMap<String, String>> {
        let mut points = vec![BTreeMap::new()];
        for (k, values) in &self.grid {
            let mut next = Vec::with_capacity(points.len() * values.len());
            for p in &points {
                for v in values {
                    let mut q = p.clone();
                    q.insert(k.clone(), flag_value(v));
                    next.push(q);
                }
            }
            points = next;
        }
        points
    }

    /// The command-line arguments of one run.
    /// Unless the config sets `seed`, repetition `r` runs with seed
    /// `42 + r`: the `sim` stores draw their latencies from the seed, so
    /// repetitions with one seed would meet the same latency tail at the
    /// same requests.
    pub fn argv(&self, point: &BTreeMap<String, String>, repetition: usize) -> Vec<String> {
        let mut argv = vec!["bench".to_owned(), self.benchmark.clone()];
        if !self.args.contains_key("seed") && !self.grid.contains_key("seed") {
            argv.push("--seed".into());
            argv.push((42 + repetition).to_string());
        }
        let fixed = self.args.iter().map(|(k, v)| (k.clone(), flag_value(v)));
        let mut flags: Vec<(String, String)> = fixed.collect();
        for (k, v) in point {
            match self.sets.get(v).filter(|_| k == "set") {
                Some(set) => flags.extend(set.iter().map(|(k, v)| (k.clone(), flag_value(v)))),
                None => flags.push((k.clone(), v.clone())),
            }
        }
        for (k, v) in flags {
            match v.as_str() {
                "true" => argv.push(format!("--{k}")),
                "false" => {}
                _ => {
                    argv.push(format!("--{k}"));
                    argv.push(v);
                }
            }
        }
        argv.push("--json".into());
        argv
    }
}

pub(crate) fn flag_value(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Flatten a report's JSON into dotted paths → scalar values.
pub fn flatten(v: &Value) -> BTreeMap<String, Value> {
    fn walk(prefix: &str, v: &Value, out: &mut BTreeMap<String, Value>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    let p = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    walk(&p, v, out);
                }
            }
            Value::Array(_) => {} // samples over time: not a scalar
            other => {
                out.insert(prefix.to_owned(), other.clone());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk("", v, &mut out);
    out
}
