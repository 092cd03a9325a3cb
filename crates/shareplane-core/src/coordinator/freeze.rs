//! The agreed basis (docs/PROTOCOL.md, "Reclaim against an agreed basis"): every Region freezes
//! a peer it counts silent at the newest record of it that it holds, takes and raises nothing
//! from a newer one while the freeze stands, and says so in its record (`frozen`); an heir closes
//! the peer's epoch only against a record every live Region froze at.

use crate::config::SilentPolicy;
use crate::record::RegionRecord;
use crate::region::{PerRegion, RegionId};

use super::{Coordinator, Health};

impl Coordinator {
    /// Whether `other`, a peer's newest record, says that its writer froze `j`'s epoch at a record
    /// no newer than `basis`, and no older than any record of `j` that this Region may have
    /// published it holds, having seen this Region's current epoch. Such a freeze still stands:
    /// its writer lifts it only once every other Region it counts alive, this one included, has
    /// published a newer record of `j` (or, once the epoch is marked closed, one it holds), and
    /// it took nothing of the epoch past it.
    pub(super) fn froze(
        &self,
        other: &RegionRecord,
        j: RegionId,
        basis: &RegionRecord,
        rec: &RegionRecord,
    ) -> bool {
        other.frozen[j]
            .is_some_and(|f| f.0 == basis.epoch && self.published[j] <= f && f.1 <= basis.version)
            && other.seen[self.me].0 >= rec.epoch
    }

    /// What this rebalance's record says of each peer's freeze (two-signals only;
    /// docs/PROTOCOL.md, "Reclaim against an agreed basis"). A peer counted silent is frozen at
    /// the newest record of it this Region holds, and nothing is taken or raised from a newer
    /// record of that epoch while the freeze stands. Once the peer has moved to a later epoch,
    /// its last record is final, the same for every heir, but an heir that closed against an
    /// older one still holds what the last record moved on: the freeze ends only when no Region
    /// may hold the estate by a record older than the last ([`Coordinator::ended_settled`]).
    /// Otherwise, once a newer record is held here:
    ///
    /// - while nobody is known to have closed the epoch, the freeze lifts when every other Region
    ///   that may act on the estate has published (`seen`) a newer record than the freeze's: none
    ///   of them accepts the freeze any more (an heir closes only while every live Region's
    ///   freeze is no older than any record of the estate it may have published);
    /// - once a record held here marks the epoch closed, the freeze moves to the newest record
    ///   only when every such Region has published that it holds that record: each has then
    ///   settled its part down to it, before this Region raises anything by it.
    pub(super) fn freeze_peers(&self, rec: &mut RegionRecord, health: &PerRegion<Health>) {
        if self.d.policy != SilentPolicy::TwoSignals {
            rec.frozen = PerRegion::default();
            return;
        }
        for j in crate::region::regions(self.d.n()).filter(|&r| r != self.me) {
            let p = &self.peers[j.index()];
            let held = (p.latest.epoch, p.latest.version);
            rec.frozen[j] = match rec.frozen[j] {
                Some(_) if !p.seen => None,
                Some(f) if held.0 != f.0 => (!self.ended_settled(j, f, health)).then_some(f),
                Some(f) if held == f => Some(f),
                Some(f) if self.marked(rec, j, f.0) => {
                    Some(if self.all_published(j, health, |s| s >= held) {
                        held
                    } else {
                        f
                    })
                }
                Some(f) => (!self.all_published(j, health, |s| s > f)).then_some(f),
                None => None,
            };
            if p.seen && rec.frozen[j].is_none() && p.silence.unchanged() >= self.d.silent_after {
                rec.frozen[j] = Some(held);
            }
        }
    }

    /// Whether the freeze `f` of `j`'s ended epoch may end: nothing of the epoch lies past it (its
    /// last record, named by the next epoch, is the freeze's), or every other Region that may act
    /// on the estate has published that it holds a later epoch of `j` (so it closes the ended one
    /// only against its last record, `ended_epoch_closure`) and marks no close of it against an
    /// older record (it settled down to the last one). Until then this Region neither takes the
    /// epoch's grants from its last record nor switches past it: those grants are room such an
    /// heir counts in the estate (fuzz seed 74014990).
    fn ended_settled(&self, j: RegionId, f: (u64, u64), health: &PerRegion<Health>) -> bool {
        let Some(last) = self.peers[j.index()].final_version(f.0) else {
            return false;
        };
        f.1 >= last
            || self.all_acting(j, health, |q| {
                q.seen[j].0 > f.0
                    && !q.reclaims[j].is_some_and(|m| m.epoch == f.0 && m.version < last)
            })
    }

    /// Whether a record this Region holds (its own included) marks `j`'s epoch `epoch` closed.
    fn marked(&self, rec: &RegionRecord, j: RegionId, epoch: u64) -> bool {
        let marks = |r: &RegionRecord| r.reclaims[j].is_some_and(|m| m.epoch == epoch);
        marks(rec)
            || self.peers.iter().enumerate().any(|(k, q)| {
                k != j.index() && q.seen && (marks(&q.latest) || q.ended.values().any(|r| marks(r)))
            })
    }

    /// Whether every Region other than this one and `j` that may still act on `j`'s estate has
    /// published (`seen`) a record of `j` that `ok` accepts: a Region never heard of holds
    /// nothing (and a freeze it reads later names none of its epochs), and one that is silent
    /// here and reads unhealthy is lost: it comes back in a new epoch, which no freeze older than
    /// it convinces, and what its lost epoch inherited, by however old a record, is in that
    /// epoch's estate, which its heirs value against the newest records they hold
    /// (`LimitCtx::folded`; docs/PROTOCOL.md, "Inheritances belong to the epoch that closed
    /// them"), so nothing it holds is older than what the heirs know. Waiting for it would only
    /// strand room (a rule of 2026-12-07's third round did, until inheritances were settled in
    /// the ended epoch's estate).
    fn all_published(
        &self,
        j: RegionId,
        health: &PerRegion<Health>,
        ok: impl Fn((u64, u64)) -> bool,
    ) -> bool {
        self.all_acting(j, health, |q| ok(q.seen[j]))
    }

    /// Whether `ok` accepts the newest record held of every Region other than this one and `j`
    /// that may still act on `j`'s estate (see [`Coordinator::all_published`]).
    fn all_acting(
        &self,
        j: RegionId,
        health: &PerRegion<Health>,
        ok: impl Fn(&RegionRecord) -> bool,
    ) -> bool {
        crate::region::regions(self.d.n())
            .filter(|&k| k != self.me && k != j)
            .all(|k| {
                let q = &self.peers[k.index()];
                let lost =
                    health[k] == Health::Unhealthy && q.silence.unchanged() >= self.d.silent_after;
                !q.seen || lost || ok(&q.latest)
            })
    }
}

/// Whether `src`, a peer's record, is newer than the record of its epoch this Region froze it at
/// (docs/PROTOCOL.md, "Reclaim against an agreed basis"): nothing is taken from it, and no part
/// raised by it, until the freeze lifts.
pub(super) fn past_freeze(rec: &RegionRecord, src: &RegionRecord) -> bool {
    rec.frozen[src.region]
        .is_some_and(|(epoch, version)| src.epoch == epoch && src.version > version)
}
