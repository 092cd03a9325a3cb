//! `shareplane sim sweep`: one scenario over every assignment of the given phases to its Regions
//! (k phases, n Regions: k^n runs), reporting the worst and the best of each summary figure.

use crate::scenario::Scenario;
use crate::summary::{ByRegion, Summary};
use serde::Serialize;

/// The most runs one sweep may make.
pub const MAX_RUNS: usize = 20_000;

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("{0}")]
    Offsets(String),
    #[error("run with offsets {offsets}: {error}")]
    Run { offsets: String, error: String },
}

/// Which way a figure is worse.
#[derive(Clone, Copy)]
enum Worse {
    Higher,
    Lower,
    /// A time at which something bad happened: earlier is worse, never (null) is best.
    EarlierOrNever,
    /// A time at which something good happened: later is worse, never (null) is worst.
    LaterOrNever,
}

const FIGURES: [(&str, Worse); 9] = [
    ("max_sum_shares", Worse::Higher),
    ("min_sum_shares", Worse::Lower),
    ("share_seconds_below_limit", Worse::Higher),
    ("share_seconds_above_limit", Worse::Higher),
    ("max_excess_admitted", Worse::Higher),
    ("busiest_second_admitted", Worse::Higher),
    ("contract_broken_at_s", Worse::EarlierOrNever),
    ("settled_at_s", Worse::LaterOrNever),
    ("conservation_violations", Worse::Higher),
];

fn figure(s: &Summary, name: &str) -> Option<f64> {
    match name {
        "max_sum_shares" => s.max_sum_shares.map(|e| e.value),
        "min_sum_shares" => s.min_sum_shares.map(|e| e.value),
        "share_seconds_below_limit" => Some(s.share_seconds_below_limit),
        "share_seconds_above_limit" => Some(s.share_seconds_above_limit),
        "max_excess_admitted" => Some(s.max_excess_admitted),
        "busiest_second_admitted" => s.busiest_second_admitted,
        "contract_broken_at_s" => s.contract_broken_at_s,
        "settled_at_s" => s.settled_at_s,
        "conservation_violations" => Some(s.conservation_violations as f64),
        _ => None,
    }
}

