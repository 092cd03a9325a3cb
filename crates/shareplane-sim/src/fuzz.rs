//! `shareplane sim fuzz`: random scenarios drawn from a seed, checked at every tick.
//!
//! Each seed gives 2 to 8 Regions with random limits, demands, phases and visibility delays
//! (0.1 s to 10 s, some per Region), then a **fault phase** `[0, F)` with random demand changes,
//! losses and restores, cuts and heals of random groups, health flips (true ones for lost Regions
//! and false "unhealthy" verdicts for live ones) and daemon restarts. At `F` every fault ends:
//! cuts heal, lost Regions come back, every verdict turns healthy. The **liveness phase** follows.
//!
//! Every tick is judged by the one judge (`shareplane_judge::judge`), with the allowances this
//! module states for the scenario (named grants only; jump-to-target is not expected to conserve):
//! - exact conservation, and Σ shares of the Regions not lost ≤ L — from the first false
//!   "unhealthy" verdict for a live Region until `F + bound` these two are measured instead of
//!   required (the residual risk SPEC §6 asks to state: the excess and how long it lasts);
//! - room that heirs which reclaimed from a stale record count twice is measured until `F +
//!   bound`, and may never reach the shares within the protocol's assumptions;
//!
//! and the end of the run by `shareplane_judge::judge_end`:
//! - no core step alarm, no peer record ever refused by a coordinator, no room outside the
//!   running Regions' hands;
//! - liveness: from `F + bound` to the end every share is within 1% of the target that the
//!   final demands give, where `bound = window + (⌈L / step_cap⌉ + 2 × silent_after + 8) ×
//!   (period + the largest visibility delay)`.

use crate::engine::Row;
use crate::scenario::{Action, Event, RegionSpec, Scenario};
use shareplane_core::{Design, Fence, Room, SilentPolicy};
use shareplane_judge::{
    judge, judge_end, Allowances, Assumptions, End, EndAllowances, Excess, FalseVerdict, Instant,
    Limit, Liveness, Measured, Region, RunningReclaimed, Violation,
};
use std::fmt::Write as _;

/// The tick of generated scenarios (coarse, so that a few hundred seeds run quickly).
const TICK_MS: u64 = 100;

/// splitmix64: a small, well-mixed generator; the whole stream follows from the seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5348_4152_4550_4c41)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo + 1)
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.range(1, 100) <= percent
    }
}

/// Where the fault phase ends and the liveness bound, in ticks.
pub struct Phases {
    pub faults_end: i64,
    pub bound: i64,
}

/// The liveness bound stated in the module documentation, in ticks.
pub fn liveness_bound(sc: &Scenario) -> i64 {
    let max_vis = sc
        .regions
        .iter()
        .map(|r| r.visibility_ticks)
        .max()
        .unwrap_or(0) as i64;
    let raises = sc.max_limit().0.div_ceil(sc.step_cap.0.max(1)) as i64;
    sc.window_ticks as i64
        + (raises + 2 * sc.silent_after as i64 + 8) * (sc.period_ticks as i64 + max_vis)
}

fn secs_to_ticks(s: u64) -> i64 {
    (s * 1000 / TICK_MS) as i64
}

/// The scenario of one seed.
pub fn generate(seed: u64) -> Scenario {
    generate_with_phases(seed).0
}

