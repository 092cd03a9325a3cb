//! What the judge found broken, by kind.

use shareplane_core::{Audit, RegionId, Room};
use std::fmt;

/// A check that failed. Checkers add where and when (a tick, a trace, a tenth of a second).
#[derive(Clone, Debug, PartialEq)]
pub enum Violation {
    /// The room that exists is not the limit, and no allowance covers the difference.
    NotConserved(Box<Audit>),
    /// The enforced shares passed the limit by more than allowed (`allowed`: the false verdict's
    /// bounded allowance, if one was in force).
    SharesAboveLimit {
        sum: Room,
        limit: Room,
        allowed: Option<Room>,
    },
    /// Within the protocol's assumptions, room stale heirs count twice reached what gateways
    /// enforce.
    StaleRoomEnforced {
        excess: Room,
        limit: Room,
        stale: Room,
    },
    /// Outside the assumptions, the shares passed the limit by more than the stale room and the
    /// running Regions' debts.
    StaleRoomBeyondBound {
        sum: Room,
        limit: Room,
        stale: Room,
        debts: Room,
    },
    /// The room the running Regions hold passed the limit beyond the stale room.
    HeldAboveLimit {
        held: Room,
        limit: Room,
        stale: Room,
    },
    /// A Region took more of a pair's grants than the granter's record shows granted.
    TookMoreThanGranted { taker: RegionId, granter: RegionId },
    /// A core step changed the room it only moves (the core's own alarm: it can fail a run,
    /// never excuse one).
    CoreStepNotConserved { first: String, count: usize },
    /// A coordinator refused peer records (every record a checker delivers is honest).
    RecordsRefused(u64),
    /// Once every fault has ended, the shares sum above the last limit rolled out.
    FinalSharesAboveLimit { sum: Room, limit: Room },
    /// Once every fault has ended, room is outside the running Regions' hands.
    RoomOutsideRunning(Box<Audit>),
    /// What was to settle did not within its bound.
    NotSettled {
        what: String,
        after_ms: Option<u64>,
        bound_ms: u64,
        seen: String,
    },
    /// Admissions of every Region in the window of seconds `from..to` passed `2L + L·t` by
    /// `excess` requests, more than the `allowed` extra (SPEC §5).
    AdmissionsAboveContract {
        from: usize,
        to: usize,
        admitted: u64,
        excess: f64,
        allowed: f64,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::NotConserved(a) => write!(
                f,
                "conservation does not hold (expected {}, live {}, estates {}, grants in flight {}, taken twice {}, of it from stale records {}, from running epochs {}, bases missing {})",
                a.expected.clamp_to_room(),
                a.live.clamp_to_room(),
                a.estates.clamp_to_room(),
                a.pairs.clamp_to_room(),
                a.over.clamp_to_room(),
                a.over_stale.clamp_to_room(),
                a.over_running.clamp_to_room(),
                a.missing_basis
            ),
            Violation::SharesAboveLimit { sum, limit, allowed } => {
                let excess = sum.excess_over(*limit);
                write!(f, "the sum of shares {sum} exceeds the limit {limit} by {excess}")?;
                match allowed {
                    Some(a) => write!(f, " (allowed {a})"),
                    None => Ok(()),
                }
            }
            Violation::StaleRoomEnforced { excess, limit, stale } => write!(
                f,
                "the shares exceed the limit {limit} by {excess}: room heirs reclaimed from stale records ({stale}) reached what gateways enforce"
            ),
            Violation::StaleRoomBeyondBound { sum, limit, stale, debts } => write!(
                f,
                "the sum of shares {sum} exceeds the limit {limit} by more than the {stale} taken from stale records and the {debts} the running Regions and the ended epochs owe (a deployment outside the protocol's assumptions)"
            ),
            Violation::HeldAboveLimit { held, limit, stale } => write!(
                f,
                "the running Regions hold {held} above the limit {limit} (stale room {stale})"
            ),
            Violation::TookMoreThanGranted { taker, granter } => {
                write!(f, "{taker} took more from {granter} than it granted")
            }
            _ => self.fmt_end(f),
        }
    }
}

impl Violation {
    /// The end-of-run violations.
    fn fmt_end(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::CoreStepNotConserved { first, count } => write!(
                f,
                "a core step changed the room it only moves, {first} ({count} such steps in all)"
            ),
            Violation::RecordsRefused(n) => write!(
                f,
                "{n} peer records were refused by a coordinator (every simulated record is honest)"
            ),
            Violation::FinalSharesAboveLimit { sum, limit } => write!(
                f,
                "after every fault ended the sum of shares {sum} is above the limit {limit}"
            ),
            Violation::RoomOutsideRunning(a) => write!(
                f,
                "at the end {} of the limit is outside the running Regions' hands (estates not taken {}, grants in flight {})",
                a.outside_live().clamp_to_room(),
                a.estates.clamp_to_room(),
                a.pairs.clamp_to_room()
            ),
            Violation::NotSettled { what, after_ms, bound_ms, seen } => match after_ms {
                Some(ms) => write!(
                    f,
                    "{what} only {} s after the last fault ended (bound {} s; {seen})",
                    *ms as f64 / 1000.0,
                    *bound_ms as f64 / 1000.0
                ),
                None => write!(f, "{what} never after the last fault ended ({seen})"),
            },
            Violation::AdmissionsAboveContract { from, to, admitted, excess, allowed } => write!(
                f,
                "admissions in seconds {from}..{to}: {admitted}, above 2L + L·t by {excess:.0} (allowed {allowed:.0})"
            ),
            _ => Ok(()),
        }
    }
}
