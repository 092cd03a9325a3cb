//! The limiter's state machine, sans-IO: everything a [`super::Limiter`] decides from and
//! changes as it goes (the running rule set and its lease, the fence, the back-off from a Redis
//! that failed, the local fallback's buckets, the tokens owed to Redis, the demand and
//! would-refuse totals and the counts of what happened). It sends nothing, reads no clock and
//! logs nothing: every method that depends on time takes `now`, and what must be logged comes
//! back as data ([`FenceChange`], [`LeaseNotes`], the `bool` of a switch to and from fallback).
//!
//! **One clock.** `now` is always an instant of tokio's monotonic clock (`crate::clock::now`),
//! which tests pause and advance: leases and the fence were counted on it already, and the
//! fallback's buckets and the back-off, once on std's monotonic clock, are counted on it too. In
//! a gateway the two clocks are the same one (tokio's `Instant` wraps std's, and only a paused
//! test moves them apart), so no running behaviour changes.
//!
//! **Calling protocol**, one check (the driver holds the lock for each step only, never across
//! an `.await`):
//! 1. [`LimiterState::rules`] → the driver resolves the requested buckets against them;
//! 2. [`LimiterState::begin`]: counts demand, decides what needs no bucket (held closed, fenced,
//!    only shadows left) or gives the live limits;
//! 3. [`LimiterState::route`]: to Redis (taking what is owed, which the driver charges first) or
//!    straight to the fallback while the back-off runs;
//! 4. after the Redis call: [`LimiterState::redis_answered`] or [`LimiterState::redis_failed`]
//!    (with what could not be charged);
//! 5. without an answer from Redis: [`LimiterState::fallback`] decides locally;
//! 6. [`LimiterState::count_would_refuse`] with the shadow limits the decision would refuse.
//!
//! Rule sets arrive through [`LimiterState::install`] and [`LimiterState::renew`]; the fence is
//! noted (once each way) by whichever call sees the lease run out first ([`LimiterState::fence`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::decision::{fenced_refusal, held_closed, in_request_order, limit_decision};
use super::{Decision, DecisionPath, Install, LimitDecision, Verdict};
use crate::fallback::{FailurePolicy, Fallback, FallbackLimit, FallbackVerdict};
use crate::lease::Lease;
use crate::rules::{LimitKind, LimitRule, RuleSet, MAX_LIMITS};
use crate::slots::slot_id;
use crate::templates::instance_parts;
use std::borrow::Cow;

#[cfg(test)]
mod tests;

/// The limiter's mutable state; see the module doc for the calling protocol.
#[derive(Debug)]
pub(super) struct LimiterState {
    rules: Option<Arc<RuleSet>>,
    lease: Lease,
    /// The renewal the running lease stands on, as the daemon numbered it.
    seq: Option<u64>,
    /// Since when capacity limits are fenced (`None`: not fenced).
    fenced_since: Option<Instant>,
    warned_unbounded: bool,
    /// While Redis is marked down: until when calls go straight to the fallback (then the next
    /// call probes Redis). `None`: Redis answered last.
    down_until: Option<Instant>,
    /// The origin of the fallback's clock in seconds (its buckets count `f64` seconds from it).
    origin: Instant,
    fallback: Fallback,
    /// Per limit id: tokens the fallback admitted, charged to the Redis bucket before the next
    /// Redis decision, so that the fallback and Redis spend one budget.
    owed: BTreeMap<String, u64>,
    /// Cumulative cost received per limit (allowed or refused); at most [`MAX_LIMITS`] ids.
    demand: BTreeMap<String, u64>,
    /// Calls each shadow limit would have refused; at most [`MAX_LIMITS`] ids.
    would_refuse: BTreeMap<String, u64>,
    counts: Counts,
}

/// What the state counts, since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Counts {
    pub installed: u64,
    pub ignored: u64,
    /// Times fencing started.
    pub fences: u64,
    pub fenced_refusals: u64,
    pub redis_decisions: u64,
    pub fallback_decisions: u64,
    pub redis_failures: u64,
}

/// A change of the fence, to be logged once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FenceChange {
    /// The lease of `version` ran out: capacity limits are fenced.
    Up { version: u64 },
    /// A lease for `version` lifted the fence after `fenced_ms`.
    Down { version: u64, fenced_ms: u64 },
}

