//! The command line as a user meets it: sizes with a G suffix, `inspect`
//! over replicated stores, `dump | head`, read-only commands that do not
//! create what they read, error messages in the flag's unit, exit codes
//! (1 for a failure at run time, 2 for misuse), `--json` for `inspect`
//! and `dump`, text where a dump's bytes are printable, `cluster init`
//! publishing a cluster's first map once, and `serve` stopping gracefully
//! on a SIGTERM sent as it starts.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_milliscale"))
}

fn url(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A small YCSB database in each of `dirs` (replicated when several).
fn ycsb_database(dirs: &[&Path]) {
    let mut cmd = bin();
    cmd.args(["bench", "ycsb", "--records", "2000", "--duration", "0.3", "--warmup", "0.1"]);
    cmd.args(["--threads", "2"]);
    for d in dirs {
        cmd.args(["--store", &url(d)]);
    }
    let out = cmd.output().expect("run the benchmark");
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_size_takes_a_g_suffix() {
    let dir = tempfile::tempdir().expect("dir");
    let out = bin()
        .args(["bench", "bank", "--store", &url(dir.path()), "--duration", "0.2"])
        .args(["--accounts", "10", "--checkpoint-every", "1G"])
        .output()
        .expect("bank");
    assert!(out.status.success(), "--checkpoint-every 1G: {}", stderr(&out));
    let bad = bin()
        .args(["bench", "bank", "--store", "memory://", "--duration", "0.2"])
        .args(["--checkpoint-every", "1X"])
        .output()
        .expect("bank");
    assert_eq!(bad.status.code(), Some(2), "a bad size is misuse: {}", stderr(&bad));
    assert!(stderr(&bad).contains("--checkpoint-every"), "{}", stderr(&bad));
}

#[test]
fn inspect_reads_every_store_given() {
    let (a, b) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    ycsb_database(&[a.path(), b.path()]);
    let out = bin()
        .args(["inspect", "--store", &url(a.path()), "--store", &url(b.path())])
        .output()
        .expect("inspect");
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for d in [a.path(), b.path()] {
        assert!(text.contains(&format!("== {}", url(d))), "{text}");
    }
    assert_eq!(text.matches("recovery would replay").count(), 2, "{text}");

    let json = bin()
        .args(["inspect", "--json", "--store", &url(a.path()), "--store", &url(b.path())])
        .output()
        .expect("inspect --json");
    assert!(json.status.success(), "{}", stderr(&json));
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).expect("one JSON document");
    let stores = doc["stores"].as_array().expect("stores");
    assert_eq!(stores.len(), 2);
    for s in stores {
        assert!(s["replay"]["transactions"].as_u64().expect("replay") > 0, "{s}");
        assert_eq!(s["manifest"]["tables"][0].as_str(), Some("usertable"), "{s}");
        assert!(!s["chains"].as_array().expect("chains").is_empty(), "{s}");
    }
}

#[test]
fn dump_into_a_pipe_that_closes_early_is_not_an_error() {
    let dir = tempfile::tempdir().expect("dir");
    ycsb_database(&[dir.path()]);
    // More output than a pipe holds (2,000 rows of ~180 bytes).
    let mut child = bin()
        .args(["dump", "--store", &url(dir.path()), "--table", "usertable"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dump");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut first).expect("a row");
    // The reader goes away, as `head -1` does.
    let out = child.wait_with_output().expect("dump exits");
    assert!(out.status.success(), "exit {:?}: {}", out.status, stderr(&out));
    assert!(!stderr(&out).contains("Broken pipe"), "{}", stderr(&out));
    assert!(first.starts_with("0x"), "binary keys print as hex: {first}");
}

#[test]
fn dump_prints_text_where_printable_and_json_on_request() {
    let dir = tempfile::tempdir().expect("dir");
    let out = bin()
        .args(["bench", "bank", "--store", &url(dir.path()), "--duration", "0.2"])
        .args(["--accounts", "10"])
        .output()
        .expect("bank");
    assert!(out.status.success(), "{}", stderr(&out));
    // The bank's keys are binary: the JSON form names what is not text
    // (`key_hex`). The text rendering of printable bytes has a unit test
    // (`inspect::tests`).
    let json = bin()
        .args(["dump", "--json", "--store", &url(dir.path()), "--table", "accounts"])
        .output()
        .expect("dump --json");
    assert!(json.status.success(), "{}", stderr(&json));
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&json.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect();
    assert_eq!(rows.len(), 10);
    for r in &rows {
        let has = |k: &str| r.get(k).is_some();
        assert!(has("key") || has("key_hex"), "{r}");
        assert!(has("value") || has("value_hex"), "{r}");
    }
}

#[test]
fn read_only_commands_do_not_create_a_missing_directory() {
    let parent = tempfile::tempdir().expect("dir");
    let missing = parent.path().join("not-here");
    for args in [
        vec!["inspect", "--store", &*url(&missing)],
        vec!["dump", "--store", &*url(&missing), "--table", "t"],
    ] {
        let out = bin().args(&args).output().expect("run");
        assert_eq!(out.status.code(), Some(1), "{args:?}: a failure at run time");
        assert!(stderr(&out).contains("no such directory"), "{args:?}: {}", stderr(&out));
        assert!(!missing.exists(), "{args:?} created {}", missing.display());
    }
}

#[test]
fn a_bad_value_is_reported_in_the_flags_unit() {
    let out = bin()
        .args(["bench", "ycsb", "--store", "memory://", "--flush-timeout=-5"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("milliseconds"), "{}", stderr(&out));
}

#[test]
fn exit_codes_tell_misuse_from_failure() {
    let empty = tempfile::tempdir().expect("dir");
    // Run time: the store holds no database.
    let out = bin().args(["inspect", "--store", &url(empty.path())]).output().expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    // Misuse: an unknown flag (clap), a bad value (ours).
    let out = bin().args(["inspect", "--no-such-flag"]).output().expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = bin()
        .args(["bench", "ycsb", "--store", "memory://", "--tasks", "0"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn the_report_names_the_commit_it_was_built_from() {
    let elsewhere = tempfile::tempdir().expect("dir");
    let out = bin()
        .current_dir(elsewhere.path())
        .args(["bench", "ycsb", "--records", "1000", "--duration", "0.2", "--warmup", "0"])
        .args(["--store", "none", "--json"])
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", stderr(&out));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let commit = r["env"]["commit"].as_str().expect("commit");
    assert_ne!(commit, "unknown", "run outside the repository: {r}");
    assert!(!commit.is_empty());
}

#[test]
fn verbose_and_rust_log_show_the_engines_steps() {
    let dir = tempfile::tempdir().expect("dir");
    ycsb_database(&[dir.path()]);
    let quiet = bin().args(["recover", "--store", &url(dir.path())]).output().expect("recover");
    assert!(quiet.status.success(), "{}", stderr(&quiet));
    assert!(!stderr(&quiet).contains("recovered the database"), "{}", stderr(&quiet));
    let verbose =
        bin().args(["-v", "recover", "--store", &url(dir.path())]).output().expect("recover");
    assert!(verbose.status.success(), "{}", stderr(&verbose));
    assert!(stderr(&verbose).contains("recovered the database"), "{}", stderr(&verbose));
    let env = bin()
        .env("RUST_LOG", "info")
        .args(["recover", "--store", &url(dir.path())])
        .output()
        .expect("recover");
    assert!(stderr(&env).contains("recovered the database"), "{}", stderr(&env));
    // RUST_LOG, when set, decides over -v.
    let env = bin()
        .env("RUST_LOG", "error")
        .args(["-v", "recover", "--store", &url(dir.path())])
        .output()
        .expect("recover");
    assert!(!stderr(&env).contains("recovered the database"), "{}", stderr(&env));
}

#[test]
fn cluster_init_publishes_the_first_map_once_and_checks_its_arguments() {
    let dir = tempfile::tempdir().expect("dir");
    let map = format!("{}/map", url(dir.path()));
    let init = |args: &[&str]| {
        let mut c = bin();
        c.args(["cluster", "init", "--map", &map]).args(args);
        c.output().expect("run")
    };
    let shards = ["--shard", "127.0.0.1:7001=memory://", "--shard", "127.0.0.1:7002=memory://"];
    // Too few split keys for three shards, or one given twice: refused,
    // exit 2, and nothing published.
    let mut bad = shards.to_vec();
    bad.extend(["--shard", "127.0.0.1:7003=memory://", "--split", "t=a"]);
    let refused = init(&bad);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let e = stderr(&refused);
    assert!(e.contains("3 shards need at least 2 split keys, not 1"), "{e}");
    let mut twice = shards.to_vec();
    twice.extend(["--split", "t=a", "--split", "t=a"]);
    let refused = init(&twice);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("must differ"), "{}", stderr(&refused));
    let mut args = shards.to_vec();
    args.extend(["--even-table", "bank", "--even-table", "retwis"]);
    let ok = init(&args);
    assert!(ok.status.success(), "{}", stderr(&ok));
    // The cluster exists: a second init is refused.
    let again = init(&args);
    assert_eq!(again.status.code(), Some(2));
    assert!(stderr(&again).contains("already published"), "{}", stderr(&again));
    let shown = bin().args(["cluster", "show", "--map", &map]).output().expect("run");
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("\"version\": 1") && text.contains("127.0.0.1:7002"), "{text}");
    // The empty key, and each table from its first key, then its split.
    let m: serde_json::Value = serde_json::from_str(&text).expect("json");
    let owners: Vec<u64> =
        m["ranges"].as_array().expect("ranges").iter().map(|r| r[1].as_u64().expect("n")).collect();
    assert_eq!(owners, [0, 0, 1, 0, 1]);

    // More split keys than shards, given out of order: the ranges, in key
    // order, go to the shards in turn.
    let dealt = format!("{}/dealt", url(dir.path()));
    let mut args = vec!["cluster", "init", "--map", &dealt];
    args.extend(shards);
    args.extend(["--split", "u=m", "--split", "t=x", "--split", "t=c"]);
    let ok = bin().args(&args).output().expect("run");
    assert!(ok.status.success(), "{}", stderr(&ok));
    let shown = bin().args(["cluster", "show", "--map", &dealt]).output().expect("run");
    let m: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("json");
    let ranges: Vec<(String, u64)> = m["ranges"]
        .as_array()
        .expect("ranges")
        .iter()
        .map(|r| {
            let key: Vec<u8> = serde_json::from_value(r[0].clone()).expect("a key's bytes");
            (String::from_utf8_lossy(&key).replace('\0', "/"), r[1].as_u64().expect("n"))
        })
        .collect();
    let want = [("", 0), ("t/c", 1), ("t/x", 0), ("u/m", 1)];
    assert_eq!(ranges, want.map(|(k, s)| (k.to_owned(), s)));
}

/// `serve` catches SIGTERM from its start: one sent while the database
/// opens (before the address is printed: the window a client that reads
/// the address and stops the server at once could hit) shuts it down
/// gracefully once open, exit 0, rather than by the signal's default
/// action (the process killed, status -15).
#[test]
fn serve_stops_gracefully_on_a_sigterm_sent_as_it_starts() {
    let dir = tempfile::tempdir().expect("dir");
    ycsb_database(&[dir.path()]);
    for _ in 0..3 {
        let child = bin()
            .args(["serve", "--store", &url(dir.path()), "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start serve");
        // At once: recovery takes longer than this.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let sent = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        assert!(sent.is_ok_and(|s| s.success()), "sending SIGTERM");
        let out = child.wait_with_output().expect("serve ends");
        let err = stderr(&out);
        assert!(out.status.success(), "serve ended with {}: {err}", out.status);
        assert!(err.contains("SIGTERM; shutting down"), "{err}");
    }
}
