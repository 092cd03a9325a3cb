//! The gateway's limiter: the rules it runs and their lease, `check`, the running demand totals,
//! the fence when the lease runs out, and the switch between Redis and the local fallback.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use crate::fallback::{FailurePolicy, Fallback, FallbackLimit, FallbackVerdict};
use crate::keys::KeyPlan;
use crate::lease::Lease;
use crate::rules::{valid_limit_id, LimitKind, LimitRule, RuleSet, MAX_LIMITS};
use crate::store::MAX_BUCKETS_PER_CALL;
use crate::store::{
    BucketCall, BucketVerdict, Debt, KeyScheme, RedisBuckets, RedisMode, StoreError,
};
use crate::templates::{base_id, check_value, instance_parts, ValueProblem};

/// The longest Redis bound accepted.
pub const MAX_REDIS_TIMEOUT: Duration = Duration::from_secs(10);

/// How a gateway's limiter is set up.
#[derive(Debug, Clone)]
pub struct LimiterConfig {
    /// `redis://host:port/` of the Region's Redis/Valkey (on a cluster: one seed node).
    pub redis_url: String,
    /// Standalone (default) or a cluster-mode-enabled cluster.
    pub redis_mode: RedisMode,
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
    /// Per limit id: its key group (hash tag), overriding `key_scheme` (see [`crate::keys`]).
    pub key_groups: BTreeMap<String, String>,
    /// The Retry-After given while fenced (the lease ran out); whole seconds, at least 1.
    pub fence_retry_after: Duration,
    /// What a limit does while Redis does not answer, by limit id; a limit not named here gets
    /// [`FailurePolicy::default_for`] its kind (local share for capacity, closed for security).
    pub failure: BTreeMap<String, FailurePolicy>,
    /// PEM certificates of the CAs that sign a `rediss://` server's certificate (`None`: the
    /// system's roots).
    pub redis_ca_pem: Option<Vec<u8>>,
}

impl LimiterConfig {
    /// Defaults: any Region, one gateway, cost 1, a 50 ms bound, a probe every second, per-limit keys,
    /// a Retry-After of 1 s while fenced.
    pub fn new(redis_url: impl Into<String>) -> Self {
        Self {
            redis_url: redis_url.into(),
            redis_mode: RedisMode::Standalone,
            region: None,
            gateways_per_region: 1,
            max_cost: 1,
            redis_timeout: Duration::from_millis(50),
            probe_after: Duration::from_secs(1),
            key_scheme: KeyScheme::PerLimit,
            key_groups: BTreeMap::new(),
            fence_retry_after: Duration::from_secs(1),
            failure: BTreeMap::new(),
            redis_ca_pem: None,
        }
    }

    /// The failure policy of limit `id` of kind `kind`.
    pub fn failure_policy(&self, id: &str, kind: LimitKind) -> FailurePolicy {
        self.failure
            .get(id)
            .copied()
            .unwrap_or(FailurePolicy::default_for(kind))
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
        if !(Duration::from_secs(1)..=Duration::from_secs(3_600)).contains(&self.fence_retry_after)
        {
            errors.push("fence_retry_after: 1 s to 1 h".to_owned());
        }
        if let KeyScheme::SharedTag(tag) = &self.key_scheme {
            if !valid_limit_id(tag) {
                errors.push(
                    "key_scheme: the shared tag must be printable ASCII without braces".into(),
                );
            }
        }
        errors.extend(self.key_plan().problems());
        errors
    }

