//! The test suite, the code and the README need nothing outside the repository (issue 8):
//! a fresh clone with no sibling folders passes `cargo test`.
//!
//! Why a scan and not a second `cargo test` in a copy: every path a test reads is built from
//! `env!("CARGO_MANIFEST_DIR")` at compile time, so running the already-built test binaries
//! from a copied tree would still read the original tree; rebuilding the project in a copy
//! takes minutes. Instead this test fails when
//! - any source file (src/, tests/, benches/, .ci/) names a path outside the repository: the
//!   sibling `shared` folder, an absolute home or work directory, or an `include_str!` that
//!   climbs out of the crate. The one allowed mention is the default folder of the optional
//!   upstream sweep, in tests/common/mod.rs, which is only used when it exists;
//! - a file the tests read from the repository's data folders (docs/examples, tests/fixtures,
//!   tests/golden) is not tracked by git, so a clone would lack it;
//! - a file the README's commands name is missing;
//! - the upstream-examples lookup does not skip when its folder is absent.
//!
//! The manual check it stands in for (copy `git ls-files` to an empty folder, `cargo test`
//! there) is described in docs/examples/README.md.

use crate::common;

use std::path::{Path, PathBuf};

/// Files under `dir` (recursively), sorted; `target/` and dot-folders skipped.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                out.extend(files_under(&path));
            }
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}

fn source_files() -> Vec<PathBuf> {
    ["src", "tests", "benches", ".ci"]
        .iter()
        .flat_map(|d| files_under(&common::repo_path(d)))
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_none_or(|e| e == "rs" || e == "sh")
        })
        .collect()
}

fn rel(path: &Path) -> String {
    path.strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn no_source_file_names_a_path_outside_the_repository() {
    // Built from pieces so that this file does not match itself.
    let sibling = format!("{}/{}", "..", "shared");
    let needles = [
        sibling.clone(),
        format!("{}/{}", "shared", "reference"),
        format!("\"/{}/", "work"),
        format!("\"/{}/", "home"),
        format!("\"/{}/", "Users"),
    ];
    let allowed_file = common::repo_path("tests/common/mod.rs");
    let allowed_line = format!(
        "pub const UPSTREAM_EXAMPLES_DEFAULT: &str = \"{}\";",
        common::UPSTREAM_EXAMPLES_DEFAULT
    );
    assert!(common::UPSTREAM_EXAMPLES_DEFAULT.starts_with(&sibling));
    let mut found = Vec::new();
    let mut allowed_seen = 0;
    for file in source_files() {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if file == allowed_file && line.trim() == allowed_line {
                allowed_seen += 1;
                continue;
            }
            if let Some(needle) = needles.iter().find(|needle| line.contains(needle.as_str())) {
                found.push(format!(
                    "{}:{}: {needle:?} in {}",
                    rel(&file),
                    n + 1,
                    line.trim()
                ));
            }
            // include_str!/include_bytes! must stay inside the crate.
            for macro_name in ["include_str!(\"", "include_bytes!(\""] {
                let Some(start) = line.find(macro_name) else {
                    continue;
                };
                let arg = &line[start + macro_name.len()..];
                let arg = &arg[..arg.find('"').unwrap_or(arg.len())];
                let target = file.parent().unwrap().join(arg);
                let inside = target.canonicalize().is_ok_and(|t| {
                    t.starts_with(
                        Path::new(env!("CARGO_MANIFEST_DIR"))
                            .canonicalize()
                            .unwrap(),
                    )
                });
                if !inside {
                    found.push(format!(
                        "{}:{}: {arg} is outside the crate",
                        rel(&file),
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "paths outside the repository (a fresh clone has none of them; use tests/fixtures/ or \
         common::upstream_examples):\n{}",
        found.join("\n")
    );
    assert_eq!(
        allowed_seen, 1,
        "the upstream default is named once, in tests/common/mod.rs"
    );
}

#[test]
fn test_data_is_tracked_by_git() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    if !root.join(".git").exists() {
        println!("SKIP test_data_is_tracked_by_git: not a git checkout");
        return;
    }
    let out = match std::process::Command::new("git")
        .args(["ls-files", "--others", "--exclude-standard", "--"])
        .args(["docs/examples", "tests/fixtures", "tests/golden"])
        .current_dir(root)
        .output()
    {
        Ok(out) if out.status.success() => out,
        _ => {
            println!("SKIP test_data_is_tracked_by_git: git is not usable here");
            return;
        }
    };
    let untracked = String::from_utf8_lossy(&out.stdout);
    assert!(
        untracked.trim().is_empty(),
        "test data that a clone would not have (git add it):\n{untracked}"
    );
}

/// The files the README's commands read (`-f FILE`, `--apply FILE|DIR`) are in the repository.
#[test]
fn readme_commands_name_repository_files() {
    let readme = std::fs::read_to_string(common::repo_path("README.md")).unwrap();
    let mut named = Vec::new();
    let mut in_code = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if !in_code {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        for pair in words.windows(2) {
            if matches!(pair[0], "-f" | "--apply" | "--pod" | "--kubevirt-cr") && pair[1] != "-" {
                named.push(pair[1].to_string());
            }
        }
    }
    assert!(
        named.iter().any(|p| p == "docs/examples"),
        "the README's main job applies docs/examples: {named:?}"
    );
    assert!(
        named.iter().any(|p| p.ends_with(".yaml")),
        "the README shows explain-overhead on a file: {named:?}"
    );
    for path in &named {
        assert!(
            common::repo_path(path).exists(),
            "README.md names {path}, which is not in the repository"
        );
    }
}

/// Without `KUBEVIRT_EXAMPLES` and without the default folder, the upstream sweeps skip; with
/// the variable set they use it; an empty variable counts as unset.
#[test]
fn upstream_examples_lookup_skips_when_absent() {
    let nowhere = common::repo_path("tests/fixtures/no-such-folder");
    assert_eq!(common::locate_upstream_examples(None, &nowhere), None);
    assert_eq!(
        common::locate_upstream_examples(Some("".into()), &nowhere),
        None
    );
    let fixtures = common::repo_path("tests/fixtures");
    assert_eq!(
        common::locate_upstream_examples(Some(fixtures.clone().into()), &nowhere),
        Some(fixtures.clone())
    );
    assert_eq!(
        common::locate_upstream_examples(None, &fixtures),
        Some(fixtures)
    );
}
