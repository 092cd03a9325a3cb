//! The record each Region writes at every rebalance (SPEC §3), and its validation.
//!
//! A Region writes only its own record. One [`RegionRecord`] holds that Region's entries for every
//! limit (`limits[i]` belongs to `Deployment::limits[i]`), so the `version` that rises on every
//! write makes silence detectable for all limits at once.
//!
//! The fields are the core's own: outside it a record is read through methods named like its
//! fields and built from storage through [`RegionRecordParts`] (`access.rs`).

mod access;

pub use access::{LimitRecordParts, ReclaimMarkParts, RegionRecordParts};

use crate::config::{Deployment, LimitSpec};
use crate::region::{PerRegion, RegionId, MAX_REGIONS};
use crate::room::{Delta, Room};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

/// Which record of a peer's epoch this Region closed (reclaimed or settled) that epoch's estate
/// against. An estate is closed once per `(peer, epoch)` by each other Region, whatever epoch that
/// Region is in: the mark is kept across the Region's own epochs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReclaimMark {
    /// The peer's epoch whose estate was closed.
    pub(crate) epoch: u64,
    /// The version of the peer's record it was closed (or last settled) against.
    pub(crate) version: u64,
    /// This Region's epoch that closed it: the grant counters kept for the peer refer to it.
    pub(crate) by: u64,
}

/// The largest epoch a record may carry: a Region starts at most one epoch per restart.
pub const MAX_EPOCH: u64 = 1 << 32;
/// The largest version a record may carry, and the largest cumulative counter (in milli-req/s).
pub const MAX_COUNTER: u64 = 1 << 62;

/// One Region's state for all limits, as written to the global table. Only the core changes it;
/// outside the core its fields are read through methods of the same name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RegionRecord {
    pub(crate) region: RegionId,
    /// Incarnation: a Region that may have been reclaimed comes back in a higher epoch.
    pub(crate) epoch: u64,
    /// Goes up on every write, across epochs too, even when nothing else changed.
    pub(crate) version: u64,
    /// Informational only: no decision compares clocks of two Regions.
    pub(crate) written_at_ms: u64,
    /// The version of the last record of this Region's previous epoch (0 in epoch 1): survivors
    /// close an ended epoch against exactly that record, never an older one.
    pub(crate) prev_final: u64,
    /// The epoch of each peer that this record's grants to it and takes from it refer to.
    pub(crate) peer_epochs: PerRegion<u64>,
    /// This Region's own epoch that its account with each peer (the `granted` and `taken`
    /// counters for it) belongs to: `epoch` itself, or an earlier epoch whose account with the
    /// peer's epoch in `peer_epochs` was carried into this one when it began. A carried account
    /// is frozen (no grant, no take): it says what the earlier epoch, now an estate, had in
    /// flight with the peer, until the peer moves its account to a later epoch of this Region or
    /// this Region switches to the peer's next epoch (docs/PROTOCOL.md, "Grants in flight").
    pub(crate) account_epochs: PerRegion<u64>,
    /// The latest reclaim of each peer's estate made by this Region.
    pub(crate) reclaims: PerRegion<Option<ReclaimMark>>,
    /// `(epoch, version)` of the newest record of each peer that the writer held when it wrote
    /// this record (`(0, 0)`: none, or a writer that did not say). An heir reads it as evidence
    /// that a newer record of an estate exists than its own basis, whether or not the writer
    /// acted on it (docs/PROTOCOL.md, "Reclaim against a causally closed basis").
    pub(crate) seen: PerRegion<(u64, u64)>,
    /// `(epoch, version)` of the record of each peer at which this Region froze that peer when
    /// it counted it silent (two-signals only; `None`: not frozen, or a writer that did not
    /// say). While frozen, the writer takes none of that epoch's grants from a newer record and
    /// raises its part of that epoch's estate by nothing from one, until every other live Region
    /// has published (`seen`) that it holds the newer record. An heir closes the epoch only
    /// against the record every live Region froze at (docs/PROTOCOL.md, "Reclaim against an
    /// agreed basis").
    pub(crate) frozen: PerRegion<Option<(u64, u64)>>,
    /// One entry per limit, by limit index ([`Limits`]: copies of a record share it until one
    /// of them changes it).
    pub(crate) limits: Limits,
    /// [`crate::limits_digest`] of the limits the writer runs, so that Regions can see that
    /// they run different limits; `None` when unknown (a record of an older writer, or one the
    /// driver did not stamp). Informational: no protocol decision reads it.
    pub(crate) limits_digest: Option<u64>,
    /// The writer's own health verdict read unhealthy and fencing lowered every capacity share
    /// to zero. The Region comes back in a new epoch when the fence lifts, even after a restart
    /// (docs/PROTOCOL.md, residual risk 1).
    pub(crate) fenced: bool,
}

