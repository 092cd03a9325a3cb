//! The limiter's clocks, read here and nowhere else in the limiter, the gateway or the load
//! generator (`clippy.toml` bans direct reads elsewhere), so that every read is in one place:
//! - tokio's monotonic clock ([`now`], [`since`]), which tests pause and advance: the limiter's
//!   state (leases, the fence, the local fallback's buckets, the back-off from an unreachable
//!   Redis: `limiter/state.rs` takes it as `now`), the watcher's round trips, the load
//!   generator's schedule;
//! - std's monotonic clock ([`std_now`], [`std_since`]): the durations the gateway reports and
//!   the time a Redis connection takes to set up;
//! - the wall clock ([`system_now`], [`unix_ms`], [`time_ordered_id`]): stamps that other
//!   processes read (start times, incarnations) and seeds.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now on tokio's clock.
pub fn now() -> tokio::time::Instant {
    tokio::time::Instant::now()
}

/// How long ago `t` was on tokio's clock (zero if it is ahead).
pub fn since(t: tokio::time::Instant) -> Duration {
    t.elapsed()
}

/// Now on std's monotonic clock.
pub fn std_now() -> std::time::Instant {
    std::time::Instant::now()
}

/// How long ago `t` was on std's monotonic clock (zero if it is ahead).
pub fn std_since(t: std::time::Instant) -> Duration {
    t.elapsed()
}

/// Now on the wall clock.
pub fn system_now() -> SystemTime {
    SystemTime::now()
}

/// Milliseconds since the Unix epoch, now (0 for a clock set before 1970).
pub fn unix_ms() -> u64 {
    system_now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A UUID v7 (its first 48 bits the wall clock's milliseconds, the rest random), as a number.
pub fn time_ordered_id() -> u128 {
    uuid::Uuid::now_v7().as_u128()
}
