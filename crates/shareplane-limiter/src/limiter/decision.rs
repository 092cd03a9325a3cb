//! What a check answers: [`Decision`] and its parts, the errors of a check, the answer to an
//! install and the limiter's counters; and the decisions made without asking any bucket (held
//! closed, fenced).

use std::time::Duration;

use crate::rules::{LimitKind, LimitRule};
use crate::store::MAX_BUCKETS_PER_CALL;
use crate::templates::ValueProblem;

/// A call that could not be checked at all (the gateway decides what to answer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    #[error("no rule set loaded yet")]
    NoRules,
    #[error("limit {0:?} is not in the rule set this gateway runs")]
    UnknownLimit(String),
    #[error("limit {0:?} appears twice in one check")]
    Duplicate(String),
    #[error("a check names 1 to {MAX_BUCKETS_PER_CALL} limits, not {0}")]
    LimitCount(usize),
    #[error("cost {cost} is outside 1..={max} (max_cost)")]
    Cost { cost: u32, max: u32 },
    #[error("template {0:?} is not in the rule set this gateway runs")]
    UnknownTemplate(String),
    #[error("a value for template {template:?} is {problem:?}")]
    BadValue {
        template: String,
        problem: ValueProblem,
    },
}

/// One bucket a check asks for: a listed limit (`value: None`), or the bucket of `value` under
/// the template `limit` ([`crate::templates`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketRef<'a> {
    pub limit: &'a str,
    pub value: Option<&'a str>,
}

impl<'a> BucketRef<'a> {
    pub fn limit(limit: &'a str) -> Self {
        Self { limit, value: None }
    }

    pub fn value(template: &'a str, value: &'a str) -> Self {
        Self {
            limit: template,
            value: Some(value),
        }
    }
}

/// What a limit said about one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Had the tokens (and spent them if the call was admitted).
    Admit,
    /// Short of tokens now.
    Short,
    /// The cost exceeds the burst (no Retry-After).
    CostAboveBurst,
    /// The limit was rejected at load time and refuses every call (no Retry-After).
    HeldClosed,
    /// Redis did not answer and the limit fails closed (a security limit by default; no
    /// Retry-After).
    FailClosed,
    /// Redis did not answer and the limit fails open: admitted without a check.
    FailOpen,
    /// Not evaluated (a shadow limit under fallback, or a call refused before evaluation).
    NotChecked,
    /// A capacity limit while the rule set's lease has run out: refused with a Retry-After
    /// (a shadow one is reported so and never refuses).
    Fenced,
}

impl Verdict {
    /// Whether enforcing the limit refuses the call (a shadow limit's verdict says so and it is
    /// admitted all the same).
    pub fn refuses(&self) -> bool {
        !matches!(
            self,
            Verdict::Admit | Verdict::FailOpen | Verdict::NotChecked
        )
    }
}

/// Where a decision was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecisionPath {
    /// By the script in Redis.
    Redis,
    /// By the local fallback, because Redis failed or did not answer (the reason).
    Fallback(String),
    /// From the rules alone: an enforced limit is held closed.
    Rules,
    /// The rule set's lease ran out: capacity limits refuse everything (see [`crate::lease`]).
    Fenced,
}

/// One limit's part of a decision.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitDecision {
    pub id: String,
    pub kind: LimitKind,
    /// A shadow limit never refuses; `verdict` says what enforcing it would have done.
    pub shadow: bool,
    pub verdict: Verdict,
    /// Tokens left after the call, where known.
    pub tokens: Option<f64>,
}

/// The answer to [`Limiter::check`].
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub allowed: bool,
    /// Whole seconds for a `Retry-After` header when refused and a wait helps.
    pub retry_after_s: Option<u64>,
    pub path: DecisionPath,
    pub limits: Vec<LimitDecision>,
}

/// What [`Limiter::install`] did with a rule set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Install {
    Installed {
        version: u64,
    },
    /// Its version is not greater than the one running: ignored (its lease renews the running
    /// set when the versions are equal).
    Ignored {
        running: u64,
        offered: u64,
    },
}

/// Counters for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimiterStats {
    pub redis_decisions: u64,
    pub fallback_decisions: u64,
    /// Tokens the fallback admitted that are not charged to the Redis buckets yet.
    pub fallback_owed: u64,
    /// Tokens the fallback admitted and then charged to the Redis buckets.
    pub fallback_repaid: u64,
    pub redis_failures: u64,
    /// Checks decided by the fallback because, on a cluster, their limits are in different key
    /// groups (hash slots) and cannot be one script call.
    pub cross_slot_checks: u64,
    /// Calls for a template's value refused by the fallback because it already held
    /// [`crate::templates::MAX_FALLBACK_VALUES`] per-value buckets.
    pub fallback_values_refused: u64,
    pub rule_sets_installed: u64,
    pub rule_sets_ignored: u64,
    pub script_loads: u64,
    /// Bucket-script calls sent to Redis; fewer than the checks they decided when checks that
    /// arrived together shared a call (`store::batch`).
    pub redis_calls: u64,
    /// Whether capacity limits are fenced now (the lease ran out).
    pub fenced: bool,
    /// Times fencing started.
    pub fences: u64,
    /// Calls refused because capacity limits were fenced.
    pub fenced_refusals: u64,
    /// What is left of the running rule set's lease (`None`: unbounded, or no rule set).
    pub lease_remaining: Option<Duration>,
}

pub(super) fn limit_decision(r: &LimitRule, verdict: Verdict) -> LimitDecision {
    LimitDecision {
        id: r.id.clone(),
        kind: r.kind,
        shadow: r.shadow,
        verdict,
        tokens: None,
    }
}

/// Lists every requested limit in request order, adding the shadow limits that were not
/// evaluated: held closed, or fenced.
pub(super) fn in_request_order(rules: &[&LimitRule], mut d: Decision) -> Decision {
    if d.limits.len() == rules.len() {
        return d;
    }
    let mut evaluated = std::mem::take(&mut d.limits).into_iter().peekable();
    for r in rules {
        match evaluated.next_if(|l| l.id == r.id) {
            Some(l) => d.limits.push(l),
            None if r.rejected.is_some() => d.limits.push(limit_decision(r, Verdict::HeldClosed)),
            None => d.limits.push(limit_decision(r, Verdict::Fenced)),
        }
    }
    d
}

/// Refused because the lease ran out: capacity limits are fenced, nothing is spent.
pub(super) fn fenced_refusal(rules: &[&LimitRule], retry_after: Duration) -> Decision {
    let limits = rules
        .iter()
        .map(|r| {
            let v = if r.kind == LimitKind::Capacity {
                Verdict::Fenced
            } else {
                Verdict::NotChecked
            };
            limit_decision(r, v)
        })
        .collect();
    Decision {
        allowed: false,
        retry_after_s: Some(retry_after.as_secs().max(1)),
        path: DecisionPath::Fenced,
        limits,
    }
}

pub(super) fn held_closed(rules: &[&LimitRule]) -> Decision {
    let limits = rules
        .iter()
        .map(|r| {
            let v = if r.rejected.is_some() {
                Verdict::HeldClosed
            } else {
                Verdict::NotChecked
            };
            limit_decision(r, v)
        })
        .collect();
    Decision {
        allowed: false,
        retry_after_s: None,
        path: DecisionPath::Rules,
        limits,
    }
}
