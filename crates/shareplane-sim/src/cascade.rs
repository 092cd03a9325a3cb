//! The cascade family of fuzz scenarios (`shareplane sim fuzz --family cascade`): the shape of
//! issue 31's example, with its timings and sizes drawn from the seed.
//!
//! Roles, assigned to Regions at random: **A** a survivor that B's records stop reaching, **B**
//! a Region that grants its room on, **C** the heir that takes it, and in one seed of four a
//! bystander **D** (cut off from B like A in half of those seeds). The schedule:
//!
//! 1. a one-way cut: B's records stop reaching A (and D, when it is cut off too);
//! 2. around it, demand moves from B to C, so that B grants to C and C takes;
//! 3. a few periods later B and C are both lost, within seconds of each other, in either order,
//!    and each is reported unhealthy soon after (true verdicts);
//! 4. B comes back (healthy, restored) while the cut still holds, with new demand for A and B
//!    (in one seed of seven B stays lost until the heal);
//! 5. the cut heals; C comes back after it (in one seed of five while the cut still holds).
//!
//! Every verdict is true and every fault ends by the last event, so the fuzzer's checks judge
//! these seeds exactly as they judge the classic ones.

use crate::judging::liveness_bound;
use crate::rng::Rng;
use crate::scenario::{Action, Event, RegionSpec, Scenario};
use shareplane_core::{Design, Fence, Room, SilentPolicy};

/// The tick of generated scenarios (as the classic fuzzer's).
pub(crate) const TICK_MS: u64 = 100;

pub(crate) fn secs(s: u64) -> i64 {
    (s * 1000 / TICK_MS) as i64
}

/// The events of one schedule, in the order drawn; [`Scenario`] wants them sorted by tick, with
/// the events of one tick in the order they were pushed.
#[derive(Default)]
pub(crate) struct Schedule(pub Vec<Event>);

impl Schedule {
    pub fn at(&mut self, at_tick: i64, action: Action) {
        self.0.push(Event {
            at_tick,
            action,
            line: 0,
        });
    }

    pub fn into_sorted(mut self) -> Vec<Event> {
        self.0.sort_by_key(|e| e.at_tick);
        self.0
    }
}

/// A percentage of a rate, in exact room.
pub(crate) fn part(rate: Room, lo: u64, hi: u64, g: &mut Rng) -> Room {
    Room::from_milli(rate.milli() / 100 * g.range(lo, hi))
}

/// The scenario of one cascade seed.
pub fn generate(seed: u64) -> Scenario {
    // B holds much of the limit before the cut, so that it has much to grant on.
    let family = RoleFamily {
        name: "cascade",
        salt: 0x6361_7363_6164_6531,
        roles: ["A", "B", "C", "D"],
        demand_percent: [(10, 50), (40, 90), (0, 15), (0, 25)],
    };
    family.generate(seed, schedule)
}

