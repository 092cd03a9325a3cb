//! Swarm fuzzing (`shareplane sim fuzz --family swarm`), the fuzz families and their runner.
//!
//! Each swarm seed enables a random subset of the fault kinds ([`KINDS`], each on with even odds:
//! Groce et al., "Swarm testing", ISSTA 2012), so that a seed without, say, restarts or false
//! verdicts explores the other kinds more deeply, and it draws its faults in **episodes** biased
//! towards cascades: a one-way cut around a loss, a second loss within seconds of the first,
//! restores while the cut still holds, and an heir lost a few periods after demand moved to it
//! (after it took grants). A verdict of "unhealthy" is true (its Region is lost, or its daemon
//! has been dead for at least the lease) unless the seed enabled false verdicts. At the end of
//! the fault phase every fault ends, as in the classic family, and the same checks judge the
//! run ([`crate::fuzz::check`]).
//!
//! Families: [`Family::Classic`] ([`crate::fuzz::generate`]), [`Family::Swarm`] (here),
//! [`Family::Cascade`] ([`crate::cascade`]) and [`Family::StaleClose`] ([`crate::stale_close`]).
//! A seed names one scenario within its family.

use crate::cascade::{demand, part, secs, Schedule, TICK_MS};
use crate::judging::{liveness_bound, Totals};
use crate::rng::Rng;
use crate::scenario::{Action, Event, RegionSpec, Scenario};
use shareplane_core::{Design, Fence, Room, SilentPolicy};

/// Which generator draws a seed's scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Classic,
    Swarm,
    Cascade,
    StaleClose,
}

