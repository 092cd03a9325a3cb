//! Estates: the room of an epoch that ended, who inherits it, and the physical audit.
//!
//! An **estate** is what one epoch of a Region held when it ended (the Region was lost, or came
//! back in a newer epoch). This module owns the rules that decide who inherits it, and the one
//! audit that every observer (simulator, model checker, property and daemon tests) judges by.
//!
//! # Who inherits (view-independent)
//!
//! The estate's room (`share + pool − debt` of its last record) is split into `n − 1` **fixed
//! portions**, one for every other Region of the static Region list, by [`heir_portion`]: an even
//! split by index, remainder units to the lowest indices. A portion is addressed to a *Region*, not
//! to one of its epochs: whichever epoch of that Region first closes the estate takes it, and the
//! mark in its record (kept across its own epochs) says so. A portion whose heir is down waits
//! for the heir's next epoch. No Region's view of who is alive enters the rule, so no combination
//! of views can make the portions add up to more than the estate held. An estate worth less than
//! nothing charges the deficit to the Regions it granted first ([`heir_part_in`]): that room is
//! where its grants went, and an heir that received none of it could pay it from nothing.
//!
//! # Grants in flight (view-independent)
//!
//! A grant in flight is its **granter's** until its grantee takes it: a running granter takes
//! it back whole, but only against the grantee epoch's **last** record (until then it cannot rule
//! out that the grantee took it); a grantee that runs takes all of an ended granter's grants to
//! it; and an epoch that ended with grants in flight to another ended epoch leaves them in its
//! own estate, which [`estate_worth`] adds to what its heirs share, once its last record and
//! the grantee epoch's are known. Nothing else is ever taken whole: a Region's next epoch is not
//! its earlier epoch's heir and takes back nothing of its grants.
//!
//! Each heir settles by difference: its record keeps what it has inherited from the estate it
//! marks (`reclaimed − debt_taken`), and every rebalance moves the difference to its part of the
//! estate's worth as it knows it now. An heir's part never grows with what it cannot see
//! (docs/PROTOCOL.md, "Why no heir takes more than it is owed").
//!
//! The audit, which every observer judges by, is in [`audit`](mod@audit).

mod audit;

pub use audit::{audit, Audit, Truth};

use crate::config::LimitSpec;
use crate::record::{LimitRecord, RegionRecord, MAX_COUNTER};
use crate::region::{regions, RegionId};
use crate::room::{even_part, Delta, Room};

/// Region `heir`'s fixed portion of `room`, an estate of Region `owner` in a deployment of `n`
/// Regions: an even split over the `n − 1` other Regions in index order.
pub fn heir_portion(room: Room, n: usize, owner: RegionId, heir: RegionId) -> Room {
    if n < 2 || heir == owner {
        return Room::ZERO;
    }
    let position = heir.index() - usize::from(heir > owner);
    even_part(room, n - 1, position)
}

/// The room an estate's record leaves to its heirs: `share + pool − debt`, never below zero.
pub fn estate_room(l: &LimitRecord) -> Room {
    (l.share + l.pool).excess_over(l.debt)
}

/// What an observer knows of one Region `g` that an estate's epoch accounts with (its epoch
/// `basis.peer_epochs[g]`), for [`estate_worth`]: once that epoch has ended, all it took of the
/// estate's grants ([`ended_took`]); `None` while it runs or while the observer does not know.
pub type Counterpart = Option<Room>;

/// What epoch `ge` of Region `end.region`, which has ended, took of the grants of epoch `epoch`
/// of Region `x` in all, from `end`, a record that holds that epoch's counters as they ended (its
/// last record, or a later epoch's that still carries them): its `taken`; everything, if it
/// moved its account past `epoch` (a switch takes all the last record granted); `None` if the
/// record no longer says.
pub fn ended_took(end: &RegionRecord, x: RegionId, epoch: u64, ge: u64, li: usize) -> Option<Room> {
    if end.peer_epochs[x] == epoch && end.account_epochs[x] == ge {
        return Some(end.limits.get(li).map_or(Room::ZERO, |l| l.taken[x]));
    }
    (end.epoch == ge && end.peer_epochs[x] > epoch).then_some(Room::from_milli(MAX_COUNTER))
}

