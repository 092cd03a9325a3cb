//! The token-bucket script against a real redis-server (SPEC.md §7).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{call, redis_url, unique};
use shareplane_limiter::store::{
    BucketCall, BucketVerdict, Debt, KeyScheme, RedisBuckets, ScriptReply, SCRIPT,
};

/// So slow that no test lasts long enough to see a whole token come back.
const SLOW: f64 = 0.0001;

fn buckets(url: &str) -> RedisBuckets {
    RedisBuckets::new(url, Duration::from_secs(2)).unwrap_or_else(|e| panic!("{e}"))
}

async fn run(b: &RedisBuckets, calls: &[BucketCall]) -> ScriptReply {
    b.run(calls)
        .await
        .unwrap_or_else(|e| panic!("script call failed: {e}"))
}

async fn tokens(b: &RedisBuckets, c: BucketCall) -> (bool, f64) {
    let r = run(b, &[c]).await;
    (r.allowed, r.buckets[0].1)
}

fn near(x: f64, want: f64) -> bool {
    (x - want).abs() < 0.01
}

async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).unwrap_or_else(|e| panic!("{e}"));
    client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn a_share_decrease_clamps_the_tokens_and_does_not_refill() {
    let Some(url) = redis_url("a_share_decrease_clamps_the_tokens_and_does_not_refill") else {
        return;
    };
    let b = buckets(&url);
    // A full bucket of 10 lowered to a burst of 4 holds 4, not 10 and not a fresh 4 on top.
    let full = KeyScheme::PerLimit.key(&unique("clamp-full"));
    let (ok, t) = tokens(&b, call(&full, SLOW, 10.0, 1.0)).await;
    assert!(ok && near(t, 9.0), "a new bucket starts full: {t}");
    let (ok, t) = tokens(&b, call(&full, SLOW / 2.0, 4.0, 1.0)).await;
    assert!(ok && near(t, 3.0), "clamped to 4, then spent 1: {t}");
    // A bucket holding 2 of 10, lowered to a burst of 4, still holds 2: the decrease does not refill.
    let low = KeyScheme::PerLimit.key(&unique("clamp-low"));
    let (ok, t) = tokens(&b, call(&low, SLOW, 10.0, 8.0)).await;
    assert!(ok && near(t, 2.0), "{t}");
    let (ok, t) = tokens(&b, call(&low, SLOW / 2.0, 4.0, 1.0)).await;
    assert!(ok && near(t, 1.0), "not refilled to the new burst: {t}");
    let (ok, _) = tokens(&b, call(&low, SLOW / 2.0, 4.0, 2.0)).await;
    assert!(!ok, "only 1 token left");
}

