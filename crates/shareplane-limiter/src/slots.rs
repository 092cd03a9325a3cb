//! Coordination slots of a template (docs/PROTOCOL.md, "Templates"): a capacity template may
//! declare `slots = K`, and the daemon then runs K ordinary listed limits for it, `<template>#slot<k>`
//! for `k` in `0..K`, each of the template's rate, whose room moves between Regions by named
//! grants like any listed limit's. Every value of the template belongs to one slot,
//! [`slot_of_hash`], the same in every Region; a gateway limits the value in its own bucket at
//! its slot's share of this Region's rule set, and counts the value's calls as demand of the slot.
//!
//! This module owns the names and the mapping; [`crate::rules::RuleSet::instance`] applies them.

use sha2::{Digest, Sha256};

/// The most slots one template may declare.
pub const MAX_SLOTS: u32 = 4096;
/// What follows the template id in a slot limit's id: `#` (`crate::templates::INSTANCE_SEP`,
/// which no listed limit's or template's id may hold) and `slot`.
pub const SLOT_MARK: &str = "#slot";

/// The id of slot `k` of template `template`: `<template>#slot<k>`. Neither a listed limit's nor
/// a template's id may hold `#`, and a value's bucket is `<template>#<32 hex digits>`, so a slot
/// id is nobody else's.
pub fn slot_id(template: &str, k: u32) -> String {
    format!("{template}{SLOT_MARK}{k}")
}

/// `(template, k)` of a slot id as [`slot_id`] writes it (`k` in decimal without a leading zero,
/// below [`MAX_SLOTS`]); `None` for any other id.
pub fn slot_parts(id: &str) -> Option<(&str, u32)> {
    let (template, digits) = id.split_once(SLOT_MARK)?;
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && digits.len() <= 4;
    let k: u32 = digits.parse().ok().filter(|_| canonical)?;
    let plain = !template.is_empty() && !template.contains('#');
    (plain && k < MAX_SLOTS).then_some((template, k))
}

/// The slot of the value whose [`crate::templates::value_hash`] is `hash`, among `slots` (at
/// least 1): the first 8 bytes of the value's SHA-256 (the hash's first 16 hex digits) read as a
/// big-endian `u64`, modulo `slots`. Deterministic, the same in every Region and every gateway,
/// and as even as SHA-256. `None` for a hash that is not 32 hex digits or for no slots.
pub fn slot_of_hash(hash: &str, slots: u32) -> Option<u32> {
    if slots == 0 || hash.len() != 32 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let head = u64::from_str_radix(&hash[..16], 16).ok()?;
    u32::try_from(head % u64::from(slots)).ok()
}

/// The slot of `value` among `slots`: [`slot_of_hash`] of its hash, from its SHA-256 directly.
pub fn slot_of(value: &str, slots: u32) -> Option<u32> {
    if slots == 0 {
        return None;
    }
    let digest = Sha256::digest(value.as_bytes());
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    u32::try_from(u64::from_be_bytes(head) % u64::from(slots)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_maps_to_the_first_eight_bytes_of_its_sha256_modulo_the_slots() {
        for value in ["alice", "bob", "}{rl:evil} \n", &"x".repeat(256)] {
            let digest = Sha256::digest(value.as_bytes());
            let mut head = [0u8; 8];
            head.copy_from_slice(&digest[..8]);
            let want = u64::from_be_bytes(head);
            for k in [1u32, 2, 7, 64, 4096] {
                let got = slot_of(value, k);
                assert_eq!(
                    got,
                    u32::try_from(want % u64::from(k)).ok(),
                    "{value:?} {k}"
                );
                assert_eq!(got, slot_of(value, k), "deterministic");
                assert!(got.is_some_and(|s| s < k));
            }
        }
        assert_eq!(slot_of("alice", 0), None);
        assert_eq!(slot_of_hash("xyz", 4), None);
        assert_eq!(slot_of_hash(&"g".repeat(32), 4), None);
    }

    #[test]
    fn values_spread_over_the_slots() {
        // 64,000 values over 64 slots: 1,000 expected in each; a binomial's standard deviation
        // is about 31, so every slot within 850..1150 (about 4.8 deviations) unless the mapping
        // is skewed.
        let mut counts = [0u32; 64];
        for i in 0..64_000 {
            let s = slot_of(&format!("key-{i}"), 64).unwrap_or(u32::MAX);
            counts[s as usize] += 1;
        }
        let (lo, hi) = (counts.iter().min(), counts.iter().max());
        assert!(
            lo.is_some_and(|&l| l >= 850) && hi.is_some_and(|&h| h <= 1150),
            "{counts:?}"
        );
    }

    #[test]
    fn slot_ids_round_trip_and_nothing_else_parses_as_one() {
        assert_eq!(slot_id("per_api_key", 0), "per_api_key#slot0");
        for k in [0, 1, 9, 10, 4095] {
            assert_eq!(slot_parts(&slot_id("t", k)), Some(("t", k)));
        }
        for id in [
            "t",
            "t#slot",
            "t#slot01",
            "t#slot4096",
            "t#slot-1",
            "t#slot1x",
            "#slot1",
            "t#0123456789abcdef0123456789abcdef",
            "t#Slot1",
            "a#b#slot1",
        ] {
            assert_eq!(slot_parts(id), None, "{id}");
        }
    }
}
