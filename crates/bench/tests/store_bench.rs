use milliscale_bench::store_bench::*;

#[test]
fn runs_and_compares_with_the_model() {
    let cfg = StoreBenchConfig {
        url: "sim://nvme".into(),
        size: 4096,
        count: 200,
        threads: 2,
        rollover: 7,
    };
    let r = run(&cfg).expect("run");
    assert_eq!(r.appends, 200);
    let e = r.expected.expect("nvme is a preset");
    assert!(e.p50_ms > 0.0 && e.p99_ms >= e.p50_ms);
    assert!(
        r.measured.p50_ms >= e.p50_ms * 0.5,
        "sleeps never return early: {:?} vs {:?}",
        r.measured,
        e
    );
    assert!(expected("memory://", 10).is_none());
}
