//! The one judge of every checker: the fuzzer (its three families), the model checker and the
//! end-to-end partitions checker all pass their verdicts through [`judge`] (every instant) and
//! [`judge_end`] (once every fault has ended).
//!
//! # A check must not trust what it checks
//!
//! The judge decides by **physical truth**: what alive, enforcing Regions hold and what their
//! gateways admit. For a simulated or model-checked run that is the physical audit
//! ([`audit`], owned by `shareplane_core::estate` and re-exported here), computed from every
//! record each Region wrote and which daemons run, never from a Region's account of its own
//! estate; and what each Region's gateways enforced at that instant. For a run of real processes
//! it is what the gateways enforced and admitted as the load generators report them. A record's
//! own counters may only make a check stricter (a debt narrows when a bound is raised, a take
//! must be backed by the granter's record); they never excuse an excess by themselves.
//!
//! # Allowances
//!
//! Where the protocol states a residual risk, the checker says which one holds at an instant with
//! typed [`Allowances`]: the limit in force ([`Limit`]), a false verdict's window
//! ([`FalseVerdict`]: the excess it allows, measured or bounded), whether faults may still linger
//! (before the liveness bound), whether room stale heirs count twice is excused at all
//! ([`StaleRoom`]: only after a false verdict or a lowered limit), whether the deployment is
//! within the protocol's assumptions
//! ([`Assumptions`]: within them no room counted twice reaches the running Regions' shares;
//! outside them the shares are held to the stale room plus the running Regions' debts), and how
//! room taken from a running epoch is treated ([`RunningReclaimed`]). Anything not allowed is a
//! typed [`Violation`], whose `Display` says what broke.
//!
//! Pure: no IO, no clock, no randomness, no tokio. It depends on `shareplane-core` only.

mod allowances;
mod end;
mod instant;
mod violation;

pub use allowances::{
    Allowances, Assumptions, EndAllowances, Excess, FalseVerdict, Limit, RunningReclaimed,
    StaleRoom, Stranded,
};
pub use end::{judge_end, Admissions, End, EndVerdict, Liveness, MAX_WINDOW_VIOLATIONS};
pub use instant::{judge, Instant, Measured, Region};
pub use shareplane_core::{audit, Audit, Truth};
pub use violation::Violation;

#[cfg(test)]
mod tests;
