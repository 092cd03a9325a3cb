//! One Region's side of the protocol: the rebalance of SPEC §4 and the silent-Region rules of §6.

use crate::config::{Deployment, Design, Fence, LimitKind, LimitSpec, SilentPolicy};
use crate::record::{LimitRecord, ReclaimMark, RecordError, RegionRecord};
use crate::region::{PerRegion, RegionId, MAX_REGIONS};
use crate::room::{even_part, split, Room};
use std::sync::Arc;

/// An outside health verdict about a Region (SPEC §6). Missing, stale or unreadable health data is
/// `Unknown`, and `Unknown` never counts as unhealthy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Health {
    Healthy,
    Unhealthy,
    #[default]
    Unknown,
}

/// The inputs of one rebalance.
pub struct Inputs<'a> {
    /// Stamped into the record for operators; never compared with another Region's clock.
    pub now_ms: u64,
    /// This Region's received requests per second for each limit (by limit index), averaged
    /// over the demand window. A missing entry counts as zero.
    pub demand: &'a [Room],
    /// The latest verdict for every Region, this one included (used for fencing).
    pub health: &'a PerRegion<Health>,
    /// Fill [`Decision::outcomes`] (costs one entry per limit).
    pub explain: bool,
}

/// What to push to the Region's limiters for one limit (SPEC §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Refill rate: the share.
    pub rate: Room,
    /// Bucket size in milli-requests: `burst_ms / 1000 × share`.
    pub burst: Room,
    pub shadow: bool,
}

/// Why one limit's share is what it is after a rebalance (for `explain`, the simulator's summary
/// and logs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimitOutcome {
    pub demand: Room,
    pub target: Room,
    pub share_before: Room,
    pub share_after: Room,
    pub pool_after: Room,
    pub unmet: Room,
    pub taken: PerRegion<Room>,
    pub granted: PerRegion<Room>,
    pub reclaimed: PerRegion<Room>,
}

/// Conditions an operator should be told about (SPEC §8).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Alarms {
    /// Limits for which this Region's own share plus the shares it sees exceed the rate.
    pub sum_above_limit: Vec<usize>,
    /// Peers exist and none of them wrote since the previous own rebalance.
    pub stale_view: bool,
    /// This Region found itself reclaimed (or was told to return) and started a new epoch.
    pub new_epoch: bool,
    /// The own health verdict is Unhealthy and fencing lowered every capacity share to zero.
    pub fenced: bool,
    /// Peers whose estate this rebalance reclaimed.
    pub reclaimed: Vec<RegionId>,
}

/// The result of [`Coordinator::rebalance`]: a record to write and rules to push.
#[derive(Clone, Debug)]
pub struct Decision {
    pub record: RegionRecord,
    /// One rule per limit, by limit index.
    pub rules: Vec<Rule>,
    /// One outcome per limit when [`Inputs::explain`] was set, else empty.
    pub outcomes: Vec<LimitOutcome>,
    pub alarms: Alarms,
    /// Reclaims made or settled again by this decision, adopted on commit.
    settlements: Vec<(RegionId, Settlement)>,
    /// The decision starts a new epoch: settlements of the old one are moot.
    drop_settlements: bool,
}

/// How this Region treats a peer right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerState {
    /// In targets and a possible grantee.
    Live,
    /// Silent but not reclaimed: kept in targets with its last demand, never a grantee.
    Silent,
    /// Its estate has been reclaimed; out of targets until it returns in a new epoch.
    Reclaimed,
}

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

#[derive(Clone, Hash)]
struct Peer {
    /// False until a record of the peer was observed; `latest` is then its genesis record, which
    /// is never reclaimed (the peer may have written records this Region has not seen).
    seen: bool,
    latest: Arc<RegionRecord>,
    /// `(epoch, version)` of `latest` at the previous own rebalance.
    prev: Option<(u64, u64)>,
    unchanged: u32,
    /// The last record of an epoch that ended (the peer came back) before this Region reclaimed it.
    pending_old: Option<Arc<RegionRecord>>,
    /// The last reclaim of this peer, kept so that it can be settled again when a newer record
    /// of the reclaimed epoch turns up (survivors that saw different last records converge on
    /// the newest one).
    settlement: Option<Settlement>,
    /// A newer record of the settled epoch than the settlement's basis, not yet settled.
    late: Option<Arc<RegionRecord>>,
}

