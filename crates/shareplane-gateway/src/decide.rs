//! One decision for either front end: descriptors mapped to limits (or to the bucket of one
//! value of a template), one limiter call (one script call in Redis) for all of them, and what
//! each descriptor gets back.

use std::borrow::Cow;
use std::sync::Arc;

use shareplane_limiter::limiter::BucketRef;
use shareplane_limiter::templates::{check_value, instance_id, ValueProblem};
use shareplane_limiter::{clock, CheckError, DecisionPath, Limiter, RuleSet};

use crate::mapping::{UnmappedPolicy, ValuePolicy};
use crate::metrics::{Api, Metrics};
use crate::reload::LiveCell;
// The answer's types live in `outcome` (which the metrics read too, without a circle back here).
pub use crate::outcome::{
    Code, DecideError, DescriptorOutcome, LimitView, Outcome, MAX_DESCRIPTORS,
};

/// What one descriptor names: a limit or template (`limit`), and its entries, among which a
/// template finds its value.
#[derive(Debug, Clone, Copy)]
pub struct Named<'a> {
    pub limit: &'a str,
    pub entries: &'a [(&'a str, &'a str)],
}

/// What a descriptor resolves to in the running rule set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target<'a> {
    Limit(&'a str),
    Value { template: &'a str, value: &'a str },
}

impl<'a> Target<'a> {
    fn bucket(self) -> BucketRef<'a> {
        match self {
            Target::Limit(l) => BucketRef::limit(l),
            Target::Value { template, value } => BucketRef::value(template, value),
        }
    }

    /// The id the limiter reports the bucket's verdict under.
    fn limiter_id(self) -> Cow<'a, str> {
        match self {
            Target::Limit(l) => Cow::Borrowed(l),
            Target::Value { template, value } => Cow::Owned(instance_id(template, value)),
        }
    }

    /// The limit or template id: what answers and metrics name (never a value).
    fn name(self) -> &'a str {
        match self {
            Target::Limit(l) | Target::Value { template: l, .. } => l,
        }
    }

    /// The rule's numbers for the answer (a value's override where it has one).
    fn numbers(self, set: &RuleSet) -> (f64, f64) {
        match self {
            Target::Limit(l) => set.get(l).map_or((0.0, 0.0), |r| (r.rate, r.burst)),
            Target::Value { template, value } => set.template(template).map_or((0.0, 0.0), |t| {
                let r = set.instance(t, value);
                (r.rate, r.burst)
            }),
        }
    }
}

/// Resolves one descriptor: `Ok(None)` names nothing the set has; `Err` names a template whose
/// value cannot select a bucket.
fn target<'a>(
    set: &RuleSet,
    named: Option<Named<'a>>,
) -> Result<Option<Target<'a>>, (&'a str, ValueProblem)> {
    let Some(n) = named else {
        return Ok(None);
    };
    if set.get(n.limit).is_some() {
        return Ok(Some(Target::Limit(n.limit)));
    }
    let Some(t) = set.template(n.limit) else {
        return Ok(None);
    };
    let value = n
        .entries
        .iter()
        .find(|(k, _)| *k == t.entry)
        .map_or("", |(_, v)| *v);
    check_value(value).map_err(|p| (n.limit, p))?;
    Ok(Some(Target::Value {
        template: n.limit,
        value,
    }))
}

/// The gateway's shared state: the limiter, what a reload may change (the mappings, the
/// unmapped and template value policies: [`crate::reload`]), the metrics.
pub struct Decider {
    pub limiter: Arc<Limiter>,
    pub live: LiveCell,
    pub metrics: Metrics,
}

