use milliscale_bench::sweep::*;

const CONFIG: &str = r#"
name = "t"
benchmark = "ycsb"
repetitions = 2
[args]
records = 1000
[grid]
variant = ["milliscale", "s3x"]
threads = [1, 2]
[[plot]]
file = "a.png"
title = "t"
x = "threads"
y = ["txn_per_s"]
series = "variant"
[[plot]]
file = "b.png"
title = "t"
x = "@y"
y = ["commit_latency.p50_us", "commit_latency.p999_us"]
series = "variant"
"#;

fn rows(cfg: &SweepConfig) -> Vec<Row> {
    let mut rows = Vec::new();
    for rep in 0..2 {
        for p in cfg.points() {
            let t: f64 = p["threads"].parse().expect("number");
            let v = if p["variant"] == "s3x" { 10.0 } else { 20.0 };
            let json = serde_json::json!({
                "txn_per_s": v * t + rep as f64,
                "commit_latency": {"p50_us": v, "p999_us": v * 3.0},
                "config": {"store": "sim://s3x"},
                "memory": {"rss_mib_samples": [[0.0, 1.0]]},
            });
            rows.push(Row { repetition: rep, point: p, fields: flatten(&json) });
        }
    }
    rows
}

/// Named sets expand into their flags; an unknown set is refused; the
/// shipped configs all load.
#[test]
fn sets_expand_and_every_shipped_config_loads() {
    let cfg: SweepConfig = toml::from_str(
        r#"
name = "s"
benchmark = "ycsb"
[args]
threads = 2
[grid]
set = ["a", "b"]
[sets.a]
log-lanes = 1
put-per-flush = true
[sets.b]
engine = "slatedb"
[[plot]]
file = "p.png"
title = "t"
kind = "scatter"
x = "log.usd_per_hour"
y = ["commit_latency.p50_us"]
series = "engine"
"#,
    )
    .expect("parse");
    cfg.validate().expect("valid");
    let points = cfg.points();
    let argv = cfg.argv(&points[0], 0);
    assert!(argv.windows(2).any(|w| w == ["--log-lanes", "1"]), "{argv:?}");
    assert!(argv.contains(&"--put-per-flush".to_owned()) && !argv.contains(&"--set".to_owned()));
    let argv = cfg.argv(&points[1], 0);
    assert!(argv.windows(2).any(|w| w == ["--engine", "slatedb"]), "{argv:?}");
    let mut bad = cfg.clone();
    bad.grid.insert("set".into(), vec![toml::Value::String("c".into())]);
    assert!(bad.validate().expect_err("unknown set").contains("\"c\""));
    let rows: Vec<Row> = points
        .iter()
        .enumerate()
        .map(|(i, p)| Row {
            repetition: 0,
            point: p.clone(),
            fields: flatten(&serde_json::json!({
                "engine": if i == 0 { "milliscale" } else { "slatedb" },
                "log": {"usd_per_hour": 1.0 + i as f64},
                "commit_latency": {"p50_us": 10.0},
            })),
        })
        .collect();
    let data = scatter_data(&cfg.plot[0], &rows).expect("data");
    assert_eq!(data.len(), 2, "one series per engine");
    assert_eq!(data[0].1, [(1.0, 10.0, "a".to_owned())]);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/sweeps");
    for f in std::fs::read_dir(&dir).expect("configs") {
        let path = f.expect("entry").path();
        SweepConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn the_grid_expands_and_becomes_flags() {
    let cfg: SweepConfig = toml::from_str(CONFIG).expect("parse");
    cfg.validate().expect("valid");
    let points = cfg.points();
    assert_eq!(points.len(), 4);
    let argv = cfg.argv(&points[1], 1);
    assert_eq!(
        argv,
        [
            "bench",
            "ycsb",
            "--seed",
            "43",
            "--records",
            "1000",
            "--threads",
            "1",
            "--variant",
            "s3x",
            "--json"
        ]
    );
}

#[test]
fn plot_data_averages_repetitions_per_series() {
    let cfg: SweepConfig = toml::from_str(CONFIG).expect("parse");
    let rows = rows(&cfg);
    let (xs, series) = plot_data(&cfg, &cfg.plot[0], &rows).expect("data");
    assert_eq!(xs, ["1", "2"]);
    assert_eq!(series[0].0, "milliscale");
    // 20 * threads + repetition (0 or 1), averaged: 20.5 and 40.5.
    assert_eq!(series[0].1, vec![("1".to_owned(), 20.5), ("2".to_owned(), 40.5)]);
    assert_eq!(series[1].1, vec![("1".to_owned(), 10.5), ("2".to_owned(), 20.5)]);
    let (xs, series) = plot_data(&cfg, &cfg.plot[1], &rows).expect("data");
    assert_eq!(xs, ["p50", "p99.9"]);
    assert_eq!(series[1].1, vec![("p50".to_owned(), 10.0), ("p99.9".to_owned(), 30.0)]);
    let csv = to_csv(&cfg, &rows);
    assert_eq!(csv.lines().count(), 9);
    assert!(csv.lines().next().expect("header").starts_with("repetition,threads,variant,"));
}

#[test]
fn the_csv_reads_back_for_replotting() {
    let cfg: SweepConfig = toml::from_str(CONFIG).expect("parse");
    let rows = rows(&cfg);
    let back = from_csv(&cfg, &to_csv(&cfg, &rows)).expect("read back");
    assert_eq!(back.len(), rows.len());
    for spec in &cfg.plot {
        assert_eq!(
            plot_data(&cfg, spec, &back).expect("data"),
            plot_data(&cfg, spec, &rows).expect("data")
        );
    }
    assert_eq!(split_csv_line("a,\"b,\"\"c\"\"\",d"), ["a", "b,\"c\"", "d"]);
}

#[test]
fn overrides_scale_a_config_up() {
    let mut cfg: SweepConfig = toml::from_str(CONFIG).expect("parse");
    let sets = ["threads=1,2, 16", "records=30000000", "duration=30", "repetitions=3"];
    cfg.apply_overrides(&sets.map(String::from)).expect("overrides");
    assert_eq!(cfg.repetitions, 3);
    assert_eq!(cfg.points().len(), 6);
    let argv = cfg.argv(&cfg.points()[4], 0).join(" ");
    assert_eq!(
        argv,
        "bench ycsb --seed 42 --duration 30 --records 30000000 --threads 16 \
         --variant milliscale --json"
    );
    for bad in ["threads", "=3", "records=", "repetitions=0", "repetitions=many"] {
        let mut cfg: SweepConfig = toml::from_str(CONFIG).expect("parse");
        assert!(cfg.apply_overrides(&[bad.to_owned()]).is_err(), "{bad}");
    }
}

#[test]
fn bad_configs_are_refused() {
    for bad in [
        CONFIG.replace("benchmark = \"ycsb\"", "benchmark = \"tpch\""),
        CONFIG.replace("x = \"threads\"", "x = \"records\""),
        CONFIG.replace("series = \"variant\"\n[[plot]]", "series = \"nope\"\n[[plot]]"),
        CONFIG.replace("[args]\nrecords = 1000", "[args]\nthreads = 3"),
        CONFIG.replace(
            "series = \"variant\"\n[[plot]]",
            "series = \"variant\"\nx_axis = \"log\"\n[[plot]]",
        ),
        CONFIG.replace("x = \"@y\"", "x = \"@y\"\nx_axis = \"linear\""),
        CONFIG
            .replace("x = \"threads\"", "x = \"variant\"\nx_axis = \"linear\"")
            .replace("series = \"variant\"\n[[plot]]", "[[plot]]"),
    ] {
        let cfg: SweepConfig = toml::from_str(&bad).expect("parse");
        assert!(cfg.validate().is_err(), "{bad}");
    }
    assert!(toml::from_str::<SweepConfig>(&CONFIG.replace("repetitions", "repeats")).is_err());
}
