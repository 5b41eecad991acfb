//! `milliscale changes` as a pipe reads it: one JSON line a transaction,
//! whole values (a patch as the row's new value), deletions as null, a
//! key that is not UTF-8 in hex, resolved points; `--after` resumes
//! exactly after a cursor; a cursor the newest checkpoint covers fails
//! (exit 1) naming the oldest one it can serve; a bad format is misuse.

use std::path::Path;
use std::process::{Command, Output};

use milliscale::{Database, Options};
use serde_json::Value;

fn url(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

fn changes(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_milliscale"))
        .args(["changes", "--store", &url(dir), "--poll-min-ms", "1", "--for", "30"])
        .args(args)
        .output()
        .expect("run changes")
}

/// A transaction printed: its CSN and its writes, `(table, key, value)`.
type Printed = (u64, Vec<(String, String, Value)>);

/// The transactions printed.
fn transactions(o: &Output) -> Vec<Printed> {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut out = Vec::new();
    let mut resolved = 0;
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let v: Value = serde_json::from_str(line).expect("a JSON line");
        if let Some(n) = v["resolved"].as_u64() {
            assert!(n > resolved);
            resolved = n;
            continue;
        }
        let csn = v["csn"].as_u64().expect("csn");
        assert!(csn >= resolved, "a transaction below a resolved point");
        let writes = v["changes"]
            .as_array()
            .expect("changes")
            .iter()
            .map(|c| {
                let key = c["key"].as_str().map_or_else(
                    || format!("hex:{}", c["key_hex"].as_str().expect("key or key_hex")),
                    str::to_owned,
                );
                (c["table"].as_str().expect("table").to_owned(), key, c["value"].clone())
            })
            .collect();
        out.push((csn, writes));
    }
    out
}

#[test]
fn changes_prints_each_transaction_whole_and_resumes_after_a_cursor() {
    let dir = tempfile::tempdir().expect("dir");
    let db = Database::open(Options::new().store(url(dir.path()))).expect("open");
    let t = db.create_table("t").expect("table");
    let commit = |f: &dyn Fn(&mut milliscale::Transaction<'_>)| {
        let mut tx = db.begin().expect("begin");
        f(&mut tx);
        tx.commit().expect("commit").wait().expect("durable").csn.expect("csn")
    };
    let mut csns = Vec::new();
    for i in 0..10 {
        csns.push(commit(&|tx| {
            tx.put(&t, format!("k{i}").as_bytes(), b"value-0000").expect("put")
        }));
    }
    csns.push(commit(&|tx| tx.update_range(&t, b"k3", 6, b"1234").expect("patch")));
    csns.push(commit(&|tx| {
        tx.delete(&t, b"k4").expect("delete");
        tx.put(&t, &[0xff, 0x01], b"binary key").expect("put");
    }));
    let last = *csns.last().expect("some");

    let all = transactions(&changes(dir.path(), &["--until", &last.to_string()]));
    assert_eq!(all.iter().map(|(c, _)| *c).collect::<Vec<_>>(), csns);
    let s = |x: &str| Value::String(x.into());
    assert_eq!(all[0].1, vec![("t".into(), "k0".into(), s("value-0000"))]);
    assert_eq!(all[10].1, vec![("t".into(), "k3".into(), s("value-1234"))], "a patch, whole");
    assert_eq!(
        all[11].1,
        vec![
            ("t".into(), "k4".into(), Value::Null),
            ("t".into(), "hex:ff01".into(), s("binary key"))
        ]
    );

    // Resumed after the 6th: exactly the ones after it.
    let after = csns[5].to_string();
    let rest =
        transactions(&changes(dir.path(), &["--after", &after, "--until", &last.to_string()]));
    assert_eq!(rest, all[6..]);

    // A checkpoint covers them: an old cursor fails, naming the oldest.
    db.checkpoint().expect("checkpoint");
    let o = changes(dir.path(), &["--after", &csns[0].to_string()]);
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("oldest cursor"));

    let o = changes(dir.path(), &["--format", "csv"]);
    assert_ne!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr).contains("jsonl"));
    db.close().expect("close");
}

