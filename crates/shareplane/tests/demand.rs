//! Demand reports through the HTTP API (issue 13): implausible running totals are refused with a
//! 422 naming the limit, counted in a metric and never adopted, and the demo's case 2 (a gateway
//! posting 0 and then u64::MAX) leaves Region A's demand and share where its real demand puts
//! them. Paused tokio time throughout.

use axum::body::{to_bytes, Body};
use axum::http::{header, Request, StatusCode};
use axum::Router;
use shareplane::clock::Clock;
use shareplane::state::Shared;
use shareplane_core::{Deployment, LimitSpec, RegionId, Room};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tower::ServiceExt;

const TOKEN: &str = "0123456789abcdef-token";

/// The demo deployment with a second capacity limit `k-small` of 100/s.
fn shared() -> (Arc<Shared>, watch::Sender<bool>) {
    let mut d = shareplane::demo::deployment(5_000).unwrap_or_else(|e| panic!("{e}"));
    let mut small: LimitSpec = d.limits[0].clone();
    small.id = "k-small".into();
    small.rate = Room::rps(100);
    small.floor = Room::rps(5);
    small.step_cap = Room::rps(10);
    d.limits.push(small);
    let d = Deployment::try_new(d).unwrap_or_else(|e| panic!("{e:?}"));
    let (tx, rx) = watch::channel(false);
    let me = RegionId::new(0).unwrap_or_else(|| panic!("region 0"));
    let s = Shared::new(
        Arc::new(d),
        me,
        Clock::starting_at(1_000_000),
        Some(TOKEN.into()),
        rx,
    );
    (s, tx)
}

async fn post(
    app: &Router,
    uri: &str,
    token: &str,
    body: String,
) -> (StatusCode, serde_json::Value) {
    let req = Request::post(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::from(body))
        .unwrap_or_else(|e| panic!("{e}"));
    let resp = app
        .clone()
        .oneshot(req)
        .await
        .unwrap_or_else(|e| match e {});
    let status = resp.status();
    let bytes = to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}

fn report(gateway: &str, inc: u64, totals: &[(&str, u64)]) -> String {
    let t: serde_json::Map<String, serde_json::Value> = totals
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
        .collect();
    serde_json::json!({ "gateway": gateway, "incarnation": inc, "totals": t }).to_string()
}

