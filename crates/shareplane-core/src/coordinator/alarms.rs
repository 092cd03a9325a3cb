//! What a rebalance tells an operator, and the check that each step only moves room.

use super::PeerState;
use crate::record::{LimitRecord, RegionRecord};
use crate::region::{PerRegion, RegionId};
use crate::room::{Delta, Room};

/// Why one limit's share is what it is after a rebalance (for `explain`, the simulator's summary
/// and logs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimitOutcome {
    pub demand: Room,
    pub target: Room,
    pub share_before: Room,
    pub share_after: Room,
    pub pool_after: Room,
    pub unmet: Room,
    pub taken: PerRegion<Room>,
    pub granted: PerRegion<Room>,
    /// Room received by closing or settling a peer's estate (portion and grants taken back);
    /// a settlement that paid room back shows as zero.
    pub reclaimed: PerRegion<Room>,
}

/// Conditions an operator should be told about (SPEC §8).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Alarms {
    /// Limits for which this Region's own share plus the shares it sees exceed the rate.
    pub sum_above_limit: Vec<usize>,
    /// Peers exist and none of them wrote since the previous own rebalance.
    pub stale_view: bool,
    /// This Region found itself reclaimed (or was told to return), its fence lifted, or a restart
    /// resumed an epoch that its peers' records did not confirm, and it started a new epoch.
    pub new_epoch: bool,
    /// The own health verdict is Unhealthy and fencing lowered every capacity share to zero.
    pub fenced: bool,
    /// Peers whose estate this rebalance closed (reclaimed, or closed on their return).
    pub reclaimed: Vec<RegionId>,
    /// Peers whose estate this rebalance settled again against a newer record.
    pub settled: Vec<RegionId>,
    /// Peers that began a newer epoch whose ended epoch this Region cannot close yet, because the
    /// last record of that epoch has not reached it: their old room is frozen (held by nobody)
    /// until it does. Lasting, it is stranded room, and an operator should look.
    pub waiting_for_record: Vec<RegionId>,
    /// Silent peers whose check reads unhealthy that this Region does not reclaim yet, because
    /// the newest record it has of them may not be their newest (docs/PROTOCOL.md, "Reclaim
    /// against the newest record"): it counts silent another peer whose check does not read
    /// unhealthy, or a peer it sees knows a newer record. Their room is held by nobody (under
    /// the limit) until the cut heals or that peer reads unhealthy too. Also peers whose ended
    /// epoch this Region froze short of its last record, which it holds, while another heir may
    /// still hold the estate by an older one: the switch past that epoch (and the take of its
    /// grants) waits until every heir has settled down to the last record (docs/PROTOCOL.md,
    /// "Reclaim against an agreed basis").
    pub reclaim_waiting: Vec<RegionId>,
    /// Peers whose ended epoch this rebalance stopped waiting for, as an operator asked
    /// ([`crate::Coordinator::abandon`]): what it would have settled of it stays with nobody.
    pub abandoned: Vec<RegionId>,
    /// Limits whose new, higher rate this Region has not adopted yet because an earlier epoch
    /// of it may still owe its heirs (see [`crate::Coordinator::rebalance`] and docs/PROTOCOL.md, "A
    /// raise after an unpaid lowering"): the raise's room stays unused, under the limit, until
    /// every peer accounts with this Region's current epoch.
    pub raises_waiting: Vec<usize>,
    /// The peers those raises wait for: their latest record does not account with this
    /// Region's current epoch yet. A peer that is down holds the raise back until its next epoch
    /// has closed this Region's earlier ones; lasting, an operator should look.
    pub raise_waits_for: Vec<RegionId>,
    /// Steps of this rebalance that changed the room they only move (a bug in the core, never
    /// a fault of the world): `(limit index, step)`. Each step that moves room within this
    /// Region's own account is checked against the quantity it must keep: taking grants keeps
    /// `held − Σ taken`, paying debt, lowering, raising and fencing keep `held`, granting keeps
    /// `held + Σ granted`. The fuzzer and the model checker fail at the first; the daemon shows
    /// `room_not_conserved:<limit>:<step>`. The decision is returned all the same: which room
    /// is right cannot be known here, and the physical audit judges the whole.
    pub not_conserved: Vec<(usize, &'static str)>,
}

