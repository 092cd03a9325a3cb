//! The gateway on a cluster-mode Redis (three masters on 127.0.0.1, tests/lib/redis-cluster.sh):
//! `redis_mode = "cluster"` as an operator writes it; a request naming two limits is decided by
//! Redis under the default shared tag; one naming limits of two key groups is decided by the
//! failure policies, and the metrics say why.

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
