//! The CI-sized model-checking run (see tests/model/mod.rs; a bigger run is
//! `cargo run --release -p shareplane-core --example model_check -- DEPTH FAULTS`).

mod model;

#[test]
fn every_interleaving_to_the_ci_depth_is_safe_and_recovers() {
    let s = model::Settings::small(6, 2);
    let r = model::explore(&s);
    println!(
        "model check: depth {} faults<={}: {} states, {} transitions, {} recoveries checked, {} states after a false verdict",
        r.depth_reached, s.max_faults, r.states, r.transitions, r.recoveries_checked, r.false_verdict_states
    );
    assert!(
        r.violations.is_empty(),
        "{} violations, first:\n{}",
        r.violations.len(),
        r.violations.join("\n")
    );
    assert!(r.states > 1_000, "the explorer explored almost nothing");
}
