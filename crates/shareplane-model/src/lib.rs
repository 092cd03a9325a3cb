//! An exhaustive explorer of the core's real types over small configurations.
//!
//! Breadth-first over every interleaving, to a stated depth, of: rebalances, record deliveries
//! (each writer's versions in order, any delay, intermediate versions possibly skipped as a
//! replica that only holds the newest item would), lose, restore, cut of one Region, one-way cut
//! of one direction between two Regions, heal (which delivers each writer's newest record that a
//! cut held back, as a global table does), health flips, daemon restarts and daemon deaths (gateways enforcing the last written record
//! under their lease, restarts within the resume window or after it), and, with a schedule of limit versions, each Region adopting
//! the next version on its own. States are deduplicated by a hash of the protocol state.
//!
//! Every state is judged by the one judge (`shareplane_judge::judge`), and every recovery's end
//! by `shareplane_judge::judge_end`, with the allowances stated in `allowances` below. In every
//! state it checks: exact conservation (but for room that heirs which reclaimed from a
//! stale record count twice until they settle, residual D12; exact again after recovery);
//! unless a false-positive health verdict (a live Region reported unhealthy) has been in force, Σ live shares ≤ the largest rate adopted so far,
//! and so is the room the running Regions hold (share + pool − debt: what they may raise to
//! without a grant) beyond what heirs that reclaimed from a stale record hold twice (the audit's
//! `over_stale`, residual D12); no grant taken twice; and on every rebalance that a reclaim of a
//! `(Region, epoch)` happens once. From every state at the frontier it runs a recovery (heal,
//! restore, truthful health, the newest limit everywhere, full rounds) and checks that shares
//! reach their targets under it.
//!
//! A run may start from a scenario's prefix of actions, name a class of states it must reach (a
//! witness, such as the restore race of issue 11), and keep to true health verdicts.
//!
//! The core's tests (`crates/shareplane-core/tests/model_check.rs`) run the CI-sized runs; the
//! binary (`cargo run --profile checked -p shareplane-model -- DEPTH FAULTS RUN`) runs bigger ones.

mod action;
mod check;
mod settings;
mod world;

pub use action::Action;
pub use check::{explore, replay, replay_and_recover, replay_to, root_records, Outcome};
pub use settings::{
    every_fault, every_region_heard, heir_lost_witness, out_of_order_witness, restore_race_witness,
    resume_in_doubt_witness, settled_then_lost_witness, stale_basis_witness, stale_close_witness,
    survivor_takeback_witness, Report, Settings, Witness,
};
pub use world::deployment;
