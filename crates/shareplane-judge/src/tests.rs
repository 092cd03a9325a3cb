//! The judge on instants and ends of its own: each allowance excuses what it states and no more.

use crate::*;
use shareplane_core::{
    Delta, Deployment, Design, Fence, LimitKind, LimitSpec, RegionId, RegionRecord, Room,
    SilentPolicy,
};

const L: Room = Room::from_milli(12_000);

/// A signed amount of the audit, in milli-requests per second.
fn d(milli: i128) -> Delta {
    Delta::from_milli(milli)
}

fn allow() -> Allowances {
    Allowances {
        limit: Limit::fixed(L),
        false_verdict: FalseVerdict::default(),
        faults_may_linger: true,
        stale_room: StaleRoom::WhileFaultsLinger,
        assumptions: Assumptions::Within,
        running_reclaimed: RunningReclaimed::Never,
        rounding: Room::ZERO,
    }
}

fn running(shares: &[u64]) -> Vec<Region> {
    (shares.iter())
        .map(|&s| Region {
            share: Room::from_milli(s),
            running: true,
            ..Region::default()
        })
        .collect()
}

fn exact() -> Audit {
    Audit {
        expected: Delta::of(L),
        actual: Delta::of(L),
        live: Delta::of(L),
        ..Audit::default()
    }
}

/// An audit whose only excess is `stale` room counted twice by stale heirs.
fn stale(stale: i128) -> Audit {
    Audit {
        actual: Delta::of(L) + d(stale),
        over: d(stale),
        over_stale: d(stale),
        ..exact()
    }
}

fn at<'a>(regions: &'a [Region], audit: &'a Audit) -> Instant<'a> {
    Instant {
        regions,
        audit: Some(audit),
        ..Instant::default()
    }
}

#[test]
fn shares_within_the_limit_with_exact_conservation_pass() {
    let r = running(&[6_000, 6_000]);
    let m = judge(&at(&r, &exact()), &allow()).expect("passes");
    assert_eq!((m.sum, m.limit, m.excess()), (L, L, Delta::ZERO));
}

#[test]
fn shares_above_the_limit_fail_unless_a_false_verdict_allows_them() {
    let r = running(&[7_000, 6_000]);
    let a = exact();
    assert_eq!(
        judge(&at(&r, &a), &allow()),
        Err(Violation::SharesAboveLimit {
            sum: Room::from_milli(13_000),
            limit: L,
            allowed: None
        })
    );
    let mut measured = allow();
    measured.false_verdict.excess = Excess::Measured;
    let m = judge(&at(&r, &a), &measured).expect("measured");
    assert_eq!(m.false_verdict_excess, Some(Room::from_milli(1_000)));
    let mut bounded = allow();
    bounded.false_verdict.excess = Excess::UpTo(Room::from_milli(999));
    assert!(judge(&at(&r, &a), &bounded).is_err());
    bounded.rounding = Room::from_milli(1);
    assert!(judge(&at(&r, &a), &bounded).is_ok());
}

#[test]
fn regions_not_running_enforce_nothing() {
    let mut r = running(&[6_000, 6_000, 5_000]);
    r[2].running = false;
    let m = judge(&at(&r, &exact()), &allow()).expect("passes");
    assert_eq!(m.sum, L);
}

#[test]
fn a_broken_audit_fails_first_and_only_a_false_verdict_measures_it() {
    let r = running(&[7_000, 6_000]);
    let broken = Audit {
        actual: Delta::of(L) - d(1),
        ..exact()
    };
    assert_eq!(
        judge(&at(&r, &broken), &allow()),
        Err(Violation::NotConserved(Box::new(broken)))
    );
    let mut a = allow();
    a.false_verdict = FalseVerdict {
        excess: Excess::Measured,
        audit_measured: true,
    };
    assert!(judge(&at(&r, &broken), &a).is_ok());
}

