//! Fault schedules for the partition tests (`tests/partitions.rs`): a fixed, named restore race and
//! random schedules drawn from a seed with a small deterministic generator (splitmix64), so that
//! a failing run replays from the seed it printed. Pure: the runner carries the steps out.

use std::fmt;

/// splitmix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough to draw fault schedules.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..hi` (`lo` if the range is empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo)
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.range(0, 100) < percent
    }
}

/// One thing the runner does to the deployment. Regions are indices (0 = A).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// SIGKILL the daemon; its gateway and Redis live on.
    KillDaemon(usize),
    /// Start the daemon again on its port.
    RestartDaemon(usize),
    /// The whole Region goes: its daemon (SIGKILL) and its gateway with its load.
    KillRegion(usize),
    /// The Region comes back: daemon, then a new gateway with the same load.
    RestartRegion(usize),
    /// Stop replicating writes `from → to` (and `to → from` if `both`).
    Cut {
        from: usize,
        to: usize,
        both: bool,
    },
    Heal {
        from: usize,
        to: usize,
        both: bool,
    },
    /// The Region's Route 53 health check reads healthy (`true`) or unhealthy from now on.
    Health(usize, bool),
    /// SIGSTOP / SIGCONT the daemon.
    Pause(usize),
    Resume(usize),
    /// SIGKILL the Region's Redis and start an empty one on the same port.
    RestartRedis(usize),
    /// Region `region`'s file now says the limit is `rps` at `version`; the runner writes it and
    /// sends the daemon SIGHUP (a dead daemon reads it when it restarts, a stopped one when it
    /// resumes). A rollout is one such step per Region, at different moments, as a deployment
    /// pipeline rolls a change out.
    SetLimit {
        region: usize,
        rps: u64,
        version: u64,
    },
    /// Wait (at most the runner's bound) until every Region in `by` marks `lost` reclaimed in
    /// `/v1/state`.
    WaitReclaimed {
        lost: usize,
        by: Vec<usize>,
    },
}

/// A step: `after_ms` after the previous one (after the start of the load for the first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub after_ms: u64,
    pub action: Action,
}

/// A schedule: its name (and seed, for random ones) and its steps. Every fault it injects is
/// undone by a later step, so that everything has healed after the last one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub name: String,
    pub seed: Option<u64>,
    /// Faults injected (an episode such as "lose B, unhealthy, restore" counts once).
    pub faults: usize,
    pub steps: Vec<Step>,
}

const NAMES: [&str; 3] = ["A", "B", "C"];

fn name(r: usize) -> &'static str {
    NAMES.get(r).copied().unwrap_or("?")
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let arrow = |both: bool| if both { "<->" } else { "->" };
        match self {
            Action::KillDaemon(r) => write!(f, "kill -9 daemon {}", name(*r)),
            Action::RestartDaemon(r) => write!(f, "restart daemon {}", name(*r)),
            Action::KillRegion(r) => write!(f, "lose Region {} (daemon, gateway, load)", name(*r)),
            Action::RestartRegion(r) => write!(f, "restore Region {}", name(*r)),
            Action::Cut { from, to, both } => {
                write!(f, "cut {} {} {}", name(*from), arrow(*both), name(*to))
            }
            Action::Heal { from, to, both } => {
                write!(f, "heal {} {} {}", name(*from), arrow(*both), name(*to))
            }
            Action::Health(r, h) => write!(
                f,
                "health {} {}",
                name(*r),
                if *h { "healthy" } else { "unhealthy" }
            ),
            Action::Pause(r) => write!(f, "SIGSTOP daemon {}", name(*r)),
            Action::Resume(r) => write!(f, "SIGCONT daemon {}", name(*r)),
            Action::RestartRedis(r) => write!(f, "restart Redis {}", name(*r)),
            Action::SetLimit {
                region,
                rps,
                version,
            } => write!(
                f,
                "limit {rps}/s at version {version} in {} (file, SIGHUP)",
                name(*region)
            ),
            Action::WaitReclaimed { lost, by } => {
                let by: Vec<&str> = by.iter().map(|r| name(*r)).collect();
                write!(
                    f,
                    "wait until {} mark {} reclaimed",
                    by.join(" and "),
                    name(*lost)
                )
            }
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.seed {
            Some(s) => writeln!(
                f,
                "schedule {} (seed {s}, {} faults):",
                self.name, self.faults
            )?,
            None => writeln!(f, "schedule {} ({} faults):", self.name, self.faults)?,
        }
        let mut at = 0;
        for s in &self.steps {
            at += s.after_ms;
            writeln!(f, "  +{:>6} ms (t={:>6} ms) {}", s.after_ms, at, s.action)?;
        }
        Ok(())
    }
}

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

