//! The gateway client: rule watcher, check, demand reporter and fallback, against the fake daemon in
//! `common` and (where a bucket is involved) a real redis-server.

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{closed_port, limit, redis_url, rules, unique, FakeDaemon, TOKEN};
use shareplane_limiter::demand::ReportError;
use shareplane_limiter::{
    http, DecisionPath, DemandReporter, Install, LimitKind, Limiter, LimiterConfig, RuleWatcher,
    Verdict,
};

fn limiter(cfg: LimiterConfig) -> Arc<Limiter> {
    Arc::new(Limiter::new(cfg).unwrap_or_else(|e| panic!("{e}")))
}

fn watcher(d: &FakeDaemon, wait_ms: u64) -> RuleWatcher {
    RuleWatcher::new(
        http::client().unwrap_or_else(|e| panic!("{e}")),
        &d.url,
        wait_ms,
    )
}

fn nowhere() -> String {
    format!("redis://127.0.0.1:{}/", closed_port())
}

async fn poll(w: &RuleWatcher, l: &Limiter) -> Option<Install> {
    w.poll_once(l).await.unwrap_or_else(|e| panic!("poll: {e}"))
}

#[tokio::test]
async fn the_watcher_installs_newer_rule_sets_and_waits_for_changes() {
    let d = FakeDaemon::start(rules(1, vec![limit("k-big", 100.0, 200.0)])).await;
    let l = limiter(LimiterConfig {
        region: Some("A".into()),
        ..LimiterConfig::new(nowhere())
    });
    let w = watcher(&d, 5_000);
    assert_eq!(poll(&w, &l).await, Some(Install::Installed { version: 1 }));
    // A long poll that is waiting answers when a newer set is published.
    let waiting = tokio::spawn({
        let (w, l) = (w.clone(), l.clone());
        async move { poll(&w, &l).await }
    });
    tokio::task::yield_now().await;
    d.publish(rules(2, vec![limit("k-big", 50.0, 100.0)]));
    let got = waiting.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got, Some(Install::Installed { version: 2 }));
    assert_eq!(
        l.rules().and_then(|r| r.get("k-big").map(|k| k.rate)),
        Some(50.0)
    );
    // Nothing new: 304 after the wait.
    assert_eq!(poll(&watcher(&d, 100), &l).await, None);
}

#[tokio::test]
async fn a_late_older_rule_set_is_ignored() {
    let d = FakeDaemon::start(rules(5, vec![limit("k-big", 100.0, 200.0)])).await;
    let l = limiter(LimiterConfig::new(nowhere()));
    let w = watcher(&d, 1_000);
    assert_eq!(poll(&w, &l).await, Some(Install::Installed { version: 5 }));
    // A lagging daemon answers with version 3 (bigger numbers): ignored, and so is the same version.
    d.force_next(rules(3, vec![limit("k-big", 900.0, 1800.0)]));
    assert_eq!(
        poll(&w, &l).await,
        Some(Install::Ignored {
            running: 5,
            offered: 3
        })
    );
    d.force_next(rules(5, vec![limit("k-big", 900.0, 1800.0)]));
    assert_eq!(
        poll(&w, &l).await,
        Some(Install::Ignored {
            running: 5,
            offered: 5
        })
    );
    assert_eq!(l.version(), 5);
    assert_eq!(
        l.rules().and_then(|r| r.get("k-big").map(|k| k.rate)),
        Some(100.0)
    );
    assert_eq!(l.stats().rule_sets_ignored, 2);
}

#[tokio::test]
async fn a_rule_set_for_another_region_is_refused() {
    let d = FakeDaemon::start(rules(1, vec![limit("k-big", 100.0, 200.0)])).await;
    let l = limiter(LimiterConfig {
        region: Some("B".into()),
        ..LimiterConfig::new(nowhere())
    });
    assert!(watcher(&d, 100).poll_once(&l).await.is_err());
    assert_eq!(l.version(), 0);
    assert_eq!(
        l.check(&["k-big"], 1).await,
        Err(shareplane_limiter::CheckError::NoRules)
    );
}

#[tokio::test]
async fn a_rule_whose_burst_is_below_the_cost_is_held_closed_at_load() {
    let d = FakeDaemon::start(rules(1, vec![limit("tiny", 1.0, 2.0)])).await;
    // Redis is unreachable: the refusal comes from the rules alone, not from the fallback.
    let l = limiter(LimiterConfig {
        max_cost: 3,
        ..LimiterConfig::new(nowhere())
    });
    poll(&watcher(&d, 100), &l).await;
    let decision = l
        .check(&["tiny"], 1)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!decision.allowed);
    assert_eq!(decision.retry_after_s, None);
    assert_eq!(decision.path, DecisionPath::Rules);
    assert_eq!(decision.limits[0].verdict, Verdict::HeldClosed);
    assert_eq!(l.stats().redis_failures, 0);
}

