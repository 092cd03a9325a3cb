//! The gateway's limiter: the rules it runs, `check`, the running demand totals, and the switch
//! between Redis and the local fallback.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use crate::fallback::{Fallback, FallbackLimit, FallbackVerdict};
use crate::rules::{valid_limit_id, LimitKind, LimitRule, RuleSet, MAX_LIMITS};
use crate::store::MAX_BUCKETS_PER_CALL;
use crate::store::{BucketCall, BucketVerdict, KeyScheme, RedisBuckets, StoreError};

/// The longest Redis bound accepted.
pub const MAX_REDIS_TIMEOUT: Duration = Duration::from_secs(10);

/// How a gateway's limiter is set up.
#[derive(Debug, Clone)]
pub struct LimiterConfig {
    /// `redis://host:port/` of the Region's Redis/Valkey.
    pub redis_url: String,
    /// The Region this gateway runs in; rule sets for another Region are refused. `None` accepts any.
    pub region: Option<String>,
    /// How many gateways share the Region's share when Redis is away (see [`crate::fallback`]).
    pub gateways_per_region: u32,
    /// The largest cost one call may charge; rules whose burst is below it are held closed.
    pub max_cost: u32,
    /// The bound on one Redis call, connection set-up included.
    pub redis_timeout: Duration,
    /// After Redis fails, calls go straight to the fallback for this long before Redis is tried again.
    pub probe_after: Duration,
    pub key_scheme: KeyScheme,
}

impl LimiterConfig {
    /// Defaults: any Region, one gateway, cost 1, a 50 ms bound, a probe every second, per-limit keys.
    pub fn new(redis_url: impl Into<String>) -> Self {
        Self {
            redis_url: redis_url.into(),
            region: None,
            gateways_per_region: 1,
            max_cost: 1,
            redis_timeout: Duration::from_millis(50),
            probe_after: Duration::from_secs(1),
            key_scheme: KeyScheme::PerLimit,
        }
    }

    /// Every problem with the configuration, with its field.
    pub fn validate(&self) -> Vec<String> {
        let mut errors = Vec::new();
        if self.gateways_per_region == 0 {
            errors.push("gateways_per_region: must be at least 1".to_owned());
        }
        if self.max_cost == 0 {
            errors.push("max_cost: must be at least 1".to_owned());
        }
        if self.redis_timeout.is_zero() || self.redis_timeout > MAX_REDIS_TIMEOUT {
            errors.push(format!(
                "redis_timeout: must be in (0, {MAX_REDIS_TIMEOUT:?}]"
            ));
        }
        if self.probe_after > Duration::from_secs(60) {
            errors.push("probe_after: at most 60 s".to_owned());
        }
        if let KeyScheme::SharedTag(tag) = &self.key_scheme {
            if !valid_limit_id(tag) {
                errors.push(
                    "key_scheme: the shared tag must be printable ASCII without braces".into(),
                );
            }
        }
        errors
    }
}

/// The configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid limiter configuration: {}", .0.join("; "))]
    Invalid(Vec<String>),
    #[error("invalid Redis URL: {0}")]
    Redis(#[from] StoreError),
}

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
    /// Redis did not answer and this is a security limit (no Retry-After).
    FailClosed,
    /// Not evaluated (a shadow limit under fallback, or a call refused before evaluation).
    NotChecked,
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
    /// Its version is not greater than the one running: ignored.
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
    pub redis_failures: u64,
    pub rule_sets_installed: u64,
    pub rule_sets_ignored: u64,
    pub script_loads: u64,
}

/// A gateway's limiter. Cheap to share behind an `Arc`; every method takes `&self`.
pub struct Limiter {
    cfg: LimiterConfig,
    store: RedisBuckets,
    rules: RwLock<Option<Arc<RuleSet>>>,
    fallback: Mutex<Fallback>,
    down_until: Mutex<Option<Instant>>,
    demand: Mutex<BTreeMap<String, u64>>,
    redis_decisions: AtomicU64,
    fallback_decisions: AtomicU64,
    redis_failures: AtomicU64,
    installed: AtomicU64,
    ignored: AtomicU64,
}