pub fn generate_with_phases(seed: u64) -> (Scenario, Phases) {
    let mut g = Rng::new(seed);
    let n = g.range(2, 8) as usize;
    let limit_rps = g.range(1_000, 100_000);
    let limit = Room::rps(limit_rps);
    let floor = Room(limit.0 / n as u64 * g.range(0, 40) / 100);
    let step_cap = Room(limit.0 * g.range(5, 50) / 100);
    let period_ticks = g.range(20, 100); // 2 s to 10 s
    let vis = g.range(1, 100); // 0.1 s to 10 s
    let mut regions = Vec::with_capacity(n);
    for i in 0..n {
        let demand = if g.chance(10) {
            Room::ZERO
        } else {
            Room::rps(g.range(0, 2 * limit_rps / n as u64 + 1))
        };
        regions.push(RegionSpec {
            name: format!("R{i}"),
            offset_tick: g.range(0, period_ticks - 1) as i64,
            demand,
            visibility_ticks: if g.chance(30) { g.range(1, 100) } else { vis },
        });
    }
    let policy = if g.chance(70) {
        SilentPolicy::TwoSignals
    } else {
        SilentPolicy::Freeze
    };
    let fence = if g.chance(80) {
        Fence::OwnUnhealthy
    } else {
        Fence::Never
    };
    let faults_end = secs_to_ticks(g.range(60, 240));
    let mut sc = Scenario {
        name: format!("fuzz seed {seed}"),
        tick_ms: TICK_MS,
        start_tick: -secs_to_ticks(30),
        end_tick: 0,
        design: Design::NamedGrants,
        policy,
        fence,
        seed: Some(seed),
        limit,
        burst_ms: 1000 * g.range(1, 2),
        floor,
        step_cap,
        period_ticks,
        window_ticks: g.range(10, 100),
        silent_after: g.range(2, 4) as u32,
        regions,
        events: Vec::new(),
        plot_from_tick: 0,
        plot_to_tick: 0,
    };
    sc.events = faults(&mut g, &sc, faults_end);
    // Limit changes come from a stream of their own, so that every older seed still draws the
    // scenario it drew before.
    let mut lc = Rng::new(seed ^ 0x6c69_6d69_742d_7632);
    sc.events.extend(limit_changes(&mut lc, &sc, faults_end));
    sc.events.sort_by_key(|e| e.at_tick);
    let bound = liveness_bound(&sc);
    sc.end_tick = faults_end + bound + secs_to_ticks(20);
    sc.plot_from_tick = sc.start_tick;
    sc.plot_to_tick = sc.end_tick;
    (sc, Phases { faults_end, bound })
}

/// In one seed of four, one or two limit changes during the fault phase: a new rate (half to
/// twice the one before, holding the floor for every Region) that the Regions adopt one by one
/// within about three periods, as a rollout does, each change in a slot of its own and every
/// Region before `end`.
fn limit_changes(g: &mut Rng, sc: &Scenario, end: i64) -> Vec<Event> {
    let mut events = Vec::new();
    if !g.chance(25) {
        return events;
    }
    let n = sc.regions.len();
    let spread = 3 * sc.period_ticks as i64;
    let mut prev = sc.limit.0;
    let floor = sc.floor.0 * n as u64;
    let changes = g.range(1, 2) as i64;
    // Each change rolls out in a slot of its own, so that every Region adopts them in order.
    let slot = end / changes;
    for k in 0..changes {
        let rate = Room(g.range((prev / 2).max(floor).max(1), 2 * prev));
        prev = rate.0;
        let first = k * slot;
        let start = first + g.range(0, (slot - spread - 1).max(1) as u64) as i64;
        for r in 0..n {
            let at_tick = (start + g.range(0, spread as u64) as i64).min(first + slot - 1);
            events.push(Event {
                at_tick,
                action: Action::Limit(rate, 1 << r),
                line: 0,
            });
        }
    }
    events
}

