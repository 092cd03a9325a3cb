//! How code outside the core reaches a record: it reads every field through a method named like
//! it, builds a record from storage through one door ([`RegionRecord::from_parts`]), and changes
//! nothing of a record the core made but the daemon's annotation
//! ([`RegionRecord::stamp_limits_digest`]).
//!
//! The fields themselves are private to the core, so no code outside it (the daemon, the
//! simulator, the stores, the table, the codec, the gateway) can change a record's room, accounts,
//! marks or epochs: the compiler refuses it.

use super::{LimitRecord, Limits, ReclaimMark, RegionRecord};
use crate::region::{PerRegion, RegionId};
use crate::room::Room;

/// A [`RegionRecord`] as plain data: the codec's door, and the only way to build a record outside
/// the core other than [`RegionRecord::genesis`], [`RegionRecord::settled`] and the coordinator's
/// decisions.
///
/// The versioned codec (`shareplane-aws`), the stores and the simulated table decode what they
/// read into parts and make them a record with [`RegionRecord::from_parts`]; tests build hostile
/// records the same way. Nothing is checked on the way in, so a record made from parts is only
/// what the storage said: the record's own checks ([`RegionRecord::validate`],
/// [`RegionRecord::validate_towards`], [`RegionRecord::validate_successor`], run by
/// [`crate::Coordinator::observe`]) still decide whether a read record is adopted.
///
/// Each field means what the record's accessor of the same name says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionRecordParts {
    pub region: RegionId,
    pub epoch: u64,
    pub version: u64,
    pub written_at_ms: u64,
    pub prev_final: u64,
    pub peer_epochs: PerRegion<u64>,
    pub account_epochs: PerRegion<u64>,
    pub reclaims: PerRegion<Option<ReclaimMarkParts>>,
    pub seen: PerRegion<(u64, u64)>,
    pub frozen: PerRegion<Option<(u64, u64)>>,
    /// One entry per limit, by limit index.
    pub limits: Vec<LimitRecordParts>,
    pub limits_digest: Option<u64>,
    pub fenced: bool,
}

/// A [`LimitRecord`] as plain data, inside [`RegionRecordParts`]. The default is a limit not yet
/// adopted (every amount zero). Each field means what the entry's accessor of the same name says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimitRecordParts {
    pub limit_version: u64,
    pub rate: Room,
    pub demand: Room,
    pub share: Room,
    pub pool: Room,
    pub target: Room,
    pub unmet: Room,
    pub debt: Room,
    pub granted: PerRegion<Room>,
    pub taken: PerRegion<Room>,
    pub reclaimed: PerRegion<Room>,
    pub debt_taken: PerRegion<Room>,
    pub left: PerRegion<Room>,
}

/// A [`ReclaimMark`] as plain data, inside [`RegionRecordParts`]. Each field means what the
/// mark's accessor of the same name says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReclaimMarkParts {
    pub epoch: u64,
    pub version: u64,
    pub by: u64,
}

impl RegionRecord {
    /// The record these parts describe, unchecked (see [`RegionRecordParts`]: the record's own
    /// checks decide whether a record read from storage is adopted).
    pub fn from_parts(p: RegionRecordParts) -> RegionRecord {
        RegionRecord {
            region: p.region,
            epoch: p.epoch,
            version: p.version,
            written_at_ms: p.written_at_ms,
            prev_final: p.prev_final,
            peer_epochs: p.peer_epochs,
            account_epochs: p.account_epochs,
            reclaims: PerRegion(p.reclaims.0.map(|m| m.map(ReclaimMark::from_parts))),
            seen: p.seen,
            frozen: p.frozen,
            // The two entry types have the same size and alignment, so `collect` reuses the
            // vector's allocation.
            limits: p.limits.into_iter().map(LimitRecord::from_parts).collect(),
            limits_digest: p.limits_digest,
            fenced: p.fenced,
        }
    }