impl Limiter {
    /// Validates the configuration. Sends nothing: Redis may be down when a gateway starts.
    pub fn new(cfg: LimiterConfig) -> Result<Self, ConfigError> {
        let errors = cfg.validate();
        if !errors.is_empty() {
            return Err(ConfigError::Invalid(errors));
        }
        let store = RedisBuckets::new(&cfg.redis_url, cfg.redis_timeout)?;
        Ok(Self {
            fallback: Mutex::new(Fallback::new(cfg.gateways_per_region)),
            cfg,
            store,
            rules: RwLock::new(None),
            down_until: Mutex::new(None),
            demand: Mutex::new(BTreeMap::new()),
            redis_decisions: AtomicU64::new(0),
            fallback_decisions: AtomicU64::new(0),
            redis_failures: AtomicU64::new(0),
            installed: AtomicU64::new(0),
            ignored: AtomicU64::new(0),
        })
    }

    pub fn config(&self) -> &LimiterConfig {
        &self.cfg
    }

    /// The rule set running now.
    pub fn rules(&self) -> Option<Arc<RuleSet>> {
        self.rules
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The version running now (0 before the first rule set).
    pub fn version(&self) -> u64 {
        self.rules().map_or(0, |r| r.version())
    }

    /// Runs `set` if its version is greater than the one running; otherwise ignores it.
    pub fn install(&self, set: RuleSet) -> Install {
        let mut slot = self.rules.write().unwrap_or_else(PoisonError::into_inner);
        let running = slot.as_ref().map_or(0, |r| r.version());
        if set.version() <= running {
            self.ignored.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                running,
                offered = set.version(),
                "ignored a rule set that is not newer"
            );
            return Install::Ignored {
                running,
                offered: set.version(),
            };
        }
        for (id, reason) in set.rejected() {
            tracing::error!(
                limit = id,
                reason,
                version = set.version(),
                "limit held closed"
            );
        }
        let version = set.version();
        *slot = Some(Arc::new(set));
        self.installed.fetch_add(1, Ordering::Relaxed);
        tracing::info!(version, "rule set installed");
        Install::Installed { version }
    }

