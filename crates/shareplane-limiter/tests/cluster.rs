//! Cluster mode against a real cluster-mode redis-server of three masters on 127.0.0.1
//! (tests/lib/redis-cluster.sh, started by tests/run-all.sh): a check of limits whose own keys
//! hash to different slots is one script call under their key group, decided by Redis and exact;
//! many groups spread over the masters; a check across groups is decided locally with its reason,
//! and what it admitted is repaid group by group; a bucket whose slot moves to another master is
//! followed through `ASK` and `MOVED`.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::{limit, masters, node as seed, redis_cluster_url, rules, unique};
use shareplane_limiter::store::{RedisBuckets, StoreError};
use shareplane_limiter::{
    DecisionPath, KeyScheme, LimitWire, Limiter, LimiterConfig, RedisMode, RuleSet,
};

/// So slow that no test lasts long enough to see a whole token come back.
const SLOW: f64 = 0.0001;

fn cluster_cfg(url: &str) -> LimiterConfig {
    LimiterConfig {
        redis_mode: RedisMode::Cluster,
        // A cluster's first connection learns the slot map: more than the default 50 ms.
        redis_timeout: Duration::from_secs(2),
        ..LimiterConfig::new(url)
    }
}

fn limiter(cfg: LimiterConfig, limits: Vec<LimitWire>) -> Arc<Limiter> {
    let l = Limiter::new(cfg).unwrap_or_else(|e| panic!("{e}"));
    let set = RuleSet::from_wire(rules(1, limits), None, 1).unwrap_or_else(|e| panic!("{e}"));
    l.install(set);
    Arc::new(l)
}

