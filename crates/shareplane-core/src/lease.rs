//! How long a gateway may enforce a rule set without hearing from its daemon (SPEC §7, "the
//! gateways are inside the safety argument"), derived from a [`Deployment`] alone.
//!
//! # The bound
//!
//! A peer counts a Region silent after `silent_after` of its own rebalances at which the Region's
//! latest visible record had not changed since the rebalance at which it last saw a change. It
//! can get there early in two ways: it last saw record `v − 1` because `v` is still replicating
//! (the count started up to a period before `v` was written), or its daemon just took over or
//! restarted and its first rebalance, off its phase, is where it saw `v`. Either way a reclaim
//! can come as early as `(silent_after − 1) × period` after the rebalance that wrote the Region's
//! last durable record (the window [`crate::Coordinator::restart`] resumes within, for the same
//! reason). A gateway's lease is therefore counted from that rebalance's start (the record's
//! `written_at_ms`) and runs out before then, less a margin:
//!
//! - **the peer's read**: the peer's count runs from the start of its rebalance, but the read of
//!   the records in it may return a record written while it ran, up to the daemon's call bound
//!   ([`call_bound_ms`], half a period) later.
//! - **clock rate**: every clock involved (the peer's, which counts the periods; the Region's,
//!   which stamps its writes and counts down the lease; the gateway's, which counts the lease
//!   again) may run fast or slow by up to [`DRIFT_PPM`] against real time. The peer's
//!   `silent_after` periods may be short by `silent_after × period × ρ`, the Region's one period
//!   between writes long by `period × ρ`, the lease long by `lease × ρ` (the daemon counts it down
//!   until it answers, the gateway the rest), and the time the daemon held a long-poll off by
//!   `2 × hold × ρ` when the gateway adds it to its send time. A daemon answers a long-poll when
//!   the lease is renewed or runs out, so an answer with a lease left was held less than a lease.
//!   Together, with the lease below `(silent_after − 1) × period`, that is at most
//!   `ρ × (4 × silent_after − 2) × period`.
//! - **delivery**: [`DELIVERY_MS`] for the answer to reach a gateway that counts the lease from
//!   when it received it and for the checks it admitted just before it ran out to finish.
//!   (`shareplane-limiter` counts from when it sent the request plus the time the daemon held it,
//!   so for it this part is slack.)
//!
//! The health check's detection time is not counted as slack: a Region's verdict may already be
//! unhealthy when its daemon dies, so silence alone decides when the reclaim can come. The bound
//! assumes what the resume window assumes, that the two early ways do not meet: a record is
//! visible to every peer within `(silent_after − 2) × period − call bound` of its rebalance's
//! start (half a period with the defaults; SPEC §9: about 1 s of 5 s).
//!
//! The lease must also be longer than one period, since a daemon renews it once a period (at
//! each durable write): a shorter one would fence healthy gateways between renewals.
//! [`lease_bound`] refuses a deployment in which either cannot hold.

use crate::config::{ConfigError, Deployment};

/// The largest rate error of any clock against real time, in parts per million: NTP slews a
/// clock by at most 500 ppm and a free-running quartz is off by well under 100 ppm; this allows
/// three times their sum.
pub const DRIFT_PPM: u64 = 2_000;
/// Allowance for an answer's delivery to a gateway and the checks in flight when a lease runs out.
pub const DELIVERY_MS: u64 = 100;
/// The longest a daemon waits for any one store call in a deployment of period `period_ms`
/// (half a period, 50 ms to 10 s); a call that takes longer counts as failed and its answer is
/// never used. The daemon's call timeout is this, and the lease allows for a peer's read taking
/// this long.
pub fn call_bound_ms(period_ms: u64) -> u64 {
    (period_ms / 2).clamp(50, 10_000)
}

/// A deployment's lease and how it was derived, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseBound {
    /// `(silent_after − 1) × period`: the earliest a peer can reclaim after the Region's last
    /// durable write, but for its read's time.
    pub reclaim_after_ms: u64,
    /// The peer's read part of the margin ([`call_bound_ms`]).
    pub read_ms: u64,
    /// The clock-rate part of the margin.
    pub drift_ms: u64,
    /// The delivery part of the margin ([`DELIVERY_MS`]).
    pub delivery_ms: u64,
    /// The full lease: `reclaim_after_ms − read_ms − drift_ms − delivery_ms`.
    pub lease_ms: u64,
}

impl LeaseBound {
    pub fn margin_ms(&self) -> u64 {
        self.read_ms + self.drift_ms + self.delivery_ms
    }
}

/// The lease of `d`'s rule sets, or why no lease can be both safe and longer than one period.
pub fn lease_bound(d: &Deployment) -> Result<LeaseBound, ConfigError> {
    let b = parts(d.silent_after, d.period_ms);
    if d.silent_after < 2 {
        return Err(problem(
            "silent_after",
            format!(
                "is {}: a peer could reclaim this Region {} ms after its last record, so no \
                 gateway lease could run out first; use at least 3",
                d.silent_after, b.reclaim_after_ms
            ),
        ));
    }
    if b.lease_ms <= d.period_ms {
        let min = min_period_ms(d.silent_after).map_or_else(
            || "no period works".to_string(),
            |m| format!("use at least {m} ms"),
        );
        return Err(problem(
            "period_ms",
            format!(
                "is {} ms: gateways would get a lease of {} ms ((silent_after − 1) × period = {} ms \
                 less {} ms for a peer's read, {} ms for clock drift and {DELIVERY_MS} ms for \
                 delivery), which must be longer than one period or gateways fence between \
                 renewals; {min}",
                d.period_ms, b.lease_ms, b.reclaim_after_ms, b.read_ms, b.drift_ms
            ),
        ));
    }
    Ok(b)
}

