//! The figures of an end-to-end run, computed from what the load generators printed and from the
//! rule sets polled from the daemons. Pure functions, so that they are tested on their own.

use shareplane_limiter::loadgen::worst_window;
use std::ops::Range;

/// One second of one load generator, as `shareplane-loadgen` prints it.
pub use shareplane_limiter::loadgen::SecondStats as Second;

/// Parses a load generator's stdout: one JSON object per line.
pub fn parse_seconds(stdout: &str) -> Result<Vec<Second>, serde_json::Error> {
    stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect()
}

/// Several Regions' seconds added up, second by second, over the seconds every run has.
pub fn add_up(runs: &[Vec<Second>]) -> Vec<Second> {
    let len = runs.iter().map(Vec::len).min().unwrap_or(0);
    (0..len)
        .map(|i| {
            let mut sum = Second {
                second: i as u64,
                unix_ms: runs.iter().map(|r| r[i].unix_ms).min().unwrap_or(0),
                ..Second::default()
            };
            for r in runs {
                let s = &r[i];
                sum.sent += s.sent;
                sum.admitted += s.admitted;
                sum.admitted_fallback += s.admitted_fallback;
                sum.errors += s.errors;
                sum.dropped += s.dropped;
                sum.share_milli_rps += s.share_milli_rps;
                sum.fenced += s.fenced;
                for (t, x) in sum.enforced_milli_rps.iter_mut().zip(s.enforced_milli_rps) {
                    *t += x;
                }
            }
            sum
        })
        .collect()
}

/// The rates of one limit in every Region's published rule set, read at (nearly) one instant.
#[derive(Clone, Debug, PartialEq)]
pub struct ShareSample {
    pub unix_ms: u64,
    /// Requests per second by Region; `None` where the read failed.
    pub rates_rps: Vec<Option<f64>>,
}

impl ShareSample {
    /// The sum, when every Region was read.
    pub fn sum_rps(&self) -> Option<f64> {
        self.rates_rps.iter().copied().sum()
    }
}

/// The three properties of a run, with where each is closest to failing.
#[derive(Clone, Debug, PartialEq)]
pub struct Figures {
    pub limit_rps: f64,
    pub seconds: usize,
    /// Largest excess of admissions over `2L + L × t` over every window of whole seconds
    /// (SPEC §5); the contract holds when it is at most zero.
    pub worst_excess: f64,
    pub worst_window: (usize, usize),
    pub busiest_second: u64,
    /// Highest sum of published shares over the samples where every Region was read.
    pub max_share_sum_rps: f64,
    /// Highest sum over Regions of what their gateways enforced (the share, 0 while fenced),
    /// sampled every tenth of a second, and where: `(second, tenth)`.
    pub max_enforced_sum_rps: f64,
    pub max_enforced_at: (usize, usize),
    pub share_samples: usize,
    pub share_samples_incomplete: usize,
    /// The seconds in which the run counts as converged.
    pub converged: Vec<Range<usize>>,
    /// Lowest `admitted / min(demand, L)` over the converged seconds, and its second.
    pub min_ratio: f64,
    pub min_ratio_second: usize,
    pub admitted_fallback: u64,
    pub errors: u64,
    pub dropped: u64,
}

/// Computes the figures of a run of limit `limit_rps` whose Regions' per-second totals are
/// `total`, counting it as converged in the seconds of `converged`. Demand is what the gateways
/// received (`sent`).
pub fn figures(
    limit_rps: f64,
    total: &[Second],
    shares: &[ShareSample],
    converged: &[Range<usize>],
) -> Figures {
    let admitted: Vec<u64> = total.iter().map(|s| s.admitted).collect();
    let (worst_excess, from, to) = worst_window(&admitted, limit_rps, 2.0 * limit_rps);
    let sums: Vec<f64> = shares.iter().filter_map(ShareSample::sum_rps).collect();
    let (min_ratio, min_ratio_second) = total
        .iter()
        .enumerate()
        .filter(|(i, _)| converged.iter().any(|r| r.contains(i)))
        .map(|(i, s)| {
            let want = (s.sent as f64).min(limit_rps);
            let ratio = if want > 0.0 {
                s.admitted as f64 / want
            } else {
                1.0
            };
            (ratio, i)
        })
        .fold((f64::INFINITY, 0), |a, b| if b.0 < a.0 { b } else { a });
    let (max_enforced, at) = max_enforced(total);
    Figures {
        limit_rps,
        max_enforced_sum_rps: max_enforced,
        max_enforced_at: at,
        seconds: total.len(),
        worst_excess,
        worst_window: (from, to),
        busiest_second: admitted.iter().copied().max().unwrap_or(0),
        max_share_sum_rps: sums.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        share_samples: sums.len(),
        share_samples_incomplete: shares.len() - sums.len(),
        converged: converged.to_vec(),
        min_ratio,
        min_ratio_second,
        admitted_fallback: total.iter().map(|s| s.admitted_fallback).sum(),
        errors: total.iter().map(|s| s.errors).sum(),
        dropped: total.iter().map(|s| s.dropped).sum(),
    }
}

