//! The room arithmetic of step 2: targets that add up to the rate exactly.

use crate::room::{split, Room};

/// Step 2's targets (SPEC §4) of the Regions whose demands are `weights`, into `out` (as long):
/// `floor + (rate − floor × n) × demand_i / Σ demand`, split exactly (largest remainder). A floor
/// that the rate cannot give every Region is lowered to `rate / n`. The coordinator computes each
/// share's target with it, and the simulator its ideal end state.
pub fn targets(rate: Room, floor: Room, weights: &[u64], out: &mut [Room]) {
    let n = weights.len().min(out.len());
    if n == 0 {
        return;
    }
    let floor = if floor.milli().saturating_mul(n as u64) > rate.milli() {
        Room::from_milli(rate.milli() / n as u64)
    } else {
        floor
    };
    let rest = Room::from_milli(rate.milli() - floor.milli() * n as u64);
    split(rest, &weights[..n], &mut out[..n]);
    for t in out[..n].iter_mut() {
        *t += floor;
    }
}