/// A random fault schedule over `[0, end)` that keeps lose/restore/restart in order, then the
/// events at `end` that end every fault.
fn faults(g: &mut Rng, sc: &Scenario, end: i64) -> Vec<Event> {
    let n = sc.regions.len();
    let count = g.range(1, 14);
    let mut times: Vec<i64> = (0..count)
        .map(|_| g.range(0, end as u64 - 1) as i64)
        .collect();
    times.sort_unstable();
    let mut lost = vec![false; n];
    // Health verdicts other than healthy (unhealthy or unknown), to be cleared at the end.
    let mut unhealthy = vec![false; n];
    let mut cut = false;
    let mut events = Vec::new();
    let limit_rps = sc.limit.as_rps() as u64;
    for at_tick in times {
        let r = g.range(0, n as u64 - 1) as usize;
        let action = match g.range(0, 9) {
            0 | 1 => {
                let rate = Room::rps(g.range(0, 2 * limit_rps / n as u64 + 1));
                Action::Demand(vec![(r, rate)])
            }
            2 if !lost[r] && lost.iter().filter(|l| !**l).count() > 1 => {
                lost[r] = true;
                Action::Lose(r)
            }
            3 => {
                let mask = (g.range(1, (1u64 << n) - 2)) as u8;
                cut = true;
                Action::Cut(mask)
            }
            4 if cut => {
                cut = false;
                Action::Heal
            }
            5 | 6 if !unhealthy[r] => {
                unhealthy[r] = true;
                Action::Unhealthy(r)
            }
            7 if unhealthy[r] => {
                unhealthy[r] = false;
                Action::Healthy(r)
            }
            8 if lost[r] => {
                lost[r] = false;
                Action::Restore(r)
            }
            9 if !lost[r] => Action::Restart(r),
            _ => continue,
        };
        events.push(Event {
            at_tick,
            action,
            line: 0,
        });
    }
    // Fault kinds added later come from a stream of their own, so that every older seed still
    // draws the schedule it drew before (the regression list keeps its meaning).
    let mut x = Rng::new(g.next_u64() ^ 0x6f6e_652d_7761_7921);
    let all = ((1u16 << n) - 1) as u8;
    for _ in 0..x.range(0, 3) {
        let at_tick = x.range(0, end as u64 - 1) as i64;
        let r = x.range(0, n as u64 - 1) as usize;
        let action = if x.chance(50) {
            unhealthy[r] = true;
            Action::Unknown(r)
        } else {
            let from = x.range(1, u64::from(all) - 1) as u8;
            let to = all & !from & (x.range(1, u64::from(all)) as u8);
            if to == 0 {
                continue;
            }
            cut = true;
            Action::OneWayCut(from, to)
        };
        events.push(Event {
            at_tick,
            action,
            line: 0,
        });
    }
    // Daemon deaths (the gateways live on under their lease), where the deployment admits one.
    let lease_ticks = crate::engine::lease_ticks(sc);
    let kills = x.range(0, 2);
    for _ in 0..kills {
        let at_tick = x.range(0, end as u64 - 1) as i64;
        let r = x.range(0, n as u64 - 1) as usize;
        let back = at_tick + x.range(1, (end - at_tick).max(1) as u64) as i64;
        let truthful = x.chance(70);
        let detect = x.range(0, sc.period_ticks) as i64;
        let Some(lease) = lease_ticks else {
            continue;
        };
        events.push(Event {
            at_tick,
            action: Action::KillDaemon(r),
            line: 0,
        });
        if truthful && at_tick + lease + detect < end {
            // Its health check probes the daemon: it turns unhealthy (a true verdict), no sooner
            // than the lease after the death (docs/PROTOCOL.md: the deployment's health check
            // must take at least the lease to detect a failure).
            events.push(Event {
                at_tick: at_tick + lease + detect,
                action: Action::Unhealthy(r),
                line: 0,
            });
            unhealthy[r] = true;
        }
        if back < end {
            events.push(Event {
                at_tick: back,
                action: Action::RestartDaemon(r),
                line: 0,
            });
        }
    }
    // Verdicts after the other events of their tick, so that one drawn for the tick of a daemon's
    // death counts as "sooner than the lease after it" (the engine applies a tick's events
    // together, so the order changes nothing else). The sort is stable and moves every verdict
    // alike: an "unhealthy" and the "healthy" that clears it, drawn for one tick, stay in the
    // order drawn (moving only the first made it last, a false verdict that never cleared).
    events.sort_by_key(|e| {
        let verdict = matches!(
            e.action,
            Action::Unhealthy(_) | Action::Healthy(_) | Action::Unknown(_)
        );
        (e.at_tick, verdict)
    });
    let dead = keep_lifecycle(&mut events, n, lease_ticks.unwrap_or(0));
    // A lost Region is usually reported unhealthy some time after it was lost (the true verdict).
    if cut {
        events.push(Event {
            at_tick: end,
            action: Action::Heal,
            line: 0,
        });
    }
    for r in 0..n {
        if dead[r] {
            events.push(Event {
                at_tick: end,
                action: Action::RestartDaemon(r),
                line: 0,
            });
        }
        if lost[r] {
            events.push(Event {
                at_tick: end,
                action: Action::Restore(r),
                line: 0,
            });
        }
        if unhealthy[r] {
            events.push(Event {
                at_tick: end,
                action: Action::Healthy(r),
                line: 0,
            });
        }
    }
    events
}

/// Drops the events that the daemon deaths drawn on their own stream made out of order (a kill
/// of a lost Region or of a dead daemon, a restart of a dead daemon, a daemon restart of a Region
/// whose daemon runs) or impossible (an "unhealthy" verdict sooner than `lease` after a daemon
/// died: the health check takes at least the lease to see it, docs/PROTOCOL.md); returns the
/// Regions whose daemon is still dead at the end.
fn keep_lifecycle(events: &mut Vec<Event>, n: usize, lease: i64) -> Vec<bool> {
    let mut lost = vec![false; n];
    let mut dead = vec![false; n];
    let mut died = vec![i64::MIN; n];
    events.retain(|e| match e.action {
        Action::Unhealthy(r) => !dead[r] || e.at_tick - died[r] >= lease,
        Action::Lose(r) => {
            lost[r] = true;
            dead[r] = false;
            true
        }
        Action::Restore(r) => {
            lost[r] = false;
            true
        }
        Action::Restart(r) => !dead[r],
        Action::KillDaemon(r) if !lost[r] && !dead[r] => {
            dead[r] = true;
            died[r] = e.at_tick;
            true
        }
        Action::RestartDaemon(r) if dead[r] && !lost[r] => {
            dead[r] = false;
            true
        }
        Action::KillDaemon(_) | Action::RestartDaemon(_) => false,
        _ => true,
    });
    dead
}

