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
        if self.floor.0.saturating_mul(n as u64) > self.rate.0 {
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
