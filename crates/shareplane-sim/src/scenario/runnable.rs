//! What a scenario must satisfy to run, beyond the rules of its fields one by one: the memory
//! the run would hold stays within [`MEMORY_BUDGET_BYTES`], the core accepts the deployment
//! built from it, and a `kill_daemon` event has gateways that can hold a lease. A file that
//! breaks one is refused like any invalid file (exit 2), naming the field, before anything is
//! allocated for the run.

use super::{Action, Problem, Scenario};

/// The most memory one run may hold for what grows with its settings: the demand windows and
/// the records the Regions write.
pub const MEMORY_BUDGET_BYTES: u64 = 1 << 30;

/// What the simulator keeps per record a Region writes, with margin: the record (shared by the
/// Region's history and its entry in the simulated table), the table entry, the rebalance's log
/// line and the summary's and plot's change points. A test checks it against the types' sizes.
pub const RECORD_BYTES: u64 = 4096;

/// Bytes of one demand window slot (one tick's received rate).
const WINDOW_SLOT_BYTES: u64 = 8;

/// What a run of `sc` would hold: (demand windows, records), in bytes.
pub fn memory_bytes(sc: &Scenario) -> (u128, u128) {
    let n = sc.regions.len() as u128;
    let ticks = (sc.end_tick as i128 - sc.start_tick as i128).max(0) as u128;
    let writes = ticks / u128::from(sc.period_ticks.max(1)) + 1;
    let windows = n * u128::from(sc.window_ticks) * u128::from(WINDOW_SLOT_BYTES);
    (windows, n * writes * u128::from(RECORD_BYTES))
}

/// Every problem of `sc` that this module checks (none: it can run).
pub fn problems(sc: &Scenario) -> Vec<Problem> {
    let mut p = Vec::new();
    let (windows, records) = memory_bytes(sc);
    if windows + records > u128::from(MEMORY_BUDGET_BYTES) {
        let mib = |b: u128| b / (1 << 20);
        let (field, what) = if windows >= records {
            (
                "sync.demand_window_s",
                "is so long that the demand windows (one slot per tick per Region)",
            )
        } else {
            (
                "sync.period_s",
                "is so short for the run's length (end_s − start_s) that the records written (one per Region per period)",
            )
        };
        p.push(Problem {
            line: None,
            field: field.into(),
            problem: format!(
                "{what} would need about {} MiB (windows {} MiB, records {} MiB), more than the \
                 simulator's memory budget of {} MiB",
                mib(windows + records),
                mib(windows),
                mib(records),
                MEMORY_BUDGET_BYTES >> 20
            ),
        });
        // The deployment checks below cost nothing, but a run this size is refused already.
        return p;
    }
    let d = match sc.deployment() {
        Ok(d) => d,
        Err(e) => {
            p.push(Problem {
                line: None,
                field: "limit".into(),
                problem: e,
            });
            return p;
        }
    };
    let Err(no_lease) = shareplane_core::lease_bound(&d) else {
        return p;
    };
    for e in &sc.events {
        if matches!(e.action, Action::KillDaemon(_)) {
            p.push(Problem {
                line: Some(e.line).filter(|&l| l > 0),
                field: "kill_daemon".into(),
                problem: format!(
                    "needs gateways that can hold a lease (they enforce the dead daemon's rules \
                     until it runs out), and this deployment admits none: {} (sync.silent_after, \
                     sync.period_s)",
                    no_lease
                ),
            });
        }
    }
    p
}
