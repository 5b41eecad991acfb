//! A cluster doubles, in the simulation: 64 shards holding 20,000
//! accounts and 10,000 clients running the bank (transfers, a quarter of
//! them between neighbouring accounts) grow to 128 shards. From
//! `GROW_MS` of simulated time the mover runs as the rebalancer does:
//! the fullest shard's range nearest half the gap to the emptiest moves
//! there, or its biggest range is split, one change at a time, until the
//! shards are within a tenth of the mean. Every move is the full
//! handover of design record 0009 (the copy while served, the freeze,
//! the copy of what changed since, the map's conditional write, the
//! release), with clients that route by the map they last read. No
//! crashes, drops or partitions unless `FAULTS` is 1 (then the default
//! simulation's lost messages, partitions and crashes of the mover and of
//! a client, and a crash of each shard every 2 s on average), so that
//! otherwise the aborts are those of the workload and the moves.
//!
//! Reports the moves (how many, how long each froze its range and took
//! in all), the time until balanced, and the abort rate before, during
//! and after; the oracle checks the whole history.
//!
//! Usage: `cargo run --release -p milliscale-milana --example scale_moves [SEEDS] [TXNS] [GROW_MS] [FAULTS]`
//! (defaults 1 seed, 20 transactions per client, growth from 100 ms, no
//! faults: a short run, which CI makes; BENCHMARKS.md's is `3 60 200`).

use milliscale_milana::dst::{DstConfig, Reported, run};

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>());
    let seeds = args.next().and_then(Result::ok).unwrap_or(1);
    let txns = args.next().and_then(Result::ok).unwrap_or(20) as u32;
    let grow = args.next().and_then(Result::ok).unwrap_or(100) * 1_000;
    let faults = args.next().and_then(Result::ok).unwrap_or(0) == 1;
    println!(
        "64 shards growing to 128, 10,000 clients, 100,000 accounts, {txns} transactions each, \
         growth from {} ms, faults {}",
        grow / 1_000,
        if faults { "on" } else { "off" }
    );
    println!();
    println!(
        "| seed | moves (given up) | splits | frozen p50 / max ms | move p50 / max ms | \
         balanced after ms | aborts before / during / after | txns | events | violations | \
         wall s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut violations = 0;
    for seed in 1..=seeds {
        let mut cfg = DstConfig::new(seed);
        cfg.shards = 128;
        cfg.initial_shards = 64;
        cfg.clients = 10_000;
        cfg.accounts = 100_000;
        cfg.txns_per_client = txns;
        cfg.audit_fraction = 0.0;
        cfg.scan_fraction = 0.0;
        cfg.think = 20_000;
        cfg.balance = true;
        cfg.moves_from = grow;
        cfg.move_every = 200;
        if faults {
            // The default's rate per shard (one crash every 60 ms) would
            // keep some of 128 shards down at every moment: each shard
            // every 2 s instead, the cluster about every 16 ms.
            cfg.shard_crash_every = 2_000_000;
        } else {
            cfg.drop_rate = 0.0;
            cfg.shard_crash_every = 0;
            cfg.partition_every = 0;
            cfg.client_crash_chance = 0.0;
            cfg.mover_crash_chance = 0.0;
        }
        let wall = std::time::Instant::now();
        let r = run(&cfg);
        let wall = wall.elapsed().as_secs_f64();
        violations += r.violations.len();
        for v in r.violations.iter().take(5) {
            eprintln!("seed {seed}: {v}");
        }
        let moves: Vec<_> = r.moves.iter().filter(|m| !m.split).collect();
        let given_up = moves.iter().filter(|m| !m.done).count();
        let splits = r.moves.len() - moves.len();
        let mut frozen: Vec<u64> = moves.iter().filter_map(|m| m.frozen).collect();
        let mut took: Vec<u64> = moves.iter().map(|m| m.ended - m.began).collect();
        frozen.sort_unstable();
        took.sort_unstable();
        let ms = |v: &[u64], q: f64| {
            v.get(((v.len() as f64 - 1.0) * q) as usize).map_or(0.0, |x| *x as f64 / 1e3)
        };
        let end_of_moves = r.balanced_at.unwrap_or(r.end);
        let rate = |from: u64, to: u64| {
            let (mut a, mut n) = (0u64, 0u64);
            for (at, rep) in &r.timeline {
                if *at >= from && *at < to && *rep != Reported::Unknown {
                    n += 1;
                    a += u64::from(*rep == Reported::Aborted);
                }
            }
            if n == 0 { "-".to_owned() } else { format!("{:.1}%", 100.0 * a as f64 / n as f64) }
        };
        let balanced =
            r.balanced_at.map_or("not".to_owned(), |b| format!("{:.0}", (b - grow) as f64 / 1e3));
        println!(
            "| {seed} | {} ({given_up}) | {splits} | {:.1} / {:.1} | {:.1} / {:.1} | {balanced} | \
             {} / {} / {} | {} | {} | {} | {wall:.1} |",
            moves.len(),
            ms(&frozen, 0.5),
            ms(&frozen, 1.0),
            ms(&took, 0.5),
            ms(&took, 1.0),
            rate(0, grow),
            rate(grow, end_of_moves),
            rate(end_of_moves, u64::MAX),
            r.timeline.len(),
            r.events,
            r.violations.len(),
        );
    }
    println!();
    println!("oracle violations: {violations}");
    assert_eq!(violations, 0, "the oracle found violations");
}
