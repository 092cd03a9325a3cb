//! What a rebalance does about each peer's estate: reclaim, switch to its next epoch, settle
//! again or give up; and the reclaim rule (docs/PROTOCOL.md, "Reclaim against a causally closed
//! basis").

use crate::config::SilentPolicy;
use crate::record::{ReclaimMark, RegionRecord};
use crate::region::{PerRegion, RegionId};

use super::peers::Peer;
use super::{Alarms, Coordinator, Health, PeerState};
use std::sync::Arc;

/// What this rebalance does about one peer's estate (at most one thing, so that a mark names
/// one epoch at a time).
#[derive(Clone)]
pub(super) enum Closure {
    None,
    /// Reclaim: take the peer's grants and this Region's part of its estate, from this record of
    /// the peer's current epoch.
    Reclaim(Arc<RegionRecord>),
    /// The peer's accounted epoch ended: close it from `last`, its last record (unless it was
    /// closed already: `close` false: settle it against that record), take back this epoch's
    /// grants to it that it never took, and account with the next epoch.
    Switch {
        last: Arc<RegionRecord>,
        close: bool,
    },
    /// Settle the close again against this record of the same epoch (newer than the basis, or
    /// the same with more known of the estate's grants in flight); against its last record,
    /// take back this epoch's grants to it that it never took.
    Settle(Arc<RegionRecord>),
    /// An operator gave up on the last record of the peer's ended epoch, which never reached
    /// this Region ([`Coordinator::abandon`]): account with the next epoch, taking nothing.
    Abandon,
}

/// This rebalance's plan for one peer.
#[derive(Clone)]
pub(super) struct Plan {
    pub(super) state: PeerState,
    pub(super) closure: Closure,
    /// The peer's epoch accounts with a later epoch of this Region than the account this Region
    /// carries: it closed the earlier one. Clear the carried counters and account from this
    /// epoch on.
    pub(super) drop_carried: bool,
    /// Silent and unhealthy, but not reclaimed: the basis may be stale.
    pub(super) reclaim_waits: bool,
    /// The last record of an ended epoch of the peer that this Region closed and has switched
    /// past: its estate's worth may still grow (an epoch it granted to ends without taking the
    /// grants, which are then the estate's), and this Region takes its part of what it grows by.
    pub(super) settle_ended: Option<Arc<RegionRecord>>,
}

impl Coordinator {
    /// This rebalance's plan for every peer (indexed by Region; `None` for this Region).
    pub(super) fn plan(
        &self,
        rec: &RegionRecord,
        health: &PerRegion<Health>,
        fenced: bool,
        alarms: &mut Alarms,
    ) -> Vec<Option<Plan>> {
        let d = &self.d;
        let mut plans = vec![None; d.n()];
        for j in crate::region::regions(d.n()).filter(|&r| r != self.me) {
            let plan = self.plan_peer(j, rec, health, fenced);
            match &plan.closure {
                Closure::Reclaim(_) | Closure::Switch { close: true, .. } => {
                    alarms.reclaimed.push(j)
                }
                Closure::Settle(newer)
                    if rec.reclaims[j].is_some_and(|m| newer.version > m.version) =>
                {
                    alarms.settled.push(j)
                }
                Closure::Abandon => alarms.abandoned.push(j),
                _ => {}
            }
            if plan.reclaim_waits {
                alarms.reclaim_waiting.push(j);
            }
            if !matches!(plan.closure, Closure::Abandon) && self.waits_for_record(j, rec) {
                alarms.waiting_for_record.push(j);
            }
            plans[j.index()] = Some(plan);
        }
        plans
    }

