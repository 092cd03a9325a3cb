//! `shareplane sim …`: run a scenario, sweep its phases, or fuzz fault schedules.
//!
//! Exit codes: 0 when the run completed (whatever it measured), 2 for an invalid scenario file or
//! command line, 1 for an internal failure (including a fuzz seed that failed its checks).

use crate::plot::PlotData;
use crate::scenario::{Scenario, MAX_FILE_BYTES};
use crate::trace::TraceWriter;
use clap::Parser;
use std::ffi::OsString;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "shareplane sim",
    about = "Run a partition-test scenario (see simulations/README.md)"
)]
#[command(
    after_help = "Also: `shareplane sim sweep SCENARIO.toml --offsets 0,1.7,3.3` and \
                        `shareplane sim fuzz --seeds N [--start S] [--family classic|swarm|cascade|stale-close]`."
)]
struct RunArgs {
    /// The scenario file (TOML; its format is in simulations/README.md and docs/SPEC.md, "The simulator").
    scenario: PathBuf,
    /// Print exactly one JSON document (the summary) on stdout.
    #[arg(long)]
    json: bool,
    /// Write one CSV row per tick to this file.
    #[arg(long, value_name = "FILE.csv")]
    trace: Option<PathBuf>,
    /// Draw the run as SVG to this file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

#[derive(Parser)]
#[command(
    name = "shareplane sim sweep",
    about = "Rerun a scenario over every assignment of phases to its Regions"
)]
struct SweepArgs {
    scenario: PathBuf,
    /// Phases in seconds, comma-separated; every Region gets each in turn (k^n runs).
    #[arg(
        long,
        value_delimiter = ',',
        required = true,
        allow_negative_numbers = true
    )]
    offsets: Vec<f64>,
    /// Print the result as one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Parser)]
#[command(
    name = "shareplane sim fuzz",
    about = "Random scenarios from seeds, checked at every tick",
    after_help = "Families: classic (2 to 8 Regions, every fault kind drawn independently); \
                  swarm (each seed enables a random subset of the fault kinds and draws its faults \
                  in cascades: one-way cuts around losses, a second loss within seconds, restores \
                  under a cut, an heir lost after it took grants); cascade (issue 31's shape: a \
                  one-way cut B->A, demand moved from B to C, B and C lost with true verdicts, B \
                  restored under the cut, the heal, C restored; timings and sizes from the seed); \
                  stale-close (an heir lost while it holds a stale close: O grants to G behind a \
                  one-way cut O->H,G, O lost, H lost after the heirs closed O, the heal, O and H \
                  restored). A seed names one scenario within its family. The run ends with its throughput \
                  (seeds a minute). Exit 0 when every seed passed, 1 when one failed, 2 for a bad \
                  command line (an empty range, or one that passes the largest seed)."
)]
struct FuzzArgs {
    /// How many seeds to run (1 to 100000000).
    #[arg(long)]
    seeds: u64,
    /// The first seed; the range must end at or below 18446744073709551615.
    #[arg(long, default_value_t = 1)]
    start: u64,
    /// The generator: classic, swarm, cascade or stale-close.
    #[arg(long, default_value = "classic", value_parser = parse_family)]
    family: crate::swarm::Family,
    /// Print each generated scenario as TOML (to replay it with `shareplane sim`); runs the
    /// seeds one by one, in order.
    #[arg(long)]
    print: bool,
    /// Threads (default: `SHAREPLANE_FUZZ_JOBS`, else every core). The figures do not depend
    /// on it.
    #[arg(long)]
    jobs: Option<usize>,
}

fn parse_family(s: &str) -> Result<crate::swarm::Family, String> {
    crate::swarm::Family::from_name(s)
        .ok_or_else(|| format!("must be {}", crate::swarm::Family::NAMES.join(", ")))
}

/// `shareplane sim ARGS` (ARGS without the word "sim").
pub fn main(args: Vec<OsString>) -> ExitCode {
    let first = args.first().and_then(|a| a.to_str()).unwrap_or("");
    match first {
        "sweep" => sweep(&args[1..]),
        "fuzz" => fuzz(&args[1..]),
        _ => run(&args),
    }
}

fn parse<P: Parser>(name: &str, args: &[OsString]) -> Result<P, ExitCode> {
    let argv = std::iter::once(OsString::from(name)).chain(args.iter().cloned());
    P::try_parse_from(argv).map_err(|e| {
        let _ = e.print();
        if e.use_stderr() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        }
    })
}

/// Reads and validates a scenario file; prints the problems and gives exit 2 when it is invalid.
pub fn load(path: &Path) -> Result<Scenario, ExitCode> {
    let fail = |msg: String| {
        eprintln!("{}: {msg}", path.display());
        ExitCode::from(2)
    };
    let file = File::open(path).map_err(|e| fail(format!("cannot read the scenario: {e}")))?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .map_err(|e| fail(format!("cannot read the scenario: {e}")))?;
    Scenario::parse(&text).map_err(|e| fail(format!("invalid scenario:\n{e}")))
}

fn internal(msg: String) -> ExitCode {
    eprintln!("shareplane sim: {msg}");
    ExitCode::from(1)
}

