//! `milliscale inspect` reads back what `milliscale bench ycsb` logged to a
//! directory, and a second run refuses to append after that log.

use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_milliscale"))
}

#[test]
fn inspect_reads_back_a_benchmark_log() {
    let dir = std::env::temp_dir().join(format!("milliscale-inspect-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let url = format!("file://{}", dir.display());
    let run = bin()
        .args(["bench", "ycsb", "--records", "2000", "--duration", "0.3", "--warmup", "0.1"])
        .args(["--threads", "2", "--store", &url, "--json"])
        .output()
        .expect("run the benchmark");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).expect("json");
    // Read-only transactions take no CSN and log nothing.
    let committed =
        report["by_kind"]["read-modify-write"]["committed"].as_u64().expect("committed");
    assert!(committed > 0);

    let out = bin().args(["inspect", "--store", &url, "--parts"]).output().expect("inspect");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("group 0:"), "{text}");
    assert!(text.contains("log/g0000/s00000000"), "{text}");
    let replayed: u64 = text
        .split("recovery would replay ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("a replay count");
    // The load's transactions, the warmup's and the measured ones: all
    // were acknowledged before the benchmark closed the database.
    assert!(replayed > committed, "replayed {replayed}, measured {committed}\n{text}");
    assert!(text.contains("0 commits dropped"), "{text}");

    let again = bin()
        .args(["bench", "ycsb", "--records", "100", "--duration", "0.1", "--store", &url])
        .output()
        .expect("second run");
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already holds a log"));
    let _ = std::fs::remove_dir_all(&dir);
}
