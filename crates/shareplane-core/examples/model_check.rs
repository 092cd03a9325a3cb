//! A bigger model-checking run than CI's: `model_check [DEPTH] [FAULTS] [REGIONS]` (3 or 4).

#[path = "../tests/model/mod.rs"]
mod model;

fn main() {
    let mut args = std::env::args().skip(1);
    let depth = args.next().and_then(|a| a.parse().ok()).unwrap_or(9);
    let faults = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let regions: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let s = if regions == 4 {
        model::Settings::four(depth, faults)
    } else {
        model::Settings::small(depth, faults)
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
    for v in r.violations.iter().take(5) {
        println!("VIOLATION: {v}");
    }
    if !r.violations.is_empty() {
        std::process::exit(1);
    }
}
