//! Guards on the shape of the workspace's source, in the manner of TigerBeetle's tidy: no
//! function over [`MAX_FN_LINES`] lines, no source file over [`MAX_FILE_LINES`] lines, and no
//! import circle between the modules of a crate, except what `exceptions.txt` (next to this
//! crate's `Cargo.toml`) lists. That list is a ratchet: an item on it that grew fails, one that
//! shrank must have its count lowered, and one that is back within the limits (or gone) must
//! have its line deleted, so the list only ever shrinks. `tests/tidy.rs` runs the check.
//!
//! What is measured (non-test sources: every `.rs` under `crates/*/src` and `tests/e2e/src`,
//! except files that only `#[cfg(test)] mod name;` brings in):
//! - a function, from the line of its `fn` keyword to the line of its closing brace, both
//!   counted (attributes and doc comments above it are not); functions inside `#[cfg(test)]`
//!   items are not measured, nested functions are measured on their own and inside their parent;
//! - a file, by its lines outside `#[cfg(test)]` items (a file's inline test module does not
//!   count against it);
//! - an import circle, by the `crate::`/`super::`/`self::` paths between modules of one crate.
//!
//! [`layering`] checks, without exceptions, what the core and the other crates may depend on and
//! name (see there).

pub mod cycles;
pub mod layering;
pub mod measure;
pub mod tree;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// Longest function, in lines (TigerBeetle's limit).
pub const MAX_FN_LINES: usize = 70;
/// Longest source file, in lines outside `#[cfg(test)]` items.
pub const MAX_FILE_LINES: usize = 800;

/// What is over the limits now: the keys are the exception file's lines without their counts.
#[derive(Debug, Default)]
pub struct Over {
    /// `"file crates/x/src/a.rs"` → lines; `"fn crates/x/src/a.rs::T::f"` → lines;
    /// `"cycle crates/x/src/lib.rs a b"` → 0 (the file lists a circle without a count).
    pub items: BTreeMap<String, usize>,
    /// How each circle closes, for the message.
    pub cycle_edges: BTreeMap<String, Vec<String>>,
}

/// Measures the workspace at `root`.
pub fn over_limits(root: &Path) -> Result<Over, String> {
    let sources = tree::sources(root)?;
    let mut over = Over::default();
    for s in &sources {
        if s.measure.code_lines > MAX_FILE_LINES {
            over.items
                .insert(format!("file {}", s.rel), s.measure.code_lines);
        }
        for (name, lines) in &s.measure.fns {
            if *lines > MAX_FN_LINES {
                let key = unique(&over.items, format!("fn {}::{name}", s.rel));
                over.items.insert(key, *lines);
            }
        }
    }
    for c in cycles::cycles(&sources) {
        let key = format!("cycle {} {}", c.root, c.modules.join(" "));
        over.items.insert(key.clone(), 0);
        over.cycle_edges.insert(key, c.edges);
    }
    Ok(over)
}

/// What the crates depend on and name against ARCHITECTURE.md's absences ([`layering`]).
pub fn layering_breaches(root: &Path) -> Result<Vec<String>, String> {
    layering::breaches(root, &tree::sources(root)?)
}

/// Two functions of one name in one file (say, in two `impl` blocks) get `#2`, `#3`….
fn unique(items: &BTreeMap<String, usize>, key: String) -> String {
    let mut n = 1;
    let mut k = key.clone();
    while items.contains_key(&k) {
        n += 1;
        k = format!("{key} #{n}");
    }
    k
}

/// The exception list: key → (allowed count, line number in the file).
pub fn parse_exceptions(text: &str) -> Result<BTreeMap<String, (usize, usize)>, String> {
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || {
            format!(
                "line {}: expected `file|fn <what> <lines>` or `cycle <root> <modules>`: {line}",
                i + 1
            )
        };
        let (key, count) = if line.starts_with("cycle ") {
            (line, 0)
        } else if line.starts_with("file ") || line.starts_with("fn ") {
            let (key, count) = line.rsplit_once(' ').ok_or_else(bad)?;
            (key, count.parse().map_err(|_| bad())?)
        } else {
            return Err(bad());
        };
        if out.insert(key.trim().to_string(), (count, i + 1)).is_some() {
            return Err(format!("line {}: listed twice: {key}", i + 1));
        }
    }
    Ok(out)
}

