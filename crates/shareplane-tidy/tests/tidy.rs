//! The workspace's sources against the limits and `exceptions.txt` (see the crate's doc). Prints
//! every item over the limits with its count, in the exception file's format.

use std::path::Path;

#[test]
fn functions_files_and_import_circles_stay_within_the_ratchet() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = here.join("../..");
    let over = shareplane_tidy::over_limits(&root).expect("the sources parse");
    let list_path = here.join("exceptions.txt");
    let text = std::fs::read_to_string(&list_path).expect("exceptions.txt is readable");
    let listed = shareplane_tidy::parse_exceptions(&text).expect("exceptions.txt is well formed");

    let count = |kind: &str| over.items.keys().filter(|k| k.starts_with(kind)).count();
    println!(
        "over the limits now: {} functions over {} lines, {} files over {} lines, {} import circles",
        count("fn "),
        shareplane_tidy::MAX_FN_LINES,
        count("file "),
        shareplane_tidy::MAX_FILE_LINES,
        count("cycle "),
    );
    for (key, lines) in &over.items {
        match key.starts_with("cycle ") {
            true => println!("{key}"),
            false => println!("{key} {lines}"),
        }
        for edge in over.cycle_edges.get(key).into_iter().flatten() {
            println!("    {edge}");
        }
    }

    let problems = shareplane_tidy::check(&over, &listed);
    let report: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
    assert!(
        problems.is_empty(),
        "{} disagrees with the sources:\n{}",
        list_path.display(),
        report.join("\n")
    );
}

#[test]
fn the_core_stays_pure_and_only_the_aws_crate_knows_the_sdk() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let breaches = shareplane_tidy::layering_breaches(&root).expect("the sources parse");
    assert!(breaches.is_empty(), "{}", breaches.join("\n"));
}
