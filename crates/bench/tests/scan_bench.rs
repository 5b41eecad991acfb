use milliscale_bench::scan_bench::*;

#[test]
fn a_small_scan_reads_every_row() {
    let cfg = ScanConfig { keys: 25_000, value_bytes: 16, backward: true };
    let r = run(&cfg, |_| {}).expect("run");
    assert_eq!(r.rows, 25_000);
    assert!(r.rss_mib_before > 0.0 && r.rss_mib_growth >= 0.0, "{r:?}");
}
