//! The HTTP API through `tower::ServiceExt::oneshot` (and one real socket for shutdown).

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use axum::body::{to_bytes, Body};
use axum::http::{header, Request, StatusCode};
use axum::Router;
use shareplane::api;
use shareplane::clock::Clock;
use shareplane::rules::RuleSet;
use shareplane::state::{Command, Shared, MAX_QUEUED_COMMANDS};
use shareplane_core::{RegionId, Room, Rule};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tower::ServiceExt;

const TOKEN: &str = "0123456789abcdef-token";
const ADMIN: &str = "fedcba9876543210-admin";

fn shared() -> (Arc<Shared>, watch::Sender<bool>) {
    shared_with_admin(None)
}

fn shared_with_admin(admin: Option<&str>) -> (Arc<Shared>, watch::Sender<bool>) {
    let d = Arc::new(shareplane::demo::deployment(5_000).expect("the demo's deployment"));
    let (tx, rx) = watch::channel(false);
    let me = RegionId::new(0).expect("region 0");
    let clock = Clock::starting_at(1_000_000);
    let admin = admin.map(str::to_owned);
    (
        Shared::new_with_admin(d, me, clock, Some(TOKEN.into()), admin, rx),
        tx,
    )
}

fn publish(s: &Shared, version: u64, rps: u64) {
    let rule = Rule {
        rate: Room::rps(rps),
        burst: Room::rps(2 * rps),
        shadow: false,
    };
    assert!(s.publish(RuleSet::build(
        &s.d(),
        &s.templates(),
        &s.region,
        version,
        &[rule]
    )));
}

async fn call(app: &Router, req: Request<Body>) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let resp = app
        .clone()
        .oneshot(req)
        .await
        .unwrap_or_else(|e| match e {});
    let (parts, body) = resp.into_parts();
    let bytes = to_bytes(body, 1 << 20)
        .await
        .map(|b| b.to_vec())
        .unwrap_or_default();
    (parts.status, parts.headers, bytes)
}

fn get(uri: &str) -> Request<Body> {
    Request::get(uri)
        .body(Body::empty())
        .expect("a GET request")
}

