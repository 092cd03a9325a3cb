//! One Region's side of the protocol: the rebalance of SPEC §4 and the silent-Region rules of §6.
//!
//! Estates of ended epochs are split by the fixed, view-independent rule of [`crate::estate`].

use crate::config::{Deployment, Design, Fence, LimitKind, LimitSpec, SilentPolicy};
use crate::estate::{estate_debt, estate_room, heir_portion};
use crate::record::{LimitRecord, ReclaimMark, RecordError, RegionRecord};
use crate::region::{PerRegion, RegionId, MAX_REGIONS};
use crate::room::{split, Room};
use std::collections::BTreeMap;
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

impl Rule {
    /// The rule of limit `spec` at share `rate`: its bucket holds `burst_ms` of it.
    pub fn at(spec: &LimitSpec, rate: Room) -> Rule {
        Rule {
            rate,
            burst: rate.mul_div(spec.burst_ms, 1000),
            shadow: spec.shadow,
        }
    }

    /// The rules a written record stands for, one per limit of `d` (a limit the record does not
    /// hold yet at zero): what a replica that does not lead serves.
    pub fn of_record(d: &Deployment, record: &RegionRecord) -> Vec<Rule> {
        d.limits
            .iter()
            .enumerate()
            .map(|(i, spec)| Rule::at(spec, record.limits.get(i).map_or(Room::ZERO, |l| l.share)))
            .collect()
    }

    /// What may reach the gateways before a decision is written (SPEC §7, docs/SPEC.md D8): a
    /// lowered share is safe at once, a raised one only once the record that raises it is
    /// durable (a peer may take the room it came from only after reading that record). So: every
    /// limit at the lower of what the gateways run (`published`) and what was `decided`. `None`
    /// when nothing is lower, or when the two do not cover the same limits (a reload between the
    /// two: the full rule set follows the write). A limit that is not lowered keeps its
    /// published rule exactly (recomputing its burst could round it differently and change a
    /// rule set for nothing); the shadow flag is the decided one.
    pub fn before_write(published: &[Rule], decided: &[Rule]) -> Option<Vec<Rule>> {
        if published.len() != decided.len() {
            return None;
        }
        let mut any = false;
        let rules = decided
            .iter()
            .zip(published)
            .map(|(r, cur)| {
                if r.rate < cur.rate {
                    any = true;
                    *r
                } else {
                    Rule {
                        shadow: r.shadow,
                        ..*cur
                    }
                }
            })
            .collect();
        any.then_some(rules)
    }

