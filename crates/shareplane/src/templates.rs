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
//! Promotion of a hot value to named-grant coordination by the core is not built.

use shareplane_core::{ConfigError, LimitSpec, RegionId, Room};
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
            let (rate, burst) = numbers(t.rate);
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
    let mut out: Vec<TemplateSpec> = Vec::with_capacity(raw.len());
    for (i, t) in raw.iter().enumerate() {
        let at = format!("templates[{i}]");
        if limit_ids.contains(&t.id.as_str()) || out.iter().any(|o| o.id == t.id) {
            errors.push(problem(
                format!("{at}.id"),
                format!("{:?} is already a limit's or a template's id", t.id),
            ));
        }
        out.push(check_template(t, &at, errors));
    }
    out
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
    TemplateSpec {
        id: t.id.clone(),
        entry: t.entry.clone(),
        rate,
        burst_ms,
        kind,
        shadow: t.shadow,
        overrides,
    }
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
