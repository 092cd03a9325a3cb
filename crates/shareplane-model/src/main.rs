//! `shareplane-model [DEPTH] [FAULTS] [RUN]`: a bigger model-checking run than CI's (which the
//! core's `tests/model_check.rs` runs through this crate's library), where RUN is 3 or 4
//! (Regions), `race` (the restore race from B lost and closed by both survivors: depth 7 and 3
//! faults reach it), `race-c-lost` (the same from C lost, as CI's run) or `stale-close-all` (an
//! heir lost with a stale close, every Region losable: the open class of docs/PROTOCOL.md risk 4);
//! the race runs fail unless they reach the race (`model::restore_race_witness`).

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use shareplane_model as model;

fn main() {
    let mut args = std::env::args().skip(1);
    let depth = args.next().and_then(|a| a.parse().ok()).unwrap_or(9);
    let faults = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let run = args.next().unwrap_or_else(|| "3".into());
    let s = match run.as_str() {
        "4" => model::Settings::four(depth, faults),
        "race" => model::Settings::restore_race(depth, faults),
        "race-c-lost" => model::Settings::restore_race_c_lost(depth, faults),
        "stale-close-all" => model::Settings::stale_close_all(depth, faults),
        _ => model::Settings::small(depth, faults),
    };
    let t = std::time::Instant::now();
    let r = model::explore(&s);
    println!(
        "{} Regions, depth {} faults<={}: {} states, {} transitions, {} recoveries checked, {} states after a false verdict, {:.1} s",
        s.n,
        r.depth_reached,
        faults,
        r.states,
        r.transitions,
        r.recoveries_checked,
        r.false_verdict_states,
        t.elapsed().as_secs_f64()
    );
    println!(
        "recoveries in the residual class (after a false verdict): {}",
        r.false_verdict_recovery_failures
    );
    for v in r.false_verdict_examples.iter().take(2) {
        println!("  e.g. {v}");
    }
    if s.witness.is_some() {
        println!(
            "witness states: {} ({} conserving exactly), first after the prefix: {}",
            r.witness_states,
            r.witness_exact,
            r.witness_example.as_deref().unwrap_or("none")
        );
    }
    for v in r.violations.iter().take(5) {
        println!("VIOLATION: {v}");
    }
    if !r.violations.is_empty() || (s.witness.is_some() && r.witness_states == 0) {
        std::process::exit(1);
    }
}
