//! The summary of a run (SIMULATOR.md, "Summary"), computed exactly from the per-tick rows.

use crate::engine::{Outcome, Row};
use crate::scenario::Scenario;
use serde::ser::{Serialize, SerializeMap, Serializer};
use shareplane_core::{PerRegion, Room};

/// A value and the first instant it was reached.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Extreme {
    pub value: f64,
    pub at_s: f64,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FinalState {
    pub share: f64,
    pub pool: f64,
    pub target: f64,
    pub alive: bool,
    pub epoch: u64,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Rebalance {
    pub at_s: f64,
    pub region: String,
    pub demand: f64,
    pub target: f64,
    pub share_before: f64,
    pub share_after: f64,
    pub pool_after: f64,
    pub taken: ByRegion<f64>,
    pub granted: ByRegion<f64>,
    pub reclaimed: ByRegion<f64>,
    pub unmet: f64,
    pub epoch: u64,
    pub version: u64,
    /// Added: the peers this Region counts as silent after the rebalance.
    pub silent: Vec<String>,
}

/// Values by Region name, in file order (serialised as a JSON object).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ByRegion<T>(pub Vec<(String, T)>);

impl<T: Serialize> Serialize for ByRegion<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<T> ByRegion<T> {
    pub fn get(&self, name: &str) -> Option<&T> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }
}

/// The summary document printed by `--json`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Summary {
    pub name: String,
    pub limit: f64,
    pub max_sum_shares: Option<Extreme>,
    pub min_sum_shares: Option<Extreme>,
    pub share_seconds_below_limit: f64,
    pub share_seconds_above_limit: f64,
    pub max_excess_admitted: f64,
    pub busiest_second_admitted: Option<f64>,
    pub contract_broken_at_s: Option<f64>,
    pub settled_at_s: Option<f64>,
    pub conservation_violations: u64,
    /// Added: peer records a coordinator refused (0 unless something is broken).
    pub rejected_records: u64,
    pub r#final: ByRegion<FinalState>,
    /// Added: the events in [0, end_s), as labels.
    pub events: Vec<EventMark>,
    pub rebalances: Vec<Rebalance>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct EventMark {
    pub at_s: f64,
    pub what: String,
}

fn rps(r: Room) -> f64 {
    r.as_rps()
}

/// Requests from micro-requests.
fn req(micro: i128) -> f64 {
    micro as f64 / 1e6
}

/// Accumulates the figures tick by tick, in exact units.
pub struct Stats {
    tick_ms: u64,
    limit: Room,
    burst_ms: u64,
    ticks_per_second: usize,
    /// (tick, Σ shares) at every change, from tick 0 on.
    sums: Vec<(i64, Room)>,
    /// Each Region's share at every change, from tick 0 on.
    shares: Vec<Vec<(i64, Room)>>,
    last_tick: i64,
    below: u128,
    above: u128,
    best_ending: i128,
    max_excess: i128,
    contract_broken: Option<i64>,
    window: Vec<u64>,
    window_sum: u128,
    seen: usize,
    busiest: Option<u128>,
}

impl Stats {
    pub fn new(sc: &Scenario) -> Stats {
        let tps = sc.ticks_per_second() as usize;
        Stats {
            tick_ms: sc.tick_ms,
            limit: sc.limit,
            burst_ms: sc.burst_ms,
            ticks_per_second: tps,
            sums: Vec::new(),
            shares: vec![Vec::new(); sc.regions.len()],
            last_tick: -1,
            below: 0,
            above: 0,
            best_ending: 0,
            max_excess: 0,
            contract_broken: None,
            window: vec![0; tps.max(1)],
            window_sum: 0,
            seen: 0,
            busiest: None,
        }
    }

