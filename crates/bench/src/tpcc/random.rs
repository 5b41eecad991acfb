//! TPC-C's random inputs (spec §2.1.6 and §4.3.2).

use rand::Rng;
use rand::rngs::SmallRng;

/// The run-time constants C of NURand (spec §2.1.6). `c_last_load` is used
/// to generate the population's last names, `c_last_run` the inputs; the
/// spec requires their difference to be in 65..=119 and not 96 or 112.
#[derive(Debug, Clone, Copy)]
pub struct NuConstants {
    pub c_last_load: u32,
    pub c_last_run: u32,
    pub c_id: u32,
    pub ol_i_id: u32,
}

impl NuConstants {
    pub fn new(rng: &mut SmallRng) -> NuConstants {
        let c_last_load = rng.random_range(0..=255);
        let delta = loop {
            let d = rng.random_range(65..=119);
            if d != 96 && d != 112 {
                break d;
            }
        };
        NuConstants {
            c_last_load,
            c_last_run: (c_last_load + delta) % 256,
            c_id: rng.random_range(0..=1023),
            ol_i_id: rng.random_range(0..=8191),
        }
    }
}

/// NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y - x + 1)) + x.
pub fn nurand(rng: &mut SmallRng, a: u32, x: u32, y: u32, c: u32) -> u32 {
    (((rng.random_range(0..=a) | rng.random_range(x..=y)) + c) % (y - x + 1)) + x
}

const SYLLABLES: [&str; 10] =
    ["BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING"];

/// The last name for number `n` in 0..=999: three syllables, one per digit.
pub fn last_name(n: u32) -> Vec<u8> {
    let mut s = Vec::with_capacity(16);
    for digit in [n / 100, (n / 10) % 10, n % 10] {
        s.extend_from_slice(SYLLABLES[digit as usize].as_bytes());
    }
    s
}

/// a-string: random alphanumeric characters, length in `min..=max`.
pub fn astring(rng: &mut SmallRng, min: usize, max: usize) -> Vec<u8> {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let n = rng.random_range(min..=max);
    (0..n).map(|_| CHARS[rng.random_range(0..CHARS.len())]).collect()
}

/// n-string: random digits, length in `min..=max`.
pub fn nstring(rng: &mut SmallRng, min: usize, max: usize) -> Vec<u8> {
    let n = rng.random_range(min..=max);
    (0..n).map(|_| b'0' + rng.random_range(0..10u8)).collect()
}

/// A zip code: 4 random digits then "11111".
pub fn zip(rng: &mut SmallRng) -> Vec<u8> {
    let mut z = nstring(rng, 4, 4);
    z.extend_from_slice(b"11111");
    z
}

/// I_DATA / S_DATA: an a-string of 26..=50 characters, 10% of them with
/// "ORIGINAL" at a random place.
pub fn data_with_original(rng: &mut SmallRng) -> Vec<u8> {
    let mut s = astring(rng, 26, 50);
    if rng.random_bool(0.1) {
        let at = rng.random_range(0..=s.len() - 8);
        s[at..at + 8].copy_from_slice(b"ORIGINAL");
    }
    s
}

/// Microseconds since the Unix epoch (dates are stored this way; 0 = null).
pub fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_micros() as u64)
        .max(1)
}
