//! What every Region must agree on: the Regions, the limits and the protocol's settings.
//!
//! A [`Deployment`] is built through [`Deployment::try_new`], which reports every problem at once,
//! so that a value of this type is always usable by the core.

use crate::region::{RegionId, MAX_REGIONS};
use crate::room::{even_part, Room};
use std::fmt;

/// How shares move (SPEC §4). Only named grants conserve room; jump-to-target exists for the
/// simulator's comparisons.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Design {
    NamedGrants,
    JumpToTarget,
}

/// What a Region does about a peer whose record stopped changing (SPEC §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SilentPolicy {
    /// Keep counting the silent Region's last share; never reclaim.
    Freeze,
    /// Reclaim when the Region is silent and its outside health check says unhealthy (default).
    TwoSignals,
    /// Reclaim on silence alone. Unsafe under a partition; exists for comparisons.
    SilenceAlone,
}

/// The names the configuration, the scenario files and the API use for a setting's values.
macro_rules! named {
    ($t:ty, $($name:literal => $v:expr),+ $(,)?) => {
        impl $t {
            /// Every value with its name, in the order documented.
            pub const NAMES: &'static [(&'static str, $t)] = &[$(($name, $v)),+];

            pub fn name(self) -> &'static str {
                Self::NAMES
                    .iter()
                    .find(|(_, v)| *v == self)
                    .map_or("?", |(n, _)| n)
            }

            pub fn from_name(name: &str) -> Option<$t> {
                Self::NAMES.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
            }

            /// `"a", "b" or "c"`, for error messages.
            pub fn choices() -> String {
                let quoted: Vec<String> = Self::NAMES.iter().map(|(n, _)| format!("{n:?}")).collect();
                match quoted.split_last() {
                    Some((last, [])) => last.clone(),
                    Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                    None => String::new(),
                }
            }
        }
    };
}

named!(Design, "named-grants" => Design::NamedGrants, "jump-to-target" => Design::JumpToTarget);
named!(
    SilentPolicy,
    "two-signals" => SilentPolicy::TwoSignals,
    "freeze" => SilentPolicy::Freeze,
    "silence-alone" => SilentPolicy::SilenceAlone,
);
named!(Fence, "own-unhealthy" => Fence::OwnUnhealthy, "never" => Fence::Never);

/// Capacity limits move between Regions; security limits never do (SPEC §8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitKind {
    Capacity,
    /// A static split: `home = None` splits the rate evenly by Region; `Some(r)` gives it all to `r`.
    Security {
        home: Option<RegionId>,
    },
}

/// One limit as configured. `version` goes up whenever `rate` (or anything else) changes.
#[derive(Clone, Debug, PartialEq)]
pub struct LimitSpec {
    pub id: String,
    pub version: u64,
    pub rate: Room,
    /// Each Region's bucket holds `burst_ms / 1000 × share`.
    pub burst_ms: u64,
    pub floor: Room,
    pub step_cap: Room,
    pub kind: LimitKind,
    /// Coordinated and published, but not pushed to limiters.
    pub shadow: bool,
}

/// What fencing a Region applies to itself (see docs/PROTOCOL.md, "residual risk").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fence {
    /// Never lower the own share because of the own health verdict.
    Never,
    /// When the Region's own health check reads Unhealthy, it lowers its shares to zero (keeping
    /// the room in its pool) and neither raises nor grants until the verdict clears. Default.
    OwnUnhealthy,
}

/// Everything the core needs to know that is not an input of one rebalance.
#[derive(Clone, Debug, PartialEq)]
pub struct Deployment {
    /// Region names in deployment order; a [`RegionId`] indexes this list.
    pub regions: Vec<String>,
    pub limits: Vec<LimitSpec>,
    pub design: Design,
    pub policy: SilentPolicy,
    pub fence: Fence,
    /// Own rebalances with an unchanged peer record before the peer counts as silent.
    pub silent_after: u32,
    /// The rebalance period. The core reads no clock; it uses this only to decide whether a
    /// restarted daemon may resume its epoch (see [`crate::Coordinator::restart`]).
    pub period_ms: u64,
}

/// One problem with a deployment or limit, naming the field.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigError {
    pub field: String,
    pub problem: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)
    }
}

impl std::error::Error for ConfigError {}

fn err(field: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        problem: problem.into(),
    }
}

