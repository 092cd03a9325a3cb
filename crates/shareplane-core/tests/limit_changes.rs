//! Limit changes across epochs: a raise that follows a lowering a Region had not paid.

mod support;

use shareplane_core::*;
use support::*;

fn at(d: &Deployment, version: u64, rps: u64) -> Vec<LimitSpec> {
    let mut spec = d.limits[0].clone();
    spec.version = version;
    spec.rate = Room::rps(rps);
    vec![spec]
}

/// Fuzz seed 345378, by hand. A grants its room to B, the limit is lowered from 10,000 to
/// 6,000 (A owes more than it holds), A is lost before it pays, the limit is raised to 12,000,
/// and A comes back in a new epoch; A's last record of its old epoch reaches B only then. B
/// still holds the room A's old epoch owes until it closes that epoch and takes the debt on;
/// had A adopted the raise meanwhile, the running Regions would hold 12,000 plus that debt. A
/// waits for B's record to account with its new epoch (and says so in its alarms), and the room
/// ends exactly at the new limit.
#[test]
fn a_new_epoch_adopts_a_raise_only_once_its_ended_epochs_debt_is_taken() {
    let d = deployment(2, SilentPolicy::TwoSignals, Design::NamedGrants);
    let recs = initial_records(&d, &[5_000, 5_000], &[100, 9_000]);
    let mut w = World::new(d.clone(), recs);
    for _ in 0..12 {
        for i in 0..2 {
            w.rebalance(i, [100.0, 9_000.0][i]);
            w.publish(i);
        }
    }
    assert!(w.share(0) < Room::rps(1_000), "A granted its room to B");

    for i in 0..2 {
        w.coords[i].set_limits(at(&d, 2, 6_000)).expect("valid");
    }
    w.rebalance(0, 100.0);
    let a = w.coords[0].own().limits()[0];
    assert!(
        a.debt() > a.share() + a.pool(),
        "A owes more than it holds: {a:?}"
    );
    w.lose(0);
    for _ in 0..4 {
        w.rebalance(1, 9_000.0);
    }
    w.coords[1].set_limits(at(&d, 3, 12_000)).expect("valid");
    w.rebalance(1, 9_000.0);
    assert_eq!(w.coords[1].own().limits()[0].limit_version(), 3);

    let largest = Delta::of(Room::rps(12_000));
    // A's last record reaches B only now (B never granted to A's debt).
    w.publish(0);
    w.restart(0, 60_000, at(&d, 3, 12_000));
    let waiting = w.rebalance(0, 100.0);
    assert!(w.live_room() <= largest, "live room {}", w.live_room());
    assert_eq!(
        (
            waiting.alarms.raises_waiting,
            waiting.alarms.raise_waits_for
        ),
        (vec![0], vec![rid(1)]),
        "the held-back raise is named, and the peer it waits for"
    );
    let a = w.coords[0].own();
    assert_eq!(a.epoch(), 2, "A is back in a new epoch");
    assert_eq!(
        a.limits()[0].limit_version(),
        2,
        "A waits before it adopts the raise"
    );
    // A's record (and its epoch's) reaches B: B closes the old epoch and takes its debt.
    w.publish(0);
    w.rebalance(1, 9_000.0);
    assert_eq!(w.coords[1].own().peer_epochs()[rid(0)], 2);
    w.publish(1);
    let adopted = w.rebalance(0, 100.0);
    assert_eq!(adopted.alarms.raises_waiting, Vec::<usize>::new());
    assert_eq!(adopted.alarms.raise_waits_for, vec![]);
    w.publish(0);
    for _ in 0..20 {
        for i in 0..2 {
            w.rebalance(i, [100.0, 9_000.0][i]);
            w.publish(i);
            assert!(w.live_room() <= largest, "live room {}", w.live_room());
            assert!(w.sum_shares() <= Room::rps(12_000));
        }
    }
    let a = w.coords[0].own().limits()[0];
    assert_eq!(a.limit_version(), 3, "A adopted the raise");
    assert_eq!(w.live_room(), largest, "the room is exactly the new limit");
    let debts = a.debt() + w.coords[1].own().limits()[0].debt();
    assert_eq!(debts, Room::ZERO);
}

/// A lowering never waits: a new epoch adopts it at once and owes the difference.
#[test]
fn a_new_epoch_adopts_a_lowering_at_once() {
    let d = deployment(2, SilentPolicy::TwoSignals, Design::NamedGrants);
    let recs = initial_records(&d, &[5_000, 5_000], &[5_000, 5_000]);
    let mut w = World::new(d.clone(), recs);
    w.rebalance(0, 5_000.0);
    w.lose(0);
    w.restart(0, 60_000, at(&d, 2, 8_000));
    let lowered = w.rebalance(0, 5_000.0);
    let a = w.coords[0].own();
    assert_eq!((a.epoch(), a.limits()[0].limit_version()), (2, 2));
    assert_eq!(lowered.alarms.raises_waiting, Vec::<usize>::new());
}

/// Swarm seeds 71041621 and 71045361's class: a Region cut off from every peer adopts a lowered
/// limit and pays for it in records nobody sees, then is lost. Its heirs close its estate
/// against its record from before the lowering; counted at that record's rate, the estate would
/// hand them room that no longer exists at the rates in force (1,000/s here: 8,000 on a limit
/// of 7,000). An heir counts the lowering in a basis of an older version
/// (`estate::stale_rebase`), and the room ends exactly at the new limit.
#[test]
fn heirs_count_a_lowering_their_stale_basis_predates() {
    let d = deployment(3, SilentPolicy::TwoSignals, Design::NamedGrants);
    let recs = initial_records(&d, &[3_000, 3_000, 4_000], &[3_000, 3_000, 4_000]);
    let mut w = World::new(d.clone(), recs);
    for _ in 0..3 {
        for i in 0..3 {
            w.rebalance(i, 3_000.0);
            w.publish(i);
        }
    }
    // B is cut off: its records reach nobody. Every Region adopts the lowering; B pays for it.
    for i in 0..3 {
        w.coords[i].set_limits(at(&d, 2, 7_000)).expect("valid");
    }
    for _ in 0..3 {
        w.rebalance(1, 3_000.0);
    }
    let b = w.coords[1].own().limits()[0];
    assert_eq!(
        (b.limit_version(), b.debt()),
        (2, Room::ZERO),
        "B paid: {b:?}"
    );
    w.lose(1);
    w.health[rid(1)] = Health::Unhealthy;
    let limit = Room::rps(7_000);
    for _ in 0..8 {
        for i in [0, 2] {
            w.rebalance(i, 3_000.0);
            w.deliver(i, 2 - i);
            assert!(
                w.live_room() <= Delta::of(limit),
                "live room {}",
                w.live_room()
            );
        }
        // Once both have adopted, their gateways enforce no more than the new limit.
        let live = w.share(0) + w.share(2);
        assert!(live <= limit, "live shares {live}");
    }
    for i in [0, 2] {
        let mark = w.coords[i].own().reclaims()[rid(1)].expect("B's estate closed");
        assert!(
            mark.version() < b_last_version(&w),
            "closed against a stale basis"
        );
    }
    let audit = w.conservation();
    assert!(audit.holds(), "{audit:?}");
    assert_eq!(
        w.live_room(),
        Delta::of(limit),
        "every unit of the new limit is held"
    );
}

fn b_last_version(w: &World) -> u64 {
    w.written[1].last().map_or(0, |r| r.version())
}
