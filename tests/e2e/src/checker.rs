//! The checker of the partition tests: it judges physical truth from what was recorded, never
//! what the daemons say about themselves, through the one judge every checker uses
//! (`shareplane_judge::judge` for every tenth, `judge_end` for the admissions and the return);
//! this module lays the history out and states the allowances. Its inputs are what each Region's gateway enforced in
//! every tenth of a second (the share, 0 while fenced, 0 while no gateway ran) and admitted in
//! every second, as the load generators reported them, and the faults as the runner injected them.
//!
//! It fails a run when
//! 1. the enforced shares of the Regions sum above `L` outside an allowance (below), or above
//!    what the allowance permits inside it;
//! 2. admissions of all Regions in any window of `t` whole seconds exceed `2L + L·t` plus what
//!    the allowances in that window permit (SPEC §5);
//! 3. the enforced shares have not returned to exactly `L` in total (to the milli-request per
//!    second, per Region, of rounding), every Region enforcing a share, within
//!    [`Bounds::converge_ms`] of the last heal. (Not that they stay there: demand measured from
//!    real traffic moves targets a little every period, a share lowered at once is granted back a
//!    period or two later, so the total dips a fraction of a percent below `L` and returns.)
//!
//! **Allowances** (each stated in docs/PROTOCOL.md or tests/e2e/README.md):
//! - *A false unhealthy verdict for a live Region* (residual risk 1): survivors may reclaim its
//!   room while it still enforces its share, until it reads its own verdict and fences at its next
//!   rebalance. Allowed: `Σ enforced ≤ L + s`, where `s` is what that Region enforced when the
//!   verdict was put, for [`Bounds::false_verdict_ms`] after it (its health read, one rebalance,
//!   the long-poll to its gateway, on a busy machine); admissions may exceed by that Region's burst
//!   (`2 s`) plus `s` per second of the allowance.
//! - *A Redis restart*: a Redis without persistence loses its buckets, and a missing bucket starts
//!   full (SPEC §7), so the Region may admit one extra burst (`2 × share`) in windows containing the
//!   restart. Enforced shares are not affected.
//!
//! **Limit changes** (docs/PROTOCOL.md, "Limit changes"): `L` is the rate in force, and while a
//! change rolls out it is the larger of the old and the new rate, from the first Region's reload
//! until the change has *settled*: every Region runs the new file, and has for the time its
//! daemon needs to adopt it (the runner states it: three periods, or the convergence bound for a
//! Region that was down or stopped before it adopted, whose heirs hold its room at the old
//! version until it returns and repays). After that the new rate alone. The burst of `2L + L·t`
//! is `2 ×` the largest `L` of the window, and `L·t` sums `L` second by second. Convergence is to
//! the last rate rolled out.
//!
//! Pure, so that it is tested on histories of its own.

use shareplane_core::Room;
use shareplane_judge::{
    judge_end, Admissions, Allowances, Assumptions, End, EndAllowances, Excess, FalseVerdict,
    Instant, Limit, Liveness, Region, RunningReclaimed, StaleRoom,
};

/// Tenths of a second per second in the recorded history.
pub const TENTHS: usize = 10;

/// What one run recorded.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub limit_rps: f64,
    /// Per Region, per tenth since the start of the load: what its gateway enforced,
    /// milli-requests/s.
    pub enforced: Vec<Vec<u64>>,
    /// Per Region, per second since the start of the load: admissions.
    pub admitted: Vec<Vec<u64>>,
    pub allowances: Vec<Allowance>,
    /// Milliseconds since the start of the load of the last step that undid a fault.
    pub last_heal_ms: u64,
    /// The limit changes rolled out, in order (`limit_rps` is the rate before the first).
    pub limit_changes: Vec<LimitChange>,
}

/// One limit change as the runner rolled it out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LimitChange {
    /// When the first Region's file said the new rate (ms since the start of the load).
    pub at_ms: u64,
    /// From when only the new rate counts (see the module documentation).
    pub settled_ms: u64,
    pub old_rps: f64,
    pub new_rps: f64,
}

