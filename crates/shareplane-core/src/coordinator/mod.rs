//! One Region's side of the protocol: the rebalance of SPEC §4 and the silent-Region rules of §6.
//!
//! The calling protocol is here ([`Coordinator`]); each concern has a file of its own:
//! [`rules`] (what reaches the gateways), [`alarms`] (what an operator is told, and the steps
//! that keep room), `peers` (what this Region knows of each peer), `plans` (what a rebalance does
//! about each peer's estate, and the reclaim rule) and `limit` (one limit's steps). Estates of
//! ended epochs are split by the fixed, view-independent rule of [`crate::estate`]; targets are
//! [`crate::targets`].

mod alarms;
mod freeze;
mod limit;
mod peers;
mod plans;
mod rules;

pub use alarms::{seen_sum, step, Alarms, LimitOutcome};
pub use peers::{peer_view, PeerView, Silence};
pub use rules::Rule;

use crate::config::{Deployment, Fence, SilentPolicy};
use crate::record::{LimitRecord, RecordError, RegionRecord};
use crate::region::{PerRegion, RegionId};
use crate::room::Room;
use limit::LimitCtx;
use peers::{remember, Peer};
use plans::apply_marks;
use std::collections::{BTreeMap, BTreeSet};
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

/// The result of [`Coordinator::rebalance`]: a record to write and rules to push.
#[derive(Clone, Debug)]
pub struct Decision {
    pub record: RegionRecord,
    /// One rule per limit, by limit index.
    pub rules: Vec<Rule>,
    /// One outcome per limit when [`Inputs::explain`] was set, else empty.
    pub outcomes: Vec<LimitOutcome>,
    pub alarms: Alarms,
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

/// Why [`Coordinator::abandon`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbandonRefused {
    /// The Region named is this one, or not configured.
    NotAPeer,
    /// This Region is not waiting for a record of that peer (it accounts with this epoch).
    NotWaiting { accounts_with: u64 },
    /// It waits for the last record of another epoch of that peer.
    OtherEpoch { waiting_for: u64 },
    /// It reclaimed that epoch from an older record and must settle against the last one.
    Reclaimed { epoch: u64 },
}

impl std::fmt::Display for AbandonRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AbandonRefused::NotAPeer => write!(f, "not a peer Region of this one"),
            AbandonRefused::NotWaiting { accounts_with } => write!(
                f,
                "not waiting for a record of that Region (it accounts with its epoch {accounts_with})"
            ),
            AbandonRefused::OtherEpoch { waiting_for } => write!(
                f,
                "waiting for the last record of that Region's epoch {waiting_for}, not this one"
            ),
            AbandonRefused::Reclaimed { epoch } => write!(
                f,
                "this Region reclaimed that Region's epoch {epoch} from an older record and must \
                 settle against its last one; giving up would keep what it took"
            ),
        }
    }
}

impl std::error::Error for AbandonRefused {}

/// One Region's protocol state machine.
///
/// # Calling protocol
///
/// 1. Build it with [`Coordinator::genesis`] (nothing was ever written), [`Coordinator::new`]
///    (resume from the Region's own durable record) or [`Coordinator::restart`] (a daemon that was
///    down for a while: resume only when that is safe, else start a new epoch).
/// 2. Hand it every peer record that became visible with [`Coordinator::observe`], in any order,
///    including the last records of the peers' ended epochs that the store keeps; older versions
///    are ignored, invalid ones are rejected with a reason and never adopted.
/// 3. At each own rebalance call [`Coordinator::rebalance`] with the measured demand and the
///    health verdicts. It returns a [`Decision`]: the record to write and the rules to push.
/// 4. Once the record is durably written, call [`Coordinator::commit`]. If the write failed, do
///    not commit: the next rebalance starts again from the last committed record, so no room is
///    lost or duplicated (closes are keyed to the peer's epoch and version and retried).
///
/// Everything a later rebalance needs to settle a close again is in the own record (marks,
/// counters, portions), so a daemon that restarts from its record loses nothing.
/// The coordinator reads no clock and draws no random number: equal inputs give equal decisions.
#[derive(Clone)]
pub struct Coordinator {
    d: Arc<Deployment>,
    me: RegionId,
    own: RegionRecord,
    peers: Vec<Peer>,
    /// A restart resumed `own`'s epoch on time alone; the first rebalance confirms it from what
    /// the peers' records say they saw, or starts a new epoch ([`Self::resume_in_doubt`]). Cleared
    /// by the next commit.
    resumed_unconfirmed: bool,
    /// The newest record of each peer that any record this Region may have written says it held
    /// (`seen`, the largest over every decision since it started, written or not): a peer's
    /// freeze older than that may have been lifted on the strength of it.
    published: PerRegion<(u64, u64)>,
    /// The last records of this Region's ended epochs that an estate may have inherited from:
    /// an heir that values such an estate settles the inheritance to them ([`LimitCtx::folded`]).
    /// Kept while the stores keep them ([`crate::closed_for_good`]) and while a record kept here
    /// refers to them ([`Self::referenced`]); a daemon that restarts holds only the one it read
    /// back (an older one counts as not held: room under, never over).
    own_ended: BTreeMap<u64, Arc<RegionRecord>>,
    /// The last version of each of this Region's ended epochs that it knows (a few bytes each,
    /// kept for good): an estate that closed one of them against its last record settled all it
    /// could lower, even when that record is no longer held.
    own_finals: BTreeMap<u64, u64>,
}

