//! The repository's shape, checked on every test run (see `src/lib.rs`).

use milliscale_tidy::{
    FILE_LINES_MAX, broken_links, long_files, missing_paths, module_cycles, module_edges,
    outside_reference, outside_references, repo_root, unexplained_allows,
};

#[test]
fn the_engine_modules_import_each_other_without_a_cycle() {
    let src = repo_root().join("crates/milliscale/src");
    let edges = module_edges(&src);
    assert!(edges.len() > 20, "the module graph was not read: {edges:?}");
    let cycles = module_cycles(&edges);
    let shown: Vec<String> = cycles
        .iter()
        .map(|c| {
            c.iter()
                .map(|e| format!("  {} -> {} ({})", e.from, e.to, e.at))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    assert!(
        cycles.is_empty(),
        "import cycles among the engine's modules:\n{}",
        shown.join("\n--\n")
    );
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    // The checker itself: a graph with a cycle must be reported.
    let dir = std::env::temp_dir().join(format!("tidy-cycle-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("b")).expect("temp dir");
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\npub use b::Thing;\n").expect("write");
    std::fs::write(src.join("a.rs"), "use crate::{Thing, c};\n// use crate::z;\n").expect("write");
    std::fs::write(src.join("b/mod.rs"), "pub struct Thing;\nmod inner;\n").expect("write");
    std::fs::write(src.join("b/inner.rs"), "use super::super::a::X;\n").expect("write");
    let edges = module_edges(&src);
    let cycles = module_cycles(&edges);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(edges.len(), 2, "{edges:?}");
    assert_eq!(cycles.len(), 1, "{cycles:?}");
}

#[test]
fn no_source_file_is_over_the_line_limit() {
    let long = long_files(&repo_root());
    assert!(long.is_empty(), "files over {FILE_LINES_MAX} lines:\n{}", long.join("\n"));
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
