//! A stable digest of the limits a Region runs, so that Regions can tell that they disagree.
//!
//! The hash is FNV-1a (64 bits), written out here: unlike `std`'s `DefaultHasher` its output is
//! fixed by its definition, so daemons built by different Rust versions agree on it.

use crate::config::{LimitKind, LimitSpec};

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a over `bytes`, continuing from `h` (start with [`fnv1a_64`] for a fresh hash).
fn fnv_more(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// FNV-1a (64 bits) of `bytes`.
pub fn fnv1a_64(bytes: &[u8]) -> u64 {
    fnv_more(FNV_OFFSET, bytes)
}

/// The digest of a set of limits: each limit's id, kind (and home), version and rate, in the
/// order of their ids, so that the order of a configuration file does not matter. Settings a
/// Region may run differently without harm to the others (floor, step cap, burst, shadow) are
/// left out.
pub fn limits_digest(limits: &[LimitSpec]) -> u64 {
    let mut sorted: Vec<&LimitSpec> = limits.iter().collect();
    sorted.sort_by(|a, b| a.id.cmp(&b.id));
    let mut h = FNV_OFFSET;
    for l in sorted {
        // The length first, so that ids cannot run into the fields after them.
        h = fnv_more(h, &(l.id.len() as u64).to_le_bytes());
        h = fnv_more(h, l.id.as_bytes());
        let kind: u64 = match l.kind {
            LimitKind::Capacity => 0,
            LimitKind::Security { home: None } => 1,
            LimitKind::Security { home: Some(r) } => 2 + r.index() as u64,
        };
        for v in [kind, l.version, l.rate.milli()] {
            h = fnv_more(h, &v.to_le_bytes());
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::room::Room;

    fn limit(id: &str, version: u64, rps: u64) -> LimitSpec {
        LimitSpec {
            id: id.into(),
            version,
            rate: Room::rps(rps),
            burst_ms: 2_000,
            floor: Room::rps(1),
            step_cap: Room::rps(1),
            kind: LimitKind::Capacity,
            shadow: false,
        }
    }

    #[test]
    fn fnv1a_matches_its_published_test_vectors() {
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn the_digest_ignores_order_and_tuning_but_not_rates_versions_or_ids() {
        let a = [limit("a", 1, 100), limit("b", 1, 200)];
        let base = limits_digest(&a);
        assert_eq!(limits_digest(&[a[1].clone(), a[0].clone()]), base);
        let mut tuned = a.clone();
        tuned[0].floor = Room::rps(5);
        tuned[0].shadow = true;
        assert_eq!(limits_digest(&tuned), base);
        for other in [
            vec![limit("a", 2, 100), limit("b", 1, 200)],
            vec![limit("a", 1, 101), limit("b", 1, 200)],
            vec![limit("a", 1, 100)],
            vec![limit("a", 1, 100), limit("c", 1, 200)],
        ] {
            assert_ne!(limits_digest(&other), base, "{other:?}");
        }
        let mut security = a.clone();
        security[0].kind = LimitKind::Security { home: None };
        assert_ne!(limits_digest(&security), base);
    }
}
