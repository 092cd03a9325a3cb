//! The exploration and its checks: every state and every recovery's end judged by the one judge
//! (`shareplane_judge`), with the allowances stated in [`allowances`].

use crate::action::{rid, Action};
use crate::settings::{Report, Settings};
use crate::world::{actions, apply, deployment, heal, root, Clock, Daemon, World};
use shareplane_core::{Audit, Delta, Deployment, RegionRecord, Room};
use shareplane_judge::{
    judge, judge_end, Allowances, Assumptions, End, EndAllowances, Excess, FalseVerdict, Instant,
    Limit, Liveness, Region, RunningReclaimed, StaleRoom, Stranded, Violation,
};
use std::collections::HashSet;
use std::sync::Arc;

/// What the judge allows in a state: the largest rate adopted so far, a false verdict's effects
/// measured once one has been in force (the model's flag stays set), no running epoch's room
/// excused, and (`faults_may_linger`, false after recovery) the room stale heirs count twice.
fn allowances(w: &World, s: &Settings, faults_may_linger: bool) -> Allowances {
    let largest = s.largest_to(w.config.iter().copied().max().unwrap_or(1));
    Allowances {
        limit: Limit::fixed(largest),
        false_verdict: FalseVerdict {
            excess: if w.false_verdict {
                Excess::Measured
            } else {
                Excess::None
            },
            audit_measured: w.false_verdict,
        },
        faults_may_linger,
        // Room counted twice in the records only after a false verdict (risk 1): none in any
        // other state, a lowered limit's included (docs/PROTOCOL.md, residual risk 4).
        stale_room: if w.false_verdict {
            StaleRoom::WhileFaultsLinger
        } else {
            StaleRoom::Forbidden
        },
        assumptions: Assumptions::Within,
        running_reclaimed: RunningReclaimed::Never,
        rounding: Room::ZERO,
    }
}

/// Judges a state with `c`, its audit (`World::audit`), by the one judge: exact conservation but
/// for room stale heirs count twice until they settle (residual D12; `faults_may_linger`), the
/// running Regions' shares within the limit, the room they hold within it beyond that stale room,
/// and no Region taking more of a pair's grants than the granter granted.
fn judged(w: &World, c: &Audit, s: &Settings, faults_may_linger: bool) -> Option<String> {
    // What each Region's gateways enforce: a dead daemon's last written record while its lease
    // lasts, nothing once it ran out.
    let enforced = |i: usize| {
        w.enforced(i, &w.coords[i])
            .map(|r| r.limits()[0])
            .unwrap_or_default()
    };
    let regions: Vec<Region> = (0..w.coords.len())
        .map(|i| Region {
            share: enforced(i).share(),
            running: !w.lost[i],
            rate: Room::ZERO,
            debt: enforced(i).debt(),
        })
        .collect();
    let held: Delta = (0..w.coords.len())
        .filter(|&i| !w.lost[i])
        .map(|i| enforced(i).held())
        .sum();
    let newest: Vec<&RegionRecord> = w.coords.iter().map(|co| co.own()).collect();
    let instant = Instant {
        regions: &regions,
        audit: Some(c),
        held: Some(held),
        newest: &newest,
    };
    judge(&instant, &allowances(w, s, faults_may_linger))
        .err()
        .map(|v| v.to_string())
}

/// Checks a state against `c`, its audit (`World::audit`).
fn check_state(w: &World, c: &Audit, s: &Settings) -> Option<String> {
    judged(w, c, s, true)
}

/// Heal everything, restore every lost Region, tell the truth about health, and run full rounds.
/// Returns the failure and whether it belongs to a documented residual class (a false health
/// verdict was in force, and the shares did not pass the limit).
fn check_recovery(w: &World, s: &Settings) -> Option<(String, bool)> {
    let w = recover(w, s);
    converged(&w, s, w.false_verdict)
}

fn recover(w: &World, s: &Settings) -> World {
    let mut w = w.clone();
    let n = s.n;
    heal(&mut w);
    for i in 0..n {
        // A restarted daemon writes first (within the window it restarted in); a dead one
        // starts again after the window, in a new epoch.
        match w.daemon[i] {
            Daemon::Unwritten(_) if !w.lost[i] => {
                apply(&mut w, s, Action::Rebalance(i));
            }
            Daemon::Dead(_) if !w.lost[i] => {
                w.daemon[i] = Daemon::Dead(Clock::Late);
                apply(&mut w, s, Action::RestartDaemon(i));
            }
            _ => {}
        }
    }
    for i in 0..n {
        if w.lost[i] {
            apply(&mut w, s, Action::Restore(i));
        }
        w.unhealthy[i] = false;
        while w.config[i] < s.last_version() {
            apply(&mut w, s, Action::Adopt(i));
        }
    }
    let largest = s.largest_to(s.last_version()).milli();
    let rounds = (largest.div_ceil(Room::rps(s.step_rps).milli()) + 8) as usize;
    run_rounds(&mut w, s, rounds);
    w
}

