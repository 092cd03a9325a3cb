//! The gateway on a cluster-mode Redis (three masters on 127.0.0.1, tests/lib/redis-cluster.sh):
//! `redis_mode = "cluster"` as an operator writes it; a request naming two limits is decided by
//! Redis under the default shared tag; one naming limits of two key groups is decided by the
//! failure policies, and the metrics say why. A template's values share its key group: a value and
//! a listed limit of that group are one call.

mod common;

use std::collections::BTreeMap;

use common::{flags, limit, metric, redis_cluster_url, rules, unique, FakeDaemon, Gateway};
use shareplane_gateway::config::{FileConfig, LimitSettings};
use shareplane_limiter::RedisMode;

async fn check(gw: &Gateway, limits: &[&str]) -> u16 {
    let query: Vec<String> = limits.iter().map(|l| format!("limit={l}")).collect();
    reqwest::get(format!("{}/v1/check?{}", gw.http, query.join("&")))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_in_cluster_mode_decides_multi_limit_requests_in_redis() {
    let test = "a_gateway_in_cluster_mode_decides_multi_limit_requests_in_redis";
    let Some(url) = redis_cluster_url(test) else {
        return;
    };
    let (a, b, other) = (unique("gw-a"), unique("gw-b"), unique("gw-other"));
    let daemon = FakeDaemon::start(rules(
        1,
        vec![
            limit(&a, 0.001, 3.0),
            limit(&b, 0.001, 100.0),
            limit(&other, 0.001, 100.0),
        ],
    ))
    .await;
    let file = FileConfig {
        redis_mode: Some(RedisMode::Cluster),
        // A cluster's first call learns the slot map.
        redis_timeout_ms: Some(2_000),
        limits: BTreeMap::from([(
            other.clone(),
            LimitSettings {
                failure: None,
                key_group: Some(unique("elsewhere")),
            },
        )]),
        ..FileConfig::default()
    };
    let gw = Gateway::start(file, flags(&daemon, &url)).await;
    gw.ready().await;
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(check(&gw, &[&a, &b]).await);
    }
    // Redis decides: the burst of 3 passes (the local fallback would start empty and refuse).
    assert_eq!(got, [200, 200, 200, 429]);
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, "shareplane_gateway_redis_decisions_total"),
        Some(4.0),
        "{m}"
    );
    // One after another, each check was a call of its own (none waited for another in flight).
    assert_eq!(
        metric(&m, "shareplane_gateway_redis_calls_total"),
        Some(4.0),
        "{m}"
    );
    // Another key group in the same request: the failure policy (local share, empty on entry).
    assert_eq!(check(&gw, &[&b, &other]).await, 429);
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, "shareplane_gateway_cross_slot_checks_total"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, "shareplane_gateway_redis_failures_total"),
        Some(0.0)
    );
    // Redis still decides what it can.
    assert_eq!(check(&gw, &[&other]).await, 200);
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, "shareplane_gateway_redis_decisions_total"),
        Some(5.0),
        "{m}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_templates_values_share_its_key_group_with_the_listed_limits_of_that_group() {
    let test = "a_templates_values_share_its_key_group_with_the_listed_limits_of_that_group";
    let Some(url) = redis_cluster_url(test) else {
        return;
    };
    let (listed, tpl, apart) = (unique("gw-l"), unique("gw-per-key"), unique("gw-apart"));
    let template = |id: &str| shareplane_limiter::TemplateWire {
        id: id.to_owned(),
        entry: "api_key".into(),
        rate: 0.001,
        burst: 3.0,
        shadow: false,
        kind: shareplane_limiter::LimitKind::Capacity,
        overrides: Vec::new(),
        slots: 0,
    };
    let daemon = FakeDaemon::start(shareplane_limiter::RulesWire {
        templates: vec![template(&tpl), template(&apart)],
        ..rules(1, vec![limit(&listed, 0.001, 100.0)])
    })
    .await;
    let group = unique("g");
    let in_group = |g: &str| LimitSettings {
        failure: None,
        key_group: Some(g.to_owned()),
    };
    let file = FileConfig {
        redis_mode: Some(RedisMode::Cluster),
        redis_timeout_ms: Some(2_000),
        key_tag: Some("{limit}".into()),
        limits: BTreeMap::from([
            (listed.clone(), in_group(&group)),
            (tpl.clone(), in_group(&group)),
        ]),
        ..FileConfig::default()
    };
    let gw = Gateway::start(file, flags(&daemon, &url)).await;
    gw.ready().await;
    let ask = |t: &str, key: &str| {
        let url = format!(
            "{}/v1/check?limit={listed}&limit={t}&entry=api_key%3D{key}",
            gw.http
        );
        async move { reqwest::get(url).await.map_or(0, |r| r.status().as_u16()) }
    };
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(ask(&tpl, "alice").await);
    }
    // One script call on the group's slot: the value's burst of 3, then refused; bob's is his.
    assert_eq!(got, [200, 200, 200, 429]);
    assert_eq!(ask(&tpl, "bob").await, 200);
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, "shareplane_gateway_cross_slot_checks_total"),
        Some(0.0),
        "{m}"
    );
    // A template in a group of its own (its id, with key_tag "{limit}") is another slot.
    assert_eq!(ask(&apart, "alice").await, 429);
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, "shareplane_gateway_cross_slot_checks_total"),
        Some(1.0),
        "{m}"
    );
    gw.stop().await;
}