/// How this Region split a peer's estate: the basis record and its place among the heirs.
#[derive(Clone, Debug, Hash)]
struct Settlement {
    basis: Arc<RegionRecord>,
    heirs: usize,
    position: usize,
    /// Whether the estate's grants to this Region were addressed to this Region's epoch (so they
    /// were taken) and its takes counted against this Region's grants.
    accounts_aligned: bool,
}

/// What this rebalance does about one peer's estate.
#[derive(Clone)]
enum Closure {
    None,
    /// Split this record's room and take back own grants to it.
    Reclaim(Arc<RegionRecord>),
    /// The peer is in a new epoch; reclaim the old one first if it was not reclaimed yet.
    Switch(Option<Arc<RegionRecord>>),
}

/// One Region's protocol state machine.
///
/// # Calling protocol
///
/// 1. Build it with [`Coordinator::genesis`] (nothing was ever written), [`Coordinator::new`]
///    (resume from the Region's own durable record) or [`Coordinator::restart`] (a daemon that was
///    down for a while: resume only when that is safe, else start a new epoch).
/// 2. Hand it every peer record that became visible with [`Coordinator::observe`], in any order;
///    older versions are ignored, invalid ones are rejected with a reason and never adopted.
/// 3. At each own rebalance call [`Coordinator::rebalance`] with the measured demand and the
///    health verdicts. It returns a [`Decision`]: the record to write and the rules to push.
/// 4. Once the record is durably written, call [`Coordinator::commit`]. If the write failed, do
///    not commit: the next rebalance starts again from the last committed record, so no room is
///    lost or duplicated (reclaims are keyed to the peer's epoch and version and retried).
///
/// The coordinator reads no clock and draws no random number: equal inputs give equal decisions.
#[derive(Clone)]
pub struct Coordinator {
    d: Arc<Deployment>,
    me: RegionId,
    own: RegionRecord,
    peers: Vec<Peer>,
}

impl Coordinator {
    /// A Region that resumes from `own`, its last durably written record. Peers start from their
    /// genesis records until their own records are observed.
    pub fn new(d: Arc<Deployment>, me: RegionId, own: RegionRecord) -> Coordinator {
        let peers = crate::region::regions(d.n())
            .map(|r| Peer {
                seen: false,
                latest: Arc::new(RegionRecord::genesis(&d, r)),
                prev: None,
                unchanged: 0,
                pending_old: None,
                settlement: None,
                late: None,
            })
            .collect();
        Coordinator { d, me, own, peers }
    }

    /// A Region of a deployment where nothing was written yet.
    pub fn genesis(d: Arc<Deployment>, me: RegionId) -> Coordinator {
        let own = RegionRecord::genesis(&d, me);
        Coordinator::new(d, me, own)
    }

    /// A daemon that starts again. `durable` is the Region's own record read back from the store
    /// (`None` if it never wrote one) and `down_ms` how long ago that record was written, on this
    /// Region's own clock.
    ///
    /// Peers need `silent_after` own rebalances without a change before they may reclaim, so a
    /// daemon whose next write lands within `(silent_after − 1) × period` of its last one cannot
    /// have been reclaimed and resumes its epoch. Otherwise it starts a new epoch with nothing and
    /// raises only by grants named to it: it may have been reclaimed already.
    pub fn restart(
        d: Arc<Deployment>,
        me: RegionId,
        durable: Option<RegionRecord>,
        down_ms: u64,
    ) -> Coordinator {
        let Some(own) = durable else {
            return Coordinator::genesis(d, me);
        };
        let safe_ms = u64::from(d.silent_after.saturating_sub(1)).saturating_mul(d.period_ms);
        let mut c = Coordinator::new(d, me, own);
        if down_ms >= safe_ms {
            start_new_epoch(&mut c.own);
        }
        c
    }

    pub fn me(&self) -> RegionId {
        self.me
    }

    pub fn deployment(&self) -> &Arc<Deployment> {
        &self.d
    }

    /// The last committed own record.
    pub fn own(&self) -> &RegionRecord {
        &self.own
    }

    /// The latest record seen of a peer (its genesis record until one is observed).
    pub fn latest(&self, r: RegionId) -> Option<&Arc<RegionRecord>> {
        self.peers
            .get(r.index())
            .filter(|_| r != self.me)
            .map(|p| &p.latest)
    }

