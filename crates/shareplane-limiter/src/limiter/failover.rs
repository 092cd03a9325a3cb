//! The Redis path and the switch to the local fallback: asking the bucket script, charging to
//! Redis what the fallback admitted, the failure policies while Redis is away, and the probes
//! that mark Redis down and up again.

use std::sync::atomic::Ordering;
use std::sync::PoisonError;

use super::{limit_decision, Decision, DecisionPath, LimitDecision, Limiter, Verdict};
use crate::fallback::{FailurePolicy, FallbackLimit, FallbackVerdict};
use crate::rules::{LimitRule, RuleSet};
use crate::store::{BucketCall, BucketVerdict, Debt, StoreError, MAX_BUCKETS_PER_CALL};
use crate::templates::base_id;

impl Limiter {
    /// Charges what the fallback admitted to the Redis buckets (see `repay.lua`) before Redis
    /// decides again. Debts of limits the running set no longer has are dropped (nothing enforces
    /// their buckets). What could not be charged stays owed, and the failure counts as Redis's.
    pub(super) async fn repay(&self, set: &RuleSet) -> Result<(), StoreError> {
        let owed = std::mem::take(&mut *self.owed.lock().unwrap_or_else(PoisonError::into_inner));
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
                let mut owed = self.owed.lock().unwrap_or_else(PoisonError::into_inner);
                for (id, (tokens, _)) in batches[i..].iter().flatten() {
                    let t = owed.entry(id.clone()).or_default();
                    *t = t.saturating_add(*tokens);
                }
                drop(owed);
                self.redis_down(&e);
                return Err(e);
            }
            let paid: u64 = chunk.iter().map(|(_, (t, _))| *t).sum();
            self.repaid.fetch_add(paid, Ordering::Relaxed);
        }
        if limits > 0 {
            tracing::info!(
                limits,
                "charged what the local fallback admitted to the Redis buckets"
            );
        }
        Ok(())
    }

    pub(super) async fn ask_redis(
        &self,
        live: &[&LimitRule],
        cost: u32,
    ) -> Result<Decision, StoreError> {
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
        match self.store.run(&calls).await {
            Ok(reply) => {
                self.redis_up();
                self.redis_decisions.fetch_add(1, Ordering::Relaxed);
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
                let (allowed, retry_after_s) = (reply.allowed, reply.retry_after_s);
                Ok(Decision {
                    allowed,
                    retry_after_s,
                    path: DecisionPath::Redis,
                    limits,
                })
            }
            Err(e) => {
                self.redis_down(&e);
                Err(e)
            }
        }
    }

    pub(super) fn ask_fallback(&self, live: &[&LimitRule], cost: u32, reason: String) -> Decision {
        self.fallback_decisions.fetch_add(1, Ordering::Relaxed);
        let policies: Vec<FailurePolicy> = live
            .iter()
            .map(|r| self.cfg.failure_policy(base_id(&r.id), r.kind))
            .collect();
        let asks: Vec<FallbackLimit<'_>> = live
            .iter()
            .zip(&policies)
            .filter(|(_, p)| **p != FailurePolicy::FailOpen)
            .map(|(r, p)| FallbackLimit {
                id: &r.id,
                rate: r.rate,
                burst: r.burst,
                security: *p == FailurePolicy::FailClosed,
                shadow: r.shadow,
            })
            .collect();
        let (allowed, verdicts) = self
            .fallback
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .check(&asks, f64::from(cost));
        let mut retry_after_s = None;
        // A fail-closed limit, or a short one that no wait helps, leaves no Retry-After to give.
        let mut hopeless = false;
        let mut limits = Vec::with_capacity(live.len());
        let mut verdicts = verdicts.into_iter();
        for (r, p) in live.iter().zip(&policies) {
            if *p == FailurePolicy::FailOpen {
                limits.push(limit_decision(r, Verdict::FailOpen));
                continue;
            }
            let Some(v) = verdicts.next() else {
                // The fallback answers one verdict per limit asked; nothing is left to read.
                limits.push(limit_decision(r, Verdict::NotChecked));
                continue;
            };
            let (verdict, tokens) = match v {
                FallbackVerdict::Admit(t) => (Verdict::Admit, Some(t)),
                FallbackVerdict::Short(t, wait) => {
                    hopeless |= wait.is_none();
                    retry_after_s = retry_after_s.max(wait);
                    (Verdict::Short, Some(t))
                }
                FallbackVerdict::FailClosed => {
                    hopeless = true;
                    (Verdict::FailClosed, None)
                }
                FallbackVerdict::NotChecked => (Verdict::NotChecked, None),
            };
            limits.push(LimitDecision {
                tokens,
                ..limit_decision(r, verdict)
            });
        }
        if allowed || hopeless {
            retry_after_s = None;
        }
        if allowed {
            self.owe(live, &policies, cost);
        }
        Decision {
            allowed,
            retry_after_s,
            path: DecisionPath::Fallback(reason),
            limits,
        }
    }

    /// What the local buckets admitted is owed to the Redis buckets of the same limits.
    fn owe(&self, live: &[&LimitRule], policies: &[FailurePolicy], cost: u32) {
        let mut owed = self.owed.lock().unwrap_or_else(PoisonError::into_inner);
        // A limit that fails open spent no local tokens: nothing is owed for it.
        for r in live
            .iter()
            .zip(policies)
            .filter_map(|(r, p)| (*p == FailurePolicy::LocalShare && !r.shadow).then_some(r))
        {
            let t = owed.entry(r.id.clone()).or_default();
            *t = t.saturating_add(u64::from(cost));
        }
    }

    /// On a cluster, why `live` cannot be one script call (two limits in different key groups),
    /// counted and logged; such a check is decided by the fallback and Redis is not marked down.
    pub(super) fn cross_slot(&self, live: &[&LimitRule]) -> Option<String> {
        let why = self.keys.split(live.iter().map(|r| r.id.as_str()))?;
        let n = self.cross_slot.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::error!(checks = n, "{why}; checked by the local fallback instead");
        }
        Some(why)
    }

    /// Starts connecting to Redis in the background (see [`RedisBuckets::warm_up`]), so that the
    /// first checks need not wait for a TLS set-up. Must be called within a tokio runtime.
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
        self.down_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    pub(super) fn redis_usable(&self) -> bool {
        let down = self
            .down_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        down.is_none_or(|until| crate::clock::std_now() >= until)
    }

    fn redis_down(&self, e: &StoreError) {
        self.redis_failures.fetch_add(1, Ordering::Relaxed);
        let mut down = self
            .down_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if down.is_none() {
            tracing::warn!(
                error = %crate::http::with_causes(e),
                "Redis failed: entering the local fallback"
            );
            self.fallback
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .enter();
        }
        *down = Some(crate::clock::std_now() + self.cfg.probe_after);
    }

    fn redis_up(&self) {
        let mut down = self
            .down_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if down.take().is_some() {
            tracing::info!("Redis answers again: leaving the local fallback");
        }
    }
}
