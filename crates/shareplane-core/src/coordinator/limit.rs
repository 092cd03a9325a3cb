//! One limit's rebalance, step by step (SPEC §4): adopt the version rolled out, take grants,
//! close and settle estates, pay debt, aim at the target, move the share and grant the pool.

use crate::config::{Deployment, LimitKind, LimitSpec};
use crate::estate::{
    ended_took, estate_worth, heir_part_in, stale_rebase, Counterpart, FOLD_DEPTH,
};
use crate::record::{LimitRecord, RegionRecord};
use crate::region::RegionId;
use crate::room::{Delta, Room};
use std::cell::Cell;
use std::sync::Arc;

use super::alarms::{checked, held_less_taken};
use super::freeze::past_freeze;
use super::peers::Peer;
use super::plans::{Closure, Plan};
use super::{step, Alarms, LimitOutcome, PeerState};

mod share;

use share::pay_debt;

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
    /// The last records of this Region's ended epochs that it holds ([`LimitCtx::folded`]).
    pub(super) own_ended: super::OwnEnded<'a>,
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

    fn settle_ended(&self, j: RegionId) -> Option<&RegionRecord> {
        self.plans
            .get(j.index())
            .and_then(|p| p.as_ref())
            .and_then(|p| p.settle_ended.as_deref())
    }

    fn drops_carried(&self, j: RegionId) -> bool {
        self.plans
            .get(j.index())
            .and_then(|p| p.as_ref())
            .is_some_and(|p| p.drop_carried)
    }

    /// Whether this Region's account with `j` belongs to its current epoch (after this
    /// rebalance's drop of a carried account the peer closed).
    fn account_is_current(&self, rec: &RegionRecord, j: RegionId) -> bool {
        rec.account_epochs[j] == rec.epoch || self.drops_carried(j)
    }

    /// Clears every account carried from an earlier epoch that its peer closed. What this Region
    /// inherited from the peer (if anything) stays with its mark.
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
            if self.seen_sum(li, e.share) > u128::from(e.rate.milli()) {
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
            Closure::Switch { last, .. } => Some(last),
            Closure::Settle(newer) => Some(newer),
            Closure::Abandon => None,
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
            if past_freeze(rec, src) || !self.in_account(rec, j, src) {
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

    /// Closes, settles and switches each estate this rebalance acts on: this Region's fixed part
    /// of what the estate leaves its heirs ([`estate_worth`]), settled by difference against
    /// what it inherited from that estate before, and, against the epoch's last record only, its
    /// own grants to that epoch that it never took, back whole (docs/PROTOCOL.md, "Grants in
    /// flight"). A switch to the peer's next epoch starts the pair's counters afresh.
    fn close(&self, li: usize, rec: &RegionRecord, e: &mut LimitRecord, out: &mut LimitOutcome) {
        for j in crate::region::regions(self.d.n()).filter(|&r| r != self.me) {
            let mut came = Room::ZERO;
            if let Some(last) = self.settle_ended(j) {
                // An estate this Region closed and switched past: its basis is final, so only
                // what this Region learns of the estates that epoch inherited from, or of the
                // grants it had in flight, changes its part. Settled first, before a close of a
                // later epoch moves the mark on.
                came = self.inherit(li, rec, e, last, Move::Any);
            }
            out.reclaimed[j] = came;
            let (basis, closing) = match self.closure(j) {
                Closure::Reclaim(b) => (b, true),
                Closure::Switch { last, close } => (last, *close),
                Closure::Settle(newer) => (newer, false),
                Closure::Abandon => {
                    // Nothing moves: grants in flight either way stay with nobody.
                    e.granted[j] = Room::ZERO;
                    e.taken[j] = Room::ZERO;
                    continue;
                }
                Closure::None => continue,
            };
            if closing {
                e.reclaimed[j] = Room::ZERO;
                e.debt_taken[j] = Room::ZERO;
            }
            // What an earlier epoch of this Region inherited is that epoch's estate's, which its
            // heirs settle ([`LimitCtx::folded`]): this epoch settles only what it closed.
            let earlier = !closing && !rec.settles_mark_on(basis);
            // Past this Region's freeze, its part may go down at once, never up (it rises when
            // the freeze lifts: every other Region holds that record then, and settled it down).
            let way = if past_freeze(rec, basis) {
                Move::Down
            } else {
                Move::Any
            };
            if !earlier {
                out.reclaimed[j] += self.inherit(li, rec, e, basis, way);
            }
            if self.is_last(basis) && rec.accounts_with(j, basis.epoch) {
                // Against the last record only: what the peer's epoch took of this epoch's
                // grants is final, and the rest is this Region's again.
                let took = basis
                    .limits
                    .get(li)
                    .map_or(Room::ZERO, |l| l.taken[self.me]);
                let took = if basis.accounts_with(self.me, rec.epoch) {
                    took
                } else {
                    Room::ZERO
                };
                let back = e.granted[j].excess_over(took);
                e.granted[j] = e.granted[j].min(took);
                e.pool += back;
                out.reclaimed[j] += back;
            }
            if let Closure::Switch { .. } = self.closure(j) {
                // What this Region took of the epoch's grants in all (everything its last
                // record granted, if the account is this epoch's), kept past the counters.
                e.left[j] = e.taken[j];
                // The old epoch's last record was final: the pair with the next epoch starts
                // from zero (what was inherited stays with the mark).
                e.granted[j] = Room::ZERO;
                e.taken[j] = Room::ZERO;
            }
        }
    }

    /// Whether `basis`, a record of an estate, shows that its writer held a newer record of
    /// another estate than the one this Region last closed or settled that estate against (its
    /// mark), which is not known to be final: room may have moved from that estate into this one
    /// out of this Region's sight, and its part of the other is still the older record's.
    fn newer_elsewhere(&self, rec: &RegionRecord, basis: &RegionRecord) -> bool {
        crate::region::regions(self.d.n())
            .filter(|&x| x != self.me && x != basis.region)
            .any(|x| {
                rec.reclaims[x].is_some_and(|m| {
                    basis.seen[x] > (m.epoch, m.version)
                        && self.peers[x.index()].final_version(m.epoch) != Some(m.version)
                })
            })
    }

    /// Whether `basis` is known to be the last record of its epoch.
    fn is_last(&self, basis: &RegionRecord) -> bool {
        self.peers[basis.region.index()].final_version(basis.epoch) == Some(basis.version)
    }

    /// Whether this Region's part of the ended estate it switched past and still marks
    /// (`Plan::settle_ended`) would move now, in any limit: settled in this rebalance, under
    /// the mark, before a close of a later epoch moves the mark on (the mark's record is where
    /// every reader finds what it inherited from that estate).
    pub(super) fn ended_part_moves(&self, j: RegionId, rec: &RegionRecord) -> bool {
        let Some(last) = self.settle_ended(j) else {
            return false;
        };
        let n = self.d.n();
        rec.limits.iter().enumerate().any(|(li, l)| {
            let before = Delta::of(l.reclaimed[j]) - l.debt_taken[j];
            let held_back = Cell::new(false);
            let worth = self.worth(li, rec, l, last, true, Fold::top(&held_back));
            // A part that would rise but may not yet (past a freeze, or `newer_elsewhere`) keeps
            // the mark on the estate until it can (fresh classic seed 77030874: 3.8% of `L` left
            // with nobody once the mark moved on).
            let part = heir_part_in(worth, li, last, true, n, self.me, |g| {
                self.counterpart(li, rec, l, last, g)
            });
            held_back.get() || part != before
        })
    }

    /// Brings this Region's part of the estate of `basis`'s epoch up (or down) to what is known
    /// now: the difference to what it inherited before goes into the pool, or is paid from it
    /// (the rest becomes debt). Returns what came in.
    fn inherit(
        &self,
        li: usize,
        rec: &RegionRecord,
        e: &mut LimitRecord,
        basis: &RegionRecord,
        way: Move,
    ) -> Room {
        let n = self.d.n();
        let j = basis.region;
        let last = self.is_last(basis);
        let mut worth = self.worth(li, rec, e, basis, last, Fold::top(&Cell::new(false)));
        let b = basis.limits.get(li).copied().unwrap_or_default();
        if !last {
            worth += stale_rebase(&b, e, n, j);
        }
        if self.in_account(rec, j, basis) {
            // What the record grants this Region and it has not taken (a take past its freeze
            // waits) is room it cannot hold yet: not counted out of its part. Settling down by it
            // would leave that room owed to this Region alone, out of its own estate, which an heir
            // that closed this Region against an earlier record would count twice.
            worth += Delta::of(b.granted[self.me].excess_over(e.taken[j]));
        }
        let before = Delta::of(e.reclaimed[j]) - e.debt_taken[j];
        let part = heir_part_in(worth, li, basis, last, n, self.me, |g| {
            self.counterpart(li, rec, e, basis, g)
        });
        // Room may have moved into this estate from another that this Region closed against an
        // older record: until it sees that one's newer record (and settles it down), its part
        // here only goes down.
        let part = if way == Move::Down || self.newer_elsewhere(rec, basis) {
            part.min(before)
        } else {
            part
        };
        settle_to(e, j, before, part)
    }

    /// The worth of the estate of `basis`'s epoch as this Region knows it ([`estate_worth`]),
    /// with what that epoch inherited settled to this Region's newest records ([`Self::folded`]).
    /// `last`: `basis` is the epoch's last record.
    fn worth(
        &self,
        li: usize,
        rec: &RegionRecord,
        e: &LimitRecord,
        basis: &RegionRecord,
        last: bool,
        fold: Fold<'_>,
    ) -> Delta {
        let n = self.d.n();
        estate_worth(li, basis, last, n, |g| {
            self.counterpart(li, rec, e, basis, g)
        }) + self.folded(li, rec, e, basis, fold)
    }

    /// What the epoch of `basis` inherited from other estates, settled on its behalf to the
    /// newest record of each that this Region holds: for every estate `basis` marks as closed by
    /// its own epoch, that epoch's part of the estate's worth as known here, less what `basis`
    /// says it inherited (docs/PROTOCOL.md, "Inheritances belong to the epoch that closed
    /// them"). An inheritance is the closing epoch's: its Region's later epochs never settle it
    /// (`close`), so an ended epoch's heirs settle it, by this term of its estate's worth.
    ///
    /// Never raised by what this Region cannot count on: past its freeze of that estate, or
    /// where its record shows a newer record of another estate than this Region's mark, the
    /// term only lowers, and `held_back` is set if it would rise (the mark stays on the estate
    /// until it can, [`Self::ended_part_moves`]). An estate whose epoch ended past every record
    /// of it held here (its last record not held) may have moved all it held: its part counts
    /// as nothing until that record arrives, unless the close was against its last version.
    /// Two epochs that closed each other ([`RegionRecord::inherited_from`]) are left out: each
    /// Region's next epoch settles its side (`close`).
    fn folded(
        &self,
        li: usize,
        rec: &RegionRecord,
        e: &LimitRecord,
        basis: &RegionRecord,
        fold: Fold<'_>,
    ) -> Delta {
        if fold.depth >= FOLD_DEPTH {
            return Delta::ZERO;
        }
        let n = self.d.n();
        let h = basis.region;
        let b = basis.limits.get(li).copied().unwrap_or_default();
        let mut sum = Delta::ZERO;
        for x in crate::region::regions(n).filter(|&x| x != h) {
            let Some(m) = basis.reclaims[x].filter(|m| m.by == basis.epoch) else {
                continue;
            };
            let before = Delta::of(b.reclaimed[x]) - b.debt_taken[x];
            let (xrec, last) = match self.estate_record(rec, x, m.epoch) {
                Held::Record(r, _) if r.inherited_from(h) => continue,
                Held::Record(r, last) if r.version > m.version || last => (r, last),
                Held::Record(..) | Held::Nothing => continue,
                // Closed against the epoch's last record: only what its heirs learn later of the
                // grants it had in flight would raise the part, never lower it.
                Held::EndedPast(Some(v)) if v <= m.version => continue,
                Held::EndedPast(_) => {
                    sum -= before.max(Delta::ZERO);
                    continue;
                }
            };
            let mut w = self.worth(li, rec, e, xrec, last, fold.deeper());
            if !last {
                let xl = xrec.limits.get(li).copied().unwrap_or_default();
                w += stale_rebase(&xl, &b, n, x);
            }
            let d = heir_part_in(w, li, xrec, last, n, h, |g| {
                self.counterpart(li, rec, e, xrec, g)
            }) - before;
            let rises = !past_freeze(rec, xrec) && !self.newer_elsewhere(rec, xrec);
            fold.held_back
                .set(fold.held_back.get() || (!rises && d.is_positive()));
            sum += if rises { d } else { d.min(Delta::ZERO) };
        }
        sum
    }

    /// The newest record of Region `x`'s epoch `epoch` that this Region holds, and whether it is
    /// that epoch's last ([`Held`]).
    fn estate_record(&self, rec: &RegionRecord, x: RegionId, epoch: u64) -> Held<'_> {
        if x == self.me {
            if epoch >= rec.epoch {
                return Held::Nothing;
            }
            return match self.own_ended.get(epoch) {
                Some(r) => Held::Record(r, true),
                None => Held::EndedPast(self.own_ended.final_version(epoch)),
            };
        }
        let p = &self.peers[x.index()];
        if !p.seen {
            return Held::Nothing;
        }
        if let Some(r) = p.last_of(epoch) {
            return Held::Record(r, true);
        }
        if p.latest.epoch == epoch {
            return Held::Record(&p.latest, false);
        }
        Held::EndedPast(p.final_version(epoch))
    }

    /// What this Region knows of Region `g` with respect to the estate of `basis`'s epoch: what
    /// `g`'s epoch that the estate accounts with took of its grants, once that epoch has ended.
    /// For an earlier epoch of this Region: the counters this epoch carries from it or, once a
    /// switch has cleared them, what the switch kept (`left`).
    fn counterpart(
        &self,
        li: usize,
        rec: &RegionRecord,
        e: &LimitRecord,
        basis: &RegionRecord,
        g: RegionId,
    ) -> Counterpart {
        let x = basis.region;
        let ge = basis.peer_epochs[g];
        if g == self.me {
            if ge >= rec.epoch {
                return None;
            }
            let switched = rec.reclaims[x].is_some_and(|m| m.epoch == basis.epoch)
                && rec.peer_epochs[x] > basis.epoch;
            // The epoch's own last record, if held, says what it took, whatever the counters
            // carried since.
            let own_last = self.own_ended.get(ge);
            return (own_last.and_then(|r| ended_took(r, x, basis.epoch, ge, li)))
                .or_else(|| ended_took(rec, x, basis.epoch, ge, li))
                .or_else(|| switched.then_some(e.left[x]));
        }
        let p = &self.peers[g.index()];
        if !p.seen || p.latest.epoch <= ge {
            return None;
        }
        // The epoch's last record, or a later epoch's that still carries its counters (frozen
        // copies): never an earlier record of the epoch, whose counters may have grown since.
        let last = p.last_of(ge);
        let later = std::iter::once(&p.latest).chain(p.ended.values());
        last.into_iter()
            .chain(later.filter(|r| r.epoch > ge))
            .find_map(|end| ended_took(end, x, basis.epoch, ge, li))
    }
}

