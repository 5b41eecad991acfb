//! Checks of the repository's shape that no compiler makes (in the spirit
//! of TigerBeetle's `tidy.zig`). Each check returns the problems it found;
//! `tests/tidy.rs` runs them all on this repository and fails on any.
//!
//! - [`module_cycles`]: in every crate of the workspace, no module
//!   imports a sibling that imports it back, at any depth (the modules
//!   inside a folder as well as a crate's top-level ones).
//! - [`long_files`]: no Rust source file is over [`FILE_LINES_MAX`] lines.
//! - [`long_documents`]: README.md, BENCHMARKS.md and ARCHITECTURE.md stay
//!   within [`DOCUMENT_LINES_MAX`], so that a newcomer reads each to the
//!   end (superseded measurements go to `docs/benchmarks/`).
//! - [`unexplained_allows`]: every `allow` of clippy's `too_many_lines`
//!   says why, with `reason = "..."`.
//! - [`outside_references`]: nothing refers to a file outside the
//!   repository or to the tracker's numbers; papers are cited by name
//!   through `docs/REFERENCES.md`.
//! - [`missing_paths`]: every path that ARCHITECTURE.md's mechanism map
//!   names exists.
//! - [`broken_links`]: every relative link in the Markdown files leads to
//!   a file or directory that exists.
//! - [`missing_names`]: every file, folder and Rust module that the README,
//!   ARCHITECTURE.md or a crate's README names exists.
//! - [`false_counts`]: every number of crates, examples or tests those
//!   documents state is true.

use std::fs;
use std::path::{Path, PathBuf};

/// The most lines a Rust source file may have.
pub const FILE_LINES_MAX: usize = 700;

/// The most lines each top-level document may have.
pub const DOCUMENT_LINES_MAX: [(&str, usize); 3] =
    [("README.md", 250), ("BENCHMARKS.md", 700), ("ARCHITECTURE.md", 900)];

/// The documents of [`DOCUMENT_LINES_MAX`] over their limit, with their
/// lengths (a document missing counts as over: the limit names it).
pub fn long_documents(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (doc, max) in DOCUMENT_LINES_MAX {
        match fs::read_to_string(root.join(doc)) {
            Ok(t) if t.lines().count() <= max => {}
            Ok(t) => out.push(format!("{doc}: {} lines, at most {max}", t.lines().count())),
            Err(e) => out.push(format!("{doc}: {e}")),
        }
    }
    out
}

/// The repository's root (this crate is `crates/tidy`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository root")
}

/// Every file under `dir` whose name ends with one of `exts`, skipping
/// build output and hidden directories.
pub fn files(dir: &Path, exts: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if !name.starts_with('.') && name != "target" && name != "node_modules" {
                    stack.push(p);
                }
            } else if exts.iter().any(|x| name.ends_with(x)) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

pub(crate) fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

mod docs;
mod modules;

pub use docs::{
    broken_links, checked_docs, count_claims, false_counts, missing_names, missing_paths,
    test_functions, workspace_members,
};
use modules::is_ident;
pub use modules::{Edge, crate_sources, module_cycles, module_edges};

/// Rust files under `root` longer than [`FILE_LINES_MAX`] lines.
pub fn long_files(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for dir in ["crates", "fuzz"] {
        for f in files(&root.join(dir), &[".rs"]) {
            let n = fs::read_to_string(&f).map(|t| t.lines().count()).unwrap_or(0);
            if n > FILE_LINES_MAX {
                out.push(format!("{}: {n} lines", rel(root, &f)));
            }
        }
    }
    out
}

/// `allow`s of `too_many_lines` without a `reason = "..."`: each
/// `allow(...)` attribute is read whole, however rustfmt wrapped it.
pub fn unexplained_allows(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for f in files(&root.join("crates"), &[".rs"]) {
        if f.starts_with(root.join("crates/tidy")) {
            continue; // this checker names what it looks for
        }
        let text = fs::read_to_string(&f).unwrap_or_default();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("allow(") {
            let attr = &rest[i..];
            let end = attr.find(")]").map_or(attr.len(), |e| e + 2);
            let attr = &attr[..end];
            if attr.contains("too_many_lines") && !attr.contains("reason") {
                let line = text.len() - rest.len() + i;
                let n = text[..line].lines().count().max(1);
                out.push(format!("{}:{n}", rel(root, &f)));
            }
            rest = &rest[i + end..];
        }
    }
    out
}

/// Text files of the repository (code, docs, configs, scripts).
pub fn text_files(root: &Path) -> Vec<PathBuf> {
    let exts = [".rs", ".md", ".toml", ".sh", ".py", ".yml", ".yaml", ".txt", ".proto"];
    let mut out = files(root, &exts);
    out.extend(files(&root.join(".ci"), &[""]));
    out.retain(|p| !p.components().any(|c| c.as_os_str() == "target"));
    out
}

/// Lines that cite something a reader of the repository cannot open: a
/// path into `../shared`, a paper by its file number ("seed 001"), a
/// tracker number ("issue 12"), or the design notes kept outside
/// ("DESIGN.md").
pub fn outside_references(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for f in text_files(root) {
        if f.ends_with("crates/tidy/src/lib.rs") || f.ends_with("crates/tidy/tests/tidy.rs") {
            continue; // this checker names the patterns it looks for
        }
        let text = fs::read_to_string(&f).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if let Some(what) = outside_reference(line) {
                out.push(format!("{}:{}: {what}", rel(root, &f), n + 1));
            }
        }
    }
    out
}

/// What in `line` refers outside the repository, if anything.
pub fn outside_reference(line: &str) -> Option<&'static str> {
    let lower = line.to_ascii_lowercase();
    if lower.contains("../shared")
        || lower.contains("shared/docs")
        || lower.contains("shared/seeds")
    {
        return Some("a path outside the repository");
    }
    if lower.contains("design.md") {
        return Some("design notes kept outside the repository");
    }
    for (word, what) in [("seed", "a paper cited by file number"), ("issue", "a tracker number")] {
        let mut rest = lower.as_str();
        while let Some(i) = rest.find(word) {
            let after = &rest[i + word.len()..];
            let boundary = i == 0 || !is_ident(rest.as_bytes()[i - 1]);
            let after = after.strip_prefix('s').unwrap_or(after);
            let number = after.strip_prefix(' ').or_else(|| after.strip_prefix(" #"));
            if boundary && number.is_some_and(|n| n.starts_with(|c: char| c.is_ascii_digit())) {
                // "seed 42" names a random seed, not a paper: papers were
                // numbered with three digits from 000.
                if word == "issue" || number.is_some_and(|n| n.starts_with("00")) {
                    return Some(what);
                }
            }
            rest = &rest[i + word.len()..];
        }
    }
    None
}
