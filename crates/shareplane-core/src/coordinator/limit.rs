//! One limit's rebalance, step by step (SPEC §4): adopt the version rolled out, take grants,
//! close and settle estates, pay debt, aim at the target, move the share and grant the pool.

use crate::config::{Deployment, Design, LimitKind, LimitSpec};
use crate::estate::{estate_debt, estate_room, heir_portion};
use crate::record::{LimitRecord, RegionRecord};
use crate::region::{RegionId, MAX_REGIONS};
use crate::room::{split, Room};
use crate::targets::targets;
use std::sync::Arc;

use super::alarms::{checked, held_and_granted, held_less_taken};
use super::peers::Peer;
use super::plans::{Closure, Plan};
use super::{step, Alarms, LimitOutcome, PeerState};

pub(super) struct LimitCtx<'a> {
    pub(super) d: &'a Deployment,
    pub(super) me: RegionId,
    pub(super) peers: &'a [Peer],
    pub(super) plans: &'a [Option<Plan>],
    pub(super) fenced: bool,
    /// Every peer's latest record accounts with this Region's current epoch: each has closed
    /// every earlier epoch of this Region and taken its part of any debt those epochs ended in.
    /// Until then this Region does not adopt a raise (see [`adopt`]).
    pub(super) earlier_epochs_closed: bool,
}

