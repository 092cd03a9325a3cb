//! Reading a scenario file: the TOML as written (`Raw…`, every value with its span) and the
//! checks that turn it into a [`Scenario`], each problem with its field and line.

use super::*;
use serde::Deserialize;
use toml::Spanned;

/// The scenario a file's text describes, every field checked (not yet what the run as a whole
/// needs: [`super::runnable`]).
pub(super) fn read(text: &str) -> Result<Scenario, ScenarioError> {
    let raw: Raw = toml::from_str(text).map_err(|e| ScenarioError::Syntax(e.to_string()))?;
    Checker {
        text,
        problems: Vec::new(),
    }
    .check(raw)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    name: Spanned<String>,
    start_s: Spanned<f64>,
    end_s: Spanned<f64>,
    tick_ms: Spanned<i64>,
    design: Spanned<String>,
    silent_rule: Spanned<String>,
    #[serde(default)]
    seed: Option<u64>,
    /// Added field: "own-unhealthy" (default) or "never".
    #[serde(default)]
    fence: Option<Spanned<String>>,
    limit: RawLimit,
    sync: RawSync,
    region: Spanned<Vec<RawRegion>>,
    #[serde(default)]
    event: Vec<Spanned<RawEvent>>,
    #[serde(default)]
    plot: Option<RawPlot>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimit {
    rate: Spanned<f64>,
    burst_s: Spanned<f64>,
    floor: Spanned<f64>,
    step_cap: Spanned<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSync {
    period_s: Spanned<f64>,
    visibility_s: Spanned<f64>,
    demand_window_s: Spanned<f64>,
    silent_after: Spanned<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRegion {
    name: Spanned<String>,
    offset_s: Spanned<f64>,
    demand: Spanned<f64>,
    /// Added field: this Region's records become visible after this long instead of `sync.visibility_s`.
    #[serde(default)]
    visibility_s: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvent {
    at_s: Spanned<f64>,
    #[serde(default)]
    demand: Option<Spanned<toml::Table>>,
    #[serde(default)]
    lose: Option<Spanned<String>>,
    #[serde(default)]
    restore: Option<Spanned<String>>,
    #[serde(default)]
    cut: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    heal: Option<Spanned<bool>>,
    #[serde(default)]
    unhealthy: Option<Spanned<String>>,
    #[serde(default)]
    healthy: Option<Spanned<String>>,
    #[serde(default)]
    restart: Option<Spanned<String>>,
    /// Added field: the Region's daemon dies, its gateways live on.
    #[serde(default)]
    kill_daemon: Option<Spanned<String>>,
    /// Added field: a killed daemon starts again.
    #[serde(default)]
    restart_daemon: Option<Spanned<String>>,
    /// Added field: the Region's health data is missing ("unknown" verdict).
    #[serde(default)]
    unknown: Option<Spanned<String>>,
    /// Added field: `{ from = [...], to = [...] }`, a cut in one direction only.
    #[serde(default)]
    one_way_cut: Option<Spanned<RawOneWay>>,
    /// Added field: `{ rate = ..., regions = [...] }`, a limit change these Regions adopt now.
    #[serde(default)]
    limit: Option<Spanned<RawLimitChange>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimitChange {
    rate: f64,
    regions: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOneWay {
    from: Vec<String>,
    to: Vec<String>,
}

/// Added table: the window the plot shows.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlot {
    #[serde(default)]
    from_s: Option<Spanned<f64>>,
    #[serde(default)]
    to_s: Option<Spanned<f64>>,
}

struct Checker<'a> {
    text: &'a str,
    problems: Vec<Problem>,
}

impl Checker<'_> {
    fn line(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    fn bad<T>(&mut self, v: &Spanned<T>, field: &str, problem: impl Into<String>) {
        let line = Some(self.line(v.span().start));
        self.problems.push(Problem {
            line,
            field: field.into(),
            problem: problem.into(),
        });
    }

    /// A time in seconds that must be a whole number of ticks: returns it in ticks.
    fn ticks(&mut self, v: &Spanned<f64>, field: &str, tick_ms: u64) -> i64 {
        let s = *v.get_ref();
        if !s.is_finite() || s.abs() > MAX_TIME_S {
            self.bad(
                v,
                field,
                format!("must be a finite time of at most {MAX_TIME_S} s"),
            );
            return 0;
        }
        let ms = (s * 1000.0).round();
        if (ms - s * 1000.0).abs() > 1e-6 || tick_ms == 0 || (ms as i64) % tick_ms as i64 != 0 {
            self.bad(
                v,
                field,
                format!("{s} s is not a multiple of tick_ms ({tick_ms} ms)"),
            );
            return 0;
        }
        ms as i64 / tick_ms as i64
    }

    fn positive_ticks(&mut self, v: &Spanned<f64>, field: &str, tick_ms: u64) -> u64 {
        let t = self.ticks(v, field, tick_ms);
        if t <= 0 && *v.get_ref() <= 0.0 {
            self.bad(v, field, "must be positive");
        }
        t.max(1) as u64
    }

    fn rate(&mut self, v: &Spanned<f64>, field: &str) -> Room {
        match Room::from_rps(*v.get_ref()) {
            Ok(r) => r,
            Err(e) => {
                self.bad(v, field, e.to_string());
                Room::ZERO
            }
        }
    }

    fn region(&mut self, names: &[String], v: &Spanned<String>, field: &str) -> usize {
        match names.iter().position(|n| n == v.get_ref()) {
            Some(i) => i,
            None => {
                self.bad(
                    v,
                    field,
                    format!("names {:?}, which is not a [[region]]", v.get_ref()),
                );
                0
            }
        }
    }

    fn check(mut self, raw: Raw) -> Result<Scenario, ScenarioError> {
        let (tick_ms, start_tick, end_tick) = self.times(&raw);
        let (design, policy, fence) = self.settings(&raw);
        let l = &raw.limit;
        let limit = self.rate(&l.rate, "limit.rate");
        if limit.is_zero() {
            self.bad(&l.rate, "limit.rate", "must be positive");
        }
        let burst_ticks = self.positive_ticks(&l.burst_s, "limit.burst_s", tick_ms);
        let floor = self.rate(&l.floor, "limit.floor");
        let step_cap = self.rate(&l.step_cap, "limit.step_cap");
        if step_cap.is_zero() {
            self.bad(&l.step_cap, "limit.step_cap", "must be positive");
        }
        let s = &raw.sync;
        let period_ticks = self.positive_ticks(&s.period_s, "sync.period_s", tick_ms);
        let visibility = self.positive_ticks(&s.visibility_s, "sync.visibility_s", tick_ms);
        let window_ticks = self.positive_ticks(&s.demand_window_s, "sync.demand_window_s", tick_ms);
        let silent_after = *s.silent_after.get_ref();
        if !(1..=1000).contains(&silent_after) {
            self.bad(&s.silent_after, "sync.silent_after", "must be 1 to 1000");
        }
        let regions = self.regions(&raw.region, tick_ms, visibility);
        let names: Vec<String> = regions.iter().map(|r| r.name.clone()).collect();
        let events = self.events(&raw.event, &names, tick_ms, start_tick, end_tick);
        let (plot_from_tick, plot_to_tick) =
            self.plot(raw.plot.as_ref(), tick_ms, start_tick, end_tick);
        if !self.problems.is_empty() {
            return Err(ScenarioError::Invalid(self.problems));
        }
        let sc = Scenario {
            name: raw.name.into_inner(),
            tick_ms,
            start_tick,
            end_tick,
            design,
            policy,
            fence,
            seed: raw.seed,
            limit,
            burst_ms: burst_ticks * tick_ms,
            floor,
            step_cap,
            period_ticks,
            window_ticks,
            silent_after: silent_after.clamp(1, 1000) as u32,
            regions,
            events,
            plot_from_tick,
            plot_to_tick,
        };
        self.core_accepts(&sc, self.line(l.rate.span().start));
        if !self.problems.is_empty() {
            return Err(ScenarioError::Invalid(self.problems));
        }
        Ok(sc)
    }

    /// The run's ticks: `tick_ms`, and the first and the end tick.
    fn times(&mut self, raw: &Raw) -> (u64, i64, i64) {
        let tick_ms = *raw.tick_ms.get_ref();
        let tick_ok = (1..=1000).contains(&tick_ms) && 1000 % tick_ms == 0;
        if !tick_ok {
            self.bad(
                &raw.tick_ms,
                "tick_ms",
                "must divide 1000 (1, 2, 4, 5, 8, 10, ... 1000)",
            );
        }
        // With a bad tick, check the other times against 1 ms so that only the real problem is reported.
        let tick_ms = if tick_ok { tick_ms as u64 } else { 1 };
        let start_tick = self.ticks(&raw.start_s, "start_s", tick_ms);
        let end_tick = self.ticks(&raw.end_s, "end_s", tick_ms);
        if end_tick <= start_tick {
            self.bad(&raw.end_s, "end_s", "must be after start_s");
        } else if end_tick - start_tick > MAX_TICKS {
            self.bad(
                &raw.end_s,
                "end_s",
                format!("the run would have more than {MAX_TICKS} ticks"),
            );
        }
        if raw.name.get_ref().len() > 200 {
            self.bad(&raw.name, "name", "is longer than 200 characters");
        }
        (tick_ms, start_tick, end_tick)
    }

    /// The design, silent rule and fence, by their names.
    fn settings(&mut self, raw: &Raw) -> (Design, SilentPolicy, Fence) {
        let design = Design::from_name(raw.design.get_ref()).unwrap_or_else(|| {
            let msg = format!("must be {}", Design::choices());
            self.bad(&raw.design, "design", msg);
            Design::NamedGrants
        });
        let policy = SilentPolicy::from_name(raw.silent_rule.get_ref()).unwrap_or_else(|| {
            let msg = format!("must be {}", SilentPolicy::choices());
            self.bad(&raw.silent_rule, "silent_rule", msg);
            SilentPolicy::TwoSignals
        });
        let fence = match &raw.fence {
            None => Fence::OwnUnhealthy,
            Some(f) => Fence::from_name(f.get_ref()).unwrap_or_else(|| {
                self.bad(f, "fence", format!("must be {}", Fence::choices()));
                Fence::OwnUnhealthy
            }),
        };
        (design, policy, fence)
    }

    /// The core decides what a deployment may be (a floor every Region can have, at the first
    /// rate and at every rate a `limit` event rolls out): its problems, with the line of
    /// `limit.rate` (`limit_line`) or of the event.
    fn core_accepts(&mut self, sc: &Scenario, limit_line: usize) {
        let rates = std::iter::once((sc.limit, limit_line, "limit")).chain(
            sc.events.iter().filter_map(|e| match e.action {
                Action::Limit(rate, _) => Some((rate, e.line, "event.limit.rate")),
                _ => None,
            }),
        );
        for (rate, line, field) in rates {
            if let Err(problem) = sc.deployment_at(rate) {
                self.problems.push(Problem {
                    line: Some(line),
                    field: field.into(),
                    problem,
                });
            }
        }
    }

    fn regions(
        &mut self,
        raw: &Spanned<Vec<RawRegion>>,
        tick_ms: u64,
        vis: u64,
    ) -> Vec<RegionSpec> {
        let n = raw.get_ref().len();
        if !(1..=MAX_REGIONS).contains(&n) {
            self.bad(
                raw,
                "region",
                format!("needs 1 to {MAX_REGIONS} [[region]] tables, got {n}"),
            );
        }
        let mut out: Vec<RegionSpec> = Vec::new();
        for (i, r) in raw.get_ref().iter().enumerate() {
            let at = format!("region[{i}]");
            let name = r.name.get_ref().clone();
            if name.is_empty()
                || name.len() > 64
                || name.contains([',', '"', '<', '>', '&'])
                || name.chars().any(char::is_control)
            {
                self.bad(
                    &r.name,
                    &format!("{at}.name"),
                    "must be 1 to 64 characters without , \" < > & or control characters",
                );
            }
            if out.iter().any(|o| o.name == name) {
                self.bad(
                    &r.name,
                    &format!("{at}.name"),
                    format!("{name:?} appears twice"),
                );
            }
            let offset_tick = self.ticks(&r.offset_s, &format!("{at}.offset_s"), tick_ms);
            let demand = self.rate(&r.demand, &format!("{at}.demand"));
            let visibility_ticks = match &r.visibility_s {
                Some(v) => self.positive_ticks(v, &format!("{at}.visibility_s"), tick_ms),
                None => vis,
            };
            out.push(RegionSpec {
                name,
                offset_tick,
                demand,
                visibility_ticks,
            });
        }
        out.truncate(MAX_REGIONS);
        out
    }

    fn events(
        &mut self,
        raw: &[Spanned<RawEvent>],
        names: &[String],
        tick_ms: u64,
        start: i64,
        end: i64,
    ) -> Vec<Event> {
        let mut out = Vec::new();
        let problems_before = self.problems.len();
        if raw.len() > MAX_EVENTS {
            self.problems.push(Problem {
                line: None,
                field: "event".into(),
                problem: format!("{} events; at most {MAX_EVENTS}", raw.len()),
            });
            return out;
        }
        for (i, ev) in raw.iter().enumerate() {
            let at = format!("event[{i}]");
            let line = self.line(ev.span().start);
            let e = ev.get_ref();
            let at_tick = self.ticks(&e.at_s, &format!("{at}.at_s"), tick_ms);
            if at_tick < start || at_tick >= end {
                self.bad(
                    &e.at_s,
                    &format!("{at}.at_s"),
                    "must be within [start_s, end_s)",
                );
            }
            let mut actions = self.actions(e, names, &at);
            if actions.len() != 1 {
                let n = actions.len();
                self.problems.push(Problem {
                    line: Some(line),
                    field: at.clone(),
                    problem: format!("must have exactly one action besides at_s, has {n}"),
                });
                continue;
            }
            if let Some(action) = actions.pop() {
                out.push(Event {
                    at_tick,
                    action,
                    line,
                });
            }
        }
        out.sort_by_key(|e| e.at_tick);
        // Lifecycle order is only meaningful once every event names real Regions and has one
        // action: otherwise it would report follow-ups of the problems above.
        if self.problems.len() == problems_before {
            self.check_lifecycle(&out, names);
        }
        out
    }

    /// The actions one event names (an event must name exactly one), each checked.
    fn actions(&mut self, e: &RawEvent, names: &[String], at: &str) -> Vec<Action> {
        let mut actions = Vec::new();
        if let Some(d) = &e.demand {
            actions.push(self.demand_action(d, names, at));
        }
        let one = |c: &mut Self, v: &Option<Spanned<String>>, key: &str, f: fn(usize) -> Action| {
            v.as_ref()
                .map(|v| f(c.region(names, v, &format!("{at}.{key}"))))
        };
        actions.extend(one(self, &e.lose, "lose", Action::Lose));
        actions.extend(one(self, &e.restore, "restore", Action::Restore));
        actions.extend(one(self, &e.unhealthy, "unhealthy", Action::Unhealthy));
        actions.extend(one(self, &e.healthy, "healthy", Action::Healthy));
        actions.extend(one(self, &e.restart, "restart", Action::Restart));
        actions.extend(one(self, &e.unknown, "unknown", Action::Unknown));
        actions.extend(one(self, &e.kill_daemon, "kill_daemon", Action::KillDaemon));
        actions.extend(one(
            self,
            &e.restart_daemon,
            "restart_daemon",
            Action::RestartDaemon,
        ));
        if let Some(c) = &e.one_way_cut {
            let field = format!("{at}.one_way_cut");
            let from = self.mask(c, names, &c.get_ref().from, &format!("{field}.from"));
            let to = self.mask(c, names, &c.get_ref().to, &format!("{field}.to"));
            if from & to != 0 {
                self.bad(c, &field, "from and to must not share a Region");
            }
            actions.push(Action::OneWayCut(from, to));
        }
        if let Some(l) = &e.limit {
            actions.push(self.limit_action(l, names, at));
        }
        if let Some(c) = &e.cut {
            let mut mask = 0u8;
            for n in c.get_ref() {
                match names.iter().position(|x| x == n) {
                    Some(r) => mask |= 1 << r,
                    None => self.bad(
                        c,
                        &format!("{at}.cut"),
                        format!("names {n:?}, which is not a [[region]]"),
                    ),
                }
            }
            if c.get_ref().is_empty() {
                self.bad(c, &format!("{at}.cut"), "must name at least one Region");
            }
            actions.push(Action::Cut(mask));
        }
        if let Some(h) = &e.heal {
            if !*h.get_ref() {
                self.bad(h, &format!("{at}.heal"), "must be true (or left out)");
            }
            actions.push(Action::Heal);
        }
        actions
    }

    /// A `limit` event's action: a positive rate and the Regions that adopt it.
    fn limit_action(&mut self, l: &Spanned<RawLimitChange>, names: &[String], at: &str) -> Action {
        let field = format!("{at}.limit");
        let rate = match Room::from_rps(l.get_ref().rate) {
            Ok(r) if !r.is_zero() => r,
            Ok(_) => {
                self.bad(l, &format!("{field}.rate"), "must be positive");
                Room::ZERO
            }
            Err(e) => {
                self.bad(l, &format!("{field}.rate"), e.to_string());
                Room::ZERO
            }
        };
        let mask = self.mask(l, names, &l.get_ref().regions, &format!("{field}.regions"));
        Action::Limit(rate, mask)
    }

    /// The mask of the named Regions (at least one, all of them configured).
    fn mask<T>(&mut self, at: &Spanned<T>, names: &[String], list: &[String], field: &str) -> u8 {
        let mut mask = 0u8;
        for n in list {
            match names.iter().position(|x| x == n) {
                Some(r) => mask |= 1 << r,
                None => self.bad(at, field, format!("names {n:?}, which is not a [[region]]")),
            }
        }
        if list.is_empty() {
            self.bad(at, field, "must name at least one Region");
        }
        mask
    }

    fn demand_action(&mut self, d: &Spanned<toml::Table>, names: &[String], at: &str) -> Action {
        let mut rates = Vec::new();
        let field = format!("{at}.demand");
        if d.get_ref().is_empty() {
            self.bad(d, &field, "must name at least one Region");
        }
        for (k, v) in d.get_ref() {
            let rps = match v {
                toml::Value::Float(f) => *f,
                toml::Value::Integer(i) => *i as f64,
                _ => f64::NAN,
            };
            let Some(r) = names.iter().position(|n| n == k) else {
                self.bad(d, &format!("{field}.{k}"), "is not a [[region]] name");
                continue;
            };
            match Room::from_rps(rps) {
                Ok(room) => rates.push((r, room)),
                Err(e) => self.bad(d, &format!("{field}.{k}"), e.to_string()),
            }
        }
        rates.sort_by_key(|(r, _)| *r);
        Action::Demand(rates)
    }

    /// Lose, restore and restart must make sense in time order.
    fn check_lifecycle(&mut self, events: &[Event], names: &[String]) {
        let mut lost = vec![false; names.len()];
        let mut dead = vec![false; names.len()];
        for e in events {
            let (r, ok, what) = match e.action {
                Action::Lose(r) => (r, !lost[r], "loses a Region that is already lost"),
                Action::Restore(r) => (r, lost[r], "restores a Region that is not lost"),
                Action::Restart(r) => (
                    r,
                    !lost[r] && !dead[r],
                    "restarts a Region that is lost or whose daemon is dead",
                ),
                Action::KillDaemon(r) => (
                    r,
                    !lost[r] && !dead[r],
                    "kills the daemon of a Region that is lost or whose daemon is dead",
                ),
                Action::RestartDaemon(r) => (
                    r,
                    dead[r] && !lost[r],
                    "restarts a daemon that was not killed",
                ),
                _ => continue,
            };
            if !ok {
                self.problems.push(Problem {
                    line: Some(e.line),
                    field: format!("event (at line {}) {}", e.line, names[r]),
                    problem: what.into(),
                });
            }
            match e.action {
                Action::Lose(r) => {
                    lost[r] = true;
                    dead[r] = false;
                }
                Action::Restore(r) => lost[r] = false,
                Action::KillDaemon(r) => dead[r] = true,
                Action::RestartDaemon(r) => dead[r] = false,
                _ => {}
            }
        }
    }

    fn plot(&mut self, raw: Option<&RawPlot>, tick_ms: u64, start: i64, end: i64) -> (i64, i64) {
        let default_from = start.max(start.max(-5_000 / tick_ms as i64).min(end - 1));
        let Some(p) = raw else {
            return (default_from, end);
        };
        let from = p
            .from_s
            .as_ref()
            .map_or(default_from, |v| self.ticks(v, "plot.from_s", tick_ms));
        let to = p
            .to_s
            .as_ref()
            .map_or(end, |v| self.ticks(v, "plot.to_s", tick_ms));
        if from < start || to > end || from >= to {
            let f = p.from_s.as_ref().or(p.to_s.as_ref());
            if let Some(f) = f {
                self.bad(f, "plot", "from_s < to_s must lie within [start_s, end_s]");
            }
        }
        (from.max(start), to.min(end).max(from.max(start) + 1))
    }
}
