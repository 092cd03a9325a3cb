//! The configuration's checks, reload plans and limits files, case by case.

use super::*;
use shareplane_core::Room;

const GOOD: &str = r#"
region = "B"
phase_ms = 1700
store = "memory"
api_token = "0123456789abcdef"
[[regions]]
name = "A"
[[regions]]
name = "B"
[[limits]]
id = "k-big"
rate = 10000
"#;

#[test]
fn the_default_replica_id_ends_in_a_random_uuid_drawn_once_per_process() {
    let id = default_replica_id();
    let uuid = id
        .rsplit_once('-')
        .map(|_| &id[id.len() - 36..])
        .unwrap_or("");
    let parsed = uuid::Uuid::try_parse(uuid).map(|u| u.get_version_num());
    assert_eq!(parsed.ok(), Some(4), "{id}");
    assert!(id.len() <= 128, "{id}");
    assert_eq!(default_replica_id(), id, "a reload keeps it");
    let a = parse(GOOD, &BTreeMap::new()).map(|c| c.replica_id);
    assert_eq!(a.ok().as_deref(), Some(id.as_str()));
}

#[test]
fn a_syntax_error_names_its_own_line_even_at_the_start_of_one() {
    // A type error and an unknown field are reported with the others; a syntax error alone.
    for (text, field, line) in [
        ("region = \"B\"\nperiod_ms = 5000\nbogus = 1\n", "bogus", 3),
        ("region = \"B\"\nperiod_ms = \"x\"\n", "period_ms", 2),
        ("bogus = 1\n", "bogus", 1),
        ("region = \"B\"\nperiod_ms = \n", "config", 2),
    ] {
        let e = parse(text, &BTreeMap::new()).map(|_| ());
        let Err(e) = e else {
            panic!("{text:?} was accepted")
        };
        let mine: Vec<String> =
            e.0.iter()
                .filter(|p| p.field == field)
                .map(|p| p.to_string())
                .collect();
        assert!(
            mine.len() == 1 && mine[0].ends_with(&format!("(at line {line})")),
            "{text:?}: {e}"
        );
        if field == "config" {
            assert!(
                e.to_string()
                    .starts_with("invalid configuration (1 problem):"),
                "{e}"
            );
        }
    }
}

#[test]
fn good_config_converts_to_a_deployment() {
    let c = parse(GOOD, &BTreeMap::new()).map_err(|e| e.to_string());
    let c = c.as_ref().map(|c| {
        (
            c.me.index(),
            c.period_ms,
            c.deployment.limits[0].floor,
            c.listen.to_string(),
        )
    });
    assert_eq!(
        c,
        Ok((1, 5000, Room::rps(500), "127.0.0.1:8080".to_string()))
    );
}

#[test]
fn every_problem_is_reported_with_its_field() {
    let text = r#"
region = "Z"
phase_ms = 9000
period_ms = 5000
store = "dynamodb"
policy = "hope"
listen = "nowhere"
[[regions]]
name = "A"
[[limits]]
id = "x"
rate = -1
kind = "weird"
"#;
    let errs = match parse(text, &BTreeMap::new()) {
        Err(e) => e.0.into_iter().map(|e| e.field).collect::<Vec<_>>(),
        Ok(_) => vec![],
    };
    for f in [
        "phase_ms",
        "region",
        "table",
        "policy",
        "listen",
        "regions[0].health_check_id",
        "limits[0].rate",
        "limits[0].kind",
    ] {
        assert!(errs.iter().any(|e| e == f), "{f} missing in {errs:?}");
    }
}