impl LimitCtx<'_> {
    fn state(&self, j: RegionId) -> Option<PeerState> {
        self.plans.get(j.index())?.as_ref().map(|p| p.state)
    }

    fn closure(&self, j: RegionId) -> &Closure {
        const NONE: &Closure = &Closure::None;
        self.plans
            .get(j.index())
            .and_then(|p| p.as_ref())
            .map_or(NONE, |p| &p.closure)
    }

    fn drops_carried(&self, j: RegionId) -> bool {
        self.plans
            .get(j.index())
            .and_then(|p| p.as_ref())
            .is_some_and(|p| p.drop_carried)
    }

    /// Whether this Region's account with `j` belongs to its current epoch (after this
    /// rebalance's drop of a carried account the peer settled).
    fn account_is_current(&self, rec: &RegionRecord, j: RegionId) -> bool {
        rec.account_epochs[j] == rec.epoch || self.drops_carried(j)
    }

    /// Whether this Region's account with `j` is carried open from an earlier epoch.
    fn carries_open(&self, rec: &RegionRecord, j: RegionId) -> bool {
        rec.carries_open(j) && !self.drops_carried(j)
    }

    /// Clears every account carried from an earlier epoch that its peer settled. The portion
    /// this epoch reclaimed of the peer (if any) is kept for later settlements.
    fn drop_carried(&self, e: &mut LimitRecord) {
        for j in crate::region::regions(self.d.n()).filter(|&r| self.drops_carried(r)) {
            e.granted[j] = Room::ZERO;
            e.taken[j] = Room::ZERO;
        }
    }

    /// SPEC §4 for one limit, step by step: adopt the version rolled out, take the grants named
    /// to this Region, close and settle peers' estates, pay debt, aim at the target, move the
    /// share toward it and grant the pool. Every step that only moves room is checked
    /// ([`Alarms::not_conserved`]).
    pub(super) fn rebalance_limit(
        &self,
        li: usize,
        spec: &LimitSpec,
        demand: Room,
        rec: &RegionRecord,
        alarms: &mut Alarms,
    ) -> (LimitRecord, LimitOutcome) {
        let mut e = rec.limits.get(li).copied().unwrap_or_default();
        let mut out = LimitOutcome {
            demand,
            share_before: e.share,
            ..LimitOutcome::default()
        };
        if adopt(
            spec,
            &mut e,
            self.d.n(),
            self.me,
            self.earlier_epochs_closed,
        ) == Adoption::RaiseWaits
        {
            alarms.raises_waiting.push(li);
        }
        e.demand = demand;
        if let LimitKind::Security { .. } = spec.kind {
            self.hold_security_share(spec, &mut e);
        } else {
            self.drop_carried(&mut e);
            checked(alarms, li, step::TAKE, &mut e, held_less_taken, |e| {
                self.take(li, rec, e, &mut out)
            });
            self.close(li, rec, &mut e, &mut out);
            self.settle(li, rec, &mut e, &mut out);
            checked(
                alarms,
                li,
                step::PAY_DEBT,
                &mut e,
                LimitRecord::held,
                pay_debt,
            );
            e.target = self.target(li, &e, demand);
            self.move_share(li, spec, rec, &mut e, &mut out, alarms);
            if self.seen_sum(li, e.share) > u128::from(e.rate.0) {
                alarms.sum_above_limit.push(li);
            }
        }
        out.target = e.target;
        out.share_after = e.share;
        out.pool_after = e.pool;
        out.unmet = e.unmet;
        (e, out)
    }

    /// A security limit is split statically (SPEC §5): no pool, no grants, nothing unmet.
    fn hold_security_share(&self, spec: &LimitSpec, e: &mut LimitRecord) {
        e.share = spec.security_share(self.d.n(), self.me);
        e.pool = Room::ZERO;
        e.target = e.share;
        e.unmet = Room::ZERO;
    }

    /// Steps 3 and 4: the share moves toward the target as the design says. Named grants lower
    /// it at once, raise it from the pool by at most the step cap, and grant the rest of the pool
    /// to the peers that need it; a fenced Region holds nothing (SPEC §6, "Fence").
    fn move_share(
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
                checked(
                    alarms,
                    li,
                    step::LOWER_OR_RAISE,
                    e,
                    LimitRecord::held,
                    |e| lower_or_raise(e, spec.step_cap),
                );
                // A Region in debt after a downgrade asks for its debt too; otherwise a Region
                // whose target is zero could never repay it.
                e.unmet = e.target - e.share + e.debt;
                checked(alarms, li, step::GRANT, e, held_and_granted, |e| {
                    self.grant(li, rec, e, out)
                });
            }
        }
    }

    /// Whether grants between this Region's current epoch and `peer`'s record count now: each
    /// accounts with the other's epoch, and this Region's account with `j` is not one carried
    /// from an earlier epoch.
    fn in_account(&self, rec: &RegionRecord, j: RegionId, peer: &RegionRecord) -> bool {
        peer.accounts_with(self.me, rec.epoch)
            && rec.peer_epochs[j] == peer.epoch
            && self.account_is_current(rec, j)
    }

    /// The peer record that this rebalance takes grants from, if any.
    fn source(&self, j: RegionId) -> Option<&Arc<RegionRecord>> {
        match self.closure(j) {
            Closure::Reclaim(b) => Some(b),
            Closure::Switch { last, close: true } => Some(last),
            Closure::Switch { close: false, .. } => None,
            Closure::Settle(_) | Closure::Abandon => None,
            Closure::None => match self.state(j) {
                Some(PeerState::Live | PeerState::Silent) => Some(&self.peers[j.index()].latest),
                _ => None,
            },
        }
    }

    /// Step 1: take every grant named to this Region's epoch that it has not taken before.
    fn take(&self, li: usize, rec: &RegionRecord, e: &mut LimitRecord, out: &mut LimitOutcome) {
        for j in crate::region::regions(self.d.n()).filter(|&r| r != self.me) {
            let Some(src) = self.source(j) else { continue };
            if !self.in_account(rec, j, src) {
                continue;
            }
            let Some(sl) = src.limits.get(li) else {
                continue;
            };
            let amount = sl.granted[self.me].excess_over(e.taken[j]);
            e.pool += amount;
            e.taken[j] += amount;
            out.taken[j] = amount;
        }
    }

    /// Closes each estate this rebalance closes: this Region's fixed portion of the basis
    /// record's room, and its own grants that the basis shows untaken back. The counters are left
    /// as the basis tells them (this Region took everything the estate granted it, and the estate
    /// took exactly what the basis says), so a settlement later needs only the newer record.
    /// A switch whose old epoch was closed before starts the account with the next epoch afresh.
    ///
    /// An account carried open from an earlier epoch of this Region is settled only against the
    /// peer epoch's last record, at the switch: this Region takes back what its earlier epoch
    /// granted and the peer's epoch never took; what the peer's epoch granted the earlier one is
    /// the peer's successor's to take back in turn. A reclaim takes the portion only and leaves
    /// the carried account frozen until then.
    fn close(&self, li: usize, rec: &RegionRecord, e: &mut LimitRecord, out: &mut LimitOutcome) {
        let n = self.d.n();
        for j in crate::region::regions(n).filter(|&r| r != self.me) {
            let (basis, switch) = match self.closure(j) {
                Closure::Reclaim(b) => (b, false),
                Closure::Switch { last, close: true } => (last, true),
                Closure::Switch { last, close: false } => {
                    let back = self.carried_back(li, rec, e, j, last);
                    e.pool += back;
                    out.reclaimed[j] = back;
                    reset_account(e, j);
                    continue;
                }
                Closure::Abandon => {
                    // Nothing moves: grants in flight either way stay with nobody.
                    reset_account(e, j);
                    continue;
                }
                _ => continue,
            };
            let src = basis.limits.get(li).copied().unwrap_or_default();
            let portion = heir_portion(estate_room(&src), n, j, self.me);
            let owed = heir_portion(estate_debt(&src), n, j, self.me);
            let mut back = Room::ZERO;
            if self.carries_open(rec, j) {
                if switch {
                    back = self.carried_back(li, rec, e, j, basis);
                }
            } else if basis.accounts_with(self.me, rec.epoch) && rec.peer_epochs[j] == basis.epoch {
                back = e.granted[j].excess_over(src.taken[self.me]);
                e.granted[j] = src.taken[self.me];
            } else {
                debug_assert!(e.granted[j].is_zero() && e.taken[j].is_zero());
                reset_account(e, j);
            }
            e.pool += portion + back;
            e.debt += owed;
            e.reclaimed[j] = portion;
            e.debt_taken[j] = owed;
            out.reclaimed[j] = portion + back;
            if switch {
                // The old epoch's last record was final: nothing is left to settle.
                reset_account(e, j);
            }
        }
    }

    /// What this Region takes back of an account carried open from its earlier epoch, against
    /// `last`, the last record of the peer's epoch it is with: the earlier epoch's grants that
    /// the peer's epoch never took. That holds even if the peer's epoch closed the earlier one:
    /// what it took by then is all it takes (its later epochs never take grants by settlement).
    fn carried_back(
        &self,
        li: usize,
        rec: &RegionRecord,
        e: &LimitRecord,
        j: RegionId,
        last: &RegionRecord,
    ) -> Room {
        let acct = rec.account_epochs[j];
        if !self.carries_open(rec, j) || !last.accounts_with(self.me, acct) {
            return Room::ZERO;
        }
        let taken = last.limits.get(li).map_or(Room::ZERO, |l| l.taken[self.me]);
        e.granted[j].excess_over(taken)
    }

    /// Settles the last close of a peer's epoch again against a newer record of that epoch: the
    /// difference in this Region's portion and, when the newer record accounts with the epoch of
    /// this Region that closed it, in the grants each side took. A negative difference is paid
    /// from the pool, the rest becomes debt.
    fn settle(&self, li: usize, rec: &RegionRecord, e: &mut LimitRecord, out: &mut LimitOutcome) {
        let n = self.d.n();
        for j in crate::region::regions(n).filter(|&r| r != self.me) {
            let Closure::Settle(newer) = self.closure(j) else {
                continue;
            };
            let Some(mark) = rec.reclaims[j] else {
                continue;
            };
            let new = newer.limits.get(li).copied().unwrap_or_default();
            let portion = heir_portion(estate_room(&new), n, j, self.me);
            let owed = heir_portion(estate_debt(&new), n, j, self.me);
            let mut delta = portion.0 as i128 - e.reclaimed[j].0 as i128;
            delta -= owed.0 as i128 - e.debt_taken[j].0 as i128;
            e.debt_taken[j] = owed;
            if newer.accounts_with(self.me, mark.by)
                && (rec.account_epochs[j] == mark.by || self.drops_carried(j))
            {
                // If the peer's epoch closed this Region's epoch too (two false verdicts), its
                // `granted` counter was rewritten by its own close, and its settlements (of what
                // it took back) happen against this Region's records: only this Region's own
                // grants are settled here, or both sides would repay the same grants.
                let closed_me = newer.reclaims[self.me]
                    .is_some_and(|m| m.epoch == mark.by && m.by == newer.epoch);
                // Only the epoch that closed takes the peer's grants to it. The peer may close
                // that epoch in turn once it has ended, against its last record, and settles
                // its own grants by that record alone: a take by a later epoch would be held
                // twice (it is the peer's successor that takes back what was never taken).
                if !closed_me && rec.epoch == mark.by {
                    delta += new.granted[self.me].0 as i128 - e.taken[j].0 as i128;
                    e.taken[j] = new.granted[self.me];
                }
                delta -= new.taken[self.me].0 as i128 - e.granted[j].0 as i128;
                e.granted[j] = new.taken[self.me];
            }
            e.reclaimed[j] = portion;
            if delta >= 0 {
                e.pool += Room(delta as u64);
                out.reclaimed[j] = Room(delta as u64);
            } else {
                let owe = Room(delta.unsigned_abs() as u64);
                let from_pool = owe.min(e.pool);
                e.pool -= from_pool;
                e.debt += owe - from_pool;
            }
        }
    }

    /// Step 2's target: `floor + (L − floor × n_live) × demand_i / Σ demand` over the Regions in
    /// targets (this one, live peers and silent peers that were not reclaimed).
    fn target(&self, li: usize, e: &LimitRecord, demand: Room) -> Room {
        let mut weights = [0u64; MAX_REGIONS];
        let mut members = 0;
        let mut mine = 0;
        for r in crate::region::regions(self.d.n()) {
            let w = if r == self.me {
                mine = members;
                demand.0
            } else {
                match self.state(r) {
                    Some(PeerState::Live | PeerState::Silent) => {
                        let latest = &self.peers[r.index()].latest;
                        latest.limits.get(li).map_or(0, |l| l.demand.0)
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

    /// Step 4: grant the pool to live peers by name, in proportion to the unmet needs they last
    /// published, less what this Region already granted them and they have not taken yet.
    fn grant(&self, li: usize, rec: &RegionRecord, e: &mut LimitRecord, out: &mut LimitOutcome) {
        if e.pool.is_zero() {
            return;
        }
        let mut needs = [0u64; MAX_REGIONS];
        let mut total: u128 = 0;
        for j in crate::region::regions(self.d.n()).filter(|&r| r != self.me) {
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
            needs[j.index()] = need.0;
            total += need.0 as u128;
        }
        if total == 0 {
            return;
        }
        let n = self.d.n();
        let mut amounts = [Room::ZERO; MAX_REGIONS];
        if total <= e.pool.0 as u128 {
            for i in 0..n {
                amounts[i] = Room(needs[i]);
            }
        } else {
            split(e.pool, &needs[..n], &mut amounts[..n]);
        }
        for (i, a) in amounts.iter().enumerate().take(n) {
            if a.is_zero() {
                continue;
            }
            let Some(j) = RegionId::new(i) else { continue };
            e.granted[j] += *a;
            e.pool -= *a;
            out.granted[j] = *a;
        }
    }

    /// This Region's share plus the last published shares of the peers it keeps in targets.
    fn seen_sum(&self, li: usize, own_share: Room) -> u128 {
        let peers = crate::region::regions(self.d.n()).filter_map(|r| {
            let state = self.state(r)?;
            Some((state, &*self.peers[r.index()].latest))
        });
        super::alarms::seen_sum(li, own_share, peers)
    }
}

/// Clears the account with peer `j` (a new pair of epochs starts from zero).
fn reset_account(e: &mut LimitRecord, j: RegionId) {
    e.granted[j] = Room::ZERO;
    e.taken[j] = Room::ZERO;
    e.reclaimed[j] = Room::ZERO;
    e.debt_taken[j] = Room::ZERO;
}

/// Adopts a new limit version: room arrives or leaves in this Region's static part, so the sum of
/// shares never exceeds the larger of the old and the new rate while Regions disagree.
///
/// A **raise** waits until `earlier_epochs_closed`: an earlier epoch of this Region may have
/// ended in debt after a lowering (it had granted away the room the lowering took), and that debt
/// is room its heirs still hold above the limit until each has closed the epoch and taken its
/// part. Adopting the raise meanwhile would put the raise on top of that debt, above every rate
/// in play (fuzz seed 345378). Left at its old version, this Region's static part keeps the room
/// in existence at most `Σ part_i(largest rate in play)` (docs/PROTOCOL.md, "A raise after an
/// unpaid lowering"). A lowering, a version at the same rate and a first adoption never wait.
fn adopt(
    spec: &LimitSpec,
    e: &mut LimitRecord,
    n: usize,
    me: RegionId,
    may_raise: bool,
) -> Adoption {
    if spec.version <= e.limit_version {
        return Adoption::Current;
    }
    let old = LimitSpec::static_part(e.rate, n, me);
    let new = LimitSpec::static_part(spec.rate, n, me);
    let first = e.limit_version == 0;
    if new > old && !first && !may_raise {
        return Adoption::RaiseWaits;
    }
    e.limit_version = spec.version;
    e.rate = spec.rate;
    if new >= old {
        let more = new - old;
        if first {
            e.share += more;
        } else {
            e.pool += more;
        }
    } else {
        e.debt += old - new;
    }
    Adoption::Adopted
}

/// What [`adopt`] did with the version rolled out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Adoption {
    /// The record already runs this version (or a later one).
    Current,
    /// The version was adopted.
    Adopted,
    /// A raise that waits for every peer to account with this Region's current epoch.
    RaiseWaits,
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
/// raised from the pool by at most `step_cap`.
fn lower_or_raise(e: &mut LimitRecord, step_cap: Room) {
    if e.target < e.share {
        e.pool += e.share - e.target;
        e.share = e.target;
    } else {
        let raise = step_cap.min(e.pool).min(e.target - e.share);
        e.share += raise;
        e.pool -= raise;
    }
}

/// Pays a downgrade's debt from the pool first, then by lowering the share.
fn pay_debt(e: &mut LimitRecord) {
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
