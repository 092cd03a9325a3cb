//! One limit: its wire form ([`LimitWire`]), its kind, the rule a gateway runs ([`LimitRule`]),
//! and the checks of one limit that listed limits and templates share. [`crate::rules`]
//! re-exports these.

use serde::{Deserialize, Serialize};

/// The longest limit id, in bytes.
pub const MAX_ID_LEN: usize = 128;
/// The largest rate or burst accepted (requests/s or requests).
pub const MAX_RATE: f64 = 1e12;

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

/// Whether `id` can name a bucket key: 1 to [`MAX_ID_LEN`] bytes of printable ASCII other than the
/// hash-tag braces and space, so that `rl:{<id>}:global` always has exactly the tag `<id>`.
pub fn valid_limit_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'{' && b != b'}')
}

/// Why one limit cannot be enforced (it is then held closed), or `None`.
pub(crate) fn limit_problem(l: &LimitWire, max_cost: u32) -> Option<String> {
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
