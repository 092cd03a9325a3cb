//! What a gateway admits while Redis does not answer (the local fallback policy).
//!
//! - **capacity** limits admit against an in-process token bucket per limit holding this gateway's
//!   part of the Region's share: rate = share / gateways-per-Region, burst = 2 s of that. The buckets
//!   are emptied each time the gateway enters fallback, so the Region's gateways together admit at
//!   most the share's rate while Redis is away and no burst on top of what Redis already let through
//!   (too little rather than too much). The bound holds only if the configured number of gateways per
//!   Region is not below the real one.
//!
//!   What the local buckets admit is owed to the Redis bucket of the same limit and charged to it
//!   (`repay.lua`) before Redis decides again, so that a Redis that stalls now and then (a timeout,
//!   then a second of fallback, then Redis again) does not hand out its refill of that second on top
//!   of what the fallback admitted in it. Fallback and Redis then spend one budget: over any t
//!   seconds a gateway admits at most burst + share × t (tests/stall.rs measures it). A call that
//!   timed out may still run in Redis once it answers: it spends the bucket there while its caller
//!   has the fallback's answer, which is charged too (too little, never too much).
//! - **security** limits fail closed: refused, without a Retry-After.
//! - **shadow** limits are not evaluated and never refuse.
//!
//! Several limits on one call are all or nothing here too.
//!
//! A template's per-value buckets ([`crate::templates`]) fall back like listed limits of the
//! template's kind, each value with a local bucket of its own; at most
//! [`MAX_FALLBACK_VALUES`](crate::templates::MAX_FALLBACK_VALUES) of them are kept, and a call for
//! a value beyond them is refused (without a Retry-After) until Redis answers again, so a flood
//! of distinct values cannot grow this process's memory, nor take the local buckets of the
//! values that already have one.

use std::collections::BTreeMap;

/// A token bucket on a caller-given clock (seconds), the same arithmetic as the Redis script:
/// elapsed clamped at zero, tokens clamped to a lower burst, never reset.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalBucket {
    tokens: f64,
    at_s: f64,
}

impl LocalBucket {
    /// An empty bucket at time `now_s`.
    pub fn empty(now_s: f64) -> Self {
        Self {
            tokens: 0.0,
            at_s: now_s,
        }
    }

    /// Refills up to `now_s` with the given numbers and returns the tokens held.
    pub fn refill(&mut self, now_s: f64, rate: f64, burst: f64) -> f64 {
        let elapsed = (now_s - self.at_s).max(0.0);
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.at_s = self.at_s.max(now_s);
        self.tokens
    }

    pub fn spend(&mut self, cost: f64) {
        self.tokens -= cost;
    }
}

/// One limit of a fallback check.
#[derive(Debug, Clone, PartialEq)]
pub struct FallbackLimit<'a> {
    pub id: &'a str,
    /// The Region's share for the limit (rate and burst), before dividing by the gateways.
    pub rate: f64,
    pub burst: f64,
    pub security: bool,
    pub shadow: bool,
}

/// What a limit does while Redis does not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailurePolicy {
    /// Admit against this gateway's part of the Region's share in a local bucket (see the module
    /// doc); what it admits is charged to Redis when Redis answers again.
    LocalShare,
    /// Admit every call: the limit is not enforced while Redis is away.
    FailOpen,
    /// Refuse every call, without a Retry-After.
    FailClosed,
}

impl FailurePolicy {
    /// Capacity limits keep their local share, security limits fail closed (SPEC.md §8).
    pub fn default_for(kind: crate::rules::LimitKind) -> Self {
        match kind {
            crate::rules::LimitKind::Capacity => Self::LocalShare,
            crate::rules::LimitKind::Security => Self::FailClosed,
        }
    }
}

/// A limit's verdict under fallback.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FallbackVerdict {
    /// The local bucket had the tokens (tokens left).
    Admit(f64),
    /// Not enough local tokens (tokens held, seconds until the refill covers the cost).
    Short(f64, Option<u64>),
    /// A security limit: fails closed.
    FailClosed,
    /// A shadow limit: not evaluated.
    NotChecked,
}

/// The local buckets of one gateway, on a clock in seconds that the caller gives (the limiter's
/// state counts it from when the limiter was made).
#[derive(Debug)]
pub struct Fallback {
    gateways: f64,
    buckets: BTreeMap<String, LocalBucket>,
    /// How many of `buckets` are per-value buckets of templates.
    values: usize,
    /// Calls refused because the per-value buckets were all taken, since start.
    values_refused: u64,
}