    /// This record as plain data ([`RegionRecord::from_parts`] gives it back).
    pub fn into_parts(self) -> RegionRecordParts {
        let limits = std::sync::Arc::unwrap_or_clone(self.limits.0);
        RegionRecordParts {
            region: self.region,
            epoch: self.epoch,
            version: self.version,
            written_at_ms: self.written_at_ms,
            prev_final: self.prev_final,
            peer_epochs: self.peer_epochs,
            account_epochs: self.account_epochs,
            reclaims: PerRegion(self.reclaims.0.map(|m| m.map(|m| m.parts()))),
            seen: self.seen,
            frozen: self.frozen,
            limits: limits.into_iter().map(|l| l.parts()).collect(),
            limits_digest: self.limits_digest,
            fenced: self.fenced,
        }
    }

    /// A copy of this record as plain data.
    pub fn to_parts(&self) -> RegionRecordParts {
        self.clone().into_parts()
    }

    /// Stamps the digest of the limits the writer runs ([`crate::limits_digest`]) on a record it
    /// is about to write. The daemon's annotation, for the peers' mismatch check: no protocol
    /// decision reads it.
    pub fn stamp_limits_digest(&mut self, digest: u64) {
        self.limits_digest = Some(digest);
    }

    /// The Region that wrote this record (and the only one that may).
    #[inline]
    pub fn region(&self) -> RegionId {
        self.region
    }

    /// Incarnation: a Region that may have been reclaimed comes back in a higher epoch.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Goes up on every write, across epochs too, even when nothing else changed.
    #[inline]
    pub fn version(&self) -> u64 {
        self.version
    }

    /// When the writer wrote it, on its own clock. Informational only: no decision compares
    /// clocks of two Regions.
    #[inline]
    pub fn written_at_ms(&self) -> u64 {
        self.written_at_ms
    }

    /// The version of the last record of this Region's previous epoch (0 in epoch 1).
    #[inline]
    pub fn prev_final(&self) -> u64 {
        self.prev_final
    }

    /// The epoch of each peer that this record's grants to it and takes from it refer to.
    #[inline]
    pub fn peer_epochs(&self) -> PerRegion<u64> {
        self.peer_epochs
    }

    /// This Region's own epoch that its account with each peer belongs to: the record's epoch,
    /// or an earlier one whose account is carried, frozen (docs/PROTOCOL.md, "Grants in flight").
    #[inline]
    pub fn account_epochs(&self) -> PerRegion<u64> {
        self.account_epochs
    }

    /// The latest reclaim of each peer's estate made by this Region.
    #[inline]
    pub fn reclaims(&self) -> PerRegion<Option<ReclaimMark>> {
        self.reclaims
    }

    /// `(epoch, version)` of the newest record of each peer the writer held when it wrote this
    /// one (`(0, 0)`: none, or a writer that did not say).
    #[inline]
    pub fn seen(&self) -> PerRegion<(u64, u64)> {
        self.seen
    }

    /// `(epoch, version)` of the record of each peer at which the writer froze it (`None`: not
    /// frozen, or a writer that did not say).
    #[inline]
    pub fn frozen(&self) -> PerRegion<Option<(u64, u64)>> {
        self.frozen
    }

    /// One entry per limit, by limit index.
    #[inline]
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The digest of the limits the writer runs, `None` when unknown. Informational: no protocol
    /// decision reads it.
    #[inline]
    pub fn limits_digest(&self) -> Option<u64> {
        self.limits_digest
    }

    /// The writer was fenced: its own health read unhealthy and every capacity share was lowered
    /// to zero.
    #[inline]
    pub fn fenced(&self) -> bool {
        self.fenced
    }
}

impl LimitRecord {
    fn from_parts(p: LimitRecordParts) -> LimitRecord {
        LimitRecord {
            limit_version: p.limit_version,
            rate: p.rate,
            demand: p.demand,
            share: p.share,
            pool: p.pool,
            target: p.target,
            unmet: p.unmet,
            debt: p.debt,
            granted: p.granted,
            taken: p.taken,
            reclaimed: p.reclaimed,
            debt_taken: p.debt_taken,
            left: p.left,
        }
    }

    fn parts(&self) -> LimitRecordParts {
        LimitRecordParts {
            limit_version: self.limit_version,
            rate: self.rate,
            demand: self.demand,
            share: self.share,
            pool: self.pool,
            target: self.target,
            unmet: self.unmet,
            debt: self.debt,
            granted: self.granted,
            taken: self.taken,
            reclaimed: self.reclaimed,
            debt_taken: self.debt_taken,
            left: self.left,
        }
    }