impl History {
    /// `L` at tenth `t`, milli-requests/s: the rate in force, or during a change the larger of
    /// the rates in play.
    pub fn limit_milli_at(&self, t: usize) -> i64 {
        let ms = t as u64 * 100;
        let mut rate = self.limit_rps;
        let mut in_play: f64 = 0.0;
        for c in &self.limit_changes {
            if ms >= c.at_ms {
                rate = c.new_rps;
                if ms < c.settled_ms {
                    in_play = in_play.max(c.old_rps).max(c.new_rps);
                }
            }
        }
        (rate.max(in_play) * 1000.0).round() as i64
    }

    /// The rate the shares must return to: the last one rolled out.
    pub fn final_limit_rps(&self) -> f64 {
        self.limit_changes
            .last()
            .map_or(self.limit_rps, |c| c.new_rps)
    }
}

/// A stated excess, see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Allowance {
    pub region: usize,
    pub kind: AllowanceKind,
    /// Milliseconds since the start of the load.
    pub at_ms: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllowanceKind {
    FalseVerdict,
    RedisRestart,
}

/// The bounds the checker enforces.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub false_verdict_ms: u64,
    pub converge_ms: u64,
}

/// What the checker found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Judgement {
    /// Highest `Σ enforced − L` anywhere (requests/s; ≤ 0 when never above), and its tenth.
    pub worst_enforced_excess_rps: f64,
    pub worst_enforced_at_tenth: usize,
    /// Highest `Σ enforced − L` outside every allowance.
    pub worst_unallowed_excess_rps: f64,
    /// Largest excess of admissions over `2L + L·t` (before allowances), and its window.
    pub worst_window_excess: f64,
    pub worst_window: (usize, usize),
    /// Milliseconds from the last heal until the total enforced returned to `L` for good.
    pub converged_after_ms: Option<u64>,
    pub failures: Vec<String>,
}

/// Judges `h` by `b` through the one judge (`shareplane_judge`): every tenth of what the gateways
/// enforced, then at the end the admissions and the return to `L`. What it measures (the worst
/// excess, inside and outside the allowances, and the return) it keeps.
pub fn judge(h: &History, b: Bounds) -> Judgement {
    let mut j = Judgement {
        worst_enforced_excess_rps: f64::NEG_INFINITY,
        worst_unallowed_excess_rps: f64::NEG_INFINITY,
        ..Judgement::default()
    };
    let sums = sum_per_tenth(&h.enforced);
    let mut regions = vec![Region::default(); h.enforced.len()];
    for (t, &sum) in sums.iter().enumerate() {
        for (r, row) in regions.iter_mut().zip(&h.enforced) {
            *r = Region {
                share: Room::from_milli(row.get(t).copied().unwrap_or(0)),
                running: true,
                ..Region::default()
            };
        }
        let allowed = allowed_enforced_milli(h, b, t);
        let instant = Instant {
            regions: &regions,
            ..Instant::default()
        };
        let verdict = shareplane_judge::judge(&instant, &allowances(h, t, allowed));
        let excess = sum as i64 - h.limit_milli_at(t);
        let rps = excess as f64 / 1000.0;
        if rps > j.worst_enforced_excess_rps {
            j.worst_enforced_excess_rps = rps;
            j.worst_enforced_at_tenth = t;
        }
        if allowed == 0 {
            j.worst_unallowed_excess_rps = j.worst_unallowed_excess_rps.max(rps);
        }
        if let Err(v) = verdict {
            (j.failures).push(format!(
                "enforced at {:.1} s: {v}",
                t as f64 / TENTHS as f64
            ));
        }
    }
    end(h, b, &sums, &mut j);
    j.failures.truncate(20);
    j
}

