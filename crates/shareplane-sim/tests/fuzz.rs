//! The fault fuzzer: regression seeds, a CI-sized run, and checks that the checker can fail.

use shareplane_core::Design;
use shareplane_sim::fuzz;
use shareplane_sim::scenario::Scenario;
use std::path::PathBuf;

/// Seeds (first column) of a list in simulations/.
fn seeds(file: &str) -> Vec<u64> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../simulations")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(|l| l.parse().unwrap_or_else(|e| panic!("{file}: {l:?}: {e}")))
        .collect()
}

#[test]
fn every_regression_seed_passes() {
    let list = seeds("fuzz-regressions.txt");
    assert!(!list.is_empty());
    for seed in list {
        if let Err(f) = fuzz::check(&fuzz::generate(seed)) {
            panic!("seed {seed} failed again: {f}\n  replay: shareplane sim fuzz --seeds 1 --start {seed}");
        }
    }
}

/// A CI-sized run. Only the seeds listed in simulations/fuzz-open-failures.txt (open protocol
/// findings) may fail; any other failure fails the test with its replay command.
#[test]
fn ci_sized_fuzz_run() {
    let open = seeds("fuzz-open-failures.txt");
    let mut totals = fuzz::Totals::default();
    let mut unexpected = Vec::new();
    let mut now_passing = Vec::new();
    for seed in 1..=400u64 {
        match fuzz::check(&fuzz::generate(seed)) {
            Ok(r) => {
                totals.add(seed, &r);
                if open.contains(&seed) {
                    now_passing.push(seed);
                }
            }
            Err(f) if open.contains(&seed) => println!("seed {seed}: open finding: {f}"),
            Err(f) => unexpected.push(format!(
                "seed {seed}: {f} (replay: shareplane sim fuzz --seeds 1 --start {seed})"
            )),
        }
    }
    println!("{}", totals.report(400, 400 - totals.passed));
    if !now_passing.is_empty() {
        println!(
            "open findings that pass now (move them to fuzz-regressions.txt): {now_passing:?}"
        );
    }
    assert!(unexpected.is_empty(), "{}", unexpected.join("\n"));
    assert!(
        totals.with_false_verdict > 0,
        "the generator draws false verdicts"
    );
    assert!(totals.passed > 300);
}

#[test]
fn the_checker_catches_an_overshooting_design() {
    // Jump-to-target overshoots while views disagree: the same checks must reject it.
    let mut caught = 0;
    for seed in 1..=20u64 {
        let mut sc = fuzz::generate(seed);
        sc.design = Design::JumpToTarget;
        if fuzz::check(&sc).is_err() {
            caught += 1;
        }
    }
    assert!(
        caught > 10,
        "only {caught} of 20 jump-to-target runs failed the checks"
    );
}

#[test]
fn seeds_are_deterministic_and_replay_through_a_scenario_file() {
    for seed in [1u64, 2, 77, 1234] {
        let sc = fuzz::generate(seed);
        assert_eq!(sc, fuzz::generate(seed));
        let mut parsed =
            Scenario::parse(&fuzz::to_toml(&sc)).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        for e in parsed.events.iter_mut() {
            e.line = 0;
        }
        parsed.plot_from_tick = sc.plot_from_tick;
        parsed.plot_to_tick = sc.plot_to_tick;
        assert_eq!(
            parsed, sc,
            "seed {seed}: the printed scenario is the generated one"
        );
    }
}