/// One way the source and the exception list disagree.
#[derive(Debug, PartialEq, Eq)]
pub enum Problem {
    /// Over a limit and not listed.
    New { key: String, count: usize },
    /// Listed, and larger now.
    Grew {
        key: String,
        listed: usize,
        count: usize,
        line: usize,
    },
    /// Listed, still over the limit, but smaller: the list must follow it down.
    Shrank {
        key: String,
        listed: usize,
        count: usize,
        line: usize,
    },
    /// Listed, and now within the limits or gone.
    Unneeded { key: String, line: usize },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::New { key, .. } if key.starts_with("cycle ") => {
                write!(f, "new import circle: {key}: move what both sides share to a module of its own")
            }
            Problem::New { key, count } => write!(
                f,
                "over the limit ({count} lines; functions {MAX_FN_LINES}, files {MAX_FILE_LINES}): {key}: split it"
            ),
            Problem::Grew { key, listed, count, line } => write!(
                f,
                "exceptions.txt line {line}: {key} grew from {listed} to {count} lines: the list only shrinks; split it"
            ),
            Problem::Shrank { key, listed, count, line } => write!(
                f,
                "exceptions.txt line {line}: {key} shrank from {listed} to {count} lines: lower the count to {count}"
            ),
            Problem::Unneeded { key, line } => write!(
                f,
                "exceptions.txt line {line}: {key} is no longer over the limits (or is gone): delete this line"
            ),
        }
    }
}

/// Compares what is over the limits with the exception list.
pub fn check(over: &Over, listed: &BTreeMap<String, (usize, usize)>) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (key, &count) in &over.items {
        match listed.get(key) {
            None => problems.push(Problem::New {
                key: key.clone(),
                count,
            }),
            Some(&(l, line)) if count > l => problems.push(Problem::Grew {
                key: key.clone(),
                listed: l,
                count,
                line,
            }),
            Some(&(l, line)) if count < l => problems.push(Problem::Shrank {
                key: key.clone(),
                listed: l,
                count,
                line,
            }),
            Some(_) => {}
        }
    }
    for (key, &(_, line)) in listed {
        if !over.items.contains_key(key) {
            problems.push(Problem::Unneeded {
                key: key.clone(),
                line,
            });
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn over(items: &[(&str, usize)]) -> Over {
        Over {
            items: items.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
            cycle_edges: BTreeMap::new(),
        }
    }

    #[test]
    fn the_list_only_shrinks() {
        let listed = parse_exceptions(
            "# comment\nfn a.rs::f 80\nfn a.rs::<S as T>::g 90\nfile b.rs 900\nfn c.rs::h 75\ncycle r.rs x y\n",
        )
        .unwrap();
        let now = over(&[
            ("fn a.rs::f", 81),
            ("fn a.rs::<S as T>::g", 85),
            ("file b.rs", 900),
            ("fn d.rs::new", 71),
            ("cycle r.rs x y", 0),
        ]);
        let problems = check(&now, &listed);
        assert_eq!(
            problems,
            vec![
                Problem::Shrank {
                    key: "fn a.rs::<S as T>::g".into(),
                    listed: 90,
                    count: 85,
                    line: 3
                },
                Problem::Grew {
                    key: "fn a.rs::f".into(),
                    listed: 80,
                    count: 81,
                    line: 2
                },
                Problem::New {
                    key: "fn d.rs::new".into(),
                    count: 71
                },
                Problem::Unneeded {
                    key: "fn c.rs::h".into(),
                    line: 5
                },
            ]
        );
    }

    #[test]
    fn a_malformed_or_repeated_line_is_refused() {
        assert!(parse_exceptions("fn a.rs::f eighty\n").is_err());
        assert!(parse_exceptions("function a.rs::f 80\n").is_err());
        assert!(parse_exceptions("fn a.rs::f 80\nfn a.rs::f 80\n").is_err());
    }
}
