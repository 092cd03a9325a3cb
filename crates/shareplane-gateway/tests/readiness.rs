//! What orchestrators and proxies act on: the URL the infra publishes, and the gateway's
//! readiness in each state (no rule set, fenced, ready), against a real redis-server and the
//! fake daemon of the limiter's tests.

mod common;

use std::time::Duration;

use common::{flags, limit, redis_url, rules, unique, FakeDaemon, Gateway};
use shareplane_gateway::config::FileConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_given_the_published_rules_url_loads_rules_and_reports_demand() {
    let test = "a_gateway_given_the_published_rules_url_loads_rules_and_reports_demand";
    let Some(redis) = redis_url(test) else {
        return;
    };
    let k = unique("published");
    let daemon = FakeDaemon::start(rules(1, vec![limit(&k, 10.0, 20.0)])).await;
    // What the CDK and Terraform publish as rulesUrl (with a trailing slash for good measure).
    let mut f = flags(&daemon, &redis);
    f.rules = Some(format!("{}/v1/rules/", daemon.url));
    let gw = Gateway::start(FileConfig::default(), f).await;
    gw.ready().await;
    let r = reqwest::get(format!("{}/v1/check?limit={k}", gw.http))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status().as_u16(), 200);
    // The demand reporter posts to the same daemon's /v1/demand.
    for _ in 0..200 {
        if daemon.demand(&k) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(daemon.demand(&k), 1, "no demand reached the daemon");
    gw.stop().await;
}

/// `/healthz` and `/readyz` now, with the metrics.
async fn probes(gw: &Gateway) -> ((u16, String), (u16, String), String) {
    let live = gw.probe_until("healthz", |_, _| true).await;
    let ready = gw.probe_until("readyz", |_, _| true).await;
    (live, ready, gw.metrics().await)
}

fn gauge(m: &str, name: &str) -> f64 {
    common::metric(m, name).unwrap_or_else(|| panic!("no {name} in:\n{m}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_rule_set_the_gateway_is_alive_not_ready_and_says_why_past_the_deadline() {
    let test = "without_a_rule_set_the_gateway_is_alive_not_ready_and_says_why_past_the_deadline";
    let Some(redis) = redis_url(test) else {
        return;
    };
    let daemon = FakeDaemon::start(rules(1, vec![])).await;
    let closed = common::daemon::closed_port();
    let mut f = flags(&daemon, &redis);
    f.rules = Some(format!("http://127.0.0.1:{closed}/v1/rules"));
    f.rules_timeout_ms = Some(1_000);
    let gw = Gateway::start(FileConfig::default(), f).await;
    let (_, body) = gw.health_until(|s, _| s == 503).await;
    assert!(
        body.starts_with("no rule set loaded yet (0 s of the 1 s allowed)"),
        "{body}"
    );
    let (status, body) = gw
        .health_until(|_, b| b.starts_with("no rule set loaded within 1 s"))
        .await;
    assert_eq!(status, 503, "{body}");
    // The cause, not just "error sending request".
    assert!(
        body.to_ascii_lowercase().contains("connection refused"),
        "{body}"
    );
    assert!(body.contains(&format!("127.0.0.1:{closed}")), "{body}");
    assert_eq!(body.lines().count(), 1, "{body}");
    let ((live, live_body), (ready, _), m) = probes(&gw).await;
    assert_eq!(live, 200, "liveness: {live_body}");
    assert!(live_body.contains("not ready: no rule set"), "{live_body}");
    assert_eq!(ready, 503);
    assert_eq!(gauge(&m, "shareplane_gateway_rules_loaded"), 0.0);
    assert_eq!(gauge(&m, "shareplane_gateway_ready"), 0.0);
    assert_eq!(gauge(&m, "shareplane_gateway_rules_overdue"), 1.0);
    assert!(gauge(&m, "shareplane_gateway_rules_fetch_failures_total") >= 1.0);
    // Every metric in a base unit (docs/metrics.md): durations in seconds, never milliseconds.
    let names: Vec<&str> = (m.lines())
        .filter_map(|l| l.strip_prefix("# HELP ")?.split(' ').next())
        .collect();
    assert!(names.len() > 15, "{m}");
    for name in names {
        assert!(
            !["_ms", "_millis", "_milliseconds"]
                .iter()
                .any(|u| name.ends_with(u)),
            "{name}"
        );
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_gateway_is_alive_but_not_ready_until_its_lease_is_renewed() {
    let test = "a_fenced_gateway_is_alive_but_not_ready_until_its_lease_is_renewed";
    let Some(redis) = redis_url(test) else {
        return;
    };
    let k = unique("fenced");
    let daemon = FakeDaemon::start(rules(1, vec![limit(&k, 10.0, 20.0)])).await;
    daemon.set_lease(Some(60_000));
    let gw = Gateway::start(FileConfig::default(), flags(&daemon, &redis)).await;
    gw.ready().await;
    let ((live, _), (ready, body), m) = probes(&gw).await;
    assert_eq!((live, ready), (200, 200), "{body}");
    assert!(body.starts_with("ok: rules version 1, lease "), "{body}");
    for (name, want) in [
        ("shareplane_gateway_rules_loaded", 1.0),
        ("shareplane_gateway_ready", 1.0),
        ("shareplane_gateway_fenced", 0.0),
        ("shareplane_gateway_rules_overdue", 0.0),
        ("shareplane_gateway_fallback_in_use", 0.0),
    ] {
        assert_eq!(gauge(&m, name), want, "{name}");
    }

    // A rule set whose lease has run out by the time it arrives: fenced at once, and the next
    // long poll waits (25 s) without renewing it.
    daemon.set_lease(Some(1));
    daemon.publish(rules(2, vec![limit(&k, 10.0, 20.0)]));
    let (status, body) = gw.health_until(|s, _| s == 503).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.starts_with("fenced: the lease of rule set version 2 ran out"),
        "{body}"
    );
    let check = reqwest::get(format!("{}/v1/check?limit={k}", gw.http))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(check.status().as_u16(), 429, "fenced: refused");
    let ((live, _), _, m) = probes(&gw).await;
    assert_eq!(live, 200, "a fence is not a reason to restart");
    assert_eq!(gauge(&m, "shareplane_gateway_fenced"), 1.0);
    assert_eq!(gauge(&m, "shareplane_gateway_ready"), 0.0);
    assert_eq!(gauge(&m, "shareplane_gateway_rules_loaded"), 1.0);

    // A rule set with a lease lifts the fence: ready again.
    daemon.set_lease(Some(60_000));
    daemon.publish(rules(3, vec![limit(&k, 10.0, 20.0)]));
    let (status, body) = gw.health_until(|s, _| s == 200).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("ok: rules version 3"), "{body}");
    assert_eq!(gauge(&gw.metrics().await, "shareplane_gateway_ready"), 1.0);
    gw.stop().await;
}