/// A badness key: larger is worse.
fn badness(v: Option<f64>, w: Worse) -> f64 {
    match (w, v) {
        (Worse::Higher, Some(v)) => v,
        (Worse::Lower, Some(v)) => -v,
        (Worse::Higher | Worse::Lower, None) => f64::NEG_INFINITY,
        (Worse::EarlierOrNever, Some(v)) => -v,
        (Worse::EarlierOrNever, None) => f64::NEG_INFINITY,
        (Worse::LaterOrNever, Some(v)) => v,
        (Worse::LaterOrNever, None) => f64::INFINITY,
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Extremes {
    pub figure: String,
    pub worst: Option<f64>,
    pub worst_offsets: ByRegion<f64>,
    pub best: Option<f64>,
    pub best_offsets: ByRegion<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SweepResult {
    pub name: String,
    pub runs: usize,
    pub offsets: Vec<f64>,
    pub figures: Vec<Extremes>,
}

/// (badness, value, assignment) of the worst run, then of the best run, of one figure.
type Slot = (f64, Option<f64>, Vec<usize>, f64, Option<f64>, Vec<usize>);

/// Runs the sweep. Offsets are in seconds and must be whole ticks.
pub fn sweep(sc: &Scenario, offsets_s: &[f64]) -> Result<SweepResult, SweepError> {
    let ticks = offsets_in_ticks(sc, offsets_s)?;
    let n = sc.regions.len();
    let k = ticks.len();
    let runs = (0..n)
        .try_fold(1usize, |acc, _| acc.checked_mul(k))
        .filter(|&r| r <= MAX_RUNS);
    let runs = runs.ok_or_else(|| {
        SweepError::Offsets(format!(
            "{k} phases over {n} Regions is more than {MAX_RUNS} runs"
        ))
    })?;
    let mut figures: Vec<Option<Slot>> = vec![None; FIGURES.len()];
    let mut choice = vec![0usize; n];
    for _ in 0..runs {
        let mut run = sc.clone();
        for (r, &c) in run.regions.iter_mut().zip(&choice) {
            r.offset_tick = ticks[c];
        }
        let summary = crate::simulate(&run, &mut |_| {}).map_err(|e| SweepError::Run {
            offsets: describe(sc, offsets_s, &choice),
            error: e.to_string(),
        })?;
        keep_extremes(&mut figures, &summary, &choice);
        // Next assignment, as a base-k counter over the Regions.
        for c in choice.iter_mut().rev() {
            *c += 1;
            if *c < k {
                break;
            }
            *c = 0;
        }
    }
    let assign = |c: &[usize]| {
        ByRegion(
            sc.regions
                .iter()
                .zip(c)
                .map(|(r, &i)| (r.name.clone(), offsets_s[i]))
                .collect(),
        )
    };
    let figures = FIGURES
        .iter()
        .zip(figures)
        .filter_map(|((name, _), f)| {
            let (_, wv, wc, _, bv, bc) = f?;
            Some(Extremes {
                figure: name.to_string(),
                worst: wv,
                worst_offsets: assign(&wc),
                best: bv,
                best_offsets: assign(&bc),
            })
        })
        .collect();
    Ok(SweepResult {
        name: sc.name.clone(),
        runs,
        offsets: offsets_s.to_vec(),
        figures,
    })
}

/// Keeps, per figure, the worst and the best run so far (`choice`: this run's phases).
fn keep_extremes(figures: &mut [Option<Slot>], summary: &crate::Summary, choice: &[usize]) {
    for (slot, (name, worse)) in figures.iter_mut().zip(FIGURES) {
        let v = figure(summary, name);
        let b = badness(v, worse);
        match slot {
            None => *slot = Some((b, v, choice.to_vec(), b, v, choice.to_vec())),
            Some((wb, wv, wc, bb, bv, bc)) => {
                if b > *wb {
                    (*wb, *wv, *wc) = (b, v, choice.to_vec());
                }
                if b < *bb {
                    (*bb, *bv, *bc) = (b, v, choice.to_vec());
                }
            }
        }
    }
}

fn offsets_in_ticks(sc: &Scenario, offsets_s: &[f64]) -> Result<Vec<i64>, SweepError> {
    if offsets_s.is_empty() || offsets_s.len() > 100 {
        return Err(SweepError::Offsets("give 1 to 100 phases".into()));
    }
    offsets_s
        .iter()
        .map(|&s| {
            let ms = (s * 1000.0).round();
            let ok = s.is_finite()
                && s.abs() <= 1e6
                && (ms - s * 1000.0).abs() < 1e-6
                && (ms as i64) % sc.tick_ms as i64 == 0;
            if ok {
                Ok(ms as i64 / sc.tick_ms as i64)
            } else {
                Err(SweepError::Offsets(format!(
                    "{s} s is not a whole number of ticks ({} ms)",
                    sc.tick_ms
                )))
            }
        })
        .collect()
}

fn describe(sc: &Scenario, offsets_s: &[f64], choice: &[usize]) -> String {
    sc.regions
        .iter()
        .zip(choice)
        .map(|(r, &c)| format!("{}={}", r.name, offsets_s[c]))
        .collect::<Vec<_>>()
        .join(",")
}

impl SweepResult {
    pub fn report(&self) -> String {
        let fmt = |v: Option<f64>| v.map_or("never".to_string(), |v| format!("{v}"));
        let off = |b: &ByRegion<f64>| {
            b.0.iter()
                .map(|(n, v)| format!("{n}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut s = format!(
            "sweep: {} ({} runs, phases {:?})\n",
            self.name, self.runs, self.offsets
        );
        s.push_str(&format!(
            "{:<28} {:>14}  {:<28} {:>14}  {}\n",
            "figure", "worst", "(phases)", "best", "(phases)"
        ));
        for f in &self.figures {
            s.push_str(&format!(
                "{:<28} {:>14}  {:<28} {:>14}  {}\n",
                f.figure,
                fmt(f.worst),
                off(&f.worst_offsets),
                fmt(f.best),
                off(&f.best_offsets)
            ));
        }
        s
    }
}
