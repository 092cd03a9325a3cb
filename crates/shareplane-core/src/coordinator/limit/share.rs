//! The end of one limit's rebalance (SPEC §4): the debt paid, the target, the share's move
//! toward it and the grants of the pool, with the pool room that covers running peers' debts
//! kept for them (docs/PROTOCOL.md, "A debt is paid before anything is raised").

use crate::config::{Design, LimitSpec};
use crate::estate::grant_unit;
use crate::record::{LimitRecord, RegionRecord};
use crate::region::{RegionId, MAX_REGIONS};
use crate::room::{split, Room};
use crate::targets::targets;

use super::super::alarms::{checked, held_and_granted};
use super::super::{step, Alarms, LimitOutcome, PeerState};
use super::{Closure, LimitCtx};

impl LimitCtx<'_> {
    /// Steps 3 and 4: the share moves toward the target as the design says. Named grants lower
    /// it at once, raise it from the pool by at most the step cap, and grant the rest of the pool
    /// to the peers that need it; a fenced Region holds nothing (SPEC §6, "Fence").
    pub(super) fn move_share(
        &self,
        li: usize,
        spec: &LimitSpec,
        rec: &RegionRecord,
        e: &mut LimitRecord,
        out: &mut LimitOutcome,
        alarms: &mut Alarms,
    ) {
        match self.d.design {
            Design::JumpToTarget => jump_to_target(e),
            Design::NamedGrants if self.fenced => {
                checked(alarms, li, step::FENCE, e, LimitRecord::held, fence)
            }
            Design::NamedGrants => {
                // What the pool holds for running peers' debts is neither raised nor granted to
                // anyone else (docs/PROTOCOL.md, "A debt is paid before anything is raised").
                let owed = self.peers_owe(li, rec, e);
                checked(
                    alarms,
                    li,
                    step::LOWER_OR_RAISE,
                    e,
                    LimitRecord::held,
                    |e| lower_or_raise(e, spec.step_cap, owed),
                );
                // A Region in debt asks for its debt too; otherwise a Region whose target is zero
                // could never repay it.
                e.unmet = e.target - e.share + e.debt;
                checked(alarms, li, step::GRANT, e, held_and_granted, |e| {
                    self.grant(li, rec, e, out, owed)
                });
            }
        }
    }

    /// Step 2's target: `floor + (L − floor × n_live) × demand_i / Σ demand` over the Regions in
    /// targets (this one, live peers and silent peers that were not reclaimed).
    pub(super) fn target(&self, li: usize, e: &LimitRecord, demand: Room) -> Room {
        let mut weights = [0u64; MAX_REGIONS];
        let mut members = 0;
        let mut mine = 0;
        for r in crate::region::regions(self.d.n()) {
            let w = if r == self.me {
                mine = members;
                demand.milli()
            } else {
                match self.state(r) {
                    Some(PeerState::Live | PeerState::Silent) => {
                        let latest = &self.peers[r.index()].latest;
                        latest.limits.get(li).map_or(0, |l| l.demand.milli())
                    }
                    _ => continue,
                }
            };
            weights[members] = w;
            members += 1;
        }
        let mut parts = [Room::ZERO; MAX_REGIONS];
        targets(
            e.rate,
            self.d.limits[li].floor,
            &weights[..members],
            &mut parts[..members],
        );
        parts[mine]
    }

    /// Step 4: grant the pool to live peers by name: first to those in debt, up to their debts,
    /// then in proportion to the unmet needs they last published from what the pool holds beyond
    /// the debts of running peers it could not pay here (`owed`); each less what this Region
    /// already granted them and they have not taken yet.
    fn grant(
        &self,
        li: usize,
        rec: &RegionRecord,
        e: &mut LimitRecord,
        out: &mut LimitOutcome,
        owed: Room,
    ) {
        if e.pool.is_zero() {
            return;
        }
        // In whole grant units, so that a grant taken between two estates moves every heir's part
        // of both exactly (`estate::grant_unit`); a need smaller than a unit is not granted, and
        // the rest of the pool stays in it. `needs` and `units` count grant units.
        let n = self.d.n();
        let unit = grant_unit(n);
        let mut needs = [0u64; MAX_REGIONS];
        let mut debts = [0u64; MAX_REGIONS];
        for j in crate::region::regions(n).filter(|&r| r != self.me) {
            if self.state(j) != Some(PeerState::Live) || !matches!(self.closure(j), Closure::None) {
                continue;
            }
            let p = &self.peers[j.index()].latest;
            if !self.in_account(rec, j, p) {
                continue;
            }
            let Some(pl) = p.limits.get(li) else { continue };
            if pl.limit_version == 0 {
                continue;
            }
            let in_flight = e.granted[j].excess_over(pl.taken[self.me]);
            let need = pl.unmet.excess_over(in_flight);
            needs[j.index()] = need.milli() / unit;
            debts[j.index()] = (pl.debt.excess_over(in_flight).milli())
                .div_ceil(unit)
                .min(needs[j.index()]);
        }
        // Debts first, from the whole pool; the rest of the needs from what the pool holds
        // beyond the debts it could not pay here.
        let pool_units = e.pool.milli() / unit;
        let mut first = [Room::ZERO; MAX_REGIONS];
        hand_out(pool_units, &debts[..n], &mut first[..n]);
        let paid: u64 = first.iter().map(|u| u.milli()).sum();
        let held = owed.milli().div_ceil(unit).saturating_sub(paid);
        let free = (pool_units - paid).saturating_sub(held);
        for (need, f) in needs.iter_mut().zip(&first) {
            *need -= f.milli();
        }
        let mut units = [Room::ZERO; MAX_REGIONS];
        hand_out(free, &needs[..n], &mut units[..n]);
        for (i, u) in units.iter().enumerate().take(n) {
            let a = Room::from_milli((u.milli() + first[i].milli()) * unit);
            if a.is_zero() {
                continue;
            }
            let Some(j) = RegionId::new(i) else { continue };
            e.granted[j] += a;
            e.pool -= a;
            out.granted[j] = a;
        }
    }

    /// The debts the running peers last published for limit `li`, less what this Region has in
    /// flight to each: room held above the limit until it is paid (a settlement down or a
    /// lowering that found the room given on). Pool room that would cover them is kept for them
    /// (docs/PROTOCOL.md, "A debt is paid before anything is raised").
    fn peers_owe(&self, li: usize, rec: &RegionRecord, e: &LimitRecord) -> Room {
        let mut owed = Room::ZERO;
        for j in crate::region::regions(self.d.n()).filter(|&r| r != self.me) {
            if !matches!(self.state(j), Some(PeerState::Live | PeerState::Silent)) {
                continue;
            }
            let p = &self.peers[j.index()].latest;
            let Some(pl) = p.limits.get(li) else { continue };
            let in_flight = if self.in_account(rec, j, p) {
                e.granted[j].excess_over(pl.taken[self.me])
            } else {
                Room::ZERO
            };
            owed += pl.debt.excess_over(in_flight);
        }
        owed
    }

    /// This Region's share plus the last published shares of the peers it keeps in targets.
    pub(super) fn seen_sum(&self, li: usize, own_share: Room) -> u128 {
        let peers = crate::region::regions(self.d.n()).filter_map(|r| {
            let state = self.state(r)?;
            Some((state, &*self.peers[r.index()].latest))
        });
        super::super::alarms::seen_sum(li, own_share, peers)
    }
}

