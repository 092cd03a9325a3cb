//! A real redis-server that stalls now and then (`CLIENT PAUSE`, as a busy or failing-over server
//! would): each stall times calls out, the gateway spends a probe interval in the local fallback,
//! and Redis comes back with the refill of that interval. The fallback's admissions are charged to
//! the Redis bucket (`repay.lua`), so one Region's admissions stay within the bucket's contract:
//! burst + rate × t over any window. (A call that timed out may still have run in Redis once the
//! pause ended: it spent the bucket there, and the caller had the fallback's answer, which is
//! charged too: too little, never too much.) Its own binary: the pauses would stall the other tests
//! of a binary.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{limit, redis_url, rules, unique, FakeDaemon};
use shareplane_limiter::loadgen::{drive, worst_window, Pattern, Run};
use shareplane_limiter::{http, Limiter, LimiterConfig, RuleWatcher};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_stalls_now_and_then_never_lets_the_fallback_add_to_its_budget() {
    let Some(url) =
        redis_url("a_redis_that_stalls_now_and_then_never_lets_the_fallback_add_to_its_budget")
    else {
        return;
    };
    let (rate, burst) = (100.0, 200.0);
    let id = unique("k-stall");
    let d = FakeDaemon::start(rules(1, vec![limit(&id, rate, burst)])).await;
    let cfg = LimiterConfig {
        redis_timeout: Duration::from_millis(50),
        probe_after: Duration::from_millis(500),
        ..LimiterConfig::new(url.clone())
    };
    let l = Arc::new(Limiter::new(cfg).unwrap_or_else(|e| panic!("{e}")));
    let client = http::client().unwrap_or_else(|e| panic!("{e}"));
    RuleWatcher::new(client, &d.url, 100)
        .poll_once(&l)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // Every 800 ms the server stops answering for 200 ms.
    let stop = Arc::new(AtomicBool::new(false));
    let staller = {
        let stop = stop.clone();
        let client = redis::Client::open(url).unwrap_or_else(|e| panic!("{e}"));
        tokio::spawn(async move {
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let mut pauses = 0u32;
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            while !stop.load(Ordering::Relaxed) {
                let paused: redis::RedisResult<()> = redis::cmd("CLIENT")
                    .arg("PAUSE")
                    .arg(200)
                    .arg("ALL")
                    .query_async(&mut conn)
                    .await;
                paused.unwrap_or_else(|e| panic!("CLIENT PAUSE: {e}"));
                pauses += 1;
                tokio::time::sleep(Duration::from_millis(800)).await;
            }
            pauses
        })
    };
    let run = Run {
        limit: id.clone(),
        pattern: Pattern::parse("0:400").unwrap_or_else(|e| panic!("{e}")),
        duration: Duration::from_secs(10),
        tick: Duration::from_millis(10),
        start_unix_ms: None,
    };
    let seconds = drive(l.clone(), run)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    stop.store(true, Ordering::Relaxed);
    let pauses = staller.await.unwrap_or_else(|e| panic!("{e}"));
    let stats = l.stats();

    let admitted: Vec<u64> = seconds.iter().map(|s| s.admitted).collect();
    let by_fallback: u64 = seconds.iter().map(|s| s.admitted_fallback).sum();
    println!(
        "admitted per second {admitted:?}, {by_fallback} by the fallback, {} repaid, {} timeouts, \
         {pauses} pauses",
        stats.fallback_repaid, stats.redis_failures
    );
    // The premise: the stalls happened and the fallback admitted in them.
    assert!(pauses >= 8, "{pauses} pauses");
    assert!(
        stats.redis_failures >= 4 && by_fallback > 0,
        "the stalls did not reach the gateway: {stats:?}, {by_fallback} admitted by the fallback"
    );
    assert!(stats.fallback_repaid > 0, "nothing was repaid: {stats:?}");
    // Every window of whole seconds: at most the burst plus the refill (100 ms of slack for the
    // time between sending and deciding).
    let (excess, from, to) = worst_window(&admitted, rate, burst + rate * 0.1);
    assert!(
        excess <= 0.0,
        "seconds {from}..{to}: {excess} over burst + rate × t: admitted {admitted:?}, \
         {by_fallback} by the fallback, {stats:?}"
    );
    // And the budget is used: after the first (full-bucket) seconds, at least 80% of the rate.
    let steady: u64 = admitted[2..].iter().sum();
    assert!(
        steady as f64 >= 0.8 * rate * (admitted.len() - 2) as f64,
        "too little admitted: {admitted:?}"
    );
}