#[tokio::test]
async fn demand_totals_are_running_so_duplicates_change_nothing() {
    let d = FakeDaemon::start(rules(1, vec![limit("a", 1.0, 2.0), limit("b", 1.0, 2.0)])).await;
    let l = limiter(LimiterConfig {
        max_cost: 2,
        ..LimiterConfig::new(nowhere())
    });
    poll(&watcher(&d, 100), &l).await;
    for _ in 0..3 {
        l.check(&["a"], 1).await.unwrap_or_else(|e| panic!("{e}"));
    }
    l.check(&["a", "b"], 2)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let http = http::client().unwrap_or_else(|e| panic!("{e}"));
    let r = DemandReporter::new(http.clone(), &d.url, TOKEN, "gw-1", 7)
        .unwrap_or_else(|e| panic!("{e}"));
    let report = r.report(&l);
    assert_eq!(
        report.totals.get("a"),
        Some(&5),
        "received cost, refused calls included"
    );
    assert_eq!(report.totals.get("b"), Some(&2));
    r.send(&report).await.unwrap_or_else(|e| panic!("{e}"));
    r.send(&report).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((d.demand("a"), d.demand("b"), d.posts()), (5, 2, 2));
    // A later report carries the new running total.
    l.check(&["b"], 1).await.unwrap_or_else(|e| panic!("{e}"));
    r.report_once(&l).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.demand("b"), 3);
    // The wrong token is refused with the daemon's status.
    let bad =
        DemandReporter::new(http, &d.url, "wrong", "gw-1", 7).unwrap_or_else(|e| panic!("{e}"));
    match bad.report_once(&l).await {
        Err(ReportError::Refused { status: 401, .. }) => {}
        other => panic!("expected a 401 refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn checks_use_the_current_numbers_and_shadow_limits_never_refuse() {
    let Some(url) = redis_url("checks_use_the_current_numbers_and_shadow_limits_never_refuse")
    else {
        return;
    };
    let (id, shadow) = (unique("k"), unique("s"));
    let mut shadow_limit = limit(&shadow, 0.0001, 1.0);
    shadow_limit.shadow = true;
    let d = FakeDaemon::start(rules(1, vec![limit(&id, 0.0001, 3.0), shadow_limit])).await;
    let l = limiter(LimiterConfig::new(url));
    poll(&watcher(&d, 100), &l).await;
    let mut verdicts = Vec::new();
    for _ in 0..4 {
        let dec = l
            .check(&[&id, &shadow], 1)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(dec.path, DecisionPath::Redis);
        verdicts.push((dec.allowed, dec.limits[1].verdict));
    }
    // Three tokens in the enforced bucket; the shadow one runs dry after one but never refuses.
    assert_eq!(
        verdicts,
        [
            (true, Verdict::Admit),
            (true, Verdict::Short),
            (true, Verdict::Short),
            (false, Verdict::Short)
        ]
    );
    // A share decrease arrives: the same bucket, clamped.
    d.publish(rules(2, vec![limit(&id, 0.0001, 1.0)]));
    poll(&watcher(&d, 1_000), &l).await;
    let dec = l.check(&[&id], 1).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !dec.allowed,
        "the bucket was empty and a lower share does not refill it"
    );
    assert!(dec.retry_after_s.is_some());
}

#[tokio::test]
async fn when_redis_is_unreachable_capacity_admits_locally_and_security_fails_closed() {
    let mut sec = limit("login", 100.0, 200.0);
    sec.kind = LimitKind::Security;
    let mut shadow_sec = limit("login-shadow", 100.0, 200.0);
    (shadow_sec.kind, shadow_sec.shadow) = (LimitKind::Security, true);
    let d = FakeDaemon::start(rules(1, vec![limit("cap", 100.0, 200.0), sec, shadow_sec])).await;
    let cfg = LimiterConfig {
        gateways_per_region: 4,
        probe_after: Duration::from_secs(60),
        ..LimiterConfig::new(nowhere())
    };
    let l = limiter(cfg);
    poll(&watcher(&d, 100), &l).await;

    let dec = l
        .check(&["login"], 1)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!dec.allowed);
    assert!(matches!(dec.path, DecisionPath::Fallback(_)));
    assert_eq!(
        (dec.limits[0].verdict, dec.retry_after_s),
        (Verdict::FailClosed, None)
    );
    let dec = l
        .check(&["login-shadow"], 1)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(dec.allowed, "a shadow limit never refuses");

    // The capacity limit admits at 100/4 = 25/s from an empty local bucket.
    let start = Instant::now();
    let mut admitted = 0u32;
    while start.elapsed() < Duration::from_millis(400) {
        let dec = l.check(&["cap"], 1).await.unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(dec.path, DecisionPath::Fallback(_)));
        admitted += u32::from(dec.allowed);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let bound = 25.0 * start.elapsed().as_secs_f64();
    assert!(
        admitted >= 1 && f64::from(admitted) <= bound + 1.0,
        "{admitted} admitted, bound {bound}"
    );
    let stats = l.stats();
    assert_eq!(
        stats.redis_failures, 1,
        "after one failure Redis is left alone until the probe"
    );
    assert_eq!(stats.redis_decisions, 0);
}