async fn slot(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Two limit ids whose own keys (`rl:{<id>}:global`) hash to different slots.
async fn ids_in_two_slots(url: &str, name: &str) -> (String, String) {
    let mut conn = seed(url).await;
    let a = unique(&format!("{name}-a"));
    let slot_a = slot(&mut conn, &KeyScheme::PerLimit.key(&a)).await;
    for i in 0..100 {
        let b = unique(&format!("{name}-b{i}"));
        if slot(&mut conn, &KeyScheme::PerLimit.key(&b)).await != slot_a {
            return (a, b);
        }
    }
    panic!("100 ids all hashed to slot {slot_a}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_whose_own_keys_are_in_two_slots_are_one_exact_call_under_their_group() {
    let test = "limits_whose_own_keys_are_in_two_slots_are_one_exact_call_under_their_group";
    let Some(url) = redis_cluster_url(test) else {
        return;
    };
    let (a, b) = ids_in_two_slots(&url, "pair").await;
    // The keys the external specification names fail as one call on a cluster.
    let naive = RedisBuckets::with_mode(&url, RedisMode::Cluster, Duration::from_secs(2), None)
        .unwrap_or_else(|e| panic!("{e}"));
    let call = |key: String| common::call(&key, SLOW, 5.0, 1.0);
    let crossed = naive
        .run(&[
            call(KeyScheme::PerLimit.key(&a)),
            call(KeyScheme::PerLimit.key(&b)),
        ])
        .await;
    assert!(
        matches!(&crossed, Err(StoreError::Redis(e)) if e.to_string().to_lowercase().contains("crossslot")),
        "{crossed:?}"
    );
    // Under one key group: three gateways, five checks each, all at once, on 5 tokens of `a`.
    let group = unique("pair-group");
    let limits = vec![limit(&a, SLOW, 5.0), limit(&b, SLOW, 100.0)];
    let mut cfg = cluster_cfg(&url);
    cfg.key_groups = BTreeMap::from([(a.clone(), group.clone()), (b.clone(), group)]);
    let gateways: Vec<Arc<Limiter>> = (0..3)
        .map(|_| limiter(cfg.clone(), limits.clone()))
        .collect();
    let mut tasks = Vec::new();
    for g in &gateways {
        for _ in 0..5 {
            let (g, a, b) = (g.clone(), a.clone(), b.clone());
            tasks.push(tokio::spawn(async move {
                let d = g
                    .check(&[&a, &b], 1)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(d.path, DecisionPath::Redis, "{d:?}");
                d.allowed
            }));
        }
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += usize::from(t.await.unwrap_or_else(|e| panic!("{e}")));
    }
    assert_eq!(admitted, 5, "exactly the 5 tokens of the tighter limit");
    // Both buckets were spent together: b holds 100 - 5.
    let d = gateways[0]
        .check(&[&b], 1)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(d.allowed && d.path == DecisionPath::Redis);
    let left = d.limits[0].tokens.unwrap_or(f64::NAN);
    assert!((left - 94.0).abs() < 0.01, "{left}");
    for g in &gateways {
        let st = g.stats();
        assert_eq!((st.fallback_decisions, st.cross_slot_checks), (0, 0));
    }
}

#[tokio::test]
async fn many_key_groups_spread_over_more_than_one_master() {
    let Some(url) = redis_cluster_url("many_key_groups_spread_over_more_than_one_master") else {
        return;
    };
    let prefix = unique("spread");
    let ids: Vec<String> = (0..24).map(|i| format!("{prefix}-{i}")).collect();
    let limits = ids.iter().map(|id| limit(id, SLOW, 10.0)).collect();
    // Each limit its own tag (`rl:{<id>}:global`): each its own group.
    let l = limiter(cluster_cfg(&url), limits);
    for id in &ids {
        let d = l.check(&[id], 1).await.unwrap_or_else(|e| panic!("{e}"));
        assert!(d.allowed && d.path == DecisionPath::Redis, "{d:?}");
    }
    let mut per_master = Vec::new();
    for addr in masters(&mut seed(&url).await).await {
        let mut conn = seed(&format!("redis://{addr}/")).await;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("rl:{{{prefix}-*}}:global"))
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        per_master.push(keys.len());
    }
    assert_eq!(per_master.len(), 3, "three masters: {per_master:?}");
    assert_eq!(
        per_master.iter().sum::<usize>(),
        ids.len(),
        "{per_master:?}"
    );
    assert!(
        per_master.iter().filter(|n| **n > 0).count() >= 2,
        "the buckets sit on one master: {per_master:?}"
    );
    // A cluster whose masters lost their scripts is tests/noscript.rs's: there no other test
    // loads them meanwhile.
}

#[tokio::test]
async fn a_check_across_groups_is_decided_locally_with_its_reason_and_repaid_per_group() {
    let test = "a_check_across_groups_is_decided_locally_with_its_reason_and_repaid_per_group";
    let Some(url) = redis_cluster_url(test) else {
        return;
    };
    let (a, b) = ids_in_two_slots(&url, "across").await;
    let limits = vec![limit(&a, 100.0, 1_000.0), limit(&b, 100.0, 1_000.0)];
    // Each limit its own tag (`rl:{<id>}:global`), so a and b are in two groups.
    let l = limiter(cluster_cfg(&url), limits);
    // Reach Redis once, so that the bucket exists and the connection is made.
    let d = l.check(&[&a], 1).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.path, DecisionPath::Redis);
    let _ = l.check(&[&b], 1).await.unwrap_or_else(|e| panic!("{e}"));
    // The local bucket starts empty and refills at 100/s: the first checks may be refused.
    let mut admitted = false;
    for _ in 0..100 {
        let d = l
            .check(&[&a, &b], 1)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let DecisionPath::Fallback(why) = &d.path else {
            panic!("not decided locally: {d:?}");
        };
        assert!(why.contains("different key groups"), "{why}");
        if d.allowed {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(admitted, "the local share never admitted");
    let st = l.stats();
    assert_eq!(st.fallback_owed, 2, "one token owed to each limit");
    assert_eq!(st.redis_failures, 0, "Redis is not marked down");
    assert!(st.cross_slot_checks >= 1);
    // The next check Redis can take repays both debts first, each in its own slot's call.
    let d = l.check(&[&a], 1).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.path, DecisionPath::Redis, "{d:?}");
    let st = l.stats();
    assert_eq!((st.fallback_owed, st.fallback_repaid), (0, 2));
    assert_eq!(st.redis_failures, 0, "no repayment call crossed slots");
}

/// The master that serves `slot` and another master: (id, address) each, from `CLUSTER NODES`.
async fn owner_and_other(url: &str, slot: u16) -> ((String, String), (String, String)) {
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut seed(url).await)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let serves = |ranges: &[&str]| {
        ranges.iter().any(|r| {
            let (lo, hi) = r.split_once('-').unwrap_or((r, r));
            matches!((lo.parse::<u16>(), hi.parse::<u16>()), (Ok(lo), Ok(hi)) if (lo..=hi).contains(&slot))
        })
    };
    let mut owner = None;
    let mut other = None;
    for line in nodes.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() < 8 || !f[2].contains("master") {
            continue;
        }
        let node = (
            f[0].to_owned(),
            f[1].split('@').next().unwrap_or(f[1]).to_owned(),
        );
        if serves(&f[8..]) {
            owner = Some(node);
        } else {
            other = Some(node);
        }
    }
    match (owner, other) {
        (Some(a), Some(b)) => (a, b),
        _ => panic!("no owner of slot {slot} and another master in:\n{nodes}"),
    }
}

