//! Checks sent to Redis in batches: at most one script call in flight per key group, and the
//! checks that arrive meanwhile go together in the next.
//!
//! Redis pays for every script call (the call itself, its commands, a wake-up of its event loop)
//! and only a little for each check inside one (`bucket.lua`: a bucket is read and written once
//! per call, whatever the number of checks that name it). A check that finds no call in flight
//! for its key group is sent at once, alone, as before batching; one that arrives while a call
//! is in flight waits for it and goes in the next call with the others that arrived meanwhile
//! (at most [`MAX_CHECKS_PER_BATCH`] checks and [`MAX_BUCKETS_PER_BATCH`] buckets). Under load
//! the calls (and Redis's CPU) grow with the rate of round trips, not with the rate of checks.
//!
//! What a check decides does not change: the script evaluates a batch's checks in order at one
//! instant of the server's clock, exactly as the same calls made one after another at that
//! instant, each all or nothing. A check's bound covers its wait: a check that waited past its
//! bound is answered `Timeout` and is left out of the next call if it was not sent yet.
//!
//! Key groups: on a standalone server every check is in the one group; on a cluster, the checks
//! whose keys share a hash tag (one slot). A check whose keys name several tags goes alone (the
//! server refuses it with `CROSSSLOT`, as before, without taking a batch down with it).
//!
//! A lone check is sent by its own caller, with nothing spawned and nothing to hand over, so it
//! costs what a call did before batching. The checks that queued behind it are sent by a task of
//! their own, started when the lone check's call ends (or when its caller gives up on it: a
//! cancelled request never stalls its group); if that task is dropped (its runtime shuts down),
//! the group is freed for the next check.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio::sync::oneshot;

use super::{BucketCall, RedisBuckets, RedisMode, ScriptReply, StoreError};

/// The most checks one script call carries.
pub const MAX_CHECKS_PER_BATCH: usize = 64;
/// The most buckets (summed over its checks) one script call names, so that no call holds the
/// server for long (a check alone names at most [`super::MAX_BUCKETS_PER_CALL`]).
pub const MAX_BUCKETS_PER_BATCH: usize = 256;

type Answer = oneshot::Sender<Result<ScriptReply, StoreError>>;

/// A check waiting for its call.
struct Waiting {
    calls: Vec<BucketCall>,
    answer: Answer,
}

/// Every key group's checks not sent yet; a group is present while its sender runs.
#[derive(Default)]
pub(crate) struct Queues(Mutex<HashMap<String, Vec<Waiting>>>);

impl Queues {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Waiting>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next batch of `group` (the checks that still wait, in order, at most
    /// [`MAX_CHECKS_PER_BATCH`] and [`MAX_BUCKETS_PER_BATCH`] buckets, one check at least), or
    /// `None`, the group freed, when none does.
    fn next(&self, group: &str) -> Option<Vec<Waiting>> {
        let mut queues = self.lock();
        let q = queues.get_mut(group)?;
        // A check that gave up waiting is not sent.
        q.retain(|w| !w.answer.is_closed());
        if q.is_empty() {
            queues.remove(group);
            return None;
        }
        let mut buckets = 0;
        let take = (q.iter().take(MAX_CHECKS_PER_BATCH))
            .take_while(|w| {
                buckets += w.calls.len();
                buckets <= MAX_BUCKETS_PER_BATCH
            })
            .count()
            .max(1);
        Some(q.drain(..take).collect())
    }
}

/// Sends `calls` (one check, already checked for size) in the next call of its key group and
/// waits for its answer within the store's bound.
pub(crate) async fn check(
    store: &RedisBuckets,
    calls: &[BucketCall],
) -> Result<ScriptReply, StoreError> {
    let Some(group) = group(store.mode(), calls) else {
        return one(store, calls).await;
    };
    // `None`: nothing in flight for the group, so this check goes at once, from here.
    let queued = {
        let mut queues = store.queues().lock();
        match queues.get_mut(&group) {
            Some(q) => {
                let (answer, reply) = oneshot::channel();
                q.push(Waiting {
                    calls: calls.to_vec(),
                    answer,
                });
                Some(reply)
            }
            None => {
                queues.insert(group.clone(), Vec::new());
                None
            }
        }
    };
    let Some(reply) = queued else {
        // Hands the group over when dropped: once the call is answered, or if the caller gives up.
        let _lead = Lead { store, group };
        return one(store, calls).await;
    };
    match tokio::time::timeout(store.timeout(), reply).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(_)) => Err(StoreError::Connect(
            "the batch sender stopped before answering (runtime shutting down)".to_owned(),
        )),
        Err(_) => Err(StoreError::Timeout(store.timeout())),
    }
}

/// One check in a call of its own: a check that found nothing in flight, or one whose keys span
/// several hash tags.
async fn one(store: &RedisBuckets, calls: &[BucketCall]) -> Result<ScriptReply, StoreError> {
    let mut replies = store.call_batch(&[calls]).await?;
    replies.pop().unwrap_or_else(|| {
        Err(StoreError::Reply(
            "no answer for the one check sent".to_owned(),
        ))
    })
}