/// A record's entries for every limit, by limit index: a `Vec<LimitRecord>` (it derefs to one)
/// whose copies share one allocation until one of them is changed (copy on write).
///
/// Representation only, for memory: a daemon keeps the record it wrote, its coordinator's own
/// record and the record its state view shows, which are equal between rebalances, and at
/// 100,000 limits each copy of the entries took 32 MB. Mutable access (`DerefMut`) copies the
/// entries first if they are shared, so a copy never sees another's change.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Limits(Arc<Vec<LimitRecord>>);

impl Limits {
    /// `Vec::resize`, as an inherent method so that `limits.resize(n.max(limits.len()), …)`
    /// borrows as it did on a `Vec`.
    pub fn resize(&mut self, len: usize, value: LimitRecord) {
        Arc::make_mut(&mut self.0).resize(len, value);
    }

    /// Whether `self` and `other` share one allocation (a copy not changed since).
    pub fn shares_with(&self, other: &Limits) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Deref for Limits {
    type Target = Vec<LimitRecord>;
    fn deref(&self) -> &Vec<LimitRecord> {
        &self.0
    }
}

impl DerefMut for Limits {
    fn deref_mut(&mut self) -> &mut Vec<LimitRecord> {
        Arc::make_mut(&mut self.0)
    }
}

impl From<Vec<LimitRecord>> for Limits {
    fn from(v: Vec<LimitRecord>) -> Limits {
        Limits(Arc::new(v))
    }
}

impl FromIterator<LimitRecord> for Limits {
    fn from_iter<I: IntoIterator<Item = LimitRecord>>(iter: I) -> Limits {
        Limits(Arc::new(iter.into_iter().collect()))
    }
}

impl<'a> IntoIterator for &'a Limits {
    type Item = &'a LimitRecord;
    type IntoIter = std::slice::Iter<'a, LimitRecord>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<'a> IntoIterator for &'a mut Limits {
    type Item = &'a mut LimitRecord;
    type IntoIter = std::slice::IterMut<'a, LimitRecord>;
    fn into_iter(self) -> Self::IntoIter {
        Arc::make_mut(&mut self.0).iter_mut()
    }
}

impl fmt::Debug for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// One Region's state for one limit. All amounts are rates in milli-requests per second;
/// `granted`, `taken` are cumulative within the pair of epochs named in the header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LimitRecord {
    /// 0 until the Region has adopted the limit.
    pub(crate) limit_version: u64,
    /// The limit's rate at `limit_version`.
    pub(crate) rate: Room,
    pub(crate) demand: Room,
    pub(crate) share: Room,
    pub(crate) pool: Room,
    pub(crate) target: Room,
    /// `max(0, target − share)` after this rebalance's raise.
    pub(crate) unmet: Room,
    /// Room this Region still owes after a downgrade took more than it held.
    pub(crate) debt: Room,
    /// Cumulative room granted to each peer (to the peer's epoch in `peer_epochs`).
    pub(crate) granted: PerRegion<Room>,
    /// Cumulative room taken from each peer's grants to this Region.
    pub(crate) taken: PerRegion<Room>,
    /// What the latest reclaim of each peer (see `RegionRecord::reclaims`) brought in.
    pub(crate) reclaimed: PerRegion<Room>,
    /// The part of each peer's estate debt that the latest close of it left this Region to pay:
    /// an estate whose record owed more than it held (a lowered limit's debt) passes the debt to
    /// its heirs in the same fixed portions as room.
    pub(crate) debt_taken: PerRegion<Room>,
    /// For each peer whose ended epoch this Region switched past (its mark, `RegionRecord::reclaims`,
    /// names it): all that this Region took of that epoch's grants, kept past the counters the
    /// switch cleared. Until every epoch it granted to has ended or taken its grants, the
    /// estate's grants in flight may still be added to what its heirs share, and this Region
    /// reads its own take here (docs/PROTOCOL.md, "Grants in flight").
    pub(crate) left: PerRegion<Room>,
}

