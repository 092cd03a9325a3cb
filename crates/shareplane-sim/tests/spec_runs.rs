//! The reference runs: every scenario in simulations/scenarios/ runs through the simulator and
//! its figures are checked against the expectations kept beside it, in
//! `<scenario>.expect.toml` (for the §9 runs, the numbers docs/SPEC.md states). The numbers are
//! data, never typed in here; this file only knows how to measure a run. Values are checked
//! within ±1 and times within ±0.01 s unless a check names its own `tolerance`.
//!
//! A check names a `measure` (below, [`Check::measure`]) with the inputs that measure reads
//! (`region`, `peer`, `at_s`, `from_s`, `level`, `band`, `regions`) and what it must give: `value`
//! (± tolerance), `at_most`, `at_least`, `between = [lo, hi]` or, for `raise_seconds`,
//! `seconds = [...]`. An unknown measure or field fails the test with the file and the check.

use serde::Deserialize;
use shareplane_sim::scenario::Scenario;
use shareplane_sim::summary::{Rebalance, Summary};
use std::path::{Path, PathBuf};

const VALUE: f64 = 1.0;
const TIME: f64 = 0.01;
/// Comparisons of `at_most` / `at_least` / `between` allow only float noise.
const EXACT: f64 = 1e-9;

struct Tick {
    t_s: f64,
    sum: f64,
    admitted: f64,
    shares: Vec<f64>,
}

struct Run {
    summary: Summary,
    ticks: Vec<Tick>,
    tick_s: f64,
    regions: Vec<String>,
}

fn scenarios_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../simulations/scenarios")
}

