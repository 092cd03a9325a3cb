//! Rule sets as the daemon publishes them, and their validation at the moment a gateway loads them.
//!
//! A rule set is parsed from the daemon's JSON ([`RulesWire`]) into a [`RuleSet`] that cannot hold
//! nonsense. Problems with the set as a whole (version 0, the wrong Region, duplicate ids, too many
//! limits) reject the whole set: the gateway keeps the rules it runs. A problem with one limit (an id
//! that cannot name a Redis key, a non-finite or negative number, a burst below the largest cost the
//! gateway charges) rejects that limit only: it is loaded *held closed*, so every call that needs it is
//! refused without a Retry-After (a shadow limit still never refuses). Holding it closed is the safe
//! choice: keeping the previous numbers could admit more than the new share allows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::limit::limit_problem;
pub use crate::limit::{valid_limit_id, LimitKind, LimitRule, LimitWire, MAX_ID_LEN, MAX_RATE};
use crate::templates::{TemplateRule, TemplateWire, INSTANCE_SEP, MAX_OVERRIDES, MAX_TEMPLATES};

/// The most limits one rule set may carry (a daemon runs up to as many).
pub const MAX_LIMITS: usize = 100_000;

/// `GET /v1/rules` as the daemon sends it. Unknown fields are ignored so that a newer daemon can add
/// fields without stopping older gateways.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RulesWire {
    pub version: u64,
    pub region: String,
    pub limits: Vec<LimitWire>,
    /// How long after receiving this answer a gateway may enforce the rule set without a renewal
    /// (see [`crate::lease`]); absent from daemons that predate leases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
    /// The digest of the whole rule set at `version` ([`digest_hex`]); absent from daemons that
    /// predate deltas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Set on a delta: `limits` holds only the limits whose rule changed since this version,
    /// which the asking gateway runs (it named it and its digest: `?after=V&delta=DIGEST`).
    /// A delta is sent only to a gateway that asked for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<u64>,
    /// Limits per value of a descriptor entry ([`crate::templates`]), each at this Region's part
    /// of its rate. Every answer carries all of them, deltas included; absent from daemons that
    /// predate templates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub templates: Vec<TemplateWire>,
}

/// A validated rule set.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleSet {
    version: u64,
    region: String,
    limits: BTreeMap<String, LimitRule>,
    templates: BTreeMap<String, TemplateRule>,
    /// [`limits_digest`] of `limits` and the templates' parts.
    digest: u64,
}

/// Why a whole rule set was not loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleSetError {
    #[error("rule set version 0: versions start at 1")]
    ZeroVersion,
    #[error("rule set is for Region {got:?}, this gateway runs in {want:?}")]
    WrongRegion { want: String, got: String },
    #[error("rule set has {0} limits, at most {MAX_LIMITS} are accepted")]
    TooManyLimits(usize),
    #[error("limit id {0:?} appears twice")]
    DuplicateId(String),
    #[error("rule set has {0} templates, at most {MAX_TEMPLATES} are accepted")]
    TooManyTemplates(usize),
    #[error("rule set has {0} per-value overrides, at most {MAX_OVERRIDES} are accepted")]
    TooManyOverrides(usize),
    #[error("rule set is not valid JSON of the expected shape: {0}")]
    Malformed(String),
    #[error("a delta that cannot be applied to the running rule set: {0}")]
    Delta(String),
}

/// The digest of a rule set's limits: FNV-1a (64 bits) over every limit in id order: its id, the
/// bits of its rate and burst, whether it is shadow, its kind. The daemon sends it with every
/// rule set; a gateway names the digest of the set it runs when it asks for a delta, and
/// installs a delta only if the result has the digest the daemon sent.
pub fn limits_digest<'a>(
    limits: impl IntoIterator<Item = (&'a str, f64, f64, bool, LimitKind)>,
) -> u64 {
    let mut all: Vec<_> = limits.into_iter().collect();
    all.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for (id, rate, burst, shadow, kind) in all {
        eat(id.as_bytes());
        eat(&[0xff]);
        eat(&rate.to_bits().to_le_bytes());
        eat(&burst.to_bits().to_le_bytes());
        eat(&[u8::from(shadow), kind as u8]);
    }
    h
}