impl Coordinator {
    /// A Region that resumes from `own`, its last durably written record. Peers start from their
    /// genesis records until their own records are observed.
    pub fn new(d: Arc<Deployment>, me: RegionId, own: RegionRecord) -> Coordinator {
        let peers = crate::region::regions(d.n())
            .map(|r| Peer {
                seen: false,
                latest: Arc::new(peer_genesis(&d, r, me)),
                silence: Silence::default(),
                ended: BTreeMap::new(),
                abandon: None,
            })
            .collect();
        let mut c = Coordinator {
            d,
            me,
            published: own.seen,
            own,
            peers,
            resumed_unconfirmed: false,
            own_ended: BTreeMap::new(),
            own_finals: BTreeMap::new(),
        };
        c.note_final(c.own.epoch.saturating_sub(1), c.own.prev_final);
        c
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
    /// have been reclaimed by a peer that saw that write (or the one before it) and resumes its
    /// epoch, to be confirmed at its first rebalance ([`Self::resume_in_doubt`]: a peer cut off
    /// from it counts its silence from the last write it saw, however old). Otherwise it starts
    /// a new epoch with nothing and raises only by grants named to it: it may have been
    /// reclaimed already.
    pub fn restart(
        d: Arc<Deployment>,
        me: RegionId,
        durable: Option<RegionRecord>,
        down_ms: u64,
    ) -> Coordinator {
        let Some(own) = durable else {
            return Coordinator::genesis(d, me);
        };
        let safe_ms = Self::resume_window_ms(&d);
        let mut c = Coordinator::new(d, me, own);
        if down_ms >= safe_ms {
            let last = c.own.version;
            c.own_ended.insert(c.own.epoch, Arc::new(c.own.clone()));
            start_new_epoch(&mut c.own, last);
            c.note_final(c.own.epoch - 1, last);
        } else {
            c.resumed_unconfirmed = c.own.version > 0;
        }
        c
    }

    /// How long after its last durable write a Region can be sure nobody has reclaimed it yet:
    /// `(silent_after − 1) × period` on its own clock (a peer that last saw the version before
    /// the last one can count it silent that much sooner).
    pub fn resume_window_ms(d: &Deployment) -> u64 {
        u64::from(d.silent_after.saturating_sub(1)).saturating_mul(d.period_ms)
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

    /// Hands over a peer record that became visible. Returns `Ok(true)` if it told this Region
    /// something new (a newer latest record, or a newer record of an ended epoch it still has to
    /// close or settle), `Ok(false)` if it was older or the same.
    pub fn observe(&mut self, record: Arc<RegionRecord>) -> Result<bool, RecordError> {
        record.validate(&self.d, self.me)?;
        record.validate_towards(&self.own, self.me)?;
        let j = record.region;
        // Every record of an ended epoch is kept here; the next commit prunes those this Region
        // no longer needs ([`Self::keep_from`], [`Self::referenced`]), once every record handed
        // over with this one has been seen (the estate that needs one may come later in the
        // same batch).
        let Some(peer) = self.peers.get_mut(j.index()) else {
            return Err(RecordError::UnknownRegion(j.index()));
        };
        let at = (record.epoch, record.version);
        if peer.seen && at <= (peer.latest.epoch, peer.latest.version) {
            if record.epoch < peer.latest.epoch {
                return Ok(remember(&mut peer.ended, record));
            }
            return Ok(false);
        }
        if peer.seen {
            record.validate_successor(&peer.latest)?;
        }
        if record.epoch > peer.latest.epoch {
            // The genesis record stands for an epoch 1 that was never written only when the next
            // epoch says so (its previous epoch ended at version 0).
            if peer.seen || record.prev_final == 0 {
                remember(&mut peer.ended, peer.latest.clone());
            }
        }
        peer.seen = true;
        peer.latest = record;
        Ok(true)
    }

    /// Keeps `record`, the last record of one of this Region's own ended epochs that the store
    /// still keeps (`read_all` returns them), to value the estates that inherited from that
    /// epoch ([`LimitCtx::folded`]): a daemon that restarted holds only its latest record
    /// otherwise, and counts such an inheritance as nothing (room under the limit, never over).
    /// Returns whether it was kept. Refused: another Region's record, one of the current epoch or
    /// a later one, one that is not its epoch's last as far as this Region knows, or an invalid
    /// one.
    pub fn remember_own(&mut self, record: Arc<RegionRecord>) -> Result<bool, RecordError> {
        let contradiction = |what| Err(RecordError::Contradiction { limit: None, what });
        if record.region != self.me {
            return contradiction("another Region's record, handed over as this Region's own");
        }
        record.validate_fields(&self.d)?;
        if record.epoch >= self.own.epoch {
            return contradiction("not an ended epoch of this Region");
        }
        if record.epoch + 1 == self.own.epoch && record.version != self.own.prev_final {
            return contradiction("not the last record of this Region's previous epoch");
        }
        if self.own_ended.get(&record.epoch).map(|r| r.version) == Some(record.version) {
            // Handed over again at every read: held already, checked when it was taken.
            return Ok(false);
        }
        self.note_final(record.epoch, record.version);
        self.note_final(record.epoch.saturating_sub(1), record.prev_final);
        Ok(remember(&mut self.own_ended, record))
    }

    /// Records that this Region's epoch `epoch` ended at `version` (epoch 0 is none).
    fn note_final(&mut self, epoch: u64, version: u64) {
        if epoch > 0 {
            self.own_finals.insert(epoch, version);
        }
    }

    /// The oldest epoch of peer `j` that this Region may still close or settle (from the epoch it
    /// marks, or accounts with if older, on); the records of earlier epochs that a record kept
    /// here refers to are kept too ([`Self::referenced`]).
    fn keep_from(&self, j: RegionId) -> u64 {
        let acct = self.own.peer_epochs[j];
        match self.own.reclaims[j] {
            Some(m) => m.epoch.min(acct),
            None => acct,
        }
    }

    /// The epochs of every Region that the records this Region acts on refer to: from its own
    /// record, its peers' newest and the ended ones it may still close or settle, through the
    /// epochs each record marks as closed and the epochs it accounts with, as deep as an
    /// estate's worth follows them (its inheritances, `FOLD_DEPTH` deep, and what the epochs
    /// they account with took of their grants). Valuing an estate needs those records; one
    /// valued without them counts less than it is worth, and a part settled down by what was
    /// forgotten, once its mark moves on, leaves the rest with nobody (fresh swarm seed
    /// 77053068: an ended epoch's own last record, dropped once every heir had closed that
    /// epoch, was what said how much of an inherited estate's grants it took). The walk starts
    /// from what is kept anyway, so records that only refer to each other are dropped. Of a
    /// peer, every record from the oldest epoch referred to on is kept (`commit`).
    fn referenced(&self) -> Vec<BTreeSet<u64>> {
        let n = self.d.n();
        let mut refs = vec![BTreeSet::new(); n];
        let kept = self.peers.iter().enumerate().filter(|(_, p)| p.seen);
        let kept = kept.flat_map(|(j, p)| {
            let from = RegionId::new(j).map_or(u64::MAX, |j| self.keep_from(j));
            let ended = p.ended.range(from..).map(|(_, r)| &**r);
            std::iter::once(&*p.latest).chain(ended)
        });
        let mut frontier: Vec<&RegionRecord> = std::iter::once(&self.own).chain(kept).collect();
        for _ in 0..=crate::estate::FOLD_DEPTH {
            let mut next = Vec::new();
            for r in frontier {
                for j in crate::region::regions(n).filter(|&j| j != r.region) {
                    let mark = r.reclaims[j].map(|m| m.epoch);
                    for e in [Some(r.peer_epochs[j]), mark].into_iter().flatten() {
                        if e > 0 && refs[j.index()].insert(e) {
                            next.extend(self.held_record(j, e));
                        }
                    }
                }
            }
            frontier = next;
        }
        refs
    }

    /// The newest record of `j`'s epoch `epoch` held here, if any.
    fn held_record(&self, j: RegionId, epoch: u64) -> Option<&RegionRecord> {
        if j == self.me {
            return self.own_ended.get(&epoch).map(|r| &**r);
        }
        let p = self.peers.get(j.index()).filter(|p| p.seen)?;
        if p.latest.epoch == epoch {
            return Some(&p.latest);
        }
        p.ended.get(&epoch).map(|r| &**r)
    }

    /// Every peer as this Region last saw it.
    pub fn peers(&self) -> Vec<PeerView> {
        let mut out = Vec::new();
        for (i, p) in self.peers.iter().enumerate() {
            let Some(r) = RegionId::new(i) else { continue };
            if r == self.me {
                continue;
            }
            out.push(peer_view(
                &self.d,
                Some(&self.own),
                &p.latest,
                p.seen,
                p.silence.unchanged(),
            ));
        }
        out
    }

    /// Whether this daemon restarted within the resume window and has not rebalanced since: its
    /// epoch is resumed but not confirmed yet ([`Self::restart`]; its first rebalance confirms it
    /// or starts a new epoch). Read-only, for checkers.
    pub fn resume_unconfirmed(&self) -> bool {
        self.resumed_unconfirmed
    }

    /// Adopts a decision whose record was durably written.
    pub fn commit(&mut self, decision: &Decision) {
        let before = std::mem::replace(&mut self.own, decision.record.clone());
        if self.own.epoch > before.epoch {
            self.note_final(before.epoch, before.version);
            self.own_ended.insert(before.epoch, Arc::new(before));
        }
        self.resumed_unconfirmed = false;
        // As long as the stores keep them (a peer may yet close that epoch, and an estate that
        // inherited from it be valued), and while a record kept here refers to them (an estate
        // that inherited from them, or took grants of an estate one did: [`Self::referenced`]).
        let refs = self.referenced();
        let (n, me, now, peers) = (self.d.n(), self.me, self.own.epoch, &self.peers);
        let latest = |r: RegionId| {
            let p = peers.get(r.index())?;
            p.seen.then_some(&*p.latest)
        };
        (self.own_ended).retain(|&e, _| {
            refs[me.index()].contains(&e) || !crate::estate::closed_for_good(n, me, now, e, latest)
        });
        for (i, referred) in refs.iter().enumerate().take(self.peers.len()) {
            let Some(r) = RegionId::new(i) else { continue };
            // From the oldest epoch referred to on: a later epoch's record may carry the
            // referred epoch's account, frozen (`LimitCtx::counterpart`).
            let keep_from =
                (referred.first().copied()).map_or(self.keep_from(r), |e| e.min(self.keep_from(r)));
            let acct = self.own.peer_epochs[r];
            let p = &mut self.peers[i];
            p.ended.retain(|&e, _| e >= keep_from);
            p.abandon = p.abandon.filter(|&e| e >= acct);
        }
    }

    /// An operator's recovery from `waiting_for_record:<peer>` (docs/PROTOCOL.md, "Giving up on
    /// a lost record"): this Region stops waiting for the last record of `peer`'s ended epoch
    /// `epoch` and, at its next rebalance, accounts with the next epoch. It takes nothing of that
    /// epoch (no portion, none of its grants) and takes back none of its own grants to it: the
    /// room it would have settled stays with nobody, under the limit, and is never created twice.
    /// Refused unless this Region is waiting for exactly that record, and when it reclaimed that
    /// epoch from an older record (what it took from that record stands until it settles against
    /// the last one; giving up would keep it).
    pub fn abandon(&mut self, peer: RegionId, epoch: u64) -> Result<(), AbandonRefused> {
        if peer == self.me || peer.index() >= self.d.n() {
            return Err(AbandonRefused::NotAPeer);
        }
        let acct = self.own.peer_epochs[peer];
        if !self.waits_for_record(peer, &self.own) {
            return Err(AbandonRefused::NotWaiting {
                accounts_with: acct,
            });
        }
        if epoch != acct {
            return Err(AbandonRefused::OtherEpoch { waiting_for: acct });
        }
        if self.own.mark_on_accounted(peer).is_some() {
            return Err(AbandonRefused::Reclaimed { epoch: acct });
        }
        self.peers[peer.index()].abandon = Some(epoch);
        Ok(())
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

        let fenced = d.fence == Fence::OwnUnhealthy
            && d.policy != SilentPolicy::Freeze
            && inputs.health[me] == Health::Unhealthy;
        // A Region whose fence lifts may have been reclaimed meanwhile: a peer cut off from it
        // counted it silent and read the same unhealthy verdict, and the cut may hide the mark.
        // Raising its old share again from its pool would hold that room twice, so it comes
        // back as a reclaimed Region does (its peers close the ended epoch when they see the
        // new one, or settle the close they made).
        let resume_in_doubt = self.resumed_unconfirmed && self.resume_in_doubt(inputs.health);
        if self.was_reclaimed() || (self.own.fenced && !fenced) || resume_in_doubt {
            start_new_epoch(&mut rec, self.own.version);
            alarms.new_epoch = true;
        }
        rec.fenced = fenced;
        self.read_peers(&mut rec, inputs.health);
        alarms.fenced = fenced;
        let mut plans = self.plan(&rec, inputs.health, fenced, &mut alarms);
        for (p, s) in self.published.0.iter_mut().zip(rec.seen.0) {
            *p = (*p).max(s);
        }
        alarms.stale_view = d.n() > 1
            && crate::region::regions(d.n())
                .filter(|&r| r != me)
                .all(|r| self.peers[r.index()].silence.unchanged() > 0);
        let not_closed = self.not_closed(rec.epoch);
        let earlier_epochs_closed = not_closed.is_empty();
        self.defer_mark_moves(&rec, &mut plans, fenced, &mut alarms);
        let ctx = LimitCtx {
            d: &d,
            me,
            peers: &self.peers,
            plans: &plans,
            fenced,
            earlier_epochs_closed,
            own_ended: self.own_ended_at(rec.epoch),
        };
        let mut rules = Vec::with_capacity(d.limits.len());
        let mut outcomes = Vec::new();
        rec.limits
            .resize(d.limits.len().max(rec.limits.len()), LimitRecord::default());
        for (li, spec) in d.limits.iter().enumerate() {
            let demand = inputs.demand.get(li).copied().unwrap_or_default();
            let (e, out) = ctx.rebalance_limit(li, spec, demand, &rec, &mut alarms);
            rec.limits[li] = e;
            rules.push(Rule::at(spec, e.share));
            if inputs.explain {
                outcomes.push(out);
            }
        }
        if !alarms.raises_waiting.is_empty() {
            alarms.raise_waits_for = not_closed;
        }
        apply_marks(&mut rec, &plans);
        Decision {
            record: rec,
            rules,
            outcomes,
            alarms,
        }
    }

    /// The last records of this Region's epochs before `epoch` (the epoch of the record a
    /// rebalance builds) that it holds: with the committed record when this rebalance starts a
    /// new epoch.
    fn own_ended_at(&self, epoch: u64) -> OwnEnded<'_> {
        OwnEnded {
            kept: &self.own_ended,
            finals: &self.own_finals,
            current: (epoch > self.own.epoch).then_some(&self.own),
        }
    }

    /// The peers whose latest record does not account with this Region's epoch `epoch` yet.
    fn not_closed(&self, epoch: u64) -> Vec<RegionId> {
        crate::region::regions(self.d.n())
            .filter(|&r| r != self.me)
            .filter(|&r| self.peers[r.index()].latest.peer_epochs[self.me] < epoch)
            .collect()
    }

    /// Defers by one rebalance each close that would move this Region's mark off an ended
    /// estate whose part still moves ([`deferred_mark_moves`]).
    fn defer_mark_moves(
        &self,
        rec: &RegionRecord,
        plans: &mut [Option<plans::Plan>],
        fenced: bool,
        alarms: &mut Alarms,
    ) {
        let deferred = {
            let ctx = LimitCtx {
                d: &self.d,
                me: self.me,
                peers: &self.peers,
                plans,
                fenced,
                earlier_epochs_closed: true,
                own_ended: self.own_ended_at(rec.epoch),
            };
            deferred_mark_moves(&ctx, rec, plans)
        };
        for &j in &deferred {
            if let Some(p) = plans[j.index()].as_mut() {
                p.closure = plans::Closure::None;
                p.state = PeerState::Silent;
            }
        }
        alarms.reclaimed.retain(|r| !deferred.contains(r));
    }

    /// Whether a peer's latest record says it reclaimed this Region's current epoch.
    /// Whether a resumed epoch may have been closed already (docs/PROTOCOL.md, "Return"): a
    /// peer may close it once it has counted it silent, from the last change of it that peer
    /// saw, and read it unhealthy. The resume window only bounds that for a peer that saw the
    /// last durable record or the one before it, so every peer must show so in the record this
    /// Region holds of it (`seen`), or read unhealthy (lost: it closes nothing; a false verdict
    /// is residual risk 1). A peer never heard of, or whose writer did not say what it saw,
    /// leaves the resume in doubt. No peer reclaims under `freeze`.
    fn resume_in_doubt(&self, health: &PerRegion<Health>) -> bool {
        if self.d.policy == SilentPolicy::Freeze {
            return false;
        }
        let me = self.me;
        let since = (self.own.epoch, self.own.version.saturating_sub(1));
        self.peers.iter().enumerate().any(|(i, p)| {
            let Some(r) = RegionId::new(i).filter(|&r| r != me) else {
                return false;
            };
            let saw = p.seen && p.latest.seen[me] >= since;
            !saw && health[r] != Health::Unhealthy
        })
    }

    fn was_reclaimed(&self) -> bool {
        let me = self.me;
        self.peers.iter().enumerate().any(|(i, p)| {
            i != me.index()
                && p.seen
                && p.latest.reclaims[me].is_some_and(|m| m.epoch >= self.own.epoch)
        })
    }

    /// This rebalance's read of the peers: their silence counted, what the record says it holds
    /// of each (`seen`) and which of them it freezes.
    fn read_peers(&mut self, rec: &mut RegionRecord, health: &PerRegion<Health>) {
        self.count_silence();
        for (i, p) in self.peers.iter().enumerate() {
            if i != self.me.index() && p.seen {
                rec.seen.0[i] = (p.latest.epoch, p.latest.version);
            }
        }
        self.freeze_peers(rec, health);
    }

    fn count_silence(&mut self) {
        for (i, p) in self.peers.iter_mut().enumerate() {
            if i == self.me.index() || !p.seen {
                continue;
            }
            p.silence.read(Some((p.latest.epoch, p.latest.version)));
        }
    }
}

/// The peers whose close this rebalance defers by one: a close that would move this Region's
/// mark off an ended estate whose part still moves. This rebalance settles that estate with the
/// mark still on it (so that its record says what it inherited from it); the close comes next.
fn deferred_mark_moves(
    ctx: &LimitCtx<'_>,
    rec: &RegionRecord,
    plans: &[Option<plans::Plan>],
) -> Vec<RegionId> {
    plans
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let j = RegionId::new(i)?;
            let moves = matches!(
                p.as_ref()?.closure,
                plans::Closure::Reclaim(_) | plans::Closure::Switch { close: true, .. }
            );
            (moves && ctx.ended_part_moves(j, rec)).then_some(j)
        })
        .collect()
}

