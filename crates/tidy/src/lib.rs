//! Checks of the repository's shape that no compiler makes (in the spirit
//! of TigerBeetle's `tidy.zig`). Each check returns the problems it found;
//! `tests/tidy.rs` runs them all on this repository and fails on any.
//!
//! - [`module_cycles`]: the engine crate's top-level modules import each
//!   other without a cycle.
//! - [`long_files`]: no Rust source file is over [`FILE_LINES_MAX`] lines.
//! - [`unexplained_allows`]: every `allow` of clippy's `too_many_lines`
//!   says why, with `reason = "..."`.
//! - [`outside_references`]: nothing refers to a file outside the
//!   repository or to the tracker's numbers; papers are cited by name
//!   through `docs/REFERENCES.md`.
//! - [`missing_paths`]: every path that ARCHITECTURE.md's mechanism map
//!   names exists.
//! - [`broken_links`]: every relative link in the Markdown files leads to
//!   a file or directory that exists.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The most lines a Rust source file may have.
pub const FILE_LINES_MAX: usize = 700;

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

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

/// An import of one top-level module by another, and where it is.
#[derive(Debug, Clone)]
pub struct Edge {
    /// The importing module.
    pub from: String,
    /// The imported module.
    pub to: String,
    /// `file:line` of the first such import.
    pub at: String,
}

/// The import graph among the top-level modules of the crate whose source
/// root is `src` (`lib.rs` and its re-exports excluded): an edge for every
/// `crate::m` and `super::..::m` path that reaches another top-level
/// module, including names that `lib.rs` re-exports from one.
pub fn module_edges(src: &Path) -> Vec<Edge> {
    let modules: BTreeSet<String> = fs::read_dir(src)
        .expect("the crate's src")
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().is_dir() {
                Some(name)
            } else {
                name.strip_suffix(".rs").filter(|m| *m != "lib" && *m != "main").map(str::to_owned)
            }
        })
        .collect();
    let reexports = lib_reexports(&src.join("lib.rs"), &modules);
    let mut edges: BTreeMap<(String, String), String> = BTreeMap::new();
    for file in files(src, &[".rs"]) {
        let path = module_path(src, &file);
        let Some(top) = path.first().cloned() else { continue };
        let text = fs::read_to_string(&file).unwrap_or_default();
        for (n, line) in code_lines(&text) {
            for target in targets(line, &path) {
                let to = if modules.contains(&target) {
                    target
                } else if let Some(m) = reexports.get(&target) {
                    m.clone()
                } else {
                    continue;
                };
                if to != top {
                    edges
                        .entry((top.clone(), to))
                        .or_insert_with(|| format!("{}:{}", rel(src, &file), n + 1));
                }
            }
        }
    }
    edges.into_iter().map(|((from, to), at)| Edge { from, to, at }).collect()
}

/// `src/a/b.rs` and `src/a/b/mod.rs` are `[a, b]`; `lib.rs` is `[]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> =
        rel.iter().map(|s| s.to_string_lossy().trim_end_matches(".rs").to_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib" || p == "main") {
        parts.pop();
    }
    parts
}

/// The lines of `text` that are code: comments and doc comments dropped.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().filter_map(|(n, l)| {
        let code = match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        };
        (!code.trim().is_empty()).then_some((n, code))
    })
}

/// The top-level module names a line's paths start from the crate root
/// with: `crate::x`, `crate::{x, y::z}`, and `super::` chains that climb
/// from the file's module `path` to the root.
fn targets(line: &str, path: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &line[i..];
        let boundary = i == 0 || !is_ident(bytes[i - 1]);
        if boundary && rest.starts_with("crate::") {
            out.extend(first_segments(&rest["crate::".len()..]));
            i += "crate::".len();
        } else if boundary && rest.starts_with("super::") {
            let mut depth = 0;
            let mut r = rest;
            while let Some(next) = r.strip_prefix("super::") {
                depth += 1;
                r = next;
            }
            if depth == path.len() {
                out.extend(first_segments(r));
            }
            i += rest.len() - r.len();
        } else {
            i += 1;
        }
    }
    out
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The first segment of a path, or of each path in a `{...}` group.
fn first_segments(s: &str) -> Vec<String> {
    if let Some(group) = s.strip_prefix('{') {
        let mut depth = 0;
        let mut out = Vec::new();
        let mut start = 0;
        for (k, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    out.push(ident(&group[start..k]));
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(ident(&group[start..k]));
                    start = k + 1;
                }
                _ => {}
            }
        }
        out.into_iter().filter(|s| !s.is_empty()).collect()
    } else {
        vec![ident(s)].into_iter().filter(|s| !s.is_empty()).collect()
    }
}

