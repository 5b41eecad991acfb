use milliscale_bench::variant::*;

#[test]
fn sims_get_the_seed_unless_they_have_one() {
    let mut l = LogSettings {
        stores: vec![
            "sim://s3x".into(),
            "sim://gp3?stalls=1&inner=file:///x".into(),
            "sim://io2?seed=3".into(),
            "memory://".into(),
        ],
        ..LogSettings::default()
    };
    l.seed_sims(9);
    assert_eq!(
        l.stores,
        [
            "sim://s3x?seed=9",
            "sim://gp3?seed=9&stalls=1&inner=file:///x",
            "sim://io2?seed=3",
            "memory://"
        ]
    );
}
