//! Every checker judges through this crate and keeps no verdict of its own: each calls `judge`
//! and `judge_end`, and none reads the audit's excess terms or writes the failures the judge owns.
//! (A check of where the verdicts live, by the checkers' sources; what they decide is checked by
//! the judge's own cases and by the runs themselves.)

use std::path::{Path, PathBuf};

/// The checkers, relative to the workspace.
const CHECKERS: &[&str] = &[
    "crates/shareplane-sim/src/judging.rs",
    "crates/shareplane-model/src/check.rs",
    "tests/e2e/src/checker.rs",
];

/// What only the judge may do: read the audit's terms of room counted twice, compare them, or
/// state a broken conservation or shares above the limit.
const JUDGES_ONLY: &[&str] = &[
    ".over_stale +",
    ".over ==",
    "== c.over_stale",
    ".over_running",
    ".running_reclaimed",
    "STALE_BOUND",
    "conservation does not hold",
    "conservation broken",
    "exceeds the limit {",
    "summed to",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn every_checker_judges_through_the_one_judge() {
    let mut findings = Vec::new();
    for rel in CHECKERS {
        let path = workspace().join(rel);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for call in ["judge(", "judge_end(", "Allowances {"] {
            if !text.contains(call) {
                findings.push(format!("{rel} does not call `{call}`"));
            }
        }
        for (k, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for pattern in JUDGES_ONLY {
                if code.contains(pattern) {
                    findings.push(format!("{rel}:{}: `{pattern}`: {}", k + 1, line.trim()));
                }
            }
        }
    }
    assert!(findings.is_empty(), "{}", findings.join("\n"));
}

/// The scan itself finds what it looks for (a pattern of the judge's own source).
#[test]
fn the_scan_finds_the_judges_own_comparisons() {
    let own = workspace().join("crates/shareplane-judge/src/instant.rs");
    let text = std::fs::read_to_string(&own).unwrap_or_else(|e| panic!("{e}"));
    assert!(text.contains(".over_running") && text.contains(".running_reclaimed"));
}