/// [`limits_digest`] of limits as the daemon sends them.
pub fn wire_digest(limits: &[LimitWire]) -> u64 {
    limits_digest(
        limits
            .iter()
            .map(|l| (l.id.as_str(), l.rate, l.burst, l.shadow, l.kind)),
    )
}

/// The digest of a whole rule set as the daemon sends it: [`wire_digest`] of its limits alone
/// when it has no template (so that sets without templates keep their digests), else of its
/// limits followed by each template's parts (id and entry, its numbers, then each override's
/// value hash and numbers). A gateway computes the same of what it loaded.
pub fn set_digest(limits: &[LimitWire], templates: &[TemplateWire]) -> u64 {
    let rules: BTreeMap<String, TemplateRule> = templates
        .iter()
        .map(|t| (t.id.clone(), TemplateRule::of_wire(t.clone(), 1)))
        .collect();
    combined_digest(wire_digest(limits), &rules)
}

fn combined_digest(limits: u64, templates: &BTreeMap<String, TemplateRule>) -> u64 {
    if templates.is_empty() {
        return limits;
    }
    let parts: Vec<_> = templates.values().flat_map(|t| t.digest_parts()).collect();
    let of_templates = limits_digest(
        parts
            .iter()
            .map(|(id, rate, burst, shadow, kind)| (id.as_str(), *rate, *burst, *shadow, *kind)),
    );
    limits ^ of_templates.rotate_left(1)
}

/// A digest as answers carry it: 16 hex digits.
pub fn digest_hex(digest: u64) -> String {
    format!("{digest:016x}")
}

impl RuleSet {
    /// Validates a published rule set. `region` is the Region this gateway runs in (`None` accepts
    /// any); `max_cost` is the largest cost the gateway charges on one call.
    pub fn from_wire(
        wire: RulesWire,
        region: Option<&str>,
        max_cost: u32,
    ) -> Result<Self, RuleSetError> {
        if wire.version == 0 {
            return Err(RuleSetError::ZeroVersion);
        }
        if let Some(want) = region {
            if want != wire.region {
                return Err(RuleSetError::WrongRegion {
                    want: want.to_owned(),
                    got: wire.region,
                });
            }
        }
        if wire.limits.len() > MAX_LIMITS {
            return Err(RuleSetError::TooManyLimits(wire.limits.len()));
        }
        if wire.base.is_some() {
            return Err(RuleSetError::Delta(
                "a delta is not a whole rule set".into(),
            ));
        }
        let mut limits = BTreeMap::new();
        for l in wire.limits {
            if limits.contains_key(&l.id) {
                return Err(RuleSetError::DuplicateId(l.id));
            }
            let rule = LimitRule::of_wire(l, max_cost);
            limits.insert(rule.id.clone(), rule);
        }
        let templates = templates_of(wire.templates, &limits, max_cost)?;
        Ok(Self::with(wire.version, wire.region, limits, templates))
    }

    fn with(
        version: u64,
        region: String,
        limits: BTreeMap<String, LimitRule>,
        templates: BTreeMap<String, TemplateRule>,
    ) -> Self {
        let of_limits = limits_digest(
            limits
                .values()
                .map(|l| (l.id.as_str(), l.rate, l.burst, l.shadow, l.kind)),
        );
        Self {
            version,
            region,
            limits,
            digest: combined_digest(of_limits, &templates),
            templates,
        }
    }

