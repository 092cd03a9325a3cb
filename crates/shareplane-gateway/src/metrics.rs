//! The gateway's metrics, each defined here once, rendered in Prometheus text format.
//!
//! Label values are limit ids of the running rule set (at most `MAX_LIMITS` of them), never
//! anything a caller sends, so the series stay bounded.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use shareplane_limiter::Limiter;

use crate::health::Health;
use crate::mapping::{UnmappedPolicy, ValuePolicy};
use crate::outcome::{Code, DecideError, Outcome};
use shareplane_limiter::templates::ValueProblem;

/// Which front end a request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Api {
    Grpc,
    Http,
}

impl Api {
    fn as_str(self) -> &'static str {
        match self {
            Self::Grpc => "grpc",
            Self::Http => "http",
        }
    }
}

/// Upper bounds (seconds) of the Redis latency histogram.
const LATENCY_BOUNDS_S: [f64; 12] = [
    0.000_25, 0.000_5, 0.001, 0.002, 0.003, 0.005, 0.010, 0.025, 0.050, 0.100, 0.250, 1.0,
];

#[derive(Default)]
pub struct Metrics {
    decisions: Mutex<BTreeMap<(String, &'static str), u64>>,
    shadow_refusals: Mutex<BTreeMap<String, u64>>,
    requests: Mutex<BTreeMap<(Api, &'static str), u64>>,
    unmapped: [AtomicU64; 3],
    /// Descriptors naming a template without a usable value, by [problem][policy].
    template_values: [[AtomicU64; 2]; 2],
    cost_above_max: AtomicU64,
    /// Configuration reloads by outcome: applied, unchanged, refused.
    reloads: [AtomicU64; 3],
    latency_buckets: [AtomicU64; LATENCY_BOUNDS_S.len()],
    latency_count: AtomicU64,
    latency_sum_ns: AtomicU64,
}

impl Metrics {
    pub fn decision(&self, limit: &str, code: Code) {
        let mut m = self
            .decisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = m.get_mut(&(limit.to_owned(), code.as_str())) {
            *n += 1;
        } else {
            m.insert((limit.to_owned(), code.as_str()), 1);
        }
    }

    pub fn shadow_would_refuse(&self, limit: &str) {
        let mut m = self
            .shadow_refusals
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *m.entry(limit.to_owned()).or_default() += 1;
    }

    pub fn unmapped(&self, policy: UnmappedPolicy, n: usize) {
        if n > 0 {
            self.unmapped[policy as usize].fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    pub fn template_value(&self, problem: ValueProblem, policy: ValuePolicy) {
        self.template_values[problem as usize][policy as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn config_reload(&self, outcome: &crate::reload::Outcome) {
        let i = match outcome {
            crate::reload::Outcome::Applied => 0,
            crate::reload::Outcome::Unchanged => 1,
            crate::reload::Outcome::Refused(_) => 2,
        };
        self.reloads[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn cost_above_max(&self) {
        self.cost_above_max.fetch_add(1, Ordering::Relaxed);
    }

    pub fn redis_latency(&self, d: Duration) {
        let s = d.as_secs_f64();
        if let Some(i) = LATENCY_BOUNDS_S.iter().position(|b| s <= *b) {
            self.latency_buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_ns.fetch_add(
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    pub fn request(&self, api: Api, r: &Result<Outcome, DecideError>) {
        let result = match r {
            Ok(o) if o.allowed => "ok",
            Ok(_) => "over_limit",
            Err(e) if e.is_callers() => "bad_request",
            Err(_) => "unavailable",
        };
        let mut m = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        *m.entry((api, result)).or_default() += 1;
    }

    /// Everything, with the limiter's own counters and gauges and the gateway's health.
    pub fn render(&self, limiter: &Limiter, health: &Health) -> String {
        let mut out = String::new();
        let st = limiter.stats();
        self.render_requests(&mut out);
        self.render_refusals(&mut out);
        self.render_templates(&mut out, &st);
        self.render_cost_and_latency(&mut out);
        render_limiter(&mut out, limiter, &st);
        render_health(&mut out, limiter, health);
        out
    }
}

impl Metrics {
    /// Requests by front end and result, and descriptor decisions by limit and code.
    fn render_requests(&self, out: &mut String) {
        head(
            out,
            "shareplane_gateway_requests_total",
            "counter",
            "Requests by front end and result.",
        );
        for ((api, result), n) in self
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let _ = writeln!(
                out,
                "shareplane_gateway_requests_total{{api=\"{}\",result=\"{result}\"}} {n}",
                api.as_str()
            );
        }
        head(
            out,
            "shareplane_gateway_decisions_total",
            "counter",
            "Descriptor decisions by limit and code.",
        );
        for ((limit, code), n) in self
            .decisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let _ = writeln!(
                out,
                "shareplane_gateway_decisions_total{{limit=\"{}\",code=\"{code}\"}} {n}",
                escape(limit)
            );
        }
    }

    /// What shadow limits would have refused, and the descriptors that named no limit.
    fn render_refusals(&self, out: &mut String) {
        head(
            out,
            "shareplane_gateway_shadow_would_refuse_total",
            "counter",
            "Calls a shadow limit would have refused.",
        );
        for (limit, n) in self
            .shadow_refusals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let _ = writeln!(
                out,
                "shareplane_gateway_shadow_would_refuse_total{{limit=\"{}\"}} {n}",
                escape(limit)
            );
        }
        head(
            out,
            "shareplane_gateway_unmapped_descriptors_total",
            "counter",
            "Descriptors that named no limit of the running rule set, by the policy applied.",
        );
        for p in [
            UnmappedPolicy::Allow,
            UnmappedPolicy::Deny,
            UnmappedPolicy::Error,
        ] {
            let n = self.unmapped[p as usize].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "shareplane_gateway_unmapped_descriptors_total{{policy=\"{}\"}} {n}",
                p.as_str()
            );
        }
    }

    /// Requests refused for their cost, and the latency of Redis's decisions.
    fn render_cost_and_latency(&self, out: &mut String) {
        let cost = self.cost_above_max.load(Ordering::Relaxed);
        gauge(
            out,
            "shareplane_gateway_cost_above_max_total",
            "counter",
            "Requests refused because their cost exceeds max_cost.",
            cost as f64,
        );
        head(
            out,
            "shareplane_gateway_redis_seconds",
            "histogram",
            "Latency of checks that Redis decided (repayment included).",
        );
        let mut cumulative = 0;
        for (b, n) in LATENCY_BOUNDS_S.iter().zip(&self.latency_buckets) {
            cumulative += n.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "shareplane_gateway_redis_seconds_bucket{{le=\"{b}\"}} {cumulative}"
            );
        }
        let count = self.latency_count.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "shareplane_gateway_redis_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let sum = self.latency_sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "shareplane_gateway_redis_seconds_sum {sum}");
        let _ = writeln!(out, "shareplane_gateway_redis_seconds_count {count}");
    }

    fn render_templates(&self, out: &mut String, st: &shareplane_limiter::LimiterStats) {
        head(
            out,
            "shareplane_gateway_template_values_refused_total",
            "counter",
            "Descriptors that named a template without a usable value (missing or empty, or longer than 256 bytes), by the policy applied.",
        );
        for (problem, p) in [
            (ValueProblem::Missing, "missing"),
            (ValueProblem::TooLong, "too_long"),
        ] {
            for policy in [ValuePolicy::Deny, ValuePolicy::Error] {
                let n =
                    self.template_values[problem as usize][policy as usize].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "shareplane_gateway_template_values_refused_total{{reason=\"{p}\",policy=\"{}\"}} {n}",
                    policy.as_str()
                );
            }
        }
        head(
            out,
            "shareplane_gateway_config_reloads_total",
            "counter",
            "Configuration reloads (SIGHUP) by result: applied, unchanged or refused (the running configuration stays).",
        );
        for (i, result) in ["applied", "unchanged", "refused"].iter().enumerate() {
            let n = self.reloads[i].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "shareplane_gateway_config_reloads_total{{result=\"{result}\"}} {n}"
            );
        }
        gauge(
            out,
            "shareplane_gateway_fallback_values_refused_total",
            "counter",
            "Calls for a template's value refused by the local fallback because it held the most per-value buckets it keeps (65,536).",
            st.fallback_values_refused as f64,
        );
    }
}

/// The limiter's gauges and counters: the fallback, Redis, the rule set and its lease, the fence.
fn render_limiter(out: &mut String, limiter: &Limiter, st: &shareplane_limiter::LimiterStats) {
    render_redis(out, limiter, st);
    gauge(
        out,
        "shareplane_gateway_rules_version",
        "gauge",
        "Version of the running rule set (0: none yet).",
        limiter.version() as f64,
    );
    let lease = st.lease_remaining.map_or(-1.0, |d| d.as_secs_f64());
    gauge(
        out,
        "shareplane_gateway_lease_remaining_seconds",
        "gauge",
        "What is left of the rule set's lease (-1: unbounded or no rule set).",
        lease,
    );
    gauge(
        out,
        "shareplane_gateway_fenced",
        "gauge",
        "1 while the lease has run out and capacity limits refuse.",
        f64::from(u8::from(st.fenced)),
    );
    gauge(
        out,
        "shareplane_gateway_fenced_refusals_total",
        "counter",
        "Calls refused because capacity limits were fenced.",
        st.fenced_refusals as f64,
    );
}

/// Who decided: Redis's script (and how many calls it took) or the failure policies.
fn render_redis(out: &mut String, limiter: &Limiter, st: &shareplane_limiter::LimiterStats) {
    gauge(
        out,
        "shareplane_gateway_fallback_in_use",
        "gauge",
        "1 while Redis fails and limits follow their failure policy.",
        f64::from(u8::from(limiter.in_fallback())),
    );
    gauge(
        out,
        "shareplane_gateway_fallback_decisions_total",
        "counter",
        "Decisions made by the failure policies.",
        st.fallback_decisions as f64,
    );
    gauge(
        out,
        "shareplane_gateway_redis_decisions_total",
        "counter",
        "Decisions made by the script in Redis.",
        st.redis_decisions as f64,
    );
    gauge(
        out,
        "shareplane_gateway_redis_calls_total",
        "counter",
        "Bucket-script calls sent to Redis (checks that arrive together share one: fewer calls than decisions under load).",
        st.redis_calls as f64,
    );
    gauge(
        out,
        "shareplane_gateway_redis_failures_total",
        "counter",
        "Redis calls that failed or timed out.",
        st.redis_failures as f64,
    );
    gauge(
        out,
        "shareplane_gateway_cross_slot_checks_total",
        "counter",
        "Checks decided by the failure policies because, on a Redis cluster, their limits are in different key groups.",
        st.cross_slot_checks as f64,
    );
}

/// The states `/readyz` reports, as gauges (alarms are built on these names: keep them).
fn render_health(out: &mut String, limiter: &Limiter, health: &Health) {
    gauge(
        out,
        "shareplane_gateway_rules_loaded",
        "gauge",
        "1 once a rule set is loaded (0: this gateway does not limit; see /readyz).",
        f64::from(u8::from(limiter.rules().is_some())),
    );
    gauge(
        out,
        "shareplane_gateway_rules_overdue",
        "gauge",
        "1 while no rule set is loaded past rules_timeout_ms after the start.",
        f64::from(u8::from(health.rules_overdue(limiter))),
    );
    gauge(
        out,
        "shareplane_gateway_rules_fetch_failures_total",
        "counter",
        "Rule fetches from the daemon that failed.",
        health.fetch_failures() as f64,
    );
    gauge(
        out,
        "shareplane_gateway_ready",
        "gauge",
        "1 while /readyz answers 200: a rule set loaded, Redis reached once, not fenced.",
        f64::from(u8::from(health.readiness(limiter).is_ok())),
    );
}

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn gauge(out: &mut String, name: &str, kind: &str, help: &str, v: f64) {
    head(out, name, kind, help);
    let _ = writeln!(out, "{name} {v}");
}

/// A label value in Prometheus text format.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"")
}
