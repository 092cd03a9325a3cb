//! Templates through the real gateway and a real redis-server: one bucket per value of a
//! descriptor entry, as Envoy's `generic_key` + `request_headers` actions send it
//! (`[(shareplane_limit, <template>), (api_key, <value>)]`), asked by grpcio and by HTTP.

mod common;

use common::{
    flags, grpc_python, limit, metric, redis_url, rules, run, unique, FakeDaemon, Gateway,
};
use serde_json::{json, Value};
use shareplane_gateway::config::FileConfig;
use shareplane_gateway::mapping::ValuePolicy;
use shareplane_limiter::templates::{value_hash, MAX_VALUE_LEN};
use shareplane_limiter::{LimitKind, OverrideWire, RulesWire, TemplateWire};

fn script() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/rls_client.py").to_owned()
}

/// `template`: 1/s and a burst of 5 per API key; the key "partner" pays for 2/s and 10.
fn per_key(template: &str) -> TemplateWire {
    TemplateWire {
        id: template.to_owned(),
        entry: "api_key".to_owned(),
        rate: 1.0,
        burst: 5.0,
        shadow: false,
        kind: LimitKind::Capacity,
        overrides: vec![OverrideWire {
            value: "partner".into(),
            rate: 2.0,
            burst: 10.0,
        }],
        slots: 0,
    }
}

fn with_template(version: u64, listed: &str, t: TemplateWire) -> RulesWire {
    RulesWire {
        templates: vec![t],
        ..rules(version, vec![limit(listed, 100.0, 200.0)])
    }
}

