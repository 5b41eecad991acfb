use milliscale_bench::keys::*;
use rand::SeedableRng;

#[test]
fn zipfian_is_skewed_and_scrambled() {
    let n = 10_000;
    let c = KeyChooser::new(n, KeyDist::Zipfian { theta: 0.99 }).expect("chooser");
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let mut counts = vec![0u32; n as usize];
    for _ in 0..200_000 {
        counts[c.next(&mut rng) as usize] += 1;
    }
    let hottest = counts.iter().enumerate().max_by_key(|(_, c)| **c).map(|(i, _)| i).expect("some");
    let top = *counts.iter().max().expect("some");
    assert!(top > 10_000, "the hottest key gets >5% of accesses: {top}");
    assert_ne!(hottest, 0, "rank 1 is scrambled away from key 0");
    let u = KeyChooser::new(n, KeyDist::Uniform).expect("chooser");
    let mut counts = vec![0u32; n as usize];
    for _ in 0..200_000 {
        counts[u.next(&mut rng) as usize] += 1;
    }
    assert!(*counts.iter().max().expect("some") < 100);
    assert!(KeyChooser::new(n, KeyDist::Zipfian { theta: -1.0 }).is_err());
}