/// What a new lease calls for in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct LeaseNotes {
    /// The version running under the lease.
    pub version: u64,
    /// The first unbounded lease (a daemon that sends none): warned about once.
    pub first_unbounded: bool,
    pub fence: Option<FenceChange>,
}

/// What [`LimiterState::begin`] decided.
#[derive(Debug, PartialEq)]
pub(super) enum Begin<'r> {
    /// Decided without a bucket (held closed, fenced, or only shadow limits left).
    Decided(Decision),
    /// These limits (in request order) are asked of Redis or the fallback.
    Live(Vec<&'r LimitRule>),
}

/// Where [`LimiterState::route`] sends a check.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// Ask Redis, first charging it these owed tokens per limit id (taken from the state: what
    /// cannot be charged comes back through [`LimiterState::redis_failed`]).
    Redis { owed: BTreeMap<String, u64> },
    /// Redis failed recently and the next probe is not due: the fallback decides.
    Fallback,
}

/// What [`LimiterState::snapshot`] reads at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Snapshot {
    pub counts: Counts,
    pub fenced: bool,
    pub fence: Option<FenceChange>,
    /// `None`: unbounded, or no rule set.
    pub lease_remaining: Option<Duration>,
    pub fallback_owed: u64,
    pub fallback_values_refused: u64,
}

impl LimiterState {
    /// No rule set, Redis presumed up, the fallback's clock starting at `now`.
    pub fn new(gateways_per_region: u32, now: Instant) -> Self {
        Self {
            rules: None,
            lease: Lease::Unbounded,
            seq: None,
            fenced_since: None,
            warned_unbounded: false,
            down_until: None,
            origin: now,
            fallback: Fallback::new(gateways_per_region),
            owed: BTreeMap::new(),
            demand: BTreeMap::new(),
            would_refuse: BTreeMap::new(),
            counts: Counts::default(),
        }
    }

    /// The rule set running now.
    pub fn rules(&self) -> Option<Arc<RuleSet>> {
        self.rules.clone()
    }

    /// The version running now (0 before the first rule set).
    pub fn version(&self) -> u64 {
        self.rules.as_ref().map_or(0, |r| r.version())
    }

    pub fn lease(&self) -> Lease {
        self.lease
    }

    pub fn lease_seq(&self) -> Option<u64> {
        self.seq
    }

    /// Runs `set` under `lease` if its version is greater than the one running; an equal version
    /// renews the running set's lease instead, an older one changes nothing.
    pub fn install(
        &mut self,
        now: Instant,
        set: Arc<RuleSet>,
        lease: Lease,
        seq: Option<u64>,
    ) -> (Install, LeaseNotes) {
        let running = self.version();
        let offered = set.version();
        if offered <= running {
            self.counts.ignored += 1;
            let notes = if offered == running {
                self.set_lease(now, lease, seq)
            } else {
                LeaseNotes::default()
            };
            return (Install::Ignored { running, offered }, notes);
        }
        self.rules = Some(set);
        self.counts.installed += 1;
        let notes = self.set_lease(now, lease, seq);
        (Install::Installed { version: offered }, notes)
    }

    /// Renews the lease of the running rule set if it is still `version`; `None` if it is not.
    pub fn renew(
        &mut self,
        now: Instant,
        version: u64,
        lease: Lease,
        seq: Option<u64>,
    ) -> Option<LeaseNotes> {
        (version > 0 && self.version() == version).then(|| self.set_lease(now, lease, seq))
    }

    /// Whether capacity limits are fenced at `now`, noting a change of state.
    pub fn fence(&mut self, now: Instant) -> (bool, Option<FenceChange>) {
        let ran_out = self.lease.ran_out(now);
        (ran_out, self.note_fence(now, ran_out))
    }

    /// When the running lease runs out, if it is bounded and the fence is not up already.
    pub fn lease_end(&self) -> Option<Instant> {
        match self.lease {
            Lease::Until(t) if self.fenced_since.is_none() => Some(t),
            _ => None,
        }
    }