/// What one seed measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Largest Σ shares − L while a false verdict's effects were allowed, per second.
    pub false_excess_rps: f64,
    /// Seconds with Σ shares > L during those windows.
    pub false_excess_s: f64,
    pub had_false_verdict: bool,
    /// Seconds after the last fault ended until every share stayed within 1% of its target.
    pub settled_after_s: f64,
    pub bound_s: f64,
    pub ticks: u64,
    /// The scenario fences a Region whose own verdict is unhealthy.
    pub fenced: bool,
    /// Largest room held twice by heirs that closed an estate against a stale record, per second
    /// (docs/PROTOCOL.md, residual risk 4), and the seconds it lasted.
    pub stale_over_rps: f64,
    pub stale_over_s: f64,
    /// Largest excess of the running Regions' shares over the limit from stale heirs in a
    /// deployment outside the protocol's assumptions ([`within_assumptions`]), per second.
    pub outside_stale_excess_rps: f64,
}

/// Whether a scenario's deployment is one the protocol's safety argument covers
/// (docs/PROTOCOL.md, "The gateways' lease", Assumptions): a lease longer than one period exists
/// (`shareplane validate` refuses a configuration without one), and every record is visible to
/// every peer within `(silent_after − 2) × period − period / 2` of its rebalance's start.
pub fn within_assumptions(sc: &Scenario) -> bool {
    let period_ms = (sc.period_ticks * sc.tick_ms) as i64;
    let max_vis_ms = (sc.regions.iter())
        .map(|r| (r.visibility_ticks * sc.tick_ms) as i64)
        .max()
        .unwrap_or(0);
    crate::engine::lease_ticks(sc).is_some()
        && max_vis_ms <= (sc.silent_after as i64 - 2) * period_ms - period_ms / 2
}

impl Report {
    /// What the judge measured at one tick of `tick_ms` that passed.
    fn add(&mut self, m: &Measured, tick_ms: u64) {
        if let Some(excess) = m.false_verdict_excess {
            self.false_excess_rps = self.false_excess_rps.max(excess.as_rps());
            self.false_excess_s += tick_ms as f64 / 1000.0;
        }
        if let Some(stale) = m.stale {
            self.stale_over_rps = self.stale_over_rps.max(stale as f64 / 1000.0);
            self.stale_over_s += tick_ms as f64 / 1000.0;
        }
        if let Some(excess) = m.outside_excess {
            self.outside_stale_excess_rps =
                self.outside_stale_excess_rps.max(excess as f64 / 1000.0);
        }
    }
}

/// The limit's rates in time order, as the scenario rolls them out.
struct Rollout {
    first: Room,
    changes: Vec<(i64, Room)>,
}

impl Rollout {
    fn of(sc: &Scenario) -> Rollout {
        let changes = (sc.events.iter())
            .filter_map(|e| match e.action {
                Action::Limit(rate, _) => Some((e.at_tick, rate)),
                _ => None,
            })
            .collect();
        Rollout {
            first: sc.limit,
            changes,
        }
    }

    /// The limit at `tick` (docs/PROTOCOL.md, "Limit changes"): while a change rolls out, and
    /// until a lowered limit's debts are paid, the shares stay within the larger of the last
    /// two rates; a Region that still holds an older version widens it up to the largest rate
    /// rolled out by now.
    fn at(&self, tick: i64) -> Limit {
        let mut rates = vec![self.first];
        let mut rolled_out = self.first;
        for &(_, rate) in self.changes.iter().take_while(|(at, _)| *at <= tick) {
            if rates.last() != Some(&rate) {
                rates.push(rate);
            }
            rolled_out = rolled_out.max(rate);
        }
        let k = rates.len();
        Limit {
            in_force: (rates[k.saturating_sub(2)..].iter().copied()).fold(Room::ZERO, Room::max),
            rolled_out,
        }
    }
}

/// When false verdicts were in force, for the allowances of each tick.
struct FalseVerdicts {
    first: Option<i64>,
    last: Option<i64>,
}

