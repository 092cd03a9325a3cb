//! What a checker allows at an instant: each residual risk the protocol states, as a type.

use shareplane_core::Room;

/// The allowances in force at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allowances {
    pub limit: Limit,
    pub false_verdict: FalseVerdict,
    /// Faults may still linger: the instant is before the liveness bound after the last fault.
    /// Only then may room be counted twice by stale heirs, and a lowered limit's debts widen the
    /// bound (by then every debt is repaid, whatever the records say).
    pub faults_may_linger: bool,
    pub stale_room: StaleRoom,
    pub assumptions: Assumptions,
    pub running_reclaimed: RunningReclaimed,
    /// How finely the shares were observed: an excess up to this is rounding (the end-to-end
    /// checker's enforced rates, one milli-request per second per Region), not an excess.
    pub rounding: Room,
}

/// The limit in force (docs/PROTOCOL.md, "Limit changes"), from what was rolled out, not from
/// what the records say: never above the larger of the old and the new rate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limit {
    /// The larger of the last two rates rolled out by now (while a change rolls out, and until
    /// a lowered limit's debts are paid, the shares may hold the larger one).
    pub in_force: Room,
    /// The largest rate of every version rolled out so far. A Region whose newest record holds
    /// an older version (lost, or its daemon died, before it adopted a change) widens the limit
    /// up to its record's rate, never past this: a record that claimed a rate never rolled out
    /// must not excuse its own excess. With a lowered limit's debt still owed, and faults still
    /// lingering, the limit is this.
    pub rolled_out: Room,
}

impl Limit {
    /// One rate, never changed.
    pub fn fixed(rate: Room) -> Limit {
        Limit {
            in_force: rate,
            rolled_out: rate,
        }
    }
}

/// A false "unhealthy" verdict for a live Region (residual risk 1): survivors may reclaim its
/// room while it still enforces its share.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FalseVerdict {
    /// How far the enforced shares may pass the limit meanwhile.
    pub excess: Excess,
    /// The audit is measured, not required to add up (its aftermath, until the liveness bound).
    pub audit_measured: bool,
}

/// How far the enforced shares may pass the limit under a false verdict.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Excess {
    /// Not at all.
    #[default]
    None,
    /// Any excess, measured and reported instead of failed (the simulator's false verdicts, whose
    /// excess SPEC §6 asks to state).
    Measured,
    /// Up to this room: what the falsely judged Region enforced when the verdict was put (the
    /// end-to-end checker).
    UpTo(Room),
}

/// Room that heirs which closed an estate against an older record than its last count twice in
/// the records (the audit's `over_stale`; docs/PROTOCOL.md, residual risk 4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StaleRoom {
    /// None at all: with true verdicts and no limit lowered, no heir holds room that another
    /// Region holds too (issue 31's property), in the records as in the shares.
    #[default]
    Forbidden,
    /// Excused in the records while faults linger, never in the shares within the assumptions:
    /// the aftermath of a false verdict (risk 1), and a lowered limit whose lowering reached an
    /// estate through an heir lost with it (an ended heir's own settlement down by the lowering,
    /// which its heirs' older basis does not show).
    WhileFaultsLinger,
}

/// Whether the deployment is one the protocol's safety argument covers (docs/PROTOCOL.md,
/// "The gateways' lease", Assumptions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Assumptions {
    /// A lease longer than a period, records visible within the lease arithmetic: zero room
    /// counted twice may reach the running Regions' shares.
    #[default]
    Within,
    /// Outside them (no lease, or records slower than the lease allows): the shares may pass the
    /// limit by no more than the stale room and the running Regions' debts, measured.
    Outside,
}

/// Room heirs took from an epoch that still runs (after a false verdict, the epoch runs on until
/// it sees the mark): counted twice in the records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RunningReclaimed {
    /// Never excused outside a false verdict's window: only room stale heirs count twice is.
    #[default]
    Never,
    /// Excused, with the stale room, while every running epoch that was closed enforces nothing
    /// (fenced until it sees the mark and comes back in a new epoch; fuzz seed 1544524): counted
    /// twice in the records, enforced once.
    WhileEnforcingNothing,
}

/// What the end-of-run check allows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndAllowances {
    pub stranded: Stranded,
}

/// Room left outside the running Regions' hands once every fault has ended (an estate not
/// taken, grants in flight that involve an ended epoch).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Stranded {
    /// None may be left.
    #[default]
    Forbidden,
    /// Judged only where the shares did not settle: the model checker's recovery, which requires
    /// exact conservation per instant where no false verdict was in force, and after one allows
    /// room stranded, never created (residual risk 1).
    WhereSettled,
}