/// A consumer (`milliscale changes`) killed -9 ten times (or
/// `MILLISCALE_FEED_KILL_TRIALS`) mid-feed and
/// started again after the last transaction it printed whole, while the
/// writer commits and, halfway, crashes and is recovered by a new one:
/// every acknowledged transaction reaches the consumer exactly once, in
/// CSN order, whole and with its values; none is split.
#[test]
fn a_consumer_killed_and_resumed_from_its_cursor_misses_and_repeats_nothing() {
    use std::io::Read;
    // 10 in CI; MILLISCALE_FEED_KILL_TRIALS sets more by hand. The writer
    // writes for as long as the trials run.
    let trials: u64 = std::env::var("MILLISCALE_FEED_KILL_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let n = 40 * trials as u32;
    let dir = tempfile::tempdir().expect("dir");
    // With a retention window: the recovering writer's checkpoint keeps the
    // old log, so a consumer that was behind it resumes (without one it is
    // told the oldest cursor it can resume from, as it should be, and this
    // test could not ask for every transaction).
    let window = Some(std::time::Duration::from_secs(3600));
    let opts = || Options::new().store(url(dir.path())).retention(window);
    let db = Database::open(opts()).expect("open");
    db.create_table("t").expect("table");
    let writer = {
        let opts = opts();
        std::thread::spawn(move || {
            let mut expected = Vec::new();
            let mut db = db;
            for i in 0..n {
                if i == n / 2 {
                    // The writer crashes (its log stays as it was); a new
                    // one recovers.
                    std::mem::forget(db);
                    db = Database::open(opts.clone()).expect("recover");
                }
                let t = db.open_table("t").expect("table");
                let mut tx = db.begin().expect("begin");
                let (a, b) = (format!("k{}", i % 37), format!("k{}", (i * 7) % 37));
                tx.put(&t, a.as_bytes(), format!("v{i}").as_bytes()).expect("put");
                tx.put(&t, b.as_bytes(), format!("w{i}").as_bytes()).expect("put");
                let csn = tx.commit().expect("commit").wait().expect("durable").csn.expect("csn");
                expected.push((csn, vec![(a, format!("v{i}")), (b, format!("w{i}"))]));
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            expected
        })
    };
    let mut cursor: Option<u64> = None;
    let mut consumed: Vec<(u64, Vec<(String, String)>)> = Vec::new();
    let mut take = |out: &[u8], cursor: &mut Option<u64>| {
        let text = String::from_utf8_lossy(out);
        // A line cut by the kill has no newline: not handled.
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        for line in whole.lines() {
            let v: Value = serde_json::from_str(line).expect("a whole JSON line");
            let Some(csn) = v["csn"].as_u64() else { continue };
            assert!(cursor.is_none_or(|c| csn > c), "CSN {csn} again after cursor {cursor:?}");
            let writes = v["changes"]
                .as_array()
                .expect("changes")
                .iter()
                .map(|c| {
                    let (k, val) = (c["key"].as_str(), c["value"].as_str());
                    (k.expect("key").to_owned(), val.expect("value").to_owned())
                })
                .collect();
            consumed.push((csn, writes));
            *cursor = Some(csn);
        }
    };
    for trial in 0..trials {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_milliscale"));
        cmd.args(["changes", "--store", &url(dir.path()), "--poll-min-ms", "1"]);
        if let Some(c) = cursor {
            cmd.args(["--after", &c.to_string()]);
        }
        let mut child = cmd.stdout(std::process::Stdio::piped()).spawn().expect("spawn");
        std::thread::sleep(std::time::Duration::from_millis(150 + 37 * (trial % 10)));
        child.kill().expect("kill -9");
        let mut out = Vec::new();
        child.stdout.take().expect("stdout").read_to_end(&mut out).expect("read");
        child.wait().expect("reaped");
        take(&out, &mut cursor);
    }
    let expected = writer.join().expect("the writer");
    let last = expected.last().expect("some").0.to_string();
    let mut args = vec!["--until", last.as_str()];
    let after = cursor.map(|c| c.to_string());
    if let Some(a) = &after {
        args.extend(["--after", a.as_str()]);
    }
    let o = changes(dir.path(), &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    take(&o.stdout, &mut cursor);
    let expected: Vec<(u64, Vec<(String, String)>)> = expected;
    assert_eq!(consumed.len(), expected.len(), "each transaction once");
    assert_eq!(consumed, expected);
}