    pub fn tick(&mut self, row: &Row<'_>) {
        if row.tick < 0 {
            return;
        }
        self.last_tick = row.tick;
        let sum = row.sum_shares;
        if self.sums.last().is_none_or(|&(_, s)| s != sum) {
            self.sums.push((row.tick, sum));
        }
        for (h, r) in self.shares.iter_mut().zip(row.regions) {
            if h.last().is_none_or(|&(_, s)| s != r.share) {
                h.push((row.tick, r.share));
            }
        }
        let dt = self.tick_ms as u128;
        self.below += self.limit.excess_over(sum).milli() as u128 * dt;
        self.above += sum.excess_over(self.limit).milli() as u128 * dt;
        let x = row.admitted_micro as i128 - (self.limit.milli() as i128 * dt as i128);
        self.best_ending = x + self.best_ending.max(0);
        self.max_excess = self.max_excess.max(self.best_ending);
        if self.contract_broken.is_none()
            && self.best_ending > self.limit.milli() as i128 * self.burst_ms as i128
        {
            self.contract_broken = Some(row.tick + 1);
        }
        let slot = self.seen % self.window.len();
        self.window_sum = self.window_sum + row.admitted_micro as u128 - self.window[slot] as u128;
        self.window[slot] = row.admitted_micro;
        self.seen += 1;
        if self.seen >= self.ticks_per_second {
            self.busiest = Some(self.busiest.unwrap_or(0).max(self.window_sum));
        }
    }

    fn secs(&self, tick: i64) -> f64 {
        (tick as i128 * self.tick_ms as i128) as f64 / 1000.0
    }

    /// The extreme of Σ shares and the first tick within one request per second of it.
    fn extreme(&self, max: bool) -> Option<Extreme> {
        let v = if max {
            self.sums.iter().map(|s| s.1).max()?
        } else {
            self.sums.iter().map(|s| s.1).min()?
        };
        let near = |s: Room| {
            if max {
                s.milli() + 1000 >= v.milli()
            } else {
                s.milli() <= v.milli() + 1000
            }
        };
        let &(t, _) = self.sums.iter().find(|&&(_, s)| near(s))?;
        Some(Extreme {
            value: rps(v),
            at_s: self.secs(t),
        })
    }

    /// The first tick from which every Region alive at the end stays on its final target by the
    /// fuzz judge's criterion ([`crate::judging::on_target`]: within 1%, or short by less than
    /// grants in whole units can move).
    fn settled(&self, out: &Outcome) -> Option<f64> {
        let mut settled = 0i64;
        let n = out.finals.len();
        for (h, f) in self.shares.iter().zip(&out.finals) {
            if !f.alive {
                continue;
            }
            let within = |s: Room| crate::judging::on_target(s, f.target, n);
            let mut from = None;
            for &(t, s) in h.iter().rev() {
                if within(s) {
                    from = Some(t);
                } else {
                    break;
                }
            }
            settled = settled.max(from?);
        }
        (self.last_tick >= 0).then(|| self.secs(settled))
    }

    pub fn finish(self, sc: &Scenario, out: &Outcome) -> Summary {
        let names: Vec<String> = sc.regions.iter().map(|r| r.name.clone()).collect();
        let rebalances = rebalance_rows(sc, out, &names);
        let finals = ByRegion(
            names
                .iter()
                .zip(&out.finals)
                .map(|(n, f)| {
                    let state = FinalState {
                        share: rps(f.share),
                        pool: rps(f.pool),
                        target: rps(f.target),
                        alive: f.alive,
                        epoch: f.epoch,
                    };
                    (n.clone(), state)
                })
                .collect(),
        );
        let events = out
            .events
            .iter()
            .map(|e| EventMark {
                at_s: sc.seconds(e.tick),
                what: e.label.clone(),
            })
            .collect();
        Summary {
            name: sc.name.clone(),
            limit: rps(sc.limit),
            max_sum_shares: self.extreme(true),
            min_sum_shares: self.extreme(false),
            share_seconds_below_limit: req(self.below as i128),
            share_seconds_above_limit: req(self.above as i128),
            max_excess_admitted: req(self.max_excess),
            busiest_second_admitted: self.busiest.map(|b| req(b as i128)),
            contract_broken_at_s: self.contract_broken.map(|t| self.secs(t)),
            settled_at_s: self.settled(out),
            conservation_violations: out.conservation_violations,
            rejected_records: out.rejected_records,
            r#final: finals,
            events,
            rebalances,
        }
    }
}

