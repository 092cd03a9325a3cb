//! Scenario files (SIMULATOR.md, "Scenario file"): parsing, validation and the validated form.
//!
//! A [`Scenario`] can only be built from a file that passes every rule, or directly by code that
//! knows what it does (the fuzzer, the sweep). All times are whole ticks and all rates exact
//! [`Room`], so the simulation never accumulates floating-point time.

mod read;
pub mod runnable;

use shareplane_core::{
    Deployment, Design, Fence, LimitKind, LimitSpec, Room, SilentPolicy, MAX_REGIONS,
};
use std::fmt;

/// The largest scenario file read (bytes).
pub const MAX_FILE_BYTES: usize = 1 << 20;
/// The most ticks one run may simulate (about 14 hours at 10 ms ticks).
pub const MAX_TICKS: i64 = 5_000_000;
/// The most events one scenario may hold.
pub const MAX_EVENTS: usize = 10_000;
/// The largest time accepted anywhere in a scenario, in seconds.
const MAX_TIME_S: f64 = 1e7;

/// One problem with a scenario file, naming the field and (when known) the line.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    pub line: Option<usize>,
    pub field: String,
    pub problem: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "line {l}: `{}` {}", self.field, self.problem),
            None => write!(f, "`{}` {}", self.field, self.problem),
        }
    }
}

/// Why a scenario file was refused. Every problem found is listed, not only the first.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{0}")]
    Syntax(String),
    #[error("{}", list(.0))]
    Invalid(Vec<Problem>),
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// What happens at an event (SIMULATOR.md, "Events").
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// New received rates, by Region index.
    Demand(Vec<(usize, Room)>),
    Lose(usize),
    Restore(usize),
    /// The Regions in the mask are cut off from the others.
    Cut(u8),
    /// Records written by the Regions of the first mask no longer reach those of the second (the
    /// other way still works).
    OneWayCut(u8, u8),
    Heal,
    Unhealthy(usize),
    Healthy(usize),
    /// The health check's data for the Region is missing or unreadable (never read as unhealthy).
    Unknown(usize),
    /// The Region's daemon restarts at once and resumes from its own record.
    Restart(usize),
    /// The Region's daemon dies; its gateways keep enforcing their last rules for the lease,
    /// then fence (capacity limits refuse everything).
    KillDaemon(usize),
    /// A killed daemon starts again from its last written record.
    RestartDaemon(usize),
    /// The Regions in the mask adopt the limit at this rate (a new limit version for every change
    /// of rate, in time order; Regions adopt it at different times, as a rollout does).
    Limit(Room, u8),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub at_tick: i64,
    pub action: Action,
    /// The line of the event in its file (0 for generated scenarios).
    pub line: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RegionSpec {
    pub name: String,
    pub offset_tick: i64,
    pub demand: Room,
    pub visibility_ticks: u64,
}

/// A validated scenario, in ticks and exact room.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    pub name: String,
    pub tick_ms: u64,
    /// First simulated tick (tick 0 is t = 0).
    pub start_tick: i64,
    /// First tick not simulated.
    pub end_tick: i64,
    pub design: Design,
    pub policy: SilentPolicy,
    pub fence: Fence,
    pub seed: Option<u64>,
    pub limit: Room,
    pub burst_ms: u64,
    pub floor: Room,
    pub step_cap: Room,
    pub period_ticks: u64,
    pub window_ticks: u64,
    pub silent_after: u32,
    pub regions: Vec<RegionSpec>,
    /// In time order; events at the same tick keep their file order.
    pub events: Vec<Event>,
    /// The time window the plot shows, in ticks (defaults to the whole run).
    pub plot_from_tick: i64,
    pub plot_to_tick: i64,
}

impl Scenario {
    pub fn seconds(&self, tick: i64) -> f64 {
        (tick as i128 * self.tick_ms as i128) as f64 / 1000.0
    }