fn run(args: &[OsString]) -> ExitCode {
    let a: RunArgs = match parse("shareplane sim", args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let sc = match load(&a.scenario) {
        Ok(sc) => sc,
        Err(code) => return code,
    };
    let mut trace = match &a.trace {
        Some(p) => match File::create(p)
            .map(BufWriter::new)
            .and_then(|f| TraceWriter::new(f, &sc))
        {
            Ok(t) => Some(t),
            Err(e) => return internal(format!("cannot write {}: {e}", p.display())),
        },
        None => None,
    };
    let mut plot = a.plot.as_ref().map(|_| PlotData::new(&sc));
    let result = crate::simulate_with_events(&sc, &mut |row| {
        if let Some(t) = trace.as_mut() {
            t.row(row);
        }
        if let Some(p) = plot.as_mut() {
            p.row(row);
        }
    });
    let (summary, events) = match result {
        Ok(r) => r,
        Err(e) => return internal(e.to_string()),
    };
    if let (Some(t), Some(p)) = (trace, &a.trace) {
        if let Err(e) = t.finish() {
            return internal(format!("cannot write {}: {e}", p.display()));
        }
    }
    if let (Some(data), Some(p)) = (plot, &a.plot) {
        if let Err(e) = std::fs::write(p, data.svg(&sc, &events)) {
            return internal(format!("cannot write {}: {e}", p.display()));
        }
    }
    let text = if a.json {
        match serde_json::to_string_pretty(&summary) {
            Ok(j) => j + "\n",
            Err(e) => return internal(format!("cannot encode the summary: {e}")),
        }
    } else {
        summary.report()
    };
    print_out(&text)
}

fn print_out(text: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => internal(format!("cannot write to stdout: {e}")),
    }
}

fn sweep(args: &[OsString]) -> ExitCode {
    let a: SweepArgs = match parse("shareplane sim sweep", args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let sc = match load(&a.scenario) {
        Ok(sc) => sc,
        Err(code) => return code,
    };
    let result = match crate::sweep::sweep(&sc, &a.offsets) {
        Ok(r) => r,
        Err(crate::sweep::SweepError::Offsets(msg)) => {
            eprintln!("shareplane sim sweep: --offsets: {msg}");
            return ExitCode::from(2);
        }
        Err(e) => return internal(e.to_string()),
    };
    let text = if a.json {
        match serde_json::to_string_pretty(&result) {
            Ok(j) => j + "\n",
            Err(e) => return internal(format!("cannot encode the result: {e}")),
        }
    } else {
        result.report()
    };
    print_out(&text)
}

fn fuzz(args: &[OsString]) -> ExitCode {
    let a: FuzzArgs = match parse("shareplane sim fuzz", args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if a.seeds > 100_000_000 {
        eprintln!("shareplane sim fuzz: --seeds must be 1 to 100000000");
        return ExitCode::from(2);
    }
    if let Err(e) = crate::swarm::check_range(a.start, a.seeds) {
        eprintln!("shareplane sim fuzz: {e}");
        return ExitCode::from(2);
    }
    let wall_seconds = stopwatch();
    let family = a.family;
    let mut out = std::io::stdout().lock();
    // With --print, stdout carries only the scenarios (so that `--print > seed.toml` is a file
    // `shareplane sim` reads); the verdicts and the report go to stderr.
    let mut report: Box<dyn Write> = if a.print {
        Box::new(std::io::stderr().lock())
    } else {
        Box::new(std::io::stdout().lock())
    };
    let jobs = if a.print {
        1
    } else {
        a.jobs.unwrap_or_else(crate::swarm::default_jobs)
    };
    // The wall time counts generating and checking the seeds, not measuring the failed ones.
    let (totals, failed, wall_s) = if a.print {
        let (totals, failed) = print_and_check(family, a.start, a.seeds, &mut out, &mut report);
        (totals, failed, wall_seconds())
    } else {
        let (totals, failures) = crate::swarm::run(family, a.start, a.seeds, jobs);
        let wall_s = wall_seconds();
        for (seed, failure) in &failures {
            let _ = writeln!(report, "{}", failed_line(family, *seed, failure));
        }
        (totals, failures.len() as u64, wall_s)
    };
    let _ = writeln!(report, "family {}", family.name());
    let _ = writeln!(report, "{}", totals.report(a.seeds, failed));
    let _ = writeln!(
        report,
        "{}",
        crate::swarm::throughput(a.seeds, wall_s, jobs)
    );
    if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// `fuzz --print`: each seed's scenario as TOML on `out`, checked one after the other; a failure
/// on `report`.
fn print_and_check(
    family: crate::swarm::Family,
    start: u64,
    seeds: u64,
    out: &mut dyn Write,
    report: &mut dyn Write,
) -> (crate::fuzz::Totals, u64) {
    let mut totals = crate::fuzz::Totals::default();
    let mut failed = 0u64;
    for seed in start..start + seeds {
        let sc = family.generate(seed);
        let _ = writeln!(out, "{}", crate::fuzz::to_toml(&sc));
        match crate::fuzz::check(&sc) {
            Ok(r) => totals.add(&r, sc.limit, seed),
            Err(failure) => {
                failed += 1;
                let _ = writeln!(report, "{}", failed_line(family, seed, &failure));
            }
        }
    }
    (totals, failed)
}

/// What a failed seed prints: the failure, the running shares' peak above `L` and the replay.
fn failed_line(family: crate::swarm::Family, seed: u64, failure: &str) -> String {
    let peak = match crate::swarm::excess(&family.generate(seed)) {
        Ok(x) => x.to_string(),
        Err(e) => format!("not measured: {e}"),
    };
    format!(
        "seed {seed} FAILED: {failure}\n  {peak}\n  replay: {}   (add --print for the scenario as TOML)",
        family.replay(seed)
    )
}

/// Seconds of wall time since the call, for a fuzz run's report line: the one clock the
/// simulator reads (`clippy.toml` bans the rest), and no simulated decision sees it.
#[allow(clippy::disallowed_methods)]
fn stopwatch() -> impl Fn() -> f64 {
    let started = std::time::Instant::now();
    move || started.elapsed().as_secs_f64()
}