    fn plan_peer(
        &self,
        j: RegionId,
        rec: &RegionRecord,
        health: &PerRegion<Health>,
        fenced: bool,
    ) -> Plan {
        let p = &self.peers[j.index()];
        // The peer's epoch moved on past the epoch whose account this Region carries: it closed
        // that ended epoch against its last record (it took all that epoch granted it, and
        // its own grants to it are its own). A mark alone is not enough: the peer's epoch
        // may end before it switches.
        let drop_carried = p.seen
            && rec.carries_open(j)
            && p.latest.epoch == rec.peer_epochs[j]
            && p.latest.peer_epochs[self.me] > rec.account_epochs[j];
        let settle_ended = closed_and_passed(p, rec, j);
        let plan = |state, closure| Plan {
            state,
            closure,
            drop_carried,
            reclaim_waits: false,
            settle_ended: settle_ended.clone(),
        };
        if !p.seen {
            // Never heard of: kept in targets at its genesis demand, never a grantee, never
            // reclaimed.
            return plan(PeerState::Silent, Closure::None);
        }
        // A close of a later epoch moves this Region's mark off the earlier estate, and with it
        // the settlement of what that estate may still be handed: wait until it cannot grow.
        let earlier_open = settle_ended
            .as_ref()
            .is_some_and(|last| self.estate_may_grow(last));
        let acct = rec.peer_epochs[j];
        let mark = rec.mark_on_accounted(j);
        if p.latest.epoch > acct {
            let (state, closure) = ended_epoch_closure(p, acct, mark);
            if switch_waits(&closure, rec, earlier_open) {
                return Plan {
                    reclaim_waits: !earlier_open,
                    ..plan(PeerState::Silent, Closure::None)
                };
            }
            return plan(state, closure);
        }
        if mark.is_some() {
            // Settled again at every rebalance: against a newer record of the epoch, and with
            // whatever this Region has learnt since of the grants in flight to it.
            return match p.newest_of(acct) {
                Some(newer) => plan(PeerState::Reclaimed, Closure::Settle(newer.clone())),
                None => plan(PeerState::Reclaimed, Closure::None),
            };
        }
        let silent = p.silence.unchanged() >= self.d.silent_after;
        // A fenced Region is itself suspect (its own check says unhealthy): it reclaims nobody,
        // or two Regions cut off from each other and both wrongly called unhealthy would reclaim
        // each other.
        let reclaim = silent && !fenced && reclaimable(self.d.policy, health[j]);
        if reclaim && !earlier_open && !self.basis_in_doubt(j, &p.latest, rec, health) {
            plan(PeerState::Reclaimed, Closure::Reclaim(p.latest.clone()))
        } else if silent {
            Plan {
                reclaim_waits: reclaim,
                ..plan(PeerState::Silent, Closure::None)
            }
        } else {
            plan(PeerState::Live, Closure::None)
        }
    }

    /// Whether `basis`, the newest record of `j` this Region has, may not be the newest `j` wrote
    /// (two-signals only; docs/PROTOCOL.md, "Reclaim against a causally closed basis"). An estate
    /// closed against an older record than its newest one hands its heir a portion of room the
    /// estate may have granted on since, to Regions that hold it too. The heir closes only a
    /// basis that is causally closed in what it can know:
    ///
    /// - no record it holds refers to a newer record of `j`'s epoch: whatever the state of the
    ///   Region that wrote it (fresh, silent or lost: a record lost with its writer is evidence
    ///   all the same), no record marks a newer version of the epoch, accounts with a newer epoch
    ///   of `j`, or, on an account open on both sides, took more from `j` than `basis` granted it;
    /// - no Region whose records it may not hold may be alive: another peer whose record did not
    ///   change at this Region's last read (silent, or about to be: one cut off with the estate
    ///   is counted silent a read or two after it) and whose verdict is not unhealthy (healthy or
    ///   unknown) may be on the far side of a cut, where the estate's later records went. (A peer
    ///   never heard of holds nothing and is not counted.)
    ///
    /// Waiting leaves the estate's room unheld (under the limit, never over) until the records
    /// arrive or the other peer reads unhealthy too.
    fn basis_in_doubt(
        &self,
        j: RegionId,
        basis: &RegionRecord,
        rec: &RegionRecord,
        health: &PerRegion<Health>,
    ) -> bool {
        if self.d.policy != SilentPolicy::TwoSignals {
            return false;
        }
        let d = &self.d;
        let at = Some((basis.epoch, basis.version));
        // This Region's own earlier epochs are evidence too: a record of `j` newer than the basis
        // that one of them held may have given it room out of this epoch's sight. And it closes
        // only the record it froze at itself.
        if self.own.seen[j] > (basis.epoch, basis.version) || rec.frozen[j] != at {
            return true;
        }
        crate::region::regions(d.n())
            .filter(|&k| k != self.me && k != j)
            .any(|k| {
                let q = &self.peers[k.index()];
                q.seen
                    && ((health[k] != Health::Unhealthy && !self.froze(&q.latest, j, basis, rec))
                        || std::iter::once(&q.latest)
                            .chain(q.ended.values())
                            .any(|other| {
                                knows_newer(other, j, basis)
                                    || self.refers_past_lost(other, j, health)
                            }))
            })
    }