#[test]
fn stale_room_is_excused_in_the_audit_but_never_reaches_the_shares_within_the_assumptions() {
    let s = stale(2_000);
    let m = judge(&at(&running(&[6_000, 6_000]), &s), &allow()).expect("excused");
    assert_eq!(m.stale, Some(d(2_000)));
    let over = running(&[7_000, 6_000]);
    assert!(matches!(
        judge(&at(&over, &s), &allow()),
        Err(Violation::StaleRoomEnforced { excess, .. }) if excess == Room::from_milli(1_000)
    ));
    // Outside the assumptions: held to the stale room, measured.
    let mut outside = allow();
    outside.assumptions = Assumptions::Outside;
    let m = judge(&at(&over, &s), &outside).expect("within the stale room");
    assert_eq!(m.outside_excess, Some(d(1_000)));
    let far = running(&[9_000, 6_000]);
    assert!(matches!(
        judge(&at(&far, &s), &outside),
        Err(Violation::StaleRoomBeyondBound { .. })
    ));
}

/// Outside the assumptions a debt an ended epoch left that no heir has taken on yet is room held
/// above the limit as a running Region's debt is (swarm seed 71041588): the shares may pass the
/// limit by it, and no further; within them it excuses nothing.
#[test]
fn an_ended_epochs_untaken_debt_bounds_the_shares_outside_the_assumptions_as_a_running_debt_does() {
    let owed = Audit {
        live: Delta::of(L) + d(1_500),
        estates: d(-1_500),
        ended_debts: d(1_500),
        ..exact()
    };
    let mut outside = allow();
    outside.assumptions = Assumptions::Outside;
    let within = running(&[7_000, 6_500]);
    let m = judge(&at(&within, &owed), &outside).expect("within the ended epoch's debt");
    assert_eq!(m.outside_excess, Some(d(1_500)));
    let beyond = running(&[7_000, 6_501]);
    assert!(matches!(
        judge(&at(&beyond, &owed), &outside),
        Err(Violation::StaleRoomBeyondBound { debts, .. }) if debts == Room::from_milli(1_500)
    ));
    assert!(matches!(
        judge(&at(&within, &owed), &allow()),
        Err(Violation::StaleRoomEnforced { .. })
    ));
}

/// Swarm seeds 30104602 and 72226030 once left one unit of a whole-unit split above the limit, as
/// a debt once settled or as stale room before (the split was not exact under a grant moved
/// between two estates; it is since grants come in whole units, `estate::grant_unit`): nothing of
/// it is excused, one unit of either is a violation within the assumptions.
#[test]
fn one_unit_of_debt_or_stale_room_in_the_shares_is_a_violation() {
    let debtor = |share: u64, debt: u64| Region {
        share: Room::from_milli(share),
        debt: Room::from_milli(debt),
        running: true,
        ..Region::default()
    };
    let one = [debtor(6_001, 1), debtor(6_000, 0)];
    assert!(matches!(
        judge(&at(&one, &exact()), &allow()),
        Err(Violation::StaleRoomEnforced { excess, .. }) if excess == Room::from_milli(1)
    ));
    let one = running(&[6_001, 6_000]);
    assert!(matches!(
        judge(&at(&one, &stale(1)), &allow()),
        Err(Violation::StaleRoomEnforced { excess, .. }) if excess == Room::from_milli(1)
    ));
}

/// Issue 31's property: with true verdicts and no lowered limit, one unit of room counted twice
/// in the records is a violation, faults lingering or not.
#[test]
fn stale_room_is_a_violation_where_it_is_not_allowed_at_all() {
    let mut a = allow();
    a.stale_room = StaleRoom::Forbidden;
    let s = stale(1);
    assert_eq!(
        judge(&at(&running(&[6_000, 6_000]), &s), &a),
        Err(Violation::NotConserved(Box::new(s)))
    );
    assert!(judge(&at(&running(&[6_000, 6_000]), &exact()), &a).is_ok());
}

#[test]
fn stale_room_is_not_excused_once_faults_no_longer_linger() {
    let mut a = allow();
    a.faults_may_linger = false;
    let s = stale(2_000);
    assert_eq!(
        judge(&at(&running(&[6_000, 6_000]), &s), &a),
        Err(Violation::NotConserved(Box::new(s)))
    );
}

