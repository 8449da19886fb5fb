//! No module of a crate imports, through others, a module that imports it: each crate's modules
//! form a graph without circles, so each can be read, and moved, from the bottom up. Checked
//! from the sources (`crate::` and `super::` paths, test modules and comments left out) by a
//! unit test of this crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates whose modules are checked, by their source folder.
pub const CRATES: [&str; 6] = [
    "crates/common/src",
    "crates/ebpf/src",
    "crates/loadgen/src",
    "crates/analysis/src",
    "crates/profiler/src",
    "xtask/src",
];

/// Module path ("render::folded") -> its file.
fn modules(root: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let Some(rel) = path.strip_prefix(root).ok().and_then(|p| p.to_str()) else {
                continue;
            };
            let Some(rel) = rel.strip_suffix(".rs") else {
                continue;
            };
            let mut parts: Vec<&str> = rel.split('/').collect();
            if matches!(parts.last(), Some(&("mod" | "lib" | "main"))) {
                parts.pop();
            }
            out.insert(parts.join("::"), path);
        }
    }
    out
}

/// The code of a file without its line comments and its test module.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::a::b` and `super::a` path in `code`, as its segments after the root, with
/// `crate::{a, b::c}` groups split.
fn paths(code: &str) -> Vec<(bool, Vec<String>)> {
    let ident = |s: &str| -> Vec<String> {
        let mut segs = Vec::new();
        let mut rest = s;
        loop {
            let name: String = (rest.chars())
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() {
                break;
            }
            rest = &rest[name.len()..];
            segs.push(name);
            match rest.strip_prefix("::") {
                Some(r) => rest = r,
                None => break,
            }
        }
        segs
    };
    let mut out = Vec::new();
    for root in ["crate::", "super::"] {
        let mut rest = code;
        while let Some(at) = rest.find(root) {
            let before = rest[..at].chars().last();
            rest = &rest[at + root.len()..];
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let is_crate = root == "crate::";
            if let Some(group) = rest.strip_prefix('{') {
                // One level of a group: each item's leading segments.
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    let segs = ident(item.trim());
                    if !segs.is_empty() {
                        out.push((is_crate, segs));
                    }
                }
            } else {
                let segs = ident(rest);
                if !segs.is_empty() {
                    out.push((is_crate, segs));
                }
            }
        }
    }
    out
}

/// The modules each module of the crate at `root` names, parents and children left out.
pub fn graph(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules(root);
    let mut graph = BTreeMap::new();
    for (name, file) in &modules {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let here: Vec<&str> = name.split("::").filter(|s| !s.is_empty()).collect();
        let mut edges = BTreeSet::new();
        for (is_crate, segs) in paths(&code(&text)) {
            let mut full: Vec<String> = if is_crate {
                Vec::new()
            } else {
                // `super`: the module's parent (a mod.rs's module is its folder).
                here[..here.len().saturating_sub(1)]
                    .iter()
                    .map(|s| s.to_string())
                    .collect()
            };
            full.extend(segs);
            for k in (1..=full.len()).rev() {
                let target = full[..k].join("::");
                if modules.contains_key(&target) {
                    let related = target.starts_with(&format!("{name}::"))
                        || name.starts_with(&format!("{target}::"));
                    if target != *name && !related && !name.is_empty() {
                        edges.insert(target);
                    }
                    break;
                }
            }
        }
        graph.insert(name.clone(), edges);
    }
    graph
}

/// The circles of a graph: its strongly connected parts of more than one module.
pub fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Kosaraju: finish order on the graph, then parts on the reversed one.
    fn visit<'a>(
        v: &'a str,
        g: &'a BTreeMap<String, BTreeSet<String>>,
        seen: &mut BTreeSet<&'a str>,
        order: &mut Vec<&'a str>,
    ) {
        if !seen.insert(v) {
            return;
        }
        for w in g.get(v).into_iter().flatten() {
            visit(w, g, seen, order);
        }
        order.push(v);
    }
    let mut reversed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (v, ws) in graph {
        reversed.entry(v.clone()).or_default();
        for w in ws {
            reversed.entry(w.clone()).or_default().insert(v.clone());
        }
    }
    let (mut seen, mut order) = (BTreeSet::new(), Vec::new());
    for v in graph.keys() {
        visit(v, graph, &mut seen, &mut order);
    }
    let mut assigned = BTreeSet::new();
    let mut out = Vec::new();
    for v in order.into_iter().rev() {
        let mut part = Vec::new();
        visit(v, &reversed, &mut assigned, &mut part);
        if part.len() > 1 {
            part.sort();
            out.push(part.into_iter().map(str::to_string).collect());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_crate_has_an_import_circle() {
        let root = crate::workspace_root();
        for krate in CRATES {
            let g = graph(&root.join(krate));
            assert!(g.len() > 3, "{krate}: {} modules found", g.len());
            assert_eq!(circles(&g), Vec::<Vec<String>>::new(), "{krate}");
        }
    }

    #[test]
    fn a_circle_is_found() {
        let edges = |pairs: &[(&str, &str)]| {
            let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for (a, b) in pairs {
                g.entry(a.to_string()).or_default().insert(b.to_string());
                g.entry(b.to_string()).or_default();
            }
            g
        };
        let g = edges(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]);
        assert_eq!(circles(&g), vec![vec!["a", "b", "c"]]);
        assert!(circles(&edges(&[("a", "b"), ("b", "c")])).is_empty());
        assert_eq!(
            paths(&code(
                "use crate::{a, b::c};\nlet x = super::d::E; // crate::not_this"
            )),
            vec![
                (true, vec!["a".to_string()]),
                (true, vec!["b".into(), "c".into()]),
                (false, vec!["d".into(), "E".into()]),
            ]
        );
    }
}