/// The highest enforced sum over every tenth of every second, and where.
fn max_enforced(total: &[Second]) -> (f64, (usize, usize)) {
    let mut best = (0u64, (0, 0));
    for (i, s) in total.iter().enumerate() {
        for (k, x) in s.enforced_milli_rps.iter().enumerate() {
            if *x > best.0 {
                best = (*x, (i, k));
            }
        }
    }
    (best.0 as f64 / 1000.0, best.1)
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let l = self.limit_rps;
        writeln!(f, "seconds measured: {}", self.seconds)?;
        writeln!(
            f,
            "contract (admissions over any window of t s <= 2L + L*t = {} + {}*t): worst excess {:.0} over seconds [{}, {}) (<= 0 holds); busiest second {}",
            2.0 * l,
            l,
            self.worst_excess,
            self.worst_window.0,
            self.worst_window.1,
            self.busiest_second
        )?;
        writeln!(
            f,
            "sum of published shares: highest {:.3}/s over {} samples ({} incomplete), limit {l}/s",
            self.max_share_sum_rps, self.share_samples, self.share_samples_incomplete
        )?;
        writeln!(
            f,
            "sum of shares the gateways enforced (0 while fenced), every 0.1 s: highest {:.3}/s at second {}.{}, limit {l}/s",
            self.max_enforced_sum_rps, self.max_enforced_at.0, self.max_enforced_at.1
        )?;
        writeln!(
            f,
            "after convergence (seconds {:?}): lowest admitted / min(demand, L) = {:.3} at second {}",
            self.converged, self.min_ratio, self.min_ratio_second
        )?;
        write!(
            f,
            "admitted by the local fallback {}, errors {}, dropped {}",
            self.admitted_fallback, self.errors, self.dropped
        )
    }
}

/// One line per second: each Region's received requests, admissions, the share its gateway ran
/// and what it enforced at the end of the second (0 while fenced), and the totals.
pub fn table(names: &[&str], runs: &[Vec<Second>], total: &[Second]) -> String {
    let mut out = String::from("second");
    for n in names {
        out.push_str(&format!(" | {n} sent  adm   share     enf"));
    }
    out.push_str(" | total sent   adm   share     enf\n");
    let enf = |s: &Second| s.enforced_milli_rps.last().copied().unwrap_or(0) as f64 / 1000.0;
    for (i, t) in total.iter().enumerate() {
        out.push_str(&format!("{i:6}"));
        for r in runs {
            let s = &r[i];
            out.push_str(&format!(
                " | {:6} {:4} {:7.1} {:7.1}",
                s.sent,
                s.admitted,
                s.share_milli_rps as f64 / 1000.0,
                enf(s)
            ));
        }
        out.push_str(&format!(
            " | {:10} {:5} {:7.1} {:7.1}\n",
            t.sent,
            t.admitted,
            t.share_milli_rps as f64 / 1000.0,
            enf(t)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sec(sent: u64, admitted: u64) -> Second {
        let mut enforced_milli_rps = [0; 10];
        enforced_milli_rps[3] = 75;
        Second {
            sent,
            admitted,
            share_milli_rps: 100_000,
            enforced_milli_rps,
            ..Second::default()
        }
    }

    #[test]
    fn parses_the_load_generators_lines() {
        let text = r#"{"second":0,"unix_ms":5,"sent":7,"admitted":6,"admitted_fallback":1,"errors":0,"dropped":0,"rule_version":4,"share_milli_rps":333000}

{"second":1,"unix_ms":1005,"sent":8,"admitted":8,"admitted_fallback":0,"errors":0,"dropped":0,"rule_version":6,"share_milli_rps":334000}"#;
        let s = parse_seconds(text).map(|v| v.iter().map(|s| s.admitted).collect::<Vec<_>>());
        assert_eq!(s.ok(), Some(vec![6, 8]));
        assert!(parse_seconds("{\"second\":0}").is_err());
    }

    #[test]
    fn regions_add_up_second_by_second_over_the_common_length() {
        let a = vec![sec(10, 5), sec(10, 6), sec(10, 7)];
        let b = vec![sec(1, 1), sec(2, 2)];
        let t = add_up(&[a, b]);
        let got: Vec<(u64, u64, u64, u64)> = t
            .iter()
            .map(|s| {
                (
                    s.sent,
                    s.admitted,
                    s.share_milli_rps,
                    s.enforced_milli_rps[3],
                )
            })
            .collect();
        assert_eq!(got, vec![(11, 6, 200_000, 150), (12, 8, 200_000, 150)]);
    }

    #[test]
    fn figures_find_the_excess_the_share_sum_and_the_weakest_converged_second() {
        // L = 100: 400 in the first second is 100 above 2L + L.
        let total = vec![sec(500, 400), sec(50, 50), sec(500, 90), sec(500, 99)];
        let shares = vec![
            ShareSample {
                unix_ms: 0,
                rates_rps: vec![Some(60.0), Some(50.0)],
            },
            ShareSample {
                unix_ms: 1,
                rates_rps: vec![Some(99.0), None],
            },
        ];
        let mut total = total;
        total[2].enforced_milli_rps[7] = 99_500;
        let f = figures(100.0, &total, &shares, &[1..2, 2..9]);
        assert_eq!((f.max_enforced_sum_rps, f.max_enforced_at), (99.5, (2, 7)));
        assert_eq!(f.worst_excess, 100.0);
        assert_eq!(f.worst_window, (0, 1));
        assert_eq!(f.max_share_sum_rps, 110.0);
        assert_eq!((f.share_samples, f.share_samples_incomplete), (1, 1));
        // Second 1 admitted all 50 it received; second 2 admitted 90 of min(500, 100).
        assert_eq!((f.min_ratio, f.min_ratio_second), (0.9, 2));
    }
}
