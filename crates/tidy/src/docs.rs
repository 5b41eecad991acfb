//! Checks of the documents: the mechanism map's paths, links, and the
//! files, modules and counts the READMEs and ARCHITECTURE.md name.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::modules::crate_sources;
use crate::{files, rel};

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

/// The documents whose names and numbers are checked: the README, the
/// architecture, and every crate's and the Python package's README.
pub fn checked_docs(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    out.extend(files(&root.join("crates"), &["README.md"]));
    out.push(root.join("python/README.md"));
    out.retain(|p| p.exists());
    out
}

/// The `backticked` spans of a Markdown text, with their line numbers
/// (spans inside fenced code blocks are not read).
fn code_spans(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        out.extend(line.split('`').skip(1).step_by(2).map(|s| (n + 1, s)));
    }
    out
}

/// Files, directories and Rust modules that a checked document names and
/// that do not exist, as `doc:line: name`. Read in backticks:
/// - a path whose first part is an entry of the repository's root
///   (`crates/server/src/stream.rs`), or, in a crate's README, of the
///   crate's folder (`src/lib.rs`, `tests/crash.rs`);
/// - a bare file name (`segment.rs`): some file of that name exists
///   under `crates/` or `python/`;
/// - a module path (`log::group`, `commit::marks::CommitMarks`) whose
///   first part is a module or the crate name of a workspace crate: each
///   part is a module (a file), and the first part that is not must be
///   named in its module's file, and so must what follows it.
pub fn missing_names(root: &Path) -> Vec<String> {
    let sources = crate_sources(root);
    let mut out = Vec::new();
    for doc in checked_docs(root) {
        let text = fs::read_to_string(&doc).unwrap_or_default();
        let dir = doc.parent().unwrap_or(root);
        let in_crate = dir != root && dir.join("Cargo.toml").exists();
        for (n, span) in code_spans(&text) {
            if let Some(why) = missing_name(root, dir, in_crate, &sources, span) {
                out.push(format!("{}:{n}: {why}", rel(root, &doc)));
            }
        }
    }
    out
}

fn missing_name(
    root: &Path,
    dir: &Path,
    in_crate: bool,
    sources: &[PathBuf],
    span: &str,
) -> Option<String> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./".contains(c);
    if span.contains('/') && span.chars().all(plain) && !span.starts_with('/') {
        let first = span.split('/').next().unwrap_or("");
        let crate_local = ["src", "tests", "examples", "benches", "data", "native"];
        let base = if in_crate && crate_local.contains(&first) {
            dir
        } else if !first.is_empty() && !first.starts_with('.') && root.join(first).exists() {
            root
        } else {
            return None;
        };
        return (!base.join(span).exists()).then(|| format!("no file or folder {span}"));
    }
    let source_exts = [".rs", ".py", ".proto", ".sh"];
    if !span.contains('/')
        && !span.starts_with('.')
        && span.chars().all(plain)
        && source_exts.iter().any(|e| span.ends_with(e))
    {
        let found = ["crates", "python", "scripts", "proto", "fuzz"].iter().any(|d| {
            files(&root.join(d), &[span]).iter().any(|f| f.file_name().is_some_and(|n| n == span))
        });
        return (!found).then(|| format!("no file named {span}"));
    }
    let parts: Vec<&str> = span.split("::").collect();
    let ident = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if parts.len() < 2 || !parts.iter().all(|p| ident(p)) {
        return None;
    }
    let mut candidates = Vec::new();
    for src in sources {
        let krate = crate_name(src);
        let rest = if krate.as_deref() == Some(parts[0]) { &parts[1..] } else { &parts[..] };
        if rest.len() == parts.len() && module_file(src, &[parts[0].to_owned()]).is_none() {
            continue;
        }
        candidates.push(resolve(src, rest));
    }
    if candidates.is_empty() || candidates.iter().any(Option::is_none) {
        return None;
    }
    candidates.into_iter().flatten().next().map(|what| format!("{span}: {what}"))
}

/// The crate name (with `_`) of the crate whose source root is `src`.
fn crate_name(src: &Path) -> Option<String> {
    let manifest = fs::read_to_string(src.parent()?.join("Cargo.toml")).ok()?;
    let lib = manifest.split("[lib]").nth(1).and_then(|l| {
        let l = &l[..l.find("\n[").unwrap_or(l.len())];
        l.lines()
            .find_map(|x| x.trim().strip_prefix("name = ").map(|v| v.trim_matches('"').to_owned()))
    });
    let package = manifest
        .lines()
        .find_map(|x| x.trim().strip_prefix("name = ").map(|v| v.trim_matches('"')))?;
    Some(lib.unwrap_or_else(|| package.replace('-', "_")))
}

/// The file of module `path` under `src`, if it has one of its own.
fn module_file(src: &Path, path: &[String]) -> Option<PathBuf> {
    if path.is_empty() {
        return ["lib.rs", "main.rs"].iter().map(|f| src.join(f)).find(|p| p.exists());
    }
    let joined: PathBuf = path.iter().collect();
    let file = src.join(&joined).with_extension("rs");
    let dir = src.join(&joined).join("mod.rs");
    [file, dir].into_iter().find(|p| p.exists())
}