impl Deployment {
    /// Checks every rule and returns all problems found, not only the first.
    pub fn try_new(d: Deployment) -> Result<Deployment, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let n = d.regions.len();
        if !(1..=MAX_REGIONS).contains(&n) {
            errors.push(err(
                "regions",
                format!("need 1 to {MAX_REGIONS} Regions, got {n}"),
            ));
        }
        for (i, name) in d.regions.iter().enumerate() {
            if name.is_empty() || name.len() > 64 {
                errors.push(err(format!("regions[{i}]"), "a name of 1 to 64 characters"));
            }
            if d.regions[..i].contains(name) {
                errors.push(err(
                    format!("regions[{i}]"),
                    format!("{name:?} appears twice"),
                ));
            }
        }
        if d.silent_after == 0 {
            errors.push(err("silent_after", "must be at least 1"));
        }
        if d.period_ms == 0 {
            errors.push(err("period_ms", "must be positive"));
        }
        let mut ids = std::collections::BTreeSet::new();
        for (i, l) in d.limits.iter().enumerate() {
            l.check(n, &format!("limits[{i}]"), &mut errors);
            if !ids.insert(l.id.as_str()) {
                errors.push(err(
                    format!("limits[{i}].id"),
                    format!("{:?} appears twice", l.id),
                ));
            }
        }
        if errors.is_empty() {
            Ok(d)
        } else {
            Err(errors)
        }
    }

    pub fn n(&self) -> usize {
        self.regions.len()
    }

    pub fn region_id(&self, name: &str) -> Option<RegionId> {
        self.regions
            .iter()
            .position(|r| r == name)
            .and_then(RegionId::new)
    }

    pub fn region_name(&self, r: RegionId) -> &str {
        self.regions
            .get(r.index())
            .map(String::as_str)
            .unwrap_or("?")
    }

    /// The limit's index in [`Deployment::limits`].
    pub fn limit_index(&self, id: &str) -> Option<usize> {
        self.limits.iter().position(|l| l.id == id)
    }
}

impl LimitSpec {
    fn check(&self, n: usize, at: &str, errors: &mut Vec<ConfigError>) {
        if self.id.is_empty() || self.id.len() > 128 {
            errors.push(err(format!("{at}.id"), "an id of 1 to 128 characters"));
        }
        // Ids become Redis keys inside a hash tag (`rl:{id}:global`) and DynamoDB attribute
        // values: braces, whitespace and control characters would break the tag.
        if self
            .id
            .chars()
            .any(|c| c == '{' || c == '}' || c.is_whitespace() || c.is_control())
        {
            errors.push(err(
                format!("{at}.id"),
                "may not contain braces, spaces or control characters",
            ));
        }
        if self.version == 0 {
            errors.push(err(format!("{at}.version"), "must be at least 1"));
        }
        if self.rate.is_zero() {
            errors.push(err(format!("{at}.rate"), "must be positive"));
        }
        if self.burst_ms == 0 {
            errors.push(err(format!("{at}.burst"), "must be positive"));
        }
        if self.step_cap.is_zero() && self.kind == LimitKind::Capacity {
            errors.push(err(
                format!("{at}.step_cap"),
                "must be positive, or no share could rise",
            ));
        }
        if self.floor.milli().saturating_mul(n as u64) > self.rate.milli() {
            errors.push(err(
                format!("{at}.floor"),
                format!(
                    "{} Regions × floor {} is more than the rate {}",
                    n, self.floor, self.rate
                ),
            ));
        }
        if let LimitKind::Security { home: Some(h) } = self.kind {
            if h.index() >= n {
                errors.push(err(format!("{at}.home"), "names no configured Region"));
            }
        }
    }

    /// The part of `rate` that belongs to Region `r` by the static rule: an even split by Region
    /// index. New room (an upgrade, a new limit) arrives and removed room leaves in these parts.
    pub fn static_part(rate: Room, n: usize, r: RegionId) -> Room {
        even_part(rate, n, r.index())
    }

    /// A security limit's fixed share for Region `r`.
    pub fn security_share(&self, n: usize, r: RegionId) -> Room {
        match self.kind {
            LimitKind::Security { home: Some(h) } => {
                if h == r {
                    self.rate
                } else {
                    Room::ZERO
                }
            }
            _ => Self::static_part(self.rate, n, r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_value_round_trips_and_the_first_is_the_default() {
        for &(n, v) in SilentPolicy::NAMES {
            assert_eq!((v.name(), SilentPolicy::from_name(n)), (n, Some(v)));
        }
        for &(n, v) in Fence::NAMES {
            assert_eq!((v.name(), Fence::from_name(n)), (n, Some(v)));
        }
        for &(n, v) in Design::NAMES {
            assert_eq!((v.name(), Design::from_name(n)), (n, Some(v)));
        }
        assert_eq!(SilentPolicy::NAMES[0].1, SilentPolicy::TwoSignals);
        assert_eq!(Fence::NAMES[0].1, Fence::OwnUnhealthy);
        assert_eq!(SilentPolicy::from_name("Two-Signals"), None);
        assert_eq!(
            SilentPolicy::choices(),
            r#""two-signals", "freeze" or "silence-alone""#
        );
        assert_eq!(Fence::choices(), r#""own-unhealthy" or "never""#);
    }
}