    /// Replaces the limits (a limit change). Regions may adopt a new version at different times;
    /// the rebalance moves room in static parts so the sum of shares never exceeds the larger of
    /// the old and the new rate. Returns the problems if the new deployment is invalid.
    pub fn set_limits(
        &mut self,
        limits: Vec<crate::LimitSpec>,
    ) -> Result<(), Vec<crate::ConfigError>> {
        let mut next = (*self.d).clone();
        next.limits = limits;
        self.d = Arc::new(Deployment::try_new(next)?);
        Ok(())
    }

    /// Hands over a peer record that became visible. Returns `Ok(true)` if it is newer than what
    /// was seen and was adopted as the peer's latest, `Ok(false)` if it was older or the same.
    pub fn observe(&mut self, record: Arc<RegionRecord>) -> Result<bool, RecordError> {
        record.validate(&self.d, self.me)?;
        let j = record.region;
        let acct_epoch = self.own.peer_epochs[j];
        let marked = self.own.reclaims[j].map(|m| m.epoch) == Some(acct_epoch);
        let Some(peer) = self.peers.get_mut(j.index()) else {
            return Err(RecordError::UnknownRegion(j.index()));
        };
        let needs_basis = |p: &Peer, r: &RegionRecord| {
            r.epoch == acct_epoch
                && !marked
                && p.pending_old
                    .as_ref()
                    .is_none_or(|o| (o.epoch, o.version) < (r.epoch, r.version))
        };
        if let Some(st) = &peer.settlement {
            let newer = |r: &RegionRecord, than: &RegionRecord| {
                r.epoch == than.epoch && r.version > than.version
            };
            let known = peer.late.as_deref().unwrap_or(&st.basis);
            if newer(&record, known) {
                peer.late = Some(record.clone());
            }
        }
        if peer.seen && (record.epoch, record.version) <= (peer.latest.epoch, peer.latest.version) {
            // The store keeps a Region's last record of its previous epoch until the survivors
            // have reclaimed it, so a restarted daemon can still reclaim an epoch it never saw end.
            if record.epoch < peer.latest.epoch && needs_basis(peer, &record) {
                peer.pending_old = Some(record);
                return Ok(true);
            }
            return Ok(false);
        }
        if peer.seen {
            record.validate_successor(&peer.latest)?;
            if record.epoch > peer.latest.epoch && needs_basis(peer, &peer.latest.clone()) {
                peer.pending_old = Some(peer.latest.clone());
            }
        }
        peer.seen = true;
        peer.latest = record;
        Ok(true)
    }

    /// Every peer as this Region last saw it.
    pub fn peers(&self) -> Vec<PeerView> {
        let mut out = Vec::new();
        for (i, p) in self.peers.iter().enumerate() {
            let Some(r) = RegionId::new(i) else { continue };
            if r == self.me {
                continue;
            }
            let state = if self.own.reclaims[r].map(|m| m.epoch) == Some(self.own.peer_epochs[r])
                && p.latest.epoch <= self.own.peer_epochs[r]
            {
                PeerState::Reclaimed
            } else if !p.seen || p.unchanged >= self.d.silent_after {
                // As in `classify`: a peer never heard of is kept in targets but never a grantee.
                PeerState::Silent
            } else {
                PeerState::Live
            };
            out.push(PeerView {
                region: r,
                epoch: p.latest.epoch,
                version: p.latest.version,
                unchanged: p.unchanged,
                state,
                written_at_ms: p.latest.written_at_ms,
            });
        }
        out
    }

    /// Adopts a decision whose record was durably written.
    pub fn commit(&mut self, decision: &Decision) {
        self.own = decision.record.clone();
        for (r, st) in &decision.settlements {
            if let Some(p) = self.peers.get_mut(r.index()) {
                if p.late
                    .as_ref()
                    .is_some_and(|l| l.version <= st.basis.version || l.epoch != st.basis.epoch)
                {
                    p.late = None;
                }
                p.settlement = Some(st.clone());
            }
        }
        for (i, p) in self.peers.iter_mut().enumerate() {
            if decision.drop_settlements {
                p.settlement = None;
                p.late = None;
            }
            let Some(r) = RegionId::new(i) else { continue };
            if let Some(old) = &p.pending_old {
                let closed = self.own.peer_epochs[r] > old.epoch
                    || self.own.reclaims[r].map(|m| m.epoch) == Some(old.epoch);
                if closed {
                    p.pending_old = None;
                }
            }
        }
    }

