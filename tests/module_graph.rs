//! No file-level import circle in `src/`: if a file uses something from a sibling file (or a
//! file under a sibling directory), nothing reachable from that sibling uses the first file.
//!
//! Every file of the library is parsed (syn); the paths it names outside its `#[cfg(test)]`
//! items (`use` trees and paths in code) that start with `crate::`, `super::` or `self::` are
//! resolved to the deepest module file they reach. Edges between a module and its own ancestors
//! are left out: a `mod.rs` re-exporting its children and a child using its parent's items is
//! the module system, not a circle. Circles are the strongly connected components of what
//! remains with more than one file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// A module path, `["launcher", "pod"]` for `src/launcher/pod.rs`.
type ModPath = Vec<String>;

fn module_files(root: &Path) -> BTreeMap<ModPath, PathBuf> {
    fn walk(dir: &Path, prefix: &ModPath, out: &mut BTreeMap<ModPath, PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .map(|e| e.expect("directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            if path.is_dir() {
                let mut p = prefix.clone();
                p.push(name.to_string());
                walk(&path, &p, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let mut p = prefix.clone();
                match name {
                    "mod" | "lib" => {}
                    "main" if prefix.is_empty() => continue,
                    _ => p.push(name.to_string()),
                }
                out.insert(p, path);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, &Vec::new(), &mut out);
    out
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

/// The `crate::`/`super::`/`self::` paths a file names, outside its test code.
#[derive(Default)]
struct Paths {
    found: Vec<Vec<String>>,
}

impl Paths {
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.push(prefix, Some(n.ident.to_string())),
            syn::UseTree::Rename(r) => self.push(prefix, Some(r.ident.to_string())),
            syn::UseTree::Glob(_) => self.push(prefix, None),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.use_tree(prefix, t)),
        }
    }

    fn push(&mut self, prefix: &[String], last: Option<String>) {
        let mut path = prefix.to_vec();
        path.extend(last);
        if matches!(
            path.first().map(String::as_str),
            Some("crate" | "super" | "self")
        ) {
            self.found.push(path);
        }
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            syn::Item::Trait(t) => &t.attrs,
            syn::Item::Macro(m) => &m.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if !is_cfg_test(attrs) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segs: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.push(&segs, None);
        syn::visit::visit_path(self, path);
    }
}

/// Resolves `crate::`/`super::`/`self::` against the file's module; `None` outside the crate.
fn absolute(from: &ModPath, path: &[String]) -> Option<ModPath> {
    let mut base = from.clone();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

fn is_prefix(a: &ModPath, b: &ModPath) -> bool {
    a.len() <= b.len() && b[..a.len()] == a[..]
}

/// The file-level edges: file module → the deepest module file each path reaches.
fn edges(root: &Path) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let files = module_files(root);
    let mut graph = BTreeMap::new();
    for (module, file) in &files {
        let text = std::fs::read_to_string(file).expect("source file");
        let ast =
            syn::parse_file(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", file.display()));
        let mut paths = Paths::default();
        paths.visit_file(&ast);
        let from = module.clone();
        let mut targets = BTreeSet::new();
        for path in &paths.found {
            let Some(abs) = absolute(&from, path) else {
                continue;
            };
            let target = (0..=abs.len())
                .rev()
                .map(|n| abs[..n].to_vec())
                .find(|p| files.contains_key(p))
                .expect("the crate root is a module file");
            if !is_prefix(&target, &from) && !is_prefix(&from, &target) {
                targets.insert(target);
            }
        }
        graph.insert(from, targets);
    }
    graph
}

/// Tarjan's strongly connected components with more than one member.
fn circles(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct State<'g> {
        graph: &'g BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'g ModPath, usize>,
        low: BTreeMap<&'g ModPath, usize>,
        stack: Vec<&'g ModPath>,
        on_stack: BTreeSet<&'g ModPath>,
        out: Vec<Vec<ModPath>>,
    }
    fn connect<'g>(s: &mut State<'g>, v: &'g ModPath) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                connect(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            connect(&mut s, v);
        }
    }
    s.out
}

fn show(component: &[ModPath]) -> String {
    component
        .iter()
        .map(|m| m.join("::"))
        .collect::<Vec<_>>()
        .join(" ↔ ")
}

#[test]
fn no_file_level_import_circle_in_src() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = edges(&root);
    // The graph is real: the launcher's pod uses its renderer, the VM controller's engine the
    // pure leaves beside it.
    let pod: ModPath = vec!["launcher".into(), "pod".into()];
    assert!(graph[&pod].contains(&vec!["launcher".to_string(), "renderer".into()]));
    let found = circles(&graph);
    assert!(
        found.is_empty(),
        "file-level import circles in src/:\n{}",
        found.iter().map(|c| show(c)).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn a_circle_between_two_sibling_files_is_found() {
    let a: ModPath = vec!["x".into(), "a".into()];
    let b: ModPath = vec!["x".into(), "b".into()];
    let c: ModPath = vec!["y".into()];
    let graph = BTreeMap::from([
        (a.clone(), BTreeSet::from([b.clone()])),
        (b.clone(), BTreeSet::from([a.clone(), c.clone()])),
        (c.clone(), BTreeSet::new()),
    ]);
    assert_eq!(circles(&graph), vec![vec![a, b]]);
}

#[test]
fn paths_resolve_against_the_file_module() {
    let from: ModPath = vec!["runtime".into(), "informer".into()];
    let p = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    assert_eq!(
        absolute(&from, &p("super::index::Indexer")),
        Some(p("runtime::index::Indexer"))
    );
    assert_eq!(
        absolute(&from, &p("crate::api::vm::VirtualMachine")),
        Some(p("api::vm::VirtualMachine"))
    );
    assert_eq!(
        absolute(&from, &p("self::x")),
        Some(p("runtime::informer::x"))
    );
    assert_eq!(absolute(&from, &p("std::mem")), None);
}
