//! The demo's template through a real `shareplane gateway` (in this process) and a real
//! redis-server: "every API key gets 100/s across all Regions", each Region publishing its
//! static part, one key refused while the others pass.

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use shareplane::demo::{router, Demo};
use shareplane_gateway::config::{FileConfig, Flags};
use std::time::Duration;
use tokio::sync::watch;

async fn get_json(url: &str) -> serde_json::Value {
    let r = reqwest::get(url)
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    r.json().await.unwrap_or_else(|e| panic!("{url}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_serves_per_api_key_and_one_key_is_refused_while_the_others_pass() {
    let Ok(redis) = std::env::var("SHAREPLANE_TEST_REDIS_URL") else {
        assert!(
            std::env::var("SHAREPLANE_REQUIRE_SERVICES").as_deref() != Ok("1"),
            "SHAREPLANE_TEST_REDIS_URL is not set but SHAREPLANE_REQUIRE_SERVICES=1"
        );
        eprintln!("did nothing: SHAREPLANE_TEST_REDIS_URL is not set");
        return;
    };
    let (stop, rx) = watch::channel(false);
    let demo = Demo::start(1_000, rx).unwrap_or_else(|e| panic!("{e}"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let base = format!(
        "http://{}",
        listener.local_addr().unwrap_or_else(|e| panic!("{e}"))
    );
    tokio::spawn(async move { axum::serve(listener, router(demo)).await });

    // Each Region's part of 100/s, in the rule set it serves; together exactly 100.
    let mut parts = Vec::new();
    for region in ["A", "B", "C"] {
        let mut rules = serde_json::Value::Null;
        for _ in 0..100 {
            rules = get_json(&format!("{base}/regions/{region}/v1/rules")).await;
            if rules["version"].as_u64().unwrap_or(0) > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let t = &rules["templates"][0];
        assert_eq!(
            (t["id"].as_str(), t["entry"].as_str()),
            (Some("per_api_key"), Some("api_key")),
            "{rules}"
        );
        parts.push(t["rate"].as_f64().unwrap_or(f64::NAN));
    }
    assert_eq!(parts, [33.334, 33.333, 33.333]);
    assert!((parts.iter().sum::<f64>() - 100.0).abs() < 1e-9);

    // A gateway on Region A: its bucket per key holds 2 s of A's part, 66.668.
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let http_addr = http.local_addr().unwrap_or_else(|e| panic!("{e}"));
    drop(http);
    let flags = Flags {
        rules: Some(format!("{base}/regions/A")),
        redis: Some(redis),
        http_listen: Some(http_addr),
        ..Flags::default()
    };
    let cfg = shareplane_gateway::config::resolve(FileConfig::default(), flags)
        .unwrap_or_else(|e| panic!("{e}"));
    let (gw_stop, gw_rx) = tokio::sync::oneshot::channel::<()>();
    let gateway = tokio::spawn(shareplane_gateway::run(cfg, async move {
        let _ = gw_rx.await;
    }));
    let client = reqwest::Client::new();
    // Keys unique to this run: Redis may hold buckets of an earlier one.
    let run = std::process::id();
    let check = |key: String| {
        let client = client.clone();
        let url = format!("http://{http_addr}/v1/check?limit=per_api_key&entry=api_key%3D{key}");
        async move {
            client
                .get(url)
                .send()
                .await
                .map_or(0, |r| r.status().as_u16())
        }
    };
    let mut ready = false;
    for _ in 0..200 {
        if check(format!("probe-{run}")).await == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(ready, "the gateway never admitted a call");
    let mut admitted = 0u32;
    let mut refused = false;
    let started = std::time::Instant::now();
    for _ in 0..120 {
        match check(format!("alice-{run}")).await {
            200 => admitted += 1,
            429 => refused = true,
            other => panic!("status {other}"),
        }
    }
    // 66 whole tokens (burst 2 s of 33.334/s), plus what 33.334/s refills while the loop runs.
    let refill = (33.334 * started.elapsed().as_secs_f64()).ceil() as u32 + 1;
    assert!(
        refused && admitted >= 66 && admitted <= 66 + refill,
        "{admitted} admitted, {refill} refilled meanwhile"
    );
    assert_eq!(check(format!("bob-{run}")).await, 200, "bob is not alice");
    // Alice stays held to her part: whatever she gets now is what 33.334/s refilled meanwhile
    // (on a slow machine a token may come back between two calls), never her burst again.
    let since = std::time::Instant::now();
    let mut again = 0u32;
    for _ in 0..40 {
        if check(format!("alice-{run}")).await == 200 {
            again += 1;
        }
    }
    let refilled = (33.334 * since.elapsed().as_secs_f64()).ceil() as u32 + 1;
    assert!(
        again <= refilled && again < 40,
        "alice got {again} of 40 more, {refilled} refilled meanwhile"
    );
    let _ = gw_stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), gateway).await;
    let _ = stop.send(true);
}