/// Sets this Region's part of `j`'s estate to `part` (it was `before`): the difference goes
/// into the pool, or is paid from it (the rest becomes debt). Returns what came in.
fn settle_to(e: &mut LimitRecord, j: RegionId, before: Delta, part: Delta) -> Room {
    e.reclaimed[j] = part.clamp_to_room();
    e.debt_taken[j] = (-part).clamp_to_room();
    let change = part - before;
    if !change.is_negative() {
        let more = change.clamp_to_room();
        e.pool += more;
        return more;
    }
    let owe = change.magnitude();
    let from_pool = owe.min(e.pool);
    e.pool -= from_pool;
    e.debt += owe - from_pool;
    Room::ZERO
}

/// How deep [`LimitCtx::folded`] has followed inheritances of inheritances, and where it says
/// that a term would rise but may not yet.
#[derive(Clone, Copy)]
struct Fold<'c> {
    depth: u8,
    held_back: &'c Cell<bool>,
}

impl<'c> Fold<'c> {
    fn top(held_back: &'c Cell<bool>) -> Fold<'c> {
        Fold {
            depth: 0,
            held_back,
        }
    }

    fn deeper(self) -> Fold<'c> {
        Fold {
            depth: self.depth + 1,
            ..self
        }
    }
}

/// What a Region holds of an epoch of another ([`LimitCtx::estate_record`]).
enum Held<'a> {
    /// Its newest record of the epoch, and whether that is the epoch's last.
    Record(&'a RegionRecord, bool),
    /// Nothing known beyond what the asking record says: its own running epoch, or a peer never
    /// heard of.
    Nothing,
    /// The epoch ended past every record of it held here; its last version, if known.
    EndedPast(Option<u64>),
}

/// Which way a settlement may move this Region's part of an estate.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Move {
    Any,
    Down,
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