#[test]
fn the_health_endpoint_is_optional_local_and_checked() {
    let c = parse(GOOD, &BTreeMap::new()).map(|c| c.health_endpoint);
    assert_eq!(c.ok(), Some(None));
    let local = "aws_endpoint = \"http://127.0.0.1:5000\"\n";
    let with = format!("{local}health_endpoint = \"http://127.0.0.1:5001\"\n{GOOD}");
    let c = parse(&with, &BTreeMap::new()).map(|c| c.health_endpoint);
    assert_eq!(c.ok(), Some(Some("http://127.0.0.1:5001".to_string())));
    let fields = |text: &str| match parse(text, &BTreeMap::new()) {
        Err(e) => e.0.into_iter().map(|e| e.field).collect::<Vec<_>>(),
        Ok(_) => vec![],
    };
    let bad = format!("{local}health_endpoint = \"127.0.0.1:5001\"\n{GOOD}");
    assert_eq!(fields(&bad), vec!["health_endpoint".to_string()]);
    let alone = format!("health_endpoint = \"http://127.0.0.1:5001\"\n{GOOD}");
    assert_eq!(fields(&alone), vec!["health_endpoint".to_string()]);
}

#[test]
fn the_test_store_delay_is_off_by_default_and_bounded() {
    let c = parse(GOOD, &BTreeMap::new()).map(|c| c.test_store_delay);
    assert_eq!(c.ok(), Some(std::time::Duration::ZERO));
    let slow = format!("test_store_delay_ms = 40\n{GOOD}");
    let c = parse(&slow, &BTreeMap::new()).map(|c| c.test_store_delay);
    assert_eq!(c.ok(), Some(std::time::Duration::from_millis(40)));
    let too = format!("test_store_delay_ms = 1250\n{GOOD}");
    let errs = match parse(&too, &BTreeMap::new()) {
        Err(e) => e.0.into_iter().map(|e| e.field).collect::<Vec<_>>(),
        Ok(_) => vec![],
    };
    assert_eq!(errs, vec!["test_store_delay_ms".to_string()]);
}

#[test]
fn unknown_fields_are_refused() {
    let text = format!("{GOOD}\nsurprise = 1\n");
    let e = parse(&text, &BTreeMap::new())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("surprise"), "{e}");
}

#[test]
fn environment_overrides_the_file() {
    let env: BTreeMap<String, String> = [
        (ENV_REGION.to_string(), "A".to_string()),
        (
            ENV_API_TOKEN.to_string(),
            "ffffffffffffffffffff".to_string(),
        ),
        (ENV_CONFIG_TOML.to_string(), GOOD.to_string()),
    ]
    .into();
    let c = load(None, &env).map(|c| (c.region, c.phase_ms, c.api_token));
    assert_eq!(
        c.ok(),
        Some(("A".into(), 1700, Some("ffffffffffffffffffff".into())))
    );
}

/// GOOD as a Region whose limits come from the table (DynamoDB, no `[[limits]]`).
fn table_mode() -> String {
    let head = GOOD.split("[[limits]]").next().unwrap_or_default();
    head.replace(
        "store = \"memory\"",
        "store = \"dynamodb\"\ntable = \"t\"\nlimits_source = \"table\"",
    )
    .replace("name = \"A\"", "name = \"A\"\nhealth_check_id = \"hc-a\"")
    .replace("name = \"B\"", "name = \"B\"\nhealth_check_id = \"hc-b\"")
}

fn problems(text: &str) -> Vec<String> {
    match parse(text, &BTreeMap::new()) {
        Ok(_) => Vec::new(),
        Err(e) => e.0.iter().map(|p| p.to_string()).collect(),
    }
}

#[test]
fn limits_from_the_table_start_with_none_and_refuse_limits_in_the_file_or_a_memory_store() {
    let cfg = parse(&table_mode(), &BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.limits_source, LimitsSource::Table);
    assert!(cfg.deployment.limits.is_empty());
    assert_eq!(cfg.limits_version, None);
    let both = table_mode() + "[[limits]]\nid = \"k\"\nrate = 1\n";
    let p = problems(&both);
    assert!(
        p.len() == 1 && p[0].starts_with("limits:") && p[0].contains("limits apply"),
        "{p:?}"
    );
    let memory = table_mode().replace("store = \"dynamodb\"", "store = \"memory\"");
    let p = problems(&memory);
    assert!(p.iter().any(|p| p.starts_with("limits_source:")), "{p:?}");
    let p = problems(&table_mode().replace("limits_source = \"table\"", "limits_source = \"s3\""));
    assert!(
        p.iter()
            .any(|p| p.starts_with("limits_source:") && p.contains("\"file\", \"table\"")),
        "{p:?}"
    );
    let p = problems(&GOOD.replace("name = \"A\"", "name = \"#limits\""));
    assert!(p.iter().any(|p| p.starts_with("regions[0].name:")), "{p:?}");
}