/// The restore race (issue "Reclaim and return…"): with demand high everywhere, lose B; once A
/// and C have marked B reclaimed wait 3 s and lose C; restore B 4 s later; then restore C.
/// `warm_ms`: how long the load runs before B is lost.
pub fn restore_race(warm_ms: u64) -> Schedule {
    let step = |after_ms, action| Step { after_ms, action };
    Schedule {
        name: "restore-race".into(),
        seed: None,
        faults: 2,
        steps: vec![
            step(warm_ms, Action::KillRegion(B)),
            step(0, Action::Health(B, false)),
            step(
                0,
                Action::WaitReclaimed {
                    lost: B,
                    by: vec![A, C],
                },
            ),
            step(3_000, Action::KillRegion(C)),
            step(0, Action::Health(C, false)),
            step(4_000, Action::Health(B, true)),
            step(0, Action::RestartRegion(B)),
            step(6_000, Action::Health(C, true)),
            step(0, Action::RestartRegion(C)),
        ],
    }
}

/// How a random schedule is drawn.
#[derive(Clone, Copy, Debug)]
pub struct Draw {
    pub faults: usize,
    /// Load before the first fault.
    pub warm_ms: u64,
    /// Faults start within this span after the warm-up.
    pub span_ms: u64,
    /// A killed daemon's health turns unhealthy no sooner than this after the kill (a real health
    /// check needs longer than the gateways' lease to call a dead daemon unhealthy: PROTOCOL.md,
    /// residual risk 5; an instant verdict is what the restore race tests, without cuts).
    pub verdict_after_kill_ms: u64,
    /// The limit's rate at the start (requests/s): a limit change rolls another rate out and,
    /// at its end, this one back.
    pub limit_rps: u64,
}

/// The rates a limit change rolls out, in percent of the starting rate: lowered and raised alike.
pub const LIMIT_CHANGES_PERCENT: [u64; 4] = [60, 80, 120, 150];

/// The largest rate any schedule drawn with `draw` may run (the checker's bounds grow with it).
pub fn largest_limit(draw: &Draw) -> u64 {
    let top = LIMIT_CHANGES_PERCENT.iter().max().copied().unwrap_or(100);
    draw.limit_rps * top.max(100) / 100
}

/// What a random fault keeps busy, so that two faults never undo each other halfway (two cuts of
/// one link, two verdicts for one Region).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Resource {
    /// A Region's processes (kill, pause).
    Procs(usize),
    Health(usize),
    Redis(usize),
    /// The pair of Regions `(lower, higher)`.
    Link(usize, usize),
    /// The limit's rate (one change rolls out at a time).
    Limit,
}

/// A random schedule of `draw.faults` faults from `seed`, over three Regions. Each fault is an
/// episode (its start and the step that undoes it, 1.5 to 10 s later); episodes overlap freely
/// except on the same resource. Kinds: kill -9 a daemon (with a true unhealthy verdict from
/// `verdict_after_kill_ms` on, 2 times in 3), lose a whole Region (likewise), cut one link one way
/// or both, a false unhealthy verdict for a live Region, SIGSTOP a daemon, restart a Redis, change
/// the limit (rolled out Region by Region, and back at the end). Limit versions are numbered
/// after the draw, in time order, so that each Region's only go up and a version names one rate
/// in every Region.
pub fn random(seed: u64, draw: Draw) -> Schedule {
    let mut rng = SplitMix64::new(seed);
    let mut timed: Vec<(u64, u64, Action)> = Vec::new();
    let mut busy: Vec<(Resource, u64, u64)> = Vec::new();
    let mut placed = 0;
    let mut tries = 0;
    while placed < draw.faults && tries < 1_000 {
        tries += 1;
        let start = draw.warm_ms + rng.range(0, draw.span_ms);
        let len = rng.range(1_500, 10_000);
        let r = rng.range(0, 3) as usize;
        let episode = episode(&mut rng, r, start, len, draw);
        let free = episode.uses.iter().all(|res| {
            busy.iter().all(|(b, from, to)| {
                b != res || start >= *to + 1_000 || start + len + 1_000 <= *from
            })
        });
        if !free {
            continue;
        }
        for res in &episode.uses {
            busy.push((*res, start, start + len));
        }
        for (at, action) in episode.steps {
            timed.push((at, timed.len() as u64, action));
        }
        placed += 1;
    }
    timed.sort_by_key(|(at, n, _)| (*at, *n));
    let mut versions = [1u64; 3];
    for (_, _, action) in &mut timed {
        if let Action::SetLimit {
            region, version, ..
        } = action
        {
            versions[*region] += 1;
            *version = versions[*region];
        }
    }
    let mut prev = 0;
    let steps = timed
        .into_iter()
        .map(|(at, _, action)| {
            let after_ms = at - prev;
            prev = at;
            Step { after_ms, action }
        })
        .collect();
    Schedule {
        name: format!("random-{seed}"),
        seed: Some(seed),
        faults: placed,
        steps,
    }
}

