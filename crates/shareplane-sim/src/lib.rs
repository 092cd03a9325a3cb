//! The deterministic partition-test simulator (`shareplane sim`).
//!
//! It drives the very same protocol core the daemon runs ([`shareplane_core::Coordinator`], one per
//! Region) over virtual time, with a simulated global table (`shareplane_table`: visibility delay
//! per writer, cuts, heal), a simulated outside health check, demand traces and a fluid model of
//! each Region's token bucket.
//! The scenario format, trace and summary are fixed by SIMULATOR.md. Same input, same bytes out:
//! time is counted in whole ticks and room in exact integer units; nothing reads a clock or draws
//! an unseeded random number.
//!
//! - [`scenario`]: the TOML format and its validation, [`runnable`]: what a run as a whole
//!   needs (its memory budget, a deployment the core accepts, a lease for `kill_daemon`),
//! - [`engine`]: the run itself and the conservation audit,
//! - [`summary`], [`trace`], [`plot`]: what a run reports,
//! - [`sweep`]: a scenario over every assignment of phases,
//! - [`fuzz`]: random fault schedules from a seed, checked at every tick; [`judging`]: the
//!   allowances each seed is judged with by the one judge (`shareplane_judge`), and its figures,
//! - [`swarm`], [`cascade`], [`stale_close`]: the swarm family (a random subset of fault kinds
//!   per seed, drawn towards cascades), the cascade family (issue 31's shape) and the stale-close
//!   family (an heir lost while it holds a stale close), judged by the same checks,
//! - [`cli`]: `shareplane sim …`.

pub mod cascade;
pub mod cli;
pub mod engine;
pub mod fuzz;
pub mod judging;
pub mod plot;
pub mod rng;
pub mod scenario;
pub mod stale_close;
pub use scenario::runnable;
pub mod summary;
pub mod swarm;
pub mod sweep;
pub mod trace;

use engine::{EventLog, Row, SimError};
use scenario::Scenario;
use summary::{Stats, Summary};

/// Runs a scenario and returns its summary, handing every tick's row to `sink` as well.
pub fn simulate(sc: &Scenario, sink: &mut dyn FnMut(&Row<'_>)) -> Result<Summary, SimError> {
    simulate_with_events(sc, sink).map(|(summary, _)| summary)
}

/// Runs a scenario and returns its summary and the events it marked (for plots).
pub fn simulate_with_events(
    sc: &Scenario,
    sink: &mut dyn FnMut(&Row<'_>),
) -> Result<(Summary, Vec<EventLog>), SimError> {
    let mut stats = Stats::new(sc);
    let outcome = engine::run(sc, &mut |row| {
        stats.tick(row);
        sink(row);
    })?;
    let events = outcome.events.clone();
    Ok((stats.finish(sc, &outcome), events))
}
