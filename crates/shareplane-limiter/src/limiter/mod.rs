//! The gateway's limiter: a thin driver around `state::LimiterState`, the sans-IO state
//! machine that decides (the rules it runs and their lease, the fence, demand totals, the switch
//! between Redis and the local fallback). The driver reads the clock, calls Redis, logs what the
//! state returns, and holds the state's one lock for short sections that never span an `.await`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::keys::KeyPlan;
use crate::rules::{LimitRule, RuleSet};
use crate::store::{RedisBuckets, MAX_BUCKETS_PER_CALL};
use crate::templates::check_value;

mod config;
mod decision;
mod failover;
mod fence;
mod state;

pub use config::{ConfigError, LimiterConfig, MAX_REDIS_TIMEOUT};
use decision::in_request_order;
pub use decision::{
    BucketRef, CheckError, Decision, DecisionPath, Install, LimitDecision, LimiterStats, Verdict,
};
use state::{Begin, LimiterState, Route};

/// Why a check went to the fallback without asking Redis.
const PENDING: &str = "Redis failed recently; next probe pending";

/// A gateway's limiter. Cheap to share behind an `Arc`; every method takes `&self`.
///
/// One lock, over all the state that decides, the rule set included: no lock-free read of its
/// own, because it did not pay. A check takes the lock for a few short sections (a clone of the
/// rule set's `Arc`; demand, fence and route; the fallback or the note that Redis answered),
/// never across an `.await`, and the seven locks this replaced were taken as often:
/// `examples/bench_check_local.rs` (the check without Redis) measured the same or slightly less
/// time per check with it, and `examples/bench_check.rs` no difference behind Redis's round trip.
pub struct Limiter {
    cfg: LimiterConfig,
    keys: KeyPlan,
    store: RedisBuckets,
    state: Mutex<LimiterState>,
    counts: IoCounts,
}

/// What the driver counts outside the state: the outcomes of calls it makes itself.
#[derive(Debug, Default)]
struct IoCounts {
    /// Checks a cluster could not take in one call (their limits in different key groups).
    cross_slot: AtomicU64,
    /// Tokens the fallback admitted and then charged to the Redis buckets.
    repaid: AtomicU64,
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
        let state = LimiterState::new(cfg.gateways_per_region, crate::clock::now());
        Ok(Self {
            keys: cfg.key_plan(),
            cfg,
            store,
            state: Mutex::new(state),
            counts: IoCounts::default(),
        })
    }

    pub fn config(&self) -> &LimiterConfig {
        &self.cfg
    }

    /// The rule set running now.
    pub fn rules(&self) -> Option<Arc<RuleSet>> {
        self.state().rules()
    }

    /// The version running now (0 before the first rule set).
    pub fn version(&self) -> u64 {
        self.state().version()
    }

    /// Calls each shadow limit would have refused had it been enforced, since this limiter's
    /// start (the gateway reports them with its demand; see [`crate::demand::DemandReport`]).
    pub fn would_refuse_totals(&self) -> BTreeMap<String, u64> {
        self.state().would_refuse_totals().clone()
    }

    /// Cumulative cost received per limit since this limiter was made (allowed or refused).
    pub fn demand_totals(&self) -> BTreeMap<String, u64> {
        self.state().demand_totals().clone()
    }

    pub fn stats(&self) -> LimiterStats {
        let snap = self.state().snapshot(crate::clock::now());
        self.log_fence(snap.fence);
        let c = snap.counts;
        LimiterStats {
            redis_decisions: c.redis_decisions,
            fallback_decisions: c.fallback_decisions,
            fallback_owed: snap.fallback_owed,
            fallback_repaid: self.counts.repaid.load(Ordering::Relaxed),
            redis_failures: c.redis_failures,
            cross_slot_checks: self.counts.cross_slot.load(Ordering::Relaxed),
            fallback_values_refused: snap.fallback_values_refused,
            rule_sets_installed: c.installed,
            rule_sets_ignored: c.ignored,
            script_loads: self.store.script_loads(),
            redis_calls: self.store.script_calls().0,
            fenced: snap.fenced,
            fences: c.fences,
            fenced_refusals: c.fenced_refusals,
            lease_remaining: snap.lease_remaining,
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
    /// of their own (a value in a coordination slot counts as its slot's, [`crate::slots`]).
    pub async fn check_buckets(
        &self,
        buckets: &[BucketRef<'_>],
        cost: u32,
    ) -> Result<Decision, CheckError> {
        let d = self.decide(buckets, cost).await?;
        // The lock is taken only when a shadow limit would have refused.
        if state::would_refuse(&d).next().is_some() {
            self.state().count_would_refuse(state::would_refuse(&d));
        }
        Ok(d)
    }

    /// The state, for one short section (never held across an `.await`). A panic while it was
    /// held leaves it as the panicking call left it; every change in it is a whole step.
    fn state(&self) -> MutexGuard<'_, LimiterState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One check: the clock is read once before the state's steps, and again only after a
    /// Redis call, for what follows it.
    async fn decide(&self, buckets: &[BucketRef<'_>], cost: u32) -> Result<Decision, CheckError> {
        let set = self.rules().ok_or(CheckError::NoRules)?;
        let owned = self.resolve(&set, buckets, cost)?;
        let rules: Vec<&LimitRule> = owned.iter().map(AsRef::as_ref).collect();
        let retry = self.cfg.fence_retry_after;
        let mut now = crate::clock::now();
        let (begin, fence) = self.state().begin(now, &rules, cost, retry);
        self.log_fence(fence);
        let live = match begin {
            Begin::Decided(d) => return Ok(d),
            Begin::Live(live) => live,
        };
        let reason = if let Some(why) = self.cross_slot(&live) {
            why
        } else {
            let route = self.state().route(now);
            let Route::Redis { owed } = route else {
                return Ok(self.ask_fallback(now, &rules, &live, cost, PENDING.to_owned()));
            };
            match self.via_redis(&set, owed, &live, cost).await {
                Ok(d) => return Ok(in_request_order(&rules, d)),
                Err(e) => {
                    now = crate::clock::now();
                    e.to_string()
                }
            }
        };
        Ok(self.ask_fallback(now, &rules, &live, cost, reason))
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
                    Cow::Owned(set.instance(t, value))
                }
            };
            if rules.iter().any(|r| r.id == rule.id) {
                return Err(CheckError::Duplicate(rule.id.clone()));
            }
            rules.push(rule);
        }
        Ok(rules)
    }
}

/// The rule set of the limiter's and its state's unit tests at `version`: a capacity, a security
/// and a shadow limit, each 100/s with a burst of 200.
#[cfg(test)]
fn three_limits(version: u64) -> RuleSet {
    use crate::rules::{LimitKind, LimitWire, RulesWire};
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fallback::FailurePolicy;
    use crate::lease::Lease;
    use crate::rules::LimitKind;
    use std::io::Write;
    use std::time::Duration;
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
        three_limits(version)
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
