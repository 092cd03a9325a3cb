//! Templates with coordination slots in a configuration: their slot limits, what is refused in
//! them (each problem with its field), and what a reload may change of them.

use super::*;
use shareplane_core::{LimitKind, Room};

const BASE: &str = r#"
region = "B"
store = "memory"
api_token = "0123456789abcdef"
[[regions]]
name = "A"
[[regions]]
name = "B"
[[regions]]
name = "C"
[[limits]]
id = "k-big"
rate = 10000
"#;

/// `BASE` with template `per_key` of `rate` and `slots` (and any `extra` fields).
fn with_template(rate: u32, slots: u32, extra: &str) -> String {
    format!(
        "{BASE}[[templates]]\nid = \"per_key\"\nentry = \"api_key\"\nrate = {rate}\n\
         slots = {slots}\n{extra}"
    )
}

fn cfg(text: &str) -> Config {
    parse(text, &BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"))
}

fn problems(text: &str) -> Vec<String> {
    match parse(text, &BTreeMap::new()) {
        Ok(_) => Vec::new(),
        Err(e) => e.0.iter().map(|p| p.to_string()).collect(),
    }
}

fn reload(old: &str, new: &str) -> Result<LimitChanges, Vec<String>> {
    plan_reload(&cfg(old), &cfg(new)).map_err(|e| e.0.iter().map(|p| p.to_string()).collect())
}

#[test]
fn a_slotted_template_runs_as_k_capacity_limits_after_the_listed_ones() {
    let c = cfg(&with_template(90, 4, "burst_s = 3\nshadow = true\n"));
    let limits = &c.deployment.limits;
    let ids: Vec<&str> = limits.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "k-big",
            "per_key#slot0",
            "per_key#slot1",
            "per_key#slot2",
            "per_key#slot3"
        ]
    );
    for l in &limits[1..] {
        assert_eq!(
            (l.rate, l.burst_ms, l.kind, l.shadow, l.version),
            (Room::rps(90), 3_000, LimitKind::Capacity, true, 1)
        );
        // The defaults of a listed limit: 5% and 10% of the rate.
        assert_eq!(
            (l.floor, l.step_cap),
            (Room::from_milli(4_500), Room::from_milli(9_000))
        );
    }
    // Its values' numbers come from the slots: the template itself is published at 0.
    let wire = crate::templates::wire(&c.templates, 3, c.me);
    assert_eq!((wire[0].rate, wire[0].burst, wire[0].slots), (0.0, 0.0, 4));
    // Without slots, nothing is added and the static part is published.
    let c = cfg(&with_template(90, 0, ""));
    assert_eq!(c.deployment.limits.len(), 1);
    let wire = crate::templates::wire(&c.templates, 3, c.me);
    assert_eq!((wire[0].rate, wire[0].slots), (30.0, 0));
    // A limits file expands them the same way.
    let file = "[[templates]]\nid = \"t\"\nentry = \"user\"\nrate = 10\nslots = 2\n";
    let regions = &c.deployment.regions;
    let f = parse_limits(file, regions).unwrap_or_else(|e| panic!("{e}"));
    let ids: Vec<&str> = f.limits.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["t#slot0", "t#slot1"]);
}

#[test]
fn slots_are_refused_where_they_cannot_work_each_problem_naming_its_field() {
    let p = problems(&with_template(90, 4097, ""));
    assert!(
        p.iter()
            .any(|e| e.starts_with("templates[0].slots: 4097: at most 4096")),
        "{p:?}"
    );
    let p = problems(&with_template(90, 4, "kind = \"security\"\n"));
    assert!(
        p.iter()
            .any(|e| e.starts_with("templates[0].slots: a security template is never moved")),
        "{p:?}"
    );
    let p = problems(&with_template(90, 4, "version = 0\n"));
    assert!(
        p.iter()
            .any(|e| e.starts_with("templates[0].version: must be at least 1")),
        "{p:?}"
    );
    // The longest slot id must fit 128 characters: `<id>#slot4095` is 9 more than the id.
    let long = "t".repeat(120);
    let p = problems(&with_template(90, 4096, "").replace("\"per_key\"", &format!("{long:?}")));
    assert!(
        p.iter().any(|e| e.contains("would be longer than 128")),
        "{p:?}"
    );
    assert!(
        problems(&with_template(90, 10, "").replace("\"per_key\"", &format!("{long:?}")))
            .is_empty()
    );
    // A listed limit named like a slot: refused by the id rule and as a collision, located.
    let taken = with_template(90, 4, "").replace("id = \"k-big\"", "id = \"per_key#slot3\"");
    let p = problems(&taken);
    assert!(p.iter().any(|e| e.starts_with("limits[0].id:")), "{p:?}");
    assert!(
        p.iter().any(|e| e.starts_with(
            "templates[0].slots: its slot limit \"per_key#slot3\" is already a listed limit's id"
        ) && e.contains("(at line")),
        "{p:?}"
    );
}

#[test]
fn a_reload_keeps_the_number_of_slots_and_changes_their_rate_at_a_higher_version() {
    let four = with_template(90, 4, "");
    // Another number of slots: refused, saying a new template id is needed.
    for other in [0, 2, 8] {
        let e = reload(&four, &with_template(90, other, ""))
            .err()
            .unwrap_or_default();
        assert!(
            e.iter()
                .any(|p| p.starts_with("templates[0].slots:") && p.contains("new template id")),
            "{other}: {e:?}"
        );
    }
    let e = reload(&with_template(90, 0, ""), &four)
        .err()
        .unwrap_or_default();
    assert!(
        e.iter().any(|p| p.starts_with("templates[0].slots:")),
        "{e:?}"
    );
    // Fewer slots, or the template removed: one problem for its lost slot limits.
    let e = reload(&four, BASE).err().unwrap_or_default();
    assert_eq!(
        e,
        [
            "limits: template \"per_key\" lost 4 slot limits (it was removed or has fewer slots): \
          a limit cannot be removed while the daemon runs (records hold limits by position); \
          restart the daemon to remove them"
        ]
    );
    // A new rate: refused without a higher version, once for the template.
    let e = reload(&four, &with_template(60, 4, ""))
        .err()
        .unwrap_or_default();
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("templates[0].version: \"per_key#slot*\": the rate changed"),
        "{e:?}"
    );
    let c =
        reload(&four, &with_template(60, 4, "version = 2\n")).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(
        c.versioned,
        [(
            "per_key#slot*".to_string(),
            1,
            2,
            Room::rps(90),
            Room::rps(60)
        )]
    );
    assert_eq!(c.limits.len(), 5);
    assert!(c.limits[1..]
        .iter()
        .all(|l| l.rate == Room::rps(60) && l.version == 2));
    // A new slotted template is added whole, named once.
    let c = reload(BASE, &four).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(
        (c.added.clone(), c.limits.len()),
        (vec!["per_key#slot*".to_string()], 5)
    );
}
