use hdrhistogram::Histogram;
use milliscale_bench::report::*;

#[test]
fn dollars_keep_significant_digits() {
    assert_eq!(usd(1.24e-6), "0.000001240");
    assert_eq!(usd(0.5), "0.5000");
    assert_eq!(usd(12.345), "12.35");
    assert_eq!(usd(12345.6), "12346");
    assert_eq!(usd(0.0), "0");
}

#[test]
fn percentiles_are_in_microseconds() {
    let mut h = Histogram::<u64>::new(3).expect("histogram");
    for v in 1..=1000u64 {
        h.record(v * 1_000).expect("record");
    }
    let p = Percentiles::from_nanos(&h);
    assert_eq!(p.count, 1000);
    assert!((p.p50_us - 500.0).abs() < 2.0, "{}", p.p50_us);
    assert!((p.max_us - 1000.0).abs() < 2.0, "{}", p.max_us);
}
