//! `parse` reports every problem at once, each naming its field and the value written, with its
//! line; it needs no API token; the store and health timeouts are checked against the period.

use super::*;

const HEAD: &str =
    "region = \"A\"\nstore = \"memory\"\n[[regions]]\nname = \"A\"\n[[regions]]\nname = \"B\"\n";

fn problems(text: &str) -> Vec<String> {
    match parse(text, &BTreeMap::new()) {
        Ok(_) => Vec::new(),
        Err(e) => e.0.iter().map(|p| p.to_string()).collect(),
    }
}

#[test]
fn every_type_error_is_reported_with_its_field_value_and_line() {
    // Lines 1 and 2, then HEAD (lines 3 to 8), then the limits.
    let text = format!(
        "period_ms = \"x\"\nlisten = 5\n{HEAD}\
         [[limits]]\nid = \"a\"\nrate = \"fast\"\n\
         [[limits]]\nid = \"b\"\nrate = 10\nburst_s = true\nsurprise = 1\n\
         [[limits]]\nrate = 10\n"
    );
    let p = problems(&text);
    let want = [
        "period_ms: \"x\": expected a whole number (at line 1)",
        "listen: 5: expected a string (at line 2)",
        "limits[0].rate: \"fast\": expected a number (at line 11)",
        "limits[1].surprise: unknown field `surprise`",
        "limits[1].burst_s: true: expected a number (at line 15)",
        "limits[2].id: missing in this entry (at line 18)",
    ];
    for w in want {
        assert!(
            p.iter().any(|p| p.starts_with(w)),
            "{w:?} missing in {p:#?}"
        );
    }
    assert_eq!(p.len(), want.len(), "{p:#?}");
}

#[test]
fn a_bad_value_is_blamed_on_the_field_written_with_the_value_written() {
    let text = format!("{HEAD}[[limits]]\nid = \"k\"\nrate = -5\n");
    assert_eq!(
        problems(&text),
        vec!["limits[0].rate: -5 must be positive (at line 9)".to_string()]
    );
    let text = format!("{HEAD}[[limits]]\nid = \"k\"\nrate = 100\nfloor = -1\n");
    assert_eq!(
        problems(&text),
        vec!["limits[0].floor: -1 must not be negative (at line 10)".to_string()]
    );
    // A zero period is the period's problem, not the (unset) test delay's or the phase's.
    let text = format!("period_ms = 0\n{HEAD}[[limits]]\nid = \"k\"\nrate = 100\n");
    assert_eq!(
        problems(&text),
        vec!["period_ms: 0 must be 100 to 600000 (at line 1)".to_string()]
    );
    let text = format!("period_ms = -3\n{HEAD}[[limits]]\nid = \"k\"\nrate = 100\n");
    assert_eq!(
        problems(&text),
        vec!["period_ms: -3: expected a whole number of 0 or more (at line 1)".to_string()]
    );
}

#[test]
fn no_api_token_is_needed_to_check_a_file_but_run_requires_one() {
    let text = format!("{HEAD}[[limits]]\nid = \"k\"\nrate = 100\n");
    let cfg = parse(&text, &BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.api_token, None);
    let e = require_api_token(&cfg).err().map(|e| e.to_string());
    assert!(
        e.as_deref()
            .is_some_and(|e| e.contains("api_token: required to run")),
        "{e:?}"
    );
    // A token that is given must still be a good one.
    let short = format!("api_token = \"short\"\n{text}");
    let p = problems(&short);
    assert!(
        p.len() == 1 && p[0].starts_with("api_token: must be at least 16"),
        "{p:?}"
    );
}