fn run_rounds(w: &mut World, s: &Settings, rounds: usize) {
    let n = s.n;
    for _ in 0..rounds {
        for i in 0..n {
            apply(w, s, Action::Rebalance(i));
            for from in 0..n {
                for to in 0..n {
                    while !w.wire[from][to].is_empty() {
                        apply(w, s, Action::Deliver(from, to));
                    }
                }
            }
            for e in w.ended_records() {
                for to in 0..n {
                    if rid(to) != e.region() {
                        let _ = w.coords[to].observe(e.clone());
                    }
                }
            }
        }
    }
}

/// The end of a recovery, by the one judge: the shares within the last limit (even in a residual
/// class), exact conservation where no false verdict was in force, and every share at its target
/// as far as grants in whole units move room (`settled_at`; room outside the running Regions'
/// hands is named where they are not). Returns the failure and whether it belongs to the
/// residual class.
fn converged(w: &World, s: &Settings, residual: bool) -> Option<(String, bool)> {
    let a = w.audit(&deployment(s));
    if !residual {
        if let Some(v) = judged(w, &a, s, false) {
            return Some((format!("after recovery: {v}"), false));
        }
    }
    let sum: Room = w.coords.iter().map(|c| c.own().limits()[0].share()).sum();
    // Short of its target by less than what grants in whole units can move (docs/PROTOCOL.md,
    // "Whole units").
    let settled = (w.coords.iter()).all(|c| {
        let l = c.own().limits()[0];
        shareplane_core::settled_at(l.share(), l.target(), s.n)
    });
    let shares: Vec<String> = (w.coords.iter())
        .map(|c| {
            let l = c.own().limits()[0];
            format!("{}/{} pool {}", l.share(), l.target(), l.pool())
        })
        .collect();
    let liveness = Liveness {
        what: "every share at its target after recovery".into(),
        settled_after_ms: settled.then_some(0),
        bound_ms: 0,
        seen: shares.join(", "),
    };
    let end = End {
        core_alarms: &[],
        records_refused: 0,
        final_shares: Some((sum, s.rate_of(s.last_version()))),
        audit: Some(&a),
        admissions: None,
        liveness: &liveness,
    };
    let stranded = EndAllowances {
        stranded: Stranded::WhereSettled,
    };
    let first = judge_end(&end, &stranded).violations.into_iter().next()?;
    let above = matches!(first, Violation::FinalSharesAboveLimit { .. });
    Some((format!("after recovery: {first}"), residual && !above))
}

/// Explores every interleaving to `s.depth`.
pub fn explore(s: &Settings) -> Report {
    let d = deployment(s);
    let mut report = Report::default();
    let mut seen: HashSet<u64> = HashSet::new();
    let start = root(&d, s);
    seen.insert(start.key());
    let mut frontier = vec![start];
    for depth in 0..=s.depth {
        report.depth_reached = depth;
        let mut next = Vec::new();
        for w in &frontier {
            if !visit(w, s, &d, depth == s.depth, &mut report) {
                continue;
            }
            expand(w, s, &mut report, &mut seen, &mut next);
            if report.violations.len() > 20 || report.states > s.max_states {
                return report;
            }
        }
        frontier = next;
        if frontier.is_empty() {
            break;
        }
    }
    report
}

/// Judges one state of the frontier, counts it, and at the last depth judges its recovery;
/// whether the exploration goes on from it.
fn visit(w: &World, s: &Settings, d: &Deployment, last: bool, report: &mut Report) -> bool {
    report.states += 1;
    if w.false_verdict {
        report.false_verdict_states += 1;
    }
    let a = w.audit(d);
    // Measured where the checks below apply: after a false verdict the stale figure also
    // counts takes from running epochs, which nothing there bounds.
    if a.over_stale.is_positive() && !w.false_verdict {
        report.stale_states += 1;
        report.max_stale = report.max_stale.max(a.over_stale.clamp_to_room());
    }
    if let Some(v) = check_state(w, &a, s) {
        report
            .violations
            .push(format!("{v}\n  trace: {}", w.trace.join(" ")));
        return false;
    }
    if !w.false_verdict
        && s.witness
            .is_some_and(|f| f(&w.coords, &w.lost, &w.unhealthy))
    {
        report.witness_states += 1;
        report.witness_exact += usize::from(a.holds());
        if report.witness_example.is_none() {
            report.witness_example = Some(w.trace[s.prefix.len()..].join(" "));
        }
    }
    if !last {
        return true;
    }
    report.recoveries_checked += 1;
    if let Some((v, residual)) = check_recovery(w, s) {
        let v = format!("{v}\n  trace: {}", w.trace.join(" "));
        if !residual {
            report.violations.push(v);
        } else {
            report.false_verdict_recovery_failures += 1;
            if report.false_verdict_examples.len() < 5 {
                report.false_verdict_examples.push(v);
            }
        }
    }
    false
}

