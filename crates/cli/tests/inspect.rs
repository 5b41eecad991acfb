//! `milliscale inspect` reads back what `milliscale bench ycsb` logged to a
//! directory; `dump` prints the table from the durable state; `recover`
//! takes the database over; a second benchmark refuses the used store.

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
    assert!(text.contains("chain log/g0000 lane 0 (groups 0..="), "{text}");
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

    assert!(text.contains("manifest manifest/00000000000000000002 (format 1): epoch 1"), "{text}");

    let dump =
        bin().args(["dump", "--store", &url, "--table", "usertable"]).output().expect("dump");
    assert!(dump.status.success(), "{}", String::from_utf8_lossy(&dump.stderr));
    let lines: Vec<String> =
        String::from_utf8_lossy(&dump.stdout).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 2000, "every loaded record, once");
    assert!(lines.windows(2).all(|w| w[0] < w[1]), "in key order");
    assert!(lines.iter().all(|l| l.split(' ').count() == 2), "hex key, space, hex value");

    let rec = bin().args(["recover", "--store", &url, "--json"]).output().expect("recover");
    assert!(rec.status.success(), "{}", String::from_utf8_lossy(&rec.stderr));
    let r: serde_json::Value = serde_json::from_slice(&rec.stdout).expect("json");
    assert_eq!(r["replayed"].as_u64(), Some(replayed), "{r}");
    assert_eq!(r["new_epoch"].as_u64(), Some(2), "{r}");
    assert_eq!(r["dropped"].as_u64(), Some(0), "{r}");
    // After recovery the state is in a checkpoint, and dump still agrees.
    let dump2 =
        bin().args(["dump", "--store", &url, "--table", "usertable"]).output().expect("dump");
    assert_eq!(String::from_utf8_lossy(&dump2.stdout), String::from_utf8_lossy(&dump.stdout));

    let again = bin()
        .args(["bench", "ycsb", "--records", "100", "--duration", "0.1", "--store", &url])
        .output()
        .expect("second run");
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already holds a database"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `recover` on an address that holds no database fails, says so, and
/// leaves the address empty: a standby or an operator pointed at a
/// mistyped prefix must not get a healthy-looking empty database. With
/// `--create` it makes one; the next `recover` finds it.
#[test]
fn recover_refuses_a_store_without_a_database_unless_told_to_create_one() {
    let dir = std::env::temp_dir().join(format!("milliscale-nodb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let url = format!("file://{}", dir.display());
    let out = bin().args(["recover", "--store", &url]).output().expect("recover");
    assert!(!out.status.success(), "recover of nothing must fail");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no database at"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&dir).expect("dir").collect();
    assert!(left.is_empty(), "nothing written: {left:?}");
    for args in [
        &["inspect", "--store", &url][..],
        &["dump", "--store", &url, "--table", "t"],
        &["replica", "--store", &url, "--for", "0.1"],
    ] {
        let out = bin().args(args).output().expect("run");
        assert!(!out.status.success(), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("no database at"), "{args:?}");
    }

    let out = bin().args(["recover", "--store", &url, "--create"]).output().expect("recover");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("created an empty one"));
    let out = bin().args(["recover", "--store", &url, "--json"]).output().expect("recover");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_replica_reads_what_the_writer_committed() {
    let dir = std::env::temp_dir().join(format!("milliscale-replica-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let url = format!("file://{}", dir.display());
    let bank = bin()
        .args(["bench", "bank", "--store", &url, "--duration", "0.5", "--threads", "2"])
        .args(["--accounts", "50"])
        .output()
        .expect("bank");
    assert!(bank.status.success(), "{}", String::from_utf8_lossy(&bank.stderr));
    let dump = bin().args(["dump", "--store", &url, "--table", "accounts"]).output().expect("dump");
    assert!(dump.status.success(), "{}", String::from_utf8_lossy(&dump.stderr));
    let rows = String::from_utf8_lossy(&dump.stdout).to_string();
    assert_eq!(rows.lines().count(), 50, "{rows}");
    let out = bin()
        .args(["replica", "--store", &url, "--for", "2", "--every", "0", "--dump", "accounts"])
        .args(["--json", "--poll-min-ms", "1"])
        .output()
        .expect("replica");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (dumped, json) = text.split_at(text.find('{').expect("the metrics follow the rows"));
    assert_eq!(dumped, rows, "the replica's accounts differ from the durable state");
    let m: serde_json::Value = serde_json::from_str(json).expect("json");
    assert!(m["entries_applied"].as_u64().expect("entries") > 0, "{m}");
    assert!(m["get_requests"].as_u64().expect("requests") > 0, "{m}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_writer_with_offloading_adopts_a_checkpoint_built_from_the_log() {
    let dir = std::env::temp_dir().join(format!("milliscale-offload-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let url = format!("file://{}", dir.display());
    let mut writer = bin()
        .args(["bench", "bank", "--store", &url, "--duration", "6", "--threads", "2"])
        .args(["--accounts", "50", "--checkpoint-every", "64K", "--checkpoint-offload"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("bank");
    // Wait for the bank to exist, then build a checkpoint off the writer,
    // until it adopts one (an offer made before the writer marked its log
    // covers nothing it can truncate, and is passed over).
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let adopted = |csn: u64| {
        let out = bin().args(["inspect", "--store", &url]).output().expect("inspect");
        String::from_utf8_lossy(&out.stdout).contains(&format!("checkpoint at CSN {csn}:"))
    };
    let csn = loop {
        assert!(std::time::Instant::now() < until, "no offer was adopted in 20 s");
        std::thread::sleep(std::time::Duration::from_millis(300));
        let out = bin()
            .args(["checkpoint", "--from-log", "--store", &url, "--json", "--timeout", "5"])
            .output()
            .expect("checkpoint");
        if !out.status.success() {
            continue; // no database yet
        }
        let c: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let csn = c["csn"].as_u64().expect("csn");
        // The writer looks for offers once a second.
        std::thread::sleep(std::time::Duration::from_millis(1500));
        if adopted(csn) {
            break csn;
        }
    };
    let st = writer.wait().expect("the writer");
    assert!(st.success(), "the writer failed");
    // `inspect` shows the replicas' view: where a replica starts, and an
    // offer no writer has adopted yet (the writer is gone; adopted offers
    // are deleted with what the checkpoint superseded).
    let out = bin()
        .args(["checkpoint", "--from-log", "--store", &url, "--json", "--timeout", "5"])
        .output()
        .expect("checkpoint");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let pending = c["csn"].as_u64().expect("csn");
    let out = bin().args(["inspect", "--store", &url]).output().expect("inspect");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("a replica opened now loads the checkpoint"), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with(&format!("checkpoint offer at CSN {pending}:"))
            && l.ends_with("(not adopted yet)")),
        "{text}"
    );
    // The writer adopted it (or a later one, if another offer came): the
    // manifest names it and the log before it is gone.
    let out = bin().args(["recover", "--store", &url, "--json"]).output().expect("recover");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(r["checkpoint_csn"].as_u64(), Some(csn), "{r}");
    let _ = std::fs::remove_dir_all(&dir);
}
