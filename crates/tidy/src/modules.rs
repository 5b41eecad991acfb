//! The import graph of a crate's modules, and its cycles.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::{files, rel};

/// An import of one module by a sibling (two modules with the same
/// parent), and where it is.
#[derive(Debug, Clone)]
pub struct Edge {
    /// The importing module, as its path from the crate root (`log::decode`).
    pub from: String,
    /// The imported module, a sibling of `from` (`log::record`).
    pub to: String,
    /// `file:line` of the first such import.
    pub at: String,
}

/// The source roots of the workspace's crates: every `src` folder under
/// `crates/`, and `python/native/src`.
pub fn crate_sources(root: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(root.join("crates"))
        .map(|d| d.flatten().map(|e| e.path().join("src")).filter(|p| p.is_dir()).collect())
        .unwrap_or_default();
    let native = root.join("python/native/src");
    if native.is_dir() {
        out.push(native);
    }
    out.sort();
    out
}

/// The import graph among sibling modules of the crate whose source root
/// is `src`, at every depth: an edge `a::b -> a::c` for every path in a
/// file of `a::b` (or below it) that reaches `a::c` (or below it). Paths
/// are read from the crate root (`crate::`), up the tree (`super::`),
/// from the file's own module (`self::`, or a child module's bare name),
/// and through names a module re-exports from a child (`pub use c::X` in
/// `a`'s file makes `super::X` from `a::b` an edge to `a::c`). A module
/// using its parent's own items, or its children, is not an edge.
pub fn module_edges(src: &Path) -> Vec<Edge> {
    let sources = files(src, &[".rs"]);
    let modules: BTreeSet<Vec<String>> = sources.iter().map(|f| module_path(src, f)).collect();
    let mut reexports: BTreeMap<(Vec<String>, String), String> = BTreeMap::new();
    for file in &sources {
        let path = module_path(src, file);
        let text = fs::read_to_string(file).unwrap_or_default();
        for (name, child) in child_reexports(&text, &path, &modules) {
            reexports.insert((path.clone(), name), child);
        }
    }
    let mut edges: BTreeMap<(String, String), String> = BTreeMap::new();
    for file in &sources {
        let path = module_path(src, file);
        let text = fs::read_to_string(file).unwrap_or_default();
        for (n, line) in code_lines(&text) {
            for target in targets(line, &path, &modules) {
                let common = path.iter().zip(&target).take_while(|(a, b)| a == b).count();
                if common == path.len() || common == target.len() {
                    continue; // an ancestor or a descendant, not a sibling
                }
                let parent = &path[..common];
                let name = &target[common];
                let mut sibling = parent.to_vec();
                if modules.contains(&[parent, std::slice::from_ref(name)].concat()) {
                    sibling.push(name.clone());
                } else if let Some(child) = reexports.get(&(parent.to_vec(), name.clone())) {
                    sibling.push(child.clone());
                } else {
                    continue; // an item of the parent's own file
                }
                let from = path[..=common].join("::");
                let to = sibling.join("::");
                if from != to {
                    edges
                        .entry((from, to))
                        .or_insert_with(|| format!("{}:{}", rel(src, file), n + 1));
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

/// The module paths (from the crate root) that a line's paths name, read
/// from the file's module `path`: `crate::x::y`, `super::..::x`,
/// `self::x`, and `x::y` where `x` is a child module of `path`; groups
/// (`crate::{a::X, b::{Y, Z}}`) give one path each.
fn targets(line: &str, path: &[String], modules: &BTreeSet<Vec<String>>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let boundary = i == 0 || !is_ident(bytes[i - 1]) && bytes[i - 1] != b':';
        if !boundary || !is_ident(bytes[i]) {
            i += 1;
            continue;
        }
        let rest = &line[i..];
        let word = ident(rest);
        let after = &rest[word.len()..];
        let Some(tail) = after.strip_prefix("::") else {
            i += word.len().max(1);
            continue;
        };
        let (base, tail) = match word.as_str() {
            "crate" => (Vec::new(), tail),
            "self" => (path.to_vec(), tail),
            "super" => {
                let mut depth = 1;
                let mut t = tail;
                while let Some(next) = t.strip_prefix("super::") {
                    depth += 1;
                    t = next;
                }
                if depth > path.len() {
                    i += word.len();
                    continue;
                }
                (path[..path.len() - depth].to_vec(), t)
            }
            w if modules.contains(&[path, &[w.to_owned()]].concat()) => (path.to_vec(), after),
            _ => {
                i += word.len();
                continue;
            }
        };
        let tail = tail.strip_prefix("::").unwrap_or(tail);
        for p in path_tree(tail) {
            out.push([base.clone(), p].concat());
        }
        i = line.len() - tail.len();
    }
    out
}

pub(crate) fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The paths a use-tree spells: `a::b::C` is `[a, b, C]`; `{a::X, b}` is
/// `[a, X]` and `[b]`; nested groups likewise.
fn path_tree(s: &str) -> Vec<Vec<String>> {
    let s = s.trim_start();
    if let Some(group) = s.strip_prefix('{') {
        let mut depth = 0;
        let mut out = Vec::new();
        let mut start = 0;
        for (k, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' | ',' if depth == 0 => {
                    out.extend(path_tree(&group[start..k]));
                    if c == '}' {
                        break;
                    }
                    start = k + 1;
                }
                '}' => depth -= 1,
                _ => {}
            }
        }
        return out.into_iter().filter(|p| !p.is_empty()).collect();
    }
    let first = ident(s);
    if first.is_empty() {
        return vec![Vec::new()];
    }
    let rest = &s[first.len()..];
    match rest.strip_prefix("::") {
        Some(tail) => {
            path_tree(tail).into_iter().map(|p| [vec![first.clone()], p].concat()).collect()
        }
        None => vec![vec![first]],
    }
}

fn ident(s: &str) -> String {
    s.trim_start().bytes().take_while(|b| is_ident(*b)).map(char::from).collect()
}

/// The names a module's file re-exports from one of its child modules
/// (`pub use c::{X, Y as Z}`, `pub(crate) use self::c::X`), each with the
/// child it comes from.
fn child_reexports(
    text: &str,
    path: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> Vec<(String, String)> {
    let code: String = code_lines(text).map(|(_, l)| format!("{l}\n")).collect();
    let mut out = Vec::new();
    for stmt in code.split(';') {
        let Some(tree) = reexported_tree(stmt) else { continue };
        let tree = tree.trim_start().trim_start_matches("self::");
        for p in path_tree(tree) {
            let (Some(child), Some(last)) = (p.first(), p.last()) else { continue };
            if p.len() < 2 || !modules.contains(&[path, std::slice::from_ref(child)].concat()) {
                continue;
            }
            out.push((tree_alias(stmt, last), child.clone()));
        }
    }
    out
}

/// The use-tree of a statement `pub use TREE` or `pub(..) use TREE`.
fn reexported_tree(stmt: &str) -> Option<&str> {
    let at = stmt.rfind("pub")?;
    let rest = stmt[at + 3..].trim_start();
    let rest = match rest.strip_prefix('(') {
        Some(r) => r[r.find(')')? + 1..].trim_start(),
        None => rest,
    };
    rest.strip_prefix("use ")
}

/// The name `last` is re-exported under: its `as` alias, if any.
fn tree_alias(stmt: &str, last: &str) -> String {
    let pattern = format!("{last} as ");
    match stmt.find(&pattern) {
        Some(i) => ident(&stmt[i + pattern.len()..]),
        None => last.to_owned(),
    }
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
