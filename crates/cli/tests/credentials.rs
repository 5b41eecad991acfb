//! Where an `s3://` store's credentials come from: the AWS SDK's standard
//! chain, seen from a fresh process (`milliscale bench ycsb` against the
//! emulator), one source at a time:
//! - the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`);
//! - a profile file (`AWS_SHARED_CREDENTIALS_FILE`, a named profile chosen
//!   by `AWS_PROFILE` or by the URL's `profile=`);
//! - a container-credentials endpoint (`AWS_CONTAINER_CREDENTIALS_FULL_URI`,
//!   as ECS and EKS Pod Identity serve it), served here on loopback.
//!
//! The emulator accepts one key pair per source and nothing else, so a
//! run succeeds only with the credentials that source gave; each source
//! is also given a wrong secret, which must be refused. Every child runs
//! with a cleared environment, a scratch `HOME` and the instance metadata
//! disabled, so nothing of the machine's own AWS set-up leaks in.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};

use emulator::{Emulator, EmulatorOptions};

const ENV_KEY: (&str, &str) = ("env-key", "env-secret");
const PROFILE_KEY: (&str, &str) = ("profile-key", "profile-secret");
const CONTAINER_KEY: (&str, &str) = ("container-key", "container-secret");

fn emulator() -> Emulator {
    let users = [ENV_KEY, PROFILE_KEY, CONTAINER_KEY]
        .iter()
        .map(|(k, s)| ((*k).to_owned(), (*s).to_owned()))
        .collect();
    Emulator::start(EmulatorOptions { users, ..EmulatorOptions::default() }).expect("emulator")
}

/// `milliscale bench ycsb` for a second against `url`, with only `envs`.
fn bench(url: &str, home: &Path, envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_milliscale"));
    cmd.args(["bench", "ycsb", "--duration", "1", "--warmup", "0", "--records", "1000"])
        .args(["--threads", "1", "--store", url])
        .env_clear()
        .env("HOME", home)
        .env("AWS_EC2_METADATA_DISABLED", "true");
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    cmd.envs(envs.iter().copied());
    cmd.output().expect("run milliscale")
}

fn assert_ran(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: exit {:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("txn/s"), "{what}: no report:\n{stdout}");
}

fn assert_refused(out: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{what}: a wrong secret was accepted");
    assert!(stderr.contains("403") || stderr.contains("credentials"), "{what}: {stderr}");
}

/// A fresh bucket, created with the emulator's own key; `run(prefix)` is
/// the URL of a database under `prefix` in it (each run loads a fresh one).
fn bucket(emu: &Emulator, name: &str) -> impl Fn(&str) -> String {
    emu.bucket(name).expect("create the bucket");
    let (name, endpoint) = (name.to_owned(), emu.endpoint());
    move |prefix| format!("s3://{name}/{prefix}?endpoint={endpoint}")
}

#[test]
fn credentials_from_the_environment() {
    let emu = emulator();
    let home = tempfile::tempdir().expect("a scratch HOME");
    let url = bucket(&emu, "from-env")("db");
    let ok = [("AWS_ACCESS_KEY_ID", ENV_KEY.0), ("AWS_SECRET_ACCESS_KEY", ENV_KEY.1)];
    assert_ran(&bench(&url, home.path(), &ok), "environment");
    let wrong = [("AWS_ACCESS_KEY_ID", ENV_KEY.0), ("AWS_SECRET_ACCESS_KEY", "nope")];
    assert_refused(&bench(&url, home.path(), &wrong), "environment, wrong secret");
    let none = bench(&url, home.path(), &[]);
    let stderr = String::from_utf8_lossy(&none.stderr);
    assert!(!none.status.success() && stderr.contains("no AWS credentials"), "{stderr}");
}

#[test]
fn credentials_from_a_profile_file() {
    let emu = emulator();
    let home = tempfile::tempdir().expect("a scratch HOME");
    let file = home.path().join("credentials");
    std::fs::write(
        &file,
        format!(
            "[default]\naws_access_key_id = nobody\naws_secret_access_key = nothing\n\n\
             [milliscale-test]\naws_access_key_id = {}\naws_secret_access_key = {}\n\n\
             [wrong]\naws_access_key_id = {}\naws_secret_access_key = nope\n",
            PROFILE_KEY.0, PROFILE_KEY.1, PROFILE_KEY.0
        ),
    )
    .expect("write the profile file");
    let file = file.to_str().expect("utf-8 path");
    let run = bucket(&emu, "from-profile");
    let url = run("by-env");
    let by_env = [("AWS_SHARED_CREDENTIALS_FILE", file), ("AWS_PROFILE", "milliscale-test")];
    assert_ran(&bench(&url, home.path(), &by_env), "profile named by AWS_PROFILE");
    let by_url = format!("{}&profile=milliscale-test", run("by-url"));
    assert_ran(
        &bench(&by_url, home.path(), &[("AWS_SHARED_CREDENTIALS_FILE", file)]),
        "profile named in the URL",
    );
    let wrong = [("AWS_SHARED_CREDENTIALS_FILE", file), ("AWS_PROFILE", "wrong")];
    assert_refused(&bench(&url, home.path(), &wrong), "profile with a wrong secret");
    // The default profile's keys are not the emulator's.
    let default = [("AWS_SHARED_CREDENTIALS_FILE", file)];
    assert_refused(&bench(&url, home.path(), &default), "the default profile");
}

#[test]
fn credentials_from_a_container_endpoint() {
    let emu = emulator();
    let home = tempfile::tempdir().expect("a scratch HOME");
    let url = bucket(&emu, "from-container")("db");
    let good = serve_container_credentials(CONTAINER_KEY.0, CONTAINER_KEY.1);
    let uri = format!("http://{good}/v2/credentials/milliscale");
    let envs = [("AWS_CONTAINER_CREDENTIALS_FULL_URI", uri.as_str())];
    assert_ran(&bench(&url, home.path(), &envs), "container endpoint");
    let bad = serve_container_credentials(CONTAINER_KEY.0, "nope");
    let uri = format!("http://{bad}/v2/credentials/milliscale");
    let envs = [("AWS_CONTAINER_CREDENTIALS_FULL_URI", uri.as_str())];
    assert_refused(&bench(&url, home.path(), &envs), "container endpoint, wrong secret");
}

/// A container-credentials endpoint on loopback: every request gets these
/// keys, with a session token and an expiry an hour away, in the JSON
/// that ECS serves. Returns its address; it serves until the process ends.
fn serve_container_credentials(key: &'static str, secret: &'static str) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().expect("clone the socket"));
            // Read the request head (the body is empty).
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let expires = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
            let body = format!(
                "{{\"AccessKeyId\":\"{key}\",\"SecretAccessKey\":\"{secret}\",\
                 \"Token\":\"session-token\",\"Expiration\":\"{}\"}}",
                humantime::format_rfc3339_seconds(expires)
            );
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}
