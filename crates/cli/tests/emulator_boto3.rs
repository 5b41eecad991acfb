//! A third-party client against `milliscale emulator`: the boto3 script in
//! `tests/python/emulator_boto3.py` runs against the binary, started as a
//! user would start it; then SIGTERM must stop it and print the accounting.
//!
//! Skipped when Python has no boto3, unless `MILLISCALE_REQUIRE_BOTO3` is
//! set (scripts/test.sh sets it and installs boto3).

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

fn have_boto3() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import boto3"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok || std::env::var_os("MILLISCALE_REQUIRE_BOTO3").is_none(),
        "MILLISCALE_REQUIRE_BOTO3 is set but python3 cannot import boto3"
    );
    ok
}

#[test]
fn boto3_sees_aws_behaviour() {
    if !have_boto3() {
        eprintln!("skipped: no boto3 (pip install -r tests/python/requirements.txt)");
        return;
    }
    let mut emu = Command::new(env!("CARGO_BIN_EXE_milliscale"))
        .args(["emulator", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the emulator");
    let mut out = BufReader::new(emu.stdout.take().expect("stdout"));
    let mut endpoint = String::new();
    out.read_line(&mut endpoint).expect("the endpoint line");
    let endpoint = endpoint.trim().to_owned();
    assert!(endpoint.starts_with("http://127.0.0.1:"), "first line: {endpoint:?}");

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/python/emulator_boto3.py");
    let run = Command::new("python3").arg(script).arg(&endpoint).output().expect("run python3");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);

    let killed = Command::new("kill").args(["-TERM", &emu.id().to_string()]).status();
    assert!(killed.is_ok_and(|s| s.success()), "sending SIGTERM");
    let status = emu.wait().expect("the emulator exits");
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("read the rest of stdout");

    assert!(run.status.success(), "boto3 checks failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("all boto3 checks passed"), "{stdout}");
    assert!(status.success(), "the emulator exits cleanly on SIGTERM: {status}");
    assert!(rest.contains("accounting at shutdown"), "{rest}");
    assert!(rest.contains("append"), "the appends are accounted: {rest}");
}