/// The rebalances before the scenario's end, with Regions by name.
fn rebalance_rows(sc: &Scenario, out: &Outcome, names: &[String]) -> Vec<Rebalance> {
    let by = |p: &PerRegion<Room>| {
        ByRegion(
            names
                .iter()
                .enumerate()
                .filter(|(i, _)| !p.0[*i].is_zero())
                .map(|(i, n)| (n.clone(), rps(p.0[i])))
                .collect(),
        )
    };
    out.rebalances
        .iter()
        .filter(|r| r.tick < sc.end_tick)
        .map(|r| Rebalance {
            at_s: sc.seconds(r.tick),
            region: names[r.region].clone(),
            demand: rps(r.outcome.demand),
            target: rps(r.outcome.target),
            share_before: rps(r.outcome.share_before),
            share_after: rps(r.outcome.share_after),
            pool_after: rps(r.outcome.pool_after),
            taken: by(&r.outcome.taken),
            granted: by(&r.outcome.granted),
            reclaimed: by(&r.outcome.reclaimed),
            unmet: rps(r.outcome.unmet),
            epoch: r.epoch,
            version: r.version,
            silent: r.silent.iter().map(|p| names[p.index()].clone()).collect(),
        })
        .collect()
}

/// One rebalance of the report: its figures and what moved.
fn rebalance_line(r: &Rebalance) -> String {
    let moves = |label: &str, m: &ByRegion<f64>| {
        m.0.iter()
            .map(|(k, v)| format!(" {label} {k} {v}"))
            .collect::<String>()
    };
    format!(
        "  {:>8.2} s  {:<6} demand {:>9} target {:>9} share {:>9} -> {:>9} pool {:>8} unmet {:>8}{}{}{}\n",
        r.at_s,
        r.region,
        r.demand,
        r.target,
        r.share_before,
        r.share_after,
        r.pool_after,
        r.unmet,
        moves("took from", &r.taken),
        moves("granted to", &r.granted),
        moves("reclaimed from", &r.reclaimed),
    )
}

fn opt(v: Option<f64>) -> String {
    v.map_or("never".into(), |v| format!("{v}"))
}

fn ext(e: Option<Extreme>) -> String {
    e.map_or("-".into(), |e| format!("{} at {} s", e.value, e.at_s))
}

impl Summary {
    /// The human-readable report.
    pub fn report(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "scenario: {}\nlimit: {}/s\n",
            self.name, self.limit
        ));
        s.push_str(&format!(
            "max sum of shares: {}\n",
            ext(self.max_sum_shares)
        ));
        s.push_str(&format!(
            "min sum of shares: {}\n",
            ext(self.min_sum_shares)
        ));
        s.push_str(&format!(
            "share-seconds below the limit: {:.1}, above: {:.1}\n",
            self.share_seconds_below_limit, self.share_seconds_above_limit
        ));
        s.push_str(&format!(
            "largest excess of admissions over L x t: {:.1}\n",
            self.max_excess_admitted
        ));
        s.push_str(&format!(
            "busiest second: {}\n",
            opt(self.busiest_second_admitted)
        ));
        s.push_str(&format!(
            "contract (2L + L x t) broken at: {}\n",
            opt(self.contract_broken_at_s)
        ));
        s.push_str(&format!(
            "settled (all within 1% of final targets) from: {}\n",
            opt(self.settled_at_s)
        ));
        s.push_str(&format!(
            "conservation violations (ticks): {}\n",
            self.conservation_violations
        ));
        if self.rejected_records > 0 {
            s.push_str(&format!(
                "REJECTED peer records: {}\n",
                self.rejected_records
            ));
        }
        s.push_str("final:\n");
        for (n, f) in &self.r#final.0 {
            s.push_str(&format!(
                "  {n}: share {} pool {} target {} epoch {}{}\n",
                f.share,
                f.pool,
                f.target,
                f.epoch,
                if f.alive { "" } else { " (lost)" }
            ));
        }
        s.push_str("events:\n");
        for e in &self.events {
            s.push_str(&format!("  {:>8.2} s  {}\n", e.at_s, e.what));
        }
        s.push_str("rebalances:\n");
        for r in &self.rebalances {
            s.push_str(&rebalance_line(r));
        }
        s
    }
}