impl Family {
    pub const NAMES: [&'static str; 4] = ["classic", "swarm", "cascade", "stale-close"];

    pub fn from_name(s: &str) -> Option<Family> {
        match s {
            "classic" => Some(Family::Classic),
            "swarm" => Some(Family::Swarm),
            "cascade" => Some(Family::Cascade),
            "stale-close" => Some(Family::StaleClose),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Family::Classic => "classic",
            Family::Swarm => "swarm",
            Family::Cascade => "cascade",
            Family::StaleClose => "stale-close",
        }
    }

    /// The scenario of `seed` in this family.
    pub fn generate(self, seed: u64) -> Scenario {
        match self {
            Family::Classic => crate::fuzz::generate(seed),
            Family::Swarm => generate(seed),
            Family::Cascade => crate::cascade::generate(seed),
            Family::StaleClose => crate::stale_close::generate(seed),
        }
    }

    /// The command that replays one seed.
    pub fn replay(self, seed: u64) -> String {
        let family = match self {
            Family::Classic => String::new(),
            f => format!(" --family {}", f.name()),
        };
        format!("shareplane sim fuzz{family} --seeds 1 --start {seed}")
    }
}

/// The fault kinds a swarm seed enables or leaves out, with their names.
pub const KINDS: [(u16, &str); 12] = [
    (DEMAND, "demand changes"),
    (LOSE, "losses"),
    (RESTORE, "restores before the faults end"),
    (CUT, "two-way cuts"),
    (ONE_WAY, "one-way cuts"),
    (HEAL, "heals before the faults end"),
    (TRUE_VERDICT, "true unhealthy verdicts"),
    (FALSE_VERDICT, "false unhealthy verdicts"),
    (UNKNOWN, "unknown verdicts"),
    (RESTART, "restarts"),
    (KILL, "daemon deaths"),
    (LIMIT, "limit changes"),
];
const DEMAND: u16 = 1;
const LOSE: u16 = 1 << 1;
const RESTORE: u16 = 1 << 2;
const CUT: u16 = 1 << 3;
const ONE_WAY: u16 = 1 << 4;
const HEAL: u16 = 1 << 5;
const TRUE_VERDICT: u16 = 1 << 6;
const FALSE_VERDICT: u16 = 1 << 7;
const UNKNOWN: u16 = 1 << 8;
const RESTART: u16 = 1 << 9;
const KILL: u16 = 1 << 10;
const LIMIT: u16 = 1 << 11;
/// Kinds that are faults by themselves (a seed enables at least one).
const FAULTS: u16 = LOSE | CUT | ONE_WAY | FALSE_VERDICT | KILL;

/// The fault kinds seed `seed` of the swarm family enables (a mask of [`KINDS`]).
pub fn kinds(seed: u64) -> u16 {
    draw_kinds(&mut Rng::new(seed ^ SALT))
}

const SALT: u64 = 0x7377_6172_6d2d_7631;

fn draw_kinds(g: &mut Rng) -> u16 {
    let mut kinds = KINDS
        .iter()
        .filter(|_| g.chance(50))
        .fold(0, |m, &(k, _)| m | k);
    if kinds & FAULTS == 0 {
        kinds |= LOSE;
    }
    kinds
}

/// The scenario of one swarm seed.
pub fn generate(seed: u64) -> Scenario {
    let mut g = Rng::new(seed ^ SALT);
    let kinds = draw_kinds(&mut g);
    let n = [2, 3, 3, 3, 4, 4, 5, 6, 8][g.range(0, 8) as usize];
    let limit_rps = g.range(1_000, 100_000);
    let limit = Room::rps(limit_rps);
    let period_ticks = g.range(20, 100);
    let vis = g.range(1, 50);
    let regions = (0..n)
        .map(|i| RegionSpec {
            name: format!("R{i}"),
            offset_tick: g.range(0, period_ticks - 1) as i64,
            demand: Room::rps(g.range(0, 2 * limit_rps / n as u64 + 1)),
            visibility_ticks: if g.chance(30) { g.range(1, 100) } else { vis },
        })
        .collect();
    let mut sc = Scenario {
        name: format!("swarm seed {seed}"),
        tick_ms: TICK_MS,
        start_tick: -secs(30),
        end_tick: 0,
        design: Design::NamedGrants,
        policy: if g.chance(85) {
            SilentPolicy::TwoSignals
        } else {
            SilentPolicy::Freeze
        },
        fence: if g.chance(80) {
            Fence::OwnUnhealthy
        } else {
            Fence::Never
        },
        seed: Some(seed),
        limit,
        burst_ms: 1000 * g.range(1, 2),
        floor: Room::from_milli(limit.milli() / n as u64 * g.range(0, 30) / 100),
        step_cap: part(limit, 5, 50, &mut g),
        period_ticks,
        window_ticks: g.range(10, 100),
        silent_after: g.range(2, 4) as u32,
        regions,
        events: Vec::new(),
        plot_from_tick: 0,
        plot_to_tick: 0,
    };
    let faults_end = secs(g.range(60, 300));
    let lease = crate::engine::lease_ticks(&sc);
    let mut e = Episodes {
        g: &mut g,
        kinds,
        n,
        limit,
        period: period_ticks as i64,
        lease,
        s: Schedule::default(),
    };
    for _ in 0..e.g.range(2, 8) {
        let at = e.g.range(0, faults_end as u64 - 1) as i64;
        e.one(at);
    }
    if kinds & LIMIT != 0 {
        e.limit_changes(faults_end, sc.floor);
    }
    let drawn = e.s.into_sorted();
    sc.events = keep_legal(drawn, &sc, kinds, faults_end, lease);
    sc.end_tick = faults_end + liveness_bound(&sc) + secs(20);
    sc.plot_from_tick = sc.start_tick;
    sc.plot_to_tick = sc.end_tick;
    sc
}

/// An episode: what it draws, starting at a tick.
type Episode<'a> = fn(&mut Episodes<'a>, i64);

struct Episodes<'a> {
    g: &'a mut Rng,
    kinds: u16,
    n: usize,
    limit: Room,
    period: i64,
    lease: Option<i64>,
    s: Schedule,
}

