//! One decision for either front end: descriptors mapped to limits, one limiter call (one script
//! call in Redis) for all of them, and what each descriptor gets back.

use std::sync::Arc;

use shareplane_limiter::{clock, CheckError, DecisionPath, Limiter};

use crate::mapping::UnmappedPolicy;
use crate::metrics::{Api, Metrics};
// The answer's types live in `outcome` (which the metrics read too, without a circle back here).
pub use crate::outcome::{
    Code, DecideError, DescriptorOutcome, LimitView, Outcome, MAX_DESCRIPTORS,
};

/// The gateway's shared state: the limiter, the unmapped policy, the metrics.
pub struct Decider {
    pub limiter: Arc<Limiter>,
    pub unmapped: UnmappedPolicy,
    pub metrics: Metrics,
}

impl Decider {
    /// Decides a request whose descriptors name `limits` (`None`: no limit), each charged `cost`.
    /// A limit id the running rule set does not have counts as no limit.
    pub async fn decide(
        &self,
        api: Api,
        limits: &[Option<&str>],
        cost: u32,
    ) -> Result<Outcome, DecideError> {
        let r = self.decide_inner(limits, cost).await;
        self.metrics.request(api, &r);
        r
    }

    async fn decide_inner(
        &self,
        limits: &[Option<&str>],
        cost: u32,
    ) -> Result<Outcome, DecideError> {
        if limits.len() > MAX_DESCRIPTORS {
            return Err(DecideError::TooMany(limits.len()));
        }
        let set = self.limiter.rules().ok_or(DecideError::NoRules)?;
        let known: Vec<Option<&str>> = limits
            .iter()
            .map(|l| l.filter(|id| set.get(id).is_some()))
            .collect();
        let unmapped = known.iter().filter(|l| l.is_none()).count();
        self.metrics.unmapped(self.unmapped, unmapped);
        if let Some(i) = known.iter().position(Option::is_none) {
            match self.unmapped {
                UnmappedPolicy::Error => return Err(DecideError::Unmapped(i)),
                // Refused before anything is spent.
                UnmappedPolicy::Deny => return Ok(self.refuse_all(&known, &set, None)),
                UnmappedPolicy::Allow => {}
            }
        }
        let mut ids: Vec<&str> = Vec::with_capacity(known.len());
        for id in known.iter().flatten() {
            if !ids.contains(id) {
                ids.push(id);
            }
        }
        if ids.is_empty() {
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
            return Ok(self.refuse_all(&known, &set, None));
        }
        let started = clock::std_now();
        let decision = match self.limiter.check(&ids, cost.max(1)).await {
            Ok(d) => d,
            Err(CheckError::NoRules) => return Err(DecideError::NoRules),
            Err(e) => return Err(DecideError::Limiter(e.to_string())),
        };
        if decision.path == DecisionPath::Redis {
            self.metrics.redis_latency(clock::std_since(started));
        }
        let mut descriptors = Vec::with_capacity(known.len());
        for l in &known {
            let Some(id) = l else {
                descriptors.push(unmapped_outcome(Code::Ok));
                continue;
            };
            let Some(d) = decision.limits.iter().find(|d| d.id == *id) else {
                return Err(DecideError::Limiter(format!("no verdict for limit {id:?}")));
            };
            let refuses = d.verdict.refuses();
            if d.shadow && refuses {
                self.metrics.shadow_would_refuse(id);
            }
            let code = if refuses && !d.shadow {
                Code::OverLimit
            } else {
                Code::Ok
            };
            self.metrics.decision(id, code);
            let rule = set.get(id);
            descriptors.push(DescriptorOutcome {
                code,
                limit: Some(LimitView {
                    id: (*id).to_owned(),
                    rate: rule.map_or(0.0, |r| r.rate),
                    burst: rule.map_or(0.0, |r| r.burst),
                    tokens: d.tokens,
                }),
            });
        }
        Ok(Outcome {
            allowed: decision.allowed,
            retry_after_s: decision.retry_after_s.filter(|_| !decision.allowed),
            descriptors,
        })
    }

    /// Every mapped descriptor OVER_LIMIT, nothing spent.
    fn refuse_all(
        &self,
        known: &[Option<&str>],
        set: &shareplane_limiter::RuleSet,
        retry_after_s: Option<u64>,
    ) -> Outcome {
        let descriptors = known
            .iter()
            .map(|l| match l.and_then(|id| set.get(id)) {
                None => unmapped_outcome(match self.unmapped {
                    UnmappedPolicy::Allow => Code::Ok,
                    _ => Code::OverLimit,
                }),
                Some(r) => {
                    self.metrics.decision(&r.id, Code::OverLimit);
                    DescriptorOutcome {
                        code: Code::OverLimit,
                        limit: Some(LimitView {
                            id: r.id.clone(),
                            rate: r.rate,
                            burst: r.burst,
                            tokens: None,
                        }),
                    }
                }
            })
            .collect();
        Outcome {
            allowed: false,
            retry_after_s,
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
