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

/// The most limits one rule set may carry (a daemon runs up to as many).
pub const MAX_LIMITS: usize = 100_000;
/// The longest limit id, in bytes.
pub const MAX_ID_LEN: usize = 128;
/// The largest rate or burst accepted (requests/s or requests).
pub const MAX_RATE: f64 = 1e12;

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
}

/// One limit of a published rule set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LimitWire {
    pub id: String,
    /// Requests per second (the Region's share).
    pub rate: f64,
    /// Requests (2 s of the share).
    pub burst: f64,
    #[serde(default)]
    pub shadow: bool,
    pub kind: LimitKind,
}

/// What a gateway does with a limit when Redis does not answer (SPEC.md §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LimitKind {
    /// Moves between Regions; falls back to a local per-gateway bucket.
    Capacity,
    /// Never moves; fails closed.
    Security,
}

/// A validated rule set.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleSet {
    version: u64,
    region: String,
    limits: BTreeMap<String, LimitRule>,
}

/// One limit as the gateway runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitRule {
    pub id: String,
    pub rate: f64,
    pub burst: f64,
    pub shadow: bool,
    pub kind: LimitKind,
    /// `Some(reason)` when the limit was rejected at load time and is held closed.
    pub rejected: Option<String>,
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
    #[error("rule set is not valid JSON of the expected shape: {0}")]
    Malformed(String),
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
        let mut limits = BTreeMap::new();
        for l in wire.limits {
            if limits.contains_key(&l.id) {
                return Err(RuleSetError::DuplicateId(l.id));
            }
            let rejected = limit_problem(&l, max_cost);
            let rule = LimitRule {
                id: l.id.clone(),
                rate: l.rate,
                burst: l.burst,
                shadow: l.shadow,
                kind: l.kind,
                rejected,
            };
            limits.insert(l.id, rule);
        }
        Ok(Self {
            version: wire.version,
            region: wire.region,
            limits,
        })
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

    pub fn get(&self, id: &str) -> Option<&LimitRule> {
        self.limits.get(id)
    }

    /// The limits in id order.
    pub fn limits(&self) -> impl Iterator<Item = &LimitRule> {
        self.limits.values()
    }

    /// The limits rejected at load time, with the reason.
    pub fn rejected(&self) -> impl Iterator<Item = (&str, &str)> {
        self.limits
            .values()
            .filter_map(|l| l.rejected.as_deref().map(|r| (l.id.as_str(), r)))
    }
}

/// Whether `id` can name a bucket key: 1 to [`MAX_ID_LEN`] bytes of printable ASCII other than the
/// hash-tag braces and space, so that `rl:{<id>}:global` always has exactly the tag `<id>`.
pub fn valid_limit_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'{' && b != b'}')
}

fn limit_problem(l: &LimitWire, max_cost: u32) -> Option<String> {
    if !valid_limit_id(&l.id) {
        return Some(format!(
            "id must be 1 to {MAX_ID_LEN} printable ASCII characters without braces or spaces"
        ));
    }
    for (name, x) in [("rate", l.rate), ("burst", l.burst)] {
        if !(0.0..=MAX_RATE).contains(&x) {
            return Some(format!(
                "{name} {x} is not a finite number in [0, {MAX_RATE}]"
            ));
        }
    }
    if l.burst < f64::from(max_cost) {
        return Some(format!(
            "burst {} is below the cost {max_cost} this gateway may charge: no call could ever pass",
            l.burst
        ));
    }
    None
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
        }
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