impl Episodes<'_> {
    fn on(&self, kind: u16) -> bool {
        self.kinds & kind != 0
    }

    fn region(&mut self) -> usize {
        self.g.range(0, self.n as u64 - 1) as usize
    }

    /// A Region other than `r`.
    fn other(&mut self, r: usize) -> usize {
        (r + 1 + self.g.range(0, self.n as u64 - 2) as usize) % self.n
    }

    /// One episode of a kind the seed enabled, starting at `at`.
    fn one(&mut self, at: i64) {
        let episodes: [(u16, Episode<'_>); 9] = [
            (DEMAND, Self::demand),
            (LOSE, Self::loss),
            (LOSE, Self::heir),
            (CUT | ONE_WAY, Self::cut),
            (FALSE_VERDICT, Self::false_verdict),
            (UNKNOWN, Self::unknown),
            (RESTART, Self::restart),
            (KILL, Self::kill),
            (LOSE, Self::heir),
        ];
        let enabled: Vec<_> = episodes.iter().filter(|(k, _)| self.on(*k)).collect();
        if enabled.is_empty() {
            return;
        }
        let (_, f) = enabled[self.g.range(0, enabled.len() as u64 - 1) as usize];
        f(self, at);
    }

    fn demand(&mut self, at: i64) {
        let r = self.region();
        let rate = Room::rps(
            self.g
                .range(0, 2 * self.limit.as_rps() as u64 / self.n as u64 + 1),
        );
        self.s.at(at, Action::Demand(vec![(r, rate)]));
    }

    /// `r` lost at `at`, its true verdict soon after; returns when that verdict came (or `at`).
    fn lose(&mut self, r: usize, at: i64) -> i64 {
        self.s.at(at, Action::Lose(r));
        if !self.on(TRUE_VERDICT) || self.g.chance(15) {
            return at;
        }
        let verdict = at + secs(self.g.range(0, 30));
        self.s.at(verdict, Action::Unhealthy(r));
        verdict
    }

    /// `r` healthy and back at `at`.
    fn restore(&mut self, r: usize, at: i64) {
        self.s.at(at, Action::Healthy(r));
        self.s.at(at, Action::Restore(r));
    }

    /// A cut that `r`'s records do not cross (one-way when enabled and drawn), from `at`, that
    /// keeps `not` on `r`'s side; the Regions it cuts off from `r`, or `None` when the seed has
    /// no cuts.
    fn cut_around(&mut self, r: usize, at: i64, not: usize) -> Option<u8> {
        let all = ((1u16 << self.n) - 1) as u8;
        let others = all & !(1 << r) & !(1 << not);
        if self.on(ONE_WAY) && (!self.on(CUT) || self.g.chance(70)) && others != 0 {
            let to = others & (self.g.range(1, u64::from(others)) as u8);
            let to = if to == 0 { others } else { to };
            self.s.at(at, Action::OneWayCut(1 << r, to));
            Some(to)
        } else if self.on(CUT) {
            let side = 1 << r | 1 << not;
            self.s.at(at, Action::Cut(side));
            Some(all & !side)
        } else {
            None
        }
    }

    /// A loss, often a second within seconds and a cut around it; restores under the cut.
    fn loss(&mut self, at: i64) {
        let r = self.region();
        let from = (at - secs(self.g.range(0, 30))).max(0);
        let cut = self.g.chance(50) && self.cut_around(r, from, r).is_some();
        let mut verdict = self.lose(r, at);
        let second = (self.n > 2 && self.g.chance(50)).then(|| self.other(r));
        if let Some(q) = second {
            let at_q = at + secs(self.g.range(0, 5));
            verdict = verdict.max(self.lose(q, at_q));
        }
        if !self.on(RESTORE) {
            return;
        }
        let back = verdict + self.period + secs(self.g.range(5, 90));
        self.restore(r, back);
        let mut last = back;
        if let Some(q) = second {
            last = back + secs(self.g.range(0, 60));
            self.restore(q, last);
        }
        if cut && self.on(HEAL) {
            self.s.at(last + secs(self.g.range(0, 120)), Action::Heal);
        }
    }

    /// The granter first holds much of the limit; then demand moves from it to the heir while
    /// its records stop reaching some Regions, and the heir (often the granter too) is lost
    /// after it took grants. The granter comes back under the cut, with new demand there and
    /// in the Regions cut off from it; the heir comes back after the heal.
    fn heir(&mut self, at: i64) {
        let granter = self.region();
        let heir = self.other(granter);
        let before = (at - self.period * self.g.range(2, 6) as i64).max(0);
        let rich = part(self.limit, 40, 90, self.g);
        self.s.at(before, Action::Demand(vec![(granter, rich)]));
        let from = (at - secs(self.g.range(0, 10))).max(0);
        let cut_off = match self.n > 2 && self.g.chance(80) {
            true => self.cut_around(granter, from, heir),
            false => None,
        };
        let (low, high) = (
            part(self.limit, 0, 10, self.g),
            part(self.limit, 50, 100, self.g),
        );
        self.s.at(at, demand([(granter, low), (heir, high)]));
        let lost = at + self.period * self.g.range(3, 12) as i64;
        let mut verdict = self.lose(heir, lost);
        let both = self.g.chance(75);
        if both {
            let at_granter = lost + secs(self.g.range(0, 5));
            verdict = verdict.max(self.lose(granter, at_granter));
        }
        if !self.on(RESTORE) {
            return;
        }
        let back = verdict + self.period + secs(self.g.range(5, 90));
        if both {
            self.restore(granter, back);
            let wanting = cut_off.unwrap_or(0) | 1 << granter;
            let rates = (0..self.n)
                .filter(|r| wanting >> r & 1 == 1)
                .map(|r| (r, part(self.limit, 40, 100, self.g)))
                .collect();
            self.s.at(back, Action::Demand(rates));
        }
        let heal = back + secs(self.g.range(10, 150));
        if cut_off.is_some() && self.on(HEAL) {
            self.s.at(heal, Action::Heal);
        }
        let back_heir = heal + secs(self.g.range(0, 30));
        self.restore(heir, back_heir);
    }

    fn cut(&mut self, at: i64) {
        let r = self.region();
        let all = ((1u16 << self.n) - 1) as u8;
        if self.on(ONE_WAY) && (!self.on(CUT) || self.g.chance(50)) {
            let from = self.g.range(1, u64::from(all) - 1) as u8;
            let to = all & !from & (self.g.range(1, u64::from(all)) as u8);
            if to == 0 {
                return;
            }
            self.s.at(at, Action::OneWayCut(from, to));
        } else {
            let mask = (self.g.range(1, u64::from(all) - 1) as u8) | 1 << r;
            self.s.at(at, Action::Cut(mask & all));
        }
        if self.on(HEAL) {
            self.s.at(at + secs(self.g.range(5, 150)), Action::Heal);
        }
    }

    fn false_verdict(&mut self, at: i64) {
        let r = self.region();
        self.s.at(at, Action::Unhealthy(r));
        self.s
            .at(at + secs(self.g.range(1, 60)), Action::Healthy(r));
    }

    fn unknown(&mut self, at: i64) {
        let r = self.region();
        self.s.at(at, Action::Unknown(r));
        if self.g.chance(50) {
            self.s
                .at(at + secs(self.g.range(5, 90)), Action::Healthy(r));
        }
    }

    fn restart(&mut self, at: i64) {
        let r = self.region();
        self.s.at(at, Action::Restart(r));
    }

    /// A daemon death, its true verdict no sooner than the lease after it, and its restart.
    fn kill(&mut self, at: i64) {
        let Some(lease) = self.lease else {
            return;
        };
        let r = self.region();
        self.s.at(at, Action::KillDaemon(r));
        let mut back = at + secs(self.g.range(1, 120));
        if self.on(TRUE_VERDICT) && self.g.chance(70) {
            let verdict = at + lease + self.g.range(0, self.period as u64) as i64;
            self.s.at(verdict, Action::Unhealthy(r));
            back = back.max(verdict + self.period + 1);
            self.s.at(back, Action::Healthy(r));
        }
        if self.g.chance(80) {
            self.s.at(back, Action::RestartDaemon(r));
        }
    }

    /// One or two limit changes, each rolled out Region by Region within three periods, in a
    /// slot of its own before `end` (as the classic family draws them).
    fn limit_changes(&mut self, end: i64, floor: Room) {
        let spread = 3 * self.period;
        let changes = self.g.range(1, 2) as i64;
        let slot = end / changes;
        let mut prev = self.limit.milli();
        let least = (floor.milli() * self.n as u64).max(1);
        for k in 0..changes {
            let rate = Room::from_milli(self.g.range((prev / 2).max(least), 2 * prev));
            prev = rate.milli();
            let start = k * slot + self.g.range(0, (slot - spread - 1).max(1) as u64) as i64;
            for r in 0..self.n {
                let at = (start + self.g.range(0, spread as u64) as i64).min((k + 1) * slot - 1);
                self.s.at(at, Action::Limit(rate, 1 << r));
            }
        }
    }
}

