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

#[derive(serde::Serialize)]
struct RuleJson<'a> {
    id: &'a str,
    /// Requests per second.
    rate: f64,
    /// Requests.
    burst: f64,
    shadow: bool,
    kind: &'static str,
}

#[derive(serde::Serialize)]
struct RuleSetJson<'a> {
    version: u64,
    region: &'a str,
    limits: Vec<RuleJson<'a>>,
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
            .map(|(spec, r)| RuleJson {
                id: &spec.id,
                rate: r.rate.as_rps(),
                burst: r.burst.as_rps(),
                shadow: r.shadow,
                kind: match spec.kind {
                    LimitKind::Capacity => "capacity",
                    LimitKind::Security { .. } => "security",
                },
            })
            .collect();
        let json = RuleSetJson {
            version,
            region,
            limits,
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

/// The early push before writing a decision: every limit at the lower of what is published and
/// what was decided. `None` when nothing is lower (or nothing was published yet). A limit that
/// is not lowered keeps its published rule exactly (recomputing its burst could round it
/// differently and change a rule set for nothing).
pub fn lowered(current: &RuleSet, decided: &[Rule]) -> Option<Vec<Rule>> {
    if current.version == 0 || current.rules.len() != decided.len() {
        return None;
    }
    let mut any = false;
    let rules = decided
        .iter()
        .zip(&current.rules)
        .map(|(r, cur)| {
            if r.rate < cur.rate {
                any = true;
                *r
            } else {
                Rule {
                    shadow: r.shadow,
                    ..*cur
                }
            }
        })
        .collect();
    any.then_some(rules)
}
