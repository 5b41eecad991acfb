//! The deterministic simulation of MILANA, run over many seeds: shard
//! crashes with standby recovery, coordinators dying mid-commit,
//! partitions, lost messages and clock skew, checked by the oracle
//! (atomicity, acknowledged outcomes, serializability in version order,
//! the bank's total, termination).
//!
//! `MILLISCALE_MILANA_SEEDS` (default 200) and `MILLISCALE_MILANA_SEED`
//! (the first seed, default 1) choose the seeds.

use milliscale_milana::dst::{DstConfig, run};
use milliscale_milana::participant::Mutations;

fn seeds() -> std::ops::Range<u64> {
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let first = env("MILLISCALE_MILANA_SEED", 1);
    first..first + env("MILLISCALE_MILANA_SEEDS", 200)
}

#[test]
fn every_seed_is_serializable_keeps_the_bank_and_terminates() {
    let (mut committed, mut aborted, mut unknown, mut audits, mut crashes) = (0, 0, 0, 0, 0);
    let (mut collected, mut forgotten, mut gone) = (0, 0, 0);
    for seed in seeds() {
        let r = run(&DstConfig::new(seed));
        assert!(r.violations.is_empty(), "seed {seed}: {:#?}", r.violations);
        committed += r.committed;
        aborted += r.aborted;
        unknown += r.unknown;
        audits += r.audits_committed;
        crashes += r.crashes;
        collected += r.collected;
        forgotten += r.forgotten;
        gone += r.gone;
    }
    eprintln!(
        "seeds {:?}: {committed} committed ({audits} audits), {aborted} aborted, {unknown} \
         unknown; {crashes} primary crashes; {collected} versions collected; {forgotten} \
         decided transactions forgotten; {gone} reads of versions gone at a restart",
        seeds()
    );
    // The runs did something worth checking.
    assert!(committed > 0 && aborted > 0 && audits > 0 && crashes > 0 && collected > 0);
    assert!(forgotten > 0, "decided transactions were forgotten");
}

#[test]
fn a_seed_replays_the_same_history() {
    let first = run(&DstConfig::new(42));
    for _ in 0..9 {
        assert_eq!(run(&DstConfig::new(42)).hash, first.hash);
    }
    assert_ne!(run(&DstConfig::new(43)).hash, first.hash);
}

/// The first seed of the CI range on which `mutations` break an oracle
/// check.
fn caught(mutations: Mutations) -> Option<(u64, String)> {
    seeds().find_map(|seed| {
        let mut cfg = DstConfig::new(seed);
        cfg.mutations = mutations;
        run(&cfg).violations.first().map(|v| (seed, v.clone()))
    })
}

#[test]
fn skipping_the_latest_read_check_is_caught() {
    let m = Mutations { skip_latest_read_check: true, ..Mutations::default() };
    let (seed, why) = caught(m).expect("the bug is caught within the seeds");
    eprintln!("caught at seed {seed}: {why}");
}

#[test]
fn voting_before_the_prepare_is_durable_is_caught() {
    let m = Mutations { vote_before_durable: true, ..Mutations::default() };
    let (seed, why) = caught(m).expect("the bug is caught within the seeds");
    eprintln!("caught at seed {seed}: {why}");
}

#[test]
fn committing_a_prepared_transaction_at_recovery_without_asking_is_caught() {
    let m = Mutations { commit_prepared_without_asking: true, ..Mutations::default() };
    let (seed, why) = caught(m).expect("the bug is caught within the seeds");
    eprintln!("caught at seed {seed}: {why}");
}

#[test]
fn forgetting_the_read_floor_at_recovery_is_caught() {
    let m = Mutations { forget_read_floor: true, ..Mutations::default() };
    let (seed, why) = caught(m).expect("the bug is caught within the seeds");
    eprintln!("caught at seed {seed}: {why}");
}

#[test]
fn a_restart_that_forgets_decided_transactions_is_caught() {
    let m = Mutations { restart_forgets_decided: true, ..Mutations::default() };
    let (seed, why) = caught(m).expect("the bug is caught within the seeds");
    eprintln!("caught at seed {seed}: {why}");
}

#[test]
fn forgetting_below_the_client_watermark_alone_is_caught() {
    let m = Mutations { forget_below_watermark_only: true, ..Mutations::default() };
    let (seed, why) = caught(m).expect("the bug is caught within the seeds");
    eprintln!("caught at seed {seed}: {why}");
}

#[test]
fn validating_without_the_scanned_ranges_is_caught() {
    let m = Mutations { skip_range_check: true, ..Mutations::default() };
    let (seed, why) = caught(m).expect("the bug is caught within the seeds");
    eprintln!("caught at seed {seed}: {why}");
}

#[test]
fn answering_a_read_of_a_version_not_yet_durable_is_caught() {
    let m = Mutations { read_fresh_versions: true, ..Mutations::default() };
    let (seed, why) = caught(m).expect("the bug is caught within the seeds");
    eprintln!("caught at seed {seed}: {why}");
}