#[test]
fn room_taken_from_a_running_epoch_is_excused_only_while_it_enforces_nothing() {
    let s = Audit {
        actual: Delta::of(L) + d(3_000),
        over: d(3_000),
        over_running: d(1_000),
        running_reclaimed: 1 << 1,
        ..stale(2_000)
    };
    let mut a = allow();
    assert!(judge(&at(&running(&[6_000, 0]), &s), &a).is_err(), "never");
    a.running_reclaimed = RunningReclaimed::WhileEnforcingNothing;
    assert!(judge(&at(&running(&[6_000, 0]), &s), &a).is_ok());
    assert_eq!(
        judge(&at(&running(&[6_000, 10]), &s), &a),
        Err(Violation::NotConserved(Box::new(s)))
    );
}

#[test]
fn a_records_rate_widens_the_limit_only_up_to_what_was_rolled_out() {
    let mut r = running(&[8_000, 6_000]);
    r[1].rate = Room::from_milli(20_000);
    let mut a = allow();
    a.limit.rolled_out = Room::from_milli(14_000);
    let m = judge(&at(&r, &exact()), &a).expect("up to 14");
    assert_eq!(m.limit, Room::from_milli(14_000));
    r[0].share = Room::from_milli(8_001);
    assert!(judge(&at(&r, &exact()), &a).is_err());
}

#[test]
fn a_debt_widens_the_limit_to_what_was_rolled_out_while_faults_linger() {
    let mut r = running(&[8_000, 6_000]);
    r[1].debt = Room::from_milli(500);
    let mut a = allow();
    a.limit.rolled_out = Room::from_milli(14_000);
    assert_eq!(
        judge(&at(&r, &exact()), &a).map(|m| m.limit),
        Ok(Room::from_milli(14_000))
    );
    a.faults_may_linger = false;
    assert!(judge(&at(&r, &exact()), &a).is_err());
}

#[test]
fn the_room_the_running_regions_hold_is_held_to_the_limit_beyond_the_stale_room() {
    let r = running(&[6_000, 6_000]);
    let s = stale(2_000);
    let i = Instant {
        held: Some(Delta::of(L) + d(2_000)),
        ..at(&r, &s)
    };
    assert!(judge(&i, &allow()).is_ok());
    let i = Instant {
        held: Some(Delta::of(L) + d(2_001)),
        ..i
    };
    assert!(matches!(
        judge(&i, &allow()),
        Err(Violation::HeldAboveLimit { .. })
    ));
}

fn deployment() -> Deployment {
    Deployment::try_new(Deployment {
        regions: vec!["A".into(), "B".into()],
        limits: vec![LimitSpec {
            id: "l".into(),
            version: 1,
            rate: L,
            burst_ms: 2_000,
            floor: Room::ZERO,
            step_cap: Room::from_milli(3_000),
            kind: LimitKind::Capacity,
            shadow: false,
        }],
        design: Design::NamedGrants,
        policy: SilentPolicy::TwoSignals,
        fence: Fence::OwnUnhealthy,
        silent_after: 1,
        period_ms: 5_000,
    })
    .expect("a valid deployment")
}

#[test]
fn no_region_takes_more_than_its_granter_granted() {
    let d = deployment();
    let (a, b) = (RegionId::new(0).expect("A"), RegionId::new(1).expect("B"));
    // A granted B 3 units, of which B says it took `taken`.
    let records = |taken: u64| {
        let mut ra = RegionRecord::genesis(&d, a).into_parts();
        ra.limits[0].granted[b] = Room::from_milli(3_000);
        let mut rb = RegionRecord::genesis(&d, b).into_parts();
        rb.limits[0].taken[a] = Room::from_milli(taken);
        (RegionRecord::from_parts(ra), RegionRecord::from_parts(rb))
    };
    let (ra, rb) = records(3_000);
    let r = running(&[6_000, 6_000]);
    let x = exact();
    let newest = [&ra, &rb];
    let i = Instant {
        newest: &newest,
        ..at(&r, &x)
    };
    assert!(judge(&i, &allow()).is_ok());
    let (ra, rb) = records(3_001);
    let newest = [&ra, &rb];
    let i = Instant {
        newest: &newest,
        ..at(&r, &x)
    };
    assert_eq!(
        judge(&i, &allow()),
        Err(Violation::TookMoreThanGranted {
            taker: b,
            granter: a
        })
    );
}

