//! Batches of checks when the caller of the check in flight gives up on it, against a real
//! redis-server. A test binary of its own: it pauses the server's writes (`CLIENT PAUSE`), which
//! would slow the other tests of a shared binary.

mod common;

use std::time::Duration;

use common::{redis_url, unique};
use shareplane_limiter::store::{BucketCall, KeyScheme, RedisBuckets};

/// A bucket of 100 tokens that no test lasts long enough to see refill.
fn call(key: &str) -> BucketCall {
    common::call(key, 0.0001, 100.0, 1.0)
}

#[tokio::test]
async fn checks_queued_behind_a_call_whose_caller_gave_up_are_still_answered() {
    let Some(url) = redis_url("checks_queued_behind_a_call_whose_caller_gave_up") else {
        return;
    };
    let b = RedisBuckets::new(&url, Duration::from_secs(3)).unwrap_or_else(|e| panic!("{e}"));
    let key = KeyScheme::PerLimit.key(&unique("abandoned-lead"));
    // Connected and the script loaded before the pause.
    let first = b.run(&[call(&key)]).await;
    assert!(matches!(first, Ok(ref r) if r.allowed), "{first:?}");
    // Writes (scripts included) wait 500 ms on the server: the next check stays in flight.
    let mut admin = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection())
        .unwrap_or_else(|e| panic!("{e}"));
    let _: () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "500", "WRITE"][..])
        .query(&mut admin)
        .unwrap_or_else(|e| panic!("{e}"));
    let lead = tokio::spawn({
        let (b, c) = (b.clone(), call(&key));
        async move { b.run(&[c]).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let queued: Vec<_> = (0..5)
        .map(|_| {
            let (b, c) = (b.clone(), call(&key));
            tokio::spawn(async move { b.run(&[c]).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!lead.is_finished(), "the lead check is still in flight");
    // Its caller gives up: the checks queued behind it go on without it.
    lead.abort();
    for q in queued {
        let answer = q.await.unwrap_or_else(|e| panic!("{e}"));
        assert!(
            matches!(answer, Ok(ref r) if r.allowed),
            "a queued check: {answer:?}"
        );
    }
    let (calls, checks) = b.script_calls();
    assert_eq!(
        (calls, checks),
        (3, 7),
        "the first, the lead, the five queued in one"
    );
    // And the group is free for the next check.
    let next = b.run(&[call(&key)]).await;
    assert!(matches!(next, Ok(ref r) if r.allowed), "{next:?}");
}
