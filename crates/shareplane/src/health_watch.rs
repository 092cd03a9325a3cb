//! How long each Region's health verdict has read `Unknown` without a break, and the
//! `health_unknown:<region>` alarm past a threshold (docs/PROTOCOL.md, "Silent Regions").
//!
//! Two-signals never reads `Unknown` as unhealthy, and that stays: a Region whose verdict cannot
//! be read is never reclaimed. But a health source that never answers (a wrong health-check id,
//! a CloudWatch endpoint that has no data, a read that always times out) would then keep a lost
//! Region's room frozen forever with nothing said. This module says it: an alarm in
//! `GET /v1/state`, one event each way, and a gauge per Region. It decides nothing: the verdicts
//! handed to the core are unchanged.

use crate::events::Kind;
use shareplane_core::{regions, Deployment, Health, PerRegion, RegionId};

/// The least time a verdict must read `Unknown` without a break before the alarm: 60 s.
///
/// Why 60 s: CloudWatch (Route 53 health checks' metrics) reports at one-minute resolution and
/// a datapoint may arrive a minute late, so a healthy source can read `Unknown` for a while at
/// start or across a gap; a minute of nothing but `Unknown` is past that. It is also well under
/// the 5 minutes the `HealthUnknown` CloudWatch alarm waits, so `/v1/state` says it first.
pub const MIN_HEALTH_UNKNOWN_AFTER_MS: u64 = 60_000;

/// Periods a verdict must read `Unknown` before the alarm, when that is longer than
/// [`MIN_HEALTH_UNKNOWN_AFTER_MS`] (long periods): one late read, or two, never raise it.
pub const HEALTH_UNKNOWN_AFTER_PERIODS: u64 = 3;

/// The default threshold for a deployment with period `period_ms`: the longer of 60 s and
/// three periods.
pub fn default_unknown_after_ms(period_ms: u64) -> u64 {
    MIN_HEALTH_UNKNOWN_AFTER_MS.max(period_ms.saturating_mul(HEALTH_UNKNOWN_AFTER_PERIODS))
}

/// A change of the alarm for one Region, returned by [`UnknownWatch::observe`] (an event each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The Region's verdict has read `Unknown` for `for_ms` (at least the threshold).
    Raised { region: RegionId, for_ms: u64 },
    /// The Region's verdict reads known again after `for_ms` of `Unknown`.
    Cleared { region: RegionId, for_ms: u64 },
}

impl Change {
    /// The operator event of this change: its kind, the Region it is about (the event's
    /// `peer`, the own Region included) and its detail.
    pub fn event(self, d: &Deployment) -> (Kind, String, String) {
        match self {
            Change::Raised { region, for_ms } => (
                Kind::HealthUnknown,
                d.region_name(region).to_string(),
                format!(
                    "the health verdict has read unknown (or could not be read) for {} s: the Region is never reclaimed on it, so were it lost its room would stay frozen, held by nobody; check its health source (health-check id, CloudWatch data, health_timeout_ms)",
                    for_ms / 1000
                ),
            ),
            Change::Cleared { region, for_ms } => (
                Kind::HealthKnown,
                d.region_name(region).to_string(),
                format!(
                    "the health verdict reads known again after {} s of unknown",
                    for_ms / 1000
                ),
            ),
        }
    }
}

/// Per Region: since when its verdict has read `Unknown` without a break, and whether the alarm
/// is raised. Fed every health read (a read that failed or timed out reads `Unknown` for every
/// Region before it gets here).
#[derive(Clone, Debug)]
pub struct UnknownWatch {
    after_ms: u64,
    /// By Region index: the time of the first `Unknown` read of the current run, if any.
    since_ms: Vec<Option<u64>>,
    alarmed: Vec<bool>,
}

impl UnknownWatch {
    /// A watch over `n` Regions that raises the alarm after `after_ms` of `Unknown`.
    pub fn new(n: usize, after_ms: u64) -> UnknownWatch {
        UnknownWatch {
            after_ms,
            since_ms: vec![None; n],
            alarmed: vec![false; n],
        }
    }

