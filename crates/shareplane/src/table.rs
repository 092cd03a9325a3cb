//! The simulated global table (`shareplane_table::store`) on the daemon's clock, for the demo,
//! `shareplane local` and the daemon's tests: each Region reads its own replica, where another
//! Region's write becomes visible `delay_ms` after it was made (SPEC §9: ~1 s), and a cut Region
//! neither sees nor is seen; the newest record a cut held back arrives `delay_ms` after the heal.
//! It is the simulator's table, so both meet the same replication, cuts and collection of ended
//! epochs' records.

use crate::clock::Clock;
pub use shareplane_table::store::{SimTable, TableView};

/// A table of `regions` Regions read on `clock`.
pub fn on_clock(clock: Clock, regions: usize, delay_ms: u64) -> SimTable {
    SimTable::new(regions, delay_ms, move || clock.now_ms())
}
