//! Templates: one limit defined once for every distinct value of a descriptor entry (an API key, a
//! user, a client address, a header), each value with a bucket of its own.
//!
//! The daemon publishes each template with this Region's part of its rate (and of each per-value
//! override's rate): a static split of the rate over the Regions, so that the Regions' parts add up
//! to the rate exactly (docs/PROTOCOL.md, "Templates"). A gateway then keeps **one Redis key per
//! value**, `rl:{<key group>}:<template>#<hash>`, where `<hash>` is 32 hex digits of SHA-256 of the
//! value. Values are untrusted input:
//!
//! - their length is bounded ([`MAX_VALUE_LEN`]); the gateway refuses longer ones by a stated
//!   policy, never truncates them (two values cut to one prefix would share a bucket);
//! - they reach Redis only hashed, so a key's size is bounded and no value can inject key syntax
//!   or a cluster hash tag; SHA-256 makes it infeasible to find a value whose bucket is another
//!   value's;
//! - every per-value key lives under a TTL (the bucket script's: at least the time a full
//!   refill takes), and a bucket that expired comes back full, which is where an idle bucket
//!   would be anyway: no state is needed for an idle value;
//! - nothing in the gateway's memory grows with the number of values: a per-value bucket exists
//!   only in Redis, and the local fallback holds at most [`MAX_FALLBACK_VALUES`] of them.
//!
//! Per-value ids (`<template>#<hash>`) are the limiter's internal names of those buckets: `#` is
//! reserved for them and for a template's slot limits (`<template>#slot<k>`, [`crate::slots`]),
//! so no listed limit or template id may hold one.
//!
//! A template with `slots` > 0 is published with rate and burst 0: its values take their
//! numbers from their slots' limits ([`crate::rules::RuleSet::instance`]), and a gateway that
//! predates slots holds such a template closed rather than admitting a static part.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::limit::{limit_problem, valid_limit_id, LimitKind, LimitRule, LimitWire};

/// The most templates one rule set may carry.
pub const MAX_TEMPLATES: usize = 1_000;
/// The most per-value overrides, over all templates of a rule set.
pub const MAX_OVERRIDES: usize = 100_000;
/// The longest value (bytes) a template takes from a descriptor entry.
pub const MAX_VALUE_LEN: usize = 256;
/// The longest entry key (bytes).
pub const MAX_ENTRY_LEN: usize = 128;
/// The most per-value buckets the local fallback holds while Redis is away; a value beyond them
/// is refused until Redis answers again (see [`crate::fallback`]).
pub const MAX_FALLBACK_VALUES: usize = 65_536;
/// What separates a template id from a value's hash in a per-value id.
pub const INSTANCE_SEP: char = '#';

/// One template of a published rule set: what every value of `entry` gets in this Region.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TemplateWire {
    pub id: String,
    /// The descriptor entry key whose value selects the bucket (`api_key`, `remote_address`…).
    pub entry: String,
    /// This Region's part of each value's rate (requests/s).
    pub rate: f64,
    /// Each value's bucket (requests).
    pub burst: f64,
    #[serde(default)]
    pub shadow: bool,
    pub kind: LimitKind,
    /// Values with numbers of their own (this Region's parts too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<OverrideWire>,
    /// Coordination slots ([`crate::slots`]); 0: every value at `rate` and `burst` (the static
    /// split).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub slots: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One value's own numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverrideWire {
    pub value: String,
    pub rate: f64,
    pub burst: f64,
}

/// A validated template, as the gateway runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateRule {
    /// The template's own numbers: `id` is the template's, `rejected` says whether the whole
    /// template is held closed.
    pub base: LimitRule,
    pub entry: String,
    /// Per value hash: the override's rate, burst and, if it was rejected, why.
    overrides: HashMap<String, (f64, f64, Option<String>)>,
    /// Coordination slots (0: none; the values use `base`'s numbers).
    slots: u32,
}

/// Why a value cannot select a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueProblem {
    /// Empty: no value at all.
    Missing,
    /// Longer than [`MAX_VALUE_LEN`].
    TooLong,
}

/// Checks a value a descriptor carries for a template.
pub fn check_value(value: &str) -> Result<(), ValueProblem> {
    if value.is_empty() {
        Err(ValueProblem::Missing)
    } else if value.len() > MAX_VALUE_LEN {
        Err(ValueProblem::TooLong)
    } else {
        Ok(())
    }
}