fn ident(s: &str) -> String {
    s.trim_start().bytes().take_while(|b| is_ident(*b)).map(char::from).collect()
}

/// Names `lib.rs` re-exports (`pub use m::...::{A, B}`), mapped to `m`.
fn lib_reexports(lib: &Path, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let text = fs::read_to_string(lib).unwrap_or_default();
    let mut out = BTreeMap::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("pub use ") {
        rest = &rest[i + "pub use ".len()..];
        let end = rest.find(';').unwrap_or(rest.len());
        let stmt = rest[..end].trim_start_matches("crate::");
        let module = ident(stmt);
        if modules.contains(&module) {
            let names = stmt.rsplit("::").next().unwrap_or("");
            for name in names.split([',', '{', '}', ' ', '\n']).map(str::trim) {
                let name = name.rsplit(" as ").next().unwrap_or(name);
                if !name.is_empty() && name != "self" {
                    out.insert(name.to_owned(), module.clone());
                }
            }
        }
        rest = &rest[end..];
    }
    out
}

/// Every cycle among the modules of `edges`, each as one strongly
/// connected component with the edges inside it.
pub fn module_cycles(edges: &[Edge]) -> Vec<Vec<Edge>> {
    let nodes: BTreeSet<&str> =
        edges.iter().flat_map(|e| [e.from.as_str(), e.to.as_str()]).collect();
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_owned()];
        while let Some(n) = stack.pop() {
            for e in edges.iter().filter(|e| e.from == n) {
                if seen.insert(e.to.clone()) {
                    stack.push(e.to.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&str, BTreeSet<String>> = nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for n in &nodes {
        if done.contains(*n) || !reaches[n].contains(*n) {
            continue;
        }
        let scc: BTreeSet<String> = reaches[n]
            .iter()
            .filter(|m| reaches.get(m.as_str()).is_some_and(|r| r.contains(*n)))
            .cloned()
            .collect();
        done.extend(scc.iter().cloned());
        out.push(
            edges
                .iter()
                .filter(|e| scc.contains(&e.from) && scc.contains(&e.to))
                .cloned()
                .collect(),
        );
    }
    out
}

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

/// Paths named in backticks in the section of `doc` headed
/// `## Mechanism map` that do not exist under `root`.
pub fn missing_paths(root: &Path, doc: &str) -> (usize, Vec<String>) {
    let Some(start) = doc.find("## Mechanism map") else {
        return (0, vec!["ARCHITECTURE.md has no \"## Mechanism map\" section".to_owned()]);
    };
    let section = &doc[start + 3..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let mut named = 0;
    let mut out = Vec::new();
    for path in section.split('`').skip(1).step_by(2) {
        let path = path.split("::").next().unwrap_or(path);
        let looks_like_path = path.contains('/') && !path.contains(' ') && !path.contains("://");
        if !looks_like_path {
            continue;
        }
        named += 1;
        if !root.join(path).exists() {
            out.push(path.to_owned());
        }
    }
    (named, out)
}

/// Relative links (`[text](path)`) in the repository's Markdown files whose
/// target does not exist, as `file:line: target`. Links with a scheme
/// (`https:`) or to an anchor alone are not checked.
pub fn broken_links(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for f in files(root, &[".md"]) {
        if f.components().any(|c| c.as_os_str() == "target") {
            continue;
        }
        let text = fs::read_to_string(&f).unwrap_or_default();
        let dir = f.parent().unwrap_or(root);
        for (n, line) in text.lines().enumerate() {
            let mut rest = line;
            while let Some(i) = rest.find("](") {
                rest = &rest[i + 2..];
                let Some(end) = rest.find(')') else { break };
                let target = rest[..end].split('#').next().unwrap_or("");
                rest = &rest[end..];
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                if !dir.join(target).exists() {
                    out.push(format!("{}:{}: {target}", rel(root, &f), n + 1));
                }
            }
        }
    }
    out
}