fn scenario(path: &Path) -> Scenario {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Scenario::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn run(path: &Path) -> Run {
    let sc = scenario(path);
    let mut ticks = Vec::new();
    let summary = shareplane_sim::simulate(&sc, &mut |row| {
        if row.tick >= 0 {
            ticks.push(Tick {
                t_s: sc.seconds(row.tick),
                sum: row.sum_shares.as_rps(),
                admitted: row.admitted_micro as f64 / 1e6,
                shares: row.regions.iter().map(|r| r.share.as_rps()).collect(),
            });
        }
    })
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Run {
        regions: sc.regions.iter().map(|r| r.name.clone()).collect(),
        summary,
        ticks,
        tick_s: sc.tick_ms as f64 / 1000.0,
    }
}

/// One `<scenario>.expect.toml`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Expectations {
    /// Where the numbers come from (a SPEC section, an issue).
    source: String,
    check: Vec<Check>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Check {
    /// What the check says, in the words of its source.
    what: String,
    measure: String,
    region: Option<String>,
    peer: Option<String>,
    at_s: Option<f64>,
    from_s: Option<f64>,
    level: Option<f64>,
    band: Option<f64>,
    regions: Option<Vec<String>>,
    value: Option<f64>,
    tolerance: Option<f64>,
    at_most: Option<f64>,
    at_least: Option<f64>,
    between: Option<[f64; 2]>,
    seconds: Option<Vec<f64>>,
}

/// What a measure gives.
enum Got {
    Value(f64),
    Time(f64),
    Count(f64),
    Seconds(Vec<f64>),
}

impl Check {
    fn region(&self) -> Result<&str, String> {
        self.region
            .as_deref()
            .ok_or_else(|| "needs `region`".into())
    }
    fn peer(&self) -> Result<&str, String> {
        self.peer.as_deref().ok_or_else(|| "needs `peer`".into())
    }
    fn at_s(&self) -> Result<f64, String> {
        self.at_s.ok_or_else(|| "needs `at_s`".into())
    }
    fn level(&self) -> Result<f64, String> {
        self.level.ok_or_else(|| "needs `level`".into())
    }
    fn start_s(&self) -> f64 {
        self.from_s.unwrap_or(f64::NEG_INFINITY)
    }

    /// Measures `r`. The measures:
    ///
    /// - `rebalance.demand`, `.share_after`, `.target` (`region`, `at_s`); `rebalance.granted`,
    ///   `.taken` (also `peer`): that rebalance's figure;
    /// - `max_sum_shares`, `max_sum_shares_at`, `min_sum_shares`, `min_sum_shares_at`,
    ///   `max_excess_admitted`, `busiest_second_admitted`, `settled_at_s`,
    ///   `conservation_violations`: the summary's;
    /// - `max_sum`, `min_sum` (from `from_s`): the highest (lowest) sum of shares of any tick;
    /// - `sum_stays_from` (`level`): the first tick from which the sum stays at `level`;
    /// - `first_sum_at` (`level`, `from_s`): the first tick at `level`;
    /// - `time_sum_at` (`level`, `from_s`): how long the sum is at `level`;
    /// - `time_sum_above` (`level`): how long the sum is above `level`;
    /// - `last_time_sum_at` (`level`): the end of the last tick at `level`;
    /// - `share_at` (`region`, `at_s`): the share the Region's gateways enforce in that tick;
    /// - `first_within` (`regions`, `level`, `band`, `from_s`): the first tick at which every
    ///   listed Region's share is within `band` of `level`;
    /// - `busiest_second_from` (`from_s`): the most admitted in any one-second window;
    /// - `raise_seconds` (`region`): the whole seconds (rounded up) of its rebalances that raised
    ///   its share;
    /// - `reclaims` (`peer` optional, `region` optional): how many rebalances reclaimed (from
    ///   `peer`, by `region`);
    /// - `reclaim` / `reclaim_at` (`region`, `peer`): how much `region` reclaimed from `peer` at
    ///   its first reclaim of it, and when;
    /// - `first_reclaim_at` (`peer`): the first reclaim of `peer` by anyone;
    /// - `first_silent` (`region`, `peer`, `from_s`): the first rebalance of `region` that counts
    ///   `peer` silent;
    /// - `end_sum`: the sum of shares at the last tick; `end_alive_held`: share + pool of the
    ///   alive Regions at the end.
    fn measure(&self, r: &Run) -> Result<Got, String> {
        let rebalance = || -> Result<&Rebalance, String> {
            let (region, at) = (self.region()?, self.at_s()?);
            (r.summary.rebalances.iter())
                .find(|b| b.region == region && (b.at_s - at).abs() < 1e-9)
                .ok_or_else(|| format!("no rebalance of {region} at {at} s"))
        };
        let extreme = |e: &Option<shareplane_sim::summary::Extreme>| {
            e.as_ref()
                .ok_or_else(|| "the summary has none".to_string())
                .cloned()
        };
        let region_index = |name: &str| {
            (r.regions.iter().position(|n| n == name)).ok_or_else(|| format!("no Region {name}"))
        };
        let at_level = |t: &Tick, level: f64| (t.sum - level).abs() <= VALUE;
        let reclaims = || {
            r.summary.rebalances.iter().flat_map(|b| {
                b.reclaimed
                    .0
                    .iter()
                    .map(move |(peer, v)| (b.region.as_str(), b.at_s, peer.as_str(), *v))
            })
        };
        Ok(match self.measure.as_str() {
            "rebalance.demand" => Got::Value(rebalance()?.demand),
            "rebalance.share_after" => Got::Value(rebalance()?.share_after),
            "rebalance.target" => Got::Value(rebalance()?.target),
            "rebalance.granted" | "rebalance.taken" => {
                let b = rebalance()?;
                let by = if self.measure.ends_with("granted") {
                    &b.granted
                } else {
                    &b.taken
                };
                let peer = self.peer()?;
                Got::Value(*by.get(peer).ok_or_else(|| format!("nothing for {peer}"))?)
            }
            "max_sum_shares" => Got::Value(extreme(&r.summary.max_sum_shares)?.value),
            "max_sum_shares_at" => Got::Time(extreme(&r.summary.max_sum_shares)?.at_s),
            "min_sum_shares" => Got::Value(extreme(&r.summary.min_sum_shares)?.value),
            "min_sum_shares_at" => Got::Time(extreme(&r.summary.min_sum_shares)?.at_s),
            "max_excess_admitted" => Got::Value(r.summary.max_excess_admitted),
            "busiest_second_admitted" => Got::Value(
                r.summary
                    .busiest_second_admitted
                    .ok_or("the summary has none")?,
            ),
            "settled_at_s" => Got::Time(r.summary.settled_at_s.ok_or("never settles")?),
            "conservation_violations" => Got::Count(r.summary.conservation_violations as f64),
            "max_sum" => Got::Value(
                (r.ticks.iter().filter(|t| t.t_s >= self.start_s() - EXACT))
                    .map(|t| t.sum)
                    .fold(f64::NEG_INFINITY, f64::max),
            ),
            "min_sum" => Got::Value(
                (r.ticks.iter().filter(|t| t.t_s >= self.start_s() - EXACT))
                    .map(|t| t.sum)
                    .fold(f64::INFINITY, f64::min),
            ),
            "sum_stays_from" => {
                let level = self.level()?;
                let last_off = r.ticks.iter().rposition(|t| !at_level(t, level));
                Got::Time(last_off.map_or(0.0, |i| r.ticks[i].t_s + r.tick_s))
            }
            "first_sum_at" => {
                let level = self.level()?;
                let t = (r.ticks.iter())
                    .find(|t| t.t_s >= self.start_s() - EXACT && at_level(t, level))
                    .ok_or_else(|| format!("never at {level}"))?;
                Got::Time(t.t_s)
            }
            "time_sum_at" => {
                let level = self.level()?;
                let n = (r.ticks.iter())
                    .filter(|t| t.t_s >= self.start_s() - EXACT && at_level(t, level))
                    .count();
                Got::Time(n as f64 * r.tick_s)
            }
            "time_sum_above" => {
                let level = self.level()?;
                let n = r.ticks.iter().filter(|t| t.sum > level + VALUE).count();
                Got::Time(n as f64 * r.tick_s)
            }
            "last_time_sum_at" => {
                let level = self.level()?;
                let t = (r.ticks.iter().rev())
                    .find(|t| at_level(t, level))
                    .ok_or_else(|| format!("never at {level}"))?;
                Got::Time(t.t_s + r.tick_s)
            }
            "share_at" => {
                let (i, at) = (region_index(self.region()?)?, self.at_s()?);
                let t = (r.ticks.iter())
                    .find(|t| t.t_s >= at - r.tick_s / 2.0)
                    .ok_or_else(|| format!("no tick at {at} s"))?;
                Got::Value(t.shares[i])
            }
            "first_within" => {
                let (level, band) = (self.level()?, self.band.ok_or("needs `band`")?);
                let idx = (self.regions.iter().flatten())
                    .map(|n| region_index(n))
                    .collect::<Result<Vec<_>, _>>()?;
                let t = (r.ticks.iter())
                    .filter(|t| t.t_s >= self.start_s() - EXACT)
                    .find(|t| idx.iter().all(|i| (t.shares[*i] - level).abs() <= band))
                    .ok_or_else(|| format!("never all within {band} of {level}"))?;
                Got::Time(t.t_s)
            }
            "busiest_second_from" => {
                let per = (1.0 / r.tick_s).round() as usize;
                let adm: Vec<f64> = (r.ticks.iter())
                    .filter(|t| t.t_s >= self.start_s() - EXACT)
                    .map(|t| t.admitted)
                    .collect();
                Got::Value(
                    adm.windows(per)
                        .map(|w| w.iter().sum::<f64>())
                        .fold(0.0, f64::max),
                )
            }
            "raise_seconds" => {
                let region = self.region()?;
                Got::Seconds(
                    (r.summary.rebalances.iter())
                        .filter(|b| b.region == region && b.share_after > b.share_before)
                        .map(|b| b.at_s.ceil())
                        .collect(),
                )
            }
            "reclaims" => Got::Count(
                reclaims()
                    .filter(|(by, _, peer, _)| {
                        self.peer.as_deref().is_none_or(|p| p == *peer)
                            && self.region.as_deref().is_none_or(|r| r == *by)
                    })
                    .count() as f64,
            ),
            "reclaim" | "reclaim_at" => {
                let (region, peer) = (self.region()?, self.peer()?);
                let (_, at, _, v) = reclaims()
                    .find(|(by, _, p, _)| *by == region && *p == peer)
                    .ok_or_else(|| format!("{region} never reclaims {peer}"))?;
                if self.measure == "reclaim" {
                    Got::Value(v)
                } else {
                    Got::Time(at)
                }
            }
            "first_reclaim_at" => {
                let peer = self.peer()?;
                let (_, at, _, _) = reclaims()
                    .find(|(_, _, p, _)| *p == peer)
                    .ok_or_else(|| format!("nobody reclaims {peer}"))?;
                Got::Time(at)
            }
            "first_silent" => {
                let (region, peer) = (self.region()?, self.peer()?);
                let b = (r.summary.rebalances.iter())
                    .filter(|b| b.region == region && b.at_s >= self.start_s() - EXACT)
                    .find(|b| b.silent.iter().any(|s| s == peer))
                    .ok_or_else(|| format!("{region} never counts {peer} silent"))?;
                Got::Time(b.at_s)
            }
            "end_sum" => Got::Value(r.ticks.last().ok_or("no ticks")?.sum),
            "end_alive_held" => Got::Value(
                (r.summary.r#final.0.iter())
                    .filter(|(_, f)| f.alive)
                    .map(|(_, f)| f.share + f.pool)
                    .sum(),
            ),
            other => return Err(format!("unknown measure `{other}`")),
        })
    }

    /// Checks `got` against what is wanted; `Err` says how it differs.
    fn judge(&self, got: Got) -> Result<(), String> {
        if let Got::Seconds(s) = got {
            let want = self.seconds.as_ref().ok_or("needs `seconds`")?;
            return if &s == want {
                Ok(())
            } else {
                Err(format!("got {s:?}, want {want:?}"))
            };
        }
        let (x, tol) = match got {
            Got::Value(x) => (x, VALUE),
            Got::Time(x) => (x, TIME),
            Got::Count(x) => (x, 0.0),
            Got::Seconds(_) => unreachable!("handled above"),
        };
        let tol = self.tolerance.unwrap_or(tol);
        let mut wanted = 0;
        if let Some(v) = self.value {
            wanted += 1;
            if (x - v).abs() > tol {
                return Err(format!("got {x}, want {v} (±{tol})"));
            }
        }
        if let Some(m) = self.at_most {
            wanted += 1;
            if x > m + EXACT {
                return Err(format!("got {x}, want at most {m}"));
            }
        }
        if let Some(m) = self.at_least {
            wanted += 1;
            if x < m - EXACT {
                return Err(format!("got {x}, want at least {m}"));
            }
        }
        if let Some([lo, hi]) = self.between {
            wanted += 1;
            if x < lo - EXACT || x > hi + EXACT {
                return Err(format!("got {x}, want between {lo} and {hi}"));
            }
        }
        if wanted == 0 {
            return Err("says nothing it wants (`value`, `at_most`, `at_least`, `between`)".into());
        }
        Ok(())
    }
}

/// Every scenario with its expectations, by file name.
fn expectation_files() -> Vec<(PathBuf, PathBuf)> {
    let dir = scenarios_dir();
    let mut out: Vec<(PathBuf, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            let stem = name.strip_suffix(".expect.toml")?;
            Some((dir.join(format!("{stem}.toml")), p))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_scenario_file_has_its_expectations_and_every_expectation_its_scenario() {
    let dir = scenarios_dir();
    let scenarios: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .filter(|n| n.ends_with(".toml") && !n.ends_with(".expect.toml"))
        .collect();
    assert!(scenarios.len() >= 10, "{scenarios:?}");
    for s in &scenarios {
        let expect = dir.join(s.replace(".toml", ".expect.toml"));
        assert!(expect.exists(), "{s} has no {}", expect.display());
    }
    for (scenario, expect) in expectation_files() {
        assert!(scenario.exists(), "{} names no scenario", expect.display());
    }
}

#[test]
fn every_reference_run_meets_its_expectations() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for (scenario_path, expect_path) in expectation_files() {
        let text = std::fs::read_to_string(&expect_path)
            .unwrap_or_else(|e| panic!("{}: {e}", expect_path.display()));
        let ex: Expectations =
            toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", expect_path.display()));
        assert!(
            !ex.source.is_empty() && !ex.check.is_empty(),
            "{}",
            expect_path.display()
        );
        let r = run(&scenario_path);
        for c in &ex.check {
            checked += 1;
            if let Err(why) = c.measure(&r).and_then(|got| c.judge(got)) {
                let file = expect_path
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned());
                failures.push(format!(
                    "{}: {} ({}): {why}",
                    file.unwrap_or_default(),
                    c.what,
                    c.measure
                ));
            }
        }
    }
    assert!(checked > 0);
    assert!(
        failures.is_empty(),
        "{} of {checked} checks failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn a_check_that_wants_another_number_fails() {
    // The harness itself: a wrong expectation, an unknown measure and a check that wants nothing
    // are all failures, never a pass.
    let path = scenarios_dir().join("g1-jump-staggered.toml");
    let r = run(&path);
    let check = |toml_text: &str| -> Result<(), String> {
        let c: Check = toml::from_str(toml_text).unwrap();
        c.measure(&r).and_then(|g| c.judge(g))
    };
    assert!(check("what = 'x'\nmeasure = 'max_sum_shares'\nvalue = 11898.0").is_ok());
    assert!(check("what = 'x'\nmeasure = 'max_sum_shares'\nvalue = 11890.0").is_err());
    assert!(check("what = 'x'\nmeasure = 'max_sum_shares'\nat_most = 10000.0").is_err());
    assert!(check("what = 'x'\nmeasure = 'max_sums'\nvalue = 1.0").is_err());
    assert!(check("what = 'x'\nmeasure = 'max_sum_shares'").is_err());
    assert!(check("what = 'x'\nmeasure = 'raise_seconds'\nregion = 'C'\nseconds = [1.0]").is_err());
}

#[test]
fn same_input_same_bytes() {
    let sc = scenario(&scenarios_dir().join("g2-two-signals.toml"));
    let once = || {
        let mut csv = Vec::new();
        let mut w = shareplane_sim::trace::TraceWriter::new(&mut csv, &sc).expect("header");
        let s = shareplane_sim::simulate(&sc, &mut |row| w.row(row)).expect("run");
        w.finish().expect("trace");
        (serde_json::to_string(&s).expect("json"), csv)
    };
    assert_eq!(once(), once());
}