impl Fallback {
    /// `gateways_per_region` must be at least 1 (the caller validates it).
    pub fn new(gateways_per_region: u32) -> Self {
        Self {
            gateways: f64::from(gateways_per_region.max(1)),
            buckets: BTreeMap::new(),
            values: 0,
            values_refused: 0,
        }
    }

    /// Called when the gateway enters fallback: every local bucket starts empty.
    pub fn enter(&mut self) {
        self.buckets.clear();
        self.values = 0;
    }

    /// Calls refused because [`MAX_FALLBACK_VALUES`](crate::templates::MAX_FALLBACK_VALUES)
    /// per-value buckets were taken, since start.
    pub fn values_refused(&self) -> u64 {
        self.values_refused
    }

    /// Checks `limits` at cost `cost` at `now_s` (seconds on the caller's clock), spending the
    /// local buckets only if every enforced limit admits.
    pub fn check_at(
        &mut self,
        now_s: f64,
        limits: &[FallbackLimit<'_>],
        cost: f64,
    ) -> (bool, Vec<FallbackVerdict>) {
        let mut verdicts = Vec::with_capacity(limits.len());
        let mut allowed = true;
        for l in limits {
            let v = if l.shadow {
                FallbackVerdict::NotChecked
            } else if l.security {
                FallbackVerdict::FailClosed
            } else if self.no_room_for(l.id) {
                self.values_refused += 1;
                FallbackVerdict::Short(0.0, None)
            } else {
                let (rate, burst) = (l.rate / self.gateways, l.burst / self.gateways);
                if crate::templates::instance_parts(l.id).is_some()
                    && !self.buckets.contains_key(l.id)
                {
                    self.values += 1;
                }
                let bucket = self
                    .buckets
                    .entry(l.id.to_owned())
                    .or_insert(LocalBucket::empty(now_s));
                let tokens = bucket.refill(now_s, rate, burst);
                if tokens >= cost {
                    FallbackVerdict::Admit(tokens)
                } else {
                    let wait =
                        (cost <= burst && rate > 0.0).then(|| ((cost - tokens) / rate).ceil());
                    FallbackVerdict::Short(tokens, wait.map(|w| w.max(1.0) as u64))
                }
            };
            allowed &= matches!(v, FallbackVerdict::Admit(_) | FallbackVerdict::NotChecked);
            verdicts.push(v);
        }
        if allowed {
            for (l, v) in limits.iter().zip(verdicts.iter_mut()) {
                if let (FallbackVerdict::Admit(t), Some(b)) = (v, self.buckets.get_mut(l.id)) {
                    b.spend(cost);
                    *t -= cost;
                }
            }
        }
        (allowed, verdicts)
    }

    /// Whether `id` is a value's bucket that has none yet while all are taken.
    fn no_room_for(&self, id: &str) -> bool {
        crate::templates::instance_parts(id).is_some()
            && self.values >= crate::templates::MAX_FALLBACK_VALUES
            && !self.buckets.contains_key(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap<'a>(id: &'a str, rate: f64) -> FallbackLimit<'a> {
        FallbackLimit {
            id,
            rate,
            burst: 2.0 * rate,
            security: false,
            shadow: false,
        }
    }

    #[test]
    fn per_value_buckets_are_bounded_and_the_ones_held_keep_working() {
        use crate::templates::{instance_id, MAX_FALLBACK_VALUES};
        let mut f = Fallback::new(1);
        let ids: Vec<String> = (0..=MAX_FALLBACK_VALUES)
            .map(|i| instance_id("t", &i.to_string()))
            .collect();
        for id in &ids[..MAX_FALLBACK_VALUES] {
            let _ = f.check_at(0.0, &[cap(id, 10.0)], 1.0);
        }
        assert_eq!(f.values_refused(), 0);
        // One more value is refused, with no wait that helps; the held ones refill and admit.
        let (ok, v) = f.check_at(1.0, &[cap(&ids[MAX_FALLBACK_VALUES], 10.0)], 1.0);
        assert!(!ok);
        assert_eq!(v, [FallbackVerdict::Short(0.0, None)]);
        assert_eq!(f.values_refused(), 1);
        let (ok, _) = f.check_at(1.0, &[cap(&ids[0], 10.0)], 1.0);
        assert!(ok);
        // Listed limits are not counted against the values' bound.
        let (_, v) = f.check_at(1.0, &[cap("listed", 10.0)], 1.0);
        assert!(matches!(v[0], FallbackVerdict::Short(_, Some(_))), "{v:?}");
        f.enter();
        let (_, v) = f.check_at(2.0, &[cap(&ids[MAX_FALLBACK_VALUES], 10.0)], 1.0);
        assert!(matches!(v[0], FallbackVerdict::Short(_, Some(_))), "{v:?}");
    }

    #[test]
    fn capacity_admits_at_the_gateways_part_of_the_share_from_empty() {
        let mut f = Fallback::new(4);
        // 400/s for the Region, 4 gateways: 100/s and a burst of 200 here, starting empty.
        let (ok, _) = f.check_at(0.0, &[cap("a", 400.0)], 1.0);
        assert!(!ok);
        let mut admitted = 0;
        // Steps of 1/8 s keep the arithmetic exact.
        for step in 0..=8 {
            while f.check_at(f64::from(step) / 8.0, &[cap("a", 400.0)], 1.0).0 {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 100);
    }

    #[test]
    fn security_fails_closed_and_shadow_never_refuses() {
        let mut f = Fallback::new(1);
        let sec = FallbackLimit {
            id: "s",
            rate: 100.0,
            burst: 100.0,
            security: true,
            shadow: false,
        };
        let (ok, v) = f.check_at(10.0, std::slice::from_ref(&sec), 1.0);
        assert!(!ok);
        assert_eq!(v, [FallbackVerdict::FailClosed]);
        let shadow = FallbackLimit {
            shadow: true,
            ..sec
        };
        assert!(f.check_at(10.0, &[shadow], 1.0).0);
    }

    #[test]
    fn several_limits_are_all_or_nothing_and_retry_after_follows_the_refill() {
        let mut f = Fallback::new(1);
        f.check_at(0.0, &[cap("a", 10.0), cap("b", 1.0)], 1.0);
        // At 2 s: a holds 20, b holds 2.
        assert!(f.check_at(2.0, &[cap("a", 10.0), cap("b", 1.0)], 2.0).0);
        let (ok, v) = f.check_at(2.0, &[cap("a", 10.0), cap("b", 1.0)], 2.0);
        assert!(!ok);
        assert_eq!(
            v,
            [
                FallbackVerdict::Admit(18.0),
                FallbackVerdict::Short(0.0, Some(2))
            ]
        );
        // a was not spent by the refused call.
        assert!(f.check_at(2.0, &[cap("a", 10.0)], 18.0).0);
    }

    #[test]
    fn a_lower_burst_clamps_and_does_not_refill() {
        let mut b = LocalBucket::empty(0.0);
        assert_eq!(b.refill(10.0, 1.0, 8.0), 8.0);
        b.spend(5.0);
        assert_eq!(b.refill(10.0, 0.5, 2.0), 2.0);
        assert_eq!(b.refill(9.0, 0.5, 2.0), 2.0);
        b.spend(2.0);
        // The clock went back to 9 s: no refill until it passes 10 s again.
        assert_eq!(b.refill(9.5, 0.5, 2.0), 0.0);
        assert_eq!(b.refill(12.0, 0.5, 2.0), 1.0);
    }

    proptest::proptest! {
        /// Whatever the rule changes and the call pattern, starting empty the fallback admits no
        /// more than the refill the rules allowed: the sum over calls of the rate times the time
        /// since the previous call.
        #[test]
        fn admits_no_more_than_the_refill(
            calls in proptest::collection::vec((0u32..2_000, 0u32..1_000, 0u32..4_000, 1u32..5), 1..200),
            gateways in 1u32..5,
        ) {
            let mut f = Fallback::new(gateways);
            let (mut now_ms, mut allowed_tokens, mut spent) = (0u64, 0.0, 0.0);
            for (step_ms, rate, burst, cost) in calls {
                now_ms += u64::from(step_ms);
                let (rate, burst, cost) = (f64::from(rate), f64::from(burst), f64::from(cost));
                allowed_tokens += rate / f64::from(gateways) * f64::from(step_ms) / 1000.0;
                let l = FallbackLimit { id: "a", rate, burst, security: false, shadow: false };
                if f.check_at(now_ms as f64 / 1000.0, &[l], cost).0 {
                    spent += cost;
                }
                proptest::prop_assert!(spent <= allowed_tokens + 1e-6, "{spent} > {allowed_tokens}");
            }
        }
    }
}
