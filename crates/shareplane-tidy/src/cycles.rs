//! Import circles between the modules of one crate: module `a` names `crate::b::…` (or
//! `super::b::…`) and `b`, directly or through others, names `a`. A module naming its own
//! ancestor or descendant is not an edge (a parent re-exports its children; a child uses its
//! parent's types).

use std::collections::{BTreeMap, BTreeSet};

use crate::tree::Source;

/// One circle: the crate root, its modules (sorted) and the edges that close it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    /// The crate root file, relative to the workspace (`crates/x/src/lib.rs`).
    pub root: String,
    pub modules: Vec<String>,
    /// `from → to (file: path)` for each edge inside the circle.
    pub edges: Vec<String>,
}

type Edges = BTreeMap<(String, String), String>;

/// Every import circle in the sources, per crate root.
pub fn cycles(sources: &[Source]) -> Vec<Cycle> {
    let mut by_root: BTreeMap<&str, Vec<&Source>> = BTreeMap::new();
    for s in sources {
        if let Some((root, _)) = &s.module {
            by_root.entry(root).or_default().push(s);
        }
    }
    let mut out = Vec::new();
    for (root, files) in by_root {
        let edges = edges(&files);
        for scc in components(&edges) {
            let inside = |m: &String| scc.contains(m);
            let edges = edges
                .iter()
                .filter(|((a, b), _)| inside(a) && inside(b))
                .map(|((a, b), why)| format!("{a} → {b} ({why})"))
                .collect();
            out.push(Cycle {
                root: root.to_string(),
                modules: scc.into_iter().collect(),
                edges,
            });
        }
    }
    out
}

fn edges(files: &[&Source]) -> Edges {
    let mut known = BTreeSet::new();
    for s in files {
        let (_, module) = s.module.as_ref().expect("grouped by module");
        known.insert(module.clone());
        for p in &s.measure.paths {
            for i in 1..=p.inline.len() {
                known.insert([module.clone(), p.inline[..i].to_vec()].concat());
            }
        }
    }
    let mut edges = Edges::new();
    for s in files {
        let (_, module) = s.module.as_ref().expect("grouped by module");
        for p in &s.measure.paths {
            let from = [module.clone(), p.inline.clone()].concat();
            let Some(abs) = absolute(&from, &p.segments) else {
                continue;
            };
            let Some(to) = (1..=abs.len())
                .rev()
                .map(|n| &abs[..n])
                .find(|m| known.contains(*m))
            else {
                continue;
            };
            if from.starts_with(to) || to.starts_with(&from) {
                continue;
            }
            let why = format!("{}: {}", s.rel, p.segments.join("::"));
            edges.entry((from.join("::"), to.join("::"))).or_insert(why);
        }
    }
    edges
}

/// The path from the crate root that `segments` (starting with `crate`, `self` or `super`)
/// names from module `from`.
fn absolute(from: &[String], segments: &[String]) -> Option<Vec<String>> {
    let mut rest = segments;
    let mut at: Vec<String> = match segments.first()?.as_str() {
        "crate" => {
            rest = &segments[1..];
            Vec::new()
        }
        _ => from.to_vec(),
    };
    while let Some(first) = rest.first() {
        match first.as_str() {
            "self" => {}
            "super" => {
                at.pop()?;
            }
            _ => break,
        }
        rest = &rest[1..];
    }
    at.extend(rest.iter().cloned());
    Some(at)
}

/// Strongly connected components of more than one module (Tarjan's algorithm).
fn components(edges: &Edges) -> Vec<BTreeSet<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        next.entry(a).or_default().push(b);
        next.entry(b).or_default();
    }
    let mut t = Tarjan {
        next: &next,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for &n in next.keys() {
        if !t.index.contains_key(n) {
            t.visit(n);
        }
    }
    t.out
}

struct Tarjan<'a> {
    next: &'a BTreeMap<&'a str, Vec<&'a str>>,
    index: BTreeMap<&'a str, usize>,
    low: BTreeMap<&'a str, usize>,
    stack: Vec<&'a str>,
    out: Vec<BTreeSet<String>>,
}

impl<'a> Tarjan<'a> {
    fn visit(&mut self, n: &'a str) {
        let i = self.index.len();
        self.index.insert(n, i);
        self.low.insert(n, i);
        self.stack.push(n);
        for &m in &self.next[n] {
            if !self.index.contains_key(m) {
                self.visit(m);
                let low = self.low[n].min(self.low[m]);
                self.low.insert(n, low);
            } else if self.stack.contains(&m) {
                let low = self.low[n].min(self.index[m]);
                self.low.insert(n, low);
            }
        }
        if self.low[n] == self.index[n] {
            let mut scc = BTreeSet::new();
            while let Some(m) = self.stack.pop() {
                scc.insert(m.to_string());
                if m == n {
                    break;
                }
            }
            if scc.len() > 1 {
                self.out.push(scc);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::measure;

    fn source(module: &[&str], text: &str) -> Source {
        Source {
            rel: format!("{}.rs", module.join("/")),
            src_dir: "src".into(),
            module: Some((
                "src/lib.rs".into(),
                module.iter().map(|s| s.to_string()).collect(),
            )),
            measure: measure(text).unwrap(),
        }
    }

    #[test]
    fn two_siblings_that_name_each_other_are_a_circle_and_a_parent_is_not() {
        let files = [
            source(&["a"], "use crate::b::X;\nuse crate::c::Y;\n"),
            source(&["b"], "fn f() { super::a::g(); }\n"),
            source(&["c"], "use crate::c::d::Z;\n"),
            source(&["c", "d"], "use super::Y;\nuse crate::c::W;\n"),
        ];
        let found = cycles(&files);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].modules, vec!["a", "b"]);
        assert_eq!(found[0].edges.len(), 2);
    }
}
