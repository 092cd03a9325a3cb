//! Input a run cannot carry out is refused as invalid (exit 2), naming the field, before the
//! run allocates anything: a `kill_daemon` in a deployment whose gateways can hold no lease, a
//! run that would pass the memory budget, a fuzz range that is empty or passes the largest seed.
//! `crates/shareplane/tests/cli.rs` checks the same through the real binary's stderr.

use shareplane_sim::runnable::MEMORY_BUDGET_BYTES;
use shareplane_sim::scenario::{Problem, Scenario, ScenarioError};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

fn g1() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../simulations/scenarios/g1-grants-staggered.toml");
    std::fs::read_to_string(path).expect("G1 scenario")
}

fn problems(text: &str) -> Vec<Problem> {
    match Scenario::parse(text) {
        Ok(_) => panic!("accepted a scenario that cannot run"),
        Err(ScenarioError::Invalid(p)) => p,
        Err(e) => panic!("refused for another reason: {e}"),
    }
}

fn code(args: &[&str]) -> String {
    let args = args.iter().map(OsString::from).collect();
    format!("{:?}", shareplane_sim::cli::main(args))
}

fn two() -> String {
    format!("{:?}", ExitCode::from(2))
}

/// A G1 file with B's daemon killed at 10 s and `silent_after` set to `s`.
fn with_kill(silent_after: u32) -> String {
    let text = g1().replace(
        "silent_after = 3",
        &format!("silent_after = {silent_after}"),
    ) + "\n[[event]]\nat_s = 10.0\nkill_daemon = \"B\"\n";
    assert!(text.contains(&format!("silent_after = {silent_after}")));
    text
}

#[test]
fn a_kill_daemon_without_a_lease_is_refused_naming_the_field() {
    Scenario::parse(&with_kill(3)).expect("with silent_after = 3 the gateways hold a lease");
    let text = with_kill(1);
    let p = problems(&text);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].field, "kill_daemon");
    let action = text
        .lines()
        .position(|l| l.starts_with("kill_daemon"))
        .expect("event")
        + 1;
    let line = p[0].line.expect("the event's line");
    assert!(
        (action - 2..=action).contains(&line),
        "line {line}, action at {action}"
    );
    assert!(
        p[0].problem.contains("lease") && p[0].problem.contains("silent_after"),
        "{p:?}"
    );
}

#[test]
fn a_run_past_the_memory_budget_is_refused_naming_the_field() {
    // 10 ms ticks: a window of 10^7 s is 10^9 slots a Region, 24 GB for three.
    let text = g1().replace("demand_window_s = 5.0", "demand_window_s = 10000000.0");
    let p = problems(&text);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].field, "sync.demand_window_s");
    let budget = format!("memory budget of {} MiB", MEMORY_BUDGET_BYTES >> 20);
    assert!(p[0].problem.contains(&budget), "{p:?}");
    // A window within the budget runs as before.
    let text = g1().replace("demand_window_s = 5.0", "demand_window_s = 1000.0");
    Scenario::parse(&text).expect("a window of 100,000 slots a Region");
    // 1 ms ticks and a 1 ms period over 5,000 s: 5,000,000 records a Region.
    let text = g1()
        .replace("tick_ms = 10", "tick_ms = 1")
        .replace("end_s = 40.0", "end_s = 4970.0")
        .replace("period_s = 5.0", "period_s = 0.001")
        .replace("demand_window_s = 5.0", "demand_window_s = 0.001");
    let p = problems(&text);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].field, "sync.period_s");
    assert!(p[0].problem.contains(&budget), "{p:?}");
}

#[test]
fn bad_input_exits_2() {
    let dir = std::env::temp_dir().join(format!("shareplane-bad-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let kill = dir.join("kill.toml");
    std::fs::write(&kill, with_kill(1)).expect("write");
    let window = dir.join("window.toml");
    let huge = g1().replace("demand_window_s = 5.0", "demand_window_s = 10000000.0");
    std::fs::write(&window, huge).expect("write");
    for file in [&kill, &window] {
        let path = file.to_str().expect("path");
        assert_eq!(code(&[path]), two(), "{path}");
        assert_eq!(code(&["sweep", path, "--offsets", "0,1"]), two(), "{path}");
    }
    let max = u64::MAX.to_string();
    let near = (u64::MAX - 1).to_string();
    assert_eq!(code(&["fuzz", "--seeds", "2", "--start", &max]), two());
    assert_eq!(code(&["fuzz", "--seeds", "3", "--start", &near]), two());
    assert_eq!(code(&["fuzz", "--seeds", "0"]), two());
    assert_eq!(code(&["fuzz", "--seeds", "1", "--family", "nope"]), two());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_range_ending_at_the_largest_seed_runs_it() {
    use shareplane_sim::swarm::{check_range, run, Family};
    assert!(check_range(u64::MAX, 1).is_ok());
    assert!(check_range(u64::MAX - 1, 2).is_ok());
    assert!(check_range(u64::MAX - 1, 3).is_err());
    assert!(check_range(5, 0).is_err());
    let (totals, failed) = run(Family::Cascade, u64::MAX - 1, 2, 2);
    assert_eq!(totals.passed + failed.len() as u64, 2, "both seeds ran");
}