/// Peer `r`'s genesis record, the entry a peer starts from. The slot of `me` itself is never
/// read (every reader skips it; the own record is `own`), so it keeps the header alone: its
/// per-limit entries would hold a whole record's worth of memory for nothing (30 MB at 100,000
/// limits).
fn peer_genesis(d: &Deployment, r: RegionId, me: RegionId) -> RegionRecord {
    let genesis = RegionRecord::genesis(d, r);
    if r != me {
        return genesis;
    }
    RegionRecord {
        limits: Vec::new().into(),
        ..genesis
    }
}

/// A Region that may have been reclaimed comes back with nothing (SPEC §6, "Return"). The version
/// keeps rising; limit versions are kept because the room of those versions is accounted for
/// (held by the survivors that reclaimed it). Every account with a peer is kept, frozen, with the
/// epoch it belongs to (`account_epochs`): its grants in flight are that epoch's estate's now,
/// and the counters say what it took; what this Region inherited from each estate it marks
/// (`reclaimed`, `debt_taken`, `left`) stays with the mark, whatever epoch it is in.
fn start_new_epoch(rec: &mut RegionRecord, last_version: u64) {
    rec.epoch += 1;
    rec.prev_final = last_version;
    // A new epoch holds nothing, so there is no fence to lift: a restart in a new epoch of a
    // Region that was fenced must not start yet another one at its first rebalance (that epoch
    // would have no record, and its successor's `prev_final` would name the wrong one).
    rec.fenced = false;
    for l in rec.limits.iter_mut() {
        *l = LimitRecord {
            limit_version: l.limit_version,
            rate: l.rate,
            granted: l.granted,
            taken: l.taken,
            reclaimed: l.reclaimed,
            debt_taken: l.debt_taken,
            left: l.left,
            ..LimitRecord::default()
        };
    }
}