#[tokio::test]
async fn a_redis_that_does_not_answer_is_bounded_by_the_timeout() {
    // Accepts connections (the kernel does) but never answers a byte.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let port = silent.local_addr().unwrap_or_else(|e| panic!("{e}")).port();
    let d = FakeDaemon::start(rules(1, vec![limit("cap", 100.0, 200.0)])).await;
    let cfg = LimiterConfig {
        redis_timeout: Duration::from_millis(100),
        ..LimiterConfig::new(format!("redis://127.0.0.1:{port}/"))
    };
    let l = limiter(cfg);
    poll(&watcher(&d, 100), &l).await;
    let dec = l.check(&["cap"], 1).await.unwrap_or_else(|e| panic!("{e}"));
    match dec.path {
        DecisionPath::Fallback(reason) => assert!(reason.contains("did not answer"), "{reason}"),
        other => panic!("expected the fallback, got {other:?}"),
    }
    drop(silent);
}

#[tokio::test]
async fn the_fallback_ends_when_redis_answers_again() {
    let Some(url) = redis_url("the_fallback_ends_when_redis_answers_again") else {
        return;
    };
    let id = unique("cap");
    let d = FakeDaemon::start(rules(1, vec![limit(&id, 100.0, 200.0)])).await;
    // A proxy in front of the real Redis that the test can cut and restore.
    let proxy = common::Proxy::start(&url).await;
    let cfg = LimiterConfig {
        probe_after: Duration::ZERO,
        ..LimiterConfig::new(proxy.url())
    };
    let l = limiter(cfg);
    poll(&watcher(&d, 100), &l).await;
    let path = |d: shareplane_limiter::Decision| d.path;
    assert_eq!(
        path(l.check(&[&id], 1).await.unwrap_or_else(|e| panic!("{e}"))),
        DecisionPath::Redis
    );
    proxy.cut();
    let cut = path(l.check(&[&id], 1).await.unwrap_or_else(|e| panic!("{e}")));
    assert!(matches!(cut, DecisionPath::Fallback(_)), "{cut:?}");
    proxy.restore();
    let back = path(l.check(&[&id], 1).await.unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(back, DecisionPath::Redis);
}

#[tokio::test]
async fn in_fallback_a_limit_that_never_refills_leaves_no_retry_after() {
    let d = FakeDaemon::start(rules(
        1,
        vec![limit("stuck", 0.0, 2.0), limit("moving", 10.0, 20.0)],
    ))
    .await;
    let l = limiter(LimiterConfig::new(nowhere()));
    poll(&watcher(&d, 100), &l).await;
    let alone = l
        .check(&["moving"], 1)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!alone.allowed, "the local bucket starts empty");
    assert_eq!(alone.retry_after_s, Some(1));
    let both = l
        .check(&["moving", "stuck"], 1)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!both.allowed);
    assert_eq!(both.retry_after_s, None);
}

#[tokio::test]
async fn a_held_closed_shadow_limit_never_refuses_and_is_listed() {
    let mut shadow = limit("shadow-tiny", 1.0, 0.5);
    shadow.shadow = true;
    let d = FakeDaemon::start(rules(1, vec![shadow, limit("cap", 10.0, 20.0)])).await;
    let l = limiter(LimiterConfig::new(nowhere()));
    poll(&watcher(&d, 100), &l).await;
    let dec = l
        .check(&["shadow-tiny", "cap"], 1)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let listed: Vec<_> = dec
        .limits
        .iter()
        .map(|x| (x.id.as_str(), x.verdict))
        .collect();
    assert_eq!(listed[0], ("shadow-tiny", Verdict::HeldClosed));
    assert_eq!(listed[1].0, "cap");
    let alone = l
        .check(&["shadow-tiny"], 1)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        alone.allowed,
        "a shadow limit never refuses, held closed or not"
    );
    assert_eq!(alone.path, DecisionPath::Rules);
}