    /// The rule set a delta ([`RulesWire::base`]) makes of this one: every limit it names replaced
    /// (each validated as [`RuleSet::from_wire`] does), the others kept. Refused unless the delta
    /// is based on exactly this version, names only limits this set has (a change of which
    /// limits exist comes whole), is for the same Region, and the result has the digest the
    /// daemon sent: anything else, and the gateway asks for the whole set.
    pub fn apply_delta(&self, wire: RulesWire, max_cost: u32) -> Result<Self, RuleSetError> {
        let delta = |why: String| Err(RuleSetError::Delta(why));
        if wire.base != Some(self.version) {
            return delta(format!(
                "based on version {:?}, this gateway runs {}",
                wire.base, self.version
            ));
        }
        if wire.version <= self.version {
            return delta(format!("version {} is not newer", wire.version));
        }
        if wire.region != self.region {
            return Err(RuleSetError::WrongRegion {
                want: self.region.clone(),
                got: wire.region,
            });
        }
        let Some(want) = wire.digest.clone() else {
            return delta("no digest to check the result against".into());
        };
        let mut limits = self.limits.clone();
        let mut seen = std::collections::BTreeSet::new();
        for l in wire.limits {
            if !seen.insert(l.id.clone()) {
                return Err(RuleSetError::DuplicateId(l.id));
            }
            let Some(slot) = limits.get_mut(&l.id) else {
                return delta(format!(
                    "names limit {:?}, which the running set lacks",
                    l.id
                ));
            };
            *slot = LimitRule::of_wire(l, max_cost);
        }
        // Templates come whole in every answer.
        let templates = templates_of(wire.templates, &limits, max_cost)?;
        let set = Self::with(wire.version, wire.region, limits, templates);
        if digest_hex(set.digest) != want {
            return delta(format!(
                "the result's digest {} is not the daemon's {want}",
                digest_hex(set.digest)
            ));
        }
        Ok(set)
    }

    /// [`limits_digest`] of this set.
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// Parses and validates the JSON body of `GET /v1/rules`.
    pub fn from_json(
        body: &[u8],
        region: Option<&str>,
        max_cost: u32,
    ) -> Result<Self, RuleSetError> {
        let wire: RulesWire =
            serde_json::from_slice(body).map_err(|e| RuleSetError::Malformed(e.to_string()))?;
        Self::from_wire(wire, region, max_cost)
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    pub fn region(&self) -> &str {
        &self.region
    }

    /// The listed limit `id`, as a descriptor may name it: a template's slot limit
    /// ([`crate::slots`]) is not one (its room serves the template's values only).
    pub fn get(&self, id: &str) -> Option<&LimitRule> {
        if crate::slots::slot_parts(id).is_some() {
            return None;
        }
        self.limits.get(id)
    }

    /// The rule of `value`'s bucket under template `t` (the caller checked the value with
    /// [`crate::templates::check_value`]): see [`RuleSet::by_hash`].
    pub fn instance(&self, t: &TemplateRule, value: &str) -> LimitRule {
        self.by_hash(t, &crate::templates::value_hash(value))
    }

    /// The rule of the bucket of the value whose hash is `hash` under template `t`, with the
    /// per-value id: in a slot ([`TemplateRule::slot_of`]), the slot limit's rate, burst and
    /// state (held closed with it; its share 0 admits nothing); otherwise the template's own
    /// numbers or the value's override.
    pub fn by_hash(&self, t: &TemplateRule, hash: &str) -> LimitRule {
        let Some(k) = t.slot_of(hash) else {
            return t.by_hash(hash);
        };
        let id = format!("{}{INSTANCE_SEP}{hash}", t.id());
        match self.limits.get(&crate::slots::slot_id(t.id(), k)) {
            Some(s) => LimitRule {
                id,
                rate: s.rate,
                burst: s.burst,
                shadow: s.shadow,
                kind: s.kind,
                rejected: s.rejected.clone(),
            },
            // `templates_of` held such a template closed; kept closed here too.
            None => LimitRule {
                id,
                rejected: Some(format!("the rule set lacks slot {k}")),
                ..t.base.clone()
            },
        }
    }

    /// The template `id`, if this set has one.
    pub fn template(&self, id: &str) -> Option<&TemplateRule> {
        self.templates.get(id)
    }

    /// The templates in id order.
    pub fn templates(&self) -> impl Iterator<Item = &TemplateRule> {
        self.templates.values()
    }

    /// The rule behind a limiter id: a listed limit, or a per-value bucket of a template
    /// (`<template>#<hash>`, [`crate::templates::instance_id`]).
    pub fn resolve_id(&self, id: &str) -> Option<std::borrow::Cow<'_, LimitRule>> {
        if let Some(l) = self.limits.get(id) {
            return Some(std::borrow::Cow::Borrowed(l));
        }
        let (template, hash) = crate::templates::instance_parts(id)?;
        let t = self.templates.get(template)?;
        Some(std::borrow::Cow::Owned(self.by_hash(t, hash)))
    }