fn settled(ms: Option<u64>) -> Liveness {
    Liveness {
        what: "every share at its target".into(),
        settled_after_ms: ms,
        bound_ms: 1_000,
        seen: "6/6".into(),
    }
}

fn end<'a>(audit: &'a Audit, liveness: &'a Liveness) -> End<'a> {
    End {
        core_alarms: &[],
        records_refused: 0,
        final_shares: None,
        audit: Some(audit),
        admissions: None,
        liveness,
    }
}

#[test]
fn the_end_holds_every_unit_in_running_hands_and_settles_within_its_bound() {
    let ok = settled(Some(1_000));
    let strict = EndAllowances::default();
    assert_eq!(judge_end(&end(&exact(), &ok), &strict).violations, vec![]);
    let late = settled(Some(1_001));
    assert!(matches!(
        judge_end(&end(&exact(), &late), &strict).violations[..],
        [Violation::NotSettled { .. }]
    ));
    let outside = Audit {
        live: Delta::of(L) - d(500),
        estates: d(500),
        ..exact()
    };
    assert_eq!(
        judge_end(&end(&outside, &ok), &strict).violations,
        vec![Violation::RoomOutsideRunning(Box::new(outside))]
    );
    let loose = EndAllowances {
        stranded: Stranded::WhereSettled,
    };
    assert_eq!(judge_end(&end(&outside, &ok), &loose).violations, vec![]);
    assert_eq!(judge_end(&end(&outside, &late), &loose).violations.len(), 2);
}

#[test]
fn the_end_fails_on_the_cores_own_alarms_refused_records_and_final_shares() {
    let ok = settled(Some(0));
    let x = exact();
    let alarms = ["at 1 s Region A limit 0: grant".to_string()];
    let e = End {
        core_alarms: &alarms,
        records_refused: 2,
        final_shares: Some((Room::from_milli(12_001), L)),
        ..end(&x, &ok)
    };
    let v = judge_end(&e, &EndAllowances::default()).violations;
    assert!(matches!(
        v[..],
        [
            Violation::CoreStepNotConserved { count: 1, .. },
            Violation::RecordsRefused(2),
            Violation::FinalSharesAboveLimit { .. }
        ]
    ));
}

#[test]
fn admissions_are_held_to_two_l_plus_l_t_and_what_the_allowances_permit() {
    let ok = settled(Some(0));
    let x = exact();
    let per_second = [500, 500, 3_100, 1_000];
    let limit_rps = [1_000.0; 4];
    let none = |_: usize, _: usize| 0.0;
    let e = End {
        admissions: Some(Admissions {
            per_second: &per_second,
            limit_rps: &limit_rps,
            allowed: &none,
        }),
        audit: None,
        ..end(&x, &ok)
    };
    let v = judge_end(&e, &EndAllowances::default());
    assert_eq!(v.worst_window, (2, 3));
    assert!((v.worst_window_excess - 100.0).abs() < 1e-9);
    assert!(matches!(
        v.violations[..],
        [
            Violation::AdmissionsAboveContract { from: 2, to: 3, .. },
            ..
        ]
    ));
    let some = |_: usize, _: usize| 100.0;
    let e = End {
        admissions: Some(Admissions {
            per_second: &per_second,
            limit_rps: &limit_rps,
            allowed: &some,
        }),
        ..e
    };
    assert_eq!(judge_end(&e, &EndAllowances::default()).violations, vec![]);
}

#[test]
fn every_violation_says_what_broke() {
    let v = [
        Violation::SharesAboveLimit {
            sum: Room::from_milli(13_000),
            limit: L,
            allowed: Some(Room::from_milli(500)),
        },
        Violation::NotConserved(Box::new(stale(2_000))),
    ];
    assert_eq!(
        v[0].to_string(),
        "the sum of shares 13 exceeds the limit 12 by 1 (allowed 0.500)"
    );
    assert!(v[1].to_string().contains("of it from stale records 2"));
}
