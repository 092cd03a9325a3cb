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