/// The key group of a check: `None` when its keys span several hash tags on a cluster.
fn group(mode: RedisMode, calls: &[BucketCall]) -> Option<String> {
    match mode {
        RedisMode::Standalone => Some(String::new()),
        RedisMode::Cluster => {
            let first = hash_tag(&calls.first()?.key);
            calls
                .iter()
                .all(|c| hash_tag(&c.key) == first)
                .then(|| first.to_owned())
        }
    }
}

/// The part of `key` that Redis Cluster hashes: the text between the first `{` and the first `}`
/// after it, if not empty; otherwise the whole key.
pub fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{') {
        if let Some(len) = key[open + 1..].find('}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// A check sent by its own caller: when its call ends, or when the caller gives up on it, the
/// checks that queued behind it go on in a sender task, or the group is freed.
struct Lead<'a> {
    store: &'a RedisBuckets,
    group: String,
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        let Some(batch) = self.store.queues().next(&self.group) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let group = std::mem::take(&mut self.group);
                rt.spawn(send(self.store.clone(), group, batch));
            }
            // No runtime to send them from (it is shutting down): the waiting checks are told
            // so, and the group is freed.
            Err(_) => {
                self.store.queues().lock().remove(&self.group);
            }
        }
    }
}

/// Frees the group if the sender is dropped before it ends by itself.
struct Running<'a> {
    queues: &'a Queues,
    group: &'a str,
    ended: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if !self.ended {
            // The waiting checks' answers are dropped with the queue: each is told the sender
            // stopped.
            self.queues.lock().remove(self.group);
        }
    }
}

/// The sender of `group`: sends `batch`, answers its checks, and goes on with what waited
/// meanwhile until nothing does.
async fn send(store: RedisBuckets, group: String, mut batch: Vec<Waiting>) {
    let mut running = Running {
        queues: store.queues(),
        group: &group,
        ended: false,
    };
    loop {
        let checks: Vec<&[BucketCall]> = batch.iter().map(|w| w.calls.as_slice()).collect();
        let replies = store.call_batch(&checks).await;
        answer(batch, replies);
        let Some(next) = store.queues().next(&group) else {
            running.ended = true;
            return;
        };
        batch = next;
    }
}

/// Gives each check its reply, or the call's error.
fn answer(batch: Vec<Waiting>, replies: Result<Vec<Result<ScriptReply, StoreError>>, StoreError>) {
    match replies {
        Ok(replies) => {
            for (w, r) in batch.into_iter().zip(replies) {
                let _ = w.answer.send(r);
            }
        }
        Err(e) => {
            for w in batch {
                let _ = w.answer.send(Err(e.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_tag_is_what_redis_cluster_hashes() {
        assert_eq!(hash_tag("rl:{k-big}:global"), "k-big");
        assert_eq!(hash_tag("rl:{gw}:a{b}"), "gw");
        assert_eq!(hash_tag("rl:{}:x"), "rl:{}:x");
        assert_eq!(hash_tag("plain"), "plain");
        assert_eq!(hash_tag("open{only"), "open{only");
    }

    #[test]
    fn a_batch_takes_the_waiting_checks_in_order_within_its_bounds() {
        let queues = Queues::default();
        let mut replies = Vec::new();
        let mut waiting = Vec::new();
        for i in 0..12 {
            let (answer, reply) = oneshot::channel();
            // Checks 0-9 name 32 buckets each, 10 and 11 one each; check 3 gave up.
            let n = if i < 10 { 32 } else { 1 };
            let calls = vec![bucket(&format!("k{i}")); n];
            waiting.push(Waiting { calls, answer });
            if i != 3 {
                replies.push(reply);
            }
        }
        queues.lock().insert("g".to_owned(), waiting);
        let keys = |b: Vec<Waiting>| b.iter().map(|w| w.calls[0].key.clone()).collect::<Vec<_>>();
        let first = queues.next("g").map(keys);
        assert_eq!(
            first,
            Some(
                (0..10)
                    .filter(|&i| i != 3)
                    .take(8)
                    .map(|i| format!("k{i}"))
                    .collect()
            ),
            "256 buckets at most, the one that gave up left out"
        );
        let second = queues.next("g").map(keys);
        assert_eq!(second, Some(vec!["k9".into(), "k10".into(), "k11".into()]));
        assert!(queues.next("g").is_none());
        assert!(queues.lock().is_empty(), "the group is freed");
    }

    fn bucket(key: &str) -> BucketCall {
        BucketCall {
            key: key.to_owned(),
            rate: 1.0,
            burst: 1.0,
            cost: 1.0,
            enforce: true,
        }
    }

    #[test]
    fn checks_group_by_tag_on_a_cluster_only() {
        let c = |key: &str| BucketCall {
            key: key.to_owned(),
            rate: 1.0,
            burst: 1.0,
            cost: 1.0,
            enforce: true,
        };
        let two_tags = [c("rl:{a}:global"), c("rl:{b}:global")];
        assert_eq!(group(RedisMode::Standalone, &two_tags), Some(String::new()));
        assert_eq!(group(RedisMode::Cluster, &two_tags), None);
        let one_tag = [c("rl:{gw}:a"), c("rl:{gw}:b")];
        assert_eq!(group(RedisMode::Cluster, &one_tag), Some("gw".to_owned()));
    }
}
