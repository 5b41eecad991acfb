//! `milliscale bench sweep --config FILE`: run a grid of benchmark
//! configurations, write every report as a CSV row, and draw PNG plots
//! shaped like the paper's figures.
//!
//! A config is TOML:
//!
//! ```toml
//! name = "fig9-10-threads"
//! benchmark = "ycsb"          # or "tpcc"
//! repetitions = 2
//! [args]                      # flags every run gets
//! records = 100000
//! duration = 5
//! [grid]                      # every combination of these flags
//! variant = ["milliscale", "s3x"]
//! threads = [1, 2, 4, 8]
//! [[plot]]
//! file = "fig9-throughput.png"
//! title = "YCSB-A: throughput against threads"
//! x = "threads"               # a grid flag, or "@y" (the y fields as categories)
//! y = ["txn_per_s"]           # report fields, dotted paths into its JSON
//! series = "variant"          # a grid flag: one line (or bar group) each
//! kind = "line"               # or "bar", or "scatter" (below)
//! x_axis = "category"         # or "linear": x at its numeric value (line plots)
//! y_axis = "linear"           # or "log"
//! x_label = "worker threads"
//! y_label = "transactions/s"
//! ```
//!
//! A flag value may hold `{tmp}`: each run gets a fresh empty directory
//! there (removed after the run), for `store = "file://{tmp}"`.
//!
//! Configurations that are not a product of flags are named sets: a grid
//! flag `set` whose values name tables of flags, each run gets its set's
//! flags.
//!
//! ```toml
//! [grid]
//! set = ["timeout-10ms", "slatedb-10ms"]
//! [sets.timeout-10ms]
//! flush-policy = "timeout"
//! [sets.slatedb-10ms]
//! engine = "slatedb"
//! slatedb-flush-ms = 10
//! ```
//!
//! A `scatter` plot puts every configuration at (x, y), both report fields
//! (for example `log.usd_per_hour` against `commit_latency.p50_us`), means
//! over repetitions; `series` is a grid flag or a report field with text
//! values (`engine`), and each series' points are joined in x order and
//! labelled with their set's name.
//!
//! Each run is a separate process (`milliscale bench <benchmark> ...
//! --json`), so runs do not share memory or threads. Repetitions are the
//! outer loop: every configuration runs once before any runs twice, so
//! slow drifts of the machine spread over all of them; repetition `r` uses
//! seed `42 + r` unless the config sets one. A plotted point is the mean
//! over repetitions and over any grid flag the plot does not name (a
//! `seed` grid, for instance).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

pub use crate::plot::{ScatterSeries, Series};
use crate::sweep_config::flag_value;
pub use crate::sweep_config::flatten;
pub use crate::sweep_config::{PlotSpec, SweepConfig};

/// One finished run.
#[derive(Debug, Clone)]
pub struct Row {
    pub repetition: usize,
    pub point: BTreeMap<String, String>,
    pub fields: BTreeMap<String, Value>,
}

