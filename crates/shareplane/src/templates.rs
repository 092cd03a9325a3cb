//! Templates in the daemon: `[[templates]]` of a configuration or a limits file, checked, and
//! each Region's part of them as it publishes it to its gateways at `/v1/rules`.
//!
//! A template is one limit for every distinct value of a descriptor entry (see
//! `shareplane_limiter::templates` for what a gateway does with it). Across Regions it is held
//! by a **static split**: each Region's part of the rate (and of each override's rate) is
//! `LimitSpec::static_part`, the very split by which new room of a listed limit arrives, so the
//! parts add up to the rate exactly and the promise (the Regions together admit at most the rate
//! per value) holds without any coordination: no record, no grant, no write per value. The cost:
//! one Region cannot borrow another's idle part for one value (docs/PROTOCOL.md, "Templates").
//!
//! A capacity template may declare `slots = K` (coordination slots): it then runs as K
//! ordinary listed limits, [`slot_limits`], `<template>#slot<k>`, each of the template's rate,
//! whose room the core moves between Regions by named grants like any listed limit's. Each
//! value belongs to one slot (`shareplane_limiter::slots`) and is limited at its slot's share, so
//! a slot whose values are busy in one Region gets room there and gives it back when they cool;
//! per value, the Regions' rates add up to the slot's shares, at most the rate. Overrides keep
//! the static split.

use shareplane_core::{ConfigError, LimitKind, LimitSpec, RegionId, Room};
use shareplane_limiter::rules::{MAX_ID_LEN, MAX_LIMITS};
use shareplane_limiter::slots::{slot_id, slot_parts, MAX_SLOTS};
use shareplane_limiter::templates::{valid_template_id, MAX_ENTRY_LEN, MAX_TEMPLATES};
use shareplane_limiter::{LimitKind as WireKind, OverrideWire, TemplateWire};

use crate::problem::problem;

/// One template as configured.
#[derive(Clone, Debug, PartialEq)]
pub struct TemplateSpec {
    pub id: String,
    /// The descriptor entry key whose value selects the bucket.
    pub entry: String,
    /// Each value's rate across all Regions.
    pub rate: Room,
    /// Each value's bucket holds `burst_ms / 1000 ×` its Region's part.
    pub burst_ms: u64,
    pub kind: WireKind,
    pub shadow: bool,
    /// Values with a rate of their own (across all Regions).
    pub overrides: Vec<(String, Room)>,
    /// Coordination slots (0: the static split only); see [`slot_limits`].
    pub slots: u32,
    /// The version of its slot limits: with slots, the rate changes live only at a higher
    /// version, as a listed limit's does (1 when not written).
    pub version: u64,
}

/// `[[templates]]` as written, before checks.
#[derive(Clone, Debug, Default)]
pub struct RawTemplate {
    pub id: String,
    pub entry: String,
    /// NaN when missing or not a number (reported).
    pub rate: f64,
    pub burst_s: Option<f64>,
    pub kind: Option<String>,
    pub shadow: bool,
    pub overrides: Vec<(String, f64)>,
    pub slots: Option<u64>,
    pub version: Option<u64>,
}

/// This Region's part of `rate`: the static split listed limits use for new room.
pub fn region_part(rate: Room, n: usize, me: RegionId) -> Room {
    LimitSpec::static_part(rate, n, me)
}

/// The templates as Region `me` of `n` publishes them: its part of every rate.
pub fn wire(templates: &[TemplateSpec], n: usize, me: RegionId) -> Vec<TemplateWire> {
    templates
        .iter()
        .map(|t| {
            let numbers = |rate: Room| {
                let part = region_part(rate, n, me);
                (part.as_rps(), part.mul_div(t.burst_ms, 1000).as_rps())
            };
            // With slots a value's numbers are its slot's: the template's own are 0, so that a
            // gateway that predates slots holds it closed rather than admitting a static part.
            let (rate, burst) = match t.slots {
                0 => numbers(t.rate),
                _ => (0.0, 0.0),
            };
            TemplateWire {
                id: t.id.clone(),
                entry: t.entry.clone(),
                rate,
                burst,
                shadow: t.shadow,
                kind: t.kind,
                overrides: t
                    .overrides
                    .iter()
                    .map(|(value, rate)| {
                        let (rate, burst) = numbers(*rate);
                        OverrideWire {
                            value: value.clone(),
                            rate,
                            burst,
                        }
                    })
                    .collect(),
                slots: t.slots,
            }
        })
        .collect()
}