    /// What a Region that cannot prove it still holds its room pushes before anything else (a
    /// new epoch, SPEC §7): every capacity limit at zero, every security limit at its static
    /// split.
    pub fn zeroed(d: &Deployment, me: RegionId) -> Vec<Rule> {
        d.limits
            .iter()
            .map(|spec| {
                let rate = match spec.kind {
                    LimitKind::Capacity => Room::ZERO,
                    LimitKind::Security { .. } => spec.security_share(d.n(), me),
                };
                Rule::at(spec, rate)
            })
            .collect()
    }
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
    /// Room received by closing or settling a peer's estate (portion and grants taken back);
    /// a settlement that paid room back shows as zero.
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
    /// Peers whose estate this rebalance closed (reclaimed, or closed on their return).
    pub reclaimed: Vec<RegionId>,
    /// Peers whose estate this rebalance settled again against a newer record.
    pub settled: Vec<RegionId>,
    /// Peers that began a newer epoch whose ended epoch this Region cannot close yet, because the
    /// last record of that epoch has not reached it: their old room is frozen (held by nobody)
    /// until it does. Lasting, it is stranded room, and an operator should look.
    pub waiting_for_record: Vec<RegionId>,
    /// Silent peers whose check reads unhealthy that this Region does not reclaim yet, because
    /// the newest record it has of them may not be their newest (docs/PROTOCOL.md, "Reclaim
    /// against the newest record"): it counts silent another peer whose check does not read
    /// unhealthy, or a peer it sees knows a newer record. Their room is held by nobody (under
    /// the limit) until the cut heals or that peer reads unhealthy too.
    pub reclaim_waiting: Vec<RegionId>,
    /// Peers whose ended epoch this rebalance stopped waiting for, as an operator asked
    /// ([`Coordinator::abandon`]): what it would have settled of it stays with nobody.
    pub abandoned: Vec<RegionId>,
    /// Limits whose new, higher rate this Region has not adopted yet because an earlier epoch
    /// of it may still owe its heirs (see [`Coordinator::rebalance`] and docs/PROTOCOL.md, "A
    /// raise after an unpaid lowering"): the raise's room stays unused, under the limit, until
    /// every peer accounts with this Region's current epoch.
    pub raises_waiting: Vec<usize>,
    /// The peers those raises wait for: their latest record does not account with this
    /// Region's current epoch yet. A peer that is down holds the raise back until its next epoch
    /// has closed this Region's earlier ones; lasting, an operator should look.
    pub raise_waits_for: Vec<RegionId>,
    /// Steps of this rebalance that changed the room they only move (a bug in the core, never
    /// a fault of the world): `(limit index, step)`. Each step that moves room within this
    /// Region's own account is checked against the quantity it must keep: taking grants keeps
    /// `held − Σ taken`, paying debt, lowering, raising and fencing keep `held`, granting keeps
    /// `held + Σ granted`. The fuzzer and the model checker fail at the first; the daemon shows
    /// `room_not_conserved:<limit>:<step>`. The decision is returned all the same: which room
    /// is right cannot be known here, and the physical audit judges the whole.
    pub not_conserved: Vec<(usize, &'static str)>,
}

/// The steps [`Alarms::not_conserved`] names.
pub mod step {
    pub const TAKE: &str = "take";
    pub const PAY_DEBT: &str = "pay_debt";
    pub const FENCE: &str = "fence";
    pub const LOWER_OR_RAISE: &str = "lower_or_raise";
    pub const GRANT: &str = "grant";
}

/// `held − Σ taken`: what taking a grant keeps (the room arrives as it is counted taken).
fn held_less_taken(e: &LimitRecord) -> i128 {
    e.held() - e.taken.0.iter().map(|t| t.0 as i128).sum::<i128>()
}

/// `held + Σ granted`: what granting keeps (the room leaves as it is counted granted).
fn held_and_granted(e: &LimitRecord) -> i128 {
    e.held() + e.granted.0.iter().map(|g| g.0 as i128).sum::<i128>()
}

/// Runs `step` on `e` and names it in `alarms` if it changed what `kept` measures.
fn checked(
    alarms: &mut Alarms,
    li: usize,
    name: &'static str,
    e: &mut LimitRecord,
    kept: fn(&LimitRecord) -> i128,
    step: impl FnOnce(&mut LimitRecord),
) {
    let before = kept(e);
    step(e);
    if kept(e) != before {
        alarms.not_conserved.push((li, name));
    }
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

/// Step 2's targets (SPEC §4) of the Regions whose demands are `weights`, into `out` (as long):
/// `floor + (rate − floor × n) × demand_i / Σ demand`, split exactly (largest remainder). A floor
/// that the rate cannot give every Region is lowered to `rate / n`. The coordinator computes each
/// share's target with it, and the simulator its ideal end state.
pub fn targets(rate: Room, floor: Room, weights: &[u64], out: &mut [Room]) {
    let n = weights.len().min(out.len());
    if n == 0 {
        return;
    }
    let floor = if floor.0.saturating_mul(n as u64) > rate.0 {
        Room(rate.0 / n as u64)
    } else {
        floor
    };
    let rest = Room(rate.0 - floor.0 * n as u64);
    split(rest, &weights[..n], &mut out[..n]);
    for t in out[..n].iter_mut() {
        *t += floor;
    }
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
/// The coordinator reports its peers by this rule ([`Coordinator::peers`]), and a replica that
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
struct Peer {
    /// False until a record of the peer was observed; `latest` is then its genesis record, which
    /// is never reclaimed (the peer may have written records this Region has not seen).
    seen: bool,
    latest: Arc<RegionRecord>,
    /// Own rebalances in a row at which `latest` had not changed.
    silence: Silence,
    /// The newest record seen of every epoch older than `latest`'s that this Region may still
    /// have to close or settle (the store keeps every ended epoch's last record until its heirs
    /// have marked it).
    ended: BTreeMap<u64, Arc<RegionRecord>>,
    /// The ended epoch an operator asked this Region to stop waiting for, until a rebalance
    /// acts on it.
    abandon: Option<u64>,
}

impl Peer {
    /// The newest record seen of the peer's epoch `epoch`.
    fn newest_of(&self, epoch: u64) -> Option<&Arc<RegionRecord>> {
        if self.latest.epoch == epoch {
            Some(&self.latest)
        } else {
            self.ended.get(&epoch)
        }
    }

    /// The version of the last record of epoch `epoch`, once a later epoch's record tells it.
    fn final_version(&self, epoch: u64) -> Option<u64> {
        if self.latest.epoch == epoch + 1 {
            return Some(self.latest.prev_final);
        }
        self.ended.get(&(epoch + 1)).map(|r| r.prev_final)
    }
}

/// What this rebalance does about one peer's estate (at most one thing, so that a mark names
/// one epoch at a time).
#[derive(Clone)]
enum Closure {
    None,
    /// Reclaim: take the peer's grants, take own grants back and its fixed portion, from this
    /// record of the peer's current epoch.
    Reclaim(Arc<RegionRecord>),
    /// The peer's accounted epoch ended: close it from `last`, its last record (unless it was
    /// closed already: `close` false), settle an account carried from an earlier epoch of this
    /// Region against it, and account with the next epoch.
    Switch {
        last: Arc<RegionRecord>,
        close: bool,
    },
    /// Settle the last close again against this newer record of the same epoch.
    Settle(Arc<RegionRecord>),
    /// An operator gave up on the last record of the peer's ended epoch, which never reached
    /// this Region ([`Coordinator::abandon`]): account with the next epoch, taking nothing.
    Abandon,
}

/// This rebalance's plan for one peer.
#[derive(Clone)]
struct Plan {
    state: PeerState,
    closure: Closure,
    /// The account carried from an earlier epoch of this Region was settled by the peer (its
    /// record closed that epoch): clear it and account from this epoch on.
    drop_carried: bool,
    /// Silent and unhealthy, but not reclaimed: the basis may be stale.
    reclaim_waits: bool,
}

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
}

impl Coordinator {
    /// A Region that resumes from `own`, its last durably written record. Peers start from their
    /// genesis records until their own records are observed.
    pub fn new(d: Arc<Deployment>, me: RegionId, own: RegionRecord) -> Coordinator {
        let peers = crate::region::regions(d.n())
            .map(|r| Peer {
                seen: false,
                latest: Arc::new(RegionRecord::genesis(&d, r)),
                silence: Silence::default(),
                ended: BTreeMap::new(),
                abandon: None,
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
        let safe_ms = Self::resume_window_ms(&d);
        let mut c = Coordinator::new(d, me, own);
        if down_ms >= safe_ms {
            let last = c.own.version;
            start_new_epoch(&mut c.own, last);
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
        let keep_from = self.keep_from(j);
        let Some(peer) = self.peers.get_mut(j.index()) else {
            return Err(RecordError::UnknownRegion(j.index()));
        };
        let at = (record.epoch, record.version);
        if peer.seen && at <= (peer.latest.epoch, peer.latest.version) {
            if record.epoch < peer.latest.epoch && record.epoch >= keep_from {
                return Ok(remember(&mut peer.ended, record));
            }
            return Ok(false);
        }
        if peer.seen {
            record.validate_successor(&peer.latest)?;
        }
        if record.epoch > peer.latest.epoch && peer.latest.epoch >= keep_from {
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

    /// The oldest epoch of peer `j` that this Region may still close or settle.
    fn keep_from(&self, j: RegionId) -> u64 {
        let acct = self.own.peer_epochs[j];
        match self.own.reclaims[j] {
            Some(m) => m.epoch.min(acct),
            None => acct,
        }
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

    /// Adopts a decision whose record was durably written.
    pub fn commit(&mut self, decision: &Decision) {
        self.own = decision.record.clone();
        for i in 0..self.peers.len() {
            let Some(r) = RegionId::new(i) else { continue };
            let keep_from = self.keep_from(r);
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
        if self.was_reclaimed() || (self.own.fenced && !fenced) {
            start_new_epoch(&mut rec, self.own.version);
            alarms.new_epoch = true;
        }
        rec.fenced = fenced;
        self.count_silence();
        for (i, p) in self.peers.iter().enumerate() {
            if i != me.index() && p.seen {
                rec.seen.0[i] = (p.latest.epoch, p.latest.version);
            }
        }
        alarms.fenced = fenced;
        let plans = self.plan(&rec, inputs.health, fenced, &mut alarms);
        alarms.stale_view = d.n() > 1
            && crate::region::regions(d.n())
                .filter(|&r| r != me)
                .all(|r| self.peers[r.index()].silence.unchanged() > 0);
        let not_closed: Vec<RegionId> = crate::region::regions(d.n())
            .filter(|&r| r != me)
            .filter(|&r| self.peers[r.index()].latest.peer_epochs[me] < rec.epoch)
            .collect();
        let earlier_epochs_closed = not_closed.is_empty();
        let ctx = LimitCtx {
            d: &d,
            me,
            peers: &self.peers,
            plans: &plans,
            fenced,
            earlier_epochs_closed,
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
            p.silence.read(Some((p.latest.epoch, p.latest.version)));
        }
    }

    /// This rebalance's plan for every peer (indexed by Region; `None` for this Region).
    fn plan(
        &self,
        rec: &RegionRecord,
        health: &PerRegion<Health>,
        fenced: bool,
        alarms: &mut Alarms,
    ) -> Vec<Option<Plan>> {
        let d = &self.d;
        let mut plans = vec![None; d.n()];
        for j in crate::region::regions(d.n()).filter(|&r| r != self.me) {
            let plan = self.plan_peer(j, rec, health, fenced);
            match &plan.closure {
                Closure::Reclaim(_) | Closure::Switch { close: true, .. } => {
                    alarms.reclaimed.push(j)
                }
                Closure::Settle(_) => alarms.settled.push(j),
                Closure::Abandon => alarms.abandoned.push(j),
                _ => {}
            }
            if plan.reclaim_waits {
                alarms.reclaim_waiting.push(j);
            }
            if !matches!(plan.closure, Closure::Abandon) && self.waits_for_record(j, rec) {
                alarms.waiting_for_record.push(j);
            }
            plans[j.index()] = Some(plan);
        }
        plans
    }

    fn plan_peer(
        &self,
        j: RegionId,
        rec: &RegionRecord,
        health: &PerRegion<Health>,
        fenced: bool,
    ) -> Plan {
        let p = &self.peers[j.index()];
        // The peer's epoch moved on past the epoch whose account this Region carries: it settled
        // that account against the ended epoch's last record (took what it granted and took back
        // its own grants), in the epoch the account is with. A mark alone is not enough: the
        // peer's epoch may end before it settles, and its later epochs never take grants.
        let drop_carried = p.seen
            && rec.carries_open(j)
            && p.latest.epoch == rec.peer_epochs[j]
            && p.latest.peer_epochs[self.me] > rec.account_epochs[j];
        let plan = |state, closure| Plan {
            state,
            closure,
            drop_carried,
            reclaim_waits: false,
        };
        if !p.seen {
            // Never heard of: kept in targets at its genesis demand, never a grantee, never
            // reclaimed.
            return plan(PeerState::Silent, Closure::None);
        }
        let acct = rec.peer_epochs[j];
        let mark = rec.mark_on_accounted(j);
        if p.latest.epoch > acct {
            // The accounted epoch ended. Its last record is known exactly (the next epoch names
            // its version); close against that record and nothing older.
            let Some(last) = p
                .final_version(acct)
                .and_then(|v| p.newest_of(acct).filter(|r| r.version == v))
            else {
                if p.abandon == Some(acct) && mark.is_none() {
                    return plan(PeerState::Live, Closure::Abandon);
                }
                return plan(PeerState::Silent, Closure::None);
            };
            return match mark {
                Some(m) if m.version < last.version => {
                    plan(PeerState::Silent, Closure::Settle(last.clone()))
                }
                Some(_) => plan(
                    PeerState::Live,
                    Closure::Switch {
                        last: last.clone(),
                        close: false,
                    },
                ),
                None => plan(
                    PeerState::Live,
                    Closure::Switch {
                        last: last.clone(),
                        close: true,
                    },
                ),
            };
        }
        if let Some(m) = mark {
            return match p.newest_of(acct) {
                Some(newer) if newer.version > m.version => {
                    plan(PeerState::Reclaimed, Closure::Settle(newer.clone()))
                }
                _ => plan(PeerState::Reclaimed, Closure::None),
            };
        }
        let silent = p.silence.unchanged() >= self.d.silent_after;
        // A fenced Region is itself suspect (its own check says unhealthy): it reclaims nobody,
        // or two Regions cut off from each other and both wrongly called unhealthy would reclaim
        // each other.
        let reclaim = silent && !fenced && reclaimable(self.d.policy, health[j]);
        if reclaim && !self.basis_in_doubt(j, &p.latest, health) {
            plan(PeerState::Reclaimed, Closure::Reclaim(p.latest.clone()))
        } else if silent {
            Plan {
                reclaim_waits: reclaim,
                ..plan(PeerState::Silent, Closure::None)
            }
        } else {
            plan(PeerState::Live, Closure::None)
        }
    }

    /// Whether `basis`, the newest record of `j` this Region has, may not be the newest `j` wrote
    /// (two-signals only; docs/PROTOCOL.md, "Reclaim against a causally closed basis"). An estate
    /// closed against an older record than its newest one hands its heir a portion of room the
    /// estate may have granted on since, to Regions that hold it too. The heir closes only a
    /// basis that is causally closed in what it can know:
    ///
    /// - no record it holds refers to a newer record of `j`'s epoch: whatever the state of the
    ///   Region that wrote it (fresh, silent or lost: a record lost with its writer is evidence
    ///   all the same), no record marks a newer version of the epoch, accounts with a newer epoch
    ///   of `j`, or, on an account open on both sides, took more from `j` than `basis` granted it;
    /// - no Region whose records it may not hold may be alive: another peer silent here whose
    ///   verdict is not unhealthy (healthy or unknown) may be on the far side of a cut, where the
    ///   estate's later records went. (A peer never heard of holds nothing and is not counted.)
    ///
    /// Waiting leaves the estate's room unheld (under the limit, never over) until the records
    /// arrive or the other silent peer reads unhealthy too.
    fn basis_in_doubt(
        &self,
        j: RegionId,
        basis: &RegionRecord,
        health: &PerRegion<Health>,
    ) -> bool {
        if self.d.policy != SilentPolicy::TwoSignals {
            return false;
        }
        let d = &self.d;
        crate::region::regions(d.n())
            .filter(|&k| k != self.me && k != j)
            .any(|k| {
                let q = &self.peers[k.index()];
                q.seen
                    && ((q.silence.unchanged() >= d.silent_after && health[k] != Health::Unhealthy)
                        || std::iter::once(&q.latest)
                            .chain(q.ended.values())
                            .any(|other| knows_newer(other, j, basis)))
            })
    }

    /// A peer began a newer epoch but the last record of the epoch this Region accounts with has
    /// not reached it (so that epoch's room can be neither closed nor settled).
    fn waits_for_record(&self, j: RegionId, rec: &RegionRecord) -> bool {
        let p = &self.peers[j.index()];
        let acct = rec.peer_epochs[j];
        p.seen
            && p.latest.epoch > acct
            && p.final_version(acct)
                .is_none_or(|v| p.newest_of(acct).is_none_or(|r| r.version != v))
    }
}

/// Keeps `record` as the newest known record of its (ended) epoch. Returns whether it was newer.
fn remember(ended: &mut BTreeMap<u64, Arc<RegionRecord>>, record: Arc<RegionRecord>) -> bool {
    match ended.get(&record.epoch) {
        Some(known) if known.version >= record.version => false,
        _ => {
            ended.insert(record.epoch, record);
            true
        }
    }
}

/// Whether `other`, a record of a third Region `k`, refers to a record of `j` newer than `basis`:
/// its writer had seen one, it accounts with a later epoch of `j`, it marks a newer version of
/// the epoch, or, on the same open account on both sides (neither has closed the other's epoch),
/// it took more from `j` than `basis` granted it (what `k` took never exceeds what `j` granted in
/// the record it took from). Only the first is needed of a writer that states what it saw; the
/// others are kept for records of writers that did not (`seen` of `(0, 0)`).
fn knows_newer(other: &RegionRecord, j: RegionId, basis: &RegionRecord) -> bool {
    let k = other.region;
    if other.seen[j] > (basis.epoch, basis.version) {
        return true;
    }
    if other.peer_epochs[j] != basis.epoch {
        return other.peer_epochs[j] > basis.epoch;
    }
    if other.reclaims[j].is_some_and(|m| m.epoch == basis.epoch && m.version > basis.version) {
        return true;
    }
    let same_account = basis.account_epochs[k] == other.peer_epochs[j]
        && basis.peer_epochs[k] == other.account_epochs[j]
        && basis.mark_on_accounted(k).is_none()
        && other.mark_on_accounted(j).is_none();
    same_account
        && other
            .limits
            .iter()
            .zip(&basis.limits)
            .any(|(o, b)| o.taken[j] > b.granted[k])
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
/// (held by the survivors that reclaimed it). Every account with a peer is kept with the epoch it
/// belongs to (`account_epochs`): one this Region's earlier epoch closed is settled later by this
/// Region, whatever epoch it is in by then; an open one is carried, frozen, until the peer
/// settles it or its epoch ends too and this Region takes back what the peer never took.
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
            ..LimitRecord::default()
        };
    }
}

/// Writes what the plans closed into the record: a mark for every close and settlement, and the
/// next accounted epoch for every switch.
fn apply_marks(rec: &mut RegionRecord, plans: &[Option<Plan>]) {
    for (i, p) in plans.iter().enumerate() {
        let (Some(p), Some(j)) = (p, RegionId::new(i)) else {
            continue;
        };
        if p.drop_carried {
            rec.account_epochs[j] = rec.epoch;
        }
        match &p.closure {
            Closure::None => {}
            Closure::Reclaim(basis)
            | Closure::Switch {
                last: basis,
                close: true,
            } => {
                rec.reclaims[j] = Some(ReclaimMark {
                    epoch: basis.epoch,
                    version: basis.version,
                    by: rec.epoch,
                });
            }
            Closure::Settle(newer) => {
                if let Some(m) = rec.reclaims[j].as_mut() {
                    m.version = newer.version;
                }
            }
            Closure::Switch { close: false, .. } | Closure::Abandon => {}
        }
        if let Closure::Switch { .. } | Closure::Abandon = p.closure {
            rec.peer_epochs[j] += 1;
            rec.account_epochs[j] = rec.epoch;
        }
    }
}

struct LimitCtx<'a> {
    d: &'a Deployment,
    me: RegionId,
    peers: &'a [Peer],
    plans: &'a [Option<Plan>],
    fenced: bool,
    /// Every peer's latest record accounts with this Region's current epoch: each has closed
    /// every earlier epoch of this Region and taken its part of any debt those epochs ended in.
    /// Until then this Region does not adopt a raise (see [`adopt`]).
    earlier_epochs_closed: bool,
}

impl LimitCtx<'_> {
    fn state(&self, j: RegionId) -> Option<PeerState> {
        self.plans.get(j.index())?.as_ref().map(|p| p.state)
    }

    fn closure(&self, j: RegionId) -> &Closure {
        const NONE: &Closure = &Closure::None;
        self.plans
            .get(j.index())
            .and_then(|p| p.as_ref())
            .map_or(NONE, |p| &p.closure)
    }

    fn drops_carried(&self, j: RegionId) -> bool {
        self.plans
            .get(j.index())
            .and_then(|p| p.as_ref())
            .is_some_and(|p| p.drop_carried)
    }

    /// Whether this Region's account with `j` belongs to its current epoch (after this
    /// rebalance's drop of a carried account the peer settled).
    fn account_is_current(&self, rec: &RegionRecord, j: RegionId) -> bool {
        rec.account_epochs[j] == rec.epoch || self.drops_carried(j)
    }

    /// Whether this Region's account with `j` is carried open from an earlier epoch.
    fn carries_open(&self, rec: &RegionRecord, j: RegionId) -> bool {
        rec.carries_open(j) && !self.drops_carried(j)
    }

    /// Clears every account carried from an earlier epoch that its peer settled. The portion
    /// this epoch reclaimed of the peer (if any) is kept for later settlements.
    fn drop_carried(&self, e: &mut LimitRecord) {
        for j in crate::region::regions(self.d.n()).filter(|&r| self.drops_carried(r)) {
            e.granted[j] = Room::ZERO;
            e.taken[j] = Room::ZERO;
        }
    }

    /// SPEC §4 for one limit, step by step: adopt the version rolled out, take the grants named
    /// to this Region, close and settle peers' estates, pay debt, aim at the target, move the
    /// share toward it and grant the pool. Every step that only moves room is checked
    /// ([`Alarms::not_conserved`]).
    fn rebalance_limit(
        &self,
        li: usize,
        spec: &LimitSpec,
        demand: Room,
        rec: &RegionRecord,
        alarms: &mut Alarms,
    ) -> (LimitRecord, LimitOutcome) {
        let mut e = rec.limits.get(li).copied().unwrap_or_default();
        let mut out = LimitOutcome {
            demand,
            share_before: e.share,
            ..LimitOutcome::default()
        };
        if adopt(
            spec,
            &mut e,
            self.d.n(),
            self.me,
            self.earlier_epochs_closed,
        ) == Adoption::RaiseWaits
        {
            alarms.raises_waiting.push(li);
        }
        e.demand = demand;
        if let LimitKind::Security { .. } = spec.kind {
            self.hold_security_share(spec, &mut e);
        } else {
            self.drop_carried(&mut e);
            checked(alarms, li, step::TAKE, &mut e, held_less_taken, |e| {
                self.take(li, rec, e, &mut out)
            });
            self.close(li, rec, &mut e, &mut out);
            self.settle(li, rec, &mut e, &mut out);
            checked(
                alarms,
                li,
                step::PAY_DEBT,
                &mut e,
                LimitRecord::held,
                pay_debt,
            );
            e.target = self.target(li, &e, demand);
            self.move_share(li, spec, rec, &mut e, &mut out, alarms);
            if self.seen_sum(li, e.share) > u128::from(e.rate.0) {
                alarms.sum_above_limit.push(li);
            }
        }
        out.target = e.target;
        out.share_after = e.share;
        out.pool_after = e.pool;
        out.unmet = e.unmet;
        (e, out)
    }

    /// A security limit is split statically (SPEC §5): no pool, no grants, nothing unmet.
    fn hold_security_share(&self, spec: &LimitSpec, e: &mut LimitRecord) {
        e.share = spec.security_share(self.d.n(), self.me);
        e.pool = Room::ZERO;
        e.target = e.share;
        e.unmet = Room::ZERO;
    }

    /// Steps 3 and 4: the share moves toward the target as the design says. Named grants lower
    /// it at once, raise it from the pool by at most the step cap, and grant the rest of the pool
    /// to the peers that need it; a fenced Region holds nothing (SPEC §6, "Fence").
    fn move_share(
        &self,
        li: usize,
        spec: &LimitSpec,
        rec: &RegionRecord,
        e: &mut LimitRecord,
        out: &mut LimitOutcome,
        alarms: &mut Alarms,
    ) {
        match self.d.design {
            Design::JumpToTarget => jump_to_target(e),
            Design::NamedGrants if self.fenced => {
                checked(alarms, li, step::FENCE, e, LimitRecord::held, fence)
            }
            Design::NamedGrants => {
                checked(
                    alarms,
                    li,
                    step::LOWER_OR_RAISE,
                    e,
                    LimitRecord::held,
                    |e| lower_or_raise(e, spec.step_cap),
                );
                // A Region in debt after a downgrade asks for its debt too; otherwise a Region
                // whose target is zero could never repay it.
                e.unmet = e.target - e.share + e.debt;
                checked(alarms, li, step::GRANT, e, held_and_granted, |e| {
                    self.grant(li, rec, e, out)
                });
            }
        }
    }

    /// Whether grants between this Region's current epoch and `peer`'s record count now: each
    /// accounts with the other's epoch, and this Region's account with `j` is not one carried
    /// from an earlier epoch.
    fn in_account(&self, rec: &RegionRecord, j: RegionId, peer: &RegionRecord) -> bool {
        peer.accounts_with(self.me, rec.epoch)
            && rec.peer_epochs[j] == peer.epoch
            && self.account_is_current(rec, j)
    }

    /// The peer record that this rebalance takes grants from, if any.
    fn source(&self, j: RegionId) -> Option<&Arc<RegionRecord>> {
        match self.closure(j) {
            Closure::Reclaim(b) => Some(b),
            Closure::Switch { last, close: true } => Some(last),
            Closure::Switch { close: false, .. } => None,
            Closure::Settle(_) | Closure::Abandon => None,
            Closure::None => match self.state(j) {
                Some(PeerState::Live | PeerState::Silent) => Some(&self.peers[j.index()].latest),
                _ => None,
            },
        }
    }

    /// Step 1: take every grant named to this Region's epoch that it has not taken before.
    fn take(&self, li: usize, rec: &RegionRecord, e: &mut LimitRecord, out: &mut LimitOutcome) {
        for j in crate::region::regions(self.d.n()).filter(|&r| r != self.me) {
            let Some(src) = self.source(j) else { continue };
            if !self.in_account(rec, j, src) {
                continue;
            }
            let Some(sl) = src.limits.get(li) else {
                continue;
            };
            let amount = sl.granted[self.me].excess_over(e.taken[j]);
            e.pool += amount;
            e.taken[j] += amount;
            out.taken[j] = amount;
        }
    }

    /// Closes each estate this rebalance closes: this Region's fixed portion of the basis
    /// record's room, and its own grants that the basis shows untaken back. The counters are left
    /// as the basis tells them (this Region took everything the estate granted it, and the estate
    /// took exactly what the basis says), so a settlement later needs only the newer record.
    /// A switch whose old epoch was closed before starts the account with the next epoch afresh.
    ///
    /// An account carried open from an earlier epoch of this Region is settled only against the
    /// peer epoch's last record, at the switch: this Region takes back what its earlier epoch
    /// granted and the peer's epoch never took; what the peer's epoch granted the earlier one is
    /// the peer's successor's to take back in turn. A reclaim takes the portion only and leaves
    /// the carried account frozen until then.
    fn close(&self, li: usize, rec: &RegionRecord, e: &mut LimitRecord, out: &mut LimitOutcome) {
        let n = self.d.n();
        for j in crate::region::regions(n).filter(|&r| r != self.me) {
            let (basis, switch) = match self.closure(j) {
                Closure::Reclaim(b) => (b, false),
                Closure::Switch { last, close: true } => (last, true),
                Closure::Switch { last, close: false } => {
                    let back = self.carried_back(li, rec, e, j, last);
                    e.pool += back;
                    out.reclaimed[j] = back;
                    reset_account(e, j);
                    continue;
                }
                Closure::Abandon => {
                    // Nothing moves: grants in flight either way stay with nobody.
                    reset_account(e, j);
                    continue;
                }
                _ => continue,
            };
            let src = basis.limits.get(li).copied().unwrap_or_default();
            let portion = heir_portion(estate_room(&src), n, j, self.me);
            let owed = heir_portion(estate_debt(&src), n, j, self.me);
            let mut back = Room::ZERO;
            if self.carries_open(rec, j) {
                if switch {
                    back = self.carried_back(li, rec, e, j, basis);
                }
            } else if basis.accounts_with(self.me, rec.epoch) && rec.peer_epochs[j] == basis.epoch {
                back = e.granted[j].excess_over(src.taken[self.me]);
                e.granted[j] = src.taken[self.me];
            } else {
                debug_assert!(e.granted[j].is_zero() && e.taken[j].is_zero());
                reset_account(e, j);
            }
            e.pool += portion + back;
            e.debt += owed;
            e.reclaimed[j] = portion;
            e.debt_taken[j] = owed;
            out.reclaimed[j] = portion + back;
            if switch {
                // The old epoch's last record was final: nothing is left to settle.
                reset_account(e, j);
            }
        }
    }

    /// What this Region takes back of an account carried open from its earlier epoch, against
    /// `last`, the last record of the peer's epoch it is with: the earlier epoch's grants that
    /// the peer's epoch never took. That holds even if the peer's epoch closed the earlier one:
    /// what it took by then is all it takes (its later epochs never take grants by settlement).
    fn carried_back(
        &self,
        li: usize,
        rec: &RegionRecord,
        e: &LimitRecord,
        j: RegionId,
        last: &RegionRecord,
    ) -> Room {
        let acct = rec.account_epochs[j];
        if !self.carries_open(rec, j) || !last.accounts_with(self.me, acct) {
            return Room::ZERO;
        }
        let taken = last.limits.get(li).map_or(Room::ZERO, |l| l.taken[self.me]);
        e.granted[j].excess_over(taken)
    }

    /// Settles the last close of a peer's epoch again against a newer record of that epoch: the
    /// difference in this Region's portion and, when the newer record accounts with the epoch of
    /// this Region that closed it, in the grants each side took. A negative difference is paid
    /// from the pool, the rest becomes debt.
    fn settle(&self, li: usize, rec: &RegionRecord, e: &mut LimitRecord, out: &mut LimitOutcome) {
        let n = self.d.n();
        for j in crate::region::regions(n).filter(|&r| r != self.me) {
            let Closure::Settle(newer) = self.closure(j) else {
                continue;
            };
            let Some(mark) = rec.reclaims[j] else {
                continue;
            };
            let new = newer.limits.get(li).copied().unwrap_or_default();
            let portion = heir_portion(estate_room(&new), n, j, self.me);
            let owed = heir_portion(estate_debt(&new), n, j, self.me);
            let mut delta = portion.0 as i128 - e.reclaimed[j].0 as i128;
            delta -= owed.0 as i128 - e.debt_taken[j].0 as i128;
            e.debt_taken[j] = owed;
            if newer.accounts_with(self.me, mark.by)
                && (rec.account_epochs[j] == mark.by || self.drops_carried(j))
            {
                // If the peer's epoch closed this Region's epoch too (two false verdicts), its
                // `granted` counter was rewritten by its own close, and its settlements (of what
                // it took back) happen against this Region's records: only this Region's own
                // grants are settled here, or both sides would repay the same grants.
                let closed_me = newer.reclaims[self.me]
                    .is_some_and(|m| m.epoch == mark.by && m.by == newer.epoch);
                // Only the epoch that closed takes the peer's grants to it. The peer may close
                // that epoch in turn once it has ended, against its last record, and settles
                // its own grants by that record alone: a take by a later epoch would be held
                // twice (it is the peer's successor that takes back what was never taken).
                if !closed_me && rec.epoch == mark.by {
                    delta += new.granted[self.me].0 as i128 - e.taken[j].0 as i128;
                    e.taken[j] = new.granted[self.me];
                }
                delta -= new.taken[self.me].0 as i128 - e.granted[j].0 as i128;
                e.granted[j] = new.taken[self.me];
            }
            e.reclaimed[j] = portion;
            if delta >= 0 {
                e.pool += Room(delta as u64);
                out.reclaimed[j] = Room(delta as u64);
            } else {
                let owe = Room(delta.unsigned_abs() as u64);
                let from_pool = owe.min(e.pool);
                e.pool -= from_pool;
                e.debt += owe - from_pool;
            }
        }
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
                match self.state(r) {
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
        let mut parts = [Room::ZERO; MAX_REGIONS];
        targets(
            e.rate,
            self.d.limits[li].floor,
            &weights[..members],
            &mut parts[..members],
        );
        parts[mine]
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
            if self.state(j) != Some(PeerState::Live) || !matches!(self.closure(j), Closure::None) {
                continue;
            }
            let p = &self.peers[j.index()].latest;
            if !self.in_account(rec, j, p) {
                continue;
            }
            let Some(pl) = p.limits.get(li) else { continue };
            if pl.limit_version == 0 {
                continue;
            }
            let in_flight = e.granted[j].excess_over(pl.taken[self.me]);
            let need = pl.unmet.excess_over(in_flight);
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
            e.pool -= *a;
            out.granted[j] = *a;
        }
    }

    /// This Region's share plus the last published shares of the peers it keeps in targets.
    fn seen_sum(&self, li: usize, own_share: Room) -> u128 {
        let mut sum = own_share.0 as u128;
        for r in crate::region::regions(self.d.n()).filter(|&r| r != self.me) {
            if matches!(self.state(r), Some(PeerState::Live | PeerState::Silent)) {
                let latest = &self.peers[r.index()].latest;
                sum += latest.limits.get(li).map_or(0, |l| l.share.0 as u128);
            }
        }
        sum
    }
}

/// Clears the account with peer `j` (a new pair of epochs starts from zero).
fn reset_account(e: &mut LimitRecord, j: RegionId) {
    e.granted[j] = Room::ZERO;
    e.taken[j] = Room::ZERO;
    e.reclaimed[j] = Room::ZERO;
    e.debt_taken[j] = Room::ZERO;
}

/// Adopts a new limit version: room arrives or leaves in this Region's static part, so the sum of
/// shares never exceeds the larger of the old and the new rate while Regions disagree.
///
/// A **raise** waits until `earlier_epochs_closed`: an earlier epoch of this Region may have
/// ended in debt after a lowering (it had granted away the room the lowering took), and that debt
/// is room its heirs still hold above the limit until each has closed the epoch and taken its
/// part. Adopting the raise meanwhile would put the raise on top of that debt, above every rate
/// in play (fuzz seed 345378). Left at its old version, this Region's static part keeps the room
/// in existence at most `Σ part_i(largest rate in play)` (docs/PROTOCOL.md, "A raise after an
/// unpaid lowering"). A lowering, a version at the same rate and a first adoption never wait.
fn adopt(
    spec: &LimitSpec,
    e: &mut LimitRecord,
    n: usize,
    me: RegionId,
    may_raise: bool,
) -> Adoption {
    if spec.version <= e.limit_version {
        return Adoption::Current;
    }
    let old = LimitSpec::static_part(e.rate, n, me);
    let new = LimitSpec::static_part(spec.rate, n, me);
    let first = e.limit_version == 0;
    if new > old && !first && !may_raise {
        return Adoption::RaiseWaits;
    }
    e.limit_version = spec.version;
    e.rate = spec.rate;
    if new >= old {
        let more = new - old;
        if first {
            e.share += more;
        } else {
            e.pool += more;
        }
    } else {
        e.debt += old - new;
    }
    Adoption::Adopted
}

/// What [`adopt`] did with the version rolled out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Adoption {
    /// The record already runs this version (or a later one).
    Current,
    /// The version was adopted.
    Adopted,
    /// A raise that waits for every peer to account with this Region's current epoch.
    RaiseWaits,
}

/// The comparison design (SPEC §3): the share is the target, with nothing pooled or asked for.
fn jump_to_target(e: &mut LimitRecord) {
    e.share = e.target;
    e.pool = Room::ZERO;
    e.unmet = Room::ZERO;
}

/// A fenced Region pools its whole share and asks for nothing.
fn fence(e: &mut LimitRecord) {
    e.pool += e.share;
    e.share = Room::ZERO;
    e.unmet = Room::ZERO;
}

/// Step 3: a share above its target is lowered to it at once, into the pool; one below it is
/// raised from the pool by at most `step_cap`.
fn lower_or_raise(e: &mut LimitRecord, step_cap: Room) {
    if e.target < e.share {
        e.pool += e.share - e.target;
        e.share = e.target;
    } else {
        let raise = step_cap.min(e.pool).min(e.target - e.share);
        e.share += raise;
        e.pool -= raise;
    }
}

/// Pays a downgrade's debt from the pool first, then by lowering the share.
fn pay_debt(e: &mut LimitRecord) {
    if e.debt.is_zero() {
        return;
    }
    let from_pool = e.debt.min(e.pool);
    e.pool -= from_pool;
    e.debt -= from_pool;
    let from_share = e.debt.min(e.share);
    e.share -= from_share;
    e.debt -= from_share;
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
    }
}

#[cfg(test)]
mod step_tests {
    use super::*;

    #[test]
    fn a_step_that_creates_or_destroys_room_is_named_and_one_that_moves_it_is_not() {
        let mut alarms = Alarms::default();
        let mut e = LimitRecord {
            share: Room::rps(100),
            pool: Room::rps(50),
            ..LimitRecord::default()
        };
        let b = RegionId::new(1).unwrap_or_else(|| panic!("Region 1"));
        // Moves: pool to share, pool to a grant, a take into the pool.
        checked(
            &mut alarms,
            0,
            step::LOWER_OR_RAISE,
            &mut e,
            LimitRecord::held,
            |e| {
                e.pool = Room::rps(20);
                e.share = Room::rps(130);
            },
        );
        checked(&mut alarms, 0, step::GRANT, &mut e, held_and_granted, |e| {
            e.pool = Room::rps(10);
            e.granted[b] = Room::rps(10);
        });
        checked(&mut alarms, 0, step::TAKE, &mut e, held_less_taken, |e| {
            e.pool += Room::rps(5);
            e.taken[b] = Room::rps(5);
        });
        assert_eq!(alarms.not_conserved, vec![]);
        // Creates: a raise that does not come out of the pool; destroys: a grant from nowhere.
        checked(
            &mut alarms,
            1,
            step::LOWER_OR_RAISE,
            &mut e,
            LimitRecord::held,
            |e| e.share += Room::rps(1),
        );
        checked(&mut alarms, 2, step::GRANT, &mut e, held_and_granted, |e| {
            e.pool = e.pool.excess_over(Room::rps(1000))
        });
        assert_eq!(
            alarms.not_conserved,
            vec![(1, step::LOWER_OR_RAISE), (2, step::GRANT)]
        );
    }
}