/// Keeps the drawn events that are legal in time order before `end` (a Region is lost only
/// while another runs, restored only when lost, a daemon killed only while it runs, an
/// "unhealthy" verdict true unless the seed enables false ones, and no sooner than the lease
/// after a daemon's death), then appends the events at `end` that end every fault.
fn keep_legal(
    drawn: Vec<Event>,
    sc: &Scenario,
    kinds: u16,
    end: i64,
    lease: Option<i64>,
) -> Vec<Event> {
    let n = sc.regions.len();
    let mut st = State {
        lost: vec![false; n],
        dead: vec![false; n],
        died: vec![i64::MIN; n],
        verdict: vec![None; n],
        last_unhealthy: vec![i64::MIN; n],
        cut: false,
    };
    let false_ok = kinds & FALSE_VERDICT != 0;
    let mut out = Schedule::default();
    for e in drawn.into_iter().filter(|e| e.at_tick < end) {
        if st.legal(&e, lease, sc.period_ticks as i64, false_ok) {
            st.apply(&e);
            out.0.push(e);
        }
    }
    if st.cut {
        out.at(end, Action::Heal);
    }
    for r in 0..n {
        if st.dead[r] {
            out.at(end, Action::RestartDaemon(r));
        }
        if st.lost[r] {
            out.at(end, Action::Restore(r));
        }
        if st.verdict[r].is_some() {
            out.at(end, Action::Healthy(r));
        }
    }
    out.0
}

