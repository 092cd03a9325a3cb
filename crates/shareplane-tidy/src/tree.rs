//! The workspace's non-test sources: every `.rs` file under `crates/*/src` and `tests/e2e/src`,
//! except the files that `#[cfg(test)] mod name;` brings in (and the files below them), each
//! with the crate root and module path it is compiled as (from the `mod` declarations, starting
//! at `lib.rs`, `main.rs` and `bin/*.rs`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

use crate::measure::{measure, FileMeasure, ModDecl};

/// One non-test source file.
#[derive(Debug)]
pub struct Source {
    /// Path relative to the workspace, with `/`.
    pub rel: String,
    /// The `src` directory it is under, relative to the workspace.
    pub src_dir: String,
    /// The crate root it is compiled in (relative path) and its module path there; `None` when no
    /// `mod` declaration reaches it.
    pub module: Option<(String, Vec<String>)>,
    pub measure: FileMeasure,
}

/// Reads and measures the sources of the workspace at `root`.
pub fn sources(root: &Path) -> Result<Vec<Source>, String> {
    let mut out = Vec::new();
    for src in src_dirs(root)? {
        out.extend(sources_in(root, &src)?);
    }
    Ok(out)
}

fn src_dirs(root: &Path) -> Result<Vec<PathBuf>, String> {
    let crates = root.join("crates");
    let entries = fs::read_dir(&crates).map_err(|e| format!("{}: {e}", crates.display()))?;
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path().join("src")))
        .filter(|p| p.is_dir())
        .collect();
    dirs.push(root.join("tests/e2e/src"));
    dirs.sort();
    Ok(dirs)
}

fn sources_in(root: &Path, src: &Path) -> Result<Vec<Source>, String> {
    let mut files = BTreeMap::new();
    for path in rs_files(src)? {
        let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let m = measure(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        files.insert(path, m);
    }
    let (modules, test_only) = module_tree(src, &files);
    let rel = |p: &Path| {
        p.strip_prefix(root)
            .unwrap_or(p)
            .to_string_lossy()
            .replace('\\', "/")
    };
    let src_dir = rel(src);
    Ok(files
        .into_iter()
        .filter(|(p, _)| !test_only.iter().any(|t| p.starts_with(t)))
        .map(|(path, measure)| Source {
            rel: rel(&path),
            src_dir: src_dir.clone(),
            module: modules.get(&path).map(|(r, m)| (rel(r), m.clone())),
            measure,
        })
        .collect())
}

fn rs_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    let entries = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        if path.is_dir() {
            out.extend(rs_files(&path)?);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

type Modules = BTreeMap<PathBuf, (PathBuf, Vec<String>)>;

/// Each reachable file's crate root and module path, and the files and directories that only
/// tests compile.
fn module_tree(src: &Path, files: &BTreeMap<PathBuf, FileMeasure>) -> (Modules, BTreeSet<PathBuf>) {
    let mut modules = Modules::new();
    let mut test_only = BTreeSet::new();
    let mut queue: VecDeque<(PathBuf, PathBuf, Vec<String>, bool)> = crate_roots(src)
        .into_iter()
        .map(|r| (r.clone(), r, Vec::new(), true))
        .collect();
    while let Some((file, root, module, mod_rs)) = queue.pop_front() {
        let Some(m) = files.get(&file) else { continue };
        modules.insert(file.clone(), (root.clone(), module.clone()));
        for decl in &m.mods {
            let (child, child_dir) = resolve(&file, mod_rs, decl);
            if decl.test_only {
                test_only.insert(child);
                test_only.insert(child_dir);
                continue;
            }
            let child_mod_rs = decl.path_attr.is_some() || child.ends_with("mod.rs");
            let path = [module.clone(), decl.inline.clone(), vec![decl.name.clone()]].concat();
            queue.push_back((child, root.clone(), path, child_mod_rs));
        }
    }
    (modules, test_only)
}

fn crate_roots(src: &Path) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"].iter().map(|f| src.join(f)).collect();
    if let Ok(entries) = fs::read_dir(src.join("bin")) {
        for e in entries.flatten() {
            let p = e.path();
            roots.push(if p.is_dir() { p.join("main.rs") } else { p });
        }
    }
    roots.retain(|p| p.is_file());
    roots.sort();
    roots
}

/// The file a `mod name;` in `file` loads, and the directory its own submodules live in.
fn resolve(file: &Path, mod_rs: bool, decl: &ModDecl) -> (PathBuf, PathBuf) {
    let dir = file.parent().unwrap_or(Path::new("")).to_path_buf();
    let mut base = if mod_rs {
        dir.clone()
    } else {
        dir.join(file.file_stem().unwrap_or_default())
    };
    base.extend(&decl.inline);
    if let Some(p) = &decl.path_attr {
        let at = if decl.inline.is_empty() {
            dir.join(p)
        } else {
            base.join(p)
        };
        let sub = at.with_extension("");
        return (at, sub);
    }
    let flat = base.join(format!("{}.rs", decl.name));
    let sub = base.join(&decl.name);
    if flat.is_file() {
        (flat, sub)
    } else {
        (sub.join("mod.rs"), sub)
    }
}
