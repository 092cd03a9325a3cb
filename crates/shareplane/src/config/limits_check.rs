//! Each `[[limits]]` entry checked on its own (what the deployment checks together is
//! [`shareplane_core::Deployment::try_new`]'s): every problem names the field and the value
//! written, never a value derived from it (a rate of −5 is "-5 must be positive", and the floor
//! and step cap that default to parts of it are not blamed for it).

use super::read::RawLimit;
use super::{problem, MAX_BURST_S};
use shareplane_core::{ConfigError, LimitKind, LimitSpec, RegionId, Room, RoomError};

/// `raw` as limits over `regions`; the problems go to `errors`.
pub(super) fn check_limits(
    raw: &[RawLimit],
    regions: &[String],
    errors: &mut Vec<ConfigError>,
) -> Vec<LimitSpec> {
    raw.iter()
        .enumerate()
        .map(|(i, l)| check_limit(l, &format!("limits[{i}]"), regions, errors))
        .collect()
}

fn check_limit(
    l: &RawLimit,
    at: &str,
    regions: &[String],
    errors: &mut Vec<ConfigError>,
) -> LimitSpec {
    // A value that was not a number reads as NaN: its problem here (blaming the entry, so that
    // the deployment's checks do not blame stand-ins) gives way to the reader's.
    let mut room = |field: &str, v: f64, positive: bool| {
        match (Room::from_rps(v), positive) {
            (Ok(r), false) => return r,
            (Ok(r), true) if !r.is_zero() => return r,
            _ => {}
        }
        let why = match Room::from_rps(v) {
            Err(RoomError::TooLarge) => RoomError::TooLarge.to_string(),
            _ if positive => "must be positive".to_string(),
            _ => "must not be negative".to_string(),
        };
        errors.push(problem(format!("{at}.{field}"), format!("{v} {why}")));
        Room::ZERO
    };
    let rate = room("rate", l.rate, true);
    // The floor and step cap default to parts of the rate: only a valid rate has parts.
    let part = |given: Option<f64>, of: f64| given.or((!rate.is_zero()).then_some(l.rate * of));
    let floor = part(l.floor, 0.05).map_or(Room::ZERO, |v| room("floor", v, false));
    let step_cap = part(l.step_cap, 0.10).map_or(Room::ZERO, |v| room("step_cap", v, false));
    let burst_ms = if l.burst_s.is_finite() && l.burst_s > 0.0 && l.burst_s <= MAX_BURST_S {
        (l.burst_s * 1000.0).round() as u64
    } else {
        errors.push(problem(
            format!("{at}.burst_s"),
            format!("{} must be above 0 and at most {MAX_BURST_S}", l.burst_s),
        ));
        1
    };
    let kind = limit_kind(l, at, regions, errors);
    if !l
        .id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
    {
        errors.push(problem(
            format!("{at}.id"),
            format!("{:?}: use letters, digits and - _ . : only", l.id),
        ));
    }
    LimitSpec {
        id: l.id.clone(),
        version: l.version,
        rate,
        burst_ms,
        floor,
        step_cap,
        kind,
        shadow: l.shadow,
    }
}

fn limit_kind(
    l: &RawLimit,
    at: &str,
    regions: &[String],
    errors: &mut Vec<ConfigError>,
) -> LimitKind {
    match (l.kind.as_str(), &l.home) {
        ("capacity", None) => LimitKind::Capacity,
        ("capacity", Some(_)) => {
            errors.push(problem(
                format!("{at}.home"),
                "only security limits have a home",
            ));
            LimitKind::Capacity
        }
        ("security", None) => LimitKind::Security { home: None },
        ("security", Some(h)) => {
            let home = regions.iter().position(|r| r == h).and_then(RegionId::new);
            if home.is_none() {
                errors.push(problem(
                    format!("{at}.home"),
                    format!("{h:?} is not in regions"),
                ));
            }
            LimitKind::Security { home }
        }
        (other, _) => {
            errors.push(problem(
                format!("{at}.kind"),
                format!("{other:?}: use \"capacity\" or \"security\""),
            ));
            LimitKind::Capacity
        }
    }
}
