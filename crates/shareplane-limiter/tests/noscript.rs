//! NOSCRIPT handling against a real redis-server. In its own test binary because `SCRIPT FLUSH` and
//! the other tests' `SCRIPT LOAD`s would race (cargo runs test binaries one after another).

mod common;

use std::time::Duration;

use common::{redis_url, unique};
use shareplane_limiter::store::{BucketCall, KeyScheme, RedisBuckets};

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
