//! The state machine at explicit times: no Redis, no runtime, no clock but one origin.

use super::*;

const SECOND: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Any instant will do as the origin: every other time is an offset from it.
fn origin() -> Instant {
    crate::clock::now()
}

fn set(version: u64) -> Arc<RuleSet> {
    Arc::new(crate::limiter::three_limits(version))
}

fn rule<'s>(set: &'s RuleSet, id: &str) -> &'s LimitRule {
    set.get(id).unwrap()
}

#[test]
fn a_lease_that_runs_out_fences_once_and_a_renewal_lifts_it() {
    let t0 = origin();
    let mut s = LimiterState::new(1, t0);
    let (install, notes) = s.install(t0, set(1), Lease::Until(t0 + SECOND), Some(7));
    assert_eq!(install, Install::Installed { version: 1 });
    assert_eq!((notes.first_unbounded, notes.fence), (false, None));
    assert_eq!(s.lease_end(), Some(t0 + SECOND));
    assert_eq!(s.fence(t0 + ms(999)), (false, None));
    assert_eq!(
        s.fence(t0 + SECOND),
        (true, Some(FenceChange::Up { version: 1 }))
    );
    // Noted once: later calls see the fence and report no change; nothing is left to wait for.
    assert_eq!(s.fence(t0 + ms(1_200)), (true, None));
    assert_eq!(s.lease_end(), None);

    // A check that needs the capacity limit is refused with the configured Retry-After.
    let rules = s.rules().unwrap();
    let (begin, change) = s.begin(t0 + ms(1_300), &[rule(&rules, "cap")], 1, 3 * SECOND);
    assert_eq!(change, None);
    let Begin::Decided(d) = begin else {
        panic!("fenced, yet live: {begin:?}")
    };
    assert_eq!(
        (d.allowed, d.retry_after_s, d.path),
        (false, Some(3), DecisionPath::Fenced)
    );
    // A security limit is asked as always.
    let (begin, _) = s.begin(t0 + ms(1_300), &[rule(&rules, "sec")], 1, SECOND);
    assert_eq!(begin, Begin::Live(vec![rule(&rules, "sec")]));

    // A renewal of another version changes nothing; of the running one lifts the fence.
    assert_eq!(
        s.renew(t0 + ms(1_500), 2, Lease::Until(t0 + ms(5_000)), Some(8)),
        None
    );
    let notes = s.renew(t0 + ms(1_500), 1, Lease::Until(t0 + ms(3_000)), Some(8));
    let lifted = FenceChange::Down {
        version: 1,
        fenced_ms: 500,
    };
    assert_eq!(notes.map(|n| n.fence), Some(Some(lifted)));
    assert_eq!(s.lease_seq(), Some(8));
    let snap = s.snapshot(t0 + ms(2_000));
    assert_eq!((snap.fenced, snap.fence), (false, None));
    assert_eq!(snap.lease_remaining, Some(SECOND));
    assert_eq!((snap.counts.fences, snap.counts.fenced_refusals), (1, 1));
}

#[test]
fn only_a_newer_set_is_installed_an_equal_one_renews_and_unbounded_is_noted_once() {
    let t0 = origin();
    let mut s = LimiterState::new(1, t0);
    let (_, notes) = s.install(t0, set(2), Lease::Unbounded, None);
    assert!(notes.first_unbounded);
    let (_, notes) = s.install(t0, set(3), Lease::Unbounded, None);
    assert!(!notes.first_unbounded, "warned once");
    let (older, notes) = s.install(t0, set(1), Lease::Until(t0), Some(4));
    assert_eq!(
        older,
        Install::Ignored {
            running: 3,
            offered: 1
        }
    );
    // An older set's lease is not taken.
    assert_eq!(
        (notes, s.lease(), s.lease_seq()),
        (LeaseNotes::default(), Lease::Unbounded, None)
    );
    let (equal, notes) = s.install(t0, set(3), Lease::Until(t0), Some(5));
    assert!(matches!(equal, Install::Ignored { .. }));
    assert_eq!(notes.fence, Some(FenceChange::Up { version: 3 }));
    assert_eq!((s.version(), s.lease_seq()), (3, Some(5)));
    let c = s.snapshot(t0).counts;
    assert_eq!((c.installed, c.ignored), (2, 2));
}

#[test]
fn after_a_failure_checks_go_to_the_fallback_until_the_back_off_passes() {
    let t0 = origin();
    let mut s = LimiterState::new(1, t0);
    assert!(!s.in_fallback());
    assert!(s.redis_failed(t0, SECOND, []));
    assert!(s.in_fallback());
    assert_eq!(s.route(t0 + ms(999)), Route::Fallback);
    // Due: the next check probes Redis.
    assert!(matches!(s.route(t0 + SECOND), Route::Redis { .. }));
    // The probe fails: still in fallback (not entered again), the window starts over.
    assert!(!s.redis_failed(t0 + SECOND, SECOND, []));
    assert_eq!(s.route(t0 + ms(1_999)), Route::Fallback);
    assert!(matches!(s.route(t0 + ms(2_000)), Route::Redis { .. }));
    assert!(s.redis_answered());
    assert!(!s.redis_answered());
    assert!(!s.in_fallback());
    let c = s.snapshot(t0).counts;
    assert_eq!((c.redis_failures, c.redis_decisions), (2, 2));
}

