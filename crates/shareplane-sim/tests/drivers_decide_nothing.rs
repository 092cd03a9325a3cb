//! The drivers (the simulator, the daemon, the gateway, the limiter) never re-derive a protocol
//! decision: every record they hold came out of the core (`Coordinator::rebalance`,
//! `RegionRecord::genesis`, `RegionRecord::settled`) or out of the store's decoder. So no driver
//! writes a field of a record that carries room or accounts for it, and none builds a record
//! literal. A driver that does fails here, with the file and the line.
//!
//! This reads the drivers' sources: it is a check of where the arithmetic lives, not of what it
//! computes (the fuzzer, the model checker and the audits check that).

use std::path::{Path, PathBuf};

/// Fields of `LimitRecord` and `RegionRecord` that carry room, or the accounts and marks that
/// say whose it is. (`rate`, `demand`, `epoch`, `version` and the digest are left out: drivers
/// have fields of their own with those names, and the digest is the daemon's annotation.)
const DECIDED_FIELDS: &[&str] = &[
    "share",
    "pool",
    "target",
    "unmet",
    "debt",
    "granted",
    "taken",
    "reclaimed",
    "debt_taken",
    "reclaims",
    "peer_epochs",
    "account_epochs",
    "prev_final",
];

const RECORD_LITERALS: &[&str] = &["LimitRecord {", "RegionRecord {", "ReclaimMark {"];

/// The driver sources, relative to the workspace.
const DRIVERS: &[&str] = &[
    "crates/shareplane-sim/src",
    "crates/shareplane/src",
    "crates/shareplane-gateway/src",
    "crates/shareplane-limiter/src",
];

/// Where `line` writes a decided field or builds a record, if it does.
fn finding(line: &str) -> Option<String> {
    let code = line.split("//").next().unwrap_or("");
    for lit in RECORD_LITERALS {
        if code.contains(lit) && !code.contains("struct ") {
            return Some(format!("builds a `{lit} .. }}` literal"));
        }
    }
    for field in DECIDED_FIELDS {
        let dotted = format!(".{field}");
        let mut rest = code;
        while let Some(at) = rest.find(&dotted) {
            let after = &rest[at + dotted.len()..];
            rest = after;
            // `.share` but not `.shares` or `.share_after`.
            if after.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue;
            }
            // An indexed field: look past the index.
            let after = match after.strip_prefix('[') {
                Some(inner) => match inner.find(']') {
                    Some(end) => &inner[end + 1..],
                    None => continue,
                },
                None => after,
            };
            let after = after.trim_start();
            let assigns = ["+=", "-=", "*=", "/="]
                .iter()
                .any(|op| after.starts_with(op))
                || (after.starts_with('=') && !after.starts_with("=="));
            if assigns {
                return Some(format!("writes `.{field}`"));
            }
        }
    }
    None
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        panic!("cannot read {}", dir.display());
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_driver_writes_a_decided_field_or_builds_a_record() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for d in DRIVERS {
        sources(&root.join(d), &mut files);
    }
    assert!(
        files.len() > 20,
        "found only {} driver sources",
        files.len()
    );
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        // Unit tests may build what they feed the code under test.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (i, line) in code.lines().enumerate() {
            if let Some(what) = finding(line) {
                let rel = f.strip_prefix(&root).unwrap_or(f);
                found.push(format!(
                    "{}:{}: {what}: {}",
                    rel.display(),
                    i + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "drivers must leave protocol decisions to the core (shareplane-core):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_a_write_and_a_literal_and_lets_reads_by() {
    assert!(finding("        l.share = share;").is_some());
    assert!(finding("    e.granted[j] += amount;").is_some());
    assert!(finding("    rec.reclaims[r] = Some(m);").is_some());
    assert!(finding("    let l = LimitRecord { share, ..Default::default() };").is_some());
    assert!(finding("    if l.share == target {").is_none());
    assert!(finding("    let s = l.share + l.pool;").is_none());
    assert!(finding("    row.shares = x;").is_none());
    assert!(finding("    out.share_after = e.share;").is_none());
    assert!(finding("    // l.share = 0 would be wrong").is_none());
}