/// What the fuzzer allows at one tick: the judge's [`Allowances`] for a scenario's residual risks.
struct Judging<'a> {
    sc: &'a Scenario,
    rollout: Rollout,
    /// From the liveness bound after the last fault on, no fault may linger.
    relaxed_until: i64,
    fenced: bool,
    lease_ticks: i64,
    assumptions: Assumptions,
}

impl Judging<'_> {
    fn allowances(&self, tick: i64, fv: &FalseVerdicts) -> Allowances {
        let sc = self.sc;
        // Under freeze nobody reclaims and nobody fences: a false verdict changes nothing.
        let relaxed = sc.policy != SilentPolicy::Freeze
            && fv.first.is_some_and(|f| tick >= f)
            && tick < self.relaxed_until;
        // With fencing, a Region that reads its own false verdict enforces nothing from its next
        // rebalance until it comes back in a new epoch once the verdict clears (the simulated
        // health check reads the same for every Region): the shares may pass the limit only
        // while a false verdict is in force and for one period after, or, if the Region's daemon
        // dies before that rebalance, until its gateways' lease runs out.
        let excused = if self.fenced {
            let grace = sc.period_ticks as i64 + self.lease_ticks + 1;
            fv.last.is_some_and(|l| tick <= l + grace)
        } else {
            relaxed
        };
        Allowances {
            limit: self.rollout.at(tick),
            false_verdict: FalseVerdict {
                excess: if excused {
                    Excess::Measured
                } else {
                    Excess::None
                },
                audit_measured: relaxed,
            },
            faults_may_linger: tick < self.relaxed_until,
            assumptions: self.assumptions,
            // After a false verdict's window, heirs may still hold portions of an epoch that
            // runs on fenced until it sees the mark (fuzz seed 1544524).
            running_reclaimed: RunningReclaimed::WhileEnforcingNothing,
            rounding: Room::ZERO,
        }
    }
}

/// Runs one scenario and checks it with the one judge (`shareplane_judge`) at every tick and at
/// the end. `Err` describes the first failed check.
pub fn check(sc: &Scenario) -> Result<Report, String> {
    let (faults_end, bound) = phases_of(sc);
    let ideal = ideal_targets(sc.final_limit(), sc.floor, &final_demands(sc));
    let mut report = Report {
        bound_s: sc.seconds(bound),
        fenced: sc.fence == Fence::OwnUnhealthy && sc.policy != SilentPolicy::Freeze,
        ..Report::default()
    };
    let judging = Judging {
        sc,
        rollout: Rollout::of(sc),
        relaxed_until: faults_end + bound,
        fenced: report.fenced,
        lease_ticks: crate::engine::lease_ticks(sc).unwrap_or(0),
        assumptions: if within_assumptions(sc) {
            Assumptions::Within
        } else {
            Assumptions::Outside
        },
    };
    let mut fv = FalseVerdicts {
        first: None,
        last: None,
    };
    let mut failure: Option<String> = None;
    let mut last_unsettled: Option<i64> = None;
    let mut regions = Vec::new();
    let outcome = crate::engine::run(sc, &mut |row: &Row<'_>| {
        report.ticks += 1;
        if failure.is_some() {
            return;
        }
        if row.false_verdict {
            fv.first.get_or_insert(row.tick);
            fv.last = Some(row.tick);
            report.had_false_verdict = true;
        }
        regions.clear();
        regions.extend(row.regions.iter().map(|r| Region {
            share: r.share,
            running: r.alive,
            rate: r.rate,
            debt: r.debt,
        }));
        let instant = Instant {
            regions: &regions,
            audit: Some(&row.audit),
            held: None,
            newest: &[],
        };
        match judge(&instant, &judging.allowances(row.tick, &fv)) {
            Ok(m) => report.add(&m, sc.tick_ms),
            Err(v) => failure = Some(format!("at {} s {v}", sc.seconds(row.tick))),
        }
        if row.tick >= faults_end {
            let off = row.regions.iter().zip(&ideal).any(|(r, target)| {
                (r.share.0 as i128 - target.0 as i128).abs() * 100 > target.0 as i128 || !r.alive
            });
            if off {
                last_unsettled = Some(row.tick);
            }
        }
    })
    .map_err(|e| e.to_string())?;
    let context = if report.had_false_verdict {
        " [after a false 'unhealthy' verdict]"
    } else {
        ""
    };
    if let Some(f) = failure {
        return Err(format!("{f}{context}"));
    }
    let settled_from = last_unsettled.map_or(faults_end, |t| t + 1);
    report.settled_after_s = sc.seconds(settled_from - faults_end);
    let ms = |ticks: i64| ticks.max(0) as u64 * sc.tick_ms;
    let liveness = Liveness {
        what: "shares were all within 1% of their targets".into(),
        settled_after_ms: Some(ms(settled_from - faults_end)),
        bound_ms: ms(bound),
        seen: format!(
            "targets {}",
            ideal
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join("/")
        ),
    };
    let end = End {
        core_alarms: &outcome.not_conserved,
        records_refused: outcome.rejected_records,
        final_shares: None,
        audit: Some(&outcome.end),
        admissions: None,
        liveness: &liveness,
    };
    // Bugs the core reports of itself fail a seed whatever the physical checks found.
    match judge_end(&end, &EndAllowances::default())
        .violations
        .first()
    {
        None => Ok(report),
        Some(v @ (Violation::CoreStepNotConserved { .. } | Violation::RecordsRefused(_))) => {
            Err(v.to_string())
        }
        Some(v) => Err(format!("{v}{context}")),
    }
}