/// The signed room (milli-requests per second) the estate of `basis`'s epoch leaves its heirs,
/// for limit `li` in a deployment of `n` Regions (docs/PROTOCOL.md, "Grants in flight"). `last`
/// says `basis` is the epoch's last record; `took(g)` is what the observer knows of each Region
/// `g` the estate accounts with (`Counterpart`). It is `share + pool − debt` plus, once `basis`
/// is the last record, the estate's grants in flight to epochs that ended without taking them
/// (`granted − taken`): a grant in flight is its granter's until its grantee takes it, and an
/// epoch that ended leaves its own in its estate.
///
/// An heir's part of it never grows with what the heir cannot see, except by its own grants
/// and takes: a take by a grantee moves room from a granter's hand into the grantee's pool, and a
/// grant from the pool into flight, within one estate or between two the heir inherits alike
/// (docs/PROTOCOL.md, "Why no heir takes more than it is owed").
pub fn estate_worth(
    li: usize,
    basis: &RegionRecord,
    last: bool,
    n: usize,
    took: impl Fn(RegionId) -> Counterpart,
) -> Delta {
    let l = basis.limits.get(li).copied().unwrap_or_default();
    let mut worth = l.held();
    if !last {
        return worth;
    }
    for g in regions(n).filter(|&g| g != basis.region) {
        if basis.account_epochs[g] != basis.epoch {
            // The basis carries counters of an earlier epoch of its Region: not its own pair.
            continue;
        }
        if let Some(t) = took(g) {
            worth += l.granted[g].excess_over(t);
        }
    }
    worth
}

/// What an heir that runs limit version `heir` counts in the worth of an estate whose basis
/// `basis` (a record not known to be its epoch's last) holds an older version: the change of the
/// owner's static part down to the heir's rate, when that lowers it, and nothing otherwise.
///
/// The owner may have adopted every version up to the heir's in records the heir has not seen
/// (a cut hid them), paying for a lowering with room it no longer holds; the heir cannot tell
/// whether it did. Counting the lowering keeps a stale basis from carrying room that no longer
/// exists at the rates in force, whichever the owner did (docs/PROTOCOL.md, "Limit changes
/// against a stale basis"). A raise is never counted: an heir's part never grows with what it
/// cannot see. Against the epoch's last record nothing is counted: the owner's next epoch
/// adopts what its last record had not.
pub fn stale_rebase(basis: &LimitRecord, heir: &LimitRecord, n: usize, owner: RegionId) -> Delta {
    if basis.limit_version == 0 || basis.limit_version >= heir.limit_version {
        return Delta::ZERO;
    }
    let old = LimitSpec::static_part(basis.rate, n, owner);
    let new = LimitSpec::static_part(heir.rate, n, owner);
    -Delta::of(old.excess_over(new))
}

/// Region `heir`'s signed part of `worth`, an estate of Region `owner` of `n` Regions: its fixed
/// portion of the room, or of the debt (negative). For room it is [`heir_portion`]; whatever the
/// sign it is rounded down, the remainder going to the lowest positions, so that the parts add up
/// to `worth` and room that moves between two estates in multiples of `n − 1` units (every grant
/// is one, [`grant_unit`]) moves each heir's part of both by exactly its share: an heir that
/// sees such a move late holds neither more nor less than once it sees it (docs/PROTOCOL.md,
/// "Whole units").
pub fn heir_part(worth: Delta, n: usize, owner: RegionId, heir: RegionId) -> Delta {
    if n < 2 || heir == owner {
        return Delta::ZERO;
    }
    let position = heir.index() - usize::from(heir > owner);
    worth.even_part(n - 1, position)
}