#[test]
fn the_fallback_refills_from_empty_and_what_it_admits_is_owed_until_repaid() {
    let t0 = origin();
    // Two gateways: this one holds 50/s and a burst of 100 of the Region's 100/s.
    let mut s = LimiterState::new(2, t0);
    s.install(t0, set(1), Lease::Unbounded, None);
    let rules = s.rules().unwrap();
    let cap = [rule(&rules, "cap")];
    let local = [FailurePolicy::LocalShare];
    let ask =
        |s: &mut LimiterState, at: Duration| s.fallback(t0 + at, &cap, &local, 1, "down".into());
    s.redis_failed(t0 + SECOND, SECOND, []);
    // Entering the fallback empties the buckets: nothing to spend at first, a wait helps.
    let d = ask(&mut s, SECOND);
    assert_eq!((d.allowed, d.retry_after_s), (false, Some(1)));
    assert_eq!(d.path, DecisionPath::Fallback("down".into()));
    // Half a second later 25 tokens have come in: 25 calls admitted, the 26th refused.
    let admitted = (0..30).filter(|_| ask(&mut s, ms(1_500)).allowed).count();
    assert_eq!(admitted, 25);
    assert_eq!(s.snapshot(t0 + ms(1_500)).fallback_owed, 25);

    // The back-off has passed: the debt goes with the probe to be charged to Redis.
    let Route::Redis { owed } = s.route(t0 + ms(2_000)) else {
        panic!("the back-off passed")
    };
    assert_eq!(owed, BTreeMap::from([("cap".to_string(), 25)]));
    assert_eq!(s.snapshot(t0 + ms(2_000)).fallback_owed, 0);
    // Charging failed: it stays owed, and the buckets keep what they hold (no second entry).
    assert!(!s.redis_failed(t0 + ms(2_000), SECOND, owed));
    assert_eq!(s.snapshot(t0 + ms(2_000)).fallback_owed, 25);
    assert!(ask(&mut s, ms(2_000)).allowed, "25 tokens came in since");
    assert_eq!(s.snapshot(t0 + ms(2_000)).fallback_owed, 26);
    let c = s.snapshot(t0).counts;
    assert_eq!(c.fallback_decisions, 32);

    // Redis answers, then fails again 8 s on: the buckets, full by then, start empty again.
    s.redis_answered();
    assert!(s.redis_failed(t0 + ms(10_000), SECOND, []));
    let d = ask(&mut s, ms(10_000));
    assert_eq!((d.allowed, d.limits[0].tokens), (false, Some(0.0)));
}

#[test]
fn fail_open_owes_nothing_and_security_fails_closed_without_a_retry_after() {
    let t0 = origin();
    let mut s = LimiterState::new(1, t0);
    s.install(t0, set(1), Lease::Unbounded, None);
    let rules = s.rules().unwrap();
    let open = s.fallback(
        t0,
        &[rule(&rules, "cap")],
        &[FailurePolicy::FailOpen],
        1,
        "down".into(),
    );
    assert!(open.allowed);
    assert_eq!(open.limits[0].verdict, Verdict::FailOpen);
    let live = [rule(&rules, "sec"), rule(&rules, "cap")];
    let policies = [FailurePolicy::FailClosed, FailurePolicy::FailOpen];
    let closed = s.fallback(t0, &live, &policies, 1, "down".into());
    assert_eq!((closed.allowed, closed.retry_after_s), (false, None));
    let verdicts: Vec<Verdict> = closed.limits.iter().map(|l| l.verdict).collect();
    assert_eq!(verdicts, [Verdict::FailClosed, Verdict::FailOpen]);
    assert_eq!(s.snapshot(t0).fallback_owed, 0);
}

#[test]
fn demand_counts_every_resolved_check_and_would_refuse_only_refusing_shadows() {
    let t0 = origin();
    let mut s = LimiterState::new(1, t0);
    s.install(t0, set(1), Lease::Until(t0 + SECOND), None);
    let rules = s.rules().unwrap();
    let (begin, _) = s.begin(
        t0,
        &[rule(&rules, "cap"), rule(&rules, "shadow")],
        3,
        SECOND,
    );
    assert!(
        matches!(begin, Begin::Live(ref l) if l.len() == 2),
        "{begin:?}"
    );
    // Fenced, the shadow capacity limit alone is decided without a bucket and admitted.
    let (begin, _) = s.begin(t0 + SECOND, &[rule(&rules, "shadow")], 2, SECOND);
    let Begin::Decided(d) = begin else {
        panic!("only a fenced shadow: {begin:?}")
    };
    assert!(d.allowed);
    assert_eq!(d.limits[0].verdict, Verdict::Fenced);
    assert_eq!(would_refuse(&d).collect::<Vec<_>>(), ["shadow"]);
    s.count_would_refuse(would_refuse(&d));
    assert_eq!(
        s.demand_totals(),
        &BTreeMap::from([("cap".to_string(), 3), ("shadow".to_string(), 5)])
    );
    assert_eq!(
        s.would_refuse_totals(),
        &BTreeMap::from([("shadow".to_string(), 1)])
    );
}