fn demand_req(token: Option<&str>, body: impl Into<Body>) -> Request<Body> {
    let mut b = Request::post("/v1/demand").header(header::CONTENT_TYPE, "application/json");
    if let Some(t) = token {
        b = b.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    b.body(body.into()).expect("a demand request")
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap_or(serde_json::Value::Null)
}

#[tokio::test]
async fn rules_have_an_etag_and_answer_304_when_unchanged() {
    let (s, _tx) = shared();
    let app = api::router(s.clone());
    let (status, _, body) = call(&app, get("/v1/rules")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(json(&body)["error"].is_string());

    publish(&s, 4, 3_000);
    let (status, headers, body) = call(&app, get("/v1/rules")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        headers.get(header::ETAG).and_then(|v| v.to_str().ok()),
        Some("\"4\"")
    );
    let v = json(&body);
    assert_eq!(v["version"], 4);
    assert_eq!(v["region"], "A");
    assert_eq!(v["limits"][0]["id"], "k-big");
    assert_eq!(v["limits"][0]["rate"], 3000.0);
    assert_eq!(v["limits"][0]["burst"], 6000.0);
    assert_eq!(v["limits"][0]["shadow"], false);
    assert_eq!(v["limits"][0]["kind"], "capacity");

    let req = Request::get("/v1/rules")
        .header(header::IF_NONE_MATCH, "\"4\"")
        .body(Body::empty());
    let (status, _, body) = call(&app, req.unwrap()).await;
    assert_eq!((status, body.len()), (StatusCode::NOT_MODIFIED, 0));
    let req = Request::get("/v1/rules")
        .header(header::IF_NONE_MATCH, "\"3\"")
        .body(Body::empty());
    let (status, _, _) = call(&app, req.unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    // Versions only go up: an older or equal one is not published.
    assert!(!s.publish(RuleSet::build(&s.d(), &s.templates(), "A", 4, &[])));
}

#[tokio::test(start_paused = true)]
async fn a_long_poll_answers_as_soon_as_a_newer_version_exists() {
    let (s, _tx) = shared();
    publish(&s, 2, 1_000);
    let app = api::router(s.clone());
    let (status, _, body) = call(&app, get("/v1/rules?after=1&wait_ms=30000")).await;
    assert_eq!(
        (status, json(&body)["version"].as_u64()),
        (StatusCode::OK, Some(2))
    );

    let started = tokio::time::Instant::now();
    let s2 = s.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        publish(&s2, 3, 1_100);
    });
    let (status, _, body) = call(&app, get("/v1/rules?after=2&wait_ms=30000")).await;
    assert_eq!(
        (status, json(&body)["version"].as_u64()),
        (StatusCode::OK, Some(3))
    );
    assert_eq!(started.elapsed(), Duration::from_millis(700));

    // Nothing newer within the wait: 304 after the wait, which is capped at 30 s.
    let started = tokio::time::Instant::now();
    let (status, headers, _) = call(&app, get("/v1/rules?after=3&wait_ms=999999")).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert_eq!(
        headers.get(header::ETAG).and_then(|v| v.to_str().ok()),
        Some("\"3\"")
    );
    assert_eq!(started.elapsed(), Duration::from_millis(30_000));

    let (status, _, body) = call(&app, get("/v1/rules?after=abc")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(json(&body)["error"].is_string());
}

#[tokio::test(start_paused = true)]
async fn demand_needs_the_token_and_valid_json_and_is_idempotent() {
    let (s, _tx) = shared();
    let app = api::router(s.clone());
    let report = |total: u64, inc: u64| {
        format!(r#"{{"gateway":"gw-1","incarnation":{inc},"totals":{{"k-big":{total}}}}}"#)
    };
    let (status, _, body) = call(&app, demand_req(None, report(10, 1))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(json(&body)["error"].is_string());
    let (status, _, _) = call(
        &app,
        demand_req(Some("wrong-token-wrong-token"), report(10, 1)),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let (status, _, body) = call(&app, demand_req(Some(TOKEN), report(1_000, 1))).await;
    assert_eq!(
        (status, json(&body)),
        (StatusCode::OK, serde_json::json!({"ok": true}))
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    let (status, _, _) = call(&app, demand_req(Some(TOKEN), report(6_000, 1))).await;
    assert_eq!(status, StatusCode::OK);
    // The same total again a little later: nothing new counted, the window reaches it.
    tokio::time::advance(Duration::from_millis(200)).await;
    let (status, _, _) = call(&app, demand_req(Some(TOKEN), report(6_000, 1))).await;
    assert_eq!(status, StatusCode::OK);
    let now = s.clock.now_ms();
    let once = s.demand().rates(now);
    // Again, and an older (lower) one, which is refused naming the limit: nothing changes.
    let (status, _, _) = call(&app, demand_req(Some(TOKEN), report(6_000, 1))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, body) = call(&app, demand_req(Some(TOKEN), report(2_000, 1))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(json(&body)["refused"]["k-big"]["reason"], "went_down");
    assert_eq!(s.demand().rates(now), once);
    assert_eq!(
        once,
        vec![Room::rps(1_000)],
        "5,000 received over the 5 s window"
    );

    for bad in [
        "{",
        r#"{"gateway":"g","incarnation":-1,"totals":{}}"#,
        r#"{"gateway":"g","incarnation":1,"totals":{},"x":1}"#,
    ] {
        let (status, _, body) = call(&app, demand_req(Some(TOKEN), bad)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(json(&body)["error"].is_string());
    }
    let (status, _, body) = call(
        &app,
        demand_req(Some(TOKEN), r#"{"gateway":"","incarnation":1,"totals":{}}"#),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(json(&body)["error"].is_string());

    let huge = format!(
        r#"{{"gateway":"{}","incarnation":1,"totals":{{}}}}"#,
        "g".repeat(api::MAX_BODY_BYTES)
    );
    let (status, _, body) = call(&app, demand_req(Some(TOKEN), huge)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(json(&body)["error"].is_string());
}

#[tokio::test]
async fn state_explain_health_readiness_metrics_and_unknown_routes() {
    let (s, _tx) = shared();
    let app = api::router(s.clone());
    let (status, _, body) = call(&app, get("/v1/state")).await;
    assert_eq!(
        (status, json(&body)["region"].as_str()),
        (StatusCode::OK, Some("A"))
    );
    let (status, _, body) = call(&app, get("/v1/limits/k-big/explain")).await;
    assert_eq!(status, StatusCode::OK);
    let v = json(&body);
    assert_eq!(v["policy"], "two-signals");
    assert!(v["limit"]["grants_in_flight"].is_object() && v["health"].is_object());
    let (status, _, body) = call(&app, get("/v1/limits/nope/explain")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(json(&body)["error"].is_string());

    assert_eq!(call(&app, get("/healthz")).await.0, StatusCode::OK);
    assert_eq!(
        call(&app, get("/readyz")).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    s.mark_ready();
    assert_eq!(call(&app, get("/readyz")).await.0, StatusCode::OK);

    // One rebalance of 30 ms and store calls of 0.5 ms and 3 s, as the loop observes them.
    s.metrics
        .rebalance_duration
        .observe(std::time::Duration::from_millis(30));
    let calls = &s.metrics.store_call_duration;
    calls.observe("put", std::time::Duration::from_micros(500));
    calls.observe("put", std::time::Duration::from_secs(3));
    assert_eq!((calls.count("put"), calls.count("read_all")), (2, 0));
    let (status, headers, body) = call(&app, get("/metrics")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/plain")));
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("shareplane_ready{region=\"A\"} 1"), "{text}");
    assert!(text.contains("# TYPE shareplane_share_rps gauge"));
    assert!(
        text.contains("shareplane_build_info{region=\"A\",version=\""),
        "{text}"
    );
    // Histograms in seconds, cumulative buckets: 30 ms is in every bucket from 0.05 s on.
    let h = "shareplane_rebalance_duration_seconds";
    assert!(text.contains(&format!("# TYPE {h} histogram")), "{text}");
    assert!(
        text.contains(&format!("{h}_bucket{{region=\"A\",le=\"0.025\"}} 0")),
        "{text}"
    );
    assert!(
        text.contains(&format!("{h}_bucket{{region=\"A\",le=\"0.05\"}} 1")),
        "{text}"
    );
    assert!(
        text.contains(&format!("{h}_sum{{region=\"A\"}} 0.03")),
        "{text}"
    );
    let st = "shareplane_store_call_duration_seconds";
    assert!(
        text.contains(&format!(
            "{st}_bucket{{region=\"A\",op=\"put\",le=\"0.001\"}} 1"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{st}_bucket{{region=\"A\",op=\"put\",le=\"2.5\"}} 1"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{st}_bucket{{region=\"A\",op=\"put\",le=\"5\"}} 2"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("{st}_count{{region=\"A\",op=\"put\"}} 2")),
        "{text}"
    );
    assert!(
        text.contains("shareplane_limit_why{region=\"A\",limit=\""),
        "{text}"
    );
    // Each metric is described once.
    let mut names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .collect();
    let all = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), all, "a metric is defined twice");

    let req = Request::post("/v1/rules").body(Body::empty()).unwrap();
    let (status, _, body) = call(&app, req).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(json(&body)["error"].is_string());

    let (status, _, body) = call(&app, get("/v2/nothing")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(json(&body)["error"].is_string());
}

#[tokio::test]
async fn shutdown_answers_long_polls_and_stops_the_server() {
    let (s, tx) = shared();
    publish(&s, 2, 1_000);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(api::serve(
        listener,
        api::router(s.clone()),
        tx.subscribe(),
        Duration::from_secs(5),
    ));
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(
        b"GET /v1/rules?after=2&wait_ms=30000 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    // Wait (bounded) until the request is held as a long-poll.
    for _ in 0..5_000 {
        if s.watchers() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(s.watchers(), 1, "the long-poll never arrived");
    let _ = tx.send(true);
    let mut reply = String::new();
    let read = tokio::time::timeout(Duration::from_secs(10), conn.read_to_string(&mut reply)).await;
    assert!(
        read.is_ok(),
        "the long-poll was not answered after shutdown"
    );
    assert!(reply.starts_with("HTTP/1.1 304"), "{reply}");
    let stopped = tokio::time::timeout(Duration::from_secs(10), server).await;
    assert!(
        matches!(stopped, Ok(Ok(Ok(())))),
        "server did not stop cleanly"
    );
}

fn header_u64(h: &axum::http::HeaderMap, name: &str) -> Option<u64> {
    h.get(name)?.to_str().ok()?.parse().ok()
}

#[tokio::test(start_paused = true)]
async fn rules_carry_the_lease_and_a_long_poll_answers_each_renewal() {
    let (s, _tx) = shared();
    let full = s.lease_full_ms();
    assert_eq!(full, 7_300);
    publish(&s, 4, 3_000);
    let app = api::router(s.clone());
    // Published but never renewed: the lease is 0 (gateways fence).
    let (_, headers, body) = call(&app, get("/v1/rules")).await;
    assert_eq!(json(&body)["lease_ms"], 0);
    assert_eq!(header_u64(&headers, api::LEASE_MS_HEADER), Some(0));

    let t0 = s.clock.now_ms();
    assert!(s.renew_lease(2, t0, t0));
    assert!(!s.renew_lease(2, t0, t0), "the same record renews nothing");
    let (status, headers, body) = call(&app, get("/v1/rules")).await;
    let v = json(&body);
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (v["lease_ms"].as_u64(), v["version"].as_u64()),
        (Some(full), Some(4))
    );
    // In seconds, the base unit (it was `_ms` before 2026-12: docs/metrics.md).
    let gauge = format!(
        "shareplane_rules_lease_remaining_seconds{{region=\"A\"}} {}\n",
        full as f64 / 1000.0
    );
    assert!(s.render_metrics().contains(&gauge), "{gauge}");
    assert_eq!(v["limits"][0]["rate"], 3000.0);
    assert_eq!(header_u64(&headers, api::LEASE_MS_HEADER), Some(full));
    assert_eq!(header_u64(&headers, api::HELD_MS_HEADER), Some(0));
    assert_eq!(header_u64(&headers, api::LEASE_SEQ_HEADER), Some(2));

    // A long poll with nothing newer is answered by the next renewal, with the new lease and
    // the time it was held.
    let waiting = tokio::spawn({
        let app = app.clone();
        async move { call(&app, get("/v1/rules?after=4&wait_ms=30000&lease_seq=2")).await }
    });
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let t1 = s.clock.now_ms();
    assert!(s.renew_lease(3, t1, t1));
    let (status, headers, body) = waiting.await.unwrap();
    assert_eq!((status, body.len()), (StatusCode::NOT_MODIFIED, 0));
    assert_eq!(header_u64(&headers, api::LEASE_MS_HEADER), Some(full));
    assert_eq!(header_u64(&headers, api::HELD_MS_HEADER), Some(3_000));
    assert_eq!(header_u64(&headers, api::LEASE_SEQ_HEADER), Some(3));

    // A gateway that missed that renewal is answered at once; one that has it waits.
    let started = tokio::time::Instant::now();
    let (status, headers, _) = call(&app, get("/v1/rules?after=4&wait_ms=30000&lease_seq=2")).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(header_u64(&headers, api::LEASE_SEQ_HEADER), Some(3));
    let (_, headers, _) = call(&app, get("/v1/rules?after=4&wait_ms=1000&lease_seq=3")).await;
    assert_eq!(started.elapsed(), Duration::from_millis(1_000));
    assert_eq!(
        header_u64(&headers, api::LEASE_MS_HEADER),
        Some(full - 1_000)
    );

    // Without renewals it runs down to 0, and stays there; a long-poll waiting then is answered
    // when it runs out, so that no answer with a lease left was held longer than a lease.
    let started = tokio::time::Instant::now();
    let (status, headers, _) = call(&app, get("/v1/rules?after=4&wait_ms=30000&lease_seq=3")).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert_eq!(started.elapsed(), Duration::from_millis(full - 1_000));
    assert_eq!(header_u64(&headers, api::LEASE_MS_HEADER), Some(0));
    let (_, _, body) = call(&app, get("/v1/rules")).await;
    assert_eq!(json(&body)["lease_ms"], 0);
    assert!(s
        .render_metrics()
        .contains("shareplane_rules_lease_remaining_seconds{region=\"A\"} 0\n"));
}

/// A view in which B and C wrote `peer_epoch` records, B's old epoch's last record has not
/// reached this Region (alarm `waiting_for_record:B`), and the leader has waited `waiting`
/// rebalances for each peer's record and `raise` rebalances with a raise held back for each
/// peer (by Region index; empty for a follower).
fn waiting_view(
    s: &Shared,
    role: &'static str,
    own: Option<&shareplane_core::RegionRecord>,
    peer_epoch: u64,
    waiting: Vec<u32>,
    raise: Vec<u32>,
) -> shareplane::state::StateView {
    use shareplane::state::{build_view, ViewInput};
    use shareplane_core::{Health, PeerState, PeerView, PerRegion, MAX_REGIONS};
    let peer = |i: usize| PeerView {
        region: RegionId::new(i).unwrap_or_else(|| panic!("region {i}")),
        epoch: peer_epoch,
        version: 9,
        unchanged: 0,
        state: PeerState::Live,
        written_at_ms: 1_000,
    };
    build_view(ViewInput {
        d: s.d(),
        me: s.me,
        role,
        replica: "r0",
        own: own.map(|o| std::sync::Arc::new(o.clone())),
        peer_records: vec![None; 3],
        peer_views: Some(vec![peer(1), peer(2)]),
        health: PerRegion([Health::Healthy; MAX_REGIONS]),
        health_unknown_ms: vec![0, 75_000, 0],
        store_ok: true,
        last_error: None,
        rules_version: 1,
        alarms: vec!["waiting_for_record:B".into()],
        waiting_for_record: waiting,
        raise_waiting: raise,
        limits_mismatch: Vec::new(),
        would_refuse: Default::default(),
    })
}

#[tokio::test]
async fn a_wait_on_a_peer_shows_in_state_metrics_and_cloudwatch() {
    let (s, _tx) = shared();
    let view = |role, waiting: Vec<u32>, raise| waiting_view(&s, role, None, 2, waiting, raise);
    // The leader has waited 7 rebalances for B's old epoch's last record, none for C's, and
    // has held a raise back for 4 rebalances waiting for C to account with its new epoch.
    s.set_view(view("leader", vec![0, 7, 0], vec![0, 0, 4]));
    let app = api::router(s.clone());
    let (_, _, body) = call(&app, get("/v1/state")).await;
    let v = json(&body);
    assert_eq!(v["peers"][0]["region"], "B");
    assert_eq!(v["peers"][0]["waiting_for_record"], 7);
    assert_eq!(v["peers"][1]["waiting_for_record"], 0);
    assert_eq!(v["peers"][0]["raise_waiting"], 0);
    assert_eq!(v["peers"][1]["raise_waiting"], 4);
    assert_eq!(v["alarms"][0], "waiting_for_record:B");
    let (_, _, body) = call(&app, get("/metrics")).await;
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.contains("shareplane_peer_waiting_for_record_rebalances{region=\"A\",peer=\"B\"} 7"),
        "{text}"
    );
    assert!(
        text.contains("shareplane_peer_raise_waiting_rebalances{region=\"A\",peer=\"C\"} 4"),
        "{text}"
    );
    // B's health verdict has read unknown for 75 s: in the state and the gauge.
    assert_eq!(v["health_unknown_seconds"]["B"], 75.0);
    assert_eq!(v["health_unknown_seconds"]["A"], 0.0);
    assert!(
        text.contains("shareplane_health_unknown_seconds{region=\"A\",of=\"B\"} 75\n"),
        "{text}"
    );
    let follower = view("follower", Vec::new(), Vec::new());
    assert_eq!(follower.peers[0].waiting_for_record, None);
    // And in CloudWatch (the `aws` feature's points).
    #[cfg(feature = "aws")]
    {
        let seconds = |v: &shareplane::state::StateView, name: &str| {
            shareplane::aws::points(v, true, 0, 0)
                .into_iter()
                .find(|p| p.name == name)
                .map(|p| p.value)
        };
        let (record, raise) = ("LongestWaitForRecordSeconds", "LongestRaiseWaitSeconds");
        assert_eq!(
            seconds(&s.view(), record),
            Some(35.0),
            "7 rebalances of 5 s"
        );
        assert_eq!(seconds(&s.view(), raise), Some(20.0), "4 rebalances of 5 s");
        let unknown = "LongestHealthUnknownSeconds";
        assert_eq!(seconds(&s.view(), unknown), Some(75.0));
        // A follower does not know: it publishes nothing rather than a 0 that would clear the alarm.
        assert_eq!(seconds(&follower, record), None);
        assert_eq!(seconds(&follower, raise), None);
    }
}

#[tokio::test(start_paused = true)]
async fn events_carry_both_timestamps_and_a_refused_demand_report_is_one() {
    let (s, _tx) = shared();
    let app = api::router(s.clone());
    let (status, _, body) = call(&app, get("/v1/events")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json(&body)["events"], serde_json::json!([]));
    let report = |total: u64| {
        format!(r#"{{"gateway":"gw-1","incarnation":1,"totals":{{"k-big":{total}}}}}"#)
    };
    assert_eq!(
        call(&app, demand_req(Some(TOKEN), report(1_000))).await.0,
        StatusCode::OK
    );
    tokio::time::advance(Duration::from_millis(250)).await;
    // Down without a new incarnation: refused, and the first refusal of the gateway is an event.
    for _ in 0..2 {
        let (status, _, _) = call(&app, demand_req(Some(TOKEN), report(10))).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    }
    let (_, _, body) = call(&app, get("/v1/events")).await;
    let v = json(&body);
    let events = v["events"].as_array().cloned().unwrap_or_default();
    assert_eq!(events.len(), 1, "{v}");
    let e = &events[0];
    assert_eq!(e["kind"], "demand_refused");
    assert_eq!(e["region"], "A");
    assert_eq!(e["seq"], 1);
    // The shared test clock starts at 1,000,000 ms after the epoch; 250 ms have passed.
    assert_eq!(e["at_ms"], 1_000_250);
    assert_eq!(e["at"], "1970-01-01T00:16:40.250Z");
    assert!(
        e["detail"]
            .as_str()
            .is_some_and(|d| d.contains("gw-1") && d.contains("k-big")),
        "{e}"
    );
    let (_, _, body) = call(&app, get("/v1/events?after=1")).await;
    assert_eq!(json(&body)["events"], serde_json::json!([]));
    let (status, _, body) = call(&app, get("/v1/events?after=x")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(json(&body)["error"].is_string());
}

#[tokio::test]
async fn giving_up_on_a_lost_record_is_checked_against_the_leaders_view_then_queued() {
    let (s, _tx) = shared_with_admin(Some(ADMIN));
    let rid = |i| RegionId::new(i).unwrap_or_else(|| panic!("region {i}"));
    // The own record accounts with B's epoch 1; B's latest record is in epoch 3.
    let own = shareplane_core::RegionRecord::genesis(&s.d(), s.me);
    let view = |role, waiting: Vec<u32>| waiting_view(&s, role, Some(&own), 3, waiting, vec![]);
    let app = api::router(s.clone());
    let req = |region: &str, token: Option<&str>, body: &str| {
        let mut b = Request::post(format!("/v1/peers/{region}/abandon"))
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(t) = token {
            b = b.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        b.body(Body::from(body.to_string())).unwrap()
    };
    let answer = |region: &'static str, token, body: &'static str| {
        let app = app.clone();
        async move {
            let (status, _, bytes) = call(&app, req(region, token, body)).await;
            (status, json(&bytes))
        }
    };
    s.set_view(view("follower", Vec::new()));
    let (status, body) = answer("B", Some(ADMIN), r#"{"epoch": 1}"#).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("follower")),
        "{body}"
    );
    s.set_view(view("leader", vec![0, 7, 0]));
    for (region, token, body, want) in [
        ("B", None, r#"{"epoch": 1}"#, StatusCode::UNAUTHORIZED),
        (
            "B",
            Some("wrong"),
            r#"{"epoch": 1}"#,
            StatusCode::UNAUTHORIZED,
        ),
        // The demand token every gateway holds reports demand, nothing else.
        ("B", Some(TOKEN), r#"{"epoch": 1}"#, StatusCode::FORBIDDEN),
        (
            "B",
            Some(ADMIN),
            r#"{"epoch": "one"}"#,
            StatusCode::BAD_REQUEST,
        ),
        (
            "B",
            Some(ADMIN),
            r#"{"epoch": 1, "all": true}"#,
            StatusCode::BAD_REQUEST,
        ),
        ("Z", Some(ADMIN), r#"{"epoch": 1}"#, StatusCode::NOT_FOUND),
        ("A", Some(ADMIN), r#"{"epoch": 1}"#, StatusCode::CONFLICT),
        ("C", Some(ADMIN), r#"{"epoch": 1}"#, StatusCode::CONFLICT),
        ("B", Some(ADMIN), r#"{"epoch": 2}"#, StatusCode::CONFLICT),
    ] {
        let (status, answer) = answer(region, token, body).await;
        assert_eq!(status, want, "{region} {body}: {answer}");
        assert!(answer["error"].is_string(), "{answer}");
    }
    assert!(s.queued_commands().is_empty(), "nothing refused was queued");
    let (_, body) = answer("B", Some(TOKEN), r#"{"epoch": 1}"#).await;
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("only reports demand") && e.contains("admin token")),
        "{body}"
    );
    let (status, body) = answer("B", Some(ADMIN), r#"{"epoch": 1}"#).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["queued"], true);
    assert_eq!(s.queued_commands(), vec![Command::Abandon(rid(1), 1)]);
    // A loop that reads no commands: the queue is bounded, and the API says so.
    let queued = (0..2 * MAX_QUEUED_COMMANDS)
        .filter(|_| s.request_abandon(rid(1), 1))
        .count();
    assert_eq!(queued, MAX_QUEUED_COMMANDS);
    let (status, body) = answer("B", Some(ADMIN), r#"{"epoch": 1}"#).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(s.queued_commands().len(), MAX_QUEUED_COMMANDS);
    let (_, _, bytes) = call(&app, get("/v1/state")).await;
    assert_eq!(json(&bytes)["peers"][0]["accounts_with_epoch"], 1);
}

#[tokio::test]
async fn without_an_admin_token_operator_endpoints_are_closed_and_the_admin_token_reports_no_demand(
) {
    let abandon = |token: &str| {
        Request::post("/v1/peers/B/abandon")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Body::from(r#"{"epoch": 1}"#))
            .unwrap()
    };
    let (s, _tx) = shared();
    let app = api::router(s.clone());
    for token in [TOKEN, ADMIN] {
        let (status, _, body) = call(&app, abandon(token)).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let e = json(&body)["error"].as_str().unwrap_or("").to_owned();
        assert!(
            e.contains("no admin token is configured") && e.contains("SHAREPLANE_ADMIN_TOKEN"),
            "{e}"
        );
    }
    assert!(s.queued_commands().is_empty());
    // The admin token is not a demand token.
    let (s, _tx) = shared_with_admin(Some(ADMIN));
    let app = api::router(s);
    let report = r#"{"gateway":"gw-1","incarnation":1,"totals":{"k-big":10}}"#;
    let (status, _, _) = call(&app, demand_req(Some(ADMIN), report)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn state_pages_its_limits_on_request() {
    // The demo's limit and three more.
    let mut d = shareplane::demo::deployment(5_000).unwrap();
    for k in 1..4 {
        let mut l = d.limits[0].clone();
        l.id = format!("p-{k}");
        d.limits.push(l);
    }
    let d = shareplane_core::Deployment::try_new(d).unwrap();
    let (_tx, rx) = watch::channel(false);
    let me = RegionId::new(0).expect("region 0");
    let clock = Clock::starting_at(1_000_000);
    let s = Shared::new(Arc::new(d), me, clock, Some(TOKEN.into()), rx);
    let app = api::router(s.clone());
    let ids: Vec<String> = s.d().limits.iter().map(|l| l.id.clone()).collect();
    assert_eq!(ids.len(), 4, "{ids:?}");
    let page = |uri: String| {
        let app = app.clone();
        async move {
            let (status, _, body) = call(&app, get(&uri)).await;
            (status, json(&body))
        }
    };
    let listed = |v: &serde_json::Value| -> Vec<String> {
        let limits = v["limits"].as_array().cloned().unwrap_or_default();
        limits
            .iter()
            .map(|l| l["id"].as_str().unwrap_or("?").to_string())
            .collect()
    };
    let (status, all) = page("/v1/state".into()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed(&all), ids);
    assert_eq!(all["limits_total"], ids.len());
    assert!(all["next_limits_from"].is_null());
    assert_eq!(all["region"], "A", "the rest of the view is there: {all}");

    let (status, p) = page("/v1/state?limits_from=1&limits_count=1".into()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed(&p), vec![ids[1].clone()]);
    assert_eq!(p["next_limits_from"], 2);
    assert_eq!(p["peers"], all["peers"]);
    let (_, last) = page(format!("/v1/state?limits_from={}", ids.len() - 1)).await;
    assert_eq!(listed(&last), vec![ids[ids.len() - 1].clone()]);
    assert!(last["next_limits_from"].is_null());
    let (_, beyond) = page(format!(
        "/v1/state?limits_from={}&limits_count=5",
        ids.len()
    ))
    .await;
    assert_eq!(listed(&beyond), Vec::<String>::new());
    for bad in ["/v1/state?limits_count=x", "/v1/state?page=2"] {
        let (status, v) = page(bad.into()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {v}");
        assert!(v["error"].is_string(), "{bad}: {v}");
    }
}

#[tokio::test]
async fn the_dashboard_is_a_read_only_page_of_the_state_and_the_events() {
    let (s, _tx) = shared();
    let app = api::router(s.clone());
    let (status, headers, body) = call(&app, get("/dashboard")).await;
    assert_eq!(status, StatusCode::OK);
    let kind = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    assert!(kind.is_some_and(|k| k.starts_with("text/html")), "{kind:?}");
    let page = String::from_utf8_lossy(&body);
    // Relative URLs (it works behind a path prefix, as in the demo), GET only.
    assert!(
        page.contains("fetch(`v1/state?limits_from=0&limits_count="),
        "{page}"
    );
    assert!(page.contains("fetch(\"v1/events\""), "{page}");
    assert!(
        !page.contains("POST") && !page.contains("method:"),
        "{page}"
    );
    // The page reads fields that the state does carry.
    let (_, _, state) = call(&app, get("/v1/state?limits_count=1")).await;
    let v = json(&state);
    let shown = |obj: &serde_json::Value, var: &str, keys: &[&str]| {
        for key in keys {
            assert!(!obj[key].is_null(), "{key} missing from {obj}");
            let read = format!("{var}.{key}");
            assert!(page.contains(&read), "the page does not show {key}");
        }
    };
    let top = [
        "region",
        "role",
        "epoch",
        "record_version",
        "peers",
        "limits_total",
    ];
    shown(&v, "st", &top);
    let per_limit = [
        "adopted_rate",
        "adopted_version",
        "share",
        "shadow",
        "would_refuse",
        "why",
        "why_detail",
    ];
    shown(&v["limits"][0], "l", &per_limit);
}

#[tokio::test]
async fn the_dashboard_includes_the_chart_script_it_is_served_beside() {
    let (s, _tx) = shared();
    let app = api::router(s.clone());
    let (_, _, page) = call(&app, get("/dashboard")).await;
    // Relative, so that it resolves beside the page behind a path prefix too.
    assert!(String::from_utf8_lossy(&page).contains(r#"<script src="dashboard/chart.js">"#));
    let (status, headers, body) = call(&app, get("/dashboard/chart.js")).await;
    assert_eq!(status, StatusCode::OK);
    let kind = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    assert_eq!(kind, Some("text/javascript; charset=utf-8"));
    let script = String::from_utf8_lossy(&body);
    assert!(script.contains("const ShareChart ="), "{script}");
}

#[tokio::test]
async fn a_demand_report_names_its_gateway_start_by_a_uuid_v7_or_a_number() {
    let (s, _tx) = shared();
    let app = api::router(s.clone());
    let report = |incarnation: &str| {
        format!(r#"{{"gateway":"gw-u","incarnation":{incarnation},"totals":{{"k-big":10}}}}"#)
    };
    let v7 = shareplane_limiter::demand::Incarnation::now().to_string();
    for (incarnation, want) in [
        (format!("\"{v7}\""), StatusCode::OK),
        ("1700000000000000".to_string(), StatusCode::OK),
        (
            "\"6f1c2a4e-8b7d-4c1e-9f00-0a1b2c3d4e5f\"".to_string(),
            StatusCode::BAD_REQUEST,
        ),
        ("\"gw-restart-1\"".to_string(), StatusCode::BAD_REQUEST),
    ] {
        let (status, _, body) = call(&app, demand_req(Some(TOKEN), report(&incarnation))).await;
        assert_eq!(
            status,
            want,
            "{incarnation}: {}",
            String::from_utf8_lossy(&body)
        );
        if want == StatusCode::BAD_REQUEST {
            let e = json(&body)["error"].as_str().unwrap_or("").to_string();
            assert!(e.contains("incarnation"), "{incarnation}: {e}");
        }
    }
}

#[tokio::test]
async fn answers_are_gzipped_only_when_the_client_asks() {
    use std::io::Read;
    let (s, _tx) = shared();
    let app = api::router(s.clone());
    publish(&s, 4, 3_000);
    let (_, plain_headers, plain) = call(&app, get("/v1/rules")).await;
    assert_eq!(plain_headers.get(header::CONTENT_ENCODING), None);
    for uri in ["/v1/rules", "/v1/state", "/metrics"] {
        let req = Request::get(uri)
            .header(header::ACCEPT_ENCODING, "gzip")
            .body(Body::empty())
            .unwrap();
        let (status, headers, body) = call(&app, req).await;
        assert_eq!(status, StatusCode::OK, "{uri}");
        assert_eq!(
            headers
                .get(header::CONTENT_ENCODING)
                .and_then(|v| v.to_str().ok()),
            Some("gzip"),
            "{uri}"
        );
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut out)
            .unwrap_or_else(|e| panic!("{uri}: not gzip: {e}"));
        assert!(!out.is_empty(), "{uri}");
        if uri == "/v1/rules" {
            assert_eq!(out, plain, "the same rule set, compressed");
            assert_eq!(
                headers.get(header::ETAG).and_then(|v| v.to_str().ok()),
                Some("\"4\"")
            );
        }
    }
    // Not modified stays an empty 304 with or without gzip.
    let req = Request::get("/v1/rules")
        .header(header::ACCEPT_ENCODING, "gzip")
        .header(header::IF_NONE_MATCH, "\"4\"")
        .body(Body::empty())
        .unwrap();
    let (status, _, body) = call(&app, req).await;
    assert_eq!((status, body.len()), (StatusCode::NOT_MODIFIED, 0));
}

/// Every metric the daemon renders has its row in docs/metrics.md, and its name carries a base
/// unit (seconds, requests per second, a count), never milliseconds.
#[test]
fn every_metric_is_in_docs_metrics_md_and_in_base_units() {
    let (s, _tx) = shared();
    let text = s.render_metrics();
    let names: Vec<&str> = (text.lines())
        .filter_map(|l| l.strip_prefix("# HELP ")?.split(' ').next())
        .collect();
    assert!(names.len() > 40, "{names:?}");
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/metrics.md"
    ))
    .unwrap_or_else(|e| panic!("docs/metrics.md: {e}"));
    for name in &names {
        assert!(
            doc.contains(&format!("| `{name}` |")),
            "{name} has no row in docs/metrics.md"
        );
        for unit in [
            "_ms",
            "_millis",
            "_milliseconds",
            "_us",
            "_kb",
            "_mb",
            "_kib",
            "_mib",
        ] {
            assert!(!name.ends_with(unit), "{name}: not a base unit");
        }
    }
    // And every row of the table names a metric the daemon renders (none left behind by a rename).
    let table = doc
        .split("## The daemon's Prometheus metrics")
        .nth(1)
        .and_then(|t| t.split("\n## ").next())
        .unwrap_or_else(|| panic!("no daemon table in docs/metrics.md"));
    for row in table.lines().filter(|l| l.starts_with("| `")) {
        let name = row
            .trim_start_matches("| `")
            .split('`')
            .next()
            .unwrap_or("");
        assert!(
            names.contains(&name),
            "docs/metrics.md lists {name}, which is not rendered"
        );
    }
}