struct Episode {
    uses: Vec<Resource>,
    steps: Vec<(u64, Action)>,
}

/// One fault of a kind drawn from `rng` (see [`random`]) on Region `r` or a link from it, from
/// `start` for `len` ms.
fn episode(rng: &mut SplitMix64, r: usize, start: u64, len: u64, draw: Draw) -> Episode {
    let end = start + len;
    match rng.range(0, 7) {
        0 => outage(rng, r, (start, end), draw, false),
        1 => outage(rng, r, (start, end), draw, true),
        2 => cut(rng, r, (start, end)),
        3 => Episode {
            uses: vec![Resource::Health(r)],
            steps: vec![
                (start, Action::Health(r, false)),
                (end, Action::Health(r, true)),
            ],
        },
        4 => {
            // A pause long enough to outlast the lease; at most 4 s.
            let resume = start + len.min(4_000);
            Episode {
                uses: vec![Resource::Procs(r)],
                steps: vec![(start, Action::Pause(r)), (resume, Action::Resume(r))],
            }
        }
        5 => Episode {
            uses: vec![Resource::Redis(r)],
            steps: vec![(start, Action::RestartRedis(r))],
        },
        _ => limit_change(rng, (start, end), draw),
    }
}

/// Region `r`'s daemon alone, or the whole Region (daemon, gateways and Redis), killed at
/// `start` and back at `end`, with a true unhealthy verdict from `verdict_after_kill_ms` on 2
/// times in 3.
fn outage(
    rng: &mut SplitMix64,
    r: usize,
    (start, end): (u64, u64),
    draw: Draw,
    whole_region: bool,
) -> Episode {
    let (kill, back) = match whole_region {
        false => (Action::KillDaemon(r), Action::RestartDaemon(r)),
        true => (Action::KillRegion(r), Action::RestartRegion(r)),
    };
    let mut steps = vec![(start, kill)];
    let verdict_at = start + draw.verdict_after_kill_ms;
    if verdict_at < end && rng.chance(67) {
        steps.push((verdict_at, Action::Health(r, false)));
    }
    // Healthy again as it comes back (also when no unhealthy verdict was put: a no-op).
    steps.push((end, Action::Health(r, true)));
    steps.push((end, back));
    Episode {
        uses: vec![Resource::Procs(r), Resource::Health(r)],
        steps,
    }
}

/// The link from Region `r` to another drawn one cut from `start` to `end`, one way or both.
fn cut(rng: &mut SplitMix64, r: usize, (start, end): (u64, u64)) -> Episode {
    let to = (r + 1 + rng.range(0, 2) as usize) % 3;
    let both = rng.chance(50);
    Episode {
        uses: vec![Resource::Link(r.min(to), r.max(to))],
        steps: vec![
            (start, Action::Cut { from: r, to, both }),
            (end, Action::Heal { from: r, to, both }),
        ],
    }
}

/// The limit changed by a drawn percentage from `start`, and back to the starting rate at `end`,
/// each rolled out Region by Region.
fn limit_change(rng: &mut SplitMix64, (start, end): (u64, u64), draw: Draw) -> Episode {
    let pct = LIMIT_CHANGES_PERCENT[rng.range(0, LIMIT_CHANGES_PERCENT.len() as u64) as usize];
    let changed = draw.limit_rps * pct / 100;
    let mut steps = rollout(rng, start, changed);
    // Back to the starting rate at the end: a rollout takes under 1 s, less than the shortest
    // episode, so the way back starts after the way out has reached everyone.
    steps.extend(rollout(rng, end, draw.limit_rps));
    Episode {
        uses: vec![Resource::Limit],
        steps,
    }
}