/// Region `heir`'s signed part of `worth`, the worth of the estate of `basis`'s epoch in limit
/// `li` (`last`: `basis` is that epoch's last record; `took` as for [`estate_worth`]).
///
/// Room is split by [`heir_part`]. A **deficit** (negative worth) is room the epoch gave away
/// that its estate no longer covers (what it inherited was worth less than it counted, or a
/// lowering found its room granted on): it is where the grants went, so it is charged to the
/// Regions the epoch granted, each up to what its record granted it (lowest index first; a grant
/// in flight to an epoch that ended without taking it is the estate's, not the grantee's), and
/// only what those grants do not cover is split over every heir. An heir that never received
/// anything of the estate owes nothing of a deficit its grantees hold: a debt addressed to it
/// would be room held above the limit by others until it paid it, from room it does not hold
/// (docs/PROTOCOL.md, "A deficit is carried where the room went").
pub fn heir_part_in(
    worth: Delta,
    li: usize,
    basis: &RegionRecord,
    last: bool,
    n: usize,
    heir: RegionId,
    took: impl Fn(RegionId) -> Counterpart,
) -> Delta {
    let owner = basis.region;
    if !worth.is_negative() || n < 2 || heir == owner {
        return heir_part(worth, n, owner, heir);
    }
    let l = basis.limits.get(li).copied().unwrap_or_default();
    let mut deficit = worth.magnitude();
    let mut charged = Room::ZERO;
    for g in regions(n).filter(|&g| g != owner) {
        if basis.account_epochs[g] != basis.epoch {
            continue;
        }
        let gave = match took(g) {
            Some(t) if last => l.granted[g].min(t),
            _ => l.granted[g],
        };
        let c = deficit.min(gave);
        deficit -= c;
        if g == heir {
            charged = c;
        }
    }
    heir_part(-Delta::of(deficit), n, owner, heir) - Delta::of(charged)
}

/// The unit every grant of a deployment of `n` Regions is a multiple of, in milli-requests per
/// second: `n − 1`, the number of heirs an estate is split over ([`heir_part`]). A need smaller
/// than a unit is not granted.
pub const fn grant_unit(n: usize) -> u64 {
    if n < 2 {
        1
    } else {
        (n - 1) as u64
    }
}

/// Whether `share` has settled at `target` as far as grants in whole units let it, in a
/// deployment of `n` Regions: not above it, and short of it by less than `n − 1` grant units
/// (each other Region's pool may keep less than a unit, and a smaller need is not granted). With
/// 2 Regions the unit is one milli-request and the share reaches its target exactly.
pub fn settled_at(share: Room, target: Room, n: usize) -> bool {
    // Less than a grant unit (of `n − 1` milli-requests) in each of the `n − 1` other pools.
    let unit = grant_unit(n);
    share <= target && target.excess_over(share).milli() < unit * unit
}

/// How deep an estate's worth follows the inheritances of the epoch that ended
/// (`LimitCtx::folded`, and the audit alike): a chain of estates each closed by the next ends in
/// a Region that ran; a cycle (two epochs that closed each other, after false verdicts) is cut
/// here, its deeper terms counted as nothing.
pub(crate) const FOLD_DEPTH: u8 = 3;

/// How many epochs a Region's last record of an ended epoch outlives it, at least: an heir that
/// closes another estate later (a daemon that restarted with nothing in memory) may need it to
/// know what that epoch took of the estate's grants in flight ([`estate_worth`]).
pub const KEEP_ENDED_EPOCHS: u64 = 4;