#[tokio::test]
async fn a_rule_change_spends_the_same_bucket() {
    let Some(url) = redis_url("a_rule_change_spends_the_same_bucket") else {
        return;
    };
    let b = buckets(&url);
    let key = KeyScheme::PerLimit.key(&unique("k-big"));
    let (_, t) = tokens(&b, call(&key, SLOW, 10.0, 6.0)).await;
    assert!(near(t, 4.0), "{t}");
    // New numbers (a raise), same key: the tokens carry over, no new full bucket.
    let (ok, t) = tokens(&b, call(&key, 2.0 * SLOW, 20.0, 1.0)).await;
    assert!(ok && near(t, 3.0), "the raise spent the old tokens: {t}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifteen_concurrent_calls_on_five_tokens_admit_exactly_five() {
    let Some(url) = redis_url("fifteen_concurrent_calls_on_five_tokens_admit_exactly_five") else {
        return;
    };
    let key = KeyScheme::PerLimit.key(&unique("concurrent"));
    // Three gateways (three connections), five calls each, all at once.
    let gateways: Vec<Arc<RedisBuckets>> = (0..3).map(|_| Arc::new(buckets(&url))).collect();
    let mut tasks = Vec::new();
    for g in &gateways {
        for _ in 0..5 {
            let (g, key) = (g.clone(), key.clone());
            tasks.push(tokio::spawn(async move {
                run(&g, &[call(&key, SLOW, 5.0, 1.0)]).await.allowed
            }));
        }
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += usize::from(t.await.unwrap_or_else(|e| panic!("{e}")));
    }
    assert_eq!(admitted, 5);
}

#[tokio::test]
async fn checks_that_arrive_together_share_a_call_and_decide_as_one_after_another() {
    let Some(url) = redis_url("checks_that_arrive_together_share_a_call") else {
        return;
    };
    let b = buckets(&url);
    let (a, wide, alone) = (
        KeyScheme::PerLimit.key(&unique("batch-a")),
        KeyScheme::PerLimit.key(&unique("batch-wide")),
        KeyScheme::PerLimit.key(&unique("batch-alone")),
    );
    // 40 checks at once: each odd one names `a` (5 tokens) and `wide` (100), all or nothing;
    // each even one `alone` (3 tokens), with a shadow `wide` beside it.
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let b = b.clone();
            let calls = if i % 2 == 1 {
                vec![call(&a, SLOW, 5.0, 1.0), call(&wide, SLOW, 100.0, 1.0)]
            } else {
                let shadow = BucketCall {
                    enforce: false,
                    ..call(&wide, SLOW, 100.0, 1.0)
                };
                vec![call(&alone, SLOW, 3.0, 1.0), shadow]
            };
            tokio::spawn(async move { (i, run(&b, &calls).await) })
        })
        .collect();
    let mut replies = Vec::new();
    for t in tasks {
        replies.push(t.await.unwrap_or_else(|e| panic!("{e}")));
    }
    let (calls, carried) = b.script_calls();
    assert_eq!(carried, 40, "every check carried once");
    assert!(
        calls < 40,
        "40 checks at once went in {calls} calls, not batched"
    );
    let admitted = |odd: usize| {
        (replies.iter())
            .filter(|(i, r)| i % 2 == odd && r.allowed)
            .count()
    };
    assert_eq!(admitted(1), 5, "5 of the 20 checks on `a`");
    assert_eq!(admitted(0), 3, "3 of the 20 on `alone`");
    // `wide` paid for every admitted check, shadow ones included: 8 of 100.
    let (_, left) = tokens(&b, call(&wide, SLOW, 100.0, 0.0)).await;
    assert!(near(left, 92.0), "wide holds {left}");
    // A refused check of `a` spent nothing of `wide`; each reply's tokens are what its check
    // left, so the admitted `a` checks saw 4, 3, 2, 1, 0 in the order the script took them.
    let mut seen: Vec<f64> = (replies.iter())
        .filter(|(i, r)| i % 2 == 1 && r.allowed)
        .map(|(_, r)| r.buckets[0].1)
        .collect();
    seen.sort_by(f64::total_cmp);
    assert!(
        seen.iter()
            .zip([0.0, 1.0, 2.0, 3.0, 4.0])
            .all(|(x, w)| near(*x, w)),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_huge_bucket_replies_its_tokens_within_an_integer() {
    let Some(url) = redis_url("a_huge_bucket_replies_its_tokens_within_an_integer") else {
        return;
    };
    let b = buckets(&url);
    let key = KeyScheme::PerLimit.key(&unique("huge"));
    // 1e17 tokens are 1e20 thousandths, past a 64-bit integer: the reply is held at 9e15.
    let (ok, t) = tokens(&b, call(&key, 1e9, 1e17, 1.0)).await;
    assert!(ok && t == 9e12, "{t}");
    // A bucket of ordinary size replies what it holds, to the thousandth.
    let small = KeyScheme::PerLimit.key(&unique("small"));
    let (ok, t) = tokens(&b, call(&small, SLOW, 2.5, 1.0)).await;
    assert!(ok && t == 1.5, "{t}");
}

#[tokio::test]
async fn retry_after_matches_the_refill() {
    let Some(url) = redis_url("retry_after_matches_the_refill") else {
        return;
    };
    let b = buckets(&url);
    let key = KeyScheme::PerLimit.key(&unique("retry"));
    assert!(run(&b, &[call(&key, 10.0, 10.0, 10.0)]).await.allowed);
    let refused = run(&b, &[call(&key, 10.0, 10.0, 5.0)]).await;
    assert!(!refused.allowed);
    let (verdict, held) = refused.buckets[0];
    assert_eq!(verdict, BucketVerdict::Short);
    assert_eq!(
        refused.retry_after_s,
        Some(((5.0 - held) / 10.0_f64).ceil() as u64)
    );
    assert_eq!(refused.retry_after_s, Some(1));
    // After that many seconds the refill covers the cost.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(run(&b, &[call(&key, 10.0, 10.0, 5.0)]).await.allowed);

    // A slow refill: whole seconds, rounded up; several buckets wait for the slowest.
    let (k1, k2) = (
        KeyScheme::PerLimit.key(&unique("r1")),
        KeyScheme::PerLimit.key(&unique("r2")),
    );
    assert!(
        run(&b, &[call(&k1, 2.0, 10.0, 10.0), call(&k2, 0.25, 3.0, 3.0)])
            .await
            .allowed
    );
    let r = run(&b, &[call(&k1, 2.0, 10.0, 7.0), call(&k2, 0.25, 3.0, 1.0)]).await;
    let want = [
        ((7.0 - r.buckets[0].1) / 2.0_f64).ceil(),
        ((1.0 - r.buckets[1].1) / 0.25_f64).ceil(),
    ];
    assert_eq!(r.retry_after_s, Some(want[0].max(want[1]) as u64));
    assert_eq!(
        (r.buckets[0].0, r.buckets[1].0),
        (BucketVerdict::Short, BucketVerdict::Short)
    );
}

#[tokio::test]
async fn cost_above_burst_is_refused_without_retry_after() {
    let Some(url) = redis_url("cost_above_burst_is_refused_without_retry_after") else {
        return;
    };
    let b = buckets(&url);
    let key = KeyScheme::PerLimit.key(&unique("over"));
    let r = run(&b, &[call(&key, 1.0, 2.0, 3.0)]).await;
    assert!(!r.allowed);
    assert_eq!(r.retry_after_s, None);
    assert_eq!(r.buckets[0].0, BucketVerdict::CostAboveBurst);
    assert!(near(r.buckets[0].1, 2.0), "nothing spent");
    // Alongside a bucket that is merely short, there is still no Retry-After to give.
    let short = KeyScheme::PerLimit.key(&unique("short"));
    assert!(run(&b, &[call(&short, 1.0, 1.0, 1.0)]).await.allowed);
    let r = run(
        &b,
        &[call(&short, 1.0, 1.0, 1.0), call(&key, 1.0, 2.0, 3.0)],
    )
    .await;
    assert_eq!((r.allowed, r.retry_after_s), (false, None));
}

#[tokio::test]
async fn several_limits_are_all_or_nothing() {
    let Some(url) = redis_url("several_limits_are_all_or_nothing") else {
        return;
    };
    let b = buckets(&url);
    let tag = KeyScheme::SharedTag(unique("partner"));
    let (a, s) = (tag.key("a"), tag.key("s"));
    let both = |cost| [call(&a, SLOW, 5.0, cost), call(&s, SLOW, 1.0, cost)];
    let r = run(&b, &both(1.0)).await;
    assert!(r.allowed);
    let r = run(&b, &both(1.0)).await;
    assert!(!r.allowed);
    assert_eq!(r.buckets[0].0, BucketVerdict::Admit, "a had the tokens");
    assert_eq!(r.buckets[1].0, BucketVerdict::Short);
    assert!(
        near(r.buckets[0].1, 4.0),
        "the refused call spent nothing from a"
    );
    let (_, left) = tokens(&b, call(&a, SLOW, 5.0, 4.0)).await;
    assert!(near(left, 0.0), "a still held 4: {left}");
}

#[tokio::test]
async fn a_shadow_bucket_is_spent_but_never_refuses() {
    let Some(url) = redis_url("a_shadow_bucket_is_spent_but_never_refuses") else {
        return;
    };
    let b = buckets(&url);
    let tag = KeyScheme::SharedTag(unique("shadow"));
    let enforced = call(&tag.key("e"), SLOW, 5.0, 1.0);
    let shadow = BucketCall {
        enforce: false,
        ..call(&tag.key("s"), SLOW, 1.0, 1.0)
    };
    let r = run(&b, &[enforced.clone(), shadow.clone()]).await;
    assert!(r.allowed);
    assert!(near(r.buckets[1].1, 0.0), "the shadow bucket was spent");
    let r = run(&b, &[enforced, shadow]).await;
    assert!(r.allowed, "an empty shadow bucket does not refuse");
    assert_eq!(
        r.buckets[1].0,
        BucketVerdict::Short,
        "but says it would have"
    );
}

#[tokio::test]
async fn elapsed_is_clamped_and_the_stamp_never_goes_back() {
    let Some(url) = redis_url("elapsed_is_clamped_and_the_stamp_never_goes_back") else {
        return;
    };
    let b = buckets(&url);
    let key = KeyScheme::PerLimit.key(&unique("clock"));
    let mut conn = raw(&url).await;
    let (now_s, _): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // A bucket last written by a clock 60 s ahead (a failover from a primary whose clock was ahead).
    let ahead_us = (now_s + 60) * 1_000_000;
    let _: () = redis::cmd("HSET")
        .arg(&key)
        .arg("tokens")
        .arg("0")
        .arg("ts")
        .arg(ahead_us)
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let r = run(&b, &[call(&key, 1000.0, 2000.0, 1.0)]).await;
    assert!(!r.allowed, "no refill for time that has not passed");
    assert!(near(r.buckets[0].1, 0.0));
    let ts: u64 = redis::cmd("HGET")
        .arg(&key)
        .arg("ts")
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ts, ahead_us);
}