    /// One rebalance (SPEC §4 and §6). Mutates only the silence counters; the own state changes
    /// when the returned decision is [committed](Coordinator::commit).
    pub fn rebalance(&mut self, inputs: &Inputs<'_>) -> Decision {
        let d = self.d.clone();
        let me = self.me;
        let mut rec = self.own.clone();
        rec.version += 1;
        rec.written_at_ms = inputs.now_ms;
        let mut alarms = Alarms::default();

        if self.was_reclaimed() {
            start_new_epoch(&mut rec);
            alarms.new_epoch = true;
        }
        self.count_silence();
        let fenced = d.fence == Fence::OwnUnhealthy
            && d.policy != SilentPolicy::Freeze
            && inputs.health[me] == Health::Unhealthy;
        alarms.fenced = fenced;
        let (states, closures) = self.classify(&rec, inputs.health, fenced);
        let closing = closing_settlements(&d, me, &states, &closures, &rec);
        alarms.reclaimed = crate::region::regions(d.n())
            .filter(|r| closing.get(r.index()).is_some_and(Option::is_some))
            .collect();
        alarms.stale_view = d.n() > 1
            && crate::region::regions(d.n())
                .filter(|&r| r != me)
                .all(|r| self.peers[r.index()].unchanged > 0);
        let reconciles = if alarms.new_epoch {
            vec![None; d.n()]
        } else {
            self.reconciles(&rec)
        };
        let ctx = LimitCtx {
            d: &d,
            me,
            peers: &self.peers,
            states: &states,
            closures: &closures,
            closing: &closing,
            reconciles: &reconciles,
            fenced,
        };
        let mut rules = Vec::with_capacity(d.limits.len());
        let mut outcomes = Vec::new();
        rec.limits
            .resize(d.limits.len().max(rec.limits.len()), LimitRecord::default());
        for (li, spec) in d.limits.iter().enumerate() {
            let demand = inputs.demand.get(li).copied().unwrap_or_default();
            let out = ctx.rebalance_limit(li, spec, demand, &rec, &mut alarms);
            let e = &mut rec.limits[li];
            *e = out.0;
            rules.push(Rule {
                rate: e.share,
                burst: e.share.mul_div(spec.burst_ms, 1000),
                shadow: spec.shadow,
            });
            if inputs.explain {
                outcomes.push(out.1);
            }
        }
        let settlements = ctx.settlements();
        let drop_settlements = alarms.new_epoch;
        for (j, st) in &settlements {
            rec.reclaims[*j] = Some(ReclaimMark {
                epoch: st.basis.epoch,
                version: st.basis.version,
            });
        }
        close_accounts(&mut rec, &closures, &self.peers);
        Decision {
            record: rec,
            rules,
            outcomes,
            alarms,
            settlements,
            drop_settlements,
        }
    }

    /// Peers whose last reclaim is to be settled again against a newer record of the same epoch.
    fn reconciles(&self, rec: &RegionRecord) -> Vec<Option<(Settlement, Arc<RegionRecord>)>> {
        let mut out = vec![None; self.d.n()];
        for (i, p) in self.peers.iter().enumerate() {
            let Some(j) = RegionId::new(i) else { continue };
            if j == self.me || !reconcile_pending(p, rec, j) {
                continue;
            }
            if let (Some(st), Some(late)) = (&p.settlement, &p.late) {
                out[i] = Some((st.clone(), late.clone()));
            }
        }
        out
    }

    /// Whether a peer's latest record says it reclaimed this Region's current epoch.
    fn was_reclaimed(&self) -> bool {
        let me = self.me;
        self.peers.iter().enumerate().any(|(i, p)| {
            i != me.index()
                && p.seen
                && p.latest.reclaims[me].is_some_and(|m| m.epoch >= self.own.epoch)
        })
    }

    fn count_silence(&mut self) {
        for (i, p) in self.peers.iter_mut().enumerate() {
            if i == self.me.index() || !p.seen {
                continue;
            }
            let cur = (p.latest.epoch, p.latest.version);
            if p.prev == Some(cur) {
                p.unchanged = p.unchanged.saturating_add(1);
            } else {
                p.unchanged = 0;
            }
            p.prev = Some(cur);
        }
    }