/// `raw` checked: every problem goes to `errors`, naming `templates[i].field`. An id may not be
/// a limit's (`limit_ids`) nor another template's.
pub fn check_templates(
    raw: &[RawTemplate],
    limit_ids: &[&str],
    errors: &mut Vec<ConfigError>,
) -> Vec<TemplateSpec> {
    if raw.len() > MAX_TEMPLATES {
        errors.push(problem(
            "templates",
            format!("{} templates: at most {MAX_TEMPLATES}", raw.len()),
        ));
    }
    // Listed ids shaped as slot ids (refused on their own too: `#` is not a listed id's).
    let slot_shaped: Vec<(&str, u32)> = limit_ids.iter().filter_map(|id| slot_parts(id)).collect();
    let mut out: Vec<TemplateSpec> = Vec::with_capacity(raw.len());
    for (i, t) in raw.iter().enumerate() {
        let at = format!("templates[{i}]");
        let before = errors.len();
        if limit_ids.contains(&t.id.as_str()) || out.iter().any(|o| o.id == t.id) {
            errors.push(problem(
                format!("{at}.id"),
                format!("{:?} is already a limit's or a template's id", t.id),
            ));
        }
        let mut spec = check_template(t, &at, errors);
        if let Some((_, k)) = slot_shaped
            .iter()
            .find(|(tid, k)| *tid == spec.id && *k < spec.slots)
        {
            errors.push(problem(
                format!("{at}.slots"),
                format!(
                    "its slot limit {:?} is already a listed limit's id",
                    slot_id(&spec.id, *k)
                ),
            ));
        }
        if errors.len() > before {
            // Refused anyway: no slot limits of it, so that nothing blames them.
            spec.slots = 0;
        }
        out.push(spec);
    }
    let slots: usize = out.iter().map(|t| t.slots as usize).sum();
    if slots > 0 && limit_ids.len() + slots > MAX_LIMITS {
        errors.push(problem(
            "templates",
            format!(
                "{} listed limits and {slots} slot limits: at most {MAX_LIMITS} in all (what \
                 a gateway's rule set carries)",
                limit_ids.len()
            ),
        ));
    }
    out
}

/// The listed limits the templates' coordination slots run as, in template order then slot
/// order: `<template>#slot<k>` for `k` in `0..slots`, each of the template's rate, burst and
/// shadow flag, kind capacity, at the template's version, with the floor and step cap a listed
/// limit gets by default (5% and 10% of the rate; the floor at most an `n`th of it, so that `n`
/// Regions' floors fit). The core moves their room like any listed limit's, starting from the
/// static split.
pub fn slot_limits(templates: &[TemplateSpec], n: usize) -> Vec<LimitSpec> {
    let n = n.max(1) as u64;
    templates
        .iter()
        .flat_map(|t| {
            (0..t.slots).map(move |k| LimitSpec {
                id: slot_id(&t.id, k),
                version: t.version,
                rate: t.rate,
                burst_ms: t.burst_ms,
                floor: t.rate.mul_div(5, 100).min(t.rate.mul_div(1, n)),
                step_cap: t.rate.mul_div(10, 100).max(Room::from_milli(1)),
                kind: LimitKind::Capacity,
                shadow: t.shadow,
            })
        })
        .collect()
}

/// `ids` for people: the slot limits of one template as `<id>#slot* (N slots)`, in the place
/// of the first, every other id as it is.
pub fn compact_ids(ids: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut counts: Vec<(usize, &str, usize)> = Vec::new();
    for id in ids {
        match slot_parts(id) {
            Some((t, _)) => match counts.iter_mut().find(|c| c.1 == t) {
                Some(c) => c.2 += 1,
                None => {
                    counts.push((out.len(), t, 1));
                    out.push(String::new());
                }
            },
            None => out.push(id.clone()),
        }
    }
    for (at, t, n) in counts {
        out[at] = format!("{t}#slot* ({n} slots)");
    }
    out
}

