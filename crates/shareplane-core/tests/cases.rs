//! Data-driven cases for the worked numbers of SPEC §4 and §9 (G1, named grants).

mod support;

use expect_test::{expect, Expect};
use shareplane_core::*;
use support::*;

/// The 13:59 steady state: demands A 7,200, B 3,600, C 1,200, shares at their targets.
fn g1_world() -> World {
    let d = deployment(3, SilentPolicy::TwoSignals, Design::NamedGrants);
    let recs = initial_records(&d, &[5_600, 3_050, 1_350], &[7_200, 3_600, 1_200]);
    World::new(d, recs)
}

fn outcome(d: &Decision) -> String {
    let o = &d.outcomes[0];
    let names = ["A", "B", "C", "D", "E", "F", "G", "H"];
    let moved = |p: &PerRegion<Room>| {
        p.0.iter()
            .enumerate()
            .filter(|(_, r)| !r.is_zero())
            .map(|(i, r)| format!("{}:{}", names[i], rps(*r)))
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        "demand {} target {} share {} -> {} pool {} unmet {} taken [{}] granted [{}] reclaimed [{}]",
        rps(o.demand),
        rps(o.target),
        rps(o.share_before),
        rps(o.share_after),
        rps(o.pool_after),
        rps(o.unmet),
        moved(&o.taken),
        moved(&o.granted),
        moved(&o.reclaimed)
    )
}

fn check(decision: &Decision, expect: Expect) {
    expect.assert_eq(&outcome(decision));
}

#[test]
fn steady_state_targets_are_the_spec_targets() {
    let mut w = g1_world();
    check(&w.rebalance(0, 7_200.0), expect!["demand 7200 target 5600 share 5600 -> 5600 pool 0 unmet 0 taken [] granted [] reclaimed []"]);
    check(&w.rebalance(1, 3_600.0), expect!["demand 3600 target 3050 share 3050 -> 3050 pool 0 unmet 0 taken [] granted [] reclaimed []"]);
    check(&w.rebalance(2, 1_200.0), expect!["demand 1200 target 1350 share 1350 -> 1350 pool 0 unmet 0 taken [] granted [] reclaimed []"]);
}

#[test]
fn targets_after_the_move_once_everyone_publishes() {
    let d = deployment(3, SilentPolicy::TwoSignals, Design::NamedGrants);
    let recs = initial_records(&d, &[3_900, 2_200, 3_900], &[7_200, 3_600, 7_200]);
    let mut w = World::new(d, recs);
    let targets: Vec<f64> = (0..3)
        .map(|i| rps(w.rebalance(i, [7_200.0, 3_600.0, 7_200.0][i]).outcomes[0].target))
        .collect();
    assert_eq!(targets, vec![3_900.0, 2_200.0, 3_900.0]);
}

#[test]
fn c_target_from_its_partial_average_while_peers_publish_old_demand() {
    let mut w = g1_world();
    // At 14:00:03.3 C's five-second average is 5,160 (1.7 s of 1,200, 3.3 s of 7,200).
    check(&w.rebalance(2, 5_160.0), expect!["demand 5160 target 3248.1 share 1350 -> 1350 pool 0 unmet 1898.1 taken [] granted [] reclaimed []"]);
}

#[test]
fn a_lowers_to_4335_and_grants_to_c_by_name() {
    let mut w = g1_world();
    w.rebalance(2, 5_160.0);
    w.publish(2);
    check(&w.rebalance(0, 7_200.0), expect!["demand 7200 target 4334.6 share 5600 -> 4334.6 pool 0 unmet 0 taken [] granted [C:1265.4] reclaimed []"]);
    assert!(w.conservation().holds(), "{:?}", w.conservation());
}

#[test]
fn raise_is_capped_at_the_step_even_with_more_in_the_pool() {
    let mut w = g1_world();
    w.rebalance(2, 5_160.0);
    w.publish(2);
    w.rebalance(0, 7_200.0);
    w.publish(0);
    w.rebalance(1, 3_600.0);
    w.publish(1);
    // C takes 1,265.4 + 633 and raises by the step cap only.
    check(&w.rebalance(2, 7_200.0), expect!["demand 7200 target 3900 share 1350 -> 2350 pool 898.1 unmet 1550 taken [A:1265.4,B:632.7] granted [] reclaimed []"]);
    // 4,334.6 + 2,417.3 + 2,350 (the spec rounds the first two to 4,335 and 2,417).
    assert_eq!(
        w.sum_shares(),
        Room::from_milli(4_334_587 + 2_417_293 + 2_350_000)
    );
    assert!(w.conservation().holds());
}