/// What the checker allows at tenth `t`: `L` as rolled out, and `allowed` above it while a
/// false verdict's allowance is in force; the enforced rates are rounded to milli-requests.
fn allowances(h: &History, t: usize, allowed: i64) -> Allowances {
    let limit = Room::from_milli(h.limit_milli_at(t).max(0) as u64);
    Allowances {
        limit: Limit::fixed(limit),
        false_verdict: FalseVerdict {
            excess: match allowed {
                0 => Excess::None,
                a => Excess::UpTo(Room::from_milli(a.max(0) as u64)),
            },
            audit_measured: false,
        },
        faults_may_linger: true,
        // No records here: the shares alone are judged.
        stale_room: StaleRoom::Forbidden,
        assumptions: Assumptions::Within,
        running_reclaimed: RunningReclaimed::Never,
        rounding: Room::from_milli(rounding(h).max(0) as u64),
    }
}

/// Rounding of the enforced rates to milli-requests: one per Region.
fn rounding(h: &History) -> i64 {
    h.enforced.len() as i64
}

fn sum_per_tenth(enforced: &[Vec<u64>]) -> Vec<u64> {
    let len = enforced.iter().map(Vec::len).max().unwrap_or(0);
    (0..len)
        .map(|t| {
            enforced
                .iter()
                .map(|r| r.get(t).copied().unwrap_or(0))
                .sum()
        })
        .collect()
}

/// What Region `r` enforced at the tenth of `ms` (its highest over the preceding second, so that
/// a share lowered just before the verdict still counts as held).
fn share_at(h: &History, r: usize, ms: u64) -> u64 {
    let t = (ms / 100) as usize;
    let row = h.enforced.get(r).map(Vec::as_slice).unwrap_or(&[]);
    let from = t.saturating_sub(TENTHS);
    row.get(from..=t.min(row.len().saturating_sub(1)))
        .map_or(0, |s| s.iter().copied().max().unwrap_or(0))
}

/// The excess over `L` allowed at tenth `t` (milli-requests/s).
fn allowed_enforced_milli(h: &History, b: Bounds, t: usize) -> i64 {
    let ms = t as u64 * 100;
    h.allowances
        .iter()
        .filter(|a| a.kind == AllowanceKind::FalseVerdict)
        .filter(|a| ms >= a.at_ms && ms <= a.at_ms + b.false_verdict_ms)
        .map(|a| share_at(h, a.region, a.at_ms) as i64)
        .sum()
}

/// The extra admissions the allowances permit in the window of seconds `[from, to)`.
fn allowed_admissions(h: &History, b: Bounds, from: usize, to: usize) -> f64 {
    let (w0, w1) = (from as u64 * 1000, to as u64 * 1000);
    h.allowances
        .iter()
        .map(|a| {
            let share = share_at(h, a.region, a.at_ms) as f64 / 1000.0;
            match a.kind {
                AllowanceKind::RedisRestart if a.at_ms >= w0 && a.at_ms < w1 => 2.0 * share,
                AllowanceKind::RedisRestart => 0.0,
                AllowanceKind::FalseVerdict => {
                    let (a0, a1) = (a.at_ms, a.at_ms + b.false_verdict_ms);
                    let overlap = a1.min(w1).saturating_sub(a0.max(w0)) as f64 / 1000.0;
                    if overlap > 0.0 {
                        2.0 * share + share * overlap
                    } else {
                        0.0
                    }
                }
            }
        })
        .sum()
}

/// The end of the run, by the one judge: admissions in every window of whole seconds within
/// `2L + L·t` and the allowances, and the enforced shares back at `L` within the bound.
fn end(h: &History, b: Bounds, sums: &[u64], j: &mut Judgement) {
    let len = h.admitted.iter().map(Vec::len).max().unwrap_or(0);
    let total: Vec<u64> = (0..len)
        .map(|s| {
            h.admitted
                .iter()
                .map(|r| r.get(s).copied().unwrap_or(0))
                .sum()
        })
        .collect();
    // L of each second: the largest of its tenths.
    let l_of: Vec<f64> = (0..len)
        .map(|s| {
            (s * TENTHS..(s + 1) * TENTHS)
                .map(|t| h.limit_milli_at(t))
                .max()
                .unwrap_or(0) as f64
                / 1000.0
        })
        .collect();
    j.converged_after_ms = converged_after_ms(h, sums);
    let liveness = Liveness {
        what: format!(
            "the enforced shares were back at L = {} with every Region enforcing",
            h.final_limit_rps()
        ),
        settled_after_ms: j.converged_after_ms,
        bound_ms: b.converge_ms,
        seen: format!(
            "last heal at {} ms, total at the end {:.3}/s",
            h.last_heal_ms,
            sums.last().copied().unwrap_or(0) as f64 / 1000.0
        ),
    };
    let allowed = |from: usize, to: usize| allowed_admissions(h, b, from, to);
    let end = End {
        core_alarms: &[],
        records_refused: 0,
        final_shares: None,
        audit: None,
        admissions: Some(Admissions {
            per_second: &total,
            limit_rps: &l_of,
            allowed: &allowed,
        }),
        liveness: &liveness,
    };
    let v = judge_end(&end, &EndAllowances::default());
    j.worst_window_excess = v.worst_window_excess;
    j.worst_window = v.worst_window;
    j.failures
        .extend(v.violations.iter().map(|v| v.to_string()));
}