impl Decider {
    /// Decides a request whose descriptors name what `named` says (`None`: nothing), each
    /// charged `cost`. A name the running rule set does not have counts as no limit.
    pub async fn decide(
        &self,
        api: Api,
        named: &[Option<Named<'_>>],
        cost: u32,
    ) -> Result<Outcome, DecideError> {
        let r = self.decide_inner(named, cost).await;
        self.metrics.request(api, &r);
        r
    }

    async fn decide_inner(
        &self,
        named: &[Option<Named<'_>>],
        cost: u32,
    ) -> Result<Outcome, DecideError> {
        if named.len() > MAX_DESCRIPTORS {
            return Err(DecideError::TooMany(named.len()));
        }
        let set = self.limiter.rules().ok_or(DecideError::NoRules)?;
        let live = self.live.get();
        let unmapped_policy = live.unmapped;
        let mut known: Vec<Option<Target<'_>>> = Vec::with_capacity(named.len());
        let mut bad = Vec::new();
        for (i, n) in named.iter().enumerate() {
            match target(&set, *n) {
                Ok(t) => known.push(t),
                Err((template, problem)) => {
                    self.metrics.template_value(problem, live.template_value);
                    bad.push((i, template, problem));
                    known.push(None);
                }
            }
        }
        if !bad.is_empty() {
            return self.refuse_values(&known, &bad, &set, &live);
        }
        let unmapped = known.iter().filter(|l| l.is_none()).count();
        self.metrics.unmapped(unmapped_policy, unmapped);
        if let Some(i) = known.iter().position(Option::is_none) {
            match unmapped_policy {
                UnmappedPolicy::Error => return Err(DecideError::Unmapped(i)),
                // Refused before anything is spent.
                UnmappedPolicy::Deny => return Ok(self.refuse_all(&known, &set, unmapped_policy)),
                UnmappedPolicy::Allow => {}
            }
        }
        let buckets = distinct_buckets(&known);
        if buckets.is_empty() {
            return Ok(Outcome {
                allowed: true,
                retry_after_s: None,
                descriptors: known.iter().map(|_| unmapped_outcome(Code::Ok)).collect(),
            });
        }
        let max = self.limiter.config().max_cost;
        if cost > max {
            // No bucket may ever hold more than max_cost's worth for one call (a limit whose burst
            // is below it is held closed), so a larger cost can never be admitted.
            self.metrics.cost_above_max();
            return Ok(self.refuse_all(&known, &set, unmapped_policy));
        }
        let started = clock::std_now();
        let decision = match self.limiter.check_buckets(&buckets, cost.max(1)).await {
            Ok(d) => d,
            Err(CheckError::NoRules) => return Err(DecideError::NoRules),
            Err(e) => return Err(DecideError::Limiter(e.to_string())),
        };
        if decision.path == DecisionPath::Redis {
            self.metrics.redis_latency(clock::std_since(started));
        }
        Ok(Outcome {
            allowed: decision.allowed,
            retry_after_s: decision.retry_after_s.filter(|_| !decision.allowed),
            descriptors: self.outcomes(&known, &decision, &set)?,
        })
    }

    /// A request with a descriptor whose template value cannot select a bucket, answered by the
    /// `template_value` policy: an error, or refused before anything is spent (never by a bucket
    /// shared by all).
    fn refuse_values(
        &self,
        known: &[Option<Target<'_>>],
        bad: &[(usize, &str, ValueProblem)],
        set: &RuleSet,
        live: &crate::reload::Live,
    ) -> Result<Outcome, DecideError> {
        if let (ValuePolicy::Error, Some(&(index, template, problem))) =
            (live.template_value, bad.first())
        {
            return Err(DecideError::TemplateValue {
                index,
                template: template.to_owned(),
                problem,
            });
        }
        let mut o = self.refuse_all(known, set, live.unmapped);
        for &(i, template, _) in bad {
            self.metrics.decision(template, Code::OverLimit);
            let base = set.template(template).map(|t| &t.base);
            o.descriptors[i] = DescriptorOutcome {
                code: Code::OverLimit,
                limit: Some(LimitView {
                    id: template.to_owned(),
                    rate: base.map_or(0.0, |b| b.rate),
                    burst: base.map_or(0.0, |b| b.burst),
                    tokens: None,
                }),
            };
        }
        Ok(o)
    }

    /// What each descriptor gets from the limiter's `decision`, in request order.
    fn outcomes(
        &self,
        known: &[Option<Target<'_>>],
        decision: &shareplane_limiter::Decision,
        set: &RuleSet,
    ) -> Result<Vec<DescriptorOutcome>, DecideError> {
        let mut descriptors = Vec::with_capacity(known.len());
        for t in known {
            let Some(t) = t else {
                descriptors.push(unmapped_outcome(Code::Ok));
                continue;
            };
            let id = t.limiter_id();
            let Some(d) = decision.limits.iter().find(|d| d.id == *id) else {
                return Err(DecideError::Limiter(format!(
                    "no verdict for limit {:?}",
                    t.name()
                )));
            };
            let refuses = d.verdict.refuses();
            if d.shadow && refuses {
                self.metrics.shadow_would_refuse(t.name());
            }
            let code = if refuses && !d.shadow {
                Code::OverLimit
            } else {
                Code::Ok
            };
            self.metrics.decision(t.name(), code);
            let (rate, burst) = t.numbers(set);
            descriptors.push(DescriptorOutcome {
                code,
                limit: Some(LimitView {
                    id: t.name().to_owned(),
                    rate,
                    burst,
                    tokens: d.tokens,
                }),
            });
        }
        Ok(descriptors)
    }

    /// Every mapped descriptor OVER_LIMIT, nothing spent, no Retry-After.
    fn refuse_all(
        &self,
        known: &[Option<Target<'_>>],
        set: &RuleSet,
        unmapped: UnmappedPolicy,
    ) -> Outcome {
        let descriptors = known
            .iter()
            .map(|t| match t {
                None => unmapped_outcome(match unmapped {
                    UnmappedPolicy::Allow => Code::Ok,
                    _ => Code::OverLimit,
                }),
                Some(t) => {
                    self.metrics.decision(t.name(), Code::OverLimit);
                    let (rate, burst) = t.numbers(set);
                    DescriptorOutcome {
                        code: Code::OverLimit,
                        limit: Some(LimitView {
                            id: t.name().to_owned(),
                            rate,
                            burst,
                            tokens: None,
                        }),
                    }
                }
            })
            .collect();
        Outcome {
            allowed: false,
            retry_after_s: None,
            descriptors,
        }
    }
}

fn unmapped_outcome(code: Code) -> DescriptorOutcome {
    DescriptorOutcome { code, limit: None }
}

/// `"id";q=…;w=…` items of draft-ietf-httpapi-ratelimit-headers' `RateLimit-Policy` and
/// `RateLimit` fields for the limits of `o` (`None` when no descriptor names a limit).
pub fn ratelimit_fields(o: &Outcome) -> Option<(String, String)> {
    let limits: Vec<&LimitView> = o
        .descriptors
        .iter()
        .filter_map(|d| d.limit.as_ref())
        .collect();
    if limits.is_empty() {
        return None;
    }
    let name = |id: &str| format!("\"{}\"", id.replace('\\', "\\\\").replace('"', "\\\""));
    let policy = limits
        .iter()
        .map(|l| {
            let window_s = if l.rate > 0.0 {
                (l.burst / l.rate).ceil().max(1.0)
            } else {
                1.0
            };
            format!(
                "{};q={};w={}",
                name(&l.id),
                l.burst.floor() as u64,
                window_s as u64
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let state = limits
        .iter()
        .map(|l| {
            format!(
                "{};r={};t={}",
                name(&l.id),
                l.remaining(),
                l.seconds_to_full().ceil() as u64
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    Some((policy, state))
}

/// The buckets `known` names, each once, in the order first named.
fn distinct_buckets<'a>(known: &[Option<Target<'a>>]) -> Vec<BucketRef<'a>> {
    let mut buckets: Vec<BucketRef<'a>> = Vec::with_capacity(known.len());
    for t in known.iter().flatten() {
        if !buckets.contains(&t.bucket()) {
            buckets.push(t.bucket());
        }
    }
    buckets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratelimit_fields_quote_names_and_describe_the_bucket() {
        let view = |id: &str, tokens| LimitView {
            id: id.to_owned(),
            rate: 5_600.0,
            burst: 11_200.0,
            tokens,
        };
        let o = Outcome {
            allowed: true,
            retry_after_s: None,
            descriptors: vec![
                DescriptorOutcome {
                    code: Code::Ok,
                    limit: Some(view("k-big", Some(11_199.5))),
                },
                DescriptorOutcome {
                    code: Code::Ok,
                    limit: None,
                },
                DescriptorOutcome {
                    code: Code::Ok,
                    limit: Some(view("a\"b", Some(-3.0))),
                },
            ],
        };
        let (policy, state) = ratelimit_fields(&o).unwrap_or_default();
        assert_eq!(policy, "\"k-big\";q=11200;w=2, \"a\\\"b\";q=11200;w=2");
        assert_eq!(state, "\"k-big\";r=11199;t=1, \"a\\\"b\";r=0;t=2");
    }
}
