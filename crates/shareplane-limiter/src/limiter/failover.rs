//! The Redis path and the switch to the local fallback, as the driver runs them: asking the
//! bucket script, charging to Redis what the fallback admitted, and logging the moves between
//! Redis and the fallback. Which way a check goes, what is owed and what the fallback admits are
//! decided by [`LimiterState`](super::state::LimiterState).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::decision::{in_request_order, limit_decision};
use super::{Decision, DecisionPath, LimitDecision, Limiter, Verdict};
use crate::fallback::FailurePolicy;
use crate::rules::{LimitRule, RuleSet};
use crate::store::{BucketCall, BucketVerdict, Debt, StoreError, MAX_BUCKETS_PER_CALL};
use crate::templates::base_id;

impl Limiter {
    /// Redis's decision for `live`, having charged it `owed` (tokens per limit id).
    pub(super) async fn via_redis(
        &self,
        set: &RuleSet,
        owed: BTreeMap<String, u64>,
        live: &[&LimitRule],
        cost: u32,
    ) -> Result<Decision, StoreError> {
        self.repay(set, owed).await?;
        self.ask_redis(live, cost).await
    }

    /// Charges what the fallback admitted to the Redis buckets (see `repay.lua`) before Redis
    /// decides again. Debts of limits the running set no longer has are dropped (nothing enforces
    /// their buckets). What could not be charged stays owed, and the failure counts as Redis's.
    async fn repay(&self, set: &RuleSet, owed: BTreeMap<String, u64>) -> Result<(), StoreError> {
        let debts: Vec<(String, (u64, Debt))> = owed
            .into_iter()
            .filter_map(|(id, tokens)| {
                let r = set.resolve_id(&id)?;
                let debt = Debt {
                    key: self.keys.key(&id),
                    rate: r.rate,
                    burst: r.burst,
                    owed: tokens as f64,
                };
                Some((id, (tokens, debt)))
            })
            .collect();
        let limits = debts.len();
        // On a cluster each call stays within one key group (one hash slot).
        let batches = self.keys.batches(debts, MAX_BUCKETS_PER_CALL);
        for (i, chunk) in batches.iter().enumerate() {
            let batch: Vec<Debt> = chunk.iter().map(|(_, (_, d))| d.clone()).collect();
            if let Err(e) = self.store.repay(&batch).await {
                let unpaid = batches[i..]
                    .iter()
                    .flatten()
                    .map(|(id, (tokens, _))| (id.clone(), *tokens));
                self.redis_down(&e, unpaid);
                return Err(e);
            }
            let paid: u64 = chunk.iter().map(|(_, (t, _))| *t).sum();
            self.counts.repaid.fetch_add(paid, Ordering::Relaxed);
        }
        if limits > 0 {
            tracing::info!(
                limits,
                "charged what the local fallback admitted to the Redis buckets"
            );
        }
        Ok(())
    }

    async fn ask_redis(&self, live: &[&LimitRule], cost: u32) -> Result<Decision, StoreError> {
        let calls: Vec<BucketCall> = live
            .iter()
            .map(|r| BucketCall {
                key: self.keys.key(&r.id),
                rate: r.rate,
                burst: r.burst,
                cost: f64::from(cost),
                enforce: !r.shadow,
            })
            .collect();
        let reply = match self.store.run(&calls).await {
            Ok(reply) => reply,
            Err(e) => {
                self.redis_down(&e, []);
                return Err(e);
            }
        };
        let left = self.state().redis_answered();
        if left {
            tracing::info!("Redis answers again: leaving the local fallback");
        }
        let limits = live
            .iter()
            .zip(reply.buckets)
            .map(|(r, (v, tokens))| LimitDecision {
                verdict: match v {
                    BucketVerdict::Admit => Verdict::Admit,
                    BucketVerdict::Short => Verdict::Short,
                    BucketVerdict::CostAboveBurst => Verdict::CostAboveBurst,
                },
                tokens: Some(tokens),
                ..limit_decision(r, Verdict::NotChecked)
            })
            .collect();
        Ok(Decision {
            allowed: reply.allowed,
            retry_after_s: reply.retry_after_s,
            path: DecisionPath::Redis,
            limits,
        })
    }

    /// The local fallback's decision at `now` for `live`, each limit under its failure policy,
    /// listed with the rest of `rules` in request order.
    pub(super) fn ask_fallback(
        &self,
        now: Instant,
        rules: &[&LimitRule],
        live: &[&LimitRule],
        cost: u32,
        reason: String,
    ) -> Decision {
        let policies: Vec<FailurePolicy> = live
            .iter()
            .map(|r| self.cfg.failure_policy(base_id(&r.id), r.kind))
            .collect();
        let d = self.state().fallback(now, live, &policies, cost, reason);
        in_request_order(rules, d)
    }

    /// On a cluster, why `live` cannot be one script call (two limits in different key groups),
    /// counted and logged; such a check is decided by the fallback and Redis is not marked down.
    pub(super) fn cross_slot(&self, live: &[&LimitRule]) -> Option<String> {
        let why = self.keys.split(live.iter().map(|r| r.id.as_str()))?;
        let n = self.counts.cross_slot.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::error!(checks = n, "{why}; checked by the local fallback instead");
        }
        Some(why)
    }

    /// Starts connecting to Redis in the background (see [`RedisBuckets::warm_up`]), so that the
    /// first checks need not wait for a TLS set-up. Must be called within a tokio runtime.
    ///
    /// [`RedisBuckets::warm_up`]: crate::store::RedisBuckets::warm_up
    pub fn warm_up(&self) {
        self.store.warm_up();
    }

    /// Whether Redis was ever reached (a one-way latch; `Err` with the last connection error
    /// while it never was).
    pub fn redis_reached_once(&self) -> Result<(), String> {
        self.store.connected_once()
    }

    /// Whether the last Redis call failed and no call has succeeded since: decisions come from
    /// the failure policies (see [`crate::fallback`]).
    pub fn in_fallback(&self) -> bool {
        self.state().in_fallback()
    }

    /// Marks Redis down after `e` (for `probe_after`), `unpaid` still owed.
    fn redis_down(&self, e: &StoreError, unpaid: impl IntoIterator<Item = (String, u64)>) {
        let now = crate::clock::now();
        let entered = self.state().redis_failed(now, self.cfg.probe_after, unpaid);
        if entered {
            tracing::warn!(
                error = %crate::http::with_causes(e),
                "Redis failed: entering the local fallback"
            );
        }
    }
}
