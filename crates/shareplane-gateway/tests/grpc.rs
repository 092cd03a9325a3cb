//! Envoy's rate limit service, called by a client this project did not write (Python grpcio,
//! messages encoded by hand in tests/rls_client.py), against a real redis-server.

mod common;

use common::{
    flags, grpc_python, limit, metric, redis_url, rules, run, unique, FakeDaemon, Gateway,
};
use serde_json::{json, Value};
use shareplane_gateway::config::FileConfig;
use shareplane_gateway::mapping::DescriptorMapping;
use shareplane_limiter::LimitWire;

fn script() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/rls_client.py").to_owned()
}

fn descriptor(limit: &str) -> Value {
    json!([["shareplane_limit", limit]])
}

fn codes(answers: &Value) -> Vec<String> {
    answers
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| {
                    x["overall_code"]
                        .as_str()
                        .or(x["error"].as_str())
                        .unwrap_or("?")
                        .to_owned()
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_gets_ok_within_the_share_and_over_limit_beyond_it_or_above_the_burst() {
    let test = "grpcio_gets_ok_within_the_share_and_over_limit_beyond_it_or_above_the_burst";
    let (Some(redis), Some(python)) = (redis_url(test), grpc_python(test)) else {
        return;
    };
    let [a, c, d, e, shadow] = ["a", "c", "d", "e", "shadow"].map(unique);
    let shadow_limit = LimitWire {
        shadow: true,
        ..limit(&shadow, 0.001, 3.0)
    };
    let daemon = FakeDaemon::start(rules(
        1,
        vec![
            limit(&a, 1.0, 10.0),
            limit(&c, 100.0, 10.0),
            limit(&d, 0.001, 3.0),
            limit(&e, 0.5, 10.0),
            shadow_limit,
        ],
    ))
    .await;
    let file = FileConfig {
        max_cost: Some(3),
        descriptors: vec![DescriptorMapping {
            domain: Some("edge".into()),
            key: "generic_key".into(),
            value: Some("partner-x".into()),
            limit: c.clone(),
            prefix: Vec::new(),
            exact: false,
        }],
        ..FileConfig::default()
    };
    let gw = Gateway::start(file, flags(&daemon, &redis)).await;
    gw.ready().await;

    let calls = json!([
        // 0: one call within the share.
        {"domain": "any", "descriptors": [descriptor(&a)]},
        // 1: the rest of the burst (9 tokens), then beyond it.
        {"domain": "any", "descriptors": [descriptor(&a)], "repeat": 12},
        // 2: a cost above the burst (10) of a limit with plenty of rate.
        {"domain": "any", "descriptors": [descriptor(&c)], "hits_addend": 11},
        // 3: within it, through the configured mapping, per-descriptor hits_addend.
        {"domain": "edge", "descriptors": [[["generic_key", "partner-x"]]], "descriptor_hits": [2]},
        // 4: two limits, all or nothing: d has 3 tokens, e has 10.
        {"domain": "any", "descriptors": [descriptor(&d), descriptor(&e)], "repeat": 4},
        // 5: e alone: it was charged 3 times, not 4.
        {"domain": "any", "descriptors": [descriptor(&e)]},
        // 6: a descriptor that names no limit is allowed (default) and counted.
        {"domain": "any", "descriptors": [[["generic_key", "nobody"]]]},
        // 7: a shadow limit past its burst never refuses.
        {"domain": "any", "descriptors": [descriptor(&shadow)], "repeat": 5},
        // 8: one cost per request: differing descriptor hits are an error.
        {"domain": "any", "descriptors": [descriptor(&a), descriptor(&e)], "descriptor_hits": [1, 2]},
    ]);
    let out = run(&python, &[script(), gw.grpc.clone(), calls.to_string()]);
    let out: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));

    let first = &out[0][0];
    assert_eq!(first["overall_code"], "OK", "{first}");
    let status = &first["statuses"][0];
    assert_eq!(status["code"], "OK");
    assert_eq!(status["current_limit"]["name"], a.as_str());
    assert_eq!(status["current_limit"]["requests_per_unit"], 1);
    assert_eq!(status["current_limit"]["unit"], "SECOND");
    assert_eq!(status["limit_remaining"], 9);
    assert!(first["headers"].get("retry-after").is_none());

    // Within the share until the bucket is spent (one more token may refill meanwhile), then
    // OVER_LIMIT with a Retry-After.
    let burst = codes(&out[1]);
    let oks = burst.iter().filter(|c| *c == "OK").count();
    assert!((9..=10).contains(&oks), "{burst:?}");
    assert_eq!(burst[..9], ["OK"; 9]);
    assert_eq!(burst[11], "OVER_LIMIT", "{burst:?}");
    let refused = &out[1][11];
    assert_eq!(refused["statuses"][0]["code"], "OVER_LIMIT");
    assert_eq!(refused["headers"]["retry-after"], "1", "{refused}");

    // Above the burst: OVER_LIMIT, and no wait would help, so no Retry-After.
    let above = &out[2][0];
    assert_eq!(above["overall_code"], "OVER_LIMIT", "{above}");
    assert!(above["headers"].get("retry-after").is_none(), "{above}");
    let mapped = &out[3][0];
    assert_eq!(mapped["overall_code"], "OK", "{mapped}");
    assert_eq!(mapped["statuses"][0]["current_limit"]["name"], c.as_str());
    assert_eq!(mapped["statuses"][0]["limit_remaining"], 8);

    assert_eq!(codes(&out[4]), ["OK", "OK", "OK", "OVER_LIMIT"]);
    let both = &out[4][3];
    assert_eq!(both["statuses"][0]["code"], "OVER_LIMIT", "{both}");
    assert_eq!(both["statuses"][1]["code"], "OK", "{both}");
    // A fractional share (0.5/s) is expressed exactly: 30 per minute.
    assert_eq!(
        both["statuses"][1]["current_limit"]["requests_per_unit"],
        30
    );
    assert_eq!(both["statuses"][1]["current_limit"]["unit"], "MINUTE");
    let e_alone = &out[5][0]["statuses"][0];
    let left = e_alone["limit_remaining"].as_u64().unwrap_or(0);
    assert!(
        (6..=7).contains(&left),
        "e was charged for the refused call: {e_alone}"
    );

    assert_eq!(out[6][0]["overall_code"], "OK");
    assert!(out[6][0]["statuses"][0].get("current_limit").is_none());
    assert_eq!(codes(&out[7]), ["OK"; 5]);
    assert_eq!(out[8][0]["error"], "INVALID_ARGUMENT", "{}", out[8]);

    let m = gw.metrics().await;
    let series = |s: String| metric(&m, &s).unwrap_or(-1.0);
    assert_eq!(
        series(format!(
            "shareplane_gateway_decisions_total{{limit=\"{d}\",code=\"over_limit\"}}"
        )),
        1.0,
        "{m}"
    );
    assert_eq!(
        series(format!(
            "shareplane_gateway_shadow_would_refuse_total{{limit=\"{shadow}\"}}"
        )),
        2.0,
        "{m}"
    );
    assert_eq!(
        series("shareplane_gateway_unmapped_descriptors_total{policy=\"allow\"}".into()),
        1.0
    );
    assert_eq!(
        series("shareplane_gateway_cost_above_max_total".into()),
        1.0
    );
    assert_eq!(series("shareplane_gateway_rules_version".into()), 1.0);
    assert!(
        series("shareplane_gateway_redis_seconds_count".into()) >= 20.0,
        "{m}"
    );
    assert_eq!(series("shareplane_gateway_fallback_in_use".into()), 0.0);
    gw.stop().await;
}
