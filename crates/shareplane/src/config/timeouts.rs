//! The bounds on the daemon's store calls (`store_timeout_ms`) and health reads
//! (`health_timeout_ms`): both default to, and may not exceed, the store-call bound the gateways'
//! lease is derived with ([`shareplane_core::lease::call_bound_ms`]: half a period, 50 ms to
//! 10 s). They may only be shortened:
//!
//! - **store**: the lease's margin allows for a peer's read of the records returning a record
//!   written up to that bound after the peer's rebalance started (docs/PROTOCOL.md, "The
//!   gateways' lease"). A longer store timeout lets such a read return a later record, and the
//!   peer could reclaim a Region whose gateways' lease has not run out yet.
//! - **health**: a rebalance reads the health verdicts together with the records, and writes
//!   its record only when both have answered. A longer health read delays every own write, and
//!   the lease assumes a record is visible to every peer within `(silent_after − 2) × period −
//!   call bound` of its rebalance's start.
//!
//! Too short is safe but costly: a store call that times out counts as failed (no rebalance
//! that period; writes failing for long let the gateways' lease run out, and they fence), and a
//! health read that times out reads every Region as unknown, so no silent Region is reclaimed.

use super::read::RawConfig;
use super::{problem, MAX_PERIOD_MS, MIN_PERIOD_MS};
use shareplane_core::lease::call_bound_ms;
use shareplane_core::ConfigError;

/// The shortest store or health timeout accepted.
pub const MIN_TIMEOUT_MS: u64 = 10;

/// The checked bounds, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub store_ms: u64,
    pub health_ms: u64,
}

/// The period, or `None` (reported, naming the value) when it is out of range.
pub(super) fn check_period(period_ms: u64, errors: &mut Vec<ConfigError>) -> Option<u64> {
    if (MIN_PERIOD_MS..=MAX_PERIOD_MS).contains(&period_ms) {
        return Some(period_ms);
    }
    errors.push(problem(
        "period_ms",
        format!("{period_ms} must be {MIN_PERIOD_MS} to {MAX_PERIOD_MS}"),
    ));
    None
}

/// The store and health timeouts of `raw` with a period of `period_ms` (`None`: the period is
/// invalid and already reported, so nothing is checked against it).
pub(super) fn check_timeouts(
    raw: &RawConfig,
    period_ms: Option<u64>,
    errors: &mut Vec<ConfigError>,
) -> Timeouts {
    let bound = call_bound_ms(period_ms.unwrap_or(super::DEFAULT_PERIOD_MS));
    let mut one = |field: &str, given: Option<u64>| {
        let v = given.unwrap_or(bound);
        if period_ms.is_none() || given.is_none() {
            return v;
        }
        if v < MIN_TIMEOUT_MS {
            errors.push(problem(
                field,
                format!("{v} must be at least {MIN_TIMEOUT_MS}"),
            ));
        } else if v > bound {
            errors.push(problem(
                field,
                format!(
                    "{v} is longer than the store-call bound of the gateways' lease, {bound} ms \
                     (half of period_ms, 50 ms to 10 s): it may only be shortened, or the lease \
                     could outlast the earliest reclaim (docs/PROTOCOL.md, \"The gateways' \
                     lease\"); lengthen period_ms to allow longer calls"
                ),
            ));
        }
        v
    };
    Timeouts {
        store_ms: one("store_timeout_ms", raw.store_timeout_ms),
        health_ms: one("health_timeout_ms", raw.health_timeout_ms),
    }
}

/// The test-only store delay must leave room for the call within the store timeout.
pub(super) fn check_test_delay(
    raw: &RawConfig,
    timeouts: Timeouts,
    period_ok: bool,
    errors: &mut Vec<ConfigError>,
) -> u64 {
    let Some(delay) = raw.test_store_delay_ms else {
        return 0;
    };
    if period_ok && delay >= timeouts.store_ms / 2 {
        errors.push(problem(
            "test_store_delay_ms",
            format!(
                "{delay}: tests only; must be below half of the store timeout ({} ms)",
                timeouts.store_ms
            ),
        ));
    }
    delay
}
