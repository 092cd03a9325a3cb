//! NOSCRIPT handling against a real redis-server. In its own test binary because `SCRIPT FLUSH` and
//! the other tests' `SCRIPT LOAD`s would race (cargo runs test binaries one after another): one
//! standalone server, and the three masters of a cluster (tests/lib/redis-cluster.sh).

mod common;

use std::time::Duration;

use common::{masters, node, redis_cluster_url, redis_url, unique};
use shareplane_limiter::store::{BucketCall, KeyScheme, RedisBuckets};
use shareplane_limiter::RedisMode;

const SLOW: f64 = 0.0001;

fn call(key: &str) -> BucketCall {
    common::call(key, SLOW, 3.0, 1.0)
}

#[tokio::test]
async fn noscript_reloads_the_script() {
    let Some(url) = redis_url("noscript_reloads_the_script") else {
        return;
    };
    let b = RedisBuckets::new(&url, Duration::from_secs(2)).unwrap_or_else(|e| panic!("{e}"));
    let key = KeyScheme::PerLimit.key(&unique("noscript"));
    let first = b.run(&[call(&key)]).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(first.allowed);
    assert_eq!(b.script_loads(), 1, "loaded once for the connection");
    let client = redis::Client::open(url.as_str()).unwrap_or_else(|e| panic!("{e}"));
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("SCRIPT FLUSH: {e}"));
    let second = b
        .run(&[call(&key)])
        .await
        .unwrap_or_else(|e| panic!("after the flush: {e}"));
    assert!(second.allowed);
    assert!(
        (second.buckets[0].1 - 1.0).abs() < 0.01,
        "the same bucket: {:?}",
        second.buckets
    );
    assert_eq!(b.script_loads(), 2, "loaded again after NOSCRIPT");
}

#[tokio::test]
async fn a_cluster_whose_masters_lost_their_scripts_loads_them_again_on_every_node() {
    let test = "a_cluster_whose_masters_lost_their_scripts_loads_them_again_on_every_node";
    let Some(url) = redis_cluster_url(test) else {
        return;
    };
    let b = RedisBuckets::with_mode(&url, RedisMode::Cluster, Duration::from_secs(2), None)
        .unwrap_or_else(|e| panic!("{e}"));
    // Each key its own tag (`rl:{<id>}:global`): 24 slots, spread over the three masters.
    let prefix = unique("cluster-noscript");
    let keys: Vec<String> = (0..24)
        .map(|i| KeyScheme::PerLimit.key(&format!("{prefix}-{i}")))
        .collect();
    for key in &keys {
        let r = b.run(&[call(key)]).await.unwrap_or_else(|e| panic!("{e}"));
        assert!(r.allowed, "{key}");
    }
    assert_eq!(
        b.script_loads(),
        1,
        "loaded once, on every node, for the connection"
    );
    let masters = masters(&mut node(&url).await).await;
    assert_eq!(masters.len(), 3, "three masters: {masters:?}");
    // Every master loses its scripts (a failover, a restart): each answers NOSCRIPT next time.
    for addr in &masters {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut node(&format!("redis://{addr}/")).await)
            .await
            .unwrap_or_else(|e| panic!("SCRIPT FLUSH on {addr}: {e}"));
    }
    for key in &keys {
        let r = b
            .run(&[call(key)])
            .await
            .unwrap_or_else(|e| panic!("{key} after the flush: {e}"));
        assert!(r.allowed, "{key}");
        assert!(
            (r.buckets[0].1 - 1.0).abs() < 0.01,
            "the same bucket: {:?}",
            r.buckets
        );
    }
    // The first NOSCRIPT loaded them on every node at once: no master met it a second time.
    assert_eq!(b.script_loads(), 2, "loaded again after NOSCRIPT, once");
}