/// The fault phase's end (the last event) and the liveness bound.
fn phases_of(sc: &Scenario) -> (i64, i64) {
    let end = sc
        .events
        .iter()
        .map(|e| e.at_tick)
        .max()
        .unwrap_or(0)
        .max(0);
    (end, liveness_bound(sc))
}

/// The targets SPEC §4 step 2 states, for the convergence check: `floor + (L − n × floor) ×
/// d_i / Σ d`, the floor lowered to `L / n` when the limit cannot give it to every Region, the rest
/// split evenly when no Region has demand. Computed here in floating point, not by the core's
/// [`shareplane_core::targets`]: a check must not trust what it checks.
fn ideal_targets(limit: Room, floor: Room, demands: &[Room]) -> Vec<Room> {
    let n = demands.len().max(1) as f64;
    let l = limit.0 as f64;
    let floor = (floor.0 as f64).min(l / n);
    let rest = l - floor * n;
    let total: f64 = demands.iter().map(|d| d.0 as f64).sum();
    demands
        .iter()
        .map(|d| {
            let part = if total > 0.0 {
                rest * d.0 as f64 / total
            } else {
                rest / n
            };
            Room((floor + part).round() as u64)
        })
        .collect()
}

fn final_demands(sc: &Scenario) -> Vec<Room> {
    let mut d: Vec<Room> = sc.regions.iter().map(|r| r.demand).collect();
    for e in &sc.events {
        if let Action::Demand(rates) = &e.action {
            for &(r, rate) in rates {
                d[r] = rate;
            }
        }
    }
    d
}

/// Figures over many seeds.
#[derive(Default)]
pub struct Totals {
    pub passed: u64,
    pub with_false_verdict: u64,
    pub max_false_excess_rps: f64,
    pub max_false_excess_s: f64,
    /// The same two figures over the seeds with `fence = "own-unhealthy"` only.
    pub fenced_false_excess_rps: f64,
    pub fenced_false_excess_s: f64,
    pub max_settled_after_s: f64,
    /// Largest settle time as a fraction of its seed's bound.
    pub max_settle_ratio: f64,
    pub ticks: u64,
    /// Seeds in which heirs held room taken from stale records, the largest amount as a fraction
    /// of that seed's limit, and the longest it lasted.
    pub with_stale: u64,
    /// Seeds outside the protocol's assumptions in which stale room reached the shares, and the
    /// largest excess as a fraction of that seed's limit.
    pub outside_stale_excess: u64,
    pub max_outside_stale_excess_ratio: f64,
    pub max_stale_ratio: f64,
    pub max_stale_s: f64,
}

impl Totals {
    pub fn add(&mut self, r: &Report, limit: Room) {
        self.passed += 1;
        if r.stale_over_rps > 0.0 {
            self.with_stale += 1;
            self.max_stale_ratio = self.max_stale_ratio.max(r.stale_over_rps / limit.as_rps());
            self.max_stale_s = self.max_stale_s.max(r.stale_over_s);
        }
        if r.outside_stale_excess_rps > 0.0 {
            self.outside_stale_excess += 1;
            self.max_outside_stale_excess_ratio = (self.max_outside_stale_excess_ratio)
                .max(r.outside_stale_excess_rps / limit.as_rps());
        }
        self.ticks += r.ticks;
        if r.had_false_verdict {
            self.with_false_verdict += 1;
        }
        self.max_false_excess_rps = self.max_false_excess_rps.max(r.false_excess_rps);
        self.max_false_excess_s = self.max_false_excess_s.max(r.false_excess_s);
        if r.fenced {
            self.fenced_false_excess_rps = self.fenced_false_excess_rps.max(r.false_excess_rps);
            self.fenced_false_excess_s = self.fenced_false_excess_s.max(r.false_excess_s);
        }
        self.max_settled_after_s = self.max_settled_after_s.max(r.settled_after_s);
        if r.bound_s > 0.0 {
            self.max_settle_ratio = self.max_settle_ratio.max(r.settled_after_s / r.bound_s);
        }
    }

