//! The configuration the scale benchmarks run on: Regions `A`, `B`, … and many capacity limits
//! `partner-0`, `partner-1`, …, and the demand they feed them. One file for `benches/scale.rs`,
//! `examples/bench_memory.rs` and `examples/bench_templates.rs`, each of which includes it with
//! `#[path = …] mod many_limits;` (a bench and an example cannot import one another).

use std::fmt::Write as _;

/// Region names, in order; a configuration names the first [`ManyLimits::regions`].
pub const NAMES: [&str; 8] = ["A", "B", "C", "D", "E", "F", "G", "H"];

/// What [`config_text`] writes.
pub struct ManyLimits {
    /// The Region whose file it is.
    pub region: &'static str,
    /// How many Regions, named by the first of [`NAMES`] (2 to 8).
    pub regions: usize,
    pub period_ms: u64,
    /// How many limits.
    pub limits: usize,
    /// Every limit at this rate (requests/s) with the default floor; `None`: 1,000 to 10,600
    /// requests/s by limit (`1,000 + (i mod 97) × 100`), floor 10.
    pub flat_rps: Option<u64>,
    /// Every limit states its version (`version = 1`); otherwise only a lowered one does.
    pub state_versions: bool,
    /// This limit's rate lowered by 20%, at version 2: the file of a change of one limit.
    pub lowered: Option<usize>,
}

/// A Region's configuration file: the memory store, an API token, `c.regions` Regions and
/// `c.limits` capacity limits (step cap and burst by default: 10% of the rate, 2 s).
pub fn config_text(c: &ManyLimits) -> String {
    let mut t = format!(
        "region = \"{}\"\nstore = \"memory\"\nperiod_ms = {}\napi_token = \"bench-token-0123456789\"\n",
        c.region, c.period_ms
    );
    for name in &NAMES[..c.regions] {
        let _ = write!(t, "[[regions]]\nname = \"{name}\"\n");
    }
    for i in 0..c.limits {
        let (rate, floor) = match c.flat_rps {
            Some(rps) => (rps as f64, ""),
            None => ((1_000 + (i as u64 % 97) * 100) as f64, "floor = 10\n"),
        };
        let (rate, version) = match c.lowered {
            Some(l) if l == i => (rate * 0.8, Some(2)),
            _ => (rate, c.state_versions.then_some(1)),
        };
        let _ = write!(
            t,
            "[[limits]]\nid = \"partner-{i}\"\nrate = {rate}\n{floor}"
        );
        if let Some(v) = version {
            let _ = writeln!(t, "version = {v}");
        }
    }
    t
}

/// Demand in requests/s of limit `li` at Region `r`: differs per Region and limit, so that
/// shares move and grants flow before they settle; 1 limit in 50 has none; constant in time.
pub fn demand(r: usize, li: usize) -> u64 {
    ((li * 7 + r * 13) % 50) as u64 * 40
}