#[tokio::test]
async fn every_write_sets_a_ttl_of_at_least_burst_over_rate() {
    let Some(url) = redis_url("every_write_sets_a_ttl_of_at_least_burst_over_rate") else {
        return;
    };
    let mut conn = raw(&url).await;
    let key = KeyScheme::PerLimit.key(&unique("ttl"));
    // Called directly with a TTL argument of 1 ms: the script raises it to burst / rate = 50 s.
    let script = redis::Script::new(SCRIPT);
    for allowed_or_not in [1.0, 100.0] {
        // One check of one bucket: the bucket's index (1), rate, burst, cost, ttl_ms, enforce.
        let _: redis::Value = script
            .key(&key)
            .arg(1)
            .arg(1)
            .arg(1)
            .arg(2.0)
            .arg(100.0)
            .arg(allowed_or_not)
            .arg(1)
            .arg(1)
            .invoke_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!((49_000..=50_000).contains(&pttl), "PTTL {pttl}");
    }
    // Bad numbers are an error reply, never a write, even after a good check in the same batch.
    let fresh = KeyScheme::PerLimit.key(&unique("ttl-bad"));
    let bad = script
        .key(&fresh)
        .arg(2)
        .arg(&[1, 1][..])
        .arg(&[1.0, 100.0, 1.0, 1.0, 1.0][..])
        .arg(&[1, 1][..])
        .arg("nan")
        .arg(&[1, 1, 1, 1][..])
        .invoke_async::<redis::Value>(&mut conn)
        .await;
    assert!(
        bad.as_ref()
            .is_err_and(|e| e.to_string().contains("rate of bucket 1 of check 2")),
        "{bad:?}"
    );
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&fresh)
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(exists, 0, "a bad batch wrote nothing");
    // So are counts that do not add up.
    for args in [vec!["0"], vec!["2", "1", "1", "1", "1", "1", "1", "1"]] {
        let bad = script
            .key(&fresh)
            .arg(&args)
            .invoke_async::<redis::Value>(&mut conn)
            .await;
        assert!(bad.is_err(), "{args:?} accepted");
    }
}