#[test]
fn the_store_and_health_timeouts_default_to_half_a_period_and_may_only_be_shortened() {
    let base = format!("period_ms = 1000\n{HEAD}[[limits]]\nid = \"k\"\nrate = 100\n");
    let cfg = parse(&base, &BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"));
    let half = Timeouts {
        store_ms: 500,
        health_ms: 500,
    };
    assert_eq!(cfg.timeouts, half);
    let shorter = format!("store_timeout_ms = 300\nhealth_timeout_ms = 200\n{base}");
    let cfg = parse(&shorter, &BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"));
    let want = Timeouts {
        store_ms: 300,
        health_ms: 200,
    };
    assert_eq!(cfg.timeouts, want);
    let longer = format!("store_timeout_ms = 650\nhealth_timeout_ms = 5\n{base}");
    let p = problems(&longer);
    assert_eq!(p.len(), 2, "{p:#?}");
    assert!(
        p[0].starts_with("store_timeout_ms: 650 is longer than the store-call bound of the gateways' lease, 500 ms")
            && p[0].ends_with("(at line 1)"),
        "{p:#?}"
    );
    assert!(
        p[1].starts_with("health_timeout_ms: 5 must be at least 10 (at line 2)"),
        "{p:#?}"
    );
    // The test-only store delay must leave room within the store timeout.
    let slow = format!("store_timeout_ms = 100\ntest_store_delay_ms = 60\n{base}");
    let p = problems(&slow);
    assert!(
        p.len() == 1 && p[0].starts_with("test_store_delay_ms: 60: tests only; must be below half of the store timeout (100 ms)"),
        "{p:#?}"
    );
}

#[test]
fn a_limits_file_reports_every_problem_with_its_line() {
    let regions = ["A".to_string(), "B".to_string()];
    let text =
        "[[limits]]\nid = \"a\"\nrate = -5\n[[limits]]\nid = \"b\"\nrate = \"x\"\nregion = \"A\"\n";
    let p: Vec<String> = parse_limits(text, &regions)
        .err()
        .map(|e| e.0.iter().map(|p| p.to_string()).collect())
        .unwrap_or_default();
    assert_eq!(
        p,
        vec![
            "limits[1].region: unknown field `region`: not a setting here (the settings are listed in crates/shareplane/config.example.toml) (at line 7)".to_string(),
            "limits[1].rate: \"x\": expected a number (at line 6)".to_string(),
            "limits[0].rate: -5 must be positive (at line 3)".to_string(),
        ]
    );
}

#[test]
fn a_value_out_of_range_or_of_another_shape_is_named_with_the_value() {
    let base = format!("{HEAD}[[limits]]\nid = \"k\"\nrate = 100\n");
    let p = problems(&format!("limits_rollout_periods = 99999999999\n{base}"));
    assert_eq!(
        p,
        vec!["limits_rollout_periods: 4294967295 must be 1 to 100000 (at line 1)".to_string()]
    );
    let p = problems(&format!("replica_id = \"\"\n{base}"));
    assert_eq!(
        p,
        vec!["replica_id: 0 characters: must be 1 to 128 (at line 1)".to_string()]
    );
    let p = problems(&format!("limits = {{ id = \"k\" }}\n{HEAD}"));
    assert!(
        p.len() == 1 && p[0].starts_with("limits: { id = \"k\" }: expected [[limits]] entries (an array of tables) (at line 1)"),
        "{p:#?}"
    );
}

/// `text` read a `[[limits]]` entry at a time and read whole: fields, places and problems.
fn read_both_ways(text: &str) -> (String, String) {
    let show = |r: Result<(read::RawConfig, read::Located), ConfigErrors>| match r {
        Ok((raw, located)) => format!("{raw:?} {}", located.noted()),
        Err(e) => format!("error: {e}"),
    };
    (
        show(read::read_config_by(text, 1)),
        show(read::read_config_by(text, 0)),
    )
}

/// Seven limits; the fourth's rate is of the wrong type.
fn seven_limits() -> String {
    (0..7)
        .map(|i| {
            let rate = if i == 3 {
                "\"x\"".to_string()
            } else {
                (i + 1).to_string()
            };
            format!("[[limits]]\nid = \"l{i}\"\nrate = {rate}\n")
        })
        .collect()
}

#[test]
fn a_file_read_in_batches_of_limits_reads_as_the_whole_file() {
    let limits = seven_limits();
    let text = format!(
        "period_ms = \"x\"\n{HEAD}{limits}[[templates]]\nid = \"t\"\nentry = \"k\"\nrate = 5\n\
         odd = 1\n  [[limits]] # again\nid = \"m\"\nrate = 1\nsurprise = true\n{limits}"
    );
    assert!(read::read_in_batches(&text, 1));
    let (batched, whole) = read_both_ways(&text);
    assert_eq!(batched, whole);
    assert!(whole.contains("limits[11].rate"), "{whole}");
    // Many limits, by the batch size a daemon uses, with a problem in the middle.
    let many: String = (0..2_500)
        .map(|i| format!("[[limits]]\nid = \"p{i}\"\nrate = {}\n", 1_250 - i as i64))
        .collect();
    let text = format!("{HEAD}{many}");
    assert!(read::read_in_batches(&text, batches::LIMITS_PER_BATCH));
    let batched = read::read_config_by(&text, batches::LIMITS_PER_BATCH);
    let whole = read::read_config_by(&text, 0);
    let show = |r: &Result<(read::RawConfig, read::Located), ConfigErrors>| match r {
        Ok((raw, located)) => format!("{raw:?} {}", located.noted()),
        Err(e) => format!("error: {e}"),
    };
    assert_eq!(show(&batched), show(&whole));
    let problems = problems(&text);
    assert!(
        problems.contains(&"limits[1250].rate: 0 must be positive (at line 3759)".to_string()),
        "{problems:#?}"
    );
}

#[test]
fn a_split_that_could_read_otherwise_than_the_whole_file_is_not_used() {
    let limits = seven_limits();
    let cases = [
        // `[[limits]]` lines inside a multi-line string or array are no entries.
        format!("note = \"\"\"\n{limits}\"\"\"\n{HEAD}{limits}"),
        format!("note = '''\n{limits}'''\n{HEAD}"),
        format!("x = [\n{limits}[1]]\n{HEAD}"),
        // `limits` outside the entries, in any form.
        format!("limits = [{{ id = \"i\", rate = 1 }}]\n{HEAD}{limits}"),
        format!("{HEAD}{limits}[limits.extra]\na = 1\n"),
        format!("{HEAD}{limits}[[limits.extra]]\na = 1\n"),
        // A syntax error, in an entry or elsewhere.
        format!("{HEAD}{limits}[[limits]]\nid = \n"),
        format!("{HEAD}{limits}[[templates]]\nid = \n"),
    ];
    for text in cases {
        assert!(!read::read_in_batches(&text, 1), "{text}");
        let (batched, whole) = read_both_ways(&text);
        assert_eq!(batched, whole, "{text}");
    }
    // What a multi-line string holds is not read as entries.
    let text = format!("note = \"\"\"\n{limits}\"\"\"\n{HEAD}{limits}");
    let (batched, _) = read_both_ways(&text);
    assert!(
        batched.contains("l6") && !batched.contains("limits[7]"),
        "{batched}"
    );
}