    /// The limits in id order.
    pub fn limits(&self) -> impl Iterator<Item = &LimitRule> {
        self.limits.values()
    }

    /// The limits and templates rejected at load time, with the reason.
    pub fn rejected(&self) -> impl Iterator<Item = (&str, &str)> {
        self.limits
            .values()
            .chain(self.templates.values().map(|t| &t.base))
            .filter_map(|l| l.rejected.as_deref().map(|r| (l.id.as_str(), r)))
    }
}

impl LimitRule {
    fn of_wire(l: LimitWire, max_cost: u32) -> Self {
        let mut rejected = limit_problem(&l, max_cost);
        let slot = crate::slots::slot_parts(&l.id).is_some();
        if rejected.is_none() && l.id.contains(INSTANCE_SEP) && !slot {
            rejected = Some(format!(
                "id may not hold {INSTANCE_SEP:?}: it names the per-value buckets of templates"
            ));
        }
        LimitRule {
            id: l.id,
            rate: l.rate,
            burst: l.burst,
            shadow: l.shadow,
            kind: l.kind,
            rejected,
        }
    }
}

/// The templates of a rule set, validated; whole-set problems (too many, an id that a limit or
/// another template has) reject the set.
fn templates_of(
    wire: Vec<TemplateWire>,
    limits: &BTreeMap<String, LimitRule>,
    max_cost: u32,
) -> Result<BTreeMap<String, TemplateRule>, RuleSetError> {
    if wire.len() > MAX_TEMPLATES {
        return Err(RuleSetError::TooManyTemplates(wire.len()));
    }
    let overrides: usize = wire.iter().map(|t| t.overrides.len()).sum();
    if overrides > MAX_OVERRIDES {
        return Err(RuleSetError::TooManyOverrides(overrides));
    }
    let mut out = BTreeMap::new();
    for t in wire {
        if limits.contains_key(&t.id) || out.contains_key(&t.id) {
            return Err(RuleSetError::DuplicateId(t.id));
        }
        let mut rule = TemplateRule::of_wire(t, max_cost);
        if let Some(why) = missing_slot(&rule, limits) {
            rule.hold_closed(why);
        }
        out.insert(rule.id().to_owned(), rule);
    }
    Ok(out)
}