impl LimitRecord {
    /// Room this Region holds for the limit: share + pool − debt (may be negative only in debt).
    pub fn held(&self) -> Delta {
        Delta::of(self.share) + self.pool - self.debt
    }
}

/// Why a peer's record was rejected. The Region is then treated as not fresh; nothing is adopted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordError {
    UnknownRegion(usize),
    OwnRegion,
    ZeroEpoch,
    /// A field breaks a rule that holds for every honest record.
    Contradiction {
        limit: Option<usize>,
        what: &'static str,
    },
    /// A cumulative counter went down within the same epochs: the record is not a successor of
    /// the one seen before.
    CounterWentDown {
        limit: usize,
    },
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::UnknownRegion(i) => {
                write!(f, "names Region index {i}, which is not configured")
            }
            RecordError::OwnRegion => write!(f, "claims to be this Region's own record"),
            RecordError::ZeroEpoch => write!(f, "has epoch 0"),
            RecordError::Contradiction {
                limit: Some(l),
                what,
            } => write!(f, "limit {l}: {what}"),
            RecordError::Contradiction { limit: None, what } => write!(f, "{what}"),
            RecordError::CounterWentDown { limit } => {
                write!(f, "limit {limit}: a cumulative grant counter went down")
            }
        }
    }
}

impl std::error::Error for RecordError {}

impl RecordError {
    /// A short stable name for metrics and "logged once per cause".
    pub fn cause(&self) -> &'static str {
        match self {
            RecordError::UnknownRegion(_) => "unknown_region",
            RecordError::OwnRegion => "own_region",
            RecordError::ZeroEpoch => "zero_epoch",
            RecordError::Contradiction { .. } => "contradiction",
            RecordError::CounterWentDown { .. } => "counter_went_down",
        }
    }
}

impl RegionRecord {
    /// The record of `region` in a deployment that starts settled (the simulator's scenarios):
    /// written once (version 1), every capacity limit's share at its target for `demands`, the
    /// demand of every Region by index, by [`crate::targets`]. The shares of all the Regions'
    /// settled records add up to each limit's rate exactly; nothing is pooled or granted.
    /// Security limits are split statically, as in [`RegionRecord::genesis`].
    pub fn settled(d: &Deployment, region: RegionId, demands: &[Room]) -> RegionRecord {
        let mut rec = RegionRecord::genesis(d, region);
        rec.version = 1;
        let n = d.n();
        let weights: Vec<u64> = (0..n)
            .map(|i| demands.get(i).map_or(0, |r| r.milli()))
            .collect();
        let mut parts = vec![Room::ZERO; n];
        for (spec, l) in d.limits.iter().zip(rec.limits.iter_mut()) {
            l.demand = demands.get(region.index()).copied().unwrap_or_default();
            if let crate::LimitKind::Capacity = spec.kind {
                crate::targets::targets(spec.rate, spec.floor, &weights, &mut parts);
                l.share = parts[region.index()];
                l.target = l.share;
            }
        }
        rec
    }

    /// The record every Region is assumed to have before it first writes: epoch 1, version 0,
    /// each capacity limit's static part as its share.
    pub fn genesis(d: &Deployment, region: RegionId) -> RegionRecord {
        let n = d.n();
        let mut peer_epochs = PerRegion::default();
        for e in peer_epochs.0.iter_mut().take(n) {
            *e = 1;
        }
        let account_epochs = peer_epochs;
        let limits = d
            .limits
            .iter()
            .map(|spec| {
                let share = match spec.kind {
                    crate::LimitKind::Capacity => {
                        crate::LimitSpec::static_part(spec.rate, n, region)
                    }
                    crate::LimitKind::Security { .. } => spec.security_share(n, region),
                };
                LimitRecord {
                    limit_version: spec.version,
                    rate: spec.rate,
                    share,
                    target: share,
                    ..LimitRecord::default()
                }
            })
            .collect();
        RegionRecord {
            region,
            epoch: 1,
            version: 0,
            written_at_ms: 0,
            prev_final: 0,
            peer_epochs,
            account_epochs,
            reclaims: PerRegion([None; MAX_REGIONS]),
            seen: PerRegion::default(),
            frozen: PerRegion::default(),
            limits,
            limits_digest: None,
            fenced: false,
        }
    }

