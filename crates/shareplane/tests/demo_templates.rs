//! The demo's templates through a real `shareplane gateway` (in this process) and a real
//! redis-server: "every API key gets 100/s across all Regions", each Region publishing its
//! static part, one key refused while the others pass; and "every tenant gets 300/s", run as 4
//! coordination slots whose shares add up to at most 300 per slot, one tenant refused at its
//! slot's share while a tenant of another slot passes.

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use shareplane::demo::{router, Demo};
use shareplane_gateway::config::{FileConfig, Flags};
use shareplane_limiter::slots::{slot_id, slot_of};
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
    // per_tenant: 4 slot limits in every Region's rule set, their shares adding up to at most
    // 300 per slot (the core's invariant, each slot an ordinary limit).
    let mut slot_sums = [0.0f64; 4];
    for region in ["A", "B", "C"] {
        let rules = get_json(&format!("{base}/regions/{region}/v1/rules")).await;
        let t = &rules["templates"][1];
        assert_eq!(
            (t["id"].as_str(), t["entry"].as_str(), t["slots"].as_u64()),
            (Some("per_tenant"), Some("tenant"), Some(4)),
            "{rules}"
        );
        for (k, sum) in slot_sums.iter_mut().enumerate() {
            *sum += slot_share(&rules, k as u32);
        }
    }
    for (k, sum) in slot_sums.iter().enumerate() {
        assert!(*sum > 0.0 && *sum <= 300.0 + 1e-9, "slot {k}: {sum}");
    }

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
        let url = format!("http://{http_addr}/v1/check?limit=per_api_key&entry=api_key%3D{key}");
        status(&client, url)
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

    // A tenant is held to its slot's share in Region A (2 s of it, plus what refills meanwhile);
    // a tenant of another slot passes.
    let tenant = |name: &str| {
        let url = format!("http://{http_addr}/v1/check?limit=per_tenant&entry=tenant%3D{name}");
        status(&client, url)
    };
    let acme = format!("acme-{run}");
    let slot = slot_of(&acme, 4).unwrap_or_else(|| panic!("a slot"));
    let other = (0..)
        .map(|i| format!("other-{run}-{i}"))
        .find(|v| slot_of(v, 4) != Some(slot))
        .unwrap_or_default();
    let rules = get_json(&format!("{base}/regions/A/v1/rules")).await;
    let share = slot_share(&rules, slot);
    let started = std::time::Instant::now();
    let (mut admitted, mut refused) = (0u32, false);
    for _ in 0..2_000 {
        match tenant(&acme).await {
            200 => admitted += 1,
            429 => {
                refused = true;
                break;
            }
            other => panic!("status {other}"),
        }
    }
    // The slot's share may move while the loop runs (the calls are demand that reaches the
    // daemons): bounded by the slot's whole rate, which one Region never holds more of.
    let most = (2.0 * 300.0 + 300.0 * started.elapsed().as_secs_f64()).ceil() as u32;
    assert!(
        refused && admitted <= most && admitted >= (2.0 * share * 0.5) as u32,
        "{acme} (slot {slot}, A's share {share}): {admitted} admitted, refused {refused}"
    );
    assert_eq!(tenant(&other).await, 200, "a tenant of another slot");

    let _ = gw_stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), gateway).await;
    let _ = stop.send(true);
}

/// The status of one check, or 0 when the gateway did not answer.
async fn status(client: &reqwest::Client, url: String) -> u16 {
    client
        .get(url)
        .send()
        .await
        .map_or(0, |r| r.status().as_u16())
}

/// A Region's share of `per_tenant`'s slot `k` in a rule set, requests/s.
fn slot_share(rules: &serde_json::Value, k: u32) -> f64 {
    let id = slot_id("per_tenant", k);
    rules["limits"]
        .as_array()
        .and_then(|ls| ls.iter().find(|l| l["id"].as_str() == Some(id.as_str())))
        .and_then(|l| l["rate"].as_f64())
        .unwrap_or_else(|| panic!("{id} in {rules}"))
}
