//! How long `shareplane validate` takes to check a large configuration: builds one with N limits
//! (default 100,000, about 5 MB), checks it with `shareplane::config::parse` as `validate` does,
//! and prints the size, the time and the time per megabyte. Writes the file too when given a path.
//!
//! `cargo run -p shareplane --example validate_large -- [LIMITS] [FILE.toml]`

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let text = config_text(n);
    if let Some(path) = args.next() {
        if let Err(e) = std::fs::write(&path, &text) {
            eprintln!("cannot write {path}: {e}");
            std::process::exit(1);
        }
    }
    // The TOML parser alone, for where the time goes.
    let started = Instant::now();
    let parsed = toml_edit::ImDocument::parse(text.as_str()).is_ok();
    let parse_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let read = shareplane::config::read::read_config(&text).is_ok();
    let read_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let result = shareplane::config::parse(&text, &BTreeMap::new());
    let s = started.elapsed().as_secs_f64();
    let mb = text.len() as f64 / 1e6;
    let verdict = match &result {
        Ok(c) => format!("valid, {} limits", c.deployment.limits.len()),
        Err(e) => format!("{} problems", e.0.len()),
    };
    println!(
        "{n} limits, {mb:.2} MB: checked in {s:.3} s ({:.3} s per MB); {verdict}; \
         of which the TOML parse {parse_s:.3} s (parsed: {parsed}), parse and read into \
         fields {read_s:.3} s (read: {read})",
        s / mb
    );
}

/// A valid three-Region configuration with `n` capacity limits, each written out in full.
fn config_text(n: usize) -> String {
    let mut t = String::from(
        "region = \"us-east-1\"\nstore = \"memory\"\n\
         [[regions]]\nname = \"us-east-1\"\n[[regions]]\nname = \"eu-west-1\"\n\
         [[regions]]\nname = \"ap-southeast-2\"\n",
    );
    for i in 0..n {
        let _ = write!(
            t,
            "\n[[limits]]\nid = \"tenant-{i:08}\"\nrate = {}\nburst_s = 2.0\nfloor = 10\nstep_cap = 50\n",
            1000 + i % 5000
        );
    }
    t
}