    /// Whether `other`, a record this Region holds, refers to a record of a lost Region `x`
    /// (unhealthy here; not `j`, whose own records `knows_newer` judges) newer than any of `x`
    /// this Region holds: that record never reached it, and whatever it says of `j` (it may have
    /// seen `j`'s later records, or taken `j`'s later grants) is out of its sight, however many
    /// hands it passed through. The basis is causally closed only once no record held refers to
    /// one not held (fresh swarm seed 78041417: two survivors, cut off one way from `j` and from
    /// `x`, closed `j` against its record from before the cut; `x`, which had taken `j`'s later
    /// grants, and the Region whose records said so were lost; 1,180/s counted twice in the
    /// records with every verdict true). A live `x` is judged by its freeze instead.
    fn refers_past_lost(
        &self,
        other: &RegionRecord,
        j: RegionId,
        health: &PerRegion<Health>,
    ) -> bool {
        crate::region::regions(self.d.n())
            .filter(|&x| x != self.me && x != j && x != other.region)
            .filter(|&x| health[x] == Health::Unhealthy)
            .any(|x| {
                let p = &self.peers[x.index()];
                let held = if p.seen {
                    (p.latest.epoch, p.latest.version)
                } else {
                    (0, 0)
                };
                other.seen[x] > held
            })
    }

    /// Whether the estate of `last`'s epoch (its last record) may still grow: a Region it
    /// accounts with, other than this one, whose epoch may still end without taking the
    /// estate's grants in flight to it (it has neither ended nor moved its account past the
    /// estate's epoch, which takes them all). Until then a heir that switched past the estate
    /// keeps its mark on it, to take its part of what it grows by. An ended epoch whose last
    /// record this Region does not hold counts as known: waiting would not bring it (the stores
    /// keep it `KEEP_ENDED_EPOCHS` epochs), and what it would add is left with nobody, under the
    /// limit. The same holds of the estates the epoch inherited, whose worth is part of its own
    /// (`LimitCtx::folded`), as deep as that follows them (fresh swarm seed 77079816: an heir
    /// switched past an estate whose inheritance still had grants in flight to a running epoch;
    /// that epoch ended without taking them, the estate grew, and 70.721/s was left with
    /// nobody).
    fn estate_may_grow(&self, last: &RegionRecord) -> bool {
        self.may_grow(last, 0)
    }

    fn may_grow(&self, last: &RegionRecord, depth: u8) -> bool {
        let x = last.region;
        let n = self.d.n();
        let direct = crate::region::regions(n)
            .filter(|&g| g != self.me && g != x && last.account_epochs[g] == last.epoch)
            .any(|g| {
                let ge = last.peer_epochs[g];
                let q = &self.peers[g.index()];
                let moved_on = q.latest.epoch == ge && q.latest.peer_epochs[x] > last.epoch;
                let ended = q.latest.epoch > ge;
                q.seen && !(moved_on || ended)
            });
        direct
            || (depth + 1 < crate::estate::FOLD_DEPTH
                && crate::region::regions(n).filter(|&y| y != x).any(|y| {
                    let Some(m) = last.reclaims[y].filter(|m| m.by == last.epoch) else {
                        return false;
                    };
                    self.ended_last(y, m.epoch)
                        .is_some_and(|r| !r.inherited_from(x) && self.may_grow(r, depth + 1))
                }))
    }

    /// The last record of Region `y`'s ended epoch `epoch` held here (this Region's own, which
    /// it keeps only of ended epochs, or a peer's).
    fn ended_last(&self, y: RegionId, epoch: u64) -> Option<&RegionRecord> {
        if y == self.me {
            return self.held_record(y, epoch);
        }
        self.peers[y.index()].last_of(epoch).map(|r| &**r)
    }

    /// A peer began a newer epoch but the last record of the epoch this Region accounts with has
    /// not reached it (so that epoch's room can be neither closed nor settled).
    pub(super) fn waits_for_record(&self, j: RegionId, rec: &RegionRecord) -> bool {
        let p = &self.peers[j.index()];
        let acct = rec.peer_epochs[j];
        p.seen && p.latest.epoch > acct && p.last_of(acct).is_none()
    }
}

/// The last record of the ended epoch of `p` (Region `j`) that this Region's current epoch
/// closed and has switched past, if it holds it (see `Plan::settle_ended`). An earlier epoch's
/// close is that epoch's estate's to settle (`LimitCtx::folded`), unless the two closed each
/// other (`RegionRecord::inherited_from`).
fn closed_and_passed(p: &Peer, rec: &RegionRecord, j: RegionId) -> Option<Arc<RegionRecord>> {
    let m = rec.reclaims[j].filter(|m| m.epoch < rec.peer_epochs[j])?;
    p.last_of(m.epoch)
        .filter(|last| rec.settles_mark_on(last))
        .cloned()
}