    fn classify(
        &self,
        rec: &RegionRecord,
        health: &PerRegion<Health>,
        fenced: bool,
    ) -> (PerRegion<Option<PeerState>>, Vec<Closure>) {
        let d = &self.d;
        let mut states: PerRegion<Option<PeerState>> = PerRegion([None; MAX_REGIONS]);
        let mut closures = vec![Closure::None; d.n()];
        for j in crate::region::regions(d.n()).filter(|&r| r != self.me) {
            let p = &self.peers[j.index()];
            let acct_epoch = rec.peer_epochs[j];
            let marked = rec.reclaims[j].map(|m| m.epoch) == Some(acct_epoch);
            let silent = p.unchanged >= d.silent_after;
            let (state, closure) = if !p.seen {
                // Never heard of: kept in targets at its genesis demand, never a grantee, never
                // reclaimed.
                (PeerState::Silent, Closure::None)
            } else if p.latest.epoch > acct_epoch {
                match (&p.pending_old, marked) {
                    (_, true) => (PeerState::Live, Closure::Switch(None)),
                    (Some(old), false) => (PeerState::Live, Closure::Switch(Some(old.clone()))),
                    // The peer came back but the last record of its old epoch is not known
                    // here: keep the old estate untouched (frozen) until that record is read.
                    (None, false) => (PeerState::Silent, Closure::None),
                }
            } else if marked {
                (PeerState::Reclaimed, Closure::None)
            } else if silent && !fenced && reclaimable(d.policy, health[j]) {
                // A fenced Region is itself suspect (its own check says unhealthy): it reclaims
                // nobody, or two Regions cut off from each other and both wrongly called unhealthy
                // would reclaim each other.
                (PeerState::Reclaimed, Closure::Reclaim(p.latest.clone()))
            } else if silent {
                (PeerState::Silent, Closure::None)
            } else {
                (PeerState::Live, Closure::None)
            };
            // Settle the previous reclaim against its newer record before closing anything else
            // of this peer: a mark names one epoch at a time.
            let (state, closure) =
                if reconcile_pending(p, rec, j) && !matches!(closure, Closure::None) {
                    (PeerState::Silent, Closure::None)
                } else {
                    (state, closure)
                };
            states[j] = Some(state);
            closures[j.index()] = closure;
        }
        (states, closures)
    }
}

/// Whether the peer's last reclaim (still the one its mark names) has a newer record to settle
/// against.
fn reconcile_pending(p: &Peer, rec: &RegionRecord, j: RegionId) -> bool {
    let (Some(st), Some(late)) = (&p.settlement, &p.late) else {
        return false;
    };
    rec.reclaims[j]
        == Some(ReclaimMark {
            epoch: st.basis.epoch,
            version: st.basis.version,
        })
        && late.epoch == st.basis.epoch
        && late.version > st.basis.version
}

fn reclaimable(policy: SilentPolicy, health: Health) -> bool {
    match policy {
        SilentPolicy::Freeze => false,
        SilentPolicy::TwoSignals => health == Health::Unhealthy,
        SilentPolicy::SilenceAlone => true,
    }
}

/// A Region that may have been reclaimed comes back with nothing (SPEC §6, "Return"). The version
/// keeps rising; limit versions are kept because the room of those versions is accounted for
/// (held by the survivors that reclaimed it).
fn start_new_epoch(rec: &mut RegionRecord) {
    rec.epoch += 1;
    for l in rec.limits.iter_mut() {
        *l = LimitRecord {
            limit_version: l.limit_version,
            rate: l.rate,
            ..LimitRecord::default()
        };
    }
}

/// After a reclaim the accounts with the peer's old epoch are closed; after a switch the peer's
/// new epoch is the one the accounts refer to.
/// (The reclaim marks are written from the settlements, in `rebalance`.)
fn close_accounts(rec: &mut RegionRecord, closures: &[Closure], peers: &[Peer]) {
    for (i, c) in closures.iter().enumerate() {
        if let (Closure::Switch(_), Some(j)) = (c, RegionId::new(i)) {
            rec.peer_epochs[j] = peers[i].latest.epoch;
        }
    }
}

/// The settlement of every estate this rebalance closes (by index of its owner): the record it
/// splits, the heirs and this Region's place among them, and whether the accounts line up.
fn closing_settlements(
    d: &Deployment,
    me: RegionId,
    states: &PerRegion<Option<PeerState>>,
    closures: &[Closure],
    rec: &RegionRecord,
) -> Vec<Option<Settlement>> {
    let mut out = vec![None; d.n()];
    for (i, c) in closures.iter().enumerate() {
        let (Closure::Reclaim(basis) | Closure::Switch(Some(basis))) = c else {
            continue;
        };
        let Some(j) = RegionId::new(i) else { continue };
        let (heirs, position) = heirs_of(d, me, states, j);
        let accounts_aligned =
            basis.peer_epochs[me] == rec.epoch && rec.peer_epochs[j] == basis.epoch;
        out[i] = Some(Settlement {
            basis: basis.clone(),
            heirs,
            position,
            accounts_aligned,
        });
    }
    out
}

