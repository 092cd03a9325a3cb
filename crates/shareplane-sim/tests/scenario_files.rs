//! Invalid scenario files are refused with exit 2 and a message naming the field and its line;
//! valid ones run and print what SIMULATOR.md fixes.

use shareplane_core::Delta;
use shareplane_sim::scenario::{Scenario, ScenarioError};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

fn g1() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../simulations/scenarios/g1-jump-staggered.toml");
    std::fs::read_to_string(path).expect("G1 scenario")
}

fn refused(text: &str) -> String {
    match Scenario::parse(text) {
        Ok(_) => panic!("accepted an invalid scenario"),
        Err(e) => e.to_string(),
    }
}

fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .expect("needle")
        + 1
}

#[test]
fn a_bad_value_names_its_field_and_line() {
    let text = g1().replace("visibility_s = 1.0", "visibility_s = 0.0");
    let msg = refused(&text);
    let line = line_of(&text, "visibility_s = 0.0");
    assert!(
        msg.contains(&format!("line {line}: `sync.visibility_s`")),
        "{msg}"
    );
}

/// The core alone decides what a deployment may be: a floor every Region cannot have is refused
/// by its rule, with the line of `limit.rate`, and so is a limit event whose rate cannot hold it.
#[test]
fn a_floor_the_core_refuses_is_named_with_its_line_at_the_start_and_in_a_limit_event() {
    let text = g1().replace("floor = 500.0", "floor = 4000.0");
    let msg = refused(&text);
    let line = line_of(&text, "rate = 10000.0");
    assert!(
        msg.contains(&format!("line {line}: `limit`")) && msg.contains("more than the rate"),
        "{msg}"
    );
    let text = g1().replace(
        "demand = { C = 7200.0 }",
        "demand = { C = 7200.0 }\n\n[[event]]\nat_s = 10.0\nlimit = { rate = 1000.0, regions = [\"A\", \"B\", \"C\"] }",
    );
    let msg = refused(&text);
    // An event's line is that of its `[[event]]` header.
    let line = line_of(&text, "at_s = 10.0") - 1;
    assert!(
        msg.contains(&format!("line {line}: `event.limit.rate`"))
            && msg.contains("more than the rate"),
        "{msg}"
    );
}

#[test]
fn a_time_off_the_tick_grid_is_refused() {
    let text = g1().replace("offset_s = 1.7", "offset_s = 1.755");
    let msg = refused(&text);
    assert!(
        msg.contains(&format!(
            "line {}: `region[1].offset_s`",
            line_of(&text, "1.755")
        )),
        "{msg}"
    );
}

