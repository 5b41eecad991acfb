//! The repository's shape, checked on every test run (see `src/lib.rs`).

use milliscale_tidy::{
    FILE_LINES_MAX, broken_links, crate_sources, false_counts, long_documents, long_files,
    missing_names, missing_paths, module_cycles, module_edges, outside_reference,
    outside_references, repo_root, unexplained_allows,
};

#[test]
fn no_module_imports_a_sibling_that_imports_it_back() {
    let root = repo_root();
    let sources = crate_sources(&root);
    assert!(sources.len() >= 12, "the workspace's crates were not found: {sources:?}");
    let mut edges_seen = 0;
    let mut nested_seen = 0;
    let mut shown = Vec::new();
    for src in &sources {
        let edges = module_edges(src);
        edges_seen += edges.len();
        nested_seen += edges.iter().filter(|e| e.from.contains("::")).count();
        let krate = src.parent().map(|c| c.strip_prefix(&root).unwrap_or(c).display().to_string());
        for cycle in module_cycles(&edges) {
            let lines: Vec<String> =
                cycle.iter().map(|e| format!("  {} -> {} ({})", e.from, e.to, e.at)).collect();
            shown.push(format!("{}:\n{}", krate.clone().unwrap_or_default(), lines.join("\n")));
        }
    }
    // The graph was read: the engine alone has dozens of edges, and some
    // inside folders.
    assert!(edges_seen > 100 && nested_seen > 20, "{edges_seen} edges, {nested_seen} nested");
    assert!(shown.is_empty(), "import cycles ({}):\n{}", shown.len(), shown.join("\n--\n"));
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    // The checker itself: graphs with a cycle must be reported, at the top
    // level and inside a folder, through paths and through re-exports.
    let dir = std::env::temp_dir().join(format!("tidy-cycle-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("b")).expect("temp dir");
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\npub use b::Thing;\n").expect("write");
    std::fs::write(src.join("a.rs"), "use crate::{Thing, c};\n// use crate::z;\n").expect("write");
    std::fs::write(
        src.join("b/mod.rs"),
        "pub struct Thing;\nmod inner;\nmod x;\nmod y;\npub(crate) use y::Why;\nfn f() { x::go() }\n",
    )
    .expect("write");
    std::fs::write(src.join("b/inner.rs"), "use super::super::a::X;\n").expect("write");
    // b::x -> b::y through the parent's re-export; b::y -> b::x by path.
    std::fs::write(src.join("b/x.rs"), "use super::{Thing, Why};\n").expect("write");
    std::fs::write(src.join("b/y.rs"), "pub struct Why;\nfn g() { crate::b::x::go() }\n")
        .expect("write");
    let edges = module_edges(&src);
    let cycles = module_cycles(&edges);
    std::fs::remove_dir_all(&dir).ok();
    let shown: Vec<String> = edges.iter().map(|e| format!("{} -> {}", e.from, e.to)).collect();
    assert_eq!(shown, ["a -> b", "b -> a", "b::x -> b::y", "b::y -> b::x"], "{edges:?}");
    assert_eq!(cycles.len(), 2, "{cycles:?}");
}

#[test]
fn no_source_file_is_over_the_line_limit() {
    let long = long_files(&repo_root());
    assert!(long.is_empty(), "files over {FILE_LINES_MAX} lines:\n{}", long.join("\n"));
}

#[test]
fn no_top_level_document_is_over_its_line_limit() {
    let long = long_documents(&repo_root());
    assert!(long.is_empty(), "documents over their limits:\n{}", long.join("\n"));
    // The check itself: a document one line over its limit is reported.
    let dir = std::env::temp_dir().join(format!("tidy-docs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for (doc, max) in milliscale_tidy::DOCUMENT_LINES_MAX {
        let lines = if doc == "BENCHMARKS.md" { max + 1 } else { max };
        std::fs::write(dir.join(doc), "x\n".repeat(lines)).expect("write");
    }
    let found = long_documents(&dir);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(found, ["BENCHMARKS.md: 701 lines, at most 700"]);
}

#[test]
fn every_allow_of_too_many_lines_says_why() {
    let bare = unexplained_allows(&repo_root());
    assert!(
        bare.is_empty(),
        "allow(clippy::too_many_lines) without a reason:\n{}",
        bare.join("\n")
    );
}

#[test]
fn nothing_refers_outside_the_repository() {
    for bad in ["see ../shared/docs/X.md", "seed 001's rule", "(issue 16)", "DESIGN.md invariant 2"]
    {
        assert!(outside_reference(bad).is_some(), "{bad}");
    }
    for fine in ["seeds 42-44", "seed 7 replays", "the issue is", "tissue 5"] {
        assert!(outside_reference(fine).is_none(), "{fine}");
    }
    let found = outside_references(&repo_root());
    assert!(found.is_empty(), "references a reader cannot open:\n{}", found.join("\n"));
}

#[test]
fn every_path_in_the_mechanism_map_exists() {
    let root = repo_root();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let (named, missing) = missing_paths(&root, &doc);
    assert!(missing.is_empty(), "the mechanism map names paths that do not exist: {missing:?}");
    assert!(named >= 20, "the mechanism map names only {named} paths");
}

#[test]
fn every_relative_link_in_the_docs_leads_somewhere() {
    let broken = broken_links(&repo_root());
    assert!(broken.is_empty(), "links to nothing:\n{}", broken.join("\n"));
}

#[test]
fn the_checks_find_what_they_look_for() {
    // Each checker on a small tree that breaks its rule once.
    let dir = std::env::temp_dir().join(format!("tidy-rules-{}", std::process::id()));
    let src = dir.join("crates/x/src");
    std::fs::create_dir_all(&src).expect("temp dir");
    std::fs::write(
        src.join("lib.rs"),
        "#[allow(\n    clippy::too_many_lines,\n)]\nfn a() {}\n\
         #[allow(clippy::too_many_lines, reason = \"one table\")]\nfn b() {}\n",
    )
    .expect("write");
    std::fs::write(src.join("long.rs"), "//\n".repeat(FILE_LINES_MAX + 1)).expect("write");
    std::fs::write(dir.join("README.md"), "[ok](crates/x/src/lib.rs) [gone](nowhere.md)\n")
        .expect("write");
    let allows = unexplained_allows(&dir);
    let long = long_files(&dir);
    let links = broken_links(&dir);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(allows, ["crates/x/src/lib.rs:1"], "only the allow without a reason");
    assert_eq!(long.len(), 1, "{long:?}");
    assert_eq!(links, ["README.md:1: nowhere.md"]);
}

#[test]
fn every_file_and_module_the_docs_name_exists() {
    let missing = missing_names(&repo_root());
    assert!(missing.is_empty(), "the docs name what does not exist:\n{}", missing.join("\n"));
}

#[test]
fn every_count_of_crates_examples_and_tests_in_the_docs_is_true() {
    let wrong = false_counts(&repo_root());
    assert!(wrong.is_empty(), "counts that are not true:\n{}", wrong.join("\n"));
}

#[test]
fn the_doc_checks_find_a_missing_name_and_a_wrong_count() {
    // A small workspace whose README names a file, a module and a count
    // correctly once and wrongly once each.
    let dir = std::env::temp_dir().join(format!("tidy-docs-{}", std::process::id()));
    let src = dir.join("crates/x/src");
    std::fs::create_dir_all(src.join("log")).expect("temp dir");
    std::fs::create_dir_all(dir.join("crates/x/tests")).expect("temp dir");
    std::fs::create_dir_all(dir.join("crates/x/examples")).expect("temp dir");
    std::fs::write(dir.join("Cargo.toml"), "[workspace]\nmembers = [\"crates/x\"]\n").expect("w");
    std::fs::write(dir.join("crates/x/Cargo.toml"), "[package]\nname = \"x\"\n").expect("w");
    std::fs::write(src.join("lib.rs"), "pub mod log;\n").expect("w");
    std::fs::write(src.join("log/mod.rs"), "pub mod group;\n").expect("w");
    std::fs::write(src.join("log/group.rs"), "pub struct Group;\nimpl Group { fn cut() {} }\n")
        .expect("w");
    std::fs::write(dir.join("crates/x/tests/t.rs"), "#[test]\nfn a() {}\n#[test]\nfn b() {}\n")
        .expect("w");
    std::fs::write(dir.join("crates/x/examples/e.rs"), "fn main() {}\n").expect("w");
    std::fs::write(
        dir.join("README.md"),
        "Fine: `crates/x/src/log/group.rs`, `group.rs`, `log::group::Group::cut`, \
         `x::log::group`, 1 crates.\n\
         `crates/x/tests/t.rs` has 2 tests; `crates/x/examples/` has 1 examples.\n\
         Wrong: `crates/x/src/log/stream.rs`.\n`stream.rs`\n`log::stream`\n`log::group::Lane`\n\
         `crates/x/tests/t.rs` has 3 tests; 2 crates.\n4 tests somewhere.\n\
         Not ours: `std::sync::Arc`, `s3://bucket/a/b`, `log/g0000/s00000017`.\n",
    )
    .expect("w");
    let missing = missing_names(&dir);
    let wrong = false_counts(&dir);
    std::fs::remove_dir_all(&dir).ok();
    let expected = [
        "README.md:3: no file or folder crates/x/src/log/stream.rs",
        "README.md:4: no file named stream.rs",
        "README.md:5: log::stream: stream is not in",
        "README.md:6: log::group::Lane: Lane is not in",
    ];
    assert_eq!(missing.len(), expected.len(), "{missing:?}");
    for (m, e) in missing.iter().zip(expected) {
        assert!(m.starts_with(e), "{m} should start with {e}");
    }
    assert_eq!(wrong.len(), 3, "{wrong:?}");
    assert!(wrong[0].contains("says 3 tests, there are 2"), "{wrong:?}");
    assert!(wrong[1].contains("says 2 crates, there are 1"), "{wrong:?}");
    assert!(wrong[2].contains("4 tests without naming where"), "{wrong:?}");
}
