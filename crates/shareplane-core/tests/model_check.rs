//! The CI-sized model-checking run (see tests/model/mod.rs; a bigger run is
//! `cargo run --release -p shareplane-core --example model_check -- DEPTH FAULTS`).

mod model;

fn check(s: &model::Settings) -> model::Report {
    let r = model::explore(s);
    println!(
        "model check: {} Regions, depth {} faults<={}: {} states, {} transitions, {} recoveries checked ({} in a residual class after a false verdict, {} with grants stranded between ended epochs), {} states after a false verdict",
        s.n, r.depth_reached, s.max_faults, r.states, r.transitions, r.recoveries_checked,
        r.false_verdict_recovery_failures, r.stranded_recoveries, r.false_verdict_states
    );
    assert!(
        r.violations.is_empty(),
        "{} violations, first:\n{}",
        r.violations.len(),
        r.violations.join("\n")
    );
    assert!(r.states > 1_000, "the explorer explored almost nothing");
    // Residual classes are documented bounds, not a licence: they must stay a small minority.
    assert!(
        (r.false_verdict_recovery_failures + r.stranded_recoveries) * 20 <= r.recoveries_checked,
        "residual recoveries are more than 5% of those checked"
    );
    r
}

/// The depth of a run: `var` (tests/run-all.sh sets the CI depths on a release build), or
/// `quick` for a plain `cargo test` on a debug build.
fn depth(var: &str, quick: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(quick)
}

#[test]
fn every_interleaving_to_the_ci_depth_is_safe_and_recovers() {
    check(&model::Settings::small(
        depth("SHAREPLANE_MODEL_DEPTH_3", 5),
        2,
    ));
}

/// Four Regions and three faults: the class of the restore race (a Region restored while a second
/// one is lost and reclaimed) needs both.
#[test]
fn four_regions_three_faults() {
    check(&model::Settings::four(
        depth("SHAREPLANE_MODEL_DEPTH_4", 4),
        3,
    ));
}
