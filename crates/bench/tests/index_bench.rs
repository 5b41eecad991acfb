use milliscale_bench::index_bench::*;
use std::time::Duration;

#[test]
fn both_candidates_agree() {
    let cfg = IndexBenchConfig {
        keys: vec![5_000],
        threads: 2,
        phase_duration: Duration::from_millis(20),
        seed: 1,
    };
    let rs = run(&cfg, |_| {});
    assert_eq!(rs.len(), 3);
    assert!(rs.iter().all(|r| r.lookup_mops > 0.0 && r.scan100_kops > 0.0));
    let a = SccTree(scc::TreeIndex::new());
    let b = SkipList(crossbeam_skiplist::SkipMap::new());
    for k in 0..1000u64 {
        assert!(a.insert(&k.to_be_bytes(), k) && b.insert(&k.to_be_bytes(), k));
    }
    assert_eq!(a.scan(&10u64.to_be_bytes(), 100), b.scan(&10u64.to_be_bytes(), 100));
}