/// The comparison design (SPEC §3): the share is the target, with nothing pooled or asked for.
fn jump_to_target(e: &mut LimitRecord) {
    e.share = e.target;
    e.pool = Room::ZERO;
    e.unmet = Room::ZERO;
}

/// A fenced Region pools its whole share and asks for nothing.
fn fence(e: &mut LimitRecord) {
    e.pool += e.share;
    e.share = Room::ZERO;
    e.unmet = Room::ZERO;
}

/// Step 3: a share above its target is lowered to it at once, into the pool; one below it is
/// raised from the pool by at most `step_cap`, and never by what the pool holds for running
/// peers' debts (`owed`).
fn lower_or_raise(e: &mut LimitRecord, step_cap: Room, owed: Room) {
    if e.target < e.share {
        e.pool += e.share - e.target;
        e.share = e.target;
    } else {
        let raise = step_cap
            .min(e.pool.excess_over(owed))
            .min(e.target - e.share);
        e.share += raise;
        e.pool -= raise;
    }
}

/// Hands `pool` units out over `needs` (in units): every need whole if the pool holds them all,
/// otherwise in proportion, each part at most its need and some unit out whenever the pool
/// holds one.
fn hand_out(pool: u64, needs: &[u64], out: &mut [Room]) {
    let total: u128 = needs.iter().map(|&n| u128::from(n)).sum();
    if total == 0 {
        return;
    }
    if total <= u128::from(pool) {
        for (o, &n) in out.iter_mut().zip(needs) {
            *o = Room::from_milli(n);
        }
    } else {
        split(Room::from_milli(pool), needs, out);
    }
}

/// Pays a debt from the pool first, then by lowering the share.
pub(super) fn pay_debt(e: &mut LimitRecord) {
    if e.debt.is_zero() {
        return;
    }
    let from_pool = e.debt.min(e.pool);
    e.pool -= from_pool;
    e.debt -= from_pool;
    let from_share = e.debt.min(e.share);
    e.share -= from_share;
    e.debt -= from_share;
}