/// Every action from `w`: the states not seen before go to `next`.
fn expand(
    w: &World,
    s: &Settings,
    report: &mut Report,
    seen: &mut HashSet<u64>,
    next: &mut Vec<World>,
) {
    for a in actions(w, s) {
        let mut nw = w.clone();
        report.transitions += 1;
        if let Some(v) = apply(&mut nw, s, a) {
            report
                .violations
                .push(format!("{v}\n  trace: {}", nw.trace.join(" ")));
            continue;
        }
        if s.true_verdicts_only && nw.false_verdict {
            report.false_verdicts_pruned += 1;
            continue;
        }
        if seen.insert(nw.key()) {
            next.push(nw);
        }
    }
}

/// Every Region's own record at the root of the exploration (after the settings' prefix).
pub fn root_records(s: &Settings) -> Vec<RegionRecord> {
    let w = root(&deployment(s), s);
    w.coords.iter().map(|c| c.own().clone()).collect()
}

/// Applies `trace` from the start, then recovers (heal, restore, true health, full rounds): the
/// first violation on the way or after it, if any.
pub fn replay_and_recover(s: &Settings, trace: &[Action]) -> Option<String> {
    let d = deployment(s);
    let mut w = root(&d, s);
    for a in trace {
        if let Some(v) = apply(&mut w, s, *a) {
            return Some(format!("at {a:?}: {v}"));
        }
        if let Some(v) = check_state(&w, &w.audit(&d), s) {
            return Some(format!("after {a:?}: {v}"));
        }
    }
    check_recovery(&w, s).map(|(v, _)| v)
}

/// Where a replay leads.
#[derive(Debug)]
pub struct Outcome {
    /// Every Region's own record.
    pub own: Vec<RegionRecord>,
    /// Every record each Region wrote, in order.
    pub written: Vec<Vec<Arc<RegionRecord>>>,
    /// `(epoch, version)` of the latest record each Region has seen of each other Region
    /// (`None` for itself).
    pub seen: Vec<Vec<Option<(u64, u64)>>>,
    pub lost: Vec<bool>,
    pub unhealthy: Vec<bool>,
    pub audit: Audit,
    /// Whether the state is in the settings' witness class.
    pub witness: bool,
    /// The first violation on the way (a transition, or a state's check), if any.
    pub violation: Option<String>,
}

/// Applies `trace` from the root, checking every state on the way, and (`recover`) then heals,
/// restores, tells the truth about health and runs full rounds as a recovery does.
pub fn replay_to(s: &Settings, trace: &[Action], recover_after: bool) -> Outcome {
    let d = deployment(s);
    let mut w = root(&d, s);
    let mut violation = None;
    for a in trace {
        if let Some(v) = apply(&mut w, s, *a) {
            violation.get_or_insert(format!("at {a:?}: {v}"));
        }
        if let Some(v) = check_state(&w, &w.audit(&d), s) {
            violation.get_or_insert(format!("after {a:?}: {v}"));
        }
    }
    if recover_after {
        w = recover(&w, s);
    }
    let n = s.n;
    Outcome {
        own: w.coords.iter().map(|c| c.own().clone()).collect(),
        written: w.history.clone(),
        seen: (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| w.coords[i].latest(rid(j)).map(|r| (r.epoch(), r.version())))
                    .collect()
            })
            .collect(),
        lost: w.lost.clone(),
        unhealthy: w.unhealthy.clone(),
        audit: w.audit(&d),
        witness: s
            .witness
            .is_some_and(|f| f(&w.coords, &w.lost, &w.unhealthy)),
        violation,
    }
}

/// Replays a trace and prints every Region's own record after each step (for debugging a
/// counterexample).
pub fn replay(s: &Settings, trace: &[Action], recover: bool) {
    let d = deployment(s);
    let mut w = root(&d, s);
    let show = |w: &World| {
        for c in &w.coords {
            let o = c.own();
            let l = o.limits()[0];
            println!(
                "   {} e{} v{} share {} pool {} debt {} target {} unmet {} granted {:?} taken {:?} reclaimed {:?} marks {:?} peer epochs {:?} accounts {:?}",
                o.region(), o.epoch(), o.version(), l.share(), l.pool(), l.debt(), l.target(), l.unmet(),
                &l.granted().0[..s.n], &l.taken().0[..s.n], &l.reclaimed().0[..s.n], &o.reclaims().0[..s.n],
                &o.peer_epochs().0[..s.n], &o.account_epochs().0[..s.n]
            );
        }
    };
    for a in trace {
        println!("{a:?}");
        apply(&mut w, s, *a);
        show(&w);
    }
    if recover {
        println!("recovery: {:?}", check_recovery(&w, s));
    }
}