    /// Step 2 of a check of `rules` (resolved, in request order) at `cost`: counts the demand,
    /// then refuses if an enforced limit is held closed, or fenced (spending nothing, with
    /// `fence_retry_after`); otherwise the limits left to ask, or the decision when none is left.
    pub fn begin<'r>(
        &mut self,
        now: Instant,
        rules: &[&'r LimitRule],
        cost: u32,
        fence_retry_after: Duration,
    ) -> (Begin<'r>, Option<FenceChange>) {
        self.count_demand(rules, cost);
        if rules.iter().any(|r| r.rejected.is_some() && !r.shadow) {
            return (Begin::Decided(held_closed(rules)), None);
        }
        let (fenced, change) = self.fence(now);
        let fenced_out = |r: &LimitRule| fenced && r.kind == LimitKind::Capacity;
        if rules.iter().any(|r| fenced_out(r) && !r.shadow) {
            self.counts.fenced_refusals += 1;
            let d = fenced_refusal(rules, fence_retry_after);
            return (Begin::Decided(d), change);
        }
        let live: Vec<&'r LimitRule> = rules
            .iter()
            .copied()
            .filter(|r| r.rejected.is_none() && !fenced_out(r))
            .collect();
        if live.is_empty() {
            // Only shadow limits, each held closed or fenced: never refused.
            let none = Decision {
                allowed: true,
                retry_after_s: None,
                path: DecisionPath::Rules,
                limits: Vec::new(),
            };
            return (Begin::Decided(in_request_order(rules, none)), change);
        }
        (Begin::Live(live), change)
    }

    /// Step 3: Redis, unless it failed and the back-off has not passed at `now`.
    pub fn route(&mut self, now: Instant) -> Route {
        if self.down_until.is_some_and(|until| now < until) {
            return Route::Fallback;
        }
        Route::Redis {
            owed: std::mem::take(&mut self.owed),
        }
    }

    /// Redis decided a check. Returns whether this leaves the fallback.
    pub fn redis_answered(&mut self) -> bool {
        self.counts.redis_decisions += 1;
        self.down_until.take().is_some()
    }

    /// A Redis call failed at `now`: `unpaid` (tokens per limit id that could not be charged)
    /// stays owed, and calls go to the fallback for `probe_after`. Returns whether this enters
    /// the fallback, whose buckets then start empty.
    pub fn redis_failed(
        &mut self,
        now: Instant,
        probe_after: Duration,
        unpaid: impl IntoIterator<Item = (String, u64)>,
    ) -> bool {
        for (id, tokens) in unpaid {
            let t = self.owed.entry(id).or_default();
            *t = t.saturating_add(tokens);
        }
        self.counts.redis_failures += 1;
        let entered = self.down_until.is_none();
        if entered {
            self.fallback.enter();
        }
        self.down_until = Some(now + probe_after);
        entered
    }

    /// Whether Redis is marked down (it failed and has not answered since).
    pub fn in_fallback(&self) -> bool {
        self.down_until.is_some()
    }

    /// Step 5: the local fallback decides `live` (with `policies`, one per limit) at `cost`; what
    /// its buckets admit is owed to Redis. `reason` says why Redis was not asked.
    pub fn fallback(
        &mut self,
        now: Instant,
        live: &[&LimitRule],
        policies: &[FailurePolicy],
        cost: u32,
        reason: String,
    ) -> Decision {
        self.counts.fallback_decisions += 1;
        let asks: Vec<FallbackLimit<'_>> = live
            .iter()
            .zip(policies)
            .filter(|(_, p)| **p != FailurePolicy::FailOpen)
            .map(|(r, p)| FallbackLimit {
                id: &r.id,
                rate: r.rate,
                burst: r.burst,
                security: *p == FailurePolicy::FailClosed,
                shadow: r.shadow,
            })
            .collect();
        let now_s = now.saturating_duration_since(self.origin).as_secs_f64();
        let (allowed, verdicts) = self.fallback.check_at(now_s, &asks, f64::from(cost));
        if allowed {
            // A limit that fails open spent no local tokens: nothing is owed for it.
            for r in live
                .iter()
                .zip(policies)
                .filter_map(|(r, p)| (*p == FailurePolicy::LocalShare && !r.shadow).then_some(r))
            {
                let t = self.owed.entry(r.id.clone()).or_default();
                *t = t.saturating_add(u64::from(cost));
            }
        }
        fallback_decision(live, policies, allowed, verdicts, reason)
    }

