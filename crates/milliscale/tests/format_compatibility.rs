//! The on-disk format promise (ARCHITECTURE.md, "Format versions"): a
//! release opens every database written by an earlier one. The database
//! in `testdata/db-format-1` was written by `milliscale bench bank` at
//! format 1 (log part format 1, manifest and checkpoint format 1): 8
//! accounts of 1,000 each, transfers between them in its log, never
//! checkpointed. This test reads it (a copy: opening as the writer fences
//! and rewrites), recovers it, writes to it and reopens it. When a format
//! changes, this fixture stays and a new one joins it.

use std::path::{Path, PathBuf};

use milliscale::{Database, Options};

const ACCOUNTS: u64 = 8;
const TOTAL: u64 = 8 * 1_000;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/db-format-1")
}

/// A copy of the fixture in a fresh directory; its `file://` URL.
fn copy(into: &Path) -> String {
    for entry in std::fs::read_dir(fixture()).expect("the fixture") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), into.join(entry.file_name())).expect("copy");
    }
    format!("file://{}", into.display())
}

/// The accounts' total, and how many hold a balance.
fn audit(db: &Database) -> (u64, u64) {
    let accounts = db.open_table("accounts").expect("the accounts table");
    let mut tx = db.begin().expect("begin");
    let mut total = 0;
    let mut n = 0;
    for row in tx.prefix(&accounts, b"", milliscale::Direction::Forward) {
        let (_, v) = row.expect("row");
        total += u64::from_le_bytes(v[..8].try_into().expect("an 8-byte balance"));
        n += 1;
    }
    (total, n)
}

#[test]
fn a_format_1_database_opens_read_only_and_as_the_writer() {
    let dir = tempfile::tempdir().expect("dir");
    let url = copy(dir.path());

    let db = Database::open_read_only(Options::new().store(&url)).expect("open read-only");
    assert_eq!(db.table_names(), ["accounts", "history"]);
    assert_eq!(audit(&db), (TOTAL, ACCOUNTS));
    let replayed = db.recovery_report().expect("a report").replayed;
    assert!(replayed > ACCOUNTS as usize, "the transfers in its log: {replayed}");
    drop(db);

    let db = Database::open(Options::new().store(&url)).expect("recover as the writer");
    assert_eq!(audit(&db), (TOTAL, ACCOUNTS));
    let accounts = db.open_table("accounts").expect("table");
    let mut tx = db.begin().expect("begin");
    tx.update_range(&accounts, &0u64.to_be_bytes(), 0, &0u64.to_le_bytes()).expect("write");
    tx.update_range(&accounts, &1u64.to_be_bytes(), 0, &0u64.to_le_bytes()).expect("write");
    tx.commit_and_wait().expect("commit");
    db.close().expect("close");

    let db = Database::open(Options::new().store(&url)).expect("reopen");
    assert!(audit(&db).0 < TOTAL, "the write after the upgrade is durable");
    db.close().expect("close");
}