/// Run every point `repetitions` times with `exe`; `progress(done, total,
/// argv)` is called before each run.
pub fn run(
    cfg: &SweepConfig,
    exe: &Path,
    mut progress: impl FnMut(usize, usize, &[String]),
) -> Result<Vec<Row>, String> {
    let points = cfg.points();
    let total = points.len() * cfg.repetitions;
    let mut rows = Vec::with_capacity(total);
    for rep in 0..cfg.repetitions {
        for point in &points {
            let mut argv = cfg.argv(point, rep);
            // `{tmp}` in a flag: a fresh empty directory for this run
            // (a `file://` store must start empty), removed after it.
            let tmp = argv.iter().any(|a| a.contains("{tmp}")).then(|| {
                std::env::temp_dir().join(format!(
                    "milliscale-sweep-{}-{}-{}",
                    std::process::id(),
                    rep,
                    rows.len()
                ))
            });
            if let Some(t) = &tmp {
                std::fs::create_dir_all(t).map_err(|e| format!("{}: {e}", t.display()))?;
                for a in &mut argv {
                    *a = a.replace("{tmp}", &t.display().to_string());
                }
            }
            progress(rows.len(), total, &argv);
            let out = std::process::Command::new(exe)
                .args(&argv)
                .stdin(std::process::Stdio::null())
                .output()
                .map_err(|e| format!("{}: {e}", exe.display()));
            if let Some(t) = &tmp {
                let _ = std::fs::remove_dir_all(t);
            }
            let out = out?;
            if !out.status.success() {
                return Err(format!(
                    "`milliscale {}` failed: {}",
                    argv.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            let json: Value = serde_json::from_slice(&out.stdout).map_err(|e| {
                format!("`milliscale {}` printed no JSON report: {e}", argv.join(" "))
            })?;
            rows.push(Row { repetition: rep, point: point.clone(), fields: flatten(&json) });
        }
    }
    Ok(rows)
}

fn csv_cell(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s }
}

/// Every row with the grid flags first, then every report field any row has.
pub fn to_csv(cfg: &SweepConfig, rows: &[Row]) -> String {
    let grid: Vec<&String> = cfg.grid.keys().collect();
    let mut fields: Vec<&String> = rows.iter().flat_map(|r| r.fields.keys()).collect();
    fields.sort();
    fields.dedup();
    let mut s = String::from("repetition");
    for g in &grid {
        s.push(',');
        s.push_str(g);
    }
    for f in &fields {
        s.push(',');
        s.push_str(f);
    }
    s.push('\n');
    for r in rows {
        s.push_str(&r.repetition.to_string());
        for g in &grid {
            s.push(',');
            s.push_str(&csv_cell(&Value::String(r.point[*g].clone())));
        }
        for f in &fields {
            s.push(',');
            s.push_str(&r.fields.get(*f).map(csv_cell).unwrap_or_default());
        }
        s.push('\n');
    }
    s
}

/// The plot's data: x categories in grid order, and one series per value
/// of `series` (or per y field when x is "@y"), y averaged over repetitions.
pub fn plot_data(
    cfg: &SweepConfig,
    spec: &PlotSpec,
    rows: &[Row],
) -> Result<(Vec<String>, Vec<Series>), String> {
    let value =
        |r: &Row, field: &str| -> Result<f64, String> {
            r.fields.get(field).and_then(Value::as_f64).map(|v| v * spec.y_scale).ok_or_else(|| {
                format!("plot {}: the reports have no number at {field:?}", spec.file)
            })
        };
    let series_of = |r: &Row| spec.series.as_ref().map_or(String::new(), |s| r.point[s].clone());
    let series_names: Vec<String> = match &spec.series {
        Some(s) => cfg.grid[s].iter().map(flag_value).collect(),
        None => vec![String::new()],
    };
    let mut out = Vec::new();
    if spec.x == "@y" {
        let xs: Vec<String> = spec.y.iter().map(|f| short_name(f)).collect();
        for name in &series_names {
            let mine: Vec<&Row> = rows.iter().filter(|r| &series_of(r) == name).collect();
            let mut pts = Vec::new();
            for (f, x) in spec.y.iter().zip(&xs) {
                let vals: Result<Vec<f64>, String> = mine.iter().map(|r| value(r, f)).collect();
                let vals = vals?;
                if !vals.is_empty() {
                    pts.push((x.clone(), vals.iter().sum::<f64>() / vals.len() as f64));
                }
            }
            out.push((name.clone(), pts));
        }
        return Ok((xs, out));
    }
    let xs: Vec<String> = cfg.grid[&spec.x].iter().map(flag_value).collect();
    for name in &series_names {
        for f in &spec.y {
            // A bare number says nothing in a legend: name its flag.
            let shown = match &spec.series {
                Some(flag) if name.parse::<f64>().is_ok() => format!("{flag} {name}"),
                _ => name.clone(),
            };
            let label = match (spec.series.is_some(), spec.y.len() > 1) {
                (true, true) => format!("{shown} {}", short_name(f)),
                (true, false) => shown,
                (false, _) => short_name(f),
            };
            let mut pts = Vec::new();
            for x in &xs {
                let vals: Result<Vec<f64>, String> = rows
                    .iter()
                    .filter(|r| &series_of(r) == name && &r.point[&spec.x] == x)
                    .map(|r| value(r, f))
                    .collect();
                let vals = vals?;
                if !vals.is_empty() {
                    pts.push((x.clone(), vals.iter().sum::<f64>() / vals.len() as f64));
                }
            }
            out.push((label, pts));
        }
    }
    Ok((xs, out))
}

/// A scatter plot's data: per configuration (grid point), the mean x and
/// y over repetitions; one series per value of `series` and y field.
pub fn scatter_data(spec: &PlotSpec, rows: &[Row]) -> Result<Vec<ScatterSeries>, String> {
    let number =
        |r: &Row, field: &str, scale: f64| -> Result<f64, String> {
            r.fields.get(field).and_then(Value::as_f64).map(|v| v * scale).ok_or_else(|| {
                format!("plot {}: the reports have no number at {field:?}", spec.file)
            })
        };
    let series_of = |r: &Row| match &spec.series {
        None => String::new(),
        Some(s) => r.point.get(s).cloned().unwrap_or_else(|| {
            r.fields
                .get(s)
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                .unwrap_or_default()
        }),
    };
    // Configurations in first-seen order, each with its rows.
    let mut configs: Vec<(&BTreeMap<String, String>, Vec<&Row>)> = Vec::new();
    for r in rows {
        match configs.iter_mut().find(|(p, _)| **p == r.point) {
            Some((_, v)) => v.push(r),
            None => configs.push((&r.point, vec![r])),
        }
    }
    let mut out: Vec<ScatterSeries> = Vec::new();
    for f in &spec.y {
        for (point, mine) in &configs {
            let mean = |field: &str, scale: f64| -> Result<f64, String> {
                let v: Result<Vec<f64>, String> =
                    mine.iter().map(|r| number(r, field, scale)).collect();
                let v = v?;
                Ok(v.iter().sum::<f64>() / v.len() as f64)
            };
            let (x, y) = (mean(&spec.x, 1.0)?, mean(f, spec.y_scale)?);
            let series = series_of(mine[0]);
            let name = match (series.is_empty(), spec.y.len() > 1) {
                (false, true) => format!("{series} {}", short_name(f)),
                (false, false) => series,
                (true, _) => short_name(f),
            };
            let label = point.get("set").cloned().unwrap_or_else(|| {
                point.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
            });
            match out.iter_mut().find(|(n, _)| *n == name) {
                Some((_, pts)) => pts.push((x, y, label)),
                None => out.push((name, vec![(x, y, label)])),
            }
        }
    }
    for (_, pts) in &mut out {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    Ok(out)
}

/// "commit_latency.p99_us" -> "p99"; other paths keep their last part.
fn short_name(field: &str) -> String {
    let last = field.rsplit('.').next().unwrap_or(field);
    if let Some(p) = last.strip_suffix("_us").filter(|p| p.starts_with('p')) {
        return match p {
            "p999" => "p99.9".into(),
            "p9999" => "p99.99".into(),
            _ => p.to_owned(),
        };
    }
    last.strip_suffix("_usd_per_1000_txn").unwrap_or(last).to_owned()
}

/// Read back the rows of a CSV that [`to_csv`] wrote for `cfg` (to
/// re-draw plots without running again). Numbers come back as numbers.
pub fn from_csv(cfg: &SweepConfig, text: &str) -> Result<Vec<Row>, String> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().ok_or("an empty CSV")?.split(',').collect();
    let mut rows = Vec::new();
    for (n, line) in lines.enumerate() {
        let cells = split_csv_line(line);
        if cells.len() != header.len() {
            return Err(format!(
                "CSV line {}: {} cells, the header has {}",
                n + 2,
                cells.len(),
                header.len()
            ));
        }
        let mut row = Row { repetition: 0, point: BTreeMap::new(), fields: BTreeMap::new() };
        for (h, c) in header.iter().zip(cells) {
            if *h == "repetition" {
                row.repetition =
                    c.parse().map_err(|_| format!("CSV line {}: bad repetition", n + 2))?;
            } else if cfg.grid.contains_key(*h) {
                row.point.insert((*h).to_owned(), c);
            } else if !c.is_empty() {
                let v = c.parse::<f64>().map(Value::from).unwrap_or(Value::String(c));
                row.fields.insert((*h).to_owned(), v);
            }
        }
        if row.point.len() != cfg.grid.len() {
            return Err(format!("CSV line {}: it lacks a grid column of this config", n + 2));
        }
        rows.push(row);
    }
    Ok(rows)
}

/// Split one CSV line, honouring double quotes.
pub fn split_csv_line(line: &str) -> Vec<String> {
    let mut cells = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                cells.last_mut().expect("a cell").push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => cells.push(String::new()),
            (c, _) => cells.last_mut().expect("a cell").push(c),
        }
    }
    cells
}

/// Write the CSV and every plot under `out_dir`; returns the files written.
/// (`with_csv`: false when re-drawing from that CSV).
pub fn write_outputs(
    cfg: &SweepConfig,
    rows: &[Row],
    out_dir: &Path,
    with_csv: bool,
) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let mut written = Vec::new();
    if with_csv {
        let csv = out_dir.join(format!("{}.csv", cfg.name));
        std::fs::write(&csv, to_csv(cfg, rows)).map_err(|e| format!("{}: {e}", csv.display()))?;
        written.push(csv);
    }
    for spec in &cfg.plot {
        let path = out_dir.join(&spec.file);
        if spec.kind == "scatter" {
            crate::plot::draw_scatter(&path, spec, &scatter_data(spec, rows)?)?;
        } else {
            let (xs, series) = plot_data(cfg, spec, rows)?;
            crate::plot::draw(&path, spec, &xs, &series)?;
        }
        written.push(path);
    }
    Ok(written)
}