/// `rps` reaches the Regions in a random order from `start`, 0 to 300 ms apart (under 1 s in all:
/// the gap kept between two episodes on one resource, so two rollouts never interleave). Versions
/// are set after the draw ([`random`]).
fn rollout(rng: &mut SplitMix64, start: u64, rps: u64) -> Vec<(u64, Action)> {
    let mut order = vec![0, 1, 2];
    for i in (1..order.len()).rev() {
        order.swap(i, rng.range(0, i as u64 + 1) as usize);
    }
    let mut at = start;
    order
        .into_iter()
        .map(|region| {
            at += rng.range(0, 300);
            (
                at,
                Action::SetLimit {
                    region,
                    rps,
                    version: 0,
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DRAW: Draw = Draw {
        faults: 10,
        warm_ms: 15_000,
        span_ms: 60_000,
        verdict_after_kill_ms: 2_000,
        limit_rps: 1_000,
    };

    #[test]
    fn splitmix_matches_its_reference_values() {
        // Reference: splitmix64 seeded with 0 gives these first outputs.
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn a_seed_replays_its_schedule_and_another_seed_differs() {
        assert_eq!(random(7, DRAW), random(7, DRAW));
        assert_ne!(random(7, DRAW).steps, random(8, DRAW).steps);
    }

    #[test]
    fn every_fault_is_undone_by_the_end() {
        for seed in 0..200 {
            let s = random(seed, DRAW);
            assert_eq!(s.faults, DRAW.faults, "seed {seed}:\n{s}");
            let mut down = [false; 3];
            let mut paused = [false; 3];
            let mut healthy = [true; 3];
            let mut cut = std::collections::BTreeSet::new();
            let mut limit = [(DRAW.limit_rps, 1u64); 3];
            let mut rate_of_version = std::collections::BTreeMap::new();
            for st in &s.steps {
                match &st.action {
                    Action::KillDaemon(r) | Action::KillRegion(r) => {
                        assert!(!down[*r] && !paused[*r], "seed {seed}:\n{s}");
                        down[*r] = true;
                    }
                    Action::RestartDaemon(r) | Action::RestartRegion(r) => down[*r] = false,
                    Action::Pause(r) => paused[*r] = true,
                    Action::Resume(r) => paused[*r] = false,
                    Action::Health(r, h) => healthy[*r] = *h,
                    Action::Cut { from, to, .. } => {
                        assert!(
                            cut.insert((*from.min(to), *from.max(to))),
                            "seed {seed}:\n{s}"
                        );
                    }
                    Action::Heal { from, to, .. } => {
                        cut.remove(&(*from.min(to), *from.max(to)));
                    }
                    Action::SetLimit {
                        region,
                        rps,
                        version,
                    } => {
                        // Versions only go up, and one version is one rate everywhere.
                        assert_eq!(*version, limit[*region].1 + 1, "seed {seed}:\n{s}");
                        let rate = rate_of_version.entry(*version).or_insert(*rps);
                        assert_eq!(rate, rps, "seed {seed}:\n{s}");
                        limit[*region] = (*rps, *version);
                    }
                    _ => {}
                }
            }
            assert_eq!((down, paused, healthy), ([false; 3], [false; 3], [true; 3]));
            assert!(
                limit.iter().all(|(rps, _)| *rps == DRAW.limit_rps),
                "seed {seed}:\n{s}"
            );
            assert!(cut.is_empty(), "seed {seed}:\n{s}");
        }
    }

    #[test]
    fn limit_changes_are_drawn_lowered_and_raised() {
        let rates: std::collections::BTreeSet<u64> = (0..200)
            .flat_map(|seed| random(seed, DRAW).steps)
            .filter_map(|st| match st.action {
                Action::SetLimit { rps, .. } => Some(rps),
                _ => None,
            })
            .collect();
        assert!(rates.iter().any(|r| *r < DRAW.limit_rps), "{rates:?}");
        assert!(rates.iter().any(|r| *r > DRAW.limit_rps), "{rates:?}");
        assert_eq!(rates.last().copied(), Some(largest_limit(&DRAW)));
    }

    #[test]
    fn the_restore_race_is_named_and_printed_with_its_steps() {
        let s = restore_race(15_000).to_string();
        assert!(s.starts_with("schedule restore-race (2 faults"), "{s}");
        assert!(s.contains("wait until A and C mark B reclaimed"), "{s}");
    }
}
