//! The end-of-run check: once every fault has ended, what the run left behind.

use crate::allowances::{EndAllowances, Stranded};
use crate::violation::Violation;
use shareplane_core::{Audit, Room};

/// At most this many windows of admissions are reported (each further one is as bad).
pub const MAX_WINDOW_VIOLATIONS: usize = 5;

/// What a checker knows once every fault has ended.
#[derive(Clone, Copy)]
pub struct End<'a> {
    /// What the core reported of its own steps (`Alarms::not_conserved`), each described.
    pub core_alarms: &'a [String],
    /// Peer records a coordinator refused.
    pub records_refused: u64,
    /// Σ shares at the end and the last limit rolled out, where judged at the end.
    pub final_shares: Option<(Room, Room)>,
    /// The physical audit at the end, where the checker has records.
    pub audit: Option<&'a Audit>,
    /// Admissions of every Region, where the checker has them.
    pub admissions: Option<Admissions<'a>>,
    pub liveness: &'a Liveness,
}

/// Admissions of every Region together, second by second, against SPEC §5's contract: in any
/// window of `t` whole seconds at most `2L + L·t` (with `2L` the largest `L` of the window and
/// `L·t` summed second by second), plus what the allowances permit.
#[derive(Clone, Copy)]
pub struct Admissions<'a> {
    pub per_second: &'a [u64],
    /// `L` of each second (requests/s): the largest of that second.
    pub limit_rps: &'a [f64],
    /// The extra admissions the allowances permit in the window of seconds `[from, to)`.
    pub allowed: &'a dyn Fn(usize, usize) -> f64,
}

/// Whether what was to settle did, within its bound.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Liveness {
    /// What was to settle ("every share within 1% of its target").
    pub what: String,
    /// How long after the last fault it settled for good; `None`: it never did.
    pub settled_after_ms: Option<u64>,
    pub bound_ms: u64,
    /// What the checker saw at the end, for the message.
    pub seen: String,
}

/// The end-of-run verdict: every violation in the order checked, and the worst window of
/// admissions measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EndVerdict {
    pub violations: Vec<Violation>,
    /// The largest excess of admissions over `2L + L·t` (before allowances; negative infinity
    /// where no admissions were judged) and its window of seconds.
    pub worst_window_excess: f64,
    pub worst_window: (usize, usize),
}

/// Judges the end of a run: the core's own alarms, refused records, the final shares,
/// admissions, room outside the running Regions' hands, and liveness, in that order.
pub fn judge_end(e: &End<'_>, a: &EndAllowances) -> EndVerdict {
    let mut v = EndVerdict {
        worst_window_excess: f64::NEG_INFINITY,
        ..EndVerdict::default()
    };
    if let Some(first) = e.core_alarms.first() {
        v.violations.push(Violation::CoreStepNotConserved {
            first: first.clone(),
            count: e.core_alarms.len(),
        });
    }
    if e.records_refused > 0 {
        v.violations
            .push(Violation::RecordsRefused(e.records_refused));
    }
    if let Some((sum, limit)) = e.final_shares.filter(|(sum, limit)| sum > limit) {
        v.violations
            .push(Violation::FinalSharesAboveLimit { sum, limit });
    }
    if let Some(adm) = &e.admissions {
        windows(adm, &mut v);
    }
    let l = e.liveness;
    let settled = l.settled_after_ms.is_some_and(|ms| ms <= l.bound_ms);
    if let Some(audit) = e.audit.filter(|x| !x.outside_live().is_zero()) {
        if a.stranded == Stranded::Forbidden || !settled {
            v.violations
                .push(Violation::RoomOutsideRunning(Box::new(*audit)));
        }
    }
    if !settled {
        v.violations.push(Violation::NotSettled {
            what: l.what.clone(),
            after_ms: l.settled_after_ms,
            bound_ms: l.bound_ms,
            seen: l.seen.clone(),
        });
    }
    v
}

/// Every window of whole seconds against the contract.
fn windows(adm: &Admissions<'_>, v: &mut EndVerdict) {
    let total = adm.per_second;
    let mut failed = 0;
    for from in 0..total.len() {
        let mut sum = 0u64;
        let (mut l_sum, mut l_max) = (0.0, 0.0f64);
        for (i, x) in total[from..].iter().enumerate() {
            sum += x;
            let to = from + i + 1;
            let l = adm.limit_rps.get(to - 1).copied().unwrap_or(0.0);
            l_sum += l;
            l_max = l_max.max(l);
            let excess = sum as f64 - 2.0 * l_max - l_sum;
            if excess > v.worst_window_excess {
                v.worst_window_excess = excess;
                v.worst_window = (from, to);
            }
            let allowed = (adm.allowed)(from, to);
            if excess > allowed && failed < MAX_WINDOW_VIOLATIONS {
                failed += 1;
                v.violations.push(Violation::AdmissionsAboveContract {
                    from,
                    to,
                    admitted: sum,
                    excess,
                    allowed,
                });
            }
        }
    }
}