/// `None` if the module path `parts` resolves under `src`, else why not.
fn resolve(src: &Path, parts: &[&str]) -> Option<String> {
    let mut module: Vec<String> = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let mut next = module.clone();
        next.push((*part).to_owned());
        if module_file(src, &next).is_some() {
            module = next;
            continue;
        }
        let file = module_file(src, &module)?;
        let text = fs::read_to_string(&file).unwrap_or_default();
        for name in &parts[i..] {
            if !contains_word(&text, name) {
                return Some(format!("{name} is not in {}", file.display()));
            }
        }
        return None;
    }
    None
}

fn contains_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Numbers of crates, examples and tests that a checked document states
/// and that are not true, as `doc:line: claim`. A claim is a number (in
/// digits) followed by `crates`, `examples` or `tests` (or `Rust tests`,
/// `pytest tests`):
/// - crates: the workspace's members;
/// - examples: the `.rs` files under the `examples/` folder the same line
///   names in backticks (`crates/milliscale/examples/`), or under every
///   crate's `examples/` if it names none;
/// - tests: the test functions (`#[test]`, `#[tokio::test]`, `def test_`)
///   in the file or folder the same line names in backticks; a count of
///   tests with no path beside it is itself refused (say which tests).
pub fn false_counts(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let members = workspace_members(root);
    for doc in checked_docs(root) {
        let text = fs::read_to_string(&doc).unwrap_or_default();
        let dir = doc.parent().unwrap_or(root);
        for (n, line) in text.lines().enumerate() {
            for (number, what) in count_claims(line) {
                let paths: Vec<PathBuf> = line
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .filter(|s| s.contains('/') && !s.contains(' ') && !s.contains("://"))
                    .flat_map(|s| [root.join(s), dir.join(s)])
                    .filter(|p| p.exists())
                    .filter_map(|p| p.canonicalize().ok())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect();
                let actual = match what {
                    "crates" => Some(members),
                    "examples" => {
                        let dirs: Vec<PathBuf> = if paths.is_empty() {
                            files(&root.join("crates"), &[".rs"])
                                .into_iter()
                                .filter_map(|f| f.parent().map(Path::to_path_buf))
                                .filter(|d| d.ends_with("examples"))
                                .collect::<BTreeSet<_>>()
                                .into_iter()
                                .collect()
                        } else {
                            paths.clone()
                        };
                        Some(dirs.iter().map(|d| files(d, &[".rs"]).len()).sum())
                    }
                    _ => (!paths.is_empty()).then(|| paths.iter().map(|p| test_functions(p)).sum()),
                };
                match actual {
                    Some(a) if a == number => {}
                    Some(a) => out.push(format!(
                        "{}:{}: says {number} {what}, there are {a}",
                        rel(root, &doc),
                        n + 1
                    )),
                    None => out.push(format!(
                        "{}:{}: says {number} {what} without naming where (a path in backticks)",
                        rel(root, &doc),
                        n + 1
                    )),
                }
            }
        }
    }
    out
}

/// The (number, kind) claims of a line: "12 crates", "8 examples",
/// "24 tests", "5 Rust tests", "24 pytest tests".
pub fn count_claims(line: &str) -> Vec<(usize, &'static str)> {
    let words: Vec<&str> = line.split(|c: char| c.is_whitespace() || "(),;:".contains(c)).collect();
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        let Ok(number) = w.replace(',', "").parse::<usize>() else { continue };
        let mut j = i + 1;
        if words.get(j).is_some_and(|x| ["Rust", "pytest", "Python"].contains(x)) {
            j += 1;
        }
        let kind = words.get(j).map(|x| x.trim_end_matches('.'));
        match kind {
            Some("crates") => out.push((number, "crates")),
            Some("examples") => out.push((number, "examples")),
            Some("tests") => out.push((number, "tests")),
            _ => {}
        }
    }
    out
}

/// The workspace's members, from the root `Cargo.toml`.
pub fn workspace_members(root: &Path) -> usize {
    let manifest = fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    let Some(start) = manifest.find("members = [") else { return 0 };
    let list = &manifest[start..];
    list[..list.find(']').unwrap_or(list.len())].matches('"').count() / 2
}

/// Test functions in a file or under a folder: Rust `#[test]` and
/// `#[tokio::test(..)]` attributes, and Python `def test_` functions.
pub fn test_functions(path: &Path) -> usize {
    let list = if path.is_dir() { files(path, &[".rs", ".py"]) } else { vec![path.to_path_buf()] };
    list.iter()
        .map(|f| {
            let text = fs::read_to_string(f).unwrap_or_default();
            text.lines()
                .map(str::trim_start)
                .filter(|l| {
                    l.starts_with("#[test]")
                        || l.starts_with("#[tokio::test")
                        || l.starts_with("def test_")
                        || l.starts_with("async def test_")
                })
                .count()
        })
        .sum()
}
