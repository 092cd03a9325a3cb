//! The drivers (the simulator, the daemon, the gateway, the limiter) never re-derive a protocol
//! decision: every record they hold came out of the core (`Coordinator::rebalance`,
//! `RegionRecord::genesis`, `RegionRecord::settled`) or out of the store's decoder.
//!
//! The compiler keeps them from changing a record: its fields are private to the core, read
//! through methods named like them, and the only write a driver has is the daemon's annotation
//! (`RegionRecord::stamp_limits_digest`). What it cannot keep is a driver building a record of its
//! own through the door meant for storage (`RegionRecord::from_parts`, the codec's and the
//! stores'). A driver that names that door fails here, with the file and the line; a path spelled
//! another way (an alias) escapes this check.

use std::path::{Path, PathBuf};

/// The names of the door through which a record is built from plain data.
const DOOR: &[&str] = &[
    "RegionRecord::from_parts",
    "RegionRecordParts",
    "LimitRecordParts",
    "ReclaimMarkParts",
];

/// The driver sources, relative to the workspace.
const DRIVERS: &[&str] = &[
    "crates/shareplane-sim/src",
    "crates/shareplane/src",
    "crates/shareplane-gateway/src",
    "crates/shareplane-limiter/src",
];

/// Where `line` builds a record through the codec's door, if it does.
fn finding(line: &str) -> Option<String> {
    let code = line.split("//").next().unwrap_or("");
    let name = DOOR.iter().find(|name| code.contains(*name))?;
    Some(format!("names `{name}`"))
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
fn no_driver_builds_a_record_through_the_codecs_door() {
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
        "drivers must leave records to the core (shareplane-core) and the stores:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_the_door_and_lets_reads_by() {
    assert!(finding("    let r = RegionRecord::from_parts(p);").is_some());
    assert!(finding("    let mut p = RegionRecordParts { region, ..p };").is_some());
    assert!(finding("        l = LimitRecordParts::default();").is_some());
    assert!(finding("    let s = l.share() + l.pool();").is_none());
    assert!(finding("    let p = rec.to_parts();").is_none());
    assert!(finding("    let resp = Response::from_parts(head, body);").is_none());
    assert!(finding("    // RegionRecord::from_parts would be wrong here").is_none());
}
