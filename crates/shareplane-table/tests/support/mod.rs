//! What the table's unit tests (`src/lib.rs`, which includes this file with `#[path]`) and its
//! integration tests share.

use shareplane_core::{PerRegion, RegionId, RegionRecord, MAX_REGIONS};

/// Region `w`'s record of `epoch` and `version`: no limits, no peers' epochs, no reclaim marks.
pub fn record(w: usize, epoch: u64, version: u64) -> RegionRecord {
    RegionRecord {
        region: RegionId::new(w).expect("a Region"),
        epoch,
        version,
        written_at_ms: 0,
        prev_final: 0,
        peer_epochs: PerRegion::default(),
        account_epochs: PerRegion::default(),
        reclaims: PerRegion([None; MAX_REGIONS]),
        seen: PerRegion::default(),
        limits: Vec::new().into(),
        limits_digest: None,
        fenced: false,
    }
}
