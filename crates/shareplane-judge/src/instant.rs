//! The check of one instant: what the gateways enforced and what the audit found, against the
//! allowances in force.

use crate::allowances::{Allowances, Assumptions, Excess, RunningReclaimed, StaleRoom};
use crate::violation::Violation;
use shareplane_core::{Audit, Delta, RegionRecord, Room};

/// What one Region's gateways enforced at an instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Region {
    /// The share its gateways enforce (zero while they enforce nothing, and while lost).
    pub share: Room,
    /// Its gateways run: the Region is not lost (they may enforce zero, fenced).
    pub running: bool,
    /// The limit's rate at the version its newest record holds (zero where not known). It only
    /// widens the limit up to [`crate::Limit::rolled_out`].
    pub rate: Room,
    /// The debt of a lowered limit its newest record still owes: room others hold above the
    /// newer rates until it is repaid.
    pub debt: Room,
}

/// Everything a checker knows of one instant.
#[derive(Clone, Copy, Debug, Default)]
pub struct Instant<'a> {
    /// Every Region, in the deployment's order.
    pub regions: &'a [Region],
    /// The physical audit at this instant (`None` where the checker has no records: the end-to-end
    /// checker judges what the gateways enforced and admitted only).
    pub audit: Option<&'a Audit>,
    /// The room the running Regions may raise to without a grant (Σ share + pool − debt of their
    /// committed records), where the checker has it: held to the limit beyond the stale room.
    pub held: Option<Delta>,
    /// Every Region's newest record, where the checker has them: no Region may have taken more
    /// of a pair's grants than the granter's record shows granted. Empty: not judged.
    pub newest: &'a [&'a RegionRecord],
}

/// What the judge measured at an instant that passed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Measured {
    /// Σ shares the running Regions' gateways enforced.
    pub sum: Room,
    /// The limit they were judged against (after the allowances widened it).
    pub limit: Room,
    /// The shares passed the limit by this while a false verdict's excess was measured.
    pub false_verdict_excess: Option<Room>,
    /// The stale room (the audit's `over_stale`) excused at this instant, if the stale allowance
    /// applied (the records count room twice; the shares were judged against it).
    pub stale: Option<Delta>,
    /// Outside the assumptions: how far the shares passed the limit, within the stale room and
    /// the running Regions' debts.
    pub outside_excess: Option<Delta>,
}

impl Measured {
    /// `Σ shares − limit`: above zero when the shares passed the limit.
    pub fn excess(&self) -> Delta {
        Delta::of(self.sum) - self.limit
    }
}

/// Judges one instant. The audit is judged first (its violation wins), then the shares, the room
/// the running Regions hold, and the accounts between their records.
pub fn judge(i: &Instant<'_>, a: &Allowances) -> Result<Measured, Violation> {
    let sum: Room = i
        .regions
        .iter()
        .filter(|r| r.running)
        .map(|r| r.share)
        .sum();
    let (limit, live_debt) = limit_and_debts(i, a);
    let stale = stale_excused(i, a, live_debt);
    let mut m = Measured {
        sum,
        limit,
        ..Measured::default()
    };
    let shares = shares(i.audit, a, &mut m, stale, live_debt);
    if let Some(audit) = i.audit {
        if !audit.holds() && !a.false_verdict.audit_measured && !stale {
            return Err(Violation::NotConserved(Box::new(*audit)));
        }
    }
    shares?;
    if a.false_verdict.excess == Excess::None {
        let over_stale = i.audit.map_or(Delta::ZERO, |x| x.over_stale);
        if let Some(held) = i.held.filter(|&h| h - over_stale > Delta::of(limit)) {
            return Err(Violation::HeldAboveLimit {
                held: held.clamp_to_room(),
                limit,
                stale: over_stale.clamp_to_room(),
            });
        }
    }
    accounts(i.newest)?;
    Ok(m)
}

/// The limit the shares are judged against, and the debts (the running Regions' and those ended
/// epochs left untaken) that count as stale room (none once the limit was raised for them: they
/// are not counted twice).
fn limit_and_debts(i: &Instant<'_>, a: &Allowances) -> (Room, Delta) {
    let rolled_out = a.limit.rolled_out;
    let mut limit = (i.regions.iter())
        .map(|r| r.rate.min(rolled_out))
        .fold(a.limit.in_force, Room::max);
    let in_debt = i.audit.is_some_and(|x| x.estates.is_negative())
        || i.regions.iter().any(|r| r.debt > Room::ZERO);
    let mut raised_for_debt = false;
    if in_debt && a.faults_may_linger {
        // A lowered limit's debt is still owed (by an ended epoch no heir has taken on yet, or by
        // a Region). Until it is repaid that room is held above the newer rates, within the rate
        // it was lowered from (docs/PROTOCOL.md, "An estate in debt"). The records' debt counters
        // may only narrow this: the bound never passes what was rolled out, and only while
        // faults linger.
        raised_for_debt = rolled_out > limit;
        limit = limit.max(rolled_out);
    }
    if raised_for_debt {
        return (limit, Delta::ZERO);
    }
    // The debts ended epochs left that no heir has taken on yet are room held above the limit
    // as the running Regions' debts are (an heir that settled a stale close down owes the
    // difference until it takes it on).
    let ended: Delta = i.audit.map_or(Delta::ZERO, |x| x.ended_debts);
    let running: Delta = (i.regions.iter())
        .filter(|r| r.running)
        .map(|r| Delta::of(r.debt))
        .sum();
    (limit, running + ended)
}

