//! What crates may depend on and name, for the invariants ARCHITECTURE.md states as absences:
//! - the core depends on nothing outside `std`, and names no clock, socket, file, thread,
//!   process, environment, tokio or random source (its `now` is an argument);
//! - the core names floating point only in `room.rs`, where rates in requests per second become
//!   exact `Room` and back (room itself is an integer);
//! - no crate under `crates/` but `shareplane-aws` depends on the AWS SDK (`aws-*`).
//!
//! Names are read from paths and `use` trees outside `#[cfg(test)]` items; a path spelled inside
//! a macro call is not seen (the clippy clock ban covers clocks there too).

use std::fs;
use std::path::Path;

use crate::tree::Source;

/// What the core's sources may not name: `(prefix, why)`.
const CORE_FORBIDDEN: &[(&str, &str)] = &[
    ("std::time::Instant", "a clock"),
    ("std::time::SystemTime", "a clock"),
    ("std::net", "a socket"),
    ("std::fs", "a file"),
    ("std::thread", "a thread"),
    ("std::process", "a process"),
    ("std::env", "the environment"),
    ("tokio", "tokio"),
    ("rand", "a random source"),
];

const CORE_SRC: &str = "crates/shareplane-core/src";
/// The one core file that converts between rates (floating point) and `Room` (integer).
const CORE_FLOAT_FILE: &str = "crates/shareplane-core/src/room.rs";

/// Every breach, as a sentence naming the file and what it names.
pub fn breaches(root: &Path, sources: &[Source]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for s in sources.iter().filter(|s| s.src_dir == CORE_SRC) {
        for name in &s.measure.names {
            let named = |p: &str| name == p || name.starts_with(&format!("{p}::"));
            if let Some((p, why)) = CORE_FORBIDDEN.iter().find(|(p, _)| named(p)) {
                out.push(format!(
                    "{}: the core names {why} ({name}; prefix {p})",
                    s.rel
                ));
            }
            let float = ["f64", "f32", "float literal"].iter().any(|p| named(p));
            if float && s.rel != CORE_FLOAT_FILE {
                out.push(format!(
                    "{}: the core uses floating point ({name}) outside {CORE_FLOAT_FILE}",
                    s.rel
                ));
            }
        }
    }
    let core = root.join("crates/shareplane-core/Cargo.toml");
    for dep in section_keys(&read(&core)?, "dependencies") {
        out.push(format!(
            "crates/shareplane-core/Cargo.toml: the core depends on {dep}"
        ));
    }
    for entry in fs::read_dir(root.join("crates")).map_err(|e| format!("crates/: {e}"))? {
        let dir = entry.map_err(|e| format!("crates/: {e}"))?.path();
        let name = dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let manifest = dir.join("Cargo.toml");
        if name == "shareplane-aws" || !manifest.is_file() {
            continue;
        }
        let text = read(&manifest)?;
        for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
            for dep in section_keys(&text, section).filter(|d| d.starts_with("aws-")) {
                out.push(format!(
                    "crates/{name}/Cargo.toml: depends on the AWS SDK ({dep})"
                ));
            }
        }
    }
    Ok(out)
}

fn read(path: &Path) -> Result<String, String> {
    fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The keys of one `[section]` of a manifest (`name`, `name.workspace`, `name = …` → `name`).
fn section_keys<'a>(text: &'a str, section: &'a str) -> impl Iterator<Item = String> + 'a {
    let header = format!("[{section}]");
    let mut inside = false;
    text.lines().filter_map(move |line| {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == header;
            return None;
        }
        if !inside || line.is_empty() || line.starts_with('#') {
            return None;
        }
        let key = line.split(['=', '.', ' ']).next().unwrap_or_default();
        Some(key.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::section_keys;

    #[test]
    fn a_sections_keys_are_read_and_other_sections_ignored() {
        let text = "[dependencies]\n# a comment\nsyn = \"2\"\nquote.workspace = true\n\n\
                    [dev-dependencies]\nproptest.workspace = true\n";
        let deps: Vec<_> = section_keys(text, "dependencies").collect();
        assert_eq!(deps, vec!["syn", "quote"]);
        let dev: Vec<_> = section_keys(text, "dev-dependencies").collect();
        assert_eq!(dev, vec!["proptest"]);
    }
}
