//! What the gateway answers when something is missing: descriptors that name no limit (each
//! `unmapped` policy), no rule set yet, and Redis away (each limit's failure policy).

mod common;

use common::{
    flags, grpc_python, limit, redis_url, rules, run, unique, FakeDaemon, Gateway, TOKEN,
};
use serde_json::{json, Value};
use shareplane_gateway::config::{FileConfig, Flags, LimitSettings};
use shareplane_gateway::mapping::UnmappedPolicy;
use shareplane_limiter::FailurePolicy;

fn script() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/rls_client.py").to_owned()
}

async fn get(url: String) -> (u16, Option<String>, String) {
    let r = reqwest::get(url).await.unwrap_or_else(|e| panic!("{e}"));
    let status = r.status().as_u16();
    let retry = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, retry, r.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmapped_descriptors_follow_their_policy_and_no_rule_set_is_unavailable() {
    let test = "unmapped_descriptors_follow_their_policy_and_no_rule_set_is_unavailable";
    let (Some(redis), Some(python)) = (redis_url(test), grpc_python(test)) else {
        return;
    };
    let k = unique("mapped");
    let daemon = FakeDaemon::start(rules(1, vec![limit(&k, 0.001, 2.0)])).await;
    let calls = json!([
        {"domain": "d", "descriptors": [[["shareplane_limit", k]], [["generic_key", "nobody"]]]},
        {"domain": "d", "descriptors": [[["shareplane_limit", k]]], "repeat": 3},
    ])
    .to_string();
    let mut answers = Vec::new();
    for policy in [UnmappedPolicy::Deny, UnmappedPolicy::Error] {
        let file = FileConfig {
            unmapped: Some(policy),
            ..FileConfig::default()
        };
        let gw = Gateway::start(file, flags(&daemon, &redis)).await;
        gw.ready().await;
        let out = run(&python, &[script(), gw.grpc.clone(), calls.clone()]);
        answers.push(serde_json::from_str::<Value>(&out).unwrap_or_else(|e| panic!("{e}: {out}")));
        gw.stop().await;
    }
    // deny: the request is refused and nothing is spent (the limit's 2 tokens go to the next
    // two calls); error: INVALID_ARGUMENT, nothing spent either (and the bucket is now empty).
    let deny = &answers[0];
    assert_eq!(deny[0][0]["overall_code"], "OVER_LIMIT", "{deny}");
    assert_eq!(deny[0][0]["statuses"][1]["code"], "OVER_LIMIT");
    let codes: Vec<&str> = (0..3)
        .map(|i| deny[1][i]["overall_code"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(codes, ["OK", "OK", "OVER_LIMIT"], "{deny}");
    let error = &answers[1];
    assert_eq!(error[0][0]["error"], "INVALID_ARGUMENT", "{error}");

    // No rule set (the daemon cannot be reached): UNAVAILABLE over gRPC, 503 over HTTP, so the
    // proxy's own failure mode decides.
    let closed = common::daemon::closed_port();
    let f = Flags {
        rules: Some(format!("http://127.0.0.1:{closed}")),
        ..flags(&daemon, &redis)
    };
    let gw = Gateway::start(FileConfig::default(), f).await;
    let (status, body) = gw.health_until(|s, _| s == 503).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.starts_with("no rule set loaded yet ("), "{body}");
    let out = run(&python, &[script(), gw.grpc.clone(), calls]);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v[0][0]["error"], "UNAVAILABLE", "{v}");
    let (status, retry, _) = get(format!("{}/v1/check?limit={k}", gw.http)).await;
    assert_eq!((status, retry.as_deref()), (503, Some("1")));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_away_each_limit_follows_its_failure_policy() {
    let test = "with_redis_away_each_limit_follows_its_failure_policy";
    if redis_url(test).is_none() {
        return;
    }
    let [open, closed, local] = ["open", "closed", "local"].map(unique);
    let daemon = FakeDaemon::start(rules(
        1,
        vec![
            limit(&open, 10.0, 20.0),
            limit(&closed, 10.0, 20.0),
            limit(&local, 10.0, 20.0),
        ],
    ))
    .await;
    let mut file = FileConfig::default();
    file.limits.insert(
        open.clone(),
        LimitSettings {
            failure: Some(FailurePolicy::FailOpen),
            key_group: None,
        },
    );
    file.limits.insert(
        closed.clone(),
        LimitSettings {
            failure: Some(FailurePolicy::FailClosed),
            key_group: None,
        },
    );
    // Redis on a port where nothing listens.
    let away = format!("redis://127.0.0.1:{}/", common::daemon::closed_port());
    let f = Flags {
        demand_token: Some(TOKEN.to_owned()),
        ..flags(&daemon, &away)
    };
    let gw = Gateway::start(file, f).await;
    let (status, body) = gw
        .health_until(|_, b| b.starts_with("Redis not reached yet: cannot"))
        .await;
    assert_eq!(status, 503, "{body}");
    let check = |l: &str| get(format!("{}/v1/check?limit={l}", gw.http));
    for _ in 0..50 {
        assert_eq!(check(&open).await.0, 200);
    }
    let (status, retry, _) = check(&closed).await;
    assert_eq!(
        (status, retry),
        (429, None),
        "fail closed: refused, no wait helps"
    );
    // The local share starts empty and refills at 10/s here (one gateway per Region).
    let (status, retry, _) = check(&local).await;
    assert_eq!((status, retry.as_deref()), (429, Some("1")));
    let m = gw.metrics().await;
    assert_eq!(
        common::metric(&m, "shareplane_gateway_fallback_in_use"),
        Some(1.0),
        "{m}"
    );
    gw.stop().await;
}
