//! The fuzz targets' registry: every target in `milliscale::internals::fuzz`
//! runs here for a short, fixed time on every test run, on seeded
//! mutations of valid encodings (so the inputs get past the magic numbers
//! and, resealed, past the checksums into the parsers). `fuzz/` runs the
//! same targets coverage-guided with cargo-fuzz (nightly).
//!
//! `MILLISCALE_FUZZ_MS` sets the time per target (default 3000);
//! `MILLISCALE_FUZZ_SEED` the first seed (a failure prints its seed and
//! input length).

use std::time::{Duration, Instant};

use bytes::Bytes;
use milliscale::Manifest;
use milliscale::internals::fuzz::{fuzz_chunk, fuzz_manifest, fuzz_part};
use milliscale::internals::record::{Entry, Op, PartBuilder, Record};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// A target and the valid inputs its mutations start from.
struct Target {
    name: &'static str,
    run: fn(&[u8]),
    corpus: Vec<Vec<u8>>,
}

fn part(group: u32, entries: &[Entry]) -> Vec<u8> {
    let mut b = PartBuilder::new(group, 0);
    for e in entries {
        b.push(e);
    }
    b.finish().to_vec()
}

fn corpus_parts() -> Vec<Vec<u8>> {
    let record = |key: &[u8], op: Op| Record { table: 3, key: Bytes::copy_from_slice(key), op };
    let commit = Entry::Commit {
        csn: 7,
        dsn: 5,
        records: vec![
            record(b"k1", Op::Insert(Bytes::from_static(b"value"))),
            record(b"k2", Op::Delta { offset: 2, bytes: Bytes::from_static(b"xy") }),
            record(b"k3", Op::Delete),
        ]
        .into(),
    };
    let one = part(1, &[commit.clone(), Entry::Abort { csn: 8 }]);
    let mut two = one.clone();
    two.extend_from_slice(&part(2, &[commit]));
    vec![one, two, part(0, &[])]
}

fn corpus_manifests() -> Vec<Vec<u8>> {
    let mut m = Manifest::initial(1, 4, 2, 3, 10_000);
    let first = m.encode().to_vec();
    m.tables.push("accounts".into());
    vec![first, m.encode().to_vec()]
}

fn corpus_chunks() -> Vec<Vec<u8>> {
    // A chunk's header begins with its magic; the rest is for the mutator.
    let mut c = b"MSCK".to_vec();
    c.extend_from_slice(&[1; 60]);
    vec![c, b"MSCO 00000000\n{}".to_vec()]
}

/// One mutation of `input`: flip, overwrite, insert, delete, truncate or
/// splice, one to eight times.
fn mutate(rng: &mut SmallRng, input: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..rng.random_range(1..=8) {
        let at = if v.is_empty() { 0 } else { rng.random_range(0..v.len()) };
        match rng.random_range(0..6) {
            0 if !v.is_empty() => v[at] ^= 1 << rng.random_range(0..8),
            1 if !v.is_empty() => v[at] = rng.random(),
            2 => v.insert(at, rng.random()),
            3 if !v.is_empty() => {
                v.remove(at);
            }
            4 => v.truncate(at),
            _ => {
                let n = rng.random_range(0..16);
                v.splice(at..at, (0..n).map(|_| rng.random::<u8>()));
            }
        }
    }
    v
}

#[test]
fn every_fuzz_target_survives_its_time_budget() {
    let budget = Duration::from_millis(
        std::env::var("MILLISCALE_FUZZ_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(3000),
    );
    let first: u64 =
        std::env::var("MILLISCALE_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let targets = [
        Target { name: "part", run: fuzz_part, corpus: corpus_parts() },
        Target { name: "manifest", run: fuzz_manifest, corpus: corpus_manifests() },
        Target { name: "chunk", run: fuzz_chunk, corpus: corpus_chunks() },
    ];
    for t in &targets {
        // The corpus itself first: valid inputs must pass.
        for c in &t.corpus {
            (t.run)(c);
        }
        let until = Instant::now() + budget;
        let mut runs = 0u64;
        let mut seed = first;
        while Instant::now() < until {
            let mut rng = SmallRng::seed_from_u64(seed);
            let base = &t.corpus[rng.random_range(0..t.corpus.len())];
            let input = if rng.random_range(0..8) == 0 {
                (0..rng.random_range(0..200)).map(|_| rng.random()).collect()
            } else {
                mutate(&mut rng, base)
            };
            let r = std::panic::catch_unwind(|| (t.run)(&input));
            assert!(
                r.is_ok(),
                "fuzz target {} panicked at seed {seed} ({} bytes)",
                t.name,
                input.len()
            );
            runs += 1;
            seed += 1;
        }
        eprintln!("fuzz target {}: {runs} inputs in {budget:?}, seeds {first}..{seed}", t.name);
        assert!(runs > 100, "fuzz target {} ran only {runs} inputs", t.name);
    }
}
