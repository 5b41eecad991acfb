//! The abort rate against the clock uncertainty ε, in the simulation:
//! Retwis (MILANA's Table 2 mix) on 3 shards from 20 clients, each client's
//! clock skewed by up to ±ε/2, for several contention levels α, with no
//! crashes, drops or partitions (so aborts come from conflicts and skew
//! alone). The shape of MILANA's Fig. 7 (PTP at 53 µs against NTP at
//! 1.5 ms); the paper reports up to 43% fewer aborts with PTP.
//!
//! Usage: `cargo run --release -p milliscale-milana --example epsilon_sweep [SEEDS] [TXNS] [LOG_US]`
//! (defaults 3 seeds, 60 transactions per client, log appends durable in
//! 600-3,000 µs). Prints a markdown table
//! of abort rates (mean over the seeds) and the oracle's verdict.

use milliscale_milana::dst::{DstConfig, run};

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>());
    let seeds = args.next().and_then(Result::ok).unwrap_or(3);
    let txns = args.next().and_then(Result::ok).unwrap_or(60) as u32;
    // The log's latency, µs: uniform in [LOG/5, LOG] (default 3,000, an
    // S3 Express append; 100 is closer to the paper's flash).
    let log = args.next().and_then(Result::ok).unwrap_or(3_000);
    let epsilons = [0u64, 53, 200, 500, 1_500, 5_000];
    let alphas = [0.5, 0.7, 0.9];
    println!(
        "Retwis on 3 shards, 20 clients, 10,000 keys, {txns} transactions each, {seeds} seeds"
    );
    println!();
    print!("| α |");
    for e in epsilons {
        print!(" ε = {e} µs |");
    }
    println!(" 1.5 ms against 53 µs |");
    println!("|---|{}---:|", "---:|".repeat(epsilons.len()));
    let mut violations = 0;
    for alpha in alphas {
        let mut rates = Vec::new();
        for epsilon in epsilons {
            let (mut aborted, mut finished) = (0u64, 0u64);
            for seed in 1..=seeds {
                let mut cfg = DstConfig::new(seed);
                cfg.retwis = Some(alpha);
                cfg.clients = 20;
                cfg.accounts = 10_000;
                cfg.txns_per_client = txns;
                cfg.epsilon = epsilon;
                cfg.log_latency = (log / 5, log);
                cfg.drop_rate = 0.0;
                cfg.shard_crash_every = 0;
                cfg.partition_every = 0;
                cfg.client_crash_chance = 0.0;
                // The map stays as it is: aborts from conflicts and skew only.
                cfg.move_every = 0;
                let r = run(&cfg);
                violations += r.violations.len();
                aborted += u64::from(r.aborted);
                finished += u64::from(r.committed + r.aborted);
            }
            rates.push(aborted as f64 / finished.max(1) as f64);
        }
        print!("| {alpha} |");
        for r in &rates {
            print!(" {:.1}% |", 100.0 * r);
        }
        let (ptp, ntp) = (rates[1], rates[4]);
        println!(" {:.2}x |", ntp / ptp.max(1e-9));
    }
    println!();
    println!("oracle violations: {violations}");
    assert_eq!(violations, 0, "the oracle found violations");
}
