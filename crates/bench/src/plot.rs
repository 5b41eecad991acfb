//! PNG plots for `bench sweep` (plotters, bitmap backend).
//!
//! X is categorical (the grid's values in order, or percentile names);
//! each series is a line with markers, or a group of bars; or, for a
//! scatter, both axes are report values. Y is linear or logarithmic. Text
//! needs a
//! TrueType font: the first of `MILLISCALE_FONT` and a few common system
//! paths that exists is loaded once.

use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::sweep_config::PlotSpec;

/// One plotted line or bar group: (x category, mean y) in x order.
pub type Series = (String, Vec<(String, f64)>);

/// One scatter series: its name and its points (x, y, label) in x order.
pub type ScatterSeries = (String, Vec<(f64, f64, String)>);

const FONT_PATHS: [&str; 5] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];

fn ensure_font() -> Result<(), String> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let candidates =
            std::env::var("MILLISCALE_FONT").into_iter().chain(FONT_PATHS.map(String::from));
        for path in candidates {
            if let Ok(bytes) = std::fs::read(&path) {
                // Registered fonts must live for the program's life.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                return register_font("sans-serif", FontStyle::Normal, bytes)
                    .map_err(|_| format!("{path}: not a usable TrueType font"));
            }
        }
        Err(format!(
            "no TrueType font found for plots: set MILLISCALE_FONT to a .ttf file (tried {})",
            FONT_PATHS.join(", ")
        ))
    })
    .clone()
}

fn err(e: impl std::fmt::Display) -> String {
    format!("plot: {e}")
}

/// A y tick label: thousands separated, decimals only where the axis needs them.
pub fn tick(v: f64, ymax: f64) -> String {
    if ymax >= 100.0 {
        let n = v.round() as i64;
        let digits = n.unsigned_abs().to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        if n < 0 { format!("-{out}") } else { out }
    } else if ymax >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.4}")
    }
}

/// A log axis tick: `10^v` with at most 3 significant digits.
pub fn log_tick(v: f64) -> String {
    let x = 10f64.powf(v);
    if x >= 100.0 {
        tick(x, x)
    } else {
        let s = format!("{:.*}", (2 - x.log10().floor() as i32).max(0) as usize, x);
        if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_owned() } else { s }
    }
}

/// The y axis: where a value is drawn, its range, and its tick labels.
struct YAxis {
    log: bool,
    range: std::ops::Range<f64>,
    /// The largest value (for linear tick formats).
    max: f64,
}

impl YAxis {
    fn new(spec: &PlotSpec, values: impl Iterator<Item = f64> + Clone) -> YAxis {
        let max = values.clone().fold(0.0f64, f64::max).max(1e-12);
        if spec.y_axis == "log" {
            let min = values.filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min).min(max);
            // Room below the smallest bar: at least a factor of 2.
            let lo = (min.log10() - 0.3).floor();
            let hi = (max.log10() + 0.15).ceil().max(lo + 1.0);
            YAxis { log: true, range: lo..hi, max }
        } else {
            YAxis { log: false, range: 0.0..max * 1.15, max: max * 1.15 }
        }
    }

    /// Where `v` is drawn (a non-positive value sits on a log axis' floor).
    fn at(&self, v: f64) -> f64 {
        if self.log { if v > 0.0 { v.log10() } else { self.range.start } } else { v }
    }

    fn label(&self, v: f64) -> String {
        if self.log { log_tick(v) } else { tick(v, self.max) }
    }
}

type Area<'b> = DrawingArea<BitMapBackend<'b>, plotters::coord::Shift>;
type Chart<'a, 'b> = ChartContext<
    'a,
    BitMapBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// Every plot's chart: its title, margins and axis ranges.
fn new_chart<'a, 'b>(
    root: &'a Area<'b>,
    spec: &PlotSpec,
    x: std::ops::Range<f64>,
    y: &YAxis,
) -> Result<Chart<'a, 'b>, String> {
    ChartBuilder::on(root)
        .caption(&spec.title, ("sans-serif", 26))
        .margin(20)
        .x_label_area_size(55)
        .y_label_area_size(90)
        .build_cartesian_2d(x, y.range.clone())
        .map_err(err)
}

/// A series as a line with a marker at each point, named in the legend.
fn line_with_markers(
    chart: &mut Chart<'_, '_>,
    line: &[(f64, f64)],
    color: RGBAColor,
    name: String,
    width: u32,
) -> Result<(), String> {
    chart
        .draw_series(LineSeries::new(line.to_vec(), color.stroke_width(width)))
        .map_err(err)?
        .label(name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
    chart.draw_series(line.iter().map(|p| Circle::new(*p, 5, color.filled()))).map_err(err)?;
    Ok(())
}

/// Draw the legend and write the file.
fn finish<'a, 'b: 'a>(
    mut chart: Chart<'a, 'b>,
    root: &Area<'b>,
    legend: SeriesLabelPosition,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 17))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// Draw `series` over `xs` into a PNG at `path`: evenly spaced