/// Whether the audit's only excess is room stale heirs count twice (and, where allowed, room
/// taken from running epochs whose gateways enforce nothing), with the running Regions' debts:
/// measured while faults linger, outside a false verdict's window; stale room only where
/// [`StaleRoom::WhileFaultsLinger`] allows it.
fn stale_excused(i: &Instant<'_>, a: &Allowances, live_debt: Delta) -> bool {
    let Some(x) = i.audit else {
        return false;
    };
    let shape = match a.running_reclaimed {
        RunningReclaimed::Never => x.over == x.over_stale,
        RunningReclaimed::WhileEnforcingNothing => {
            let idle = (i.regions.iter().enumerate())
                .filter(|(k, _)| x.running_reclaimed >> k & 1 == 1)
                .all(|(_, r)| r.share.is_zero() || !r.running);
            x.over == x.over_stale + x.over_running && (x.running_reclaimed == 0 || idle)
        }
    };
    a.false_verdict.excess == Excess::None
        && a.faults_may_linger
        && (x.over_stale.is_positive() || live_debt.is_positive())
        && shape
        && x.actual - x.over == x.expected
        && x.missing_basis == 0
        && (a.stale_room == StaleRoom::WhileFaultsLinger || !x.over_stale.is_positive())
}

/// The shares against the limit.
fn shares(
    audit: Option<&Audit>,
    a: &Allowances,
    m: &mut Measured,
    stale: bool,
    live_debt: Delta,
) -> Result<(), Violation> {
    let excess = m.excess();
    if let (true, Some(x)) = (stale, audit) {
        m.stale = Some(x.over_stale);
        // Room the records count twice may never reach what gateways enforce within the
        // assumptions (docs/PROTOCOL.md, "Reclaim against a causally closed basis"). Outside
        // them the shares are held to the stale room and the running Regions' debts.
        if excess.is_positive() && a.assumptions == Assumptions::Within {
            return Err(Violation::StaleRoomEnforced {
                excess: excess.clamp_to_room(),
                limit: m.limit,
                stale: x.over_stale.clamp_to_room(),
            });
        }
        if excess > x.over_stale + live_debt {
            return Err(Violation::StaleRoomBeyondBound {
                sum: m.sum,
                limit: m.limit,
                stale: x.over_stale.clamp_to_room(),
                debts: live_debt.clamp_to_room(),
            });
        }
        if excess.is_positive() {
            m.outside_excess = Some(excess);
        }
        return Ok(());
    }
    if m.sum <= m.limit {
        return Ok(());
    }
    let allowed = match a.false_verdict.excess {
        Excess::Measured => {
            m.false_verdict_excess = Some(m.sum.excess_over(m.limit));
            return Ok(());
        }
        Excess::UpTo(r) => Some(r),
        Excess::None => None,
    };
    let bound = Delta::of(allowed.unwrap_or(Room::ZERO)) + a.rounding;
    if excess > bound {
        return Err(Violation::SharesAboveLimit {
            sum: m.sum,
            limit: m.limit,
            allowed,
        });
    }
    Ok(())
}

/// No Region took more of a pair's grants than the granter's record shows granted, while
/// neither closed the other's epoch.
fn accounts(newest: &[&RegionRecord]) -> Result<(), Violation> {
    for g in newest {
        for t in newest {
            if g.region() == t.region()
                || g.reclaims()[t.region()].is_some_and(|m| m.epoch() == t.epoch())
                || !g.accounts_with(t.region(), t.epoch())
                || !t.accounts_with(g.region(), g.epoch())
            {
                continue;
            }
            let over = (t.limits().iter().zip(g.limits()))
                .any(|(tl, gl)| tl.taken()[g.region()] > gl.granted()[t.region()]);
            if over {
                return Err(Violation::TookMoreThanGranted {
                    taker: t.region(),
                    granter: g.region(),
                });
            }
        }
    }
    Ok(())
}