/// What to do about `p`'s accounted epoch `acct`, which ended (`mark`: this Region's mark on
/// it). Its last record is known exactly (the next epoch names its version): close against that
/// record and nothing older, settle a close made against an older one, or switch to the next
/// epoch; until the last record arrives, wait (or give up on it, as an operator asked).
fn ended_epoch_closure(p: &Peer, acct: u64, mark: Option<ReclaimMark>) -> (PeerState, Closure) {
    let Some(last) = p.last_of(acct) else {
        if p.abandon == Some(acct) && mark.is_none() {
            return (PeerState::Live, Closure::Abandon);
        }
        return (PeerState::Silent, Closure::None);
    };
    match mark {
        Some(m) if m.version < last.version => (PeerState::Silent, Closure::Settle(last.clone())),
        Some(_) => (
            PeerState::Live,
            Closure::Switch {
                last: last.clone(),
                close: false,
            },
        ),
        None => (
            PeerState::Live,
            Closure::Switch {
                last: last.clone(),
                close: true,
            },
        ),
    }
}

/// Whether a switch past an ended epoch waits: a close of it would move this Region's mark off an
/// earlier estate that may still grow (`earlier_open`), or this Region froze the epoch short of
/// its last record, from which the switch takes the epoch's grants, and some heir may still hold
/// the estate by an older one (docs/PROTOCOL.md, "Reclaim against an agreed basis").
fn switch_waits(closure: &Closure, rec: &RegionRecord, earlier_open: bool) -> bool {
    match closure {
        Closure::Switch { close: true, .. } if earlier_open => true,
        Closure::Switch { last, .. } => super::freeze::past_freeze(rec, last),
        _ => false,
    }
}

/// Whether `other`, a record of a third Region `k`, refers to a record of `j` newer than `basis`:
/// its writer had seen one, it accounts with a later epoch of `j`, it marks a newer version of
/// the epoch, or, on the same open account on both sides (neither has closed the other's epoch),
/// it took more from `j` than `basis` granted it (what `k` took never exceeds what `j` granted in
/// the record it took from). Only the first is needed of a writer that states what it saw; the
/// others are kept for records of writers that did not (`seen` of `(0, 0)`).
fn knows_newer(other: &RegionRecord, j: RegionId, basis: &RegionRecord) -> bool {
    let k = other.region;
    if other.seen[j] > (basis.epoch, basis.version) {
        return true;
    }
    if other.peer_epochs[j] != basis.epoch {
        return other.peer_epochs[j] > basis.epoch;
    }
    if other.reclaims[j].is_some_and(|m| m.epoch == basis.epoch && m.version > basis.version) {
        return true;
    }
    let same_account = basis.account_epochs[k] == other.peer_epochs[j]
        && basis.peer_epochs[k] == other.account_epochs[j]
        && basis.mark_on_accounted(k).is_none()
        && other.mark_on_accounted(j).is_none();
    same_account
        && other
            .limits
            .iter()
            .zip(&basis.limits)
            .any(|(o, b)| o.taken[j] > b.granted[k])
}

fn reclaimable(policy: SilentPolicy, health: Health) -> bool {
    match policy {
        SilentPolicy::Freeze => false,
        SilentPolicy::TwoSignals => health == Health::Unhealthy,
        SilentPolicy::SilenceAlone => true,
    }
}

/// Writes what the plans closed into the record: a mark for every close and settlement, and the
/// next accounted epoch for every switch.
pub(super) fn apply_marks(rec: &mut RegionRecord, plans: &[Option<Plan>]) {
    for (i, p) in plans.iter().enumerate() {
        let (Some(p), Some(j)) = (p, RegionId::new(i)) else {
            continue;
        };
        if p.drop_carried {
            rec.account_epochs[j] = rec.epoch;
        }
        match &p.closure {
            Closure::None => {}
            Closure::Reclaim(basis)
            | Closure::Switch {
                last: basis,
                close: true,
            } => {
                rec.reclaims[j] = Some(ReclaimMark {
                    epoch: basis.epoch,
                    version: basis.version,
                    by: rec.epoch,
                });
            }
            Closure::Settle(newer) => {
                if let Some(m) = rec.reclaims[j].as_mut() {
                    m.version = newer.version;
                }
            }
            Closure::Switch { close: false, .. } | Closure::Abandon => {}
        }
        if let Closure::Switch { .. } | Closure::Abandon = p.closure {
            rec.peer_epochs[j] += 1;
            rec.account_epochs[j] = rec.epoch;
        }
    }
}
