//! The rule set a Region publishes to its gateways (SPEC §7), serialized once per version.
//!
//! # Versions
//!
//! The rule-set version only goes up. A rule set from a durably written record of version `v`
//! has version `2v`; a lowered rule set pushed early, before the write of record `v` (a lowered
//! share is safe at once: docs/SPEC.md, departure D8), has version `2v − 1`. Record versions rise on every
//! write, across epochs, daemon restarts and leader changes, so rule-set versions do too. A
//! publisher refuses any rule set whose version is not above the current one, and one whose
//! rules equal the current ones (so a long-poll is answered only when something changed).

use axum::body::Bytes;
use shareplane_core::{Deployment, LimitKind, Room, Rule};
// The gateways' own wire type: one definition of the rule set for the side that writes it and
// the side that reads it.
use shareplane_limiter::{LimitKind as WireKind, LimitWire, RulesWire};

/// One published rule set, with its JSON body ready to send.
#[derive(Debug)]
pub struct RuleSet {
    pub version: u64,
    /// Rate per limit, by limit index (to compare with the next decision).
    pub rates: Vec<Room>,
    /// The rules themselves: a rule set equal to the published one is not published again.
    pub rules: Vec<Rule>,
    pub body: Bytes,
    /// The ETag header value: the version in quotes.
    pub etag: String,
}

impl RuleSet {
    /// The empty rule set (version 0) held before anything is published; never served.
    pub fn none() -> RuleSet {
        RuleSet {
            version: 0,
            rates: Vec::new(),
            rules: Vec::new(),
            body: Bytes::new(),
            etag: "\"0\"".into(),
        }
    }

    pub fn build(d: &Deployment, region: &str, version: u64, rules: &[Rule]) -> RuleSet {
        let limits = d
            .limits
            .iter()
            .zip(rules)
            .map(|(spec, r)| LimitWire {
                id: spec.id.clone(),
                rate: r.rate.as_rps(),
                burst: r.burst.as_rps(),
                shadow: r.shadow,
                kind: match spec.kind {
                    LimitKind::Capacity => WireKind::Capacity,
                    LimitKind::Security { .. } => WireKind::Security,
                },
            })
            .collect();
        // The lease is put in front of the other fields per answer (`api::rule_response`).
        let json = RulesWire {
            version,
            region: region.to_string(),
            limits,
            lease_ms: None,
        };
        // Serializing plain structs of numbers, strings and bools cannot fail.
        let body = serde_json::to_vec(&json).unwrap_or_default();
        RuleSet {
            version,
            rates: rules.iter().map(|r| r.rate).collect(),
            rules: rules.to_vec(),
            body: Bytes::from(body),
            etag: format!("\"{version}\""),
        }
    }
}

impl RuleSet {
    /// The body of one answer: the lease changes with every answer while the rest is serialized
    /// once per version, so `lease_ms` is put in front of the other fields (one copy of the body).
    pub fn body_with_lease(&self, lease_ms: u64) -> Bytes {
        match self.body.strip_prefix(b"{") {
            Some(rest) => {
                let head = format!("{{\"lease_ms\":{lease_ms},");
                let mut b = Vec::with_capacity(head.len() + rest.len());
                b.extend_from_slice(head.as_bytes());
                b.extend_from_slice(rest);
                Bytes::from(b)
            }
            None => self.body.clone(),
        }
    }
}

/// The early push before writing a decision ([`Rule::before_write`]); `None` before anything is
/// published.
pub fn lowered(current: &RuleSet, decided: &[Rule]) -> Option<Vec<Rule>> {
    if current.version == 0 {
        return None;
    }
    Rule::before_write(&current.rules, decided)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_what_a_gateway_parses_with_its_lease_and_every_number() {
        let mut d = crate::demo::deployment(1_000).unwrap_or_else(|e| panic!("{e}"));
        let mut security = d.limits[0].clone();
        security.id = "login".into();
        security.kind = LimitKind::Security { home: None };
        d.limits.push(security);
        let room = |rps: f64| Room::from_rps(rps).unwrap_or_else(|e| panic!("{e}"));
        let rules: Vec<Rule> = (d.limits.iter().enumerate())
            .map(|(i, _)| Rule {
                rate: room(100.0 + i as f64 * 0.5),
                burst: room(200.0 + i as f64),
                shadow: i % 2 == 1,
            })
            .collect();
        let set = RuleSet::build(&d, "eu-west-1", 42, &rules);
        let body = set.body_with_lease(1_500);
        let wire: RulesWire = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(wire.lease_ms, Some(1_500));
        let parsed = shareplane_limiter::RuleSet::from_wire(wire, Some("eu-west-1"), 1)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.version(), 42);
        assert_eq!(parsed.limits().count(), d.limits.len());
        for (spec, r) in d.limits.iter().zip(&rules) {
            let got = parsed
                .get(&spec.id)
                .unwrap_or_else(|| panic!("{} missing", spec.id));
            assert_eq!(
                (got.rate, got.burst, got.shadow),
                (r.rate.as_rps(), r.burst.as_rps(), r.shadow)
            );
            assert_eq!(got.rejected, None);
            let kind = match spec.kind {
                LimitKind::Capacity => WireKind::Capacity,
                LimitKind::Security { .. } => WireKind::Security,
            };
            assert_eq!(got.kind, kind);
        }
    }
}
