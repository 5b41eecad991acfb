//! Key choice for YCSB: uniform, or zipfian scrambled the way YCSB's
//! `ScrambledZipfianGenerator` does it, so hot keys are spread over the key
//! space instead of clustering at the low end.

use rand::Rng;
use rand_distr::{Distribution, Zipf};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyDist {
    Uniform,
    Zipfian { theta: f64 },
}

#[derive(Clone)]
pub struct KeyChooser {
    n: u64,
    zipf: Option<Zipf<f64>>,
}

impl KeyChooser {
    pub fn new(n: u64, dist: KeyDist) -> Result<KeyChooser, String> {
        if n == 0 {
            return Err("at least one record is needed".into());
        }
        let zipf = match dist {
            KeyDist::Uniform => None,
            KeyDist::Zipfian { theta } => {
                if !(theta > 0.0 && theta.is_finite()) {
                    return Err(format!("theta must be a positive number, got {theta}"));
                }
                Some(Zipf::new(n as f64, theta).map_err(|e| format!("zipf: {e}"))?)
            }
        };
        Ok(KeyChooser { n, zipf })
    }

    /// A record number in `0..n`.
    pub fn next(&self, rng: &mut impl Rng) -> u64 {
        match &self.zipf {
            None => rng.random_range(0..self.n),
            Some(z) => {
                let rank = (z.sample(rng) as u64).saturating_sub(1).min(self.n - 1);
                fnv1a_64(rank) % self.n
            }
        }
    }
}

/// FNV-1a over the 8 bytes of `v`, as YCSB scrambles zipfian ranks.
pub fn fnv1a_64(v: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in v.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
