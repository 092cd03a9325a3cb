//! The stale-close family of fuzz scenarios (`shareplane sim fuzz --family stale-close`): the shape
//! of `simulations/scenarios/lost-heir-stale-close.toml` (an heir lost while it holds a stale
//! close, issue 31), with its timings and sizes drawn from the seed.
//!
//! Roles, assigned to Regions at random: **O** a Region that grants its pool on and is lost,
//! **H** an heir of O that is lost after closing it, **G** the heir O grants to, and in one seed of
//! four a bystander heir **D**. The schedule:
//!
//! 1. demand moves from O to G, so that O grants to G;
//! 2. around it, a one-way cut: O's records stop reaching H and G (and D in half of those seeds),
//!    so the heirs close O against a record from before some of its grants; in one seed of three
//!    H's records stop reaching G too, so that H's close may reach G after O's newer records;
//! 3. a few periods later O is lost, and reads unhealthy soon after;
//! 4. once the heirs may have closed O (O silent, its verdict read, one or two exchanges to
//!    agree), or in one seed of five sooner, H is lost, and reads unhealthy soon after;
//! 5. the cut heals, so that O's newer records reach the others; O comes back with new demand,
//!    before or after the heal; H comes back last (in one seed of five before the heal). Each
//!    check clears two periods before its Region comes back, so that no reader still reads it
//!    unhealthy while it runs.
//!
//! Every verdict is true and every fault ends by the last event, so the fuzzer's checks judge
//! these seeds exactly as they judge the classic ones.

use crate::cascade::{demand, part, secs, RoleFamily, Schedule};
use crate::rng::Rng;
use crate::scenario::{Action, Scenario};

/// The scenario of one stale-close seed.
pub fn generate(seed: u64) -> Scenario {
    // O holds much of the limit before the shift, so that it has much to grant on.
    let family = RoleFamily {
        name: "stale-close",
        salt: 0x7374_616c_6563_6c6f,
        roles: ["O", "H", "G", "D"],
        demand_percent: [(40, 90), (10, 50), (0, 15), (0, 25)],
    };
    family.generate(seed, schedule)
}

/// Steps 1 to 5 of the module documentation.
fn schedule(g: &mut Rng, sc: &Scenario, role: &[usize]) -> Schedule {
    let (o, h, gr) = (role[0], role[1], role[2]);
    let period = sc.period_ticks as i64;
    let limit = sc.limit;
    let mut s = Schedule::default();
    let shift = secs(g.range(5, 40));
    s.at(
        shift,
        demand([(o, part(limit, 0, 10, g)), (gr, part(limit, 50, 100, g))]),
    );
    // The cut from up to a period before the shift to three periods after it.
    let cut = (shift + g.range(0, 4 * period as u64) as i64 - period).max(0);
    let mut to = (1u8 << h) | (1 << gr);
    if let Some(&d) = role.get(3) {
        if g.chance(50) {
            to |= 1 << d;
        }
    }
    s.at(cut, Action::OneWayCut(1 << o, to));
    // In one seed of three H's own records stop reaching G too, from before it can close O: its
    // close (and its mark) may then reach G later than O's newer records, or never before the heal.
    if g.chance(33) {
        let hidden = cut + g.range(0, 2 * period as u64) as i64;
        s.at(hidden, Action::OneWayCut(1 << h, 1 << gr));
    }
    let lose_o = shift.max(cut) + period * g.range(1, 6) as i64;
    let verdict_o = lose_o + secs(g.range(0, 30));
    s.at(lose_o, Action::Lose(o));
    s.at(verdict_o, Action::Unhealthy(o));
    // The heirs count O silent `silent_after` rebalances after its last record reached them.
    let closed = (cut + period * i64::from(sc.silent_after)).max(verdict_o) + 2 * period;
    let lose_h = if g.chance(20) {
        lose_o + 1 + g.range(0, (closed - lose_o) as u64) as i64
    } else {
        closed + period * g.range(0, 4) as i64
    };
    let verdict_h = lose_h + secs(g.range(0, 30));
    s.at(lose_h, Action::Lose(h));
    s.at(verdict_h, Action::Unhealthy(h));
    let heal = verdict_h.max(lose_h) + secs(g.range(5, 120));
    s.at(heal, Action::Heal);
    // A check clears a while before its Region comes back: every reader has read past the
    // "unhealthy" by then (a verdict read while the Region runs would be false), so every verdict
    // of a seed is true and its checks are the strictest.
    let clears = 2 * period + secs(5);
    let back_o = if g.chance(50) {
        heal.max(verdict_o + clears) + secs(g.range(0, 60))
    } else {
        verdict_o + clears + secs(g.range(0, 60))
    };
    s.at(back_o - clears, Action::Healthy(o));
    s.at(back_o, Action::Restore(o));
    s.at(
        back_o,
        demand([(o, part(limit, 20, 80, g)), (gr, part(limit, 20, 80, g))]),
    );
    let back_h = if g.chance(20) {
        verdict_h + clears + secs(g.range(0, 30))
    } else {
        heal.max(back_o).max(verdict_h + clears) + secs(g.range(10, 120))
    };
    s.at(back_h - clears, Action::Healthy(h));
    s.at(back_h, Action::Restore(h));
    s
}