#[test]
fn a_limits_file_is_checked_whole_and_runs_with_its_version() {
    let cfg = parse(&table_mode(), &BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"));
    let regions = &cfg.deployment.regions;
    let limits = parse_limits("[[limits]]\nid = \"k\"\nrate = 100\n", regions)
        .unwrap_or_else(|e| panic!("{e}"));
    let running = with_limits(&cfg, limits, 7).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(running.deployment.limits[0].rate, Room::rps(100));
    assert_eq!(running.limits_version, Some(7));
    // Every problem, each with its field; a syntax error with its line; nothing else but
    // limits; no limit at all; ids twice (caught when the limits run together).
    let bad = "[[limits]]\nid = \"k k\"\nrate = -1\n[[limits]]\nid = \"s\"\nrate = 1\nkind = \"security\"\nhome = \"Z\"\n";
    let fields: Vec<String> = parse_limits(bad, regions)
        .err()
        .map(|e| e.0.into_iter().map(|p| p.field).collect())
        .unwrap_or_default();
    // The floor and step cap default to parts of the (negative) rate: not blamed for it.
    let want = ["limits[0].rate", "limits[0].id", "limits[1].home"];
    assert_eq!(fields, want);
    let e = parse_limits("[[limits]]\nid = \"k\"\nrate = \n", regions).err();
    assert!(e.is_some_and(|e| e.to_string().contains("line 3")));
    let e = parse_limits("region = \"A\"\n", regions).err();
    assert!(e.is_some_and(|e| e.to_string().contains("unknown field")));
    let e = parse_limits("", regions).err();
    assert!(e.is_some_and(|e| e.to_string().contains("no [[limits]]")));
    // Templates come in the same file, each problem with its field and line.
    let t = "[[limits]]\nid = \"k\"\nrate = 1\n[[templates]]\nid = \"per_key\"\nentry = \"api_key\"\nrate = 100\n[[templates.overrides]]\nvalue = \"partner\"\nrate = 1000\n";
    let file = parse_limits(t, regions).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(file.templates.len(), 1);
    assert_eq!(
        file.templates[0].overrides,
        [("partner".to_string(), Room::rps(1_000))]
    );
    let running = with_limits(&cfg, file, 8).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(running.templates[0].rate, Room::rps(100));
    let bad = "[[templates]]\nid = \"k\"\nrate = 1\n[[templates.overrides]]\nrate = \"x\"\n";
    let e = parse_limits(bad, regions)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("templates[0].entry: missing in this entry (at line 2)"),
        "{e}"
    );
    assert!(
        e.contains("templates[0].overrides[0].value: missing"),
        "{e}"
    );
    assert!(
        e.contains("templates[0].overrides[0].rate: \"x\": expected a number (at line 5)"),
        "{e}"
    );
    let twice = "[[limits]]\nid = \"k\"\nrate = 1\n[[limits]]\nid = \"k\"\nrate = 2\n";
    let limits = parse_limits(twice, regions).unwrap_or_else(|e| panic!("{e}"));
    let e = with_limits(&cfg, limits, 1).err();
    assert!(e.is_some_and(|e| e.to_string().contains("appears twice")));
}

fn reload(old: &str, new: &str) -> Result<LimitChanges, Vec<String>> {
    let env = BTreeMap::new();
    let cfg = |t: &str| parse(t, &env).unwrap_or_else(|e| panic!("{e}"));
    let (old, new) = (cfg(old), cfg(new));
    plan_reload(&old, &new).map_err(|e| e.0.iter().map(|p| p.to_string()).collect())
}