/// Refuses what a reload (or `shareplane limits apply`) cannot change in templates: the number
/// of slots of a template that stays. A value's slot is its hash modulo the number, so another
/// number would move most values to other slots, whose room the Regions hold apart: a new
/// number of slots needs a new template id. (Removing a slotted template removes its slot
/// limits: [`crate::config::limit_changes`] refuses that as it refuses removing any limit.)
pub fn slot_changes(old: &[TemplateSpec], new: &[TemplateSpec], errors: &mut Vec<ConfigError>) {
    for (j, n) in new.iter().enumerate() {
        let Some(o) = old.iter().find(|o| o.id == n.id) else {
            continue;
        };
        if o.slots != n.slots {
            errors.push(problem(
                format!("templates[{j}].slots"),
                format!(
                    "{:?}: slots cannot change while the daemon runs (running {}, file {}): a \
                     value's slot is fixed by their number; a new number of slots needs a new \
                     template id (and the old template's removal a restart)",
                    n.id, o.slots, n.slots
                ),
            ));
        }
    }
}

fn check_template(t: &RawTemplate, at: &str, errors: &mut Vec<ConfigError>) -> TemplateSpec {
    check_id_and_entry(t, at, errors);
    let mut rate_of = |field: String, v: f64| match Room::from_rps(v) {
        Ok(r) if !r.is_zero() => r,
        Ok(_) => {
            errors.push(problem(field, format!("{v} must be positive")));
            Room::ZERO
        }
        Err(e) => {
            errors.push(problem(field, format!("{v} {e}")));
            Room::ZERO
        }
    };
    let rate = rate_of(format!("{at}.rate"), t.rate);
    let mut overrides: Vec<(String, Room)> = Vec::with_capacity(t.overrides.len());
    for (j, (value, r)) in t.overrides.iter().enumerate() {
        let rate = rate_of(format!("{at}.overrides[{j}].rate"), *r);
        overrides.push((value.clone(), rate));
    }
    check_override_values(&overrides, at, errors);
    let burst_s = t.burst_s.unwrap_or(2.0);
    let burst_ms = if burst_s.is_finite() && burst_s > 0.0 && burst_s <= 3_600.0 {
        (burst_s * 1000.0).round() as u64
    } else {
        errors.push(problem(
            format!("{at}.burst_s"),
            format!("{burst_s} must be above 0 and at most 3600"),
        ));
        1
    };
    let kind = match t.kind.as_deref().unwrap_or("capacity") {
        "capacity" => WireKind::Capacity,
        "security" => WireKind::Security,
        other => {
            errors.push(problem(
                format!("{at}.kind"),
                format!("{other:?}: use \"capacity\" or \"security\""),
            ));
            WireKind::Capacity
        }
    };
    let (slots, version) = check_slots(t, at, kind, errors);
    TemplateSpec {
        id: t.id.clone(),
        entry: t.entry.clone(),
        rate,
        burst_ms,
        kind,
        shadow: t.shadow,
        overrides,
        slots,
        version,
    }
}

/// `slots` (at most [`MAX_SLOTS`], capacity templates only, slot ids that fit [`MAX_ID_LEN`])
/// and `version`.
fn check_slots(
    t: &RawTemplate,
    at: &str,
    kind: WireKind,
    errors: &mut Vec<ConfigError>,
) -> (u32, u64) {
    let version = t.version.unwrap_or(1);
    if version == 0 {
        errors.push(problem(format!("{at}.version"), "must be at least 1"));
    }
    let slots = match u32::try_from(t.slots.unwrap_or(0)) {
        Ok(k) if k <= MAX_SLOTS => k,
        _ => {
            errors.push(problem(
                format!("{at}.slots"),
                format!(
                    "{}: at most {MAX_SLOTS} (0 or absent: the static split only)",
                    t.slots.unwrap_or(0)
                ),
            ));
            0
        }
    };
    if slots > 0 && kind == WireKind::Security {
        errors.push(problem(
            format!("{at}.slots"),
            "a security template is never moved between Regions: slots are for capacity \
             templates",
        ));
    }
    let longest = slot_id(&t.id, slots.saturating_sub(1));
    if slots > 0 && longest.len() > MAX_ID_LEN {
        errors.push(problem(
            format!("{at}.slots"),
            format!(
                "its slot limits' ids (up to {longest:?}) would be longer than {MAX_ID_LEN} \
                 characters: shorten the template id"
            ),
        ));
    }
    (slots, version.max(1))
}