/// How many Regions share an estate of `owner`, and `me`'s position among them (by index): `me`
/// and every other Region it does not count as reclaimed.
fn heirs_of(
    d: &Deployment,
    me: RegionId,
    states: &PerRegion<Option<PeerState>>,
    owner: RegionId,
) -> (usize, usize) {
    let mut heirs = 1;
    let mut position = 0;
    for k in crate::region::regions(d.n()) {
        if k == me || k == owner {
            continue;
        }
        if matches!(states[k], Some(PeerState::Live | PeerState::Silent)) {
            heirs += 1;
            if k < me {
                position += 1;
            }
        }
    }
    (heirs, position)
}

struct LimitCtx<'a> {
    d: &'a Deployment,
    me: RegionId,
    peers: &'a [Peer],
    states: &'a PerRegion<Option<PeerState>>,
    closures: &'a [Closure],
    /// The settlements of the estates closed by this rebalance, by owner index.
    closing: &'a [Option<Settlement>],
    reconciles: &'a [Option<(Settlement, Arc<RegionRecord>)>],
    fenced: bool,
}

impl LimitCtx<'_> {
    /// Steps 1-4 of SPEC §4 for one limit, with reclaims folded in after the take.
    fn rebalance_limit(
        &self,
        li: usize,
        spec: &LimitSpec,
        demand: Room,
        rec: &RegionRecord,
        alarms: &mut Alarms,
    ) -> (LimitRecord, LimitOutcome) {
        let n = self.d.n();
        let mut e = rec.limits.get(li).copied().unwrap_or_default();
        let mut out = LimitOutcome {
            demand,
            share_before: e.share,
            ..LimitOutcome::default()
        };
        adopt(spec, &mut e, n, self.me);
        e.demand = demand;
        if let LimitKind::Security { .. } = spec.kind {
            e.share = spec.security_share(n, self.me);
            e.pool = Room::ZERO;
            e.target = e.share;
            e.unmet = Room::ZERO;
            out.share_after = e.share;
            out.target = e.share;
            return (e, out);
        }
        self.take(li, rec, &mut e, &mut out);
        self.reclaim(li, &mut e, &mut out);
        self.reconcile(li, &mut e, &mut out);
        pay_debt(&mut e);
        let target = self.target(li, &e, demand);
        e.target = target;
        match self.d.design {
            Design::JumpToTarget => {
                e.share = target;
                e.pool = Room::ZERO;
                e.unmet = Room::ZERO;
            }
            Design::NamedGrants if self.fenced => {
                e.pool += e.share;
                e.share = Room::ZERO;
                e.unmet = Room::ZERO;
            }
            Design::NamedGrants => {
                if target < e.share {
                    e.pool += e.share.saturating_sub(target);
                    e.share = target;
                } else {
                    let raise = spec
                        .step_cap
                        .min(e.pool)
                        .min(target.saturating_sub(e.share));
                    e.share += raise;
                    e.pool = e.pool.saturating_sub(raise);
                }
                // A Region in debt after a downgrade asks for its debt too; otherwise a Region
                // whose target is zero could never repay it.
                e.unmet = target.saturating_sub(e.share) + e.debt;
                self.grant(li, rec, &mut e, &mut out);
            }
        }
        if self.seen_sum(li, e.share) > e.rate.0 as u128 {
            alarms.sum_above_limit.push(li);
        }
        out.target = target;
        out.share_after = e.share;
        out.pool_after = e.pool;
        out.unmet = e.unmet;
        (e, out)
    }

    /// The peer record that this rebalance takes grants from, if any.
    fn source(&self, j: RegionId) -> Option<&Arc<RegionRecord>> {
        match &self.closures[j.index()] {
            Closure::Reclaim(b) => Some(b),
            Closure::Switch(b) => b.as_ref(),
            Closure::None => match self.states[j] {
                Some(PeerState::Live | PeerState::Silent) => Some(&self.peers[j.index()].latest),
                _ => None,
            },
        }
    }

    /// Step 1: take every grant named to this Region's epoch that it has not taken before.
    fn take(&self, li: usize, rec: &RegionRecord, e: &mut LimitRecord, out: &mut LimitOutcome) {
        for j in crate::region::regions(self.d.n()).filter(|&r| r != self.me) {
            let Some(src) = self.source(j) else { continue };
            if src.peer_epochs[self.me] != rec.epoch || rec.peer_epochs[j] != src.epoch {
                continue;
            }
            let Some(sl) = src.limits.get(li) else {
                continue;
            };
            let amount = sl.granted[self.me].saturating_sub(e.taken[j]);
            e.pool += amount;
            e.taken[j] += amount;
            out.taken[j] = amount;
        }
    }

    /// Reclaim: split each closed estate's room evenly over its heirs and take back own grants
    /// that the estate never took.
    fn reclaim(&self, li: usize, e: &mut LimitRecord, out: &mut LimitOutcome) {
        for (i, c) in self.closures.iter().enumerate() {
            let Some(j) = RegionId::new(i) else { continue };
            if matches!(c, Closure::None) {
                continue;
            }
            if let Some(st) = &self.closing[i] {
                let src = st.basis.limits.get(li).copied().unwrap_or_default();
                let room = (src.share + src.pool).saturating_sub(src.debt);
                let portion = even_part(room, st.heirs, st.position);
                let taken_by_it = if st.accounts_aligned {
                    src.taken[self.me]
                } else {
                    Room::ZERO
                };
                let back = e.granted[j].saturating_sub(taken_by_it);
                e.pool += portion + back;
                e.reclaimed[j] = portion;
                out.reclaimed[j] = portion + back;
            }
            e.granted[j] = Room::ZERO;
            e.taken[j] = Room::ZERO;
        }
    }

    /// Settles a reclaim again against a newer record of the same epoch: the difference in this
    /// Region's portion, in the grants the estate made to it and in what it took of this Region's
    /// grants. A negative difference is paid from the pool, the rest becomes debt.
    fn reconcile(&self, li: usize, e: &mut LimitRecord, out: &mut LimitOutcome) {
        for (i, r) in self.reconciles.iter().enumerate() {
            let Some((st, late)) = r else { continue };
            let Some(j) = RegionId::new(i) else { continue };
            let old = st.basis.limits.get(li).copied().unwrap_or_default();
            let new = late.limits.get(li).copied().unwrap_or_default();
            let portion = |l: &LimitRecord| {
                even_part(
                    (l.share + l.pool).saturating_sub(l.debt),
                    st.heirs,
                    st.position,
                )
            };
            let (p_old, p_new) = (portion(&old), portion(&new));
            let mut delta = p_new.0 as i128 - p_old.0 as i128;
            if st.accounts_aligned {
                delta += new.granted[self.me].0 as i128 - old.granted[self.me].0 as i128;
                delta -= new.taken[self.me].0 as i128 - old.taken[self.me].0 as i128;
            }
            if delta >= 0 {
                e.pool += Room(delta as u64);
            } else {
                let owe = Room(delta.unsigned_abs() as u64);
                let from_pool = owe.min(e.pool);
                e.pool = e.pool.saturating_sub(from_pool);
                e.debt += owe.saturating_sub(from_pool);
            }
            e.reclaimed[j] = p_new;
            out.reclaimed[j] = Room(out.reclaimed[j].0.saturating_add_signed(delta as i64));
        }
    }

    /// The settlements this rebalance makes: one per estate it closes, one per reclaim it settles
    /// again (a peer never has both in one rebalance, see `classify`).
    fn settlements(&self) -> Vec<(RegionId, Settlement)> {
        let mut out = Vec::new();
        for j in crate::region::regions(self.d.n()).filter(|&r| r != self.me) {
            if let Some(st) = &self.closing[j.index()] {
                out.push((j, st.clone()));
            } else if let Some((st, late)) = &self.reconciles[j.index()] {
                out.push((
                    j,
                    Settlement {
                        basis: late.clone(),
                        ..st.clone()
                    },
                ));
            }
        }
        out
    }

    /// Step 2's target: `floor + (L − floor × n_live) × demand_i / Σ demand` over the Regions in
    /// targets (this one, live peers and silent peers that were not reclaimed).
    fn target(&self, li: usize, e: &LimitRecord, demand: Room) -> Room {
        let mut weights = [0u64; MAX_REGIONS];
        let mut members = 0;
        let mut mine = 0;
        for r in crate::region::regions(self.d.n()) {
            let w = if r == self.me {
                mine = members;
                demand.0
            } else {
                match self.states[r] {
                    Some(PeerState::Live | PeerState::Silent) => {
                        let latest = &self.peers[r.index()].latest;
                        latest.limits.get(li).map_or(0, |l| l.demand.0)
                    }
                    _ => continue,
                }
            };
            weights[members] = w;
            members += 1;
        }
        let spec = &self.d.limits[li];
        let rate = e.rate;
        let floor = if spec.floor.0.saturating_mul(members as u64) > rate.0 {
            Room(rate.0 / members as u64)
        } else {
            spec.floor
        };
        let rest = Room(rate.0 - floor.0 * members as u64);
        let mut parts = [Room::ZERO; MAX_REGIONS];
        split(rest, &weights[..members], &mut parts[..members]);
        floor + parts[mine]
    }

    /// Step 4: grant the pool to live peers by name, in proportion to the unmet needs they last
    /// published, less what this Region already granted them and they have not taken yet.
    fn grant(&self, li: usize, rec: &RegionRecord, e: &mut LimitRecord, out: &mut LimitOutcome) {
        if e.pool.is_zero() {
            return;
        }
        let mut needs = [0u64; MAX_REGIONS];
        let mut total: u128 = 0;
        for j in crate::region::regions(self.d.n()).filter(|&r| r != self.me) {
            if self.states[j] != Some(PeerState::Live)
                || !matches!(self.closures[j.index()], Closure::None)
            {
                continue;
            }
            let p = &self.peers[j.index()].latest;
            if p.peer_epochs[self.me] != rec.epoch || p.epoch != rec.peer_epochs[j] {
                continue;
            }
            let Some(pl) = p.limits.get(li) else { continue };
            if pl.limit_version == 0 {
                continue;
            }
            let in_flight = e.granted[j].saturating_sub(pl.taken[self.me]);
            let need = pl.unmet.saturating_sub(in_flight);
            needs[j.index()] = need.0;
            total += need.0 as u128;
        }
        if total == 0 {
            return;
        }
        let n = self.d.n();
        let mut amounts = [Room::ZERO; MAX_REGIONS];
        if total <= e.pool.0 as u128 {
            for i in 0..n {
                amounts[i] = Room(needs[i]);
            }
        } else {
            split(e.pool, &needs[..n], &mut amounts[..n]);
        }
        for (i, a) in amounts.iter().enumerate().take(n) {
            if a.is_zero() {
                continue;
            }
            let Some(j) = RegionId::new(i) else { continue };
            e.granted[j] += *a;
            e.pool = e.pool.saturating_sub(*a);
            out.granted[j] = *a;
        }
    }

    /// This Region's share plus the last published shares of the peers it keeps in targets.
    fn seen_sum(&self, li: usize, own_share: Room) -> u128 {
        let mut sum = own_share.0 as u128;
        for r in crate::region::regions(self.d.n()).filter(|&r| r != self.me) {
            if matches!(self.states[r], Some(PeerState::Live | PeerState::Silent)) {
                let latest = &self.peers[r.index()].latest;
                sum += latest.limits.get(li).map_or(0, |l| l.share.0 as u128);
            }
        }
        sum
    }
}