/// What the legality pass knows at a tick.
struct State {
    lost: Vec<bool>,
    dead: Vec<bool>,
    died: Vec<i64>,
    /// A verdict other than healthy: whether it is unhealthy (else unknown).
    verdict: Vec<Option<bool>>,
    /// When each Region was last reported unhealthy.
    last_unhealthy: Vec<i64>,
    cut: bool,
}

impl State {
    fn legal(&self, e: &Event, lease: Option<i64>, period: i64, false_ok: bool) -> bool {
        let t = e.at_tick;
        // A Region back while an unhealthy verdict for it holds, or one its readers have not
        // all read yet (they read once a period), would be a false verdict.
        let unread = |r: usize| t <= self.last_unhealthy[r].saturating_add(period);
        let reads_unhealthy = |r: usize| self.verdict[r] == Some(true);
        match e.action {
            Action::Lose(r) => !self.lost[r] && self.lost.iter().filter(|l| !**l).count() > 1,
            Action::Restore(r) => self.lost[r] && (false_ok || !reads_unhealthy(r)) && !unread(r),
            Action::Restart(r) => !self.lost[r] && !self.dead[r],
            Action::KillDaemon(r) => lease.is_some() && !self.lost[r] && !self.dead[r],
            Action::RestartDaemon(r) => {
                self.dead[r] && !self.lost[r] && (false_ok || !reads_unhealthy(r)) && !unread(r)
            }
            Action::Unhealthy(r) => {
                let since_death = t.saturating_sub(self.died[r]);
                if self.dead[r] {
                    since_death >= lease.unwrap_or(i64::MAX)
                } else {
                    self.lost[r] || false_ok
                }
            }
            _ => true,
        }
    }

    fn apply(&mut self, e: &Event) {
        match e.action {
            Action::Lose(r) => {
                self.lost[r] = true;
                self.dead[r] = false;
            }
            Action::Restore(r) => self.lost[r] = false,
            Action::KillDaemon(r) => {
                self.dead[r] = true;
                self.died[r] = e.at_tick;
            }
            Action::RestartDaemon(r) => self.dead[r] = false,
            Action::Unhealthy(r) => {
                self.verdict[r] = Some(true);
                self.last_unhealthy[r] = e.at_tick;
            }
            Action::Unknown(r) => self.verdict[r] = Some(false),
            Action::Healthy(r) => self.verdict[r] = None,
            Action::Cut(_) | Action::OneWayCut(..) => self.cut = true,
            Action::Heal => self.cut = false,
            _ => {}
        }
    }
}

/// Why a range of seeds cannot run: it is empty, or it passes the largest seed.
pub fn check_range(start: u64, seeds: u64) -> Result<(), String> {
    if seeds == 0 {
        return Err("the range is empty: --seeds must be at least 1".into());
    }
    if start.checked_add(seeds - 1).is_none() {
        return Err(format!(
            "--start {start} with --seeds {seeds} passes the largest seed, {}",
            u64::MAX
        ));
    }
    Ok(())
}