    /// Whether this record's account with `peer` is between this record's own epoch and the
    /// peer's epoch `peer_epoch` (its grants to the peer and takes from it refer to that pair).
    pub fn accounts_with(&self, peer: RegionId, peer_epoch: u64) -> bool {
        self.peer_epochs[peer] == peer_epoch && self.account_epochs[peer] == self.epoch
    }

    /// Whether this record's own epoch closed an epoch of `peer` (its mark says so): an epoch
    /// of `peer` that inherited from this one's estate and was closed by it in turn is a mutual
    /// close, which only a false verdict makes, and each side's inheritance is then settled by
    /// its Region's next epoch rather than in its estate (docs/PROTOCOL.md, "Inheritances belong
    /// to the epoch that closed them").
    pub fn inherited_from(&self, peer: RegionId) -> bool {
        self.reclaims[peer].is_some_and(|m| m.by == self.epoch)
    }

    /// Whether this record's epoch settles its mark on the estate of `estate`'s epoch: its own
    /// epoch closed it, or the two epochs closed each other ([`Self::inherited_from`]). An
    /// earlier epoch's close is otherwise that epoch's estate's, which its heirs settle
    /// (docs/PROTOCOL.md, "Inheritances belong to the epoch that closed them"). The one rule
    /// for a settlement under the mark and for the settlement of an ended estate switched past.
    pub fn settles_mark_on(&self, estate: &RegionRecord) -> bool {
        self.reclaims[estate.region].is_none_or(|m| m.by == self.epoch)
            || estate.inherited_from(self.region)
    }

    /// This Region's mark on the epoch of `peer` it accounts with, if it closed that epoch
    /// (reclaimed it, or closed it on the peer's return).
    pub fn mark_on_accounted(&self, peer: RegionId) -> Option<ReclaimMark> {
        self.reclaims[peer].filter(|m| m.epoch == self.peer_epochs[peer])
    }

    /// Whether the account with `peer` is one that an earlier epoch of this Region opened and
    /// that is still carried, frozen (no grant, no take), into this epoch.
    pub fn carries_open(&self, peer: RegionId) -> bool {
        let acct = self.account_epochs[peer];
        acct < self.epoch && self.mark_on_accounted(peer).is_none_or(|m| m.by != acct)
    }

    /// Checks what can be checked of one record alone against this Region's configuration.
    /// `me` is the checking Region (a foreign record may not claim to be its own).
    pub fn validate(&self, d: &Deployment, me: RegionId) -> Result<(), RecordError> {
        let n = d.n();
        if self.region.index() >= n {
            return Err(RecordError::UnknownRegion(self.region.index()));
        }
        if self.region == me {
            return Err(RecordError::OwnRegion);
        }
        self.validate_fields(d)
    }

    /// The checks of [`Self::validate`] that do not depend on who reads the record.
    pub(crate) fn validate_fields(&self, d: &Deployment) -> Result<(), RecordError> {
        let n = d.n();
        if self.region.index() >= n {
            return Err(RecordError::UnknownRegion(self.region.index()));
        }
        if self.epoch == 0 {
            return Err(RecordError::ZeroEpoch);
        }
        let contradiction = |what| Err(RecordError::Contradiction { limit: None, what });
        if self.epoch > MAX_EPOCH || self.version > MAX_COUNTER {
            return contradiction("epoch or version out of range");
        }
        if (self.epoch == 1 && self.prev_final != 0)
            || (self.epoch > 1 && self.version > 0 && self.prev_final >= self.version)
        {
            return contradiction("the previous epoch's last version is not before this one");
        }
        self.peer_fields_problem(n).map_or(Ok(()), contradiction)?;
        for (i, l) in self.limits.iter().enumerate() {
            if let Some(what) = self.limit_problem(l, d.limits.get(i), n) {
                return Err(RecordError::Contradiction {
                    limit: Some(i),
                    what,
                });
            }
        }
        Ok(())
    }