    /// Step 6: one more call refused by each of the shadow limits `ids`.
    pub fn count_would_refuse<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>) {
        for id in ids {
            if let Some(t) = self.would_refuse.get_mut(id) {
                *t = t.saturating_add(1);
            } else if self.would_refuse.len() < MAX_LIMITS {
                self.would_refuse.insert(id.to_owned(), 1);
            }
        }
    }

    pub fn demand_totals(&self) -> &BTreeMap<String, u64> {
        &self.demand
    }

    pub fn would_refuse_totals(&self) -> &BTreeMap<String, u64> {
        &self.would_refuse
    }

    /// The counts and the state worth a metric at `now` (noting the fence as [`Self::fence`]).
    pub fn snapshot(&mut self, now: Instant) -> Snapshot {
        let (fenced, fence) = self.fence(now);
        Snapshot {
            counts: self.counts,
            fenced,
            fence,
            lease_remaining: self.rules.as_ref().and(self.lease.remaining(now)),
            fallback_owed: self.owed.values().sum(),
            fallback_values_refused: self.fallback.values_refused(),
        }
    }

    fn set_lease(&mut self, now: Instant, lease: Lease, seq: Option<u64>) -> LeaseNotes {
        self.lease = lease;
        self.seq = seq.or(self.seq);
        let first_unbounded = lease == Lease::Unbounded && !self.warned_unbounded;
        self.warned_unbounded |= first_unbounded;
        LeaseNotes {
            version: self.version(),
            first_unbounded,
            fence: self.note_fence(now, lease.ran_out(now)),
        }
    }

    /// Records whether the fence is up; a change is counted and returned exactly once.
    fn note_fence(&mut self, now: Instant, fenced: bool) -> Option<FenceChange> {
        if self.fenced_since.is_some() == fenced {
            return None;
        }
        let version = self.version();
        if fenced {
            self.fenced_since = Some(now);
            self.counts.fences += 1;
            return Some(FenceChange::Up { version });
        }
        let fenced_ms = self
            .fenced_since
            .take()
            .map_or(0, |s| now.saturating_duration_since(s).as_millis() as u64);
        Some(FenceChange::Down { version, fenced_ms })
    }

    fn count_demand(&mut self, rules: &[&LimitRule], cost: u32) {
        // Borrowed beside the totals (disjoint fields): no reference count taken per check.
        let set = self.rules.as_deref();
        for r in rules {
            // A value's bucket reports no demand of its own (a total per value would grow with
            // the values seen): a value in a slot counts as demand of its slot's limit, so that
            // the slot's room follows its busy values; any other value's split is static.
            let id = match instance_parts(&r.id) {
                None => Cow::Borrowed(r.id.as_str()),
                Some((template, hash)) => {
                    let slot = set
                        .and_then(|s| s.template(template))
                        .and_then(|t| t.slot_of(hash));
                    match slot {
                        Some(k) => Cow::Owned(slot_id(template, k)),
                        None => continue,
                    }
                }
            };
            if let Some(t) = self.demand.get_mut(id.as_ref()) {
                *t = t.saturating_add(u64::from(cost));
            } else if self.demand.len() < MAX_LIMITS {
                self.demand.insert(id.into_owned(), u64::from(cost));
            }
        }
    }
}

/// The shadow limits (listed ones: a value's bucket counts nothing) that `d` says enforcing
/// would have refused.
pub(super) fn would_refuse(d: &Decision) -> impl Iterator<Item = &str> {
    d.limits
        .iter()
        .filter(|l| l.shadow && l.verdict.refuses() && instance_parts(&l.id).is_none())
        .map(|l| l.id.as_str())
}

/// The fallback's answer for `live` as a [`Decision`]: a fail-open limit admits unchecked, the
/// others read their verdicts in order; a Retry-After only when refused and a wait helps.
fn fallback_decision(
    live: &[&LimitRule],
    policies: &[FailurePolicy],
    allowed: bool,
    verdicts: Vec<FallbackVerdict>,
    reason: String,
) -> Decision {
    let mut retry_after_s = None;
    // A fail-closed limit, or a short one that no wait helps, leaves no Retry-After to give.
    let mut hopeless = false;
    let mut limits = Vec::with_capacity(live.len());
    let mut verdicts = verdicts.into_iter();
    for (r, p) in live.iter().zip(policies) {
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
    Decision {
        allowed,
        retry_after_s,
        path: DecisionPath::Fallback(reason),
        limits,
    }
}