/// The bound's parts in milliseconds, saturating (the lease may be 0).
fn parts(silent_after: u32, period_ms: u64) -> LeaseBound {
    let (s, p) = (u128::from(silent_after), u128::from(period_ms));
    let reclaim_after = s.saturating_sub(1) * p;
    let read = u128::from(call_bound_ms(period_ms));
    let drift = (u128::from(DRIFT_PPM) * (4 * s).saturating_sub(2) * p).div_ceil(1_000_000);
    let lease = reclaim_after.saturating_sub(read + drift + u128::from(DELIVERY_MS));
    let clamp = |x: u128| u64::try_from(x).unwrap_or(u64::MAX);
    LeaseBound {
        reclaim_after_ms: clamp(reclaim_after),
        read_ms: clamp(read),
        drift_ms: clamp(drift),
        delivery_ms: DELIVERY_MS,
        lease_ms: clamp(lease),
    }
}

/// The shortest period whose lease is longer than one period (for the message), if any.
fn min_period_ms(silent_after: u32) -> Option<u64> {
    // The lease grows with the period once the call bound stops at 10 s; below that, by
    // (s − 1 − 1/2 − 2 s ρ − 1) per ms of period. A search is simplest and exact.
    let mut lo = 1u64;
    let mut hi = 100_000_000u64;
    if parts(silent_after, hi).lease_ms <= hi {
        return None;
    }
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if parts(silent_after, mid).lease_ms > mid {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some(lo)
}

fn problem(field: &str, what: String) -> ConfigError {
    ConfigError {
        field: field.into(),
        problem: what,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Design, Fence, SilentPolicy};

    fn d(silent_after: u32, period_ms: u64) -> Deployment {
        Deployment {
            regions: vec!["A".into(), "B".into()],
            limits: Vec::new(),
            design: Design::NamedGrants,
            policy: SilentPolicy::TwoSignals,
            fence: Fence::OwnUnhealthy,
            silent_after,
            period_ms,
        }
    }

    #[test]
    fn production_and_demo_leases() {
        // 5 s: 10 s less 2.5 s for a peer's read, 2000 ppm of 10 periods = 100 ms for drift and
        // 100 ms for delivery.
        let b = lease_bound(&d(3, 5_000)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (
                b.reclaim_after_ms,
                b.read_ms,
                b.drift_ms,
                b.delivery_ms,
                b.lease_ms
            ),
            (10_000, 2_500, 100, 100, 7_300)
        );
        assert_eq!(b.margin_ms(), 2_700);
        // The demo's 1 s: 2 s less 500, 20 and 100 ms; between one and three periods.
        let b = lease_bound(&d(3, 1_000)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((b.drift_ms, b.lease_ms), (20, 1_380));
        assert!(b.lease_ms > 1_000 && b.lease_ms < 3_000);
    }

    #[test]
    fn the_lease_always_runs_out_before_the_earliest_reclaim() {
        for s in 2..12 {
            for p in (100..20_000).step_by(97) {
                let Ok(b) = lease_bound(&d(s, p)) else {
                    continue;
                };
                let (lease, period) = (b.lease_ms as f64, p as f64);
                let rho = DRIFT_PPM as f64 / 1e6;
                // The gateway's end on the slowest clocks against the peer's fastest count.
                // Held at most a lease before an answer that carries one.
                let end = lease * (1.0 + rho) + 2.0 * rho * lease;
                let read = call_bound_ms(p) as f64;
                let reclaim = f64::from(s) * period * (1.0 - rho) - period * (1.0 + rho) - read;
                assert!(end < reclaim, "s {s}, p {p}: {end} >= {reclaim}");
                assert!(b.lease_ms > p);
            }
        }
    }

    #[test]
    fn impossible_settings_are_refused_with_the_reason() {
        let e = lease_bound(&d(1, 5_000)).err().map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|e| e.starts_with("silent_after: is 1")),
            "{e:?}"
        );
        let e = lease_bound(&d(2, 5_000)).err().map(|e| e.to_string());
        assert!(
            e.as_deref().is_some_and(|e| e.contains("no period works")),
            "{e:?}"
        );
        let e = lease_bound(&d(3, 200)).err().map(|e| e.to_string());
        let min = min_period_ms(3).unwrap_or_else(|| panic!("a period works for 3"));
        assert_eq!(min, 211);
        assert!(
            e.as_deref()
                .is_some_and(|e| e.starts_with("period_ms: is 200 ms")
                    && e.contains(&format!("use at least {min} ms"))),
            "{e:?}"
        );
        // The minimum given is exact: it works and one less does not.
        assert!(lease_bound(&d(3, min)).is_ok());
        assert!(lease_bound(&d(3, min - 1)).is_err());
    }
}
