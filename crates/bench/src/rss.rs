//! Resident-set sampling from /proc/self/statm, once per second, for the
//! memory check ("RSS at 60 s within 20% of RSS at 10 s"); and the
//! process's CPU time, for CPU per transaction.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::report::MemoryReport;

/// Current resident memory in MiB, if the platform exposes it.
pub fn rss_mib() -> Option<f64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: f64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096.0 / (1024.0 * 1024.0))
}

pub struct RssSampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<(f64, f64)>>,
}

impl RssSampler {
    pub fn start() -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut samples = Vec::new();
            let mut next = Duration::ZERO;
            while !flag.load(Ordering::Relaxed) {
                if t0.elapsed() >= next {
                    if let Some(m) = rss_mib() {
                        samples.push((next.as_secs_f64(), m));
                    }
                    next += Duration::from_secs(1);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            samples
        });
        RssSampler { stop, handle }
    }

    pub fn finish(self) -> Option<MemoryReport> {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self.handle.join().ok()?;
        let end = rss_mib().or_else(|| samples.last().map(|s| s.1))?;
        let at10 = samples.iter().find(|(t, _)| *t >= 10.0).map(|s| s.1);
        let max = samples.iter().map(|s| s.1).fold(end, f64::max);
        Some(MemoryReport {
            rss_mib_samples: samples,
            rss_mib_at_10s: at10,
            rss_mib_end: end,
            rss_mib_max: max,
        })
    }
}

/// This process's CPU time so far (user and system, all threads), in
/// seconds, from /proc/self/stat (in USER_HZ ticks, 100 a second on
/// Linux); 0 where there is no /proc.
pub fn process_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0.0 };
    // The command may hold spaces; the fields after it are plain.
    let Some((_, rest)) = stat.rsplit_once(')') else { return 0.0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are the 14th and 15th fields; `rest` starts at the 3rd.
    let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    (ticks(14) + ticks(15)) as f64 / 100.0
}