#[test]
fn a_reload_changes_rates_at_a_higher_version_and_adds_limits_last() {
    let new = GOOD.replace("rate = 10000", "rate = 8000\nversion = 2")
        + "[[limits]]\nid = \"k-new\"\nrate = 100\n";
    // The added limit is listed first in the file: it still goes last.
    let new = new.replacen(
        "[[limits]]",
        "[[limits]]\nid = \"k-first\"\nrate = 50\n[[limits]]",
        1,
    );
    let c = reload(GOOD, &new);
    let ids = c
        .as_ref()
        .map(|c| c.limits.iter().map(|l| l.id.clone()).collect::<Vec<_>>());
    assert_eq!(
        ids,
        Ok(vec!["k-big".into(), "k-first".into(), "k-new".into()])
    );
    let c = c.unwrap_or_default();
    assert_eq!(c.added, vec!["k-first".to_string(), "k-new".to_string()]);
    assert_eq!(
        c.versioned,
        vec![("k-big".into(), 1, 2, Room::rps(10_000), Room::rps(8_000))]
    );
    assert_eq!(reload(GOOD, GOOD).map(|c| c.is_empty()), Ok(true));
}

#[test]
fn a_reload_refuses_what_cannot_change_live_naming_each_field() {
    let new = GOOD
        .replace("rate = 10000", "rate = 8000")
        .replace("phase_ms = 1700", "phase_ms = 1800\nperiod_ms = 4000")
        .replace(
            "store = \"memory\"",
            "store = \"memory\"\nlisten = \"127.0.0.1:9999\"",
        );
    let errs = reload(GOOD, &new).err().unwrap_or_default();
    for want in [
        "phase_ms: cannot change while the daemon runs (running 1700, file 1800)",
        "period_ms: cannot change",
        "listen: cannot change",
        "limits[0].version: \"k-big\": the rate changed from 10000 to 8000 without a higher version; set version = 2 or more",
    ] {
        assert!(errs.iter().any(|e| e.starts_with(want)), "{want:?} missing in {errs:?}");
    }
    assert_eq!(errs.len(), 4, "{errs:?}");
    let removed = GOOD.replace("id = \"k-big\"", "id = \"k-other\"");
    let errs = reload(GOOD, &removed).err().unwrap_or_default();
    assert!(
        errs.iter()
            .any(|e| e.starts_with("limits: limit \"k-big\" was removed")),
        "{errs:?}"
    );
    let lower = GOOD.replace("rate = 10000", "rate = 10000\nversion = 3");
    let errs = reload(&lower, GOOD).err().unwrap_or_default();
    assert!(
        errs.iter().any(|e| e.contains("versions only go up")),
        "{errs:?}"
    );
    let kind = GOOD.replace(
        "rate = 10000",
        "rate = 10000\nkind = \"security\"\nversion = 2",
    );
    let errs = reload(GOOD, &kind).err().unwrap_or_default();
    assert!(
        errs.iter().any(|e| e.starts_with("limits[0].kind")),
        "{errs:?}"
    );
}

#[test]
fn a_configuration_refuses_a_limit_or_template_whose_id_it_lists_as_retired() {
    let retired = format!("retired = [\"k-big\", \"per_key\"]\n{GOOD}");
    let e = parse(&retired, &BTreeMap::new())
        .err()
        .map(|e| e.to_string());
    assert!(
        e.as_deref()
            .is_some_and(|e| e.contains("limits[0].id:") && e.contains("is retired")),
        "{e:?}"
    );
    let other = GOOD.replace("id = \"k-big\"", "id = \"k-new\"");
    let template = "[[templates]]\nid = \"per_key\"\nentry = \"api_key\"\nrate = 5\n";
    let e = parse(
        &format!("retired = [\"k-big\", \"per_key\"]\n{other}{template}"),
        &BTreeMap::new(),
    );
    let e = e.err().map(|e| e.to_string());
    assert!(
        e.as_deref()
            .is_some_and(|e| e.contains("templates[0].id:") && !e.contains("limits[0].id:")),
        "only the template: {e:?}"
    );
    let ok = parse(&format!("retired = [\"k-big\"]\n{other}"), &BTreeMap::new());
    assert!(ok.is_ok(), "{:?}", ok.err());
    let e = parse(&format!("retired = \"k-big\"\n{other}"), &BTreeMap::new()).err();
    assert!(
        e.is_some_and(|e| e.to_string().contains("retired:")),
        "a list, not a string"
    );
}
