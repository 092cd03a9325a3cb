//! What the table's unit tests (`src/lib.rs`, which includes this file with `#[path]`) and its
//! integration tests share.

use shareplane_core::{PerRegion, RegionId, RegionRecord, RegionRecordParts, MAX_REGIONS};

/// Region `w`'s record of `epoch` and `version`: no limits, no peers' epochs, no reclaim marks.
pub fn record(w: usize, epoch: u64, version: u64) -> RegionRecord {
    RegionRecord::from_parts(parts(w, epoch, version))
}

/// The parts of [`record`], for a test to change before it builds the record.
pub fn parts(w: usize, epoch: u64, version: u64) -> RegionRecordParts {
    RegionRecordParts {
        region: RegionId::new(w).expect("a Region"),
        epoch,
        version,
        written_at_ms: 0,
        prev_final: 0,
        peer_epochs: PerRegion::default(),
        account_epochs: PerRegion::default(),
        reclaims: PerRegion([None; MAX_REGIONS]),
        seen: PerRegion::default(),
        frozen: PerRegion::default(),
        limits: Vec::new(),
        limits_digest: None,
        fenced: false,
    }
}
