//! Why a Region's share of a limit is what it is, read from its own record and its view of the
//! peers: the first thing an operator asks ("why is my share 300 when my target is 900?"). Pure:
//! the daemon's `/v1/state` and `explain`, leader and follower alike, show it.

use crate::config::{Deployment, Design, LimitKind};
use crate::coordinator::PeerState;
use crate::record::RegionRecord;
use crate::region::RegionId;

/// What holds a share where it is, after the rebalance that wrote the record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Why {
    /// The Region has not adopted the limit yet (a limit added by a reload: from its next
    /// rebalance).
    NotAdopted,
    /// A security limit: a static split, never moved.
    StaticSplit,
    /// The jump-to-target design: the share is the target.
    JumpToTarget,
    /// The own health check reads unhealthy: every capacity share is fenced at zero.
    Fenced,
    /// A lowered limit's debt is being repaid (from the pool, the share and room received).
    InDebt,
    /// The share is its target, or as near it as grants in whole units go (short by less than
    /// `n − 1` units of `n − 1` milli-requests, `estate::settled_at`); `floor`: the target is the
    /// floor itself (no demand to speak of: every Region keeps at least the floor).
    AtTarget { floor: bool },
    /// Above its target: the next rebalance lowers it (a record not rebalanced since its target
    /// fell).
    AboveTarget,
    /// Below its target and rising by at most the step cap per period; the pool holds the rest.
    StepCap,
    /// Below its target with an empty pool: waiting for grants named to it. `from`: the peers
    /// that hold room above their own targets (they grant it as they lower); `silent`: peers
    /// counted silent, whose room nobody may use until they are heard from or reclaimed.
    WaitingForGrants {
        from: Vec<RegionId>,
        silent: Vec<RegionId>,
    },
}

impl Why {
    /// A stable name (for `/v1/state`, metrics and logs).
    pub fn name(&self) -> &'static str {
        match self {
            Why::NotAdopted => "not_adopted",
            Why::StaticSplit => "static_split",
            Why::JumpToTarget => "jump_to_target",
            Why::Fenced => "fenced",
            Why::InDebt => "in_debt",
            Why::AtTarget { floor: false } => "at_target",
            Why::AtTarget { floor: true } => "at_floor",
            Why::AboveTarget => "above_target",
            Why::StepCap => "step_cap",
            Why::WaitingForGrants { .. } => "waiting_for_grants",
        }
    }
}

/// One peer as the Region sees it: its state and its latest record (if any).
pub type PeerSeen<'a> = (RegionId, PeerState, Option<&'a RegionRecord>);

/// Why limit `li`'s share in `own` is what it is. `peers`: every peer as the Region sees it.
pub fn why(d: &Deployment, li: usize, own: &RegionRecord, peers: &[PeerSeen<'_>]) -> Why {
    let Some(spec) = d.limits.get(li) else {
        return Why::NotAdopted;
    };
    let Some(e) = own.limits.get(li).filter(|e| e.limit_version > 0) else {
        return Why::NotAdopted;
    };
    if let LimitKind::Security { .. } = spec.kind {
        return Why::StaticSplit;
    }
    if d.design == Design::JumpToTarget {
        return Why::JumpToTarget;
    }
    if own.fenced {
        return Why::Fenced;
    }
    if !e.debt.is_zero() {
        return Why::InDebt;
    }
    if e.share > e.target {
        return Why::AboveTarget;
    }
    let near = crate::estate::settled_at(e.share, e.target, d.n()) && e.pool.is_zero();
    if e.share == e.target || near {
        return Why::AtTarget {
            floor: e.target <= spec.floor,
        };
    }
    // Below target: the raise is min(step cap, pool, gap), so a pool left over means the step
    // cap stopped it, an empty pool that room must come by grants.
    if !e.pool.is_zero() {
        return Why::StepCap;
    }
    let mut from = Vec::new();
    let mut silent = Vec::new();
    for (r, state, rec) in peers {
        match state {
            PeerState::Live => {
                let spare = rec
                    .and_then(|p| p.limits.get(li))
                    .is_some_and(|l| l.share > l.target || !l.pool.is_zero());
                if spare {
                    from.push(*r);
                }
            }
            PeerState::Silent => silent.push(*r),
            _ => {}
        }
    }
    Why::WaitingForGrants { from, silent }
}