fn call(template: &str, key: Option<&str>, repeat: u32) -> Value {
    let mut entries = vec![json!(["shareplane_limit", template])];
    if let Some(k) = key {
        entries.push(json!(["api_key", k]));
    }
    json!({"domain": "edge", "descriptors": [entries], "repeat": repeat})
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

fn oks(answers: &Value) -> usize {
    codes(answers).iter().filter(|c| *c == "OK").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_exhausted_leaves_the_others_untouched_and_a_missing_key_is_denied() {
    let test = "one_key_exhausted_leaves_the_others_untouched_and_a_missing_key_is_denied";
    let (Some(redis), Some(python)) = (redis_url(test), grpc_python(test)) else {
        return;
    };
    let (tpl, listed) = (unique("per_api_key"), unique("k"));
    // One token per 20 s: alice stays empty through the calls that follow hers, however slowly
    // a loaded machine makes them.
    let mut t = per_key(&tpl);
    t.rate = 0.05;
    let daemon = FakeDaemon::start(with_template(1, &listed, t)).await;
    let gw = Gateway::start(FileConfig::default(), flags(&daemon, &redis)).await;
    gw.ready().await;
    let long = "k".repeat(MAX_VALUE_LEN + 1);
    let longest = "k".repeat(MAX_VALUE_LEN);
    let calls = json!([
        // 0: alice spends her burst of 5, then is refused.
        call(&tpl, Some("alice"), 8),
        // 1: bob, and 2: the partner's larger bucket, are untouched by alice.
        call(&tpl, Some("bob"), 5),
        call(&tpl, Some("partner"), 13),
        // 3: the template without its entry: refused (default policy), never a shared bucket.
        call(&tpl, None, 1),
        // 4: a value longer than 256 bytes is refused; 5: one of 256 bytes has its bucket.
        call(&tpl, Some(&long), 1),
        call(&tpl, Some(&longest), 1),
        // 6: a value and a listed limit in one request: all or nothing, alice is still empty.
        {"domain": "edge", "descriptors": [
            [["shareplane_limit", listed]],
            [["shareplane_limit", tpl], ["api_key", "alice"]]
        ]},
    ]);
    let out = run(&python, &[script(), gw.grpc.clone(), calls.to_string()]);
    let out: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));

    let alice = codes(&out[0]);
    assert!((5..=6).contains(&oks(&out[0])), "{alice:?}");
    assert_eq!(alice[7], "OVER_LIMIT", "{alice:?}");
    // One token comes back in 1 / 0.05 = 20 s.
    assert_eq!(out[0][7]["headers"]["retry-after"], "20", "{}", out[0][7]);
    let status = &out[0][0]["statuses"][0];
    assert_eq!(
        status["current_limit"]["name"],
        tpl.as_str(),
        "named by template, not value"
    );
    assert_eq!(status["limit_remaining"], 4);
    assert_eq!(codes(&out[1]), ["OK"; 5], "bob is not alice");
    let partner = oks(&out[2]);
    assert!((10..=11).contains(&partner), "{:?}", codes(&out[2]));
    assert_eq!(
        out[2][0]["statuses"][0]["current_limit"]["requests_per_unit"],
        2
    );
    assert_eq!(codes(&out[3]), ["OVER_LIMIT"]);
    assert_eq!(out[3][0]["statuses"][0]["code"], "OVER_LIMIT");
    assert!(
        out[3][0]["headers"].get("retry-after").is_none(),
        "no wait helps"
    );
    assert_eq!(codes(&out[4]), ["OVER_LIMIT"]);
    assert_eq!(codes(&out[5]), ["OK"]);
    assert_eq!(codes(&out[6]), ["OVER_LIMIT"]);
    let both = &out[6][0]["statuses"];
    assert_eq!(
        (both[0]["code"].as_str(), both[1]["code"].as_str()),
        (Some("OK"), Some("OVER_LIMIT"))
    );

    // In Redis: one key per value, named by its hash under the template's tag, with a TTL.
    let client = redis::Client::open(redis.as_str()).unwrap_or_else(|e| panic!("{e}"));
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let key = format!("rl:{{{tpl}}}:{tpl}#{}", value_hash("alice"));
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap_or(-9);
    // The client asks for twice a full refill (2 × 5 / 0.05 s = 200 s), at least MIN_TTL_MS.
    let most = 200_000.max(shareplane_limiter::store::MIN_TTL_MS) as i64;
    assert!((most - 5_000..=most).contains(&ttl), "{key}: {ttl}");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("rl:{{{tpl}}}:*"))
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    assert_eq!(keys.len(), 4, "alice, bob, partner, the longest: {keys:?}");
    assert!(keys.iter().all(|k| k.len() == key.len()), "{keys:?}");
    let bytes: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap_or(-1);
    eprintln!(
        "redis memory of one value's bucket: {bytes} bytes (key of {} bytes)",
        key.len()
    );
    assert!((1..=512).contains(&bytes), "{bytes}");

    let m = gw.metrics().await;
    let series = |s: &str| metric(&m, s).unwrap_or(-1.0);
    for (reason, n) in [("missing", 1.0), ("too_long", 1.0)] {
        let s = format!(
            "shareplane_gateway_template_values_refused_total{{reason=\"{reason}\",policy=\"deny\"}}"
        );
        assert_eq!(series(&s), n, "{s}\n{m}");
    }
    assert!(
        series(&format!(
            "shareplane_gateway_decisions_total{{limit=\"{tpl}\",code=\"over_limit\"}}"
        )) >= 5.0,
        "{m}"
    );
    assert!(
        !m.contains("alice") && !m.contains(&value_hash("alice")),
        "no series per value"
    );
    assert_eq!(daemon.demand(&tpl), 0, "values report no demand");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_values_cannot_reset_a_key_and_the_error_policy_and_the_fence_hold() {
    let test = "a_flood_of_values_cannot_reset_a_key_and_the_error_policy_and_the_fence_hold";
    let Some(redis) = redis_url(test) else {
        return;
    };
    let (tpl, listed) = (unique("per_user"), unique("k"));
    let mut t = per_key(&tpl);
    t.entry = "user".into();
    t.rate = 0.001; // no refill worth speaking of during the test
    let daemon = FakeDaemon::start(with_template(1, &listed, t.clone())).await;
    daemon.set_lease(Some(60_000));
    let file = FileConfig {
        template_value: Some(ValuePolicy::Error),
        ..FileConfig::default()
    };
    let gw = Gateway::start(file, flags(&daemon, &redis)).await;
    gw.ready().await;
    let http = reqwest::Client::new();
    let check = |query: String| {
        let http = http.clone();
        let url = format!("{}/v1/check?limit={tpl}&{query}", gw.http);
        async move {
            http.get(url)
                .send()
                .await
                .map_or(0, |r| r.status().as_u16())
        }
    };
    let mut victim = Vec::new();
    for _ in 0..6 {
        victim.push(check("entry=user%3Dvictim".into()).await);
    }
    assert_eq!(victim, [200, 200, 200, 200, 200, 429]);
    // 500 distinct values: each its own bucket; the victim's stays spent.
    for i in 0..500 {
        assert_eq!(check(format!("entry=user%3Dflood-{i}")).await, 200);
    }
    assert_eq!(check("entry=user%3Dvictim".into()).await, 429, "not reset");
    // The error policy: a request without the entry is a bad request, counted.
    assert_eq!(check("entry=other%3Dx".into()).await, 400);
    let m = gw.metrics().await;
    let s = "shareplane_gateway_template_values_refused_total{reason=\"missing\",policy=\"error\"}";
    assert_eq!(metric(&m, s), Some(1.0), "{m}");

    // A lease that runs out fences templated capacity limits as it does listed ones; a security
    // template is checked as always.
    let mut sec = per_key(&unique("per_ip"));
    sec.entry = "user".into();
    sec.kind = LimitKind::Security;
    daemon.set_lease(Some(1));
    let mut set = with_template(2, &listed, t);
    set.templates.push(sec.clone());
    daemon.publish(set);
    let (status, body) = gw.health_until(|s, _| s == 503).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(check("entry=user%3Dfresh".into()).await, 429, "fenced");
    let url = format!("{}/v1/check?limit={}&entry=user%3Dfresh", gw.http, sec.id);
    let status = http
        .get(url)
        .send()
        .await
        .map_or(0, |r| r.status().as_u16());
    assert_eq!(status, 200, "a security template is not fenced");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_the_value_policy_live_and_refuses_what_takes_a_restart() {
    let test = "a_reload_changes_the_value_policy_live_and_refuses_what_takes_a_restart";
    let Some(redis) = redis_url(test) else {
        return;
    };
    let (tpl, listed) = (unique("per_api_key"), unique("k"));
    let daemon = FakeDaemon::start(with_template(1, &listed, per_key(&tpl))).await;
    let http = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = http.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let mut f = flags(&daemon, &redis);
    f.http_listen = Some(addr);
    let cfg = |file: FileConfig, f: shareplane_gateway::Flags| {
        shareplane_gateway::config::resolve(file, f).unwrap_or_else(|e| panic!("{e}"))
    };
    let first = cfg(FileConfig::default(), f.clone());
    let (tx, reloads) = tokio::sync::mpsc::channel(1);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(shareplane_gateway::serve_reloading(
        first,
        None,
        Some(http),
        async move {
            let _ = stopped.await;
        },
        reloads,
    ));
    let client = reqwest::Client::new();
    let get = |path: String| {
        let client = client.clone();
        async move {
            let r = client.get(format!("http://{addr}{path}")).send().await;
            r.map_or((0, String::new()), |r| (r.status().as_u16(), String::new()))
        }
    };
    let without_entry = format!("/v1/check?limit={tpl}");
    let mut status = 0;
    for _ in 0..200 {
        status = get(without_entry.clone()).await.0;
        if status != 503 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(status, 429, "deny by default");
    let metrics = || async {
        let r = reqwest::get(format!("http://{addr}/metrics")).await;
        r.unwrap_or_else(|e| panic!("{e}"))
            .text()
            .await
            .unwrap_or_default()
    };
    // A reload to template_value = "error": the next request is a bad request.
    let file = FileConfig {
        template_value: Some(ValuePolicy::Error),
        ..FileConfig::default()
    };
    let _ = tx.send(Ok(cfg(file.clone(), f.clone()))).await;
    let mut applied = None;
    for _ in 0..200 {
        applied = metric(
            &metrics().await,
            "shareplane_gateway_config_reloads_total{result=\"applied\"}",
        );
        if applied == Some(1.0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(applied, Some(1.0));
    assert_eq!(get(without_entry.clone()).await.0, 400);
    // One that changes the Redis URL (or a file that does not load) is refused: "error" stays.
    let mut moved = f.clone();
    moved.redis = Some("redis://127.0.0.1:1/".into());
    let _ = tx.send(Ok(cfg(file, moved))).await;
    let _ = tx.send(Err(vec!["config: cannot read x".into()])).await;
    let mut refused = None;
    for _ in 0..200 {
        refused = metric(
            &metrics().await,
            "shareplane_gateway_config_reloads_total{result=\"refused\"}",
        );
        if refused == Some(2.0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(refused, Some(2.0));
    assert_eq!(get(without_entry).await.0, 400, "the running policy stays");
    let _ = stop.send(());
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), served).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_of_a_slotted_template_are_held_at_their_slots_shares_and_counted_as_their_demand() {
    let test =
        "values_of_a_slotted_template_are_held_at_their_slots_shares_and_counted_as_their_demand";
    let Some(redis) = redis_url(test) else {
        return;
    };
    use shareplane_limiter::slots::{slot_id, slot_of};
    const K: u32 = 8;
    let (tpl, listed) = (unique("per_key_slots"), unique("k"));
    let slot = |v: &str| slot_of(v, K).unwrap_or(u32::MAX);
    let bob = (0..)
        .map(|i| format!("bob-{i}"))
        .find(|v| slot(v) != slot("alice"))
        .unwrap_or_default();
    // Alice's slot has a burst of 2 in this Region, bob's 4, the others 1; every share refills
    // less than a token over the test (as the daemon publishes a slot: burst_s × the share).
    let burst = |k: u32| match k {
        k if k == slot("alice") => 2.0,
        k if k == slot(&bob) => 4.0,
        _ => 1.0,
    };
    let mut set = rules(
        1,
        (0..K)
            .map(|k| limit(&slot_id(&tpl, k), burst(k) / 1_000.0, burst(k)))
            .chain([limit(&listed, 100.0, 200.0)])
            .collect(),
    );
    let mut t = per_key(&tpl);
    (t.rate, t.burst, t.slots) = (0.0, 0.0, K);
    set.templates = vec![t];
    let daemon = FakeDaemon::start(set).await;
    let file = FileConfig {
        demand_every_ms: Some(100),
        ..FileConfig::default()
    };
    let gw = Gateway::start(file, flags(&daemon, &redis)).await;
    gw.ready().await;
    let http = reqwest::Client::new();
    let check = |query: String| {
        let http = http.clone();
        let url = format!("{}/v1/check?{query}", gw.http);
        async move {
            http.get(url)
                .send()
                .await
                .map_or(0, |r| r.status().as_u16())
        }
    };
    let mut alice = Vec::new();
    let mut bobs = Vec::new();
    for _ in 0..4 {
        alice.push(check(format!("limit={tpl}&entry=api_key%3Dalice")).await);
    }
    for _ in 0..6 {
        bobs.push(check(format!("limit={tpl}&entry=api_key%3D{bob}")).await);
    }
    assert_eq!(alice, [200, 200, 429, 429], "alice at her slot's share");
    assert_eq!(bobs, [200, 200, 200, 200, 429, 429], "bob at his");
    // The partner's override keeps its static numbers (burst 10), not a slot's.
    let mut partner = 0;
    for _ in 0..10 {
        partner += usize::from(check(format!("limit={tpl}&entry=api_key%3Dpartner")).await == 200);
    }
    assert_eq!(partner, 10);
    // A slot limit is not a listed limit a descriptor may name.
    let direct = check(format!("limit={}", slot_id(&tpl, slot("alice")))).await;
    assert_ne!(direct, 200, "a slot is not addressable");
    // The values' calls arrive at the daemon as their slots' demand, nothing per value.
    let (a, b) = (slot_id(&tpl, slot("alice")), slot_id(&tpl, slot(&bob)));
    for _ in 0..100 {
        if daemon.demand(&a) >= 4 && daemon.demand(&b) >= 6 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!((daemon.demand(&a), daemon.demand(&b)), (4, 6));
    assert_eq!(
        daemon.demand(&tpl),
        0,
        "no demand under the template's own id"
    );
    gw.stop().await;
}
