//! The daemon's clock: monotonic (tokio's, so tests can pause it) and anchored to the wall clock
//! once at start, so that replicas of one Region in different processes agree on lease times and
//! phases to within their clocks' skew. No decision compares this clock with another Region's.
//!
//! The daemon reads clocks here and nowhere else (`clippy.toml` bans direct reads elsewhere):
//! [`Clock`], and [`wall_now`], [`monotonic_now`] and [`since`] for stamps and durations.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

#[derive(Clone, Copy, Debug)]
pub struct Clock {
    base: Instant,
    base_ms: u64,
}

impl Clock {
    /// Milliseconds since the Unix epoch at this instant, advancing monotonically from now on.
    pub fn wall() -> Clock {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Clock::starting_at(ms)
    }

    /// A clock that reads `base_ms` now (tests and the demo share one so their daemons agree).
    pub fn starting_at(base_ms: u64) -> Clock {
        Clock {
            base: Instant::now(),
            base_ms,
        }
    }

    /// The same clock shifted by `offset_ms` (a skewed replica in tests).
    pub fn skewed(self, offset_ms: i64) -> Clock {
        Clock {
            base: self.base,
            base_ms: self.base_ms.saturating_add_signed(offset_ms),
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.base_ms + self.base.elapsed().as_millis() as u64
    }

    /// The instant at which this clock reads `ms` (now, if that is in the past).
    pub fn instant_at(&self, ms: u64) -> Instant {
        self.base + Duration::from_millis(ms.saturating_sub(self.base_ms))
    }
}

/// Now on the wall clock (what AWS calls are stamped with, and stamps shown to operators).
pub fn wall_now() -> SystemTime {
    SystemTime::now()
}

/// Milliseconds since the Unix epoch on the wall clock, now (0 for a clock set before 1970).
pub fn unix_ms_now() -> u64 {
    wall_now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Now on tokio's monotonic clock (paused in tests), for durations.
pub fn monotonic_now() -> Instant {
    Instant::now()
}

/// How long ago `t` was on tokio's monotonic clock.
pub fn since(t: Instant) -> Duration {
    t.elapsed()
}

/// The first time after `now_ms` that is `phase_ms` past a multiple of `every_ms`.
pub fn next_tick(now_ms: u64, phase_ms: u64, every_ms: u64) -> u64 {
    let every = every_ms.max(1);
    let phase = phase_ms % every;
    if now_ms < phase {
        return phase;
    }
    ((now_ms - phase) / every + 1) * every + phase
}

#[cfg(test)]
mod tests {
    #[test]
    fn next_tick_keeps_the_phase() {
        assert_eq!(super::next_tick(0, 1700, 5000), 1700);
        assert_eq!(super::next_tick(6700, 1700, 5000), 11700);
        assert_eq!(super::next_tick(6699, 1700, 5000), 6700);
    }
}