/// Adopts a new limit version: room arrives or leaves in this Region's static part, so the sum of
/// shares never exceeds the larger of the old and the new rate while Regions disagree.
fn adopt(spec: &LimitSpec, e: &mut LimitRecord, n: usize, me: RegionId) {
    if spec.version <= e.limit_version {
        return;
    }
    let old = LimitSpec::static_part(e.rate, n, me);
    let new = LimitSpec::static_part(spec.rate, n, me);
    let first = e.limit_version == 0;
    e.limit_version = spec.version;
    e.rate = spec.rate;
    if new >= old {
        let more = new.saturating_sub(old);
        if first {
            e.share += more;
        } else {
            e.pool += more;
        }
    } else {
        e.debt += old.saturating_sub(new);
    }
}

/// Pays a downgrade's debt from the pool first, then by lowering the share.
fn pay_debt(e: &mut LimitRecord) {
    if e.debt.is_zero() {
        return;
    }
    let from_pool = e.debt.min(e.pool);
    e.pool = e.pool.saturating_sub(from_pool);
    e.debt = e.debt.saturating_sub(from_pool);
    let from_share = e.debt.min(e.share);
    e.share = e.share.saturating_sub(from_share);
    e.debt = e.debt.saturating_sub(from_share);
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Coordinator>();
}

impl std::hash::Hash for Coordinator {
    /// Hashes the protocol state (not the deployment): the model checker's state identity.
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.me.hash(h);
        self.own.hash(h);
        self.peers.hash(h);
    }
}
