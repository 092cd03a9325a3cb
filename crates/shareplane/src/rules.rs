//! The rule set a Region publishes to its gateways (SPEC §7), serialized once per version.
//!
//! # Versions
//!
//! The rule-set version only goes up. A rule set from a durably written record of version `v`
//! has version `2v` ([`shareplane_core::Rule::set_version`]); a lowered rule set pushed early,
//! before the write of record `v` (a lowered share is safe at once: docs/SPEC.md, departure D8),
//! has version `2v − 1` ([`shareplane_core::Rule::early_set_version`]). Record versions rise on every
//! write, across epochs, daemon restarts and leader changes, so rule-set versions do too. A
//! publisher refuses any rule set whose version is not above the current one, and one whose
//! rules equal the current ones (so a long-poll is answered only when something changed).
//!
//! # Deltas
//!
//! Every set carries its digest (`shareplane_limiter::limits_digest`) and, for each limit, the
//! version at which this replica last published a change of it. A gateway that runs a set this
//! replica published, one of its last [`DELTA_BASES`], and names its version and digest
//! (`?after=V&delta=DIGEST`) gets only the limits changed since; it checks the result against
//! the digest of the whole new set. A change of which limits exist (or their order) starts
//! afresh: the next answer to every gateway is whole.
//!
//! # Templates
//!
//! Every set, whole or delta, carries this Region's part of every template
//! ([`crate::templates`]) whole: they are few and their parts change only with a reload. The
//! digest covers them (`shareplane_limiter::set_digest`), so a gateway never runs a delta whose
//! templates differ from the daemon's. A set without templates keeps the digest it had before templates
//! existed; a gateway that predates templates ignores them (and, while the set has some, its
//! digest differs from the daemon's, so it refuses deltas and takes every set whole).

use axum::body::Bytes;
use shareplane_core::{Deployment, LimitKind, Room, Rule};
// The gateways' own wire type: one definition of the rule set for the side that writes it and
// the side that reads it.
use shareplane_limiter::{
    digest_hex, set_digest, LimitKind as WireKind, LimitWire, RulesWire, TemplateWire,
};
use std::sync::Arc;

/// How many of its latest rule sets a replica answers deltas from.
pub const DELTA_BASES: usize = 16;

/// One published rule set, with its JSON body ready to send.
#[derive(Debug)]
pub struct RuleSet {
    pub version: u64,
    /// Rate per limit, by limit index (to compare with the next decision).
    pub rates: Vec<Room>,
    /// The rules themselves: a rule set equal to the published one is not published again.
    pub rules: Vec<Rule>,
    /// This Region's part of every template (compared as the rules are).
    pub templates: Arc<Vec<TemplateWire>>,
    pub body: Bytes,
    /// The ETag header value: the version in quotes.
    pub etag: String,
    /// The Region and the limits as sent, by limit index.
    region: String,
    wire: Vec<LimitWire>,
    /// `wire_digest` of `wire`.
    pub digest: u64,
    /// By limit index, the version at which this replica last published a change of that limit
    /// (this set's own version for every limit when it follows nothing comparable).
    changed_at: Vec<u64>,
    /// `(version, digest)` of this replica's latest sets whose limits are laid out as this
    /// one's, this one last: the bases a delta may start from.
    bases: Vec<(u64, u64)>,
}

impl RuleSet {
    /// The empty rule set (version 0) held before anything is published; never served.
    pub fn none() -> RuleSet {
        RuleSet {
            version: 0,
            rates: Vec::new(),
            rules: Vec::new(),
            templates: Arc::new(Vec::new()),
            body: Bytes::new(),
            etag: "\"0\"".into(),
            region: String::new(),
            wire: Vec::new(),
            digest: 0,
            changed_at: Vec::new(),
            bases: Vec::new(),
        }
    }

    /// The rule set of `rules` (one per limit of `d`) and `templates` (this Region's parts).
    pub fn build(
        d: &Deployment,
        templates: &Arc<Vec<TemplateWire>>,
        region: &str,
        version: u64,
        rules: &[Rule],
    ) -> RuleSet {
        let limits: Vec<LimitWire> = d
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
        let digest = set_digest(&limits, templates);
        // The lease is put in front of the other fields per answer (`api::rule_response`).
        let mut json = RulesWire {
            version,
            region: region.to_string(),
            limits,
            lease_ms: None,
            digest: Some(digest_hex(digest)),
            base: None,
            templates: templates.to_vec(),
        };
        // Serializing plain structs of numbers, strings and bools cannot fail.
        // Without the spare capacity the buffer grew by (up to as much again: 8.8 MB of body
        // held in 16 MB at 100,000 limits).
        let body = serde_json::to_vec(&json)
            .unwrap_or_default()
            .into_boxed_slice();
        let wire = std::mem::take(&mut json.limits);
        RuleSet {
            version,
            rates: rules.iter().map(|r| r.rate).collect(),
            rules: rules.to_vec(),
            templates: templates.clone(),
            body: Bytes::from(body),
            etag: format!("\"{version}\""),
            changed_at: vec![version; wire.len()],
            bases: vec![(version, digest)],
            region: region.to_string(),
            wire,
            digest,
        }
    }