/// A family whose seeds put three or four roles on random Regions (the fourth, a bystander, in
/// one seed of four) and draw their settings alike: what the cascade and stale-close families
/// share. The draws are made in one order, so that a seed names the same scenario as before.
pub(crate) struct RoleFamily {
    pub name: &'static str,
    /// Mixed into the seed, so that the families draw apart.
    pub salt: u64,
    pub roles: [&'static str; 4],
    /// Each role's demand before the faults, a percentage range of the limit.
    pub demand_percent: [(u64, u64); 4],
}

impl RoleFamily {
    /// The scenario of `seed`: the roles, the settings, and the events `schedule` draws for
    /// them (`role[k]` is the Region index of role `k`).
    pub fn generate(
        &self,
        seed: u64,
        schedule: fn(&mut Rng, &Scenario, &[usize]) -> Schedule,
    ) -> Scenario {
        let mut g = Rng::new(seed ^ self.salt);
        let n = if g.chance(25) { 4 } else { 3 };
        let mut role: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            role.swap(i, g.range(0, i as u64) as usize);
        }
        let limit = Room::rps(g.range(1_000, 100_000));
        let period_ticks = g.range(20, 100);
        let vis = g.range(1, 30);
        let mut demand = vec![Room::ZERO; n];
        for (k, &(lo, hi)) in self.demand_percent.iter().enumerate().take(n) {
            demand[role[k]] = part(limit, lo, hi, &mut g);
        }
        let regions = (0..n)
            .map(|i| RegionSpec {
                name: self.roles[role.iter().position(|&r| r == i).unwrap_or(0)].into(),
                offset_tick: g.range(0, period_ticks - 1) as i64,
                demand: demand[i],
                visibility_ticks: if g.chance(20) { g.range(1, 50) } else { vis },
            })
            .collect();
        let mut sc = Scenario {
            name: format!("{} seed {seed}", self.name),
            tick_ms: TICK_MS,
            start_tick: -secs(30),
            end_tick: 0,
            design: Design::NamedGrants,
            policy: SilentPolicy::TwoSignals,
            fence: if g.chance(80) {
                Fence::OwnUnhealthy
            } else {
                Fence::Never
            },
            seed: Some(seed),
            limit,
            burst_ms: 1000 * g.range(1, 2),
            floor: Room::from_milli(limit.milli() / n as u64 * g.range(0, 20) / 100),
            step_cap: part(limit, 5, 50, &mut g),
            period_ticks,
            window_ticks: g.range(10, 100),
            silent_after: g.range(2, 4) as u32,
            regions,
            events: Vec::new(),
            plot_from_tick: 0,
            plot_to_tick: 0,
        };
        sc.events = schedule(&mut g, &sc, &role).into_sorted();
        let faults_end = sc.events.iter().map(|e| e.at_tick).max().unwrap_or(0);
        sc.end_tick = faults_end + liveness_bound(&sc) + secs(20);
        sc.plot_from_tick = sc.start_tick;
        sc.plot_to_tick = sc.end_tick;
        sc
    }
}

/// Steps 1 to 5 of the module documentation.
fn schedule(g: &mut Rng, sc: &Scenario, role: &[usize]) -> Schedule {
    let (a, b, c) = (role[0], role[1], role[2]);
    let period = sc.period_ticks as i64;
    let limit = sc.limit;
    let mut s = Schedule::default();
    let cut = secs(g.range(5, 40));
    let mut to = 1u8 << a;
    if let Some(&d) = role.get(3) {
        if g.chance(50) {
            to |= 1 << d;
        }
    }
    s.at(cut, Action::OneWayCut(1 << b, to));
    // Demand moves from B to C from up to a period before the cut to two periods after it.
    let shift = (cut + g.range(0, 3 * period as u64) as i64 - period).max(0);
    let (low, high) = (part(limit, 0, 10, g), part(limit, 50, 100, g));
    s.at(shift, demand([(b, low), (c, high)]));
    // Both lost within seconds, a few periods after C began to take.
    let first = shift.max(cut) + period * g.range(3, 12) as i64;
    let gap = secs(g.range(0, 5));
    let (lose_b, lose_c) = if g.chance(50) {
        (first, first + gap)
    } else {
        (first + gap, first)
    };
    let verdict_b = lose_b + secs(g.range(0, 30));
    let verdict_c = lose_c + secs(g.range(0, 30));
    for (at, action) in [
        (lose_b, Action::Lose(b)),
        (verdict_b, Action::Unhealthy(b)),
        (lose_c, Action::Lose(c)),
        (verdict_c, Action::Unhealthy(c)),
    ] {
        s.at(at, action);
    }
    // B back under the cut (its verdict well read before it clears), then the heal, then C.
    let back_b = verdict_b.max(verdict_c) + secs(g.range(10, 90));
    let heal = back_b + secs(g.range(10, 180));
    let b_under_cut = g.chance(86);
    let at_b = if b_under_cut { back_b } else { heal };
    s.at(at_b, Action::Healthy(b));
    s.at(at_b, Action::Restore(b));
    let (da, db) = (part(limit, 50, 100, g), part(limit, 40, 100, g));
    s.at(at_b, demand([(a, da), (b, db)]));
    s.at(heal, Action::Heal);
    let at_c = if g.chance(20) {
        back_b + g.range(0, (heal - back_b) as u64) as i64
    } else {
        heal + secs(g.range(0, 30))
    };
    s.at(at_c, Action::Healthy(c));
    s.at(at_c, Action::Restore(c));
    s
}

/// New demands for two Regions, in Region order (as a scenario file's table gives them).
pub(crate) fn demand(rates: [(usize, Room); 2]) -> Action {
    let mut v = rates.to_vec();
    v.sort_by_key(|&(r, _)| r);
    Action::Demand(v)
}
