//! Third-party clients against `milliscale emulator`, started as a user
//! would start it (the binary, on a free port):
//! - boto3 (`crates/emulator/tests/python/emulator_boto3.py`): AWS's answers, appends, and
//!   the accounting printed at SIGTERM;
//! - the conformance cases of `crates/emulator/tests/python/s3_conformance.py`, which also
//!   run against MinIO: the emulator must pass every case MinIO passes;
//! - the AWS CLI and s3cmd (`crates/emulator/tests/python/emulator_clients.py`): copy, ls,
//!   sync, multipart, server-side copy, metadata, conditional requests,
//!   appends.
//!
//! Each is skipped when its tool is missing, unless `MILLISCALE_REQUIRE_BOTO3`
//! (boto3) or `MILLISCALE_REQUIRE_CLIENTS` (the AWS CLI and s3cmd, found
//! through `MILLISCALE_AWS_CLI` and `MILLISCALE_S3CMD`) is set:
//! scripts/test.sh sets them and installs the tools.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdout, Command, Stdio};

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

fn script(name: &str) -> String {
    format!("{}/../emulator/tests/python/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The emulator binary on a free port, with its endpoint.
fn start() -> (Child, BufReader<ChildStdout>, String) {
    let mut emu = Command::new(env!("CARGO_BIN_EXE_milliscale"))
        .args(["emulator", "--port", "0"])
        .stdout(Stdio::piped())
        // Not piped: an undrained pipe would block the server once full.
        .stderr(Stdio::null())
        .spawn()
        .expect("start the emulator");
    let mut out = BufReader::new(emu.stdout.take().expect("stdout"));
    let mut endpoint = String::new();
    out.read_line(&mut endpoint).expect("the endpoint line");
    let endpoint = endpoint.trim().to_owned();
    assert!(endpoint.starts_with("http://127.0.0.1:"), "first line: {endpoint:?}");
    (emu, out, endpoint)
}

/// SIGTERM, then the exit status and the rest of stdout.
fn stop(mut emu: Child, mut out: BufReader<ChildStdout>) -> (std::process::ExitStatus, String) {
    let killed = Command::new("kill").args(["-TERM", &emu.id().to_string()]).status();
    assert!(killed.is_ok_and(|s| s.success()), "sending SIGTERM");
    let status = emu.wait().expect("the emulator exits");
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("read the rest of stdout");
    (status, rest)
}

#[test]
fn boto3_sees_aws_behaviour() {
    if !have_boto3() {
        eprintln!(
            "skipped: no boto3 (pip install -r crates/emulator/tests/python/requirements.txt)"
        );
        return;
    }
    let (emu, out, endpoint) = start();
    let run = Command::new("python3")
        .arg(script("emulator_boto3.py"))
        .arg(&endpoint)
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    let (status, rest) = stop(emu, out);

    assert!(run.status.success(), "boto3 checks failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("all boto3 checks passed"), "{stdout}");
    assert!(status.success(), "the emulator exits cleanly on SIGTERM: {status}");
    assert!(rest.contains("accounting at shutdown"), "{rest}");
    assert!(rest.contains("append"), "the appends are accounted: {rest}");
}

/// Run the conformance cases against `endpoint`: case name → "pass" or why not.
fn conformance(endpoint: &str, keys: (&str, &str)) -> BTreeMap<String, String> {
    let run = Command::new("python3")
        .arg(script("s3_conformance.py"))
        .args([endpoint, keys.0, keys.1])
        .output()
        .expect("run python3");
    assert!(
        run.status.success(),
        "the conformance script failed:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    serde_json::from_slice(&run.stdout).expect("a JSON map of results")
}

#[test]
fn the_emulator_passes_every_conformance_case_minio_passes() {
    if !have_boto3() {
        eprintln!("skipped: no boto3");
        return;
    }
    let (emu, out, endpoint) = start();
    let ours = conformance(&endpoint, ("milliscale", "milliscale-secret"));
    stop(emu, out);
    let failed: Vec<_> = ours.iter().filter(|(_, r)| *r != "pass").collect();
    assert!(ours.len() >= 30, "the cases ran: {ours:?}");
    // The emulator passes every case, MinIO or not (appends are S3 Express
    // behaviour MinIO does not have).
    assert!(failed.is_empty(), "the emulator fails conformance cases: {failed:#?}");

    match std::env::var("MILLISCALE_TEST_S3_ENDPOINT") {
        Ok(minio) if !minio.is_empty() => {
            let theirs = conformance(&minio, ("milliscale", "milliscale-secret"));
            let minio_only: Vec<_> = theirs
                .iter()
                .filter(|(case, r)| *r == "pass" && ours.get(*case).is_none_or(|o| o != "pass"))
                .collect();
            assert!(minio_only.is_empty(), "MinIO passes, the emulator does not: {minio_only:?}");
            let passed = theirs.values().filter(|r| *r == "pass").count();
            eprintln!(
                "conformance: emulator {}/{} cases, MinIO {passed}/{}; MinIO fails: {:#?}",
                ours.len(),
                ours.len(),
                theirs.len(),
                theirs.iter().filter(|(_, r)| *r != "pass").collect::<Vec<_>>()
            );
        }
        _ => {
            assert!(
                std::env::var("MILLISCALE_REQUIRE_S3").is_err(),
                "MILLISCALE_REQUIRE_S3 is set but MILLISCALE_TEST_S3_ENDPOINT is not"
            );
            eprintln!("MinIO side skipped: no MILLISCALE_TEST_S3_ENDPOINT");
        }
    }
}

#[test]
fn the_aws_cli_and_s3cmd_work_against_the_emulator() {
    let tools = (std::env::var("MILLISCALE_AWS_CLI"), std::env::var("MILLISCALE_S3CMD"));
    let (Ok(aws), Ok(s3cmd)) = tools else {
        assert!(
            std::env::var_os("MILLISCALE_REQUIRE_CLIENTS").is_none(),
            "MILLISCALE_REQUIRE_CLIENTS is set but MILLISCALE_AWS_CLI or MILLISCALE_S3CMD is not"
        );
        eprintln!("skipped: set MILLISCALE_AWS_CLI and MILLISCALE_S3CMD (scripts/test.sh does)");
        return;
    };
    let (emu, out, endpoint) = start();
    let run = Command::new("python3")
        .arg(script("emulator_clients.py"))
        .args([&endpoint, &aws, &s3cmd])
        .output()
        .expect("run python3");
    let (status, _) = stop(emu, out);
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "client checks failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("all client checks passed"), "{stdout}");
    assert!(status.success(), "the emulator exits cleanly: {status}");
}

/// The fuzz target for request parsing (`crates/emulator/tests/python/emulator_fuzz.py`):
/// seeded random requests, mostly signed so they reach the parsers, must
/// never get a server error, and the server must keep serving with its
/// objects intact. `MILLISCALE_FUZZ_REQUESTS` sets the count per seed.
#[test]
fn random_requests_never_break_the_emulator() {
    if !have_boto3() {
        eprintln!("skipped: no boto3");
        return;
    }
    let count = std::env::var("MILLISCALE_FUZZ_REQUESTS").unwrap_or_else(|_| "600".into());
    let (emu, out, endpoint) = start();
    for seed in ["1", "2", "3"] {
        let run = Command::new("python3")
            .arg(script("emulator_fuzz.py"))
            .args([&endpoint, seed, &count])
            .output()
            .expect("run python3");
        let stdout = String::from_utf8_lossy(&run.stdout);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "fuzz seed {seed} failed:\n{stdout}\n{stderr}");
        assert!(stdout.contains("fuzz ok"), "{stdout}");
    }
    let (status, _) = stop(emu, out);
    assert!(status.success(), "the emulator exits cleanly after the fuzz: {status}");
}