/// Whether `owner`'s ended epoch `epoch` is closed for good, so that the store may collect its
/// kept last record: every other Region's (of `n`) latest record (`latest`) accounts with a
/// later epoch of `owner` and marks a later one, and the owner is at least [`KEEP_ENDED_EPOCHS`]
/// epochs past it. A heir moves its accounting past an epoch only by closing it against exactly
/// its last record, and its mark past it only by closing a later epoch, which it does not do while
/// it may still have to settle the earlier estate up (`Plan::settle_ended`): a heir lost while it
/// still marks the epoch needs the record when it comes back. The epochs kept after that are for
/// heirs of other estates that this epoch took grants of (docs/PROTOCOL.md, "Grants in flight").
/// A record that claims an epoch of `owner` beyond `owner_epoch`, the owner's current one, counts
/// as not closed. Every store that keeps ended epochs' records collects them by this rule.
pub fn closed_for_good<'a>(
    n: usize,
    owner: RegionId,
    owner_epoch: u64,
    epoch: u64,
    latest: impl Fn(RegionId) -> Option<&'a RegionRecord>,
) -> bool {
    let plausible = |e: u64| e >= epoch && e <= owner_epoch;
    epoch.saturating_add(KEEP_ENDED_EPOCHS) <= owner_epoch
        && regions(n).filter(|&r| r != owner).all(|r| {
            latest(r).is_some_and(|rec| {
                let acct = rec.peer_epochs[owner];
                acct > epoch
                    && plausible(acct)
                    && rec.reclaims[owner].is_some_and(|m| m.epoch > epoch && plausible(m.epoch))
            })
        })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::{Deployment, Design, Fence, SilentPolicy};
    use crate::record::ReclaimMark;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn deployment() -> Deployment {
        deployment_with(vec![])
    }

    /// Three Regions A, B and C under two-signals, with `limits`.
    pub(crate) fn deployment_with(limits: Vec<crate::config::LimitSpec>) -> Deployment {
        let d = Deployment {
            regions: vec!["A".into(), "B".into(), "C".into()],
            limits,
            design: Design::NamedGrants,
            policy: SilentPolicy::TwoSignals,
            fence: Fence::OwnUnhealthy,
            silent_after: 3,
            period_ms: 5_000,
        };
        Deployment::try_new(d).unwrap_or_else(|e| panic!("{e:?}"))
    }

    pub(crate) fn id(i: usize) -> RegionId {
        RegionId::new(i).unwrap_or_else(|| panic!("Region {i}"))
    }

    /// A heir's latest record: `(Region, accounts with A's epoch, marks A's epoch)`.
    type View = (usize, u64, Option<u64>);

    fn heirs(d: &Deployment, views: &[View]) -> BTreeMap<RegionId, Arc<RegionRecord>> {
        views
            .iter()
            .map(|&(r, acct, mark)| {
                let mut rec = RegionRecord::genesis(d, id(r));
                rec.peer_epochs.0[0] = acct;
                rec.reclaims.0[0] = mark.map(|epoch| ReclaimMark {
                    epoch,
                    version: 9,
                    by: 1,
                });
                (id(r), Arc::new(rec))
            })
            .collect()
    }

    /// What the whole-unit split rests on (docs/PROTOCOL.md, "Whole units"): the parts add up to
    /// the worth, and room moved between two estates in whole grant units moves every heir's part
    /// of each by exactly its share, whatever the signs, so an heir that sees the move in one
    /// estate's record before the other's holds neither more nor less in sum. The split before
    /// (the magnitude's portion, signed) and a grant off the unit both break it, by a unit.
    #[test]
    fn a_grant_in_whole_units_moves_every_heirs_part_exactly() {
        let magnitude_split = |w: Delta, n: usize, h: RegionId| {
            let p = Delta::of(heir_portion(w.magnitude(), n, id(0), h));
            if w.is_negative() {
                -p
            } else {
                p
            }
        };
        let (mut old_breaks, mut off_unit_breaks) = (false, false);
        for n in 2..=8 {
            let unit = grant_unit(n) as i128;
            for w in (-40..=40).map(Delta::from_milli) {
                let heirs = || regions(n).filter(|&h| h != id(0));
                let sum: Delta = heirs().map(|h| heir_part(w, n, id(0), h)).sum();
                assert_eq!(sum, w, "{n} Regions: the parts of {w:?} add up to it");
                for k in [-3i128, -1, 1, 2] {
                    let moved = w + Delta::from_milli(k * unit);
                    for h in heirs() {
                        let (before, after) =
                            (heir_part(w, n, id(0), h), heir_part(moved, n, id(0), h));
                        assert_eq!(
                            after - before,
                            Delta::from_milli(k),
                            "{n} Regions, {w:?} + {k} units, heir {h:?}"
                        );
                        let old = magnitude_split(moved, n, h) - magnitude_split(w, n, h);
                        old_breaks |= old != Delta::from_milli(k);
                        let off =
                            heir_part(w + Delta::from_milli(k * unit + 1), n, id(0), h) - before;
                        off_unit_breaks |= unit > 1 && off != Delta::from_milli(k);
                    }
                }
            }
        }
        assert!(
            old_breaks,
            "the signed magnitude split is not exact across zero"
        );
        assert!(
            off_unit_breaks,
            "a grant off the unit moves some part by a unit more or less"
        );
    }

    /// docs/PROTOCOL.md, "A deficit is carried where the room went": an estate that gave away
    /// more than it is worth charges the deficit to the Regions it granted, each up to what it
    /// granted it, and splits only the rest; room splits as before; the parts add up to the
    /// worth whatever the sign. An heir that received nothing owes nothing while the grants
    /// cover the deficit (the even split left it half, a debt it could pay from nothing).
    #[test]
    fn a_deficit_is_charged_to_the_regions_the_estate_granted() {
        let d = deployment();
        let (a, b, c) = (id(0), id(1), id(2));
        let mut rec = RegionRecord::genesis(&d, a);
        let mut l = LimitRecord::default();
        l.granted[b] = Room::from_milli(3_000);
        rec.limits = vec![l].into();
        let part_in = |rec: &RegionRecord, w: i128, h: RegionId, took: Counterpart, last: bool| {
            heir_part_in(Delta::from_milli(w), 0, rec, last, 3, h, |_| took)
        };
        let part = |w, h, took, last| part_in(&rec, w, h, took, last);
        for w in [-7_001, -5_000, -3_000, -2_000, -1, 0, 1, 4_001] {
            let sum = part(w, b, None, true) + part(w, c, None, true);
            assert_eq!(sum, Delta::from_milli(w), "the parts of {w} add up to it");
        }
        assert_eq!(part(-2_000, b, None, true), Delta::from_milli(-2_000));
        assert_eq!(
            part(-2_000, c, None, true),
            Delta::ZERO,
            "C received nothing"
        );
        assert_eq!(part(-5_000, b, None, true), Delta::from_milli(-4_000));
        assert_eq!(part(-5_000, c, None, true), Delta::from_milli(-1_000));
        assert_eq!(
            part(4_001, b, None, true),
            heir_part(Delta::from_milli(4_001), 3, a, b)
        );
        // A grant B's ended epoch never took is the estate's again, not B's to answer for.
        assert_eq!(
            part(-2_000, b, Some(Room::ZERO), true),
            Delta::from_milli(-1_000)
        );
        assert_eq!(
            part(-2_000, b, Some(Room::from_milli(500)), true),
            Delta::from_milli(-1_250)
        );
        // Not the last record: nothing is known to be back in the estate.
        assert_eq!(
            part(-2_000, b, Some(Room::ZERO), false),
            Delta::from_milli(-2_000)
        );
        // Counters carried from an earlier epoch of A are not this estate's grants.
        let mut carried = rec.clone();
        carried.account_epochs[b] = 0;
        assert_eq!(
            part_in(&carried, -2_000, c, None, true),
            Delta::from_milli(-1_000)
        );
    }

    #[test]
    fn an_epoch_is_closed_for_good_only_when_every_heir_accounts_and_marks_past_it() {
        let d = deployment();
        // (heir views, A's current epoch, kept epoch, collectable?)
        let cases: &[(&[View], u64, u64, bool)] = &[
            (&[(1, 4, Some(3)), (2, 4, Some(3))], 6, 2, true),
            (&[(1, 4, Some(3)), (2, 6, Some(5))], 6, 2, true),
            // Both switched past epoch 2 but still mark it: they may still settle it up (a
            // heir lost now needs the record when it comes back).
            (&[(1, 3, Some(2)), (2, 3, Some(2))], 6, 2, false),
            (&[(1, 4, Some(3)), (2, 3, Some(2))], 6, 2, false),
            // Closed by every heir, but kept until the owner is KEEP_ENDED_EPOCHS past it.
            (&[(1, 4, Some(3)), (2, 4, Some(3))], 5, 2, false),
            // C marks epoch 2 at its last version but still accounts with it.
            (&[(1, 3, Some(2)), (2, 2, Some(2))], 3, 2, false),
            // C never wrote.
            (&[(1, 3, Some(2))], 3, 2, false),
            // C accounts past epoch 2 without a mark of it (cannot happen; kept all the same).
            (&[(1, 3, Some(2)), (2, 3, Some(1))], 3, 2, false),
            (&[(1, 3, Some(2)), (2, 3, None)], 3, 2, false),
            // C claims an epoch of A that A never reached.
            (&[(1, 3, Some(2)), (2, 9, Some(8))], 3, 2, false),
            // Not an ended epoch of A.
            (&[(1, 3, Some(3)), (2, 3, Some(3))], 3, 3, false),
        ];
        for (i, (views, now, epoch, want)) in cases.iter().enumerate() {
            let latest = heirs(&d, views);
            assert_eq!(
                closed_for_good(d.n(), id(0), *now, *epoch, |r| latest.get(&r).map(|x| &**x)),
                *want,
                "case {i}"
            );
        }
        let single = Deployment::try_new(Deployment {
            regions: vec!["A".into()],
            ..deployment()
        })
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(
            closed_for_good(single.n(), id(0), 5, 1, |_| None),
            "a lone Region has no heirs to wait for"
        );
    }
}