    /// Where each limit's bucket lives (see [`crate::keys`]).
    pub fn key_plan(&self) -> KeyPlan {
        KeyPlan {
            scheme: self.key_scheme.clone(),
            groups: self.key_groups.clone(),
            mode: self.redis_mode,
        }
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
    /// Whether capacity limits are fenced now (the lease ran out).
    pub fenced: bool,
    /// Times fencing started.
    pub fences: u64,
    /// Calls refused because capacity limits were fenced.
    pub fenced_refusals: u64,
    /// What is left of the running rule set's lease (`None`: unbounded, or no rule set).
    pub lease_remaining: Option<Duration>,
}

/// A gateway's limiter. Cheap to share behind an `Arc`; every method takes `&self`.
pub struct Limiter {
    cfg: LimiterConfig,
    keys: KeyPlan,
    store: RedisBuckets,
    rules: RwLock<Option<Arc<RuleSet>>>,
    lease: Mutex<LeaseState>,
    /// Mirrors `LeaseState::fenced_since.is_some()`, so that checks need no lock to see it.
    fenced: AtomicBool,
    fences: AtomicU64,
    fenced_refusals: AtomicU64,
    fallback: Mutex<Fallback>,
    /// Per limit id: tokens the fallback admitted, charged to the Redis bucket before the next
    /// Redis decision, so that the fallback and Redis spend one budget.
    owed: Mutex<BTreeMap<String, u64>>,
    repaid: AtomicU64,
    down_until: Mutex<Option<Instant>>,
    demand: Mutex<BTreeMap<String, u64>>,
    /// Calls each shadow limit would have refused, since start (reported with the demand).
    would_refuse: Mutex<BTreeMap<String, u64>>,
    redis_decisions: AtomicU64,
    fallback_decisions: AtomicU64,
    redis_failures: AtomicU64,
    /// Checks a cluster could not take in one call (their limits in different key groups).
    cross_slot: AtomicU64,
    installed: AtomicU64,
    ignored: AtomicU64,
    warned_unbounded: AtomicBool,
}

/// The running rule set's lease and the fence it implies.
#[derive(Debug, Clone, Copy)]
struct LeaseState {
    lease: Lease,
    seq: Option<u64>,
    /// Since when capacity limits are fenced (`None`: not fenced).
    fenced_since: Option<tokio::time::Instant>,
}

impl Default for LeaseState {
    fn default() -> Self {
        LeaseState {
            lease: Lease::Unbounded,
            seq: None,
            fenced_since: None,
        }
    }
}

impl Limiter {
    /// Validates the configuration. Sends nothing: Redis may be down when a gateway starts.
    pub fn new(cfg: LimiterConfig) -> Result<Self, ConfigError> {
        let errors = cfg.validate();
        if !errors.is_empty() {
            return Err(ConfigError::Invalid(errors));
        }
        let store = RedisBuckets::with_mode(
            &cfg.redis_url,
            cfg.redis_mode,
            cfg.redis_timeout,
            cfg.redis_ca_pem.as_deref(),
        )?;
        Ok(Self {
            fallback: Mutex::new(Fallback::new(cfg.gateways_per_region)),
            owed: Mutex::new(BTreeMap::new()),
            repaid: AtomicU64::new(0),
            keys: cfg.key_plan(),
            cross_slot: AtomicU64::new(0),
            cfg,
            store,
            rules: RwLock::new(None),
            lease: Mutex::new(LeaseState::default()),
            fenced: AtomicBool::new(false),
            fences: AtomicU64::new(0),
            fenced_refusals: AtomicU64::new(0),
            down_until: Mutex::new(None),
            demand: Mutex::new(BTreeMap::new()),
            would_refuse: Mutex::new(BTreeMap::new()),
            redis_decisions: AtomicU64::new(0),
            fallback_decisions: AtomicU64::new(0),
            redis_failures: AtomicU64::new(0),
            installed: AtomicU64::new(0),
            ignored: AtomicU64::new(0),
            warned_unbounded: AtomicBool::new(false),
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

    /// Runs `set` if its version is greater than the one running; otherwise ignores it. A set
    /// installed this way has no lease (it is enforced until replaced), as from a daemon that
    /// predates leases; the watcher uses [`Limiter::install_leased`].
    pub fn install(&self, set: RuleSet) -> Install {
        self.install_leased(set, Lease::Unbounded, None)
    }

    /// Runs `set` under `lease` (renewal `seq`) if its version is greater than the one running.
    /// An equal version renews the running set's lease instead; an older one changes nothing.
    pub fn install_leased(&self, set: RuleSet, lease: Lease, seq: Option<u64>) -> Install {
        let mut slot = self.rules.write().unwrap_or_else(PoisonError::into_inner);
        let running = slot.as_ref().map_or(0, |r| r.version());
        if set.version() <= running {
            self.ignored.fetch_add(1, Ordering::Relaxed);
            if set.version() == running {
                self.set_lease(lease, seq, running);
            } else {
                tracing::warn!(
                    running,
                    offered = set.version(),
                    "ignored a rule set that is not newer"
                );
            }
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
        self.set_lease(lease, seq, version);
        Install::Installed { version }
    }

    /// Renews the lease of the running rule set if it is still version `version` (a 304 answer to
    /// a poll for what comes after it). Returns whether it did.
    pub fn renew(&self, version: u64, lease: Lease, seq: Option<u64>) -> bool {
        let renewed = self.version() == version && version > 0;
        if renewed {
            self.set_lease(lease, seq, version);
        }
        renewed
    }

    /// The running rule set's lease (unbounded before the first rule set).
    pub fn lease(&self) -> Lease {
        self.lease_state().lease
    }

    /// The renewal the running lease stands on, as the daemon numbered it.
    pub fn lease_seq(&self) -> Option<u64> {
        self.lease_state().seq
    }

    /// Whether capacity limits are fenced now. Notes (and logs, once) a change of state.
    pub fn is_fenced(&self) -> bool {
        let ran_out = self.lease().ran_out(crate::clock::now());
        self.note_fence(ran_out, self.version());
        ran_out
    }

    /// Completes when the running lease runs out (never while it is unbounded or already out),
    /// having noted the fence: the watcher awaits it so that the fence is logged when it starts,
    /// not at the next check.
    pub async fn lease_runs_out(&self) {
        match self.lease() {
            Lease::Until(t) if !self.fenced.load(Ordering::Acquire) => {
                tokio::time::sleep_until(t).await;
                self.is_fenced();
            }
            _ => std::future::pending().await,
        }
    }

    /// The rate the limiter enforces now for `limit` in requests/s: the rule's, or 0 for a
    /// capacity limit while fenced. `None` without that limit.
    pub fn enforced_rate(&self, limit: &str) -> Option<f64> {
        let rules = self.rules()?;
        let rule = rules.get(limit)?;
        let fenced = rule.kind == LimitKind::Capacity && self.is_fenced();
        Some(if fenced || rule.rejected.is_some() {
            0.0
        } else {
            rule.rate
        })
    }

    fn lease_state(&self) -> LeaseState {
        *self.lease.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set_lease(&self, lease: Lease, seq: Option<u64>, version: u64) {
        {
            let mut st = self.lease.lock().unwrap_or_else(PoisonError::into_inner);
            st.lease = lease;
            st.seq = seq.or(st.seq);
        }
        if lease == Lease::Unbounded && !self.warned_unbounded.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                version,
                "the daemon sent no lease with its rule set: it is enforced until replaced"
            );
        }
        self.note_fence(lease.ran_out(crate::clock::now()), version);
    }

    /// Records whether the fence is up; a change is counted and logged exactly once.
    fn note_fence(&self, fenced: bool, version: u64) {
        if self.fenced.load(Ordering::Acquire) == fenced {
            return;
        }
        let mut st = self.lease.lock().unwrap_or_else(PoisonError::into_inner);
        if st.fenced_since.is_some() == fenced {
            return; // another caller noted it first
        }
        let now = crate::clock::now();
        if fenced {
            st.fenced_since = Some(now);
            self.fences.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                version,
                "rule-set lease ran out: fencing capacity limits (every request refused with a \
                 Retry-After) until a rule set or a renewal with a lease arrives"
            );
        } else {
            let fenced_ms = st
                .fenced_since
                .take()
                .map_or(0, |s| now.saturating_duration_since(s).as_millis() as u64);
            tracing::info!(version, fenced_ms, "rule-set lease renewed: fencing ended");
        }
        self.fenced.store(fenced, Ordering::Release);
    }

    /// Cumulative cost received per limit since this limiter was made (allowed or refused).
    /// Calls each shadow limit would have refused had it been enforced, since this limiter's
    /// start (the gateway reports them with its demand; see [`crate::demand::DemandReport`]).
    pub fn would_refuse_totals(&self) -> BTreeMap<String, u64> {
        self.would_refuse
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn count_would_refuse(&self, d: &Decision) {
        let mut counts = None;
        for l in d
            .limits
            .iter()
            .filter(|l| l.shadow && l.verdict.refuses() && instance_parts(&l.id).is_none())
        {
            let m = counts.get_or_insert_with(|| {
                self.would_refuse
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
            });
            if let Some(t) = m.get_mut(&l.id) {
                *t = t.saturating_add(1);
            } else if m.len() < MAX_LIMITS {
                m.insert(l.id.clone(), 1);
            }
        }
    }

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
            fallback_owed: self
                .owed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .values()
                .sum(),
            fallback_repaid: self.repaid.load(Ordering::Relaxed),
            redis_failures: self.redis_failures.load(Ordering::Relaxed),
            cross_slot_checks: self.cross_slot.load(Ordering::Relaxed),
            fallback_values_refused: self
                .fallback
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .values_refused(),
            rule_sets_installed: self.installed.load(Ordering::Relaxed),
            rule_sets_ignored: self.ignored.load(Ordering::Relaxed),
            script_loads: self.store.script_loads(),
            fenced: self.is_fenced(),
            fences: self.fences.load(Ordering::Relaxed),
            fenced_refusals: self.fenced_refusals.load(Ordering::Relaxed),
            lease_remaining: self
                .rules()
                .and_then(|_| self.lease().remaining(crate::clock::now())),
        }
    }

    /// Checks one request that needs every limit in `limits`, charging `cost` tokens to each: all are
    /// spent or none. Shadow limits are evaluated (and spent when the request is admitted and they
    /// had the tokens) but never refuse. The received cost is added to each limit's demand total.
    /// While the rule set's lease has run out, a request that needs an enforced capacity limit is
    /// refused with a Retry-After and spends nothing; security limits are checked as always.
    pub async fn check(&self, limits: &[&str], cost: u32) -> Result<Decision, CheckError> {
        let buckets: Vec<BucketRef<'_>> = limits.iter().map(|l| BucketRef::limit(l)).collect();
        self.check_buckets(&buckets, cost).await
    }

    /// [`Limiter::check`] of listed limits and templates' per-value buckets alike: a value's
    /// bucket is decided in the same script call, fenced, held closed and failed over exactly as
    /// a listed limit of its template's kind. Its [`LimitDecision::id`] is the per-value id
    /// ([`crate::templates::instance_id`]). No per-value state is kept in this process beyond
    /// the bounded fallback ([`crate::templates::MAX_FALLBACK_VALUES`]); values count no demand
    /// (their split is static).
    pub async fn check_buckets(
        &self,
        buckets: &[BucketRef<'_>],
        cost: u32,
    ) -> Result<Decision, CheckError> {
        let d = self.decide(buckets, cost).await?;
        self.count_would_refuse(&d);
        Ok(d)
    }

    async fn decide(&self, buckets: &[BucketRef<'_>], cost: u32) -> Result<Decision, CheckError> {
        let set = self.rules().ok_or(CheckError::NoRules)?;
        let owned = self.resolve(&set, buckets, cost)?;
        let rules: Vec<&LimitRule> = owned.iter().map(AsRef::as_ref).collect();
        self.count_demand(&rules, cost);
        if rules.iter().any(|r| r.rejected.is_some() && !r.shadow) {
            return Ok(held_closed(&rules));
        }
        let fenced = self.is_fenced();
        let fenced_out = |r: &LimitRule| fenced && r.kind == LimitKind::Capacity;
        if rules.iter().any(|r| fenced_out(r) && !r.shadow) {
            self.fenced_refusals.fetch_add(1, Ordering::Relaxed);
            return Ok(fenced_refusal(&rules, self.cfg.fence_retry_after));
        }
        let live: Vec<&LimitRule> = rules
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
            return Ok(in_request_order(&rules, none));
        }
        let reason = if let Some(why) = self.cross_slot(&live) {
            why
        } else if self.redis_usable() {
            let answer = match self.repay(&set).await {
                Ok(()) => self.ask_redis(&live, cost).await,
                Err(e) => Err(e),
            };
            match answer {
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
        buckets: &[BucketRef<'_>],
        cost: u32,
    ) -> Result<Vec<Cow<'s, LimitRule>>, CheckError> {
        if cost == 0 || cost > self.cfg.max_cost {
            return Err(CheckError::Cost {
                cost,
                max: self.cfg.max_cost,
            });
        }
        if buckets.is_empty() || buckets.len() > MAX_BUCKETS_PER_CALL {
            return Err(CheckError::LimitCount(buckets.len()));
        }
        let mut rules: Vec<Cow<'s, LimitRule>> = Vec::with_capacity(buckets.len());
        for b in buckets {
            let rule = match b.value {
                None => Cow::Borrowed(
                    set.get(b.limit)
                        .ok_or_else(|| CheckError::UnknownLimit(b.limit.to_owned()))?,
                ),
                Some(value) => {
                    let t = set
                        .template(b.limit)
                        .ok_or_else(|| CheckError::UnknownTemplate(b.limit.to_owned()))?;
                    check_value(value).map_err(|problem| CheckError::BadValue {
                        template: b.limit.to_owned(),
                        problem,
                    })?;
                    Cow::Owned(t.instance(value))
                }
            };
            if rules.iter().any(|r| r.id == rule.id) {
                return Err(CheckError::Duplicate(rule.id.clone()));
            }
            rules.push(rule);
        }
        Ok(rules)
    }

    fn count_demand(&self, rules: &[&LimitRule], cost: u32) {
        let mut totals = self.demand.lock().unwrap_or_else(PoisonError::into_inner);
        // A value's bucket reports no demand: its split is static, and a total per value would
        // grow with the values seen.
        for r in rules.iter().filter(|r| instance_parts(&r.id).is_none()) {
            if let Some(t) = totals.get_mut(&r.id) {
                *t = t.saturating_add(u64::from(cost));
            } else if totals.len() < MAX_LIMITS {
                totals.insert(r.id.clone(), u64::from(cost));
            }
        }
    }

    /// Charges what the fallback admitted to the Redis buckets (see `repay.lua`) before Redis
    /// decides again. Debts of limits the running set no longer has are dropped (nothing enforces
    /// their buckets). What could not be charged stays owed, and the failure counts as Redis's.
    async fn repay(&self, set: &RuleSet) -> Result<(), StoreError> {
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
            // What the local buckets admitted is owed to the Redis buckets of the same limits.
            let mut owed = self.owed.lock().unwrap_or_else(PoisonError::into_inner);
            // A limit that fails open spent no local tokens: nothing is owed for it.
            for r in live
                .iter()
                .zip(&policies)
                .filter_map(|(r, p)| (*p == FailurePolicy::LocalShare && !r.shadow).then_some(r))
            {
                let t = owed.entry(r.id.clone()).or_default();
                *t = t.saturating_add(u64::from(cost));
            }
        }
        Decision {
            allowed,
            retry_after_s,
            path: DecisionPath::Fallback(reason),
            limits,
        }
    }

    /// On a cluster, why `live` cannot be one script call (two limits in different key groups),
    /// counted and logged; such a check is decided by the fallback and Redis is not marked down.
    fn cross_slot(&self, live: &[&LimitRule]) -> Option<String> {
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

    fn redis_usable(&self) -> bool {
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
            tracing::warn!(error = %e, "Redis failed: entering the local fallback");
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

fn limit_decision(r: &LimitRule, verdict: Verdict) -> LimitDecision {
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
fn in_request_order(rules: &[&LimitRule], mut d: Decision) -> Decision {
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
fn fenced_refusal(rules: &[&LimitRule], retry_after: Duration) -> Decision {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{LimitWire, RulesWire};
    use std::io::Write;
    use tokio::time::advance;

    /// Redis on a port where nothing listens: connections are refused at once.
    fn limiter() -> Limiter {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_or(1, |a| a.port());
        Limiter::new(LimiterConfig::new(format!("redis://127.0.0.1:{port}/")))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn set(version: u64) -> RuleSet {
        let l = |id: &str, kind, shadow| LimitWire {
            id: id.into(),
            rate: 100.0,
            burst: 200.0,
            shadow,
            kind,
        };
        let wire = RulesWire {
            version,
            region: "A".into(),
            limits: vec![
                l("cap", LimitKind::Capacity, false),
                l("sec", LimitKind::Security, false),
                l("shadow", LimitKind::Capacity, true),
            ],
            lease_ms: None,
            digest: None,
            base: None,
            templates: Vec::new(),
        };
        RuleSet::from_wire(wire, None, 1).unwrap_or_else(|e| panic!("{e}"))
    }

    fn for_ms(ms: u64) -> Lease {
        Lease::Until(crate::clock::now() + Duration::from_millis(ms))
    }

    async fn check(l: &Limiter, limits: &[&str]) -> Decision {
        l.check(limits, 1).await.unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_that_runs_out_fences_capacity_limits_until_a_renewal_or_a_new_set() {
        let l = limiter();
        assert_eq!(
            l.install_leased(set(1), for_ms(1_000), Some(7)),
            Install::Installed { version: 1 }
        );
        assert!(!l.is_fenced());
        assert_ne!(check(&l, &["cap"]).await.path, DecisionPath::Fenced);
        advance(Duration::from_millis(999)).await;
        assert!(!l.is_fenced());
        advance(Duration::from_millis(1)).await;
        assert!(l.is_fenced());

        // Every call that needs the capacity limit is refused with a Retry-After, spending nothing.
        let d = check(&l, &["cap"]).await;
        assert_eq!(
            (d.allowed, d.retry_after_s, &d.path),
            (false, Some(1), &DecisionPath::Fenced)
        );
        assert_eq!(d.limits[0].verdict, Verdict::Fenced);
        let both = check(&l, &["sec", "cap"]).await;
        assert_eq!((both.allowed, both.path), (false, DecisionPath::Fenced));
        // The security limit is checked as always (here Redis is away: it fails closed there,
        // not because of the fence); the shadow capacity limit never refuses.
        let sec = check(&l, &["sec"]).await;
        assert!(matches!(sec.path, DecisionPath::Fallback(_)), "{sec:?}");
        assert_eq!(sec.limits[0].verdict, Verdict::FailClosed);
        let shadow = check(&l, &["shadow"]).await;
        assert!(shadow.allowed);
        assert_eq!(shadow.limits[0].verdict, Verdict::Fenced);
        // What enforcing it would have done is counted for the demand report; nothing else is.
        assert_eq!(
            l.would_refuse_totals(),
            BTreeMap::from([("shadow".to_string(), 1)])
        );
        let stats = l.stats();
        assert_eq!(
            (stats.fenced, stats.fences, stats.fenced_refusals),
            (true, 1, 2)
        );
        assert_eq!(l.enforced_rate("cap"), Some(0.0));
        assert_eq!(l.enforced_rate("sec"), Some(100.0));

        // A renewal of the running version lifts it; one for another version does not.
        assert!(!l.renew(2, for_ms(1_000), Some(8)));
        assert!(l.is_fenced());
        assert!(l.renew(1, for_ms(1_000), Some(8)));
        assert!(!l.is_fenced());
        assert_eq!(l.lease_seq(), Some(8));
        assert_eq!(l.enforced_rate("cap"), Some(100.0));
        // It runs out again; then a newer rule set lifts it, and one with no lease left does not.
        advance(Duration::from_millis(1_000)).await;
        assert!(l.is_fenced());
        l.install_leased(set(2), for_ms(0), Some(9));
        assert!(l.is_fenced());
        l.install_leased(set(3), for_ms(500), Some(10));
        assert!(!l.is_fenced());
        assert_eq!(l.stats().lease_remaining, Some(Duration::from_millis(500)));
        assert_eq!(l.stats().fences, 2);
    }

    #[tokio::test]
    async fn each_limit_follows_its_failure_policy_while_redis_is_away() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_or(1, |a| a.port());
        let mut cfg = LimiterConfig::new(format!("redis://127.0.0.1:{port}/"));
        // Defaults by kind unless named: "cap" fails open, "sec" keeps a local share instead.
        cfg.failure.insert("cap".into(), FailurePolicy::FailOpen);
        cfg.failure.insert("sec".into(), FailurePolicy::LocalShare);
        let l = Limiter::new(cfg).unwrap_or_else(|e| panic!("{e}"));
        l.install(set(1));
        for _ in 0..1_000 {
            let d = check(&l, &["cap"]).await;
            assert!(d.allowed, "{d:?}");
            assert_eq!(d.limits[0].verdict, Verdict::FailOpen);
        }
        // The local bucket starts empty on entering fallback: the first call is short.
        let d = check(&l, &["sec", "cap"]).await;
        assert!(!d.allowed, "{d:?}");
        let verdicts: Vec<Verdict> = d.limits.iter().map(|x| x.verdict).collect();
        assert_eq!(verdicts, [Verdict::Short, Verdict::FailOpen]);
        assert!(d.retry_after_s.is_some());
        // What failed open is not owed to Redis (nothing local was spent for it).
        assert_eq!(l.stats().fallback_owed, 0);
        // Unnamed limits keep the defaults of their kind.
        let c = l.config();
        assert_eq!(
            c.failure_policy("other", LimitKind::Security),
            FailurePolicy::FailClosed
        );
        assert_eq!(
            c.failure_policy("other", LimitKind::Capacity),
            FailurePolicy::LocalShare
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_set_without_a_lease_is_enforced_until_replaced_as_before() {
        let l = limiter();
        l.install(set(2));
        advance(Duration::from_secs(86_400)).await;
        assert!(!l.is_fenced());
        assert_eq!(l.lease(), Lease::Unbounded);
        assert_eq!(l.stats().lease_remaining, None);
        // An equal version renews the lease (here to nothing left); an older one changes nothing,
        // its lease included.
        let equal = l.install_leased(set(2), for_ms(0), Some(2));
        assert_eq!(
            equal,
            Install::Ignored {
                running: 2,
                offered: 2
            }
        );
        assert!(l.is_fenced());
        let older = l.install_leased(set(1), for_ms(5_000), Some(3));
        assert_eq!(
            older,
            Install::Ignored {
                running: 2,
                offered: 1
            }
        );
        assert!(l.is_fenced());
        assert_eq!(l.lease_seq(), Some(2));
    }

    /// Log lines, written by a subscriber local to this thread.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn fencing_is_noted_when_the_lease_runs_out_and_logged_once_each_way() {
        let lines = Lines::default();
        let sink = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let l = limiter();
        l.install_leased(set(1), for_ms(2_000), None);
        let started = crate::clock::now();
        // The watcher awaits this: it completes at the expiry, with the fence already noted.
        l.lease_runs_out().await;
        assert_eq!(crate::clock::since(started), Duration::from_millis(2_000));
        assert!(l.stats().fenced);
        for _ in 0..5 {
            let _ = check(&l, &["cap"]).await;
            assert!(l.is_fenced());
        }
        // Already fenced: it waits for a change instead of completing again.
        let again = tokio::time::timeout(Duration::from_secs(60), l.lease_runs_out()).await;
        assert!(again.is_err());
        l.renew(1, for_ms(1_000), None);
        l.renew(1, for_ms(1_000), None);
        assert!(!l.is_fenced());
        let text = String::from_utf8_lossy(&lines.0.lock().unwrap_or_else(PoisonError::into_inner))
            .to_string();
        let count = |s: &str| text.lines().filter(|l| l.contains(s)).count();
        assert_eq!(count("lease ran out: fencing"), 1, "{text}");
        assert_eq!(count("fencing ended"), 1, "{text}");
    }
}