/// categories, or with `x_axis = "linear"` at their numeric values.
pub fn draw(path: &Path, spec: &PlotSpec, xs: &[String], series: &[Series]) -> Result<(), String> {
    ensure_font()?;
    let n = xs.len().max(1);
    let y = YAxis::new(spec, series.iter().flat_map(|(_, pts)| pts.iter().map(|p| p.1)));
    let linear = spec.x_axis == "linear";
    let numbers = if linear {
        let parse = |x: &String| {
            x.parse::<f64>()
                .map_err(|_| format!("plot {}: x value {x:?} is not a number", spec.file))
        };
        xs.iter().map(parse).collect::<Result<Vec<f64>, String>>()?
    } else {
        Vec::new()
    };
    let x_range = if linear {
        let lo = numbers.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = numbers.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let pad = (hi - lo).max(1.0) * 0.05;
        (lo - pad)..(hi + pad)
    } else {
        -0.5f64..(n as f64 - 0.5)
    };
    let x_max = x_range.end;
    let index = |x: &str| {
        let i = xs.iter().position(|c| c == x).unwrap_or(0);
        if linear { numbers[i] } else { i as f64 }
    };
    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = new_chart(&root, spec, x_range, &y)?;
    let label = |v: &f64| {
        if linear {
            return tick(*v, x_max);
        }
        let i = v.round();
        if (v - i).abs() < 1e-6 && i >= 0.0 {
            xs.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .x_labels(if linear { 8 } else { 2 * n + 1 })
        .x_label_formatter(&label)
        .disable_x_mesh()
        .y_label_formatter(&|v| y.label(*v))
        .x_desc(spec.x_label.clone().unwrap_or_else(|| spec.x.clone()))
        .y_desc(spec.y_label.clone().unwrap_or_else(|| spec.y.join(", ")))
        .label_style(("sans-serif", 17))
        .axis_desc_style(("sans-serif", 19))
        .draw()
        .map_err(err)?;
    let groups = series.len().max(1) as f64;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let name = if name.is_empty() { spec.y.join(", ") } else { name.clone() };
        if spec.kind == "bar" {
            let width = 0.8 / groups;
            let base = y.range.start;
            let bars = pts.iter().map(|(x, v)| {
                let x0 = index(x) - 0.4 + width * i as f64;
                Rectangle::new([(x0, base), (x0 + width * 0.92, y.at(*v))], color.filled())
            });
            chart.draw_series(bars).map_err(err)?.label(name).legend(move |(x, y)| {
                Rectangle::new([(x, y - 6), (x + 16, y + 6)], color.filled())
            });
        } else {
            let line: Vec<(f64, f64)> = pts.iter().map(|(x, v)| (index(x), y.at(*v))).collect();
            line_with_markers(&mut chart, &line, color, name, 3)?;
        }
    }
    finish(chart, &root, SeriesLabelPosition::UpperLeft)
}

/// Draw a scatter: every configuration at (x, y), each series' points
/// joined in x order and labelled.
pub fn draw_scatter(path: &Path, spec: &PlotSpec, series: &[ScatterSeries]) -> Result<(), String> {
    ensure_font()?;
    let y = YAxis::new(spec, series.iter().flat_map(|(_, pts)| pts.iter().map(|p| p.1)));
    let xs = || series.iter().flat_map(|(_, pts)| pts.iter().map(|p| p.0));
    let (lo, hi) = (xs().fold(f64::INFINITY, f64::min), xs().fold(f64::NEG_INFINITY, f64::max));
    if !lo.is_finite() {
        return Err(format!("plot {}: no points", spec.file));
    }
    let pad = (hi - lo).max(hi.abs() * 0.1).max(1e-9) * 0.08;
    let x_range = (lo - pad).min(0.0f64.max(lo - pad))..(hi + pad * 3.0);
    let x_max = x_range.end;
    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = new_chart(&root, spec, x_range, &y)?;
    chart
        .configure_mesh()
        .x_labels(8)
        .x_label_formatter(&|v| tick(*v, x_max))
        .y_label_formatter(&|v| y.label(*v))
        .x_desc(spec.x_label.clone().unwrap_or_else(|| spec.x.clone()))
        .y_desc(spec.y_label.clone().unwrap_or_else(|| spec.y.join(", ")))
        .label_style(("sans-serif", 17))
        .axis_desc_style(("sans-serif", 19))
        .draw()
        .map_err(err)?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let line: Vec<(f64, f64)> = pts.iter().map(|(x, v, _)| (*x, y.at(*v))).collect();
        line_with_markers(&mut chart, &line, color, name.clone(), 2)?;
        let labels = pts.iter().zip(&line).map(|((_, _, label), p)| {
            Text::new(format!(" {label}"), *p, ("sans-serif", 13).into_font().color(&BLACK))
        });
        chart.draw_series(labels).map_err(err)?;
    }
    finish(chart, &root, SeriesLabelPosition::UpperRight)
}
