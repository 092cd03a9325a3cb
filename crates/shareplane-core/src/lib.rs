//! shareplane's protocol core: how Regions share one rate limit through named grants.
//!
//! This crate is pure and sans-IO. It reads no clock, opens no socket, draws no random number and
//! knows nothing of AWS or tokio. Time, the records that became visible, the measured demand and
//! the health verdicts come in as arguments; the record to write and the rules to push come out
//! as data. The daemon (`shareplane run`) and the simulator (`shareplane sim`) are thin drivers
//! that carry those decisions out, so both run this very code.
//!
//! The entry point is [`Coordinator`]; its documentation gives the calling protocol.

mod config;
mod coordinator;
mod demand;
mod digest;
mod estate;
pub mod lease;
mod record;
mod region;
mod room;
mod targets;
mod why;

pub use config::{ConfigError, Deployment, Design, Fence, LimitKind, LimitSpec, SilentPolicy};
pub use coordinator::{
    peer_view, seen_sum, AbandonRefused, Alarms, Coordinator, Decision, Health, Inputs,
    LimitOutcome, PeerState, PeerView, Rule, Silence,
};
pub use demand::{
    band as demand_band, published_demand, DEMAND_BAND_MIN_PERMILLE_OF_RATE, DEMAND_BAND_PERMILLE,
};
pub use digest::{fnv1a_64, limits_digest};
pub use estate::{
    audit, closed_for_good, estate_room, estate_worth, grant_unit, heir_portion, settled_at, Audit,
    Truth, KEEP_ENDED_EPOCHS,
};
pub use lease::{lease_bound, LeaseBound};
pub use record::{
    LimitRecord, LimitRecordParts, Limits, ReclaimMark, ReclaimMarkParts, RecordError,
    RegionRecord, RegionRecordParts, MAX_COUNTER, MAX_EPOCH,
};
pub use region::{regions, PerRegion, RegionId, MAX_REGIONS};
pub use room::{even_part, split, Delta, Room, RoomError, MAX_RATE_RPS, MILLI_PER_RPS};
pub use targets::targets;
pub use why::{why, PeerSeen, Why};