/// Generates and checks seeds `start..start + seeds` of `family` on `jobs` threads (each takes
/// every `jobs`-th seed). The totals do not depend on `jobs`; failures come back in seed order.
/// Seeds past `u64::MAX` are not run ([`check_range`] refuses such a range).
pub fn run(family: Family, start: u64, seeds: u64, jobs: usize) -> (Totals, Vec<(u64, String)>) {
    let jobs = jobs.clamp(1, 64) as u64;
    let parts: Vec<(Totals, Vec<(u64, String)>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..jobs)
            .map(|k| {
                s.spawn(move || {
                    let mut totals = Totals::default();
                    let mut failed = Vec::new();
                    let mut i = k;
                    while let Some(seed) = start.checked_add(i).filter(|_| i < seeds) {
                        let sc = family.generate(seed);
                        match crate::fuzz::check(&sc) {
                            Ok(r) => totals.add(&r, sc.limit, seed),
                            Err(f) => failed.push((seed, f)),
                        }
                        i += jobs;
                    }
                    (totals, failed)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h.join() {
                Ok(part) => part,
                // A panic in the checker is a failure of every seed that thread had left.
                Err(_) => (
                    Totals::default(),
                    vec![(
                        start,
                        "a fuzz thread panicked (see its message above)".into(),
                    )],
                ),
            })
            .collect()
    });
    let mut totals = Totals::default();
    let mut failed = Vec::new();
    for (t, f) in parts {
        totals.merge(&t);
        failed.extend(f);
    }
    failed.sort_by_key(|(seed, _)| *seed);
    (totals, failed)
}

/// The line a run ends with: how many seeds a minute it checked.
pub fn throughput(seeds: u64, wall_s: f64, jobs: usize) -> String {
    let per_minute = seeds as f64 * 60.0 / wall_s.max(1e-9);
    format!(
        "throughput: {seeds} seeds in {wall_s:.1} s on {jobs} thread(s): {per_minute:.0} seeds a minute, {:.0} a minute per thread",
        per_minute / jobs.max(1) as f64
    )
}

/// How far the running Regions' shares went above the limit in one run: what gateways
/// enforced beyond the largest rate the limit ever has (so a limit change never counts).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Excess {
    pub limit: Room,
    /// The largest Σ shares of the Regions not lost, less the limit.
    pub over: Room,
    /// Seconds with Σ shares above the limit.
    pub over_s: f64,
}

impl Excess {
    /// `over` in percent of the limit.
    pub fn percent(&self) -> f64 {
        self.over.milli() as f64 * 100.0 / self.limit.milli().max(1) as f64
    }
}

impl std::fmt::Display for Excess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "shares of the running Regions at most {} above L = {} ({:.1}% of L), above L for {:.1} s",
            self.over,
            self.limit,
            self.percent(),
            self.over_s
        )
    }
}

/// Runs `sc` and measures its [`Excess`].
pub fn excess(sc: &Scenario) -> Result<Excess, String> {
    let limit = sc.max_limit();
    let mut x = Excess {
        limit,
        ..Excess::default()
    };
    crate::engine::run(sc, &mut |row| {
        if row.sum_shares > limit {
            x.over = x.over.max(row.sum_shares.excess_over(limit));
            x.over_s += sc.tick_ms as f64 / 1000.0;
        }
    })
    .map_err(|e| e.to_string())?;
    Ok(x)
}

/// The names of the kinds in a mask of [`KINDS`].
pub fn kind_names(mask: u16) -> Vec<&'static str> {
    KINDS
        .iter()
        .filter(|(k, _)| mask & k != 0)
        .map(|&(_, name)| name)
        .collect()
}

/// Generates and checks seeds `start..start + seeds` of the classic family on `jobs` threads
/// ([`run`]). The totals do not depend on `jobs`; failures come back in seed order.
pub fn run_seeds(start: u64, seeds: u64, jobs: usize) -> (Totals, Vec<(u64, String)>) {
    run(Family::Classic, start, seeds, jobs)
}

/// Threads for [`run_seeds`]: `SHAREPLANE_FUZZ_JOBS`, else every core.
pub fn default_jobs() -> usize {
    std::env::var("SHAREPLANE_FUZZ_JOBS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&j: &usize| j > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