fn metric(s: &Shared, name_and_labels: &str) -> f64 {
    s.render_metrics()
        .lines()
        .find(|l| l.starts_with(name_and_labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Sends `rps` per limit from `gateway` every 100 ms for `secs`, starting at `base`.
async fn steady(app: &Router, gateway: &str, rps: &[(&str, u64)], base: u64, secs: u64) {
    for k in 1..=secs * 10 {
        tokio::time::advance(Duration::from_millis(100)).await;
        let totals: Vec<(&str, u64)> = rps.iter().map(|&(l, r)| (l, base + r * k / 10)).collect();
        let (status, body) = post(app, "/v1/demand", TOKEN, report(gateway, 1, &totals)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
}

#[tokio::test(start_paused = true)]
async fn implausible_totals_are_refused_naming_the_limit_counted_and_never_adopted() {
    let (s, _tx) = shared();
    let app = shareplane::api::router(s.clone());
    steady(&app, "gw", &[("k-big", 7_200), ("k-small", 40)], 0, 12).await;
    let now = || s.clock.now_ms();
    let before = s.demand().rates(now());
    assert_eq!(before, vec![Room::rps(7_200), Room::rps(40)]);

    // A total far beyond 4 × the rate over the elapsed time (plus 1 s): refused, naming k-small;
    // k-big's total in the same report is adopted.
    tokio::time::advance(Duration::from_millis(100)).await;
    let (status, body) = post(
        &app,
        "/v1/demand",
        TOKEN,
        report("gw", 1, &[("k-big", 86_400 + 720), ("k-small", u64::MAX)]),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["refused"]["k-small"]["reason"], "too_fast");
    assert!(body["refused"].get("k-big").is_none(), "{body}");
    assert_eq!(body["counted"], 720);
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.contains("k-small"), "{error}");

    // A total below the last accepted one of the same incarnation: refused.
    let (status, body) = post(
        &app,
        "/v1/demand",
        TOKEN,
        report("gw", 1, &[("k-small", 0)]),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["refused"]["k-small"]["reason"], "went_down");
    assert_eq!(
        metric(
            &s,
            r#"shareplane_demand_totals_refused_total{region="A",reason="too_fast"}"#
        ),
        1.0
    );
    assert_eq!(
        metric(
            &s,
            r#"shareplane_demand_totals_refused_total{region="A",reason="went_down"}"#
        ),
        1.0
    );
    assert_eq!(
        metric(
            &s,
            r#"shareplane_demand_reports_rejected_total{region="A",reason="implausible"}"#
        ),
        2.0
    );

    // Nothing refused was adopted: the gateway goes on from its last accepted totals.
    let base_big = 86_400 + 720;
    for k in 1..=60u64 {
        tokio::time::advance(Duration::from_millis(100)).await;
        let totals = [
            ("k-big", base_big + 720 * k),
            ("k-small", 480 + 4 * (k + 1)),
        ];
        let (status, body) = post(&app, "/v1/demand", TOKEN, report("gw", 1, &totals)).await;
        assert_eq!(status, StatusCode::OK, "at {k}: {body}");
    }
    let after = s.demand().rates(now());
    for (a, b) in after.iter().zip(&before) {
        assert!(
            a.milli().abs_diff(b.milli()) * 100 <= b.milli(),
            "{after:?} vs {before:?}"
        );
    }

    // A new incarnation starts a new baseline: its first totals count nothing.
    let (status, body) = post(
        &app,
        "/v1/demand",
        TOKEN,
        report("gw", 2, &[("k-big", 5), ("k-small", 1)]),
    )
    .await;
    assert_eq!(
        (status, &body["ok"]),
        (StatusCode::OK, &serde_json::json!(true))
    );
}

#[tokio::test(start_paused = true)]
async fn replaying_case_2_on_the_demo_leaves_a_at_its_real_demand_for_ten_periods() {
    let (_tx, rx) = watch::channel(false);
    let demo = shareplane::demo::Demo::start(1_000, rx).unwrap_or_else(|e| panic!("{e}"));
    let app = shareplane::demo::router(demo.clone());
    tokio::time::sleep(Duration::from_secs(40)).await;
    let a = |s: &serde_json::Value| {
        let r = s["regions"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["name"] == "A"))
            .cloned()
            .unwrap_or_default();
        let demand = r["state"]["limits"][0]["demand"]
            .as_f64()
            .unwrap_or(f64::NAN);
        let share = r["published"]["rate"].as_f64().unwrap_or(f64::NAN);
        (demand, share)
    };
    let (d0, s0) = a(&demo.snapshot());
    assert!(
        (d0 - 7_200.0).abs() <= 72.0 && (s0 - 5_600.0).abs() < 60.0,
        "{d0} {s0}"
    );

    let token = demo.api_token().to_string();
    let uri = "/regions/A/v1/demand";
    let (status, _) = post(&app, uri, &token, report("evil", 1, &[("k-big", 0)])).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = post(&app, uri, &token, report("evil", 1, &[("k-big", u64::MAX)])).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["refused"]["k-big"]["reason"], "too_fast");
    for period in 1..=10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (d, share) = a(&demo.snapshot());
        // Within a factor of two is the issue's bar; the book does far better.
        assert!(
            (3_600.0..=14_400.0).contains(&d),
            "period {period}: A's demand {d}"
        );
        assert!(
            (d - 7_200.0).abs() <= 72.0,
            "period {period}: A's demand {d}"
        );
        assert!(
            (share - 5_600.0).abs() < 60.0,
            "period {period}: A's share {share}"
        );
    }
}
