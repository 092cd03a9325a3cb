//! What this Region knows of each peer: its newest record, its silence and the last records of
//! its ended epochs.

use crate::config::Deployment;
use crate::record::RegionRecord;
use crate::region::RegionId;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::PeerState;

/// A peer as this Region sees it (for `explain` and metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerView {
    pub region: RegionId,
    pub epoch: u64,
    pub version: u64,
    /// Own rebalances in a row at which the peer's record had not changed.
    pub unchanged: u32,
    pub state: PeerState,
    /// Informational write time of the latest record seen.
    pub written_at_ms: u64,
}

/// How many reads in a row found a peer's latest record unchanged (SPEC §6: silent after
/// `silent_after`). The leader counts at its rebalances, a follower at its phase ticks; both with
/// this, so that both report a peer silent by the same rule.
#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq)]
pub struct Silence {
    /// `(epoch, version)` of the record seen at the previous read.
    prev: Option<(u64, u64)>,
    unchanged: u32,
}

impl Silence {
    /// One read that found `now` (`None`: no record) as the peer's latest record.
    pub fn read(&mut self, now: Option<(u64, u64)>) {
        self.unchanged = match (now, self.prev) {
            (Some(c), Some(p)) if c == p => self.unchanged.saturating_add(1),
            _ => 0,
        };
        self.prev = now;
    }

    pub fn unchanged(&self) -> u32 {
        self.unchanged
    }
}

/// How a Region sees one peer: `latest`, the peer's latest record (`seen` false: never heard
/// of), against `own`, the Region's own latest record, after `unchanged` reads without a change.
/// The coordinator reports its peers by this rule ([`crate::Coordinator::peers`]), and a replica that
/// does not lead reports them by it from the leader's record.
pub fn peer_view(
    d: &Deployment,
    own: Option<&RegionRecord>,
    latest: &RegionRecord,
    seen: bool,
    unchanged: u32,
) -> PeerView {
    let r = latest.region;
    let marked =
        own.is_some_and(|o| o.mark_on_accounted(r).is_some() && latest.epoch <= o.peer_epochs[r]);
    let state = if marked {
        PeerState::Reclaimed
    } else if !seen || unchanged >= d.silent_after {
        // As in `plan`: a peer never heard of is kept in targets but never a grantee.
        PeerState::Silent
    } else {
        PeerState::Live
    };
    PeerView {
        region: r,
        epoch: latest.epoch,
        version: latest.version,
        unchanged,
        state,
        written_at_ms: latest.written_at_ms,
    }
}

#[derive(Clone, Hash)]
pub(super) struct Peer {
    /// False until a record of the peer was observed; `latest` is then its genesis record, which
    /// is never reclaimed (the peer may have written records this Region has not seen).
    pub(super) seen: bool,
    pub(super) latest: Arc<RegionRecord>,
    /// Own rebalances in a row at which `latest` had not changed.
    pub(super) silence: Silence,
    /// The newest record seen of every epoch older than `latest`'s that this Region may still
    /// have to close or settle (the store keeps every ended epoch's last record until its heirs
    /// have marked it).
    pub(super) ended: BTreeMap<u64, Arc<RegionRecord>>,
    /// The ended epoch an operator asked this Region to stop waiting for, until a rebalance
    /// acts on it.
    pub(super) abandon: Option<u64>,
}

impl Peer {
    /// The newest record seen of the peer's epoch `epoch`.
    pub(super) fn newest_of(&self, epoch: u64) -> Option<&Arc<RegionRecord>> {
        if self.latest.epoch == epoch {
            Some(&self.latest)
        } else {
            self.ended.get(&epoch)
        }
    }

    /// The last record of the peer's ended epoch `epoch`, if held: the newest record of it, once
    /// a later epoch's record names it as that epoch's last.
    pub(super) fn last_of(&self, epoch: u64) -> Option<&Arc<RegionRecord>> {
        let v = self.final_version(epoch)?;
        self.newest_of(epoch).filter(|r| r.version == v)
    }

    /// The version of the last record of epoch `epoch`, once a later epoch's record tells it.
    pub(super) fn final_version(&self, epoch: u64) -> Option<u64> {
        if self.latest.epoch == epoch + 1 {
            return Some(self.latest.prev_final);
        }
        self.ended.get(&(epoch + 1)).map(|r| r.prev_final)
    }
}

/// Keeps `record` as the newest known record of its (ended) epoch. Returns whether it was newer.
pub(super) fn remember(
    ended: &mut BTreeMap<u64, Arc<RegionRecord>>,
    record: Arc<RegionRecord>,
) -> bool {
    match ended.get(&record.epoch) {
        Some(known) if known.version >= record.version => false,
        _ => {
            ended.insert(record.epoch, record);
            true
        }
    }
}
