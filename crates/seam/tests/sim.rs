//! The seeded scheduler: a seed replays the same interleaving and clock,
//! different seeds interleave differently, simulated time does not pass in
//! real time, and outside a simulation every call is the OS's.

#![cfg(feature = "sim")]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use milliscale_seam::{self as seam, sim};

/// Four tasks that each log 30 steps, yielding between them and sleeping
/// now and then; a consumer that takes their messages from a channel.
/// Returns the log, in the order the steps ran.
fn program() -> Vec<String> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = crossbeam_channel::unbounded::<(u32, u32)>();
    let workers: Vec<_> = (0..4u32)
        .map(|t| {
            let (log, tx) = (Arc::clone(&log), tx.clone());
            seam::spawn(format!("worker-{t}"), move || {
                for i in 0..30u32 {
                    let step = format!("{t}.{i}");
                    seam::trace(&[step.as_bytes()]);
                    log.lock().expect("log").push(step);
                    tx.send((t, i)).expect("send");
                    if i % 7 == t {
                        seam::sleep(Duration::from_millis(100));
                    } else {
                        seam::yield_now();
                    }
                }
            })
            .expect("spawn")
        })
        .collect();
    drop(tx);
    let consumer = {
        let log = Arc::clone(&log);
        seam::spawn("consumer".into(), move || {
            let mut got = 0;
            while let Ok((t, i)) = seam::recv_timeout(&rx, Duration::from_secs(5)) {
                log.lock().expect("log").push(format!("got {t}.{i}"));
                got += 1;
            }
            got
        })
        .expect("spawn")
    };
    for w in workers {
        w.join().expect("a worker");
    }
    assert_eq!(consumer.join().expect("the consumer"), 120, "every message arrives");
    Arc::try_unwrap(log).expect("one owner").into_inner().expect("log")
}

#[test]
fn a_seed_replays_the_same_interleaving_and_trace() {
    for seed in 0..20 {
        let a = sim::run(seed, program);
        let b = sim::run(seed, program);
        assert_eq!(a.trace, b.trace, "seed {seed}: the trace hashes differ");
        assert_eq!(a.value, b.value, "seed {seed}: the steps ran in another order");
        assert_eq!(a.elapsed, b.elapsed, "seed {seed}: the clock differs");
        assert_eq!(a.tasks, 6);
    }
}

#[test]
fn seeds_interleave_differently() {
    let traces: std::collections::BTreeSet<u64> =
        (0..20).map(|s| sim::run(s, program).trace).collect();
    assert!(traces.len() >= 15, "20 seeds gave {} interleavings", traces.len());
}

#[test]
fn simulated_time_passes_without_real_time() {
    let started = Instant::now();
    let r = sim::run(7, || {
        let t0 = seam::now();
        seam::sleep(Duration::from_secs(3600));
        seam::now() - t0
    });
    assert_eq!(r.value, Duration::from_secs(3600), "an hour's sleep reads as an hour");
    assert!(r.elapsed >= Duration::from_secs(3600));
    assert!(started.elapsed() < Duration::from_secs(5), "and takes no real hour");
    // Each worker sleeps 100 ms at most 5 times: the run's clock says so.
    let r = sim::run(3, program);
    assert!(r.elapsed >= Duration::from_millis(400), "{:?}", r.elapsed);
}

#[test]
fn a_wait_times_out_at_its_deadline_on_the_simulated_clock() {
    let r = sim::run(1, || {
        let t0 = seam::now();
        let held = seam::wait_until(Some(t0 + Duration::from_secs(2)), Duration::ZERO, || false);
        (held, seam::now() - t0)
    });
    assert!(!r.value.0);
    assert_eq!(r.value.1, Duration::from_secs(2), "it wakes exactly at its deadline");
}

#[test]
fn a_panicking_task_is_reported_and_the_others_go_on() {
    let r = sim::run(5, || {
        let bad = seam::spawn("bad".into(), || panic!("deliberate")).expect("spawn");
        let good = seam::spawn("good".into(), || {
            seam::sleep(Duration::from_millis(5));
            42
        })
        .expect("spawn");
        (bad.join().is_err(), good.join().expect("good"))
    });
    assert_eq!(r.value, (true, 42));
}

#[test]
fn outside_a_simulation_every_call_is_the_systems() {
    let t0 = Instant::now();
    seam::sleep(Duration::from_millis(20));
    assert!(t0.elapsed() >= Duration::from_millis(20));
    assert!(seam::now() >= t0 + Duration::from_millis(20));
    let h = seam::spawn("plain".into(), || 7).expect("spawn");
    assert_eq!(h.join().expect("join"), 7);
    let (tx, rx) = crossbeam_channel::unbounded::<u8>();
    assert!(seam::recv_timeout(&rx, Duration::from_millis(10)).is_err());
    tx.send(1).expect("send");
    assert_eq!(seam::recv_timeout(&rx, Duration::from_millis(10)).expect("recv"), 1);
}
