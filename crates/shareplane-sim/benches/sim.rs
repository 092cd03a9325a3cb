//! Prints how fast the simulator runs (asserts nothing): simulated seconds per wall second for a
//! 3-Region and an 8-Region scenario, and fuzz scenarios per minute.
//!
//! `cargo bench -p shareplane-sim --bench sim`

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use shareplane_sim::scenario::Scenario;
use std::path::PathBuf;
use std::time::Instant;

fn g2() -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../simulations/scenarios/g2-two-signals.toml");
    let text = std::fs::read_to_string(&path).expect("the G2 scenario is in the repository");
    Scenario::parse(&text).expect("the G2 scenario is valid")
}

/// Eight Regions, G2's length and tick, a demand change, a loss with its health verdict, a cut
/// and a heal, a restore.
fn eight() -> Scenario {
    let mut t = String::from(
        "name = \"8 Regions\"\nstart_s = -30.0\nend_s = 420.0\ntick_ms = 10\ndesign = \"named-grants\"\n\
         silent_rule = \"two-signals\"\n[limit]\nrate = 10000.0\nburst_s = 2.0\nfloor = 500.0\nstep_cap = 1000.0\n\
         [sync]\nperiod_s = 5.0\nvisibility_s = 1.0\ndemand_window_s = 5.0\nsilent_after = 3\n",
    );
    for i in 0..8 {
        t.push_str(&format!(
            "[[region]]\nname = \"R{i}\"\noffset_s = {:.1}\ndemand = {}.0\n",
            i as f64 * 0.6,
            1000 + 700 * i
        ));
    }
    t.push_str(
        "[[event]]\nat_s = 0.0\ndemand = { R0 = 6000.0 }\n[[event]]\nat_s = 100.0\nlose = \"R3\"\n\
         [[event]]\nat_s = 130.0\nunhealthy = \"R3\"\n[[event]]\nat_s = 200.0\ncut = [\"R5\", \"R6\"]\n\
         [[event]]\nat_s = 260.0\nheal = true\n[[event]]\nat_s = 300.0\nrestore = \"R3\"\n\
         [[event]]\nat_s = 300.0\nhealthy = \"R3\"\n",
    );
    Scenario::parse(&t).expect("the 8-Region scenario is valid")
}

fn rate(name: &str, sc: &Scenario, runs: u32) {
    let simulated = sc.seconds(sc.end_tick - sc.start_tick) * runs as f64;
    let start = Instant::now();
    for _ in 0..runs {
        let s = shareplane_sim::simulate(sc, &mut |_| {}).expect("runs");
        std::hint::black_box(s);
    }
    let wall = start.elapsed().as_secs_f64();
    println!(
        "{name}: {:.0} simulated s per wall s ({:.3} s wall for one {:.0} s run, {} Regions, {} ms ticks)",
        simulated / wall,
        wall / runs as f64,
        simulated / runs as f64,
        sc.regions.len(),
        sc.tick_ms
    );
}

fn main() {
    rate("3 Regions (G2, two-signals)", &g2(), 10);
    rate("8 Regions", &eight(), 5);
    let seeds = 2000u64;
    let start = Instant::now();
    let mut failed = 0;
    for seed in 1..=seeds {
        if shareplane_sim::fuzz::check(&shareplane_sim::fuzz::generate(seed)).is_err() {
            failed += 1;
        }
    }
    let wall = start.elapsed().as_secs_f64();
    println!(
        "fuzz: {:.0} scenarios per minute ({seeds} seeds in {wall:.2} s; {failed} failed)",
        seeds as f64 / wall * 60.0
    );
}
