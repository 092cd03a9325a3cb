//! What the gateway benchmarks (`bench_gateway`, `bench_vs_limitador`) share: a daemon stand-in
//! that serves one rule set, the one request both ask of that limit, and the machine's load for
//! their reports.

use std::time::Duration;

use axum::routing::get;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

/// A daemon stand-in on 127.0.0.1: one rule set, version 1, no lease, one capacity limit `limit`
/// that refuses nothing (a billion a second); long polls wait and answer 304. Returns its URL.
pub async fn rules_server(limit: &str) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let body = format!(
        r#"{{"version":1,"region":"A","limits":[{{"id":"{limit}","rate":1e9,"burst":2e9,"kind":"capacity"}}]}}"#
    );
    let app = axum::Router::new().route(
        "/v1/rules",
        get(move |q: axum::extract::RawQuery| {
            let body = body.clone();
            async move {
                use axum::response::IntoResponse;
                if q.0.is_some_and(|q| q.contains("after=1")) {
                    tokio::time::sleep(Duration::from_secs(20)).await;
                    return axum::http::StatusCode::NOT_MODIFIED.into_response();
                }
                ([("content-type", "application/json")], body).into_response()
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", l.local_addr()?);
    tokio::spawn(async move { axum::serve(l, app).await });
    Ok(url)
}

/// One `ShouldRateLimit` request of cost 1 in `domain` naming `limit` by one descriptor entry,
/// `shareplane_limit=<limit>` (the stand-in's limit; a limitador limit conditioned on that entry).
pub fn request(domain: &str, limit: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "shareplane_limit".into(),
                value: limit.into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 1,
    }
}

/// The load averages of the last 1, 5 and 15 minutes (empty where `/proc` has none).
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