#[test]
fn unknown_and_missing_fields_are_refused_with_their_line() {
    let text = g1().replace("step_cap = 1000.0", "step_cap = 1000.0\nstepcap = 3");
    let msg = refused(&text);
    assert!(
        msg.contains("unknown field `stepcap`")
            && msg.contains(&format!("line {}", line_of(&text, "stepcap"))),
        "{msg}"
    );
    let text = g1().replace("floor = 500.0\n", "");
    let msg = refused(&text);
    assert!(msg.contains("missing field `floor`"), "{msg}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = g1()
        .replace("design = \"jump-to-target\"", "design = \"teleport\"")
        .replace("demand = 3600.0", "demand = -1.0");
    let Err(ScenarioError::Invalid(problems)) = Scenario::parse(&text) else {
        panic!("accepted")
    };
    let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(fields, vec!["design", "region[1].demand"]);
}

#[test]
fn events_must_have_one_action_and_a_sensible_order() {
    let text = g1().replace(
        "demand = { C = 7200.0 }",
        "demand = { C = 7200.0 }\nlose = \"A\"",
    );
    assert!(refused(&text).contains("exactly one action"));
    let text = g1().replace("demand = { C = 7200.0 }", "restore = \"B\"");
    assert!(refused(&text).contains("restores a Region that is not lost"));
    let text = g1().replace("demand = { C = 7200.0 }", "cut = [\"Z\"]");
    assert!(refused(&text).contains("names \"Z\""));
}

fn code(args: &[&str]) -> String {
    let args = args.iter().map(OsString::from).collect();
    format!("{:?}", shareplane_sim::cli::main(args))
}

#[test]
fn exit_codes() {
    let dir = std::env::temp_dir().join(format!("shareplane-sim-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, g1().replace("tick_ms = 10", "tick_ms = 7")).expect("write");
    let good = dir.join("good.toml");
    std::fs::write(&good, g1()).expect("write");
    let two = format!("{:?}", ExitCode::from(2));
    assert_eq!(code(&[bad.to_str().expect("path")]), two);
    assert_eq!(
        code(&[dir.join("missing.toml").to_str().expect("path")]),
        two
    );
    assert_eq!(code(&["--no-such-flag"]), two);
    let trace = dir.join("t.csv");
    let plot = dir.join("p.svg");
    let ok = code(&[
        good.to_str().expect("p"),
        "--json",
        "--trace",
        trace.to_str().expect("p"),
        "--plot",
        plot.to_str().expect("p"),
    ]);
    assert_eq!(ok, format!("{:?}", ExitCode::SUCCESS));
    let csv = std::fs::read_to_string(&trace).expect("trace written");
    let header = csv.lines().next().expect("header");
    assert!(header.starts_with("t_s,sum_shares,admitted_total,A_share,A_pool,A_target,A_demand,A_admitted,A_tokens,A_alive,B_share"));
    assert_eq!(
        csv.lines().count(),
        1 + 7000,
        "one row per tick from start_s"
    );
    assert!(csv.lines().nth(1).expect("row").starts_with("-30,10000,"));
    let svg = std::fs::read_to_string(&plot).expect("plot written");
    assert!(
        svg.starts_with("<svg")
            && svg.contains("limit 10000")
            && svg.contains("0 s: demand C 7200")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_regions_and_an_event_naming_an_unknown_one_is_refused_not_a_panic() {
    // region = [] instead of the [[region]] tables, and an event that loses a Region nobody has.
    let full = g1();
    let head = &full[..full.find("[[region]]").expect("a [[region]] table")];
    let first_line = head.find('\n').expect("a first line") + 1;
    let text = format!(
        "{}region = []\n{}[[event]]\nat_s = 1.0\nlose = \"Q\"\n",
        &head[..first_line],
        &head[first_line..]
    );
    let Err(ScenarioError::Invalid(problems)) = Scenario::parse(&text) else {
        panic!("accepted")
    };
    let said: Vec<String> = problems
        .iter()
        .map(|p| format!("{}: {}", p.field, p.problem))
        .collect();
    assert!(said.iter().any(|p| p.starts_with("region")), "{said:?}");
    assert!(said.iter().any(|p| p.contains("names \"Q\"")), "{said:?}");
    // No follow-up about a Region the unknown name was taken for.
    assert!(!said.iter().any(|p| p.contains("already lost")), "{said:?}");
    // An unknown name among real Regions: one problem, about that name only.
    let text = g1().replace("demand = { C = 7200.0 }", "restore = \"Q\"");
    let Err(ScenarioError::Invalid(problems)) = Scenario::parse(&text) else {
        panic!("accepted")
    };
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].problem.contains("names \"Q\""), "{problems:?}");
}

#[test]
fn a_region_name_with_a_control_character_is_refused() {
    let text = g1().replacen("name = \"A\"", "name = \"A\\u0000\"", 1);
    assert_ne!(text, g1(), "the G1 file names Region A");
    assert!(refused(&text).contains("control characters"));
}

#[test]
fn a_file_that_is_too_large_says_so_without_a_made_up_size() {
    let text = format!(
        "{}\n#{}\n",
        g1(),
        "x".repeat(shareplane_sim::scenario::MAX_FILE_BYTES)
    );
    let msg = refused(&text);
    assert!(
        msg.contains(&format!(
            "larger than {} bytes",
            shareplane_sim::scenario::MAX_FILE_BYTES
        )),
        "{msg}"
    );
}

/// A limit change is rolled out Region by Region: the sum of shares never passes the room in
/// existence and ends at the new rate; a rate that cannot hold the floor, or a change that names
/// no Region, is refused with its field.
#[test]
fn a_limit_raise_rolls_out_and_bad_ones_are_refused() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../simulations/scenarios/g1-grants-staggered.toml");
    let base = std::fs::read_to_string(path).expect("G1 scenario");
    let text = format!(
        "{base}\n[[event]]\nat_s = 20.0\nlimit = {{ rate = 14000.0, regions = [\"A\"] }}\n\
         [[event]]\nat_s = 27.0\nlimit = {{ rate = 14000.0, regions = [\"B\", \"C\"] }}\n"
    );
    let sc = Scenario::parse(&text).expect("valid");
    assert_eq!(sc.final_limit(), shareplane_core::Room::rps(14_000));
    let mut worst = Delta::from_milli(i128::MIN);
    let out = shareplane_sim::engine::run(&sc, &mut |row| {
        worst = worst.max(Delta::of(row.sum_shares) - row.audit.expected);
        assert!(row.conserved, "conservation at tick {}", row.tick);
    })
    .expect("runs");
    assert!(
        worst <= Delta::ZERO,
        "the shares passed the room in existence by {worst}"
    );
    assert_eq!(
        out.end.expected,
        Delta::of(shareplane_core::Room::rps(14_000))
    );
    let too_low = text.replace(
        "rate = 14000.0, regions = [\"A\"]",
        "rate = 1000.0, regions = [\"A\"]",
    );
    let msg = refused(&too_low);
    assert!(msg.contains("event.limit.rate"), "{msg}");
    let nobody = text.replace("regions = [\"A\"]", "regions = []");
    let msg = refused(&nobody);
    assert!(msg.contains("limit.regions"), "{msg}");
}