/// The last records of a Region's ended epochs that a rebalance holds (`LimitCtx::folded`).
#[derive(Clone, Copy)]
pub(super) struct OwnEnded<'a> {
    kept: &'a BTreeMap<u64, Arc<RegionRecord>>,
    finals: &'a BTreeMap<u64, u64>,
    /// The committed record, when the rebalance starts a new epoch.
    current: Option<&'a RegionRecord>,
}

impl<'a> OwnEnded<'a> {
    /// The last record of ended epoch `epoch`, if held.
    pub(super) fn get(&self, epoch: u64) -> Option<&'a RegionRecord> {
        match self.current {
            Some(r) if r.epoch == epoch => Some(r),
            _ => self.kept.get(&epoch).map(|r| &**r),
        }
    }

    /// The last version of ended epoch `epoch`, if known.
    pub(super) fn final_version(&self, epoch: u64) -> Option<u64> {
        match self.current {
            Some(r) if r.epoch == epoch => Some(r.version),
            _ => self.finals.get(&epoch).copied(),
        }
    }
}

// A coordinator may move between threads and be shared (the daemon's task, the fuzzer's jobs).
const _: () = {
    const fn is<T: Send + Sync>() {}
    is::<Coordinator>()
};

impl std::hash::Hash for Coordinator {
    /// Hashes the protocol state (not the deployment): the model checker's state identity.
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.me.hash(h);
        self.own.hash(h);
        self.peers.hash(h);
        self.published.hash(h);
        self.own_ended.hash(h);
        self.own_finals.hash(h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estate::tests::{deployment_with, id};

    /// A daemon that restarted reads its own ended epochs' last records back from the store
    /// (`remember_own`): it keeps its previous epoch's last record and refuses what is not one.
    #[test]
    fn a_restarted_region_keeps_only_its_own_ended_epochs_last_records() {
        let d = Arc::new(deployment_with(vec![]));
        let mut last = RegionRecord::genesis(&d, id(0));
        last.version = 9;
        let c = Coordinator::restart(d.clone(), id(0), Some(last.clone()), u64::MAX);
        assert_eq!(c.own().epoch, 2, "down past the resume window: a new epoch");
        assert!(
            c.own_ended_at(2).get(1).is_some(),
            "the durable record is epoch 1's last"
        );

        let mut c = Coordinator::new(d.clone(), id(0), c.own().clone());
        assert!(
            c.own_ended_at(2).get(1).is_none(),
            "a plain resume holds no ended record"
        );
        assert_eq!(
            c.own_ended_at(2).final_version(1),
            Some(9),
            "but knows where it ended"
        );
        let refused = |c: &mut Coordinator, r: RegionRecord| c.remember_own(Arc::new(r)).is_err();
        let mut other = last.clone();
        other.region = id(1);
        assert!(refused(&mut c, other), "another Region's record");
        let mut current = last.clone();
        current.epoch = 2;
        assert!(refused(&mut c, current), "a record of the current epoch");
        let mut earlier = last.clone();
        earlier.version = 8;
        assert!(
            refused(&mut c, earlier),
            "not the last record of the previous epoch"
        );
        assert_eq!(c.remember_own(Arc::new(last)), Ok(true));
        assert!(c.own_ended_at(2).get(1).is_some());
    }
}