/// This Region's share of limit `li` plus the last published shares of the `peers` it keeps in
/// targets (every peer not reclaimed), in milli-requests per second: what
/// [`Alarms::sum_above_limit`] compares with the rate. The daemon's view reports it by this rule.
pub fn seen_sum<'a>(
    li: usize,
    own_share: Room,
    peers: impl IntoIterator<Item = (PeerState, &'a RegionRecord)>,
) -> u128 {
    let kept = peers
        .into_iter()
        .filter(|(state, _)| *state != PeerState::Reclaimed);
    kept.fold(u128::from(own_share.milli()), |sum, (_, rec)| {
        sum + rec
            .limits
            .get(li)
            .map_or(0, |l| u128::from(l.share.milli()))
    })
}

/// The steps [`Alarms::not_conserved`] names.
pub mod step {
    pub const TAKE: &str = "take";
    pub const PAY_DEBT: &str = "pay_debt";
    pub const FENCE: &str = "fence";
    pub const LOWER_OR_RAISE: &str = "lower_or_raise";
    pub const GRANT: &str = "grant";
}

/// `held − Σ taken`: what taking a grant keeps (the room arrives as it is counted taken).
pub(super) fn held_less_taken(e: &LimitRecord) -> Delta {
    e.held() - e.taken.0.iter().copied().map(Delta::of).sum::<Delta>()
}

/// `held + Σ granted`: what granting keeps (the room leaves as it is counted granted).
pub(super) fn held_and_granted(e: &LimitRecord) -> Delta {
    e.held() + e.granted.0.iter().copied().map(Delta::of).sum::<Delta>()
}

/// Runs `step` on `e` and names it in `alarms` if it changed what `kept` measures.
pub(super) fn checked(
    alarms: &mut Alarms,
    li: usize,
    name: &'static str,
    e: &mut LimitRecord,
    kept: fn(&LimitRecord) -> Delta,
    step: impl FnOnce(&mut LimitRecord),
) {
    let before = kept(e);
    step(e);
    if kept(e) != before {
        alarms.not_conserved.push((li, name));
    }
}

#[cfg(test)]
mod step_tests {
    use super::*;

    #[test]
    fn a_step_that_creates_or_destroys_room_is_named_and_one_that_moves_it_is_not() {
        let mut alarms = Alarms::default();
        let mut e = LimitRecord {
            share: Room::rps(100),
            pool: Room::rps(50),
            ..LimitRecord::default()
        };
        let b = RegionId::new(1).unwrap_or_else(|| panic!("Region 1"));
        // Moves: pool to share, pool to a grant, a take into the pool.
        checked(
            &mut alarms,
            0,
            step::LOWER_OR_RAISE,
            &mut e,
            LimitRecord::held,
            |e| {
                e.pool = Room::rps(20);
                e.share = Room::rps(130);
            },
        );
        checked(&mut alarms, 0, step::GRANT, &mut e, held_and_granted, |e| {
            e.pool = Room::rps(10);
            e.granted[b] = Room::rps(10);
        });
        checked(&mut alarms, 0, step::TAKE, &mut e, held_less_taken, |e| {
            e.pool += Room::rps(5);
            e.taken[b] = Room::rps(5);
        });
        assert_eq!(alarms.not_conserved, vec![]);
        // Creates: a raise that does not come out of the pool; destroys: a grant from nowhere.
        checked(
            &mut alarms,
            1,
            step::LOWER_OR_RAISE,
            &mut e,
            LimitRecord::held,
            |e| e.share += Room::rps(1),
        );
        checked(&mut alarms, 2, step::GRANT, &mut e, held_and_granted, |e| {
            e.pool = e.pool.excess_over(Room::rps(1000))
        });
        assert_eq!(
            alarms.not_conserved,
            vec![(1, step::LOWER_OR_RAISE), (2, step::GRANT)]
        );
    }
}
