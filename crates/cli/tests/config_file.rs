//! `--config FILE` and `MILLISCALE_OPT_*`: the library's option schema,
//! read by the CLI. The file's stores serve commands given no `--store`;
//! a misspelt field, in the file or in the environment, is a usage error
//! that names it; a command with no store anywhere says so.

use std::path::Path;
use std::process::{Command, Output};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_milliscale"));
    // The test's own environment must not configure the commands.
    for (k, _) in std::env::vars() {
        if k.starts_with("MILLISCALE_OPT_") {
            c.env_remove(k);
        }
    }
    c
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn write_config(dir: &Path, body: &str) -> String {
    let path = dir.join("milliscale.toml");
    std::fs::write(&path, body).expect("write the config");
    path.display().to_string()
}

#[test]
fn the_files_stores_serve_commands_without_a_store_flag() {
    let db = tempfile::tempdir().expect("dir");
    let cfg = tempfile::tempdir().expect("dir");
    let config = write_config(
        cfg.path(),
        &format!("stores = [\"file://{}\"]\nrecovery_threads = 1\n", db.path().display()),
    );
    let out = bin().args(["--config", &config, "recover", "--create"]).output().expect("run");
    assert!(out.status.success(), "{}", stderr(&out));
    let out = bin().args(["--config", &config, "inspect", "--json"]).output().expect("run");
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(doc["stores"][0]["store"], format!("file://{}", db.path().display()));
    // A --store flag replaces the file's stores.
    let other = tempfile::tempdir().expect("dir");
    let missing = format!("file://{}/nothing-here", other.path().display());
    let out =
        bin().args(["--config", &config, "inspect", "--store", &missing]).output().expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("nothing-here"), "{}", stderr(&out));
}

#[test]
fn misspelt_options_are_usage_errors_that_name_them() {
    let cfg = tempfile::tempdir().expect("dir");
    let config = write_config(cfg.path(), "stores = [\"memory://\"]\nflush_timeout = 5\n");
    let out = bin().args(["--config", &config, "recover"]).output().expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("flush_timeout"), "{}", stderr(&out));

    let out = bin()
        .args(["recover", "--store", "memory://", "--create"])
        .env("MILLISCALE_OPT_WORKRES", "2")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("workres"), "{}", stderr(&out));

    // A valid variable is taken (and checked as `open` checks it).
    let out = bin()
        .args(["recover", "--store", "memory://", "--create"])
        .env("MILLISCALE_OPT_WORKERS", "0")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("workers"), "{}", stderr(&out));
}

#[test]
fn a_command_with_no_store_anywhere_says_so() {
    let out = bin().args(["recover"]).output().expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("no store"), "{}", stderr(&out));
}