    /// 0 until the Region has adopted the limit.
    #[inline]
    pub fn limit_version(&self) -> u64 {
        self.limit_version
    }

    /// The limit's rate at `limit_version`.
    #[inline]
    pub fn rate(&self) -> Room {
        self.rate
    }

    /// The demand the Region published for the limit.
    #[inline]
    pub fn demand(&self) -> Room {
        self.demand
    }

    /// The Region's share of the limit.
    #[inline]
    pub fn share(&self) -> Room {
        self.share
    }

    /// Room the Region holds beyond its share (taken, reclaimed or lowered) until it raises its
    /// share with it or grants it.
    #[inline]
    pub fn pool(&self) -> Room {
        self.pool
    }

    /// The share the targets give the Region for the published demands.
    #[inline]
    pub fn target(&self) -> Room {
        self.target
    }

    /// `max(0, target − share)` after the rebalance's raise.
    #[inline]
    pub fn unmet(&self) -> Room {
        self.unmet
    }

    /// Room this Region still owes after a downgrade took more than it held.
    #[inline]
    pub fn debt(&self) -> Room {
        self.debt
    }

    /// Cumulative room granted to each peer (to the peer's epoch in `peer_epochs`).
    #[inline]
    pub fn granted(&self) -> PerRegion<Room> {
        self.granted
    }

    /// Cumulative room taken from each peer's grants to this Region.
    #[inline]
    pub fn taken(&self) -> PerRegion<Room> {
        self.taken
    }

    /// What the latest reclaim of each peer brought in.
    #[inline]
    pub fn reclaimed(&self) -> PerRegion<Room> {
        self.reclaimed
    }

    /// The part of each peer's estate debt that the latest close of it left this Region to pay.
    #[inline]
    pub fn debt_taken(&self) -> PerRegion<Room> {
        self.debt_taken
    }

    /// For each peer whose ended epoch this Region switched past: all it took of that epoch's
    /// grants, kept past the counters the switch cleared.
    #[inline]
    pub fn left(&self) -> PerRegion<Room> {
        self.left
    }
}

impl ReclaimMark {
    fn from_parts(p: ReclaimMarkParts) -> ReclaimMark {
        ReclaimMark {
            epoch: p.epoch,
            version: p.version,
            by: p.by,
        }
    }

    fn parts(self) -> ReclaimMarkParts {
        ReclaimMarkParts {
            epoch: self.epoch,
            version: self.version,
            by: self.by,
        }
    }

    /// The peer's epoch whose estate was closed.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The version of the peer's record it was closed (or last settled) against.
    #[inline]
    pub fn version(&self) -> u64 {
        self.version
    }

    /// This Region's epoch that closed it.
    #[inline]
    pub fn by(&self) -> u64 {
        self.by
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Deployment;

    /// The record module's test deployment (3 Regions, one limit).
    fn d() -> Deployment {
        crate::record::tests::d()
    }

    #[test]
    fn parts_give_back_the_very_record() {
        let b = RegionId::new(1).expect("B");
        let mut r = RegionRecord::settled(&d(), RegionId::new(0).expect("A"), &[Room::rps(5)]);
        r.epoch = 3;
        r.prev_final = 2;
        r.written_at_ms = 77;
        r.seen[b] = (2, 9);
        r.reclaims[b] = Some(ReclaimMark {
            epoch: 1,
            version: 4,
            by: 2,
        });
        r.limits[0].granted[b] = Room::from_milli(3);
        r.limits[0].left[b] = Room::from_milli(1);
        r.stamp_limits_digest(42);
        let shared = r.clone();
        let unique = RegionRecord::from_parts(r.to_parts());
        assert!(!unique.limits.shares_with(&r.limits), "its own entries");
        assert_eq!(unique, r);
        assert_eq!(RegionRecord::from_parts(shared.into_parts()), r);
        assert_eq!(RegionRecord::from_parts(unique.into_parts()), r);
        let p = r.to_parts();
        assert_eq!((p.epoch, p.limits_digest), (3, Some(42)));
        assert_eq!(p.reclaims[b].map(|m| m.by), Some(2));
        assert_eq!(p.limits[0].granted[b], Room::from_milli(3));
    }
}