#[tokio::test]
async fn the_watcher_takes_each_answers_lease_and_the_limiter_fences_when_none_is_left() {
    let d = FakeDaemon::start(rules(1, vec![limit("k-big", 100.0, 200.0)])).await;
    let l = limiter(LimiterConfig::new(nowhere()));
    // A daemon that sends no lease: enforced until replaced, as before leases.
    poll(&watcher(&d, 100), &l).await;
    assert_eq!(l.lease(), shareplane_limiter::Lease::Unbounded);
    // A rule set with no lease left fences the capacity limit at once.
    d.set_lease(Some(0));
    d.publish(rules(2, vec![limit("k-big", 100.0, 200.0)]));
    assert_eq!(
        poll(&watcher(&d, 100), &l).await,
        Some(Install::Installed { version: 2 })
    );
    let fenced = l
        .check(&["k-big"], 1)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (fenced.allowed, fenced.retry_after_s, fenced.path),
        (false, Some(1), DecisionPath::Fenced)
    );
    // A 304 that renews the lease lifts the fence; its lease counts from no later than receipt.
    d.set_lease(Some(60_000));
    let before = Instant::now();
    assert_eq!(poll(&watcher(&d, 50), &l).await, None);
    assert!(!l.is_fenced());
    let left = l.stats().lease_remaining.unwrap_or_default();
    assert!(
        left <= Duration::from_millis(60_000)
            && left + before.elapsed() >= Duration::from_millis(59_000),
        "{left:?}"
    );
    assert_eq!(l.lease_seq(), Some(1));
    assert_eq!(l.stats().fences, 1);
}

#[tokio::test]
async fn a_daemon_that_refuses_deltas_is_asked_for_whole_sets_from_then_on() {
    let d = FakeDaemon::start(rules(1, vec![limit("k-big", 100.0, 200.0)])).await;
    d.refuse_deltas();
    let l = limiter(LimiterConfig::new(nowhere()));
    let w = watcher(&d, 50);
    // Nothing runs yet: the first request asks for no delta.
    assert_eq!(poll(&w, &l).await, Some(Install::Installed { version: 1 }));
    assert_eq!(d.delta_requests(), 0);
    d.publish(rules(2, vec![limit("k-big", 90.0, 180.0)]));
    // It asks for a delta, is refused, and asks for the whole set at once.
    assert!(w.poll_once(&l).await.is_err(), "the refusal is an error");
    assert_eq!(d.delta_requests(), 1);
    assert_eq!(poll(&w, &l).await, Some(Install::Installed { version: 2 }));
    d.publish(rules(3, vec![limit("k-big", 80.0, 160.0)]));
    assert_eq!(poll(&w, &l).await, Some(Install::Installed { version: 3 }));
    assert_eq!(d.delta_requests(), 1, "asked that daemon for a delta again");
}

#[tokio::test]
async fn a_daemon_that_ignores_deltas_is_asked_for_them_and_answers_whole() {
    let d = FakeDaemon::start(rules(1, vec![limit("k-big", 100.0, 200.0)])).await;
    let l = limiter(LimiterConfig::new(nowhere()));
    let w = watcher(&d, 50);
    assert_eq!(poll(&w, &l).await, Some(Install::Installed { version: 1 }));
    d.publish(rules(2, vec![limit("k-big", 90.0, 180.0)]));
    assert_eq!(poll(&w, &l).await, Some(Install::Installed { version: 2 }));
    assert_eq!(d.delta_requests(), 1);
    let running = l.rules().unwrap_or_else(|| panic!("none"));
    assert_eq!(running.get("k-big").map(|k| k.rate), Some(90.0));
}

/// A shadow limit's would-be refusals go out with the demand; a daemon that predates the field
/// refuses it once, and from then on gets the totals alone.
#[tokio::test]
async fn would_refuse_counts_are_reported_and_dropped_for_a_daemon_that_refuses_them() {
    let mut shadow = limit("shadow-tiny", 1.0, 0.5);
    shadow.shadow = true;
    let d = FakeDaemon::start(rules(1, vec![shadow, limit("cap", 10.0, 20.0)])).await;
    let l = limiter(LimiterConfig::new(nowhere()));
    poll(&watcher(&d, 100), &l).await;
    for _ in 0..3 {
        let dec = l
            .check(&["shadow-tiny", "cap"], 1)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(dec.limits[0].verdict, Verdict::HeldClosed);
    }
    let http = http::client().unwrap_or_else(|e| panic!("{e}"));
    let r = DemandReporter::new(http, &d.url, TOKEN, "gw-1", 7).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.report(&l).would_refuse.get("shadow-tiny"), Some(&3));
    assert_eq!(r.report(&l).would_refuse.get("cap"), None);
    r.report_once(&l).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (d.would_refuse("shadow-tiny"), d.demand("shadow-tiny")),
        (3, 3)
    );

    d.refuse_would_refuse();
    l.check(&["shadow-tiny"], 1)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    r.report_once(&l).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.demand("shadow-tiny"), 4, "the totals still arrive");
    assert_eq!(d.would_refuse("shadow-tiny"), 3);
    assert!(r.report(&l).would_refuse.is_empty(), "not sent again");
}