    /// Cumulative cost received per limit since this limiter was made (allowed or refused).
    pub fn demand_totals(&self) -> BTreeMap<String, u64> {
        self.demand
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn stats(&self) -> LimiterStats {
        LimiterStats {
            redis_decisions: self.redis_decisions.load(Ordering::Relaxed),
            fallback_decisions: self.fallback_decisions.load(Ordering::Relaxed),
            redis_failures: self.redis_failures.load(Ordering::Relaxed),
            rule_sets_installed: self.installed.load(Ordering::Relaxed),
            rule_sets_ignored: self.ignored.load(Ordering::Relaxed),
            script_loads: self.store.script_loads(),
        }
    }

    /// Checks one request that needs every limit in `limits`, charging `cost` tokens to each: all are
    /// spent or none. Shadow limits are evaluated (and spent when the request is admitted and they
    /// had the tokens) but never refuse. The received cost is added to each limit's demand total.
    pub async fn check(&self, limits: &[&str], cost: u32) -> Result<Decision, CheckError> {
        let set = self.rules().ok_or(CheckError::NoRules)?;
        let rules = self.resolve(&set, limits, cost)?;
        self.count_demand(&rules, cost);
        if rules.iter().any(|r| r.rejected.is_some() && !r.shadow) {
            return Ok(held_closed(&rules));
        }
        let live: Vec<&LimitRule> = rules
            .iter()
            .copied()
            .filter(|r| r.rejected.is_none())
            .collect();
        if live.is_empty() {
            return Ok(Decision {
                allowed: true,
                ..held_closed(&rules)
            });
        }
        let reason = if self.redis_usable() {
            match self.ask_redis(&live, cost).await {
                Ok(d) => return Ok(in_request_order(&rules, d)),
                Err(e) => e.to_string(),
            }
        } else {
            "Redis failed recently; next probe pending".to_owned()
        };
        Ok(in_request_order(
            &rules,
            self.ask_fallback(&live, cost, reason),
        ))
    }

    fn resolve<'s>(
        &self,
        set: &'s RuleSet,
        limits: &[&str],
        cost: u32,
    ) -> Result<Vec<&'s LimitRule>, CheckError> {
        if cost == 0 || cost > self.cfg.max_cost {
            return Err(CheckError::Cost {
                cost,
                max: self.cfg.max_cost,
            });
        }
        if limits.is_empty() || limits.len() > MAX_BUCKETS_PER_CALL {
            return Err(CheckError::LimitCount(limits.len()));
        }
        let mut rules: Vec<&LimitRule> = Vec::with_capacity(limits.len());
        for id in limits {
            if rules.iter().any(|r| r.id == *id) {
                return Err(CheckError::Duplicate((*id).to_owned()));
            }
            rules.push(
                set.get(id)
                    .ok_or_else(|| CheckError::UnknownLimit((*id).to_owned()))?,
            );
        }
        Ok(rules)
    }

    fn count_demand(&self, rules: &[&LimitRule], cost: u32) {
        let mut totals = self.demand.lock().unwrap_or_else(PoisonError::into_inner);
        for r in rules {
            if let Some(t) = totals.get_mut(&r.id) {
                *t = t.saturating_add(u64::from(cost));
            } else if totals.len() < MAX_LIMITS {
                totals.insert(r.id.clone(), u64::from(cost));
            }
        }
    }

    async fn ask_redis(&self, live: &[&LimitRule], cost: u32) -> Result<Decision, StoreError> {
        let calls: Vec<BucketCall> = live
            .iter()
            .map(|r| BucketCall {
                key: self.cfg.key_scheme.key(&r.id),
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

    fn ask_fallback(&self, live: &[&LimitRule], cost: u32, reason: String) -> Decision {
        self.fallback_decisions.fetch_add(1, Ordering::Relaxed);
        let asks: Vec<FallbackLimit<'_>> = live
            .iter()
            .map(|r| FallbackLimit {
                id: &r.id,
                rate: r.rate,
                burst: r.burst,
                security: r.kind == LimitKind::Security,
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
        for (r, v) in live.iter().zip(verdicts) {
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

    fn redis_usable(&self) -> bool {
        let down = self
            .down_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        down.is_none_or(|until| Instant::now() >= until)
    }

    fn redis_down(&self, e: &StoreError) {
        self.redis_failures.fetch_add(1, Ordering::Relaxed);
        let mut down = self
            .down_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if down.is_none() {
            tracing::warn!(error = %e, "Redis failed: entering the local fallback");
            self.fallback
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .enter();
        }
        *down = Some(Instant::now() + self.cfg.probe_after);
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

fn limit_decision(r: &LimitRule, verdict: Verdict) -> LimitDecision {
    LimitDecision {
        id: r.id.clone(),
        kind: r.kind,
        shadow: r.shadow,
        verdict,
        tokens: None,
    }
}

/// Lists every requested limit in request order, adding the held-closed shadow limits that were not
/// evaluated.
fn in_request_order(rules: &[&LimitRule], mut d: Decision) -> Decision {
    if d.limits.len() == rules.len() {
        return d;
    }
    let mut evaluated = std::mem::take(&mut d.limits).into_iter().peekable();
    for r in rules {
        match evaluated.next_if(|l| l.id == r.id) {
            Some(l) => d.limits.push(l),
            None => d.limits.push(limit_decision(r, Verdict::HeldClosed)),
        }
    }
    d
}

fn held_closed(rules: &[&LimitRule]) -> Decision {
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
