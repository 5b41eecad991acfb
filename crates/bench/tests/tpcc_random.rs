use milliscale_bench::tpcc::random::*;
use rand::SeedableRng;
use rand::rngs::SmallRng;

#[test]
fn last_names_follow_the_syllables() {
    assert_eq!(last_name(0), b"BARBARBAR");
    assert_eq!(last_name(371), b"PRICALLYOUGHT");
    assert!(last_name(999).len() <= 16);
}

#[test]
fn nurand_stays_in_range_and_c_delta_is_valid() {
    let mut rng = SmallRng::seed_from_u64(1);
    for _ in 0..100 {
        let c = NuConstants::new(&mut rng);
        let d = (c.c_last_run + 256 - c.c_last_load) % 256;
        assert!((65..=119).contains(&d) && d != 96 && d != 112, "{d}");
    }
    for _ in 0..10_000 {
        let v = nurand(&mut rng, 1023, 1, 3000, 259);
        assert!((1..=3000).contains(&v));
    }
}