#[tokio::test]
async fn the_ttl_is_set_again_once_less_than_three_quarters_or_a_refill_is_left() {
    let Some(url) = redis_url("the_ttl_is_set_again_once_less_than_three_quarters") else {
        return;
    };
    let b = buckets(&url);
    let mut conn = raw(&url).await;
    let key = KeyScheme::PerLimit.key(&unique("lazy-ttl"));
    // rate 1, burst 10: a refill takes 10 s; the TTL asked for is 100 s.
    let c = BucketCall {
        key: key.clone(),
        rate: 1.0,
        burst: 10.0,
        cost: 1.0,
        enforce: true,
    };
    let pttl = |conn: &mut redis::aio::MultiplexedConnection| {
        let cmd = redis::cmd("PTTL").arg(&key).to_owned();
        let mut conn = conn.clone();
        async move {
            cmd.query_async::<i64>(&mut conn)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        }
    };
    let set = |conn: &mut redis::aio::MultiplexedConnection, exp_ms: u64, pttl_ms: u64| {
        let mut conn = conn.clone();
        let key = key.clone();
        async move {
            let _: () = redis::pipe()
                .cmd("HSET")
                .arg(&key)
                .arg("exp")
                .arg(exp_ms)
                .ignore()
                .cmd("PEXPIRE")
                .arg(&key)
                .arg(pttl_ms)
                .ignore()
                .query_async(&mut conn)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
    };
    let now_ms = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        async move {
            let (s, us): (u64, u64) = redis::cmd("TIME")
                .query_async(&mut conn)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            s * 1000 + us / 1000
        }
    };
    let run_ttl = |ttl_ms: u64| {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(redis::Script::new(SCRIPT).get_hash())
            .arg(1)
            .arg(&key)
            .arg(&[1, 1, 1][..])
            .arg(c.rate)
            .arg(c.burst)
            .arg(c.cost)
            .arg(ttl_ms)
            .arg(1);
        cmd
    };
    assert!(
        run(&b, std::slice::from_ref(&c)).await.allowed,
        "loads the script"
    );
    let _: redis::Value = run_ttl(100_000)
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let t = pttl(&mut conn).await;
    assert!((99_000..=100_000).contains(&t), "a new TTL: {t}");
    // 90 s left of 100 (more than 3/4): the TTL is left alone.
    let now = now_ms(&mut conn).await;
    set(&mut conn, now + 90_000, 90_000).await;
    let _: redis::Value = run_ttl(100_000)
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let t = pttl(&mut conn).await;
    assert!((89_000..=90_000).contains(&t), "left alone: {t}");
    // 70 s left (less than 3/4): set again.
    set(&mut conn, now + 70_000, 70_000).await;
    let _: redis::Value = run_ttl(100_000)
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let t = pttl(&mut conn).await;
    assert!((99_000..=100_000).contains(&t), "set again: {t}");
    // A TTL asked for below a refill: raised to the refill (10 s), and set again whenever less
    // than a refill is left, even if that is more than 3/4 of what was asked for.
    set(&mut conn, now + 9_000, 9_000).await;
    let _: redis::Value = run_ttl(1_000)
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let t = pttl(&mut conn).await;
    assert!((9_500..=10_000).contains(&t), "at least a refill: {t}");
    // A bucket without `exp` (written by an older script) gets its TTL set.
    let _: () = redis::cmd("HDEL")
        .arg(&key)
        .arg("exp")
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _: () = redis::cmd("PEXPIRE")
        .arg(&key)
        .arg(95_000)
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _: redis::Value = run_ttl(100_000)
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let t = pttl(&mut conn).await;
    assert!((99_000..=100_000).contains(&t), "no exp: set: {t}");
}