/// 32 hex digits of SHA-256 of `value`: what a value is called in keys and per-value ids.
pub fn value_hash(value: &str) -> String {
    let digest = Sha256::digest(value.as_bytes());
    let mut out = String::with_capacity(32);
    for b in &digest[..16] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The per-value id of `value` under template `template`.
pub fn instance_id(template: &str, value: &str) -> String {
    format!("{template}{INSTANCE_SEP}{}", value_hash(value))
}

/// `(template, hash)` of a per-value id (the hash 32 hex digits); `None` for any other id, a
/// slot limit's included.
pub fn instance_parts(id: &str) -> Option<(&str, &str)> {
    id.split_once(INSTANCE_SEP)
        .filter(|(_, h)| h.len() == 32 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The template (or listed limit) id a limiter id belongs to.
pub fn base_id(id: &str) -> &str {
    instance_parts(id).map_or(id, |(t, _)| t)
}

impl TemplateRule {
    /// Validates one template; a problem holds the template (or only the value an override
    /// names) closed, as a bad listed limit is.
    pub fn of_wire(t: TemplateWire, max_cost: u32) -> TemplateRule {
        let as_limit = LimitWire {
            id: t.id.clone(),
            rate: t.rate,
            burst: t.burst,
            shadow: t.shadow,
            kind: t.kind,
        };
        let mut rejected = if t.slots == 0 {
            limit_problem(&as_limit, max_cost)
        } else {
            slotted_problem(&t, max_cost)
        };
        if rejected.is_none() && t.id.contains(INSTANCE_SEP) {
            rejected = Some(format!("id may not hold {INSTANCE_SEP:?}"));
        }
        let entry_ok = !t.entry.is_empty()
            && t.entry.len() <= MAX_ENTRY_LEN
            && t.entry.bytes().all(|b| b.is_ascii_graphic());
        if rejected.is_none() && !entry_ok {
            rejected = Some(format!(
                "entry must be 1 to {MAX_ENTRY_LEN} printable ASCII characters"
            ));
        }
        let mut overrides = HashMap::with_capacity(t.overrides.len());
        for o in t.overrides {
            let wire = LimitWire {
                rate: o.rate,
                burst: o.burst,
                ..as_limit.clone()
            };
            let problem = match check_value(&o.value) {
                Err(_) => Some(format!("override value must be 1 to {MAX_VALUE_LEN} bytes")),
                Ok(()) => limit_problem(&wire, max_cost),
            };
            let hash = value_hash(&o.value);
            if overrides.insert(hash, (o.rate, o.burst, problem)).is_some() && rejected.is_none() {
                rejected = Some(format!("override value {:?} appears twice", o.value));
            }
        }
        TemplateRule {
            base: LimitRule {
                id: t.id,
                rate: t.rate,
                burst: t.burst,
                shadow: t.shadow,
                kind: t.kind,
                rejected,
            },
            entry: t.entry,
            overrides,
            slots: t.slots,
        }
    }

    pub fn id(&self) -> &str {
        &self.base.id
    }

    /// Its coordination slots (0: none).
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// The slot of the value whose hash is `hash`, when its numbers come from a slot: the
    /// template has slots, is not held closed, and the value has no override (overrides keep
    /// their static split).
    pub fn slot_of(&self, hash: &str) -> Option<u32> {
        if self.slots == 0 || self.base.rejected.is_some() || self.overrides.contains_key(hash) {
            return None;
        }
        crate::slots::slot_of_hash(hash, self.slots)
    }

    /// Holds the whole template closed for `why` (a slot limit the rule set lacks).
    pub(crate) fn hold_closed(&mut self, why: String) {
        self.base.rejected.get_or_insert(why);
    }

    /// How many values have numbers of their own.
    pub fn override_count(&self) -> usize {
        self.overrides.len()
    }

    /// The rule of the bucket of the value whose hash is `hash` by the template's own numbers
    /// (its override's where it has one). A value in a slot ([`TemplateRule::slot_of`]) takes
    /// its slot's numbers instead: [`crate::rules::RuleSet::instance`] knows both.
    pub(crate) fn by_hash(&self, hash: &str) -> LimitRule {
        let id = format!("{}{INSTANCE_SEP}{hash}", self.base.id);
        let mut rule = LimitRule {
            id,
            ..self.base.clone()
        };
        if rule.rejected.is_none() {
            if let Some((rate, burst, problem)) = self.overrides.get(hash) {
                rule.rate = *rate;
                rule.burst = *burst;
                rule.rejected.clone_from(problem);
            }
        }
        rule
    }

    /// What the rule-set digest covers of this template, in a fixed order.
    pub(crate) fn digest_parts(&self) -> Vec<(String, f64, f64, bool, LimitKind)> {
        let b = &self.base;
        // Without slots, the digest a template had before slots existed.
        let slots = match self.slots {
            0 => String::new(),
            k => format!("\u{0}slots={k}"),
        };
        let mut parts = vec![(
            format!("{}\u{0}{}{slots}", b.id, self.entry),
            b.rate,
            b.burst,
            b.shadow,
            b.kind,
        )];
        let mut values: Vec<_> = self.overrides.iter().collect();
        values.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (hash, (rate, burst, _)) in values {
            parts.push((
                format!("{}\u{0}{hash}", b.id),
                *rate,
                *burst,
                b.shadow,
                b.kind,
            ));
        }
        parts
    }
}

/// Why a template with slots cannot run (its own numbers are 0 by design and not checked).
fn slotted_problem(t: &TemplateWire, max_cost: u32) -> Option<String> {
    let id_only = LimitWire {
        id: t.id.clone(),
        rate: 0.0,
        burst: f64::from(max_cost),
        shadow: t.shadow,
        kind: t.kind,
    };
    if let Some(why) = limit_problem(&id_only, max_cost) {
        Some(why)
    } else if t.slots > crate::slots::MAX_SLOTS {
        Some(format!(
            "{} slots: at most {}",
            t.slots,
            crate::slots::MAX_SLOTS
        ))
    } else if t.kind != LimitKind::Capacity {
        Some("a security template has no slots".to_owned())
    } else {
        None
    }
}

/// Whether `id` may name a template: a limit id without [`INSTANCE_SEP`].
pub fn valid_template_id(id: &str) -> bool {
    valid_limit_id(id) && !id.contains(INSTANCE_SEP)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(overrides: Vec<OverrideWire>) -> TemplateWire {
        TemplateWire {
            id: "per_api_key".into(),
            entry: "api_key".into(),
            rate: 100.0,
            burst: 200.0,
            shadow: false,
            kind: LimitKind::Capacity,
            overrides,
            slots: 0,
        }
    }

    fn over(value: &str, rate: f64) -> OverrideWire {
        OverrideWire {
            value: value.into(),
            rate,
            burst: 2.0 * rate,
        }
    }

    #[test]
    fn a_value_is_named_by_a_fixed_size_hash_that_cannot_carry_key_syntax() {
        let h = value_hash("}{rl:evil} \n");
        assert_eq!(h.len(), 32);
        assert!(h.bytes().all(|b| b.is_ascii_hexdigit()), "{h}");
        assert_eq!(value_hash("a"), value_hash("a"));
        assert_ne!(value_hash("a"), value_hash("b"));
        let id = instance_id("per_api_key", &"x".repeat(MAX_VALUE_LEN));
        assert_eq!(id.len(), "per_api_key".len() + 1 + 32);
        assert_eq!(instance_parts(&id).map(|p| p.0), Some("per_api_key"));
        assert_eq!(base_id(&id), "per_api_key");
        assert_eq!(base_id("k-big"), "k-big");
    }

    #[test]
    fn a_values_slot_is_the_same_from_the_value_and_from_its_hash() {
        use crate::slots::{slot_of, slot_of_hash, SLOT_MARK};
        assert!(SLOT_MARK.starts_with(INSTANCE_SEP));
        for (i, k) in (0..500).zip([1u32, 3, 64, 4096].into_iter().cycle()) {
            let v = format!("value-{i}");
            assert_eq!(slot_of(&v, k), slot_of_hash(&value_hash(&v), k), "{v} {k}");
        }
    }

    #[test]
    fn values_are_bounded_and_overrides_give_their_own_numbers() {
        assert_eq!(check_value(""), Err(ValueProblem::Missing));
        assert_eq!(check_value(&"v".repeat(MAX_VALUE_LEN)), Ok(()));
        assert_eq!(
            check_value(&"v".repeat(MAX_VALUE_LEN + 1)),
            Err(ValueProblem::TooLong)
        );
        let t = TemplateRule::of_wire(
            template(vec![over("partner", 1_000.0), over("broke", f64::NAN)]),
            1,
        );
        assert_eq!(t.base.rejected, None);
        let anyone = t.by_hash(&value_hash("someone"));
        assert_eq!((anyone.rate, anyone.burst), (100.0, 200.0));
        assert_eq!(anyone.id, instance_id("per_api_key", "someone"));
        let partner = t.by_hash(&value_hash("partner"));
        assert_eq!((partner.rate, partner.burst), (1_000.0, 2_000.0));
        assert_eq!(partner.rejected, None);
        // A bad override holds only its own value closed.
        assert!(t.by_hash(&value_hash("broke")).rejected.is_some());
        assert_eq!(
            t.by_hash(&value_hash("partner")).rate,
            1_000.0,
            "the repayment path finds the override by hash"
        );
    }

    #[test]
    fn a_bad_template_is_held_closed_whole() {
        let bad = |f: &dyn Fn(&mut TemplateWire)| {
            let mut t = template(vec![]);
            f(&mut t);
            TemplateRule::of_wire(t, 1).base.rejected
        };
        assert!(bad(&|t| t.id = "a#b".into()).is_some());
        assert!(bad(&|t| t.entry = String::new()).is_some());
        assert!(bad(&|t| t.rate = -1.0).is_some());
        assert!(bad(&|t| t.overrides = vec![over("p", 1.0), over("p", 2.0)]).is_some());
        assert!(bad(&|_| {}).is_none());
        let closed = TemplateRule::of_wire(
            TemplateWire {
                burst: f64::NAN,
                ..template(vec![over("p", 5.0)])
            },
            1,
        );
        assert!(
            closed.by_hash(&value_hash("p")).rejected.is_some(),
            "an override does not reopen a closed template"
        );
    }
}