/// Why a template's slots cannot serve its values: a slot limit the set lacks, or one that is
/// not a capacity limit.
fn missing_slot(t: &TemplateRule, limits: &BTreeMap<String, LimitRule>) -> Option<String> {
    (0..t.slots()).find_map(|k| {
        let id = crate::slots::slot_id(t.id(), k);
        match limits.get(&id) {
            None => Some(format!("the rule set lacks its slot limit {id:?}")),
            Some(l) if l.kind != LimitKind::Capacity => {
                Some(format!("its slot limit {id:?} is not a capacity limit"))
            }
            Some(_) => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(limits: Vec<LimitWire>) -> RulesWire {
        RulesWire {
            version: 3,
            region: "A".into(),
            limits,
            lease_ms: None,
            digest: None,
            base: None,
            templates: Vec::new(),
        }
    }

    fn slotted(id: &str, slots: u32) -> TemplateWire {
        TemplateWire {
            id: id.into(),
            entry: "api_key".into(),
            rate: 0.0,
            burst: 0.0,
            shadow: false,
            kind: LimitKind::Capacity,
            overrides: vec![crate::templates::OverrideWire {
                value: "partner".into(),
                rate: 7.0,
                burst: 14.0,
            }],
            slots,
        }
    }

    /// Two values in different slots of one template, found by the mapping.
    fn two_values_in_slots(slots: u32) -> ((String, u32), (String, u32)) {
        let of = |v: &str| crate::slots::slot_of(v, slots).unwrap_or(u32::MAX);
        let a = "key-0".to_string();
        let b = (1..)
            .map(|i| format!("key-{i}"))
            .find(|v| of(v) != of(&a))
            .unwrap_or_default();
        let (sa, sb) = (of(&a), of(&b));
        ((a, sa), (b, sb))
    }

    #[test]
    fn a_value_in_a_slot_takes_its_slots_numbers_and_a_slot_is_no_listed_limit() {
        use crate::slots::slot_id;
        let ((a, sa), (b, sb)) = two_values_in_slots(4);
        let limits: Vec<LimitWire> = (0..4)
            .map(|k| {
                limit(
                    &slot_id("per_key", k),
                    10.0 * f64::from(k + 1),
                    20.0 * f64::from(k + 1),
                )
            })
            .collect();
        let set = RuleSet::from_wire(
            RulesWire {
                templates: vec![slotted("per_key", 4)],
                ..wire(limits.clone())
            },
            None,
            1,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            set.rejected().count(),
            0,
            "{:?}",
            set.rejected().collect::<Vec<_>>()
        );
        let t = set.template("per_key").unwrap_or_else(|| panic!("per_key"));
        for (value, slot) in [(&a, sa), (&b, sb)] {
            let r = set.instance(t, value);
            let want = 10.0 * f64::from(slot + 1);
            assert_eq!((r.rate, r.burst), (want, 2.0 * want), "{value}");
            assert_eq!(r.id, crate::templates::instance_id("per_key", value));
            assert_eq!(r.rejected, None);
            // The repayment path finds the same numbers by the per-value id.
            assert_eq!(set.resolve_id(&r.id).map(|c| c.rate), Some(want));
        }
        // An override keeps its own (static) numbers.
        assert_eq!(set.instance(t, "partner").rate, 7.0);
        // No descriptor can name a slot limit as a listed limit.
        assert!(set.get(&slot_id("per_key", sa)).is_none());

        // A set without one of the slot limits holds the template closed.
        let short = RuleSet::from_wire(
            RulesWire {
                templates: vec![slotted("per_key", 4)],
                ..wire(limits[..3].to_vec())
            },
            None,
            1,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let t = short
            .template("per_key")
            .unwrap_or_else(|| panic!("per_key"));
        assert!(short.instance(t, &a).rejected.is_some());
        assert!(short.instance(t, "partner").rejected.is_some());
        // A slot at share 0 admits nothing: held closed, as a listed limit at 0 is.
        let mut zero = limits.clone();
        zero[sa as usize] = limit(&slot_id("per_key", sa), 0.0, 0.0);
        let set = RuleSet::from_wire(
            RulesWire {
                templates: vec![slotted("per_key", 4)],
                ..wire(zero)
            },
            None,
            1,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let t = set.template("per_key").unwrap_or_else(|| panic!("per_key"));
        assert!(set.instance(t, &a).rejected.is_some());
        assert_eq!(set.instance(t, &b).rejected, None);
    }

    fn digest_of(limits: &[LimitWire]) -> String {
        digest_hex(wire_digest(limits))
    }

    #[test]
    fn a_delta_applies_only_to_its_base_and_only_to_the_daemons_digest() {
        let v3 = vec![
            limit("a", 1.0, 2.0),
            limit("b", 5.0, 10.0),
            limit("c", 7.0, 14.0),
        ];
        let running =
            RuleSet::from_wire(wire(v3.clone()), Some("A"), 1).unwrap_or_else(|e| panic!("{e}"));
        // The whole set at version 5: b lowered.
        let mut v5 = v3.clone();
        v5[1] = limit("b", 4.0, 8.0);
        let mut whole = wire(v5.clone());
        whole.version = 5;
        let expected = RuleSet::from_wire(whole, Some("A"), 1).unwrap_or_else(|e| panic!("{e}"));
        let delta = |base: u64, limits: Vec<LimitWire>, digest: &str| RulesWire {
            version: 5,
            base: Some(base),
            digest: Some(digest.to_string()),
            ..wire(limits)
        };
        let good = delta(3, vec![limit("b", 4.0, 8.0)], &digest_of(&v5));
        let applied = running
            .apply_delta(good, 1)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(applied, expected);
        assert_eq!(applied.digest(), expected.digest());
        // The digest does not depend on the order limits come in.
        let mut shuffled = v5.clone();
        shuffled.reverse();
        assert_eq!(digest_of(&shuffled), digest_of(&v5));

        let refused = [
            delta(2, vec![limit("b", 4.0, 8.0)], &digest_of(&v5)),
            delta(3, vec![limit("b", 4.0, 8.0)], &digest_of(&v3)),
            delta(3, vec![limit("d", 4.0, 8.0)], &digest_of(&v5)),
            delta(
                3,
                vec![limit("b", 4.0, 8.0), limit("b", 4.0, 8.0)],
                &digest_of(&v5),
            ),
            // A delta that misses a change the daemon made: its result is not the daemon's set.
            delta(3, vec![], &digest_of(&v5)),
        ];
        for d in refused {
            assert!(
                running.apply_delta(d.clone(), 1).is_err(),
                "{d:?} was applied"
            );
        }
        // A delta is never taken for a whole set.
        assert!(matches!(
            RuleSet::from_wire(delta(3, v5, "0"), None, 1),
            Err(RuleSetError::Delta(_))
        ));
    }

    fn limit(id: &str, rate: f64, burst: f64) -> LimitWire {
        LimitWire {
            id: id.into(),
            rate,
            burst,
            shadow: false,
            kind: LimitKind::Capacity,
        }
    }

    #[test]
    fn a_limit_whose_burst_is_below_the_cost_is_held_closed() {
        let set = RuleSet::from_wire(
            wire(vec![limit("a", 1.0, 2.0), limit("b", 1.0, 5.0)]),
            None,
            3,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let rejected: Vec<_> = set.rejected().map(|(id, _)| id).collect();
        assert_eq!(rejected, ["a"]);
        assert!(set.get("b").is_some_and(|b| b.rejected.is_none()));
    }

    #[test]
    fn bad_numbers_and_ids_reject_the_limit_only() {
        let set = RuleSet::from_wire(
            wire(vec![
                limit("nan", f64::NAN, 2.0),
                limit("neg", 1.0, -2.0),
                limit("x{y}", 1.0, 2.0),
                limit("", 1.0, 2.0),
                limit("ok", 1.0, 2.0),
            ]),
            None,
            1,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let rejected: Vec<_> = set.rejected().map(|(id, _)| id).collect();
        assert_eq!(rejected, ["", "nan", "neg", "x{y}"]);
    }

    #[test]
    fn whole_set_problems_reject_the_set() {
        let dup = wire(vec![limit("a", 1.0, 2.0), limit("a", 1.0, 2.0)]);
        assert_eq!(
            RuleSet::from_wire(dup, None, 1),
            Err(RuleSetError::DuplicateId("a".into()))
        );
        let mut zero = wire(vec![]);
        zero.version = 0;
        assert_eq!(
            RuleSet::from_wire(zero, None, 1),
            Err(RuleSetError::ZeroVersion)
        );
        assert!(matches!(
            RuleSet::from_wire(wire(vec![]), Some("B"), 1),
            Err(RuleSetError::WrongRegion { .. })
        ));
        assert!(matches!(
            RuleSet::from_json(b"{\"version\":1}", None, 1),
            Err(RuleSetError::Malformed(_))
        ));
    }

    #[test]
    fn the_daemon_json_parses() {
        let body = br#"{"version":7,"region":"A","limits":[{"id":"k-big","rate":5600.0,
            "burst":11200.0,"shadow":false,"kind":"capacity"}],"future_field":1}"#;
        let set = RuleSet::from_json(body, Some("A"), 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(set.version(), 7);
        let l = set.get("k-big").unwrap_or_else(|| panic!("k-big missing"));
        assert_eq!(
            (l.rate, l.burst, l.kind),
            (5600.0, 11200.0, LimitKind::Capacity)
        );
    }
}