#[tokio::test]
async fn a_repaid_debt_is_spent_from_the_bucket_and_one_beyond_it_is_refused_until_refilled() {
    let Some(url) = redis_url("a_repaid_debt_is_spent_from_the_bucket") else {
        return;
    };
    let b = buckets(&url);
    let debt = |key: &str, rate, burst, owed| Debt {
        key: key.to_owned(),
        rate,
        burst,
        owed,
    };
    let repay = |d: Debt| {
        let b = &b;
        async move {
            b.repay(&[d])
                .await
                .unwrap_or_else(|e| panic!("repay failed: {e}"))[0]
        }
    };
    // A bucket the fallback owes 3 of 10: 7 left (a missing bucket starts full).
    let key = KeyScheme::PerLimit.key(&unique("repay"));
    assert!(near(repay(debt(&key, SLOW, 10.0, 3.0)).await, 7.0));
    let (allowed, left) = tokens(&b, call(&key, SLOW, 10.0, 1.0)).await;
    assert!(allowed && near(left, 6.0), "{left}");
    // A debt beyond what the bucket holds leaves it below zero: refused, with the wait that pays
    // the rest and then the cost (rate 1/s: 6 - 9 = -3, so 4 s for a cost of 1).
    let owed = KeyScheme::PerLimit.key(&unique("repay-over"));
    assert!(near(repay(debt(&owed, 1.0, 6.0, 9.0)).await, -3.0));
    let r = run(&b, &[call(&owed, 1.0, 6.0, 1.0)]).await;
    assert!(!r.allowed);
    assert_eq!(r.retry_after_s, Some(4));
    // The refill since the bucket's stamp is credited before the debt, the clamp after it: a full
    // bucket of 10 at 1,000/s left alone for 50 ms owes 40: 10 + 50 - 40 = 20, clamped to 10.
    let fast = KeyScheme::PerLimit.key(&unique("repay-refill"));
    let _ = run(&b, &[call(&fast, 1_000.0, 10.0, 0.0)]).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let left = repay(debt(&fast, 1_000.0, 10.0, 40.0)).await;
    assert!(left > 9.99, "{left}");
    // Bad numbers are the script's error, not a silent charge.
    let bad = b.repay(&[debt(&key, -1.0, 10.0, 1.0)]).await;
    assert!(bad.is_err_and(|e| e.to_string().contains("finite numbers")));
    assert!(b.repay(&[]).await.is_err());
}
