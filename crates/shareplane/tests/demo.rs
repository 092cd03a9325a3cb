//! `shareplane demo` on paused time: the dashboard's picture and controls (lose, restore, cut,
//! heal, health, demand), and what a person should see after each.

use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use shareplane::demo::{router, Demo};
use std::time::Duration;
use tokio::sync::watch;
use tower::ServiceExt;

async fn settle(secs: u64) {
    tokio::time::sleep(Duration::from_secs(secs)).await;
}

fn region<'a>(s: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    s["regions"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["name"] == name))
        .unwrap_or(&serde_json::Value::Null)
}

fn share(s: &serde_json::Value, name: &str) -> f64 {
    region(s, name)["published"]["rate"]
        .as_f64()
        .unwrap_or(f64::NAN)
}

fn peer_state(s: &serde_json::Value, viewer: &str, peer: &str) -> String {
    let peers = region(s, viewer)["state"]["peers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    peers
        .iter()
        .find(|p| p["region"] == peer)
        .map(|p| p["state"].to_string())
        .unwrap_or_default()
}

async fn post(app: &axum::Router, uri: &str, body: &str) -> StatusCode {
    let req = Request::post(uri)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()));
    let resp = app
        .clone()
        .oneshot(req.unwrap_or_else(|e| panic!("{e}")))
        .await
        .unwrap_or_else(|e| match e {});
    resp.status()
}