#[test]
fn no_grant_without_a_published_unmet_need() {
    let mut w = g1_world();
    // C's demand rose but nobody has seen C's record: A lowers and keeps the room in its pool.
    check(&w.rebalance(0, 3_000.0), expect!["demand 3000 target 3769.2 share 5600 -> 3769.2 pool 1830.8 unmet 0 taken [] granted [] reclaimed []"]);
    assert!(w.conservation().holds());
}

#[test]
fn g1_named_grants_converge_to_the_new_targets_without_exceeding_the_limit() {
    let mut w = g1_world();
    let demand = [7_200.0, 3_600.0, 7_200.0];
    // Staggered rounds; every record is visible before the next Region's turn.
    for round in 0..8 {
        for i in [2, 0, 1] {
            let dem = if round == 0 && i == 2 {
                5_160.0
            } else {
                demand[i]
            };
            w.rebalance(i, dem);
            w.publish(i);
            assert!(w.sum_shares() <= Room::rps(10_000));
            assert!(w.conservation().holds());
        }
    }
    let shares: Vec<f64> = (0..3).map(|i| rps(w.share(i))).collect();
    assert_eq!(shares, vec![3_900.0, 2_200.0, 3_900.0]);
}

#[test]
fn jump_to_target_overshoots_while_views_disagree() {
    let d = deployment(3, SilentPolicy::TwoSignals, Design::JumpToTarget);
    let recs = initial_records(&d, &[5_600, 3_050, 1_350], &[7_200, 3_600, 1_200]);
    let mut w = World::new(d, recs);
    w.rebalance(2, 5_160.0);
    assert_eq!(
        w.sum_shares(),
        Room::from_milli(5_600_000 + 3_050_000 + 3_248_120)
    );
}

/// [`why`] for Region `i` of `w`, from its own record and its coordinator's view of the peers.
fn why_of(w: &World, i: usize) -> Why {
    let c = &w.coords[i];
    let peers: Vec<PeerSeen<'_>> = c
        .peers()
        .iter()
        .map(|p| (p.region, p.state, c.latest(p.region).map(|r| &**r)))
        .collect();
    why(&w.d, 0, c.own(), &peers)
}

#[test]
fn why_names_what_holds_each_share_through_g1() {
    // A Region with no demand keeps the floor, and lowers to it at once.
    let mut idle = g1_world();
    idle.rebalance(1, 0.0);
    assert_eq!(rps(idle.share(1)), 500.0);
    assert_eq!(why_of(&idle, 1), Why::AtTarget { floor: true });
    assert_eq!(why_of(&idle, 1).name(), "at_floor");
    let mut w = g1_world();
    // 13:59, steady: every share is its target (C's 1,350 is the floor and its part of the rest).
    w.rebalance(2, 1_200.0);
    assert_eq!(why_of(&w, 2), Why::AtTarget { floor: false });
    // 14:00:03.3: C's target jumps, its pool is empty and nobody has lowered yet.
    w.rebalance(2, 5_160.0);
    assert_eq!(
        why_of(&w, 2),
        Why::WaitingForGrants {
            from: vec![],
            silent: vec![]
        }
    );
    w.publish(2);
    // A lowers and grants C by name; B, not rebalanced since, is still above its new target.
    w.rebalance(0, 7_200.0);
    w.publish(0);
    w.rebalance(1, 3_600.0);
    w.publish(1);
    // C takes both grants and raises by the step cap only: the rest waits in its pool.
    w.rebalance(2, 7_200.0);
    assert_eq!(why_of(&w, 2), Why::StepCap);
    assert_eq!(Why::StepCap.name(), "step_cap");
}

#[test]
fn why_names_the_peers_that_can_grant_and_the_silent_ones_that_cannot() {
    let mut w = g1_world();
    // A lowers without seeing C's need and keeps the room in its pool.
    w.rebalance(0, 3_000.0);
    w.publish(0);
    w.rebalance(2, 5_160.0);
    let (a, b) = (rid(0), rid(1));
    assert_eq!(
        why_of(&w, 2),
        Why::WaitingForGrants {
            from: vec![a],
            silent: vec![]
        }
    );
    // Nobody writes again: after three unchanged rebalances C counts both silent, and their
    // room waits for them (or for their reclaim).
    for _ in 0..3 {
        w.rebalance(2, 5_160.0);
    }
    assert_eq!(
        why_of(&w, 2),
        Why::WaitingForGrants {
            from: vec![],
            silent: vec![a, b]
        }
    );
}