    /// Adds another run's totals (of other seeds) to these.
    pub fn merge(&mut self, o: &Totals) {
        self.passed += o.passed;
        self.with_false_verdict += o.with_false_verdict;
        self.ticks += o.ticks;
        self.with_stale += o.with_stale;
        self.outside_stale_excess += o.outside_stale_excess;
        for (mine, theirs) in [
            (&mut self.max_false_excess_rps, o.max_false_excess_rps),
            (&mut self.max_false_excess_s, o.max_false_excess_s),
            (&mut self.fenced_false_excess_rps, o.fenced_false_excess_rps),
            (&mut self.fenced_false_excess_s, o.fenced_false_excess_s),
            (&mut self.max_settled_after_s, o.max_settled_after_s),
            (&mut self.max_settle_ratio, o.max_settle_ratio),
            (&mut self.max_stale_ratio, o.max_stale_ratio),
            (&mut self.max_stale_s, o.max_stale_s),
            (
                &mut self.max_outside_stale_excess_ratio,
                o.max_outside_stale_excess_ratio,
            ),
        ] {
            *mine = mine.max(theirs);
        }
    }

    pub fn report(&self, seeds: u64, failed: u64) -> String {
        format!(
            "fuzz: {seeds} seeds, {} passed, {failed} failed, {} ticks simulated\n\
             false 'unhealthy' verdicts for live Regions in {} seeds: largest excess of the sum of shares over L {:.3}/s, \
             longest total time above L {:.1} s (with fencing: {:.3}/s, {:.1} s)\n\
             liveness: every share within 1% of target at most {:.1} s after the last fault ended \
             ({:.0}% of that seed's stated bound)\n\
             heirs that reclaimed from a stale record (a partition hid the estate's last record) in {} seeds: \
             room held twice in the records at most {:.1}% of L, for at most {:.1} s; in the running Regions' shares \
             never within the protocol's assumptions, and in {} seeds of deployments outside them (no lease longer \
             than a period, or records slower than the lease allows) at most {:.1}% of L, within the stale room",
            self.passed,
            self.ticks,
            self.with_false_verdict,
            self.max_false_excess_rps,
            self.max_false_excess_s,
            self.fenced_false_excess_rps,
            self.fenced_false_excess_s,
            self.max_settled_after_s,
            self.max_settle_ratio * 100.0,
            self.with_stale,
            self.max_stale_ratio * 100.0,
            self.max_stale_s,
            self.outside_stale_excess,
            self.max_outside_stale_excess_ratio * 100.0,
        )
    }
}