#[tokio::test(start_paused = true)]
async fn lose_restore_cut_and_heal_move_the_shares_as_the_spec_says() {
    let (_tx, rx) = watch::channel(false);
    let demo = Demo::start(1_000, rx).unwrap_or_else(|e| panic!("{e}"));
    let app = router(demo.clone());
    settle(40).await;
    let s = demo.snapshot();
    assert_eq!(s["regions"].as_array().map(Vec::len), Some(3));
    for (name, target) in [("A", 5_600.0), ("B", 3_050.0), ("C", 1_350.0)] {
        assert!(
            (share(&s, name) - target).abs() < 60.0,
            "{name}: {}",
            share(&s, name)
        );
    }
    assert!(s["sum_published"].as_f64().unwrap_or(f64::MAX) <= 10_000.0 + 1e-9);

    // The page and a Region's API are served.
    let resp = app
        .clone()
        .oneshot(
            Request::get("/")
                .body(Body::empty())
                .unwrap_or_else(|e| panic!("{e}")),
        )
        .await;
    let html = to_bytes(resp.unwrap_or_else(|e| match e {}).into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    assert!(String::from_utf8_lossy(&html).contains("lose-"));
    assert!(String::from_utf8_lossy(&html).contains(r#"<script src="dashboard/chart.js">"#));
    let resp = app
        .clone()
        .oneshot(
            Request::get("/dashboard/chart.js")
                .body(Body::empty())
                .unwrap_or_else(|e| panic!("{e}")),
        )
        .await;
    let script = to_bytes(resp.unwrap_or_else(|e| match e {}).into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    assert!(String::from_utf8_lossy(&script).contains("const ShareChart ="));
    let resp = app
        .clone()
        .oneshot(
            Request::get("/regions/B/v1/rules")
                .body(Body::empty())
                .unwrap_or_else(|e| panic!("{e}")),
        )
        .await;
    assert_eq!(resp.map(|r| r.status()).ok(), Some(StatusCode::OK));

    // Lose B: silent after 3 periods, unhealthy after 4; A and C reclaim it and rise.
    assert_eq!(
        post(&app, "/demo/regions/B/lose", "{}").await,
        StatusCode::OK
    );
    settle(15).await;
    let s = demo.snapshot();
    assert!(
        share(&s, "A") > 5_700.0 && share(&s, "C") > 1_450.0,
        "{} {}",
        share(&s, "A"),
        share(&s, "C")
    );
    assert_eq!(peer_state(&s, "A", "B"), "\"reclaimed\"");
    assert!(s["sum_published"].as_f64().unwrap_or(f64::MAX) <= 10_000.0 + 1e-9);

    // Restore B: it returns in a new epoch with nothing and rises by grants back to its target.
    assert_eq!(
        post(&app, "/demo/regions/B/restore", "{}").await,
        StatusCode::OK
    );
    settle(60).await;
    let s = demo.snapshot();
    assert_eq!(region(&s, "B")["state"]["epoch"], 2);
    for (name, target) in [("A", 5_600.0), ("B", 3_050.0), ("C", 1_350.0)] {
        assert!(
            (share(&s, name) - target).abs() < 60.0,
            "after restore {name}: {}",
            share(&s, name)
        );
    }

    // Cut C with a healthy check: silent to the others, never reclaimed.
    assert_eq!(
        post(&app, "/demo/regions/C/cut", "{}").await,
        StatusCode::OK
    );
    settle(20).await;
    let s = demo.snapshot();
    assert_eq!(peer_state(&s, "A", "C"), "\"silent\"");
    assert!(region(&s, "C")["cut"].as_bool().unwrap_or(false));
    assert_eq!(
        post(&app, "/demo/regions/C/heal", "{}").await,
        StatusCode::OK
    );
    settle(10).await;
    assert_eq!(peer_state(&demo.snapshot(), "A", "C"), "\"live\"");

    // Demand changes move targets; bad controls are refused.
    assert_eq!(
        post(&app, "/demo/regions/C/demand", r#"{"rps": 7200}"#).await,
        StatusCode::OK
    );
    settle(60).await;
    let s = demo.snapshot();
    for (name, target) in [("A", 3_900.0), ("B", 2_200.0), ("C", 3_900.0)] {
        assert!(
            (share(&s, name) - target).abs() < 60.0,
            "after demand {name}: {}",
            share(&s, name)
        );
    }
    // Cut C and mark it unhealthy: C fences itself (share 0) while A and B reclaim its room, so
    // the enforced sum never passes the limit.
    assert_eq!(
        post(&app, "/demo/regions/C/cut", "{}").await,
        StatusCode::OK
    );
    let unhealthy = r#"{"health": "unhealthy"}"#;
    assert_eq!(
        post(&app, "/demo/regions/C/health", unhealthy).await,
        StatusCode::OK
    );
    for _ in 0..30 {
        settle(1).await;
        let sum = demo.snapshot()["sum_published"]
            .as_f64()
            .unwrap_or(f64::MAX);
        assert!(sum <= 10_000.0 + 1e-9, "{sum}");
    }
    let s = demo.snapshot();
    assert_eq!(share(&s, "C"), 0.0);
    assert!(region(&s, "C")["state"]["alarms"]
        .to_string()
        .contains("fenced"));
    assert_eq!(peer_state(&s, "A", "C"), "\"reclaimed\"");

    assert_eq!(
        post(&app, "/demo/regions/C/demand", r#"{"rps": -1}"#).await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        post(&app, "/demo/regions/C/health", r#"{"health": "meh"}"#).await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        post(&app, "/demo/regions/Z/lose", "{}").await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        post(&app, "/demo/regions/A/explode", "{}").await,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test(start_paused = true)]
async fn the_demo_serves_a_lease_and_a_lost_regions_lease_runs_out_before_it_is_reclaimed() {
    let (_tx, rx) = watch::channel(false);
    let demo = Demo::start(1_000, rx).unwrap_or_else(|e| panic!("{e}"));
    let app = router(demo.clone());
    settle(20).await;
    let req = Request::get("/regions/A/v1/rules").body(Body::empty());
    let resp = app
        .clone()
        .oneshot(req.unwrap_or_else(|e| panic!("{e}")))
        .await
        .unwrap_or_else(|e| match e {});
    assert_eq!(resp.status(), StatusCode::OK);
    let bytes = to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    let rules: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let lease = rules["lease_ms"].as_u64().unwrap_or(0);
    assert!(lease > 0 && lease < 3 * 1_000, "{rules}");
    let s = demo.snapshot();
    assert_eq!(s["lease_ms"].as_u64(), Some(1_380));
    assert_eq!(s["sum_enforced"], s["sum_published"]);

    // Lose B: its lease runs out before A or C raise from its room; the dashboard's sum counts
    // only what gateways may enforce.
    let before_a = share(&s, "A");
    assert_eq!(
        post(&app, "/demo/regions/B/lose", "{}").await,
        StatusCode::OK
    );
    let mut b_fenced = false;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let s = demo.snapshot();
        b_fenced |= region(&s, "B")["published"]["lease_ms"] == 0;
        if share(&s, "A") > before_a + 0.5 {
            assert!(
                b_fenced,
                "A rose while B's gateways could still enforce its share"
            );
        }
        assert!(s["sum_enforced"].as_f64().unwrap_or(f64::MAX) <= 10_000.0 + 1e-9);
    }
    assert!(b_fenced && share(&demo.snapshot(), "A") > before_a + 0.5);

    // Restore B: before anything else it pushes zero.
    assert_eq!(
        post(&app, "/demo/regions/B/restore", "{}").await,
        StatusCode::OK
    );
    settle(1).await;
    let s = demo.snapshot();
    assert_eq!(share(&s, "B"), 0.0);
    assert_eq!(region(&s, "B")["state"]["epoch"], 2);
}