    /// This set as the successor of `prev`, the set this replica published before it: each
    /// limit's version of last change is carried over where the limit did not change, and `prev`'s
    /// bases are kept, when both sets name the same limits in the same order.
    pub fn after(mut self, prev: &RuleSet) -> RuleSet {
        let same_layout = prev.version > 0
            && prev.version < self.version
            && prev.wire.len() == self.wire.len()
            && prev.wire.iter().zip(&self.wire).all(|(a, b)| a.id == b.id);
        if !same_layout {
            return self;
        }
        for (i, (old, new)) in prev.wire.iter().zip(&self.wire).enumerate() {
            if old == new {
                self.changed_at[i] = prev.changed_at[i];
            }
        }
        let keep = prev.bases.len().min(DELTA_BASES - 1);
        let mut bases = prev.bases[prev.bases.len() - keep..].to_vec();
        bases.push((self.version, self.digest));
        self.bases = bases;
        self
    }

    /// The body of a delta from `base` for a gateway that runs the set of that version with
    /// digest `digest` (hex), with `lease_ms`: the limits changed since, this set's version and
    /// digest. `None` when this replica did not publish that set among its latest
    /// [`DELTA_BASES`] (or the layout changed since): the gateway gets the whole set.
    pub fn delta_body(&self, base: u64, digest: &str, lease_ms: u64) -> Option<Bytes> {
        if base >= self.version {
            return None;
        }
        let known = self
            .bases
            .iter()
            .any(|&(v, d)| v == base && digest_hex(d) == digest);
        if !known {
            return None;
        }
        let limits = (self.wire.iter().zip(&self.changed_at))
            .filter(|(_, &at)| at > base)
            .map(|(l, _)| l.clone())
            .collect();
        let json = RulesWire {
            version: self.version,
            region: self.region.clone(),
            limits,
            lease_ms: Some(lease_ms),
            digest: Some(digest_hex(self.digest)),
            base: Some(base),
            templates: self.templates.to_vec(),
        };
        serde_json::to_vec(&json).ok().map(Bytes::from)
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
        let templates = Arc::new(crate::templates::wire(
            &[crate::demo::per_api_key()],
            3,
            shareplane_core::RegionId::new(0).unwrap_or_else(|| panic!("A")),
        ));
        let set = RuleSet::build(&d, &templates, "eu-west-1", 42, &rules);
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
        // The template at A's part: 100/s over 3 Regions, 33.334 (2 s of it the burst).
        let t = parsed
            .template("per_api_key")
            .unwrap_or_else(|| panic!("no template"));
        assert_eq!(
            (t.entry.as_str(), t.base.rate, t.base.burst),
            ("api_key", 33.334, 66.668)
        );
        assert_eq!(
            parsed.digest(),
            set.digest,
            "the gateway's digest is the daemon's"
        );
    }

    #[test]
    fn deltas_start_only_from_this_replicas_latest_sets_of_the_same_limits() {
        let d = crate::demo::deployment(1_000).unwrap_or_else(|e| panic!("{e}"));
        let mut wide = d.clone();
        let mut extra = d.limits[0].clone();
        extra.id = "extra".into();
        wide.limits.push(extra);
        let at = |d: &Deployment, rps: u64| -> Vec<Rule> {
            d.limits
                .iter()
                .map(|l| Rule::at(l, Room::rps(rps)))
                .collect()
        };
        let hex = |r: &RuleSet| digest_hex(r.digest);
        let none = Arc::new(Vec::new());
        let mut sets = vec![RuleSet::build(&d, &none, "A", 2, &at(&d, 100))];
        for v in 2..=(DELTA_BASES as u64 + 2) {
            let prev = sets.last().unwrap_or_else(|| panic!("none"));
            let next = RuleSet::build(&d, &none, "A", 2 * v, &at(&d, 100 + v)).after(prev);
            sets.push(next);
        }
        let last = sets.last().unwrap_or_else(|| panic!("none"));
        // The latest DELTA_BASES sets are bases (the last is itself); older ones are not.
        let recent = &sets[sets.len() - DELTA_BASES..sets.len() - 1];
        for s in recent {
            assert!(
                last.delta_body(s.version, &hex(s), 0).is_some(),
                "from {}",
                s.version
            );
            assert!(last.delta_body(s.version, "0000000000000000", 0).is_none());
        }
        assert!(last
            .delta_body(sets[0].version, &hex(&sets[0]), 0)
            .is_none());
        // A change of which limits exist starts afresh.
        let widened =
            RuleSet::build(&wide, &none, "A", last.version + 2, &at(&wide, 7)).after(last);
        assert!(widened.delta_body(last.version, &hex(last), 0).is_none());
        // A delta carries what changed since its base, and the digest of the whole new set.
        let base = &sets[sets.len() - 2];
        let body = last
            .delta_body(base.version, &hex(base), 5)
            .unwrap_or_else(|| panic!("no delta"));
        let wire: RulesWire = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (wire.base, wire.version, wire.lease_ms),
            (Some(base.version), last.version, Some(5))
        );
        assert_eq!(wire.limits.len(), d.limits.len());
        assert_eq!(wire.digest, Some(hex(last)));
    }
}