/// The scenario as a TOML file that `shareplane sim` runs unchanged.
pub fn to_toml(sc: &Scenario) -> String {
    let s = |t: i64| sc.seconds(t);
    let mut o = String::new();
    let (design, rule, fence) = (sc.design.name(), sc.policy.name(), sc.fence.name());
    let _ = writeln!(
        o,
        "name = {:?}\nstart_s = {:?}\nend_s = {:?}\ntick_ms = {}\ndesign = \"{design}\"\nsilent_rule = \"{rule}\"\nfence = \"{fence}\"",
        sc.name,
        s(sc.start_tick),
        s(sc.end_tick),
        sc.tick_ms
    );
    if let Some(seed) = sc.seed {
        let _ = writeln!(o, "seed = {seed}");
    }
    let _ = writeln!(
        o,
        "\n[limit]\nrate = {:?}\nburst_s = {:?}\nfloor = {:?}\nstep_cap = {:?}",
        sc.limit.as_rps(),
        sc.burst_ms as f64 / 1000.0,
        sc.floor.as_rps(),
        sc.step_cap.as_rps()
    );
    let vis = sc.regions.first().map_or(1, |r| r.visibility_ticks) as i64;
    let _ = writeln!(
        o,
        "\n[sync]\nperiod_s = {:?}\nvisibility_s = {:?}\ndemand_window_s = {:?}\nsilent_after = {}",
        s(sc.period_ticks as i64),
        s(vis),
        s(sc.window_ticks as i64),
        sc.silent_after
    );
    for r in &sc.regions {
        let _ = writeln!(
            o,
            "\n[[region]]\nname = {:?}\noffset_s = {:?}\ndemand = {:?}\nvisibility_s = {:?}",
            r.name,
            s(r.offset_tick),
            r.demand.as_rps(),
            s(r.visibility_ticks as i64)
        );
    }
    let name = |r: usize| format!("{:?}", sc.regions[r].name);
    for e in &sc.events {
        let action = match &e.action {
            Action::Limit(rate, mask) => {
                let names: Vec<String> = (0..sc.regions.len())
                    .filter(|r| mask >> r & 1 == 1)
                    .map(name)
                    .collect();
                format!(
                    "limit = {{ rate = {:?}, regions = [{}] }}",
                    rate.as_rps(),
                    names.join(", ")
                )
            }
            Action::Demand(rates) => {
                let parts: Vec<String> = rates
                    .iter()
                    .map(|(r, v)| format!("{} = {:?}", sc.regions[*r].name, v.as_rps()))
                    .collect();
                format!("demand = {{ {} }}", parts.join(", "))
            }
            Action::Lose(r) => format!("lose = {}", name(*r)),
            Action::Restore(r) => format!("restore = {}", name(*r)),
            Action::Cut(mask) => {
                let names: Vec<String> = (0..sc.regions.len())
                    .filter(|r| mask >> r & 1 == 1)
                    .map(name)
                    .collect();
                format!("cut = [{}]", names.join(", "))
            }
            Action::OneWayCut(from, to) => {
                let list = |mask: &u8| {
                    (0..sc.regions.len())
                        .filter(|r| mask >> r & 1 == 1)
                        .map(name)
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                format!(
                    "one_way_cut = {{ from = [{}], to = [{}] }}",
                    list(from),
                    list(to)
                )
            }
            Action::Unknown(r) => format!("unknown = {}", name(*r)),
            Action::KillDaemon(r) => format!("kill_daemon = {}", name(*r)),
            Action::RestartDaemon(r) => format!("restart_daemon = {}", name(*r)),
            Action::Heal => "heal = true".into(),
            Action::Unhealthy(r) => format!("unhealthy = {}", name(*r)),
            Action::Healthy(r) => format!("healthy = {}", name(*r)),
            Action::Restart(r) => format!("restart = {}", name(*r)),
        };
        let _ = writeln!(o, "\n[[event]]\nat_s = {:?}\n{action}", s(e.at_tick));
    }
    o
}

/// Generates and checks seeds `start..start + seeds` of the classic family on `jobs` threads
/// ([`crate::swarm::run`]). The totals do not depend on `jobs`; failures come back in seed order.
pub fn run_seeds(start: u64, seeds: u64, jobs: usize) -> (Totals, Vec<(u64, String)>) {
    crate::swarm::run(crate::swarm::Family::Classic, start, seeds, jobs)
}

/// Threads for [`run_seeds`]: `SHAREPLANE_FUZZ_JOBS`, else every core.
pub fn default_jobs() -> usize {
    std::env::var("SHAREPLANE_FUZZ_JOBS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&j: &usize| j > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The convergence check's targets are the spec's formula; the core's exact split must agree
    /// with them to within rounding, or one of the two is wrong.
    #[test]
    fn the_spec_targets_agree_with_the_cores_exact_split() {
        let cases: [(u64, u64, &[u64]); 5] = [
            (10_000, 500, &[7_200, 3_600, 1_200]),
            (10_000, 500, &[0, 0, 0]),
            (1_000, 500, &[5, 1, 1]),
            (12_345, 100, &[1, 0, 0, 99_999]),
            (600, 0, &[300, 300]),
        ];
        for (limit, floor, demands) in cases {
            let demands: Vec<Room> = demands.iter().map(|&d| Room::rps(d)).collect();
            let spec = ideal_targets(Room::rps(limit), Room::rps(floor), &demands);
            let weights: Vec<u64> = demands.iter().map(|d| d.0).collect();
            let mut core = vec![Room::ZERO; demands.len()];
            shareplane_core::targets(Room::rps(limit), Room::rps(floor), &weights, &mut core);
            for (s, c) in spec.iter().zip(&core) {
                assert!(
                    s.0.abs_diff(c.0) <= 1,
                    "{limit} {floor}: spec {spec:?}, core {core:?}"
                );
            }
        }
    }
}