/// Milliseconds from the last heal until the enforced shares returned: the whole limit enforced
/// again, by every Region (two Regions holding all of it while the third has not come back is
/// not a return: the third's room would be missing).
fn converged_after_ms(h: &History, sums: &[u64]) -> Option<u64> {
    let limit_milli = (h.final_limit_rps() * 1000.0).round() as i64;
    let heal_tenth = (h.last_heal_ms / 100) as usize;
    let returned = |t: usize| {
        (sums[t] as i64 - limit_milli).abs() <= rounding(h)
            && h.enforced.iter().all(|r| r.get(t).is_some_and(|x| *x > 0))
    };
    (heal_tenth..sums.len())
        .find(|t| returned(*t))
        .map(|t| (t as u64 * 100).saturating_sub(h.last_heal_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Bounds = Bounds {
        false_verdict_ms: 3_000,
        converge_ms: 10_000,
    };

    /// Three Regions enforcing `shares` (requests/s) for `secs` seconds, admitting at their share.
    fn steady(shares: [u64; 3], secs: usize) -> History {
        History {
            limit_rps: 1000.0,
            enforced: shares
                .iter()
                .map(|s| vec![s * 1000; secs * TENTHS])
                .collect(),
            admitted: shares.iter().map(|s| vec![*s; secs]).collect(),
            allowances: vec![],
            last_heal_ms: 0,
            limit_changes: vec![],
        }
    }

    #[test]
    fn a_run_at_exactly_l_passes() {
        let j = judge(&steady([333, 333, 334], 20), B);
        assert!(j.failures.is_empty(), "{:?}", j.failures);
        assert_eq!(j.converged_after_ms, Some(0));
    }

    #[test]
    fn enforced_shares_above_l_fail_outside_an_allowance() {
        let mut h = steady([333, 333, 334], 20);
        h.enforced[0][50] = 400_000;
        let j = judge(&h, B);
        assert!(j.failures.iter().any(|f| f.contains("the sum of shares")));
        assert!((j.worst_unallowed_excess_rps - 67.0).abs() < 1e-9);
    }

    #[test]
    fn a_false_verdict_allows_that_regions_share_for_the_bound_only() {
        let mut h = steady([333, 333, 334], 20);
        h.allowances.push(Allowance {
            region: 1,
            kind: AllowanceKind::FalseVerdict,
            at_ms: 5_000,
        });
        // A reclaims half of B's 333 while B still enforces it: within the allowance.
        for t in 50..70 {
            h.enforced[0][t] += 166_000;
        }
        assert!(
            judge(&h, B).failures.is_empty(),
            "{:?}",
            judge(&h, B).failures
        );
        // The same past the bound fails.
        for t in 70..90 {
            h.enforced[0][t] += 166_000;
        }
        assert!(!judge(&h, B).failures.is_empty());
    }

    #[test]
    fn admissions_above_two_l_plus_lt_fail() {
        let mut h = steady([333, 333, 334], 20);
        h.admitted[2][10] += 2_900;
        let j = judge(&h, B);
        assert!(
            j.failures.iter().any(|f| f.contains("admissions")),
            "{:?}",
            j.failures
        );
        h.allowances.push(Allowance {
            region: 2,
            kind: AllowanceKind::RedisRestart,
            at_ms: 10_200,
        });
        // One extra burst of C (2 × 334) does not cover 900 beyond 2L + L·t.
        assert!(!judge(&h, B).failures.is_empty());
        h.admitted[2][10] -= 400;
        assert!(
            judge(&h, B).failures.is_empty(),
            "{:?}",
            judge(&h, B).failures
        );
    }

    /// A change from 1,000/s to `new_rps` at 10 s, settled at `settled_ms`.
    fn change(settled_ms: u64, new_rps: f64) -> LimitChange {
        LimitChange {
            at_ms: 10_000,
            settled_ms,
            old_rps: 1000.0,
            new_rps,
        }
    }

    /// Every Region enforces `milli` from tenth `t` on.
    fn enforce_from(h: &mut History, t: usize, milli: u64) {
        for r in &mut h.enforced {
            for x in &mut r[t..] {
                *x = milli;
            }
        }
    }

    #[test]
    fn a_lowered_limit_allows_the_old_rate_until_it_has_settled_and_then_the_new_one() {
        let mut h = steady([333, 333, 334], 40);
        h.limit_changes.push(change(15_000, 600.0));
        // The Regions go down to 200 each at 13 s (within the change) and stay there.
        enforce_from(&mut h, 130, 200_000);
        for r in &mut h.admitted {
            for x in &mut r[13..] {
                *x = 200;
            }
        }
        h.last_heal_ms = 10_000;
        let j = judge(&h, B);
        assert!(j.failures.is_empty(), "{:?}", j.failures);
        assert_eq!(j.converged_after_ms, Some(3_000));
        // Still at the old shares when the change has settled: above the new L.
        h.enforced[0][150] = 333_000;
        let j = judge(&h, B);
        assert!(
            j.failures
                .iter()
                .any(|f| f.contains("exceeds the limit 600")),
            "{:?}",
            j.failures
        );
        // Admissions at the old rate after the change settled exceed 2L + L·t of the new one.
        let mut h2 = steady([333, 333, 334], 40);
        h2.limit_changes = h.limit_changes.clone();
        enforce_from(&mut h2, 130, 200_000);
        let j = judge(&h2, B);
        assert!(
            j.failures.iter().any(|f| f.contains("admissions")),
            "{:?}",
            j.failures
        );
    }

    #[test]
    fn a_raised_limit_counts_at_once_and_the_return_is_to_the_last_rate() {
        let mut h = steady([333, 333, 334], 40);
        h.limit_changes.push(change(13_000, 1500.0));
        enforce_from(&mut h, 100, 500_000);
        h.last_heal_ms = 10_000;
        let j = judge(&h, B);
        assert!(j.failures.is_empty(), "{:?}", j.failures);
        assert_eq!(j.converged_after_ms, Some(0));
        assert_eq!(h.limit_milli_at(99), 1_000_000);
        assert_eq!(h.limit_milli_at(100), 1_500_000);
        // Never back at 1500 in total: no return.
        for x in &mut h.enforced[2][100..] {
            *x = 400_000;
        }
        assert!(!judge(&h, B).failures.is_empty());
    }

    #[test]
    fn convergence_is_measured_from_the_last_heal_with_every_region_back() {
        let mut h = steady([333, 333, 334], 30);
        h.last_heal_ms = 5_000;
        // B is back at 12 s; before that A holds B's room: the total is L, but B is missing.
        for t in 0..120 {
            h.enforced[0][t] += h.enforced[1][t];
            h.enforced[1][t] = 0;
        }
        let j = judge(&h, B);
        assert_eq!(j.converged_after_ms, Some(7_000));
        assert!(j.failures.is_empty(), "{:?}", j.failures);
        for t in 0..200 {
            h.enforced[1][t] = 0;
        }
        let j = judge(&h, B);
        assert_eq!(j.converged_after_ms, Some(15_000));
        assert!(!j.failures.is_empty());
        h.enforced[1] = vec![0; 300];
        assert_eq!(judge(&h, B).converged_after_ms, None);
    }
}