    pub fn ticks_per_second(&self) -> u64 {
        1000 / self.tick_ms
    }

    /// The deployment the core sees for this scenario: its Regions and one capacity limit. The
    /// core's own checks decide whether it is valid (their problems, joined).
    pub fn deployment(&self) -> Result<Deployment, String> {
        self.deployment_at(self.limit)
    }

    /// The same deployment with the limit at `rate` (a `limit` event's rate rolled out).
    pub fn deployment_at(&self, rate: Room) -> Result<Deployment, String> {
        Deployment::try_new(Deployment {
            regions: self.regions.iter().map(|r| r.name.clone()).collect(),
            limits: vec![LimitSpec {
                id: "limit".into(),
                version: 1,
                rate,
                burst_ms: self.burst_ms,
                floor: self.floor,
                step_cap: self.step_cap,
                kind: LimitKind::Capacity,
                shadow: false,
            }],
            design: self.design,
            policy: self.policy,
            fence: self.fence,
            silent_after: self.silent_after,
            period_ms: self.period_ticks * self.tick_ms,
        })
        .map_err(|errs| {
            errs.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    /// The limit's rate once every change has been adopted: the last change's, or `limit`.
    pub fn final_limit(&self) -> Room {
        self.events
            .iter()
            .rev()
            .find_map(|e| match e.action {
                Action::Limit(rate, _) => Some(rate),
                _ => None,
            })
            .unwrap_or(self.limit)
    }

    /// The largest rate the limit has at any time.
    pub fn max_limit(&self) -> Room {
        self.events
            .iter()
            .filter_map(|e| match e.action {
                Action::Limit(rate, _) => Some(rate),
                _ => None,
            })
            .fold(self.limit, Room::max)
    }

    /// Parses and validates a scenario file's text.
    pub fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        if text.len() > MAX_FILE_BYTES {
            return Err(ScenarioError::Syntax(format!(
                "the file is larger than {MAX_FILE_BYTES} bytes, the most a scenario may have"
            )));
        }
        let sc = read::read(text)?;
        // What the run as a whole needs (memory, a deployment the core accepts, a lease for
        // `kill_daemon`): checked once every field is valid.
        let problems = runnable::problems(&sc);
        if problems.is_empty() {
            Ok(sc)
        } else {
            Err(ScenarioError::Invalid(problems))
        }
    }

    /// Checks the rules that code building a scenario directly must also keep.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let mut p = Vec::new();
        let mut bad = |field: &str, problem: &str| {
            p.push(Problem {
                line: None,
                field: field.into(),
                problem: problem.into(),
            })
        };
        if self.tick_ms == 0 || 1000 % self.tick_ms != 0 {
            bad("tick_ms", "must divide 1000");
        }
        if self.end_tick <= self.start_tick || self.end_tick - self.start_tick > MAX_TICKS {
            bad("end_s", "must be after start_s, by at most MAX_TICKS ticks");
        }
        if !(1..=MAX_REGIONS).contains(&self.regions.len()) {
            bad("region", "needs 1 to 8 Regions");
        }
        if self.regions.iter().any(|r| r.visibility_ticks == 0)
            || self.period_ticks == 0
            || self.window_ticks == 0
        {
            bad("sync", "visibility, period and window must be positive");
        }
        let held = |rate: Room| {
            self.floor.milli().saturating_mul(self.regions.len() as u64) <= rate.milli()
                && !rate.is_zero()
        };
        if !held(self.limit)
            || self
                .events
                .iter()
                .any(|e| matches!(e.action, Action::Limit(rate, _) if !held(rate)))
        {
            bad(
                "limit",
                "rate must be positive and hold a floor for every Region",
            );
        }
        if p.is_empty() {
            p = runnable::problems(self);
        }
        if p.is_empty() {
            Ok(())
        } else {
            Err(ScenarioError::Invalid(p))
        }
    }
}