async fn on(addr: &str, args: &[&str]) -> redis::Value {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(&mut seed(&format!("redis://{addr}/")).await)
        .await
        .unwrap_or_else(|e| panic!("{args:?} on {addr}: {e}"))
}

#[tokio::test]
async fn a_bucket_whose_slot_moves_is_followed_through_ask_and_moved() {
    let test = "a_bucket_whose_slot_moves_is_followed_through_ask_and_moved";
    let Some(url) = redis_cluster_url(test) else {
        return;
    };
    let id = unique("moving");
    let key = KeyScheme::PerLimit.key(&id);
    let l = limiter(cluster_cfg(&url), vec![limit(&id, SLOW, 10.0)]);
    let tokens = |d: &shareplane_limiter::Decision| d.limits[0].tokens.unwrap_or(f64::NAN);
    let d = l.check(&[&id], 1).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(d.path == DecisionPath::Redis && (tokens(&d) - 9.0).abs() < 0.01);
    let slot = slot(&mut seed(&url).await, &key).await;
    let ((src_id, src), (dst_id, dst)) = owner_and_other(&url, slot).await;
    let slot_text = slot.to_string();
    // Mid-migration: the bucket already moved, the slot not yet: the source answers ASK.
    on(
        &dst,
        &["CLUSTER", "SETSLOT", &slot_text, "IMPORTING", &src_id],
    )
    .await;
    on(
        &src,
        &["CLUSTER", "SETSLOT", &slot_text, "MIGRATING", &dst_id],
    )
    .await;
    // Every key of the slot moves (another test's key may share it); new ones go to `dst` (ASK).
    let keys: Vec<String> =
        redis::from_redis_value(on(&src, &["CLUSTER", "GETKEYSINSLOT", &slot_text, "1000"]).await)
            .unwrap_or_else(|e| panic!("{e}"));
    assert!(keys.contains(&key), "{keys:?}");
    let (host, port) = dst.rsplit_once(':').unwrap_or((&dst, "0"));
    let mut migrate = vec!["MIGRATE", host, port, "", "0", "5000", "KEYS"];
    migrate.extend(keys.iter().map(String::as_str));
    on(&src, &migrate).await;
    let d = l.check(&[&id], 1).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.path, DecisionPath::Redis, "ASK followed: {d:?}");
    assert!((tokens(&d) - 8.0).abs() < 0.01, "the same bucket: {d:?}");
    // The slot moves for good: every master learns the new owner, the client gets MOVED.
    let others = masters(&mut seed(&url).await).await;
    for addr in [dst.clone(), src.clone()].into_iter().chain(others) {
        on(&addr, &["CLUSTER", "SETSLOT", &slot_text, "NODE", &dst_id]).await;
    }
    let d = l.check(&[&id], 1).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.path, DecisionPath::Redis, "MOVED followed: {d:?}");
    assert!((tokens(&d) - 7.0).abs() < 0.01, "the same bucket: {d:?}");
    let st = l.stats();
    assert_eq!((st.redis_failures, st.fallback_decisions), (0, 0));
}

#[tokio::test]
async fn a_standalone_client_on_a_cluster_says_to_set_cluster_mode() {
    let test = "a_standalone_client_on_a_cluster_says_to_set_cluster_mode";
    let Some(url) = redis_cluster_url(test) else {
        return;
    };
    // A limit whose key the seed node does not serve: the seed answers MOVED.
    let seed_addr = url.trim_start_matches("redis://").trim_end_matches('/');
    let mut conn = seed(&url).await;
    let mut id = unique("elsewhere");
    for i in 0..100 {
        let s = slot(&mut conn, &KeyScheme::PerLimit.key(&id)).await;
        if owner_and_other(&url, s).await.0 .1 != seed_addr {
            break;
        }
        id = unique(&format!("elsewhere-{i}"));
    }
    let cfg = LimiterConfig {
        redis_timeout: Duration::from_secs(2),
        ..LimiterConfig::new(&url)
    };
    let l = limiter(cfg, vec![limit(&id, SLOW, 10.0)]);
    let d = l.check(&[&id], 1).await.unwrap_or_else(|e| panic!("{e}"));
    let DecisionPath::Fallback(why) = &d.path else {
        panic!("decided by Redis: {d:?}");
    };
    assert!(why.contains("redis_mode = \"cluster\""), "{why}");
}