    /// Takes the verdicts read at `now_ms` and returns the alarms raised or cleared by them.
    pub fn observe(&mut self, now_ms: u64, h: &PerRegion<Health>) -> Vec<Change> {
        let mut out = Vec::new();
        for (i, (since, alarmed)) in self.since_ms.iter_mut().zip(&mut self.alarmed).enumerate() {
            let Some(region) = RegionId::new(i) else {
                continue;
            };
            if h[region] == Health::Unknown {
                let from = *since.get_or_insert(now_ms);
                let for_ms = now_ms.saturating_sub(from);
                if !*alarmed && for_ms >= self.after_ms {
                    *alarmed = true;
                    out.push(Change::Raised { region, for_ms });
                }
            } else if let Some(from) = since.take() {
                if std::mem::take(alarmed) {
                    let for_ms = now_ms.saturating_sub(from);
                    out.push(Change::Cleared { region, for_ms });
                }
            }
        }
        out
    }

    /// How long each Region's verdict has read `Unknown` at `now_ms`, by Region index (0 when it
    /// reads known).
    pub fn unknown_ms(&self, now_ms: u64) -> Vec<u64> {
        (self.since_ms.iter())
            .map(|s| s.map_or(0, |from| now_ms.saturating_sub(from)))
            .collect()
    }

    /// `health_unknown:<region>` for every Region with the alarm raised.
    pub fn alarms(&self, d: &Deployment) -> Vec<String> {
        regions(d.n())
            .filter(|r| self.alarmed.get(r.index()).copied().unwrap_or(false))
            .map(|r| format!("health_unknown:{}", d.region_name(r)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shareplane_core::MAX_REGIONS;

    fn verdicts(b: Health) -> PerRegion<Health> {
        let mut h = PerRegion([Health::Healthy; MAX_REGIONS]);
        h[RegionId::new(1).unwrap_or_else(|| panic!("B"))] = b;
        h
    }

    #[test]
    fn the_alarm_rises_once_past_the_threshold_and_clears_on_a_known_verdict() {
        let b = RegionId::new(1).unwrap_or_else(|| panic!("B"));
        let mut w = UnknownWatch::new(3, 60_000);
        assert!(w.observe(1_000, &verdicts(Health::Unknown)).is_empty());
        assert!(w.observe(60_999, &verdicts(Health::Unknown)).is_empty());
        assert_eq!(w.unknown_ms(60_999), vec![0, 59_999, 0]);
        let raised = w.observe(61_000, &verdicts(Health::Unknown));
        assert_eq!(
            raised,
            vec![Change::Raised {
                region: b,
                for_ms: 60_000
            }]
        );
        assert!(w.observe(70_000, &verdicts(Health::Unknown)).is_empty());
        let cleared = w.observe(80_000, &verdicts(Health::Unhealthy));
        assert_eq!(
            cleared,
            vec![Change::Cleared {
                region: b,
                for_ms: 79_000
            }]
        );
        assert_eq!(w.unknown_ms(80_000), vec![0, 0, 0]);
    }

    #[test]
    fn a_known_verdict_in_between_starts_the_count_again_without_an_event() {
        let mut w = UnknownWatch::new(3, 60_000);
        assert!(w.observe(0, &verdicts(Health::Unknown)).is_empty());
        assert!(w.observe(50_000, &verdicts(Health::Healthy)).is_empty());
        assert!(w.observe(55_000, &verdicts(Health::Unknown)).is_empty());
        assert!(w.observe(110_000, &verdicts(Health::Unknown)).is_empty());
        assert_eq!(w.unknown_ms(110_000)[1], 55_000);
    }

    #[test]
    fn the_default_is_the_longer_of_a_minute_and_three_periods() {
        assert_eq!(default_unknown_after_ms(1_000), 60_000);
        assert_eq!(default_unknown_after_ms(30_000), 90_000);
    }
}
