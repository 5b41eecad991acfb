use milliscale_bench::plot::*;
use milliscale_bench::sweep::PlotSpec;

#[test]
fn ticks_read_well() {
    assert_eq!(tick(200_000.0, 250_000.0), "200,000");
    assert_eq!(tick(1_234.4, 5_000.0), "1,234");
    assert_eq!(tick(12.25, 60.0), "12.2");
    assert_eq!(tick(0.0125, 0.05), "0.0125");
}

/// A plot is drawn to a PNG file that decodes at the expected size.
#[test]
fn a_plot_is_a_png() {
    let spec: PlotSpec = toml::from_str(
        "file = \"t.png\"\ntitle = \"t\"\nx = \"threads\"\ny = [\"txn_per_s\"]\nkind = \"bar\"",
    )
    .expect("spec");
    let path = std::env::temp_dir().join(format!("ms-plot-{}.png", std::process::id()));
    let xs = vec!["1".to_owned(), "2".to_owned()];
    let series = vec![("a".to_owned(), vec![("1".to_owned(), 3.0), ("2".to_owned(), 5.0)])];
    draw(&path, &spec, &xs, &series).expect("draw");
    let bytes = std::fs::read(&path).expect("written");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    // IHDR: width and height, big-endian, at bytes 16..24.
    assert_eq!(u32::from_be_bytes(bytes[16..20].try_into().expect("4")), 960);
    assert_eq!(u32::from_be_bytes(bytes[20..24].try_into().expect("4")), 600);
    std::fs::remove_file(&path).expect("clean up");
}

#[test]
fn log_ticks_read_well() {
    assert_eq!(log_tick(0.0), "1");
    assert_eq!(log_tick(1.0), "10");
    assert_eq!(log_tick(0.5), "3.16");
    assert_eq!(log_tick(3.0), "1,000");
    assert_eq!(log_tick(-1.0), "0.1");
}

/// A log y axis and a scatter draw to PNG files.
#[test]
fn a_log_axis_and_a_scatter_draw() {
    let spec: PlotSpec = toml::from_str(
        "file = \"t.png\"\ntitle = \"t\"\nx = \"log.usd_per_hour\"\ny = [\"p50\"]\n\
         kind = \"scatter\"\ny_axis = \"log\"",
    )
    .expect("spec");
    let path = std::env::temp_dir().join(format!("ms-plot-sc-{}.png", std::process::id()));
    let series = vec![
        ("milliscale p50".to_owned(), vec![(0.5, 10.0, "a".to_owned()), (2.0, 9.0, "b".into())]),
        ("slatedb p50".to_owned(), vec![(0.1, 200.0, "c".to_owned())]),
    ];
    draw_scatter(&path, &spec, &series).expect("draw");
    assert_eq!(&std::fs::read(&path).expect("written")[..8], b"\x89PNG\r\n\x1a\n");
    let bars: PlotSpec = toml::from_str(
        "file = \"t.png\"\ntitle = \"t\"\nx = \"@y\"\ny = [\"p50\"]\nkind = \"bar\"\n\
         y_axis = \"log\"",
    )
    .expect("spec");
    let xs = vec!["p50".to_owned(), "p99.9".to_owned()];
    let pts = vec![("p50".to_owned(), 8.0), ("p99.9".to_owned(), 300.0)];
    draw(&path, &bars, &xs, &[("a".to_owned(), pts)]).expect("draw");
    assert_eq!(&std::fs::read(&path).expect("written")[..8], b"\x89PNG\r\n\x1a\n");
    std::fs::remove_file(&path).expect("clean up");
}

/// A numeric x axis draws; a value that is not a number is refused.
#[test]
fn a_linear_x_axis_needs_numbers() {
    let spec: PlotSpec = toml::from_str(
        "file = \"t.png\"\ntitle = \"t\"\nx = \"rate\"\ny = [\"p50\"]\nx_axis = \"linear\"",
    )
    .expect("spec");
    let path = std::env::temp_dir().join(format!("ms-plot-lin-{}.png", std::process::id()));
    let xs = vec!["1000".to_owned(), "4000".to_owned(), "20000".to_owned()];
    let pts = xs.iter().map(|x| (x.clone(), 20.0)).collect();
    draw(&path, &spec, &xs, &[("".to_owned(), pts)]).expect("draw");
    assert_eq!(&std::fs::read(&path).expect("written")[..8], b"\x89PNG\r\n\x1a\n");
    std::fs::remove_file(&path).expect("clean up");
    let bad = vec!["1000".to_owned(), "many".to_owned()];
    let err = draw(&path, &spec, &bad, &[]).expect_err("not a number");
    assert!(err.contains("\"many\" is not a number"), "{err}");
}