    /// What is wrong with the per-Region header fields (epochs, accounts, marks, `seen`) of a
    /// record of a deployment of `n` Regions, if anything.
    fn peer_fields_problem(&self, n: usize) -> Option<&'static str> {
        for r in 0..n {
            if self.peer_epochs.0[r] > MAX_EPOCH {
                return Some("a peer epoch is out of range");
            }
            if r != self.region.index()
                && (self.account_epochs.0[r] == 0 || self.account_epochs.0[r] > self.epoch)
            {
                return Some("an account belongs to an epoch its writer never had");
            }
            let (seen_epoch, seen_version) = self.seen.0[r];
            if seen_epoch > MAX_EPOCH || seen_version > MAX_COUNTER {
                return Some("a seen record is out of range");
            }
            if r == self.region.index() && self.seen.0[r] != (0, 0) {
                return Some("says it has seen its own record");
            }
            if let Some(f) = self.frozen.0[r] {
                if r == self.region.index() {
                    return Some("says it froze its own record");
                }
                if f > self.seen.0[r] {
                    return Some("froze a record it does not say it has seen");
                }
            }
            if let Some(m) = self.reclaims.0[r] {
                if m.epoch == 0 || m.epoch > MAX_EPOCH || m.version > MAX_COUNTER {
                    return Some("a reclaim mark is out of range");
                }
                if m.by == 0 || m.by > self.epoch {
                    return Some("a reclaim mark names a later epoch of its writer");
                }
                if m.epoch > self.peer_epochs.0[r] {
                    return Some("a reclaim mark is ahead of the epoch it accounts with");
                }
            }
        }
        let unconfigured = (n..MAX_REGIONS).any(|i| {
            self.peer_epochs.0[i] != 0
                || self.account_epochs.0[i] != 0
                || self.reclaims.0[i].is_some()
                || self.seen.0[i] != (0, 0)
                || self.frozen.0[i].is_some()
        });
        unconfigured.then_some("names a Region that is not configured")
    }

    /// What is wrong with one limit's entry `l` of this record (configured as `spec`, if this
    /// Region knows the limit), if anything.
    fn limit_problem(
        &self,
        l: &LimitRecord,
        spec: Option<&LimitSpec>,
        n: usize,
    ) -> Option<&'static str> {
        if l.limit_version == 0 {
            return (*l != LimitRecord::default()).then_some("an unadopted limit carries amounts");
        }
        if spec.is_some_and(|spec| spec.version == l.limit_version && spec.rate != l.rate) {
            return Some("the rate differs from the configured one at the same version");
        }
        // Share, target and unmet never exceed the Region's own rate. Pool and debt may while
        // a limit change is under way (room granted by Regions at a higher rate), but never
        // beyond the largest rate a limit may have.
        if l.share > l.rate || l.target > l.rate || l.unmet > l.rate + l.debt {
            return Some("share, target or unmet exceeds the limit's rate");
        }
        let max = crate::room::Room::rps(crate::room::MAX_RATE_RPS as u64);
        if l.rate > max || l.pool > max || l.debt > max || l.demand > max {
            return Some("an amount is out of range");
        }
        let counters = l.granted.0.iter().chain(l.taken.0.iter());
        if counters.copied().any(|c| c.milli() > MAX_COUNTER) {
            return Some("a cumulative counter is out of range");
        }
        if l.reclaimed
            .0
            .iter()
            .chain(l.debt_taken.0.iter())
            .any(|c| *c > max)
        {
            return Some("a reclaimed amount is out of range");
        }
        if l.left.0.iter().any(|c| c.milli() > MAX_COUNTER) {
            return Some("a cumulative counter is out of range");
        }
        let names = |r: usize| {
            !l.granted.0[r].is_zero()
                || !l.taken.0[r].is_zero()
                || !l.reclaimed.0[r].is_zero()
                || !l.debt_taken.0[r].is_zero()
                || !l.left.0[r].is_zero()
        };
        if names(self.region.index()) {
            return Some("grants to or takes from itself");
        }
        (n..MAX_REGIONS)
            .any(names)
            .then_some("names a Region that is not configured")
    }

    /// Checks what this record says about the reading Region `me` against the reader's own record:
    /// nobody can account with, or have reclaimed, an epoch of `me` that `me` never reached, and
    /// nobody can have taken more of `me`'s grants than `me` made, or be granting it more room
    /// than the limit has.
    pub fn validate_towards(&self, own: &RegionRecord, me: RegionId) -> Result<(), RecordError> {
        let contradiction = |limit, what| Err(RecordError::Contradiction { limit, what });
        if self.peer_epochs[me] > own.epoch {
            return contradiction(
                None,
                "accounts with an epoch of this Region that never existed",
            );
        }
        if self.reclaims[me].is_some_and(|m| m.epoch > own.epoch) {
            return contradiction(
                None,
                "marks an epoch of this Region that never existed as reclaimed",
            );
        }
        let aligned = self.accounts_with(me, own.epoch)
            && own.accounts_with(self.region, self.epoch)
            && own.reclaims[self.region].is_none_or(|m| m.epoch < self.epoch);
        for (i, l) in self.limits.iter().enumerate() {
            let mine = own.limits.get(i).copied().unwrap_or_default();
            let bound = crate::room::Room::rps(crate::room::MAX_RATE_RPS as u64);
            if !aligned {
                continue;
            }
            if l.taken[me] > mine.granted[self.region] {
                return contradiction(Some(i), "took more of this Region's grants than it made");
            }
            // While a limit change is under way a pool may hold room of the older, larger rate, so
            // the bound is the largest rate any limit may have.
            if l.granted[me].excess_over(mine.taken[self.region]) > bound {
                return contradiction(Some(i), "grants this Region more room than the limit has");
            }
        }
        Ok(())
    }

    /// Checks that `self` can follow `prev`, a record of the same Region seen before: within the
    /// same epochs the cumulative counters never go down.
    pub fn validate_successor(&self, prev: &RegionRecord) -> Result<(), RecordError> {
        if self.epoch != prev.epoch {
            return Ok(());
        }
        for (i, (new, old)) in self.limits.iter().zip(prev.limits.iter()).enumerate() {
            for r in 0..MAX_REGIONS {
                if self.peer_epochs.0[r] != prev.peer_epochs.0[r]
                    || self.account_epochs.0[r] != prev.account_epochs.0[r]
                {
                    continue;
                }
                if new.granted.0[r] < old.granted.0[r] || new.taken.0[r] < old.taken.0[r] {
                    // A counter is reset when the peer's estate is reclaimed: allowed only if this
                    // record marks that reclaim.
                    if self.reclaims.0[r] != prev.reclaims.0[r] {
                        continue;
                    }
                    return Err(RecordError::CounterWentDown { limit: i });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Deployment, Design, Fence, LimitKind, LimitSpec, SilentPolicy};

    /// Also the test deployment of `access.rs`.
    pub(super) fn d() -> Deployment {
        let rate = Room::rps(1_000);
        Deployment::try_new(Deployment {
            regions: vec!["A".into(), "B".into(), "C".into()],
            limits: vec![LimitSpec {
                id: "l".into(),
                version: 1,
                rate,
                burst_ms: 2_000,
                floor: Room::rps(10),
                step_cap: Room::rps(100),
                kind: LimitKind::Capacity,
                shadow: false,
            }],
            design: Design::NamedGrants,
            policy: SilentPolicy::TwoSignals,
            fence: Fence::OwnUnhealthy,
            silent_after: 3,
            period_ms: 5_000,
        })
        .expect("valid deployment")
    }

    fn rid(i: usize) -> RegionId {
        RegionId::new(i).expect("region")
    }

    #[test]
    fn settled_records_start_at_their_targets_and_hold_exactly_the_rate() {
        let d = d();
        let demands = [Room::rps(600), Room::rps(300), Room::ZERO];
        let recs: Vec<RegionRecord> = (0..3)
            .map(|i| RegionRecord::settled(&d, rid(i), &demands))
            .collect();
        let shares: Vec<Room> = recs.iter().map(|r| r.limits[0].share).collect();
        // 10 each, and the other 970 by demand: 2/3 and 1/3.
        assert_eq!(
            shares,
            [
                Room::from_milli(656_667),
                Room::from_milli(333_333),
                Room::rps(10)
            ]
        );
        assert_eq!(shares.iter().copied().sum::<Room>(), d.limits[0].rate);
        for (i, r) in recs.iter().enumerate() {
            assert_eq!((r.version, r.epoch), (1, 1));
            assert_eq!(r.limits[0].target, r.limits[0].share);
            assert_eq!(r.limits[0].demand, demands[i]);
            assert_eq!(r.validate(&d, rid((i + 1) % 3)), Ok(()));
        }
    }

    #[test]
    fn an_account_must_belong_to_an_epoch_its_writer_had() {
        let d = d();
        let mut r = RegionRecord::genesis(&d, rid(1));
        r.epoch = 3;
        r.version = 9;
        r.prev_final = 8;
        assert_eq!(r.validate(&d, rid(0)), Ok(()));
        r.account_epochs.0[0] = 2;
        assert_eq!(r.validate(&d, rid(0)), Ok(()), "carried from epoch 2");
        for bad in [0, 4] {
            r.account_epochs.0[0] = bad;
            assert!(
                matches!(
                    r.validate(&d, rid(0)),
                    Err(RecordError::Contradiction { .. })
                ),
                "account epoch {bad} of a writer in epoch 3"
            );
        }
        r.account_epochs.0[0] = 3;
        r.account_epochs.0[5] = 1;
        assert!(matches!(
            r.validate(&d, rid(0)),
            Err(RecordError::Contradiction { .. })
        ));
    }

    #[test]
    fn carried_and_settled_accounts_read_from_the_record() {
        let d = d();
        let mut r = RegionRecord::genesis(&d, rid(1));
        r.epoch = 2;
        assert!(r.carries_open(rid(0)), "epoch 1's open account");
        assert!(!r.accounts_with(rid(0), 1), "its counters are epoch 1's");
        r.reclaims.0[0] = Some(ReclaimMark {
            epoch: 1,
            version: 4,
            by: 1,
        });
        assert!(!r.carries_open(rid(0)), "closed by epoch 1, kept to settle");
        r.reclaims.0[0] = None;
        r.peer_epochs.0[0] = 2;
        assert!(
            r.carries_open(rid(0)),
            "epoch 1's account with the peer's epoch 2"
        );
        assert!(!r.accounts_with(rid(0), 2));
    }

    #[test]
    fn copies_share_the_limits_until_one_changes_them() {
        let d = d();
        let a = RegionRecord::genesis(&d, rid(1));
        let mut b = a.clone();
        assert!(b.limits.shares_with(&a.limits));
        b.limits[0].demand = Room::from_milli(5);
        assert!(!b.limits.shares_with(&a.limits), "copied on write");
        assert_eq!(
            a.limits[0].demand,
            Room::ZERO,
            "the other copy is unchanged"
        );
        assert_eq!(b.limits[0].demand, Room::from_milli(5));
        let mut c = a.clone();
        c.limits.resize(2, LimitRecord::default());
        assert_eq!((a.limits.len(), c.limits.len()), (1, 2));
        assert_eq!(
            format!("{:?}", a.limits),
            format!("{:?}", a.limits.to_vec())
        );
    }

    #[test]
    fn counters_may_restart_when_the_account_changes_epoch() {
        let d = d();
        let mut prev = RegionRecord::genesis(&d, rid(1));
        prev.epoch = 2;
        prev.version = 5;
        prev.limits[0].granted.0[0] = Room::from_milli(700);
        let mut next = prev.clone();
        next.version = 6;
        next.limits[0].granted.0[0] = Room::ZERO;
        assert_eq!(
            next.validate_successor(&prev),
            Err(RecordError::CounterWentDown { limit: 0 })
        );
        next.account_epochs.0[0] = 2;
        assert_eq!(next.validate_successor(&prev), Ok(()));
    }
}
