//! `bench ycsb --server`: the benchmark drives a `milliscale serve`
//! process from this one through the client, closed loop and open loop
//! (`--rate`), one-shot and pipelined, and reports what the server did.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};

use serde_json::Value;

/// A server on the simulated S3 Express store, its address, and its
/// standard output (kept open: a write to a closed pipe would fail it).
struct Served(Child, String, Option<BufReader<ChildStdout>>);

impl Served {
    fn start() -> Served {
        let child = Command::new(env!("CARGO_BIN_EXE_milliscale"))
            .args(["serve", "--store", "sim://s3x?seed=1", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the server");
        // Owned at once, so that a failure below still kills and reaps it.
        let mut served = Served(child, String::new(), None);
        let mut out = BufReader::new(served.0.stdout.take().expect("stdout"));
        let mut line = String::new();
        while out.read_line(&mut line).expect("the server's output") > 0 {
            if let Some(addr) = line.trim_end().strip_prefix("listening on ") {
                served.1 = addr.to_owned();
                served.2 = Some(out);
                return served;
            }
            line.clear();
        }
        panic!("the server ended without listening");
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One benchmark run against `addr`; its JSON report.
fn bench(addr: &str, extra: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_milliscale"))
        .args(["bench", "ycsb", "--workload", "a", "--records", "2000", "--json"])
        .args(["--warmup-s", "0.5", "--duration-s", "3", "--server", addr])
        .args(["--sessions", "16", "--client-threads", "1"])
        .args(extra)
        .output()
        .expect("run the benchmark");
    assert!(out.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("a JSON report")
}

fn num(r: &Value, key: &str) -> f64 {
    r[key].as_f64().unwrap_or_else(|| panic!("{key} missing in {r}"))
}

/// Closed loop runs as fast as the sessions go; open loop keeps to the
/// rate (a closed-loop run here does thousands a second, so a client
/// that ignored the rate would fail the bound), and says so.
#[test]
fn the_server_benchmark_runs_closed_and_open_loop() {
    let served = Served::start();
    let closed = bench(&served.1, &[]);
    assert!(num(&closed, "committed") > 0.0, "{closed}");
    assert_eq!(closed["engine"], "milliscale-server (one-shot)");
    assert!(num(&closed["extra"], "server_cpu_us_per_txn") > 0.0, "{closed}");

    let rate = 200.0;
    for mode in [&["--rate", "200"][..], &["--rate", "200", "--pipelined"]] {
        let open = bench(&served.1, mode);
        let tps = num(&open, "txn_per_s");
        assert!((0.7 * rate..=1.3 * rate).contains(&tps), "{mode:?}: {tps} txn/s offered {rate}");
        assert_eq!(open["config"]["pacing"], "open(200/s)", "{open}");
        let notes = open["notes"].to_string();
        assert!(notes.contains("open loop: Poisson arrivals at 200/s"), "{notes}");
        let from = if mode.len() == 3 { "from the pre-commit answer" } else { "from sending" };
        assert!(notes.contains(&format!("commit latency: {from}")), "{mode:?}: {notes}");
        assert!(num(&open["commit_latency"], "p50_us") > 0.0, "{mode:?}: no commit latency");
    }
}