/// The template's id and descriptor entry key.
fn check_id_and_entry(t: &RawTemplate, at: &str, errors: &mut Vec<ConfigError>) {
    let ascii_id =
        t.id.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c));
    if !ascii_id || !valid_template_id(&t.id) {
        errors.push(problem(
            format!("{at}.id"),
            format!("{:?}: 1 to 128 letters, digits and - _ . : only", t.id),
        ));
    }
    if t.entry.is_empty()
        || t.entry.len() > MAX_ENTRY_LEN
        || !t.entry.bytes().all(|b| b.is_ascii_graphic())
    {
        errors.push(problem(
            format!("{at}.entry"),
            format!(
                "{:?}: the descriptor entry key, 1 to {MAX_ENTRY_LEN} printable ASCII characters",
                t.entry
            ),
        ));
    }
}

fn check_override_values(overrides: &[(String, Room)], at: &str, errors: &mut Vec<ConfigError>) {
    let max = shareplane_limiter::templates::MAX_VALUE_LEN;
    for (j, (value, _)) in overrides.iter().enumerate() {
        if value.is_empty() || value.len() > max {
            errors.push(problem(
                format!("{at}.overrides[{j}].value"),
                format!("1 to {max} bytes"),
            ));
        }
        if overrides[..j].iter().any(|(v, _)| v == value) {
            errors.push(problem(
                format!("{at}.overrides[{j}].value"),
                format!("{value:?} appears twice"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use shareplane_core::MAX_REGIONS;

    proptest! {
        /// The promise of a template: whatever the rate and the number of Regions, the parts the
        /// Regions publish add up to the rate exactly, so the Regions together never admit more
        /// than the rate per value, and no part is more than one unit away from another.
        #[test]
        fn the_regions_parts_add_up_to_the_rate_exactly(
            milli in 1u64..=1_000_000_000_000_000,
            n in 1usize..=MAX_REGIONS,
        ) {
            let rate = Room::from_milli(milli);
            let parts: Vec<Room> = (0..n)
                .filter_map(RegionId::new)
                .map(|r| region_part(rate, n, r))
                .collect();
            prop_assert_eq!(parts.len(), n);
            prop_assert_eq!(parts.iter().map(|p| p.milli()).sum::<u64>(), milli);
            let (lo, hi) = (parts.iter().min(), parts.iter().max());
            prop_assert!(hi.zip(lo).is_some_and(|(h, l)| h.milli() - l.milli() <= 1));
        }
    }

    fn raw(id: &str) -> RawTemplate {
        RawTemplate {
            id: id.into(),
            entry: "api_key".into(),
            rate: 100.0,
            overrides: vec![("partner".into(), 1_000.5)],
            ..RawTemplate::default()
        }
    }

    #[test]
    fn three_regions_publish_parts_of_a_template_and_its_overrides_that_add_up() {
        let mut errors = Vec::new();
        let t = check_templates(&[raw("per_api_key")], &["k-big"], &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        let mut sums = (0.0, 0.0, 0.0);
        for r in (0..3).filter_map(RegionId::new) {
            let w = &wire(&t, 3, r)[0];
            assert_eq!(w.burst, 2.0 * w.rate);
            sums.0 += w.rate;
            sums.1 += w.overrides[0].rate;
            sums.2 += w.burst;
        }
        assert!((sums.0 - 100.0).abs() < 1e-9, "{sums:?}");
        assert!((sums.1 - 1_000.5).abs() < 1e-9, "{sums:?}");
        assert!((sums.2 - 200.0).abs() < 1e-6, "{sums:?}");
        // 100/s over 3 Regions: 33.334 + 33.333 + 33.333, in milli-requests.
        let a = wire(&t, 3, RegionId::new(0).unwrap_or_else(|| panic!("A")));
        assert_eq!(a[0].rate, 33.334);
    }

    #[test]
    fn every_problem_names_its_field() {
        let mut bad = raw("k-big");
        bad.entry = String::new();
        bad.rate = -1.0;
        bad.kind = Some("sometimes".into());
        bad.overrides.push(("partner".into(), 0.0));
        let mut hash = raw("a#b");
        hash.burst_s = Some(0.0);
        let mut errors = Vec::new();
        check_templates(&[bad, hash, raw("x"), raw("x")], &["k-big"], &mut errors);
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "templates[0].id",
                "templates[0].entry",
                "templates[0].rate",
                "templates[0].overrides[1].rate",
                "templates[0].overrides[1].value",
                "templates[0].kind",
                "templates[1].id",
                "templates[1].burst_s",
                "templates[3].id",
            ],
            "{errors:#?}"
        );
    }
}
