//! What reaches the gateways: one rule per limit (SPEC §7).

use crate::config::{Deployment, LimitKind, LimitSpec};
use crate::record::RegionRecord;
use crate::region::RegionId;
use crate::room::Room;

/// What to push to the Region's limiters for one limit (SPEC §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Refill rate: the share.
    pub rate: Room,
    /// Bucket size in milli-requests: `burst_ms / 1000 × share`.
    pub burst: Room,
    pub shadow: bool,
}

impl Rule {
    /// The rule of limit `spec` at share `rate`: its bucket holds `burst_ms` of it.
    pub fn at(spec: &LimitSpec, rate: Room) -> Rule {
        Rule {
            rate,
            burst: rate.mul_div(spec.burst_ms, 1000),
            shadow: spec.shadow,
        }
    }

    /// The rules a written record stands for, one per limit of `d` (a limit the record does not
    /// hold yet at zero): what a replica that does not lead serves.
    pub fn of_record(d: &Deployment, record: &RegionRecord) -> Vec<Rule> {
        d.limits
            .iter()
            .enumerate()
            .map(|(i, spec)| Rule::at(spec, record.limits.get(i).map_or(Room::ZERO, |l| l.share)))
            .collect()
    }

    /// The version of the rule set that the rules of record version `v` form: `2v`. Record
    /// versions rise on every write, across epochs, restarts and leader changes, so rule-set
    /// versions do too.
    pub fn set_version(record_version: u64) -> u64 {
        record_version.saturating_mul(2)
    }

    /// The version of the rule set pushed early, before record version `v` is written
    /// ([`Rule::before_write`], or [`Rule::zeroed`] of a new epoch): `2v − 1`, between the rules
    /// of the record before and those of `v` itself.
    pub fn early_set_version(record_version: u64) -> u64 {
        Rule::set_version(record_version).saturating_sub(1)
    }

    /// What may reach the gateways before a decision is written (SPEC §7, docs/SPEC.md D8): a
    /// lowered share is safe at once, a raised one only once the record that raises it is
    /// durable (a peer may take the room it came from only after reading that record). So: every
    /// limit at the lower of what the gateways run (`published`) and what was `decided`. `None`
    /// when nothing is lower, or when the two do not cover the same limits (a reload between the
    /// two: the full rule set follows the write). A limit that is not lowered keeps its
    /// published rule exactly (recomputing its burst could round it differently and change a
    /// rule set for nothing); the shadow flag is the decided one.
    pub fn before_write(published: &[Rule], decided: &[Rule]) -> Option<Vec<Rule>> {
        if published.len() != decided.len() {
            return None;
        }
        let mut any = false;
        let rules = decided
            .iter()
            .zip(published)
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

    /// What a Region that cannot prove it still holds its room pushes before anything else (a
    /// new epoch, SPEC §7): every capacity limit at zero, every security limit at its static
    /// split.
    pub fn zeroed(d: &Deployment, me: RegionId) -> Vec<Rule> {
        d.limits
            .iter()
            .map(|spec| {
                let rate = match spec.kind {
                    LimitKind::Capacity => Room::ZERO,
                    LimitKind::Security { .. } => spec.security_share(d.n(), me),
                };
                Rule::at(spec, rate)
            })
            .collect()
    }
}
