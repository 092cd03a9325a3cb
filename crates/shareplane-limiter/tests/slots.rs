//! Coordination slots of a template (`shareplane_limiter::slots`) against a real redis-server:
//! each value in its own bucket at its slot's share of the rule set, the value's calls counted
//! as its slot's demand, and the bucket a value had before its template gained slots kept.

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

mod common;

use std::time::Duration;

use common::{limit, redis_url, rules, unique};
use shareplane_limiter::limiter::BucketRef;
use shareplane_limiter::slots::{slot_id, slot_of};
use shareplane_limiter::{
    Lease, LimitKind, Limiter, LimiterConfig, RuleSet, RulesWire, TemplateWire, Verdict,
};

const SLOTS: u32 = 8;

/// `id` with 0.001/s and a burst of 5 per value (the static split), or with `slots`. Every rate
/// here refills less than 0.01 token over the test, however slow the machine.
fn template(id: &str, slots: u32) -> TemplateWire {
    let (rate, burst) = if slots == 0 { (0.001, 5.0) } else { (0.0, 0.0) };
    TemplateWire {
        id: id.to_owned(),
        entry: "api_key".to_owned(),
        rate,
        burst,
        shadow: false,
        kind: LimitKind::Capacity,
        overrides: Vec::new(),
        slots,
    }
}

/// Rule set `version` with template `tpl` at `slots`, each slot's share from `share` and its
/// burst 1000 s of it (as the daemon publishes a slot: `burst_s ×` the share).
fn set(version: u64, tpl: &str, slots: u32, share: &dyn Fn(u32) -> f64) -> RuleSet {
    let limits = (0..slots)
        .map(|k| limit(&slot_id(tpl, k), share(k), 1000.0 * share(k)))
        .collect();
    let wire = RulesWire {
        templates: vec![template(tpl, slots)],
        ..rules(version, limits)
    };
    RuleSet::from_wire(wire, None, 1).unwrap_or_else(|e| panic!("{e}"))
}

/// How many of `n` calls for `value` are admitted, and the verdict of the last.
async fn admitted(l: &Limiter, tpl: &str, value: &str, n: u32) -> (u32, Verdict) {
    let mut ok = 0;
    let mut last = Verdict::NotChecked;
    for _ in 0..n {
        let d = l
            .check_buckets(&[BucketRef::value(tpl, value)], 1)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        ok += u32::from(d.allowed);
        last = d.limits[0].verdict;
    }
    (ok, last)
}

/// Two values in different slots.
fn two_values() -> (String, u32, String, u32) {
    let of = |v: &str| slot_of(v, SLOTS).unwrap_or(u32::MAX);
    let a = "alice".to_owned();
    let b = (0..)
        .map(|i| format!("bob-{i}"))
        .find(|v| of(v) != of(&a))
        .unwrap_or_default();
    let (sa, sb) = (of(&a), of(&b));
    (a, sa, b, sb)
}

#[tokio::test]
async fn values_in_two_slots_are_held_at_their_slots_shares_and_keep_their_buckets() {
    let test = "values_in_two_slots_are_held_at_their_slots_shares_and_keep_their_buckets";
    let Some(url) = redis_url(test) else {
        return;
    };
    let tpl = unique("per_key");
    let (a, sa, b, sb) = two_values();
    let l = Limiter::new(LimiterConfig::new(url)).unwrap_or_else(|e| panic!("{e}"));

    // Before slots: alice spends 3 of her 5 tokens.
    l.install(set(1, &tpl, 0, &|_| 0.0));
    assert_eq!(admitted(&l, &tpl, &a, 3).await.0, 3);

    // The template gains slots: alice's slot holds a burst of 3 (share 0.003/s), bob's 6.
    let share = |k: u32| match k {
        k if k == sa => 0.003,
        k if k == sb => 0.006,
        _ => 0.001,
    };
    l.install(set(2, &tpl, SLOTS, &share));
    let rules = l.rules().unwrap_or_else(|| panic!("no rules"));
    let t = rules
        .template(&tpl)
        .unwrap_or_else(|| panic!("no template"));
    assert_eq!(rules.instance(t, &a).rate, 0.003);
    assert_eq!(rules.instance(t, &b).rate, 0.006);

    // Alice's bucket was not reset: her 2 tokens left (not a fresh burst of 3), then refused
    // for want of tokens.
    let (ok, last) = admitted(&l, &tpl, &a, 4).await;
    assert_eq!((ok, last), (2, Verdict::Short));
    // Bob's bucket is new: his slot's burst, 6.
    let (ok, last) = admitted(&l, &tpl, &b, 8).await;
    assert_eq!((ok, last), (6, Verdict::Short));

    // Their calls are their slots' demand (every call received, admitted or not); the calls
    // alice made before slots count for no limit.
    let demand = l.demand_totals();
    assert_eq!(demand.get(&slot_id(&tpl, sa)), Some(&4));
    assert_eq!(demand.get(&slot_id(&tpl, sb)), Some(&8));
    assert_eq!(demand.len(), 2, "{demand:?}");

    // A slot at share 0 refuses its values; the other slot's values are untouched by it.
    let zero = |k: u32| if k == sb { 0.0 } else { share(k) };
    l.install(set(3, &tpl, SLOTS, &zero));
    let (ok, last) = admitted(&l, &tpl, &b, 1).await;
    assert_eq!((ok, last), (0, Verdict::HeldClosed));

    // Under a lease that has run out, a slotted value is fenced like a listed capacity limit.
    let now = shareplane_limiter::clock::now();
    let past = now.checked_sub(Duration::from_millis(1)).unwrap_or(now);
    l.install_leased(set(4, &tpl, SLOTS, &share), Lease::Until(past), None);
    let (ok, last) = admitted(&l, &tpl, &a, 1).await;
    assert_eq!((ok, last), (0, Verdict::Fenced));
}
