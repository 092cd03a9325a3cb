//! `GET /v1/state` as data: the view of one Region's daemon (its shares, peers, alarms) and how
//! it is built from what the rebalance loop knows. Read by the API, the metrics, the demo and the
//! CloudWatch publisher; it depends on none of them (and [`crate::state`] holds the latest one).

use shareplane_core::{
    regions, Deployment, Health, LimitKind, LimitRecord, PeerSeen, PeerState, PeerView, PerRegion,
    RegionId, RegionRecord, Why,
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// `GET /v1/state`: why each share is what it is.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StateView {
    pub region: String,
    /// `starting`, `leader` or `follower`.
    pub role: &'static str,
    pub replica: String,
    pub policy: &'static str,
    pub period_ms: u64,
    pub store_ok: bool,
    pub last_error: Option<String>,
    pub epoch: u64,
    pub record_version: u64,
    pub written_at_ms: u64,
    pub rules_version: u64,
    /// The digest of the limits this Region runs (hex, [`shareplane_core::limits_digest`]).
    pub limits_digest: String,
    pub health: BTreeMap<String, &'static str>,
    /// By Region: seconds its verdict has read unknown without a break (0 when known); past
    /// the threshold, the alarm `health_unknown:<region>` (CloudWatch
    /// `LongestHealthUnknownSeconds`).
    pub health_unknown_seconds: BTreeMap<String, f64>,
    pub peers: Vec<PeerJson>,
    /// Serialized by [`StateJson`], whole or a page.
    #[serde(skip)]
    pub limits: Limits,
    pub alarms: Vec<String>,
    /// What shadow limits would have refused, per limit id (in each limit's view as well; here
    /// for the metrics, which list every limit with a count, not only the first ones).
    #[serde(skip)]
    pub would_refuse: Arc<BTreeMap<String, u64>>,
}

/// A view as JSON: every field of [`StateView`] and its limits, all of them or a page.
#[derive(serde::Serialize)]
pub struct StateJson<'a> {
    #[serde(flatten)]
    pub view: &'a StateView,
    pub limits: LimitsOut<'a>,
}

/// The limits of a [`StateJson`].
#[derive(serde::Serialize)]
#[serde(untagged)]
pub enum LimitsOut<'a> {
    All(&'a Limits),
    /// The views of a range of limits, built for those alone.
    Page(Vec<LimitJson>),
}

impl<'a> StateJson<'a> {
    /// The view with every limit.
    pub fn all(view: &'a StateView) -> StateJson<'a> {
        StateJson {
            view,
            limits: LimitsOut::All(&view.limits),
        }
    }

    /// The view with the limits `from..from + count` (in configuration order) only.
    pub fn page(view: &'a StateView, from: usize, count: usize) -> StateJson<'a> {
        let end = from.saturating_add(count);
        let page = view.limits.selected(|i, _| (from..end).contains(&i));
        StateJson {
            view,
            limits: LimitsOut::Page(page),
        }
    }
}

/// The per-limit part of a view ([`LimitJson`] for every limit), built from the records on first
/// use as a slice and then kept with the view, not at every rebalance: at 100,000 limits it is
/// some 300 MB. The API asks for what it shows without building the rest: a page or one limit
/// ([`Limits::selected`]), or all of them written as JSON one at a time (`Serialize`).
#[derive(Clone)]
pub struct Limits {
    from: Arc<LimitsInput>,
    built: std::sync::OnceLock<Vec<LimitJson>>,
}

/// What [`Limits`] are built from.
struct LimitsInput {
    d: Arc<Deployment>,
    me: RegionId,
    own: Option<Arc<RegionRecord>>,
    peer_records: Vec<Option<Arc<RegionRecord>>>,
    peer_views: Option<Vec<PeerView>>,
    would_refuse: Arc<BTreeMap<String, u64>>,
}

impl Limits {
    fn get(&self) -> &[LimitJson] {
        self.built.get_or_init(|| build_limits(&self.from))
    }

    /// How many limits there are (without building their views).
    pub fn count(&self) -> usize {
        self.from.d.limits.len()
    }

    /// The views of the limits `pick` selects (by index and id), in order, without building the
    /// others (the CloudWatch publisher needs a few of 100,000).
    pub fn selected(&self, pick: impl Fn(usize, &str) -> bool) -> Vec<LimitJson> {
        if let Some(all) = self.built.get() {
            return (all.iter().enumerate())
                .filter(|(i, l)| pick(*i, &l.id))
                .map(|(_, l)| l.clone())
                .collect();
        }
        let v = &*self.from;
        let seen = peers_seen(v);
        let seen: Vec<PeerSeen<'_>> = seen
            .iter()
            .map(|(r, s, rec)| (*r, *s, rec.as_deref()))
            .collect();
        (v.d.limits.iter().enumerate())
            .filter(|(i, spec)| pick(*i, &spec.id))
            .map(|(i, spec)| limit_view(v, i, spec, &seen))
            .collect()
    }
}

impl std::ops::Deref for Limits {
    type Target = [LimitJson];
    fn deref(&self) -> &[LimitJson] {
        self.get()
    }
}

impl<'a> IntoIterator for &'a Limits {
    type Item = &'a LimitJson;
    type IntoIter = std::slice::Iter<'a, LimitJson>;
    fn into_iter(self) -> Self::IntoIter {
        self.get().iter()
    }
}

/// Written one limit's view at a time, each built and dropped as it is written, unless they are
/// built already: a `GET /v1/state` of 100,000 limits would otherwise keep some 300 MB of views
/// until the next rebalance replaces the view (the JSON it writes is some 50 MB).
impl serde::Serialize for Limits {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if let Some(all) = self.built.get() {
            return all.serialize(s);
        }
        let v = &*self.from;
        let seen = peers_seen(v);
        let seen: Vec<PeerSeen<'_>> = seen
            .iter()
            .map(|(r, st, rec)| (*r, *st, rec.as_deref()))
            .collect();
        s.collect_seq(
            (v.d.limits.iter().enumerate()).map(|(i, spec)| limit_view(v, i, spec, &seen)),
        )
    }
}

impl std::fmt::Debug for Limits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.built.get() {
            Some(l) => l.fmt(f),
            None => write!(f, "[{} limits, not built yet]", self.from.d.limits.len()),
        }
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct PeerJson {
    pub region: String,
    pub epoch: u64,
    pub version: u64,
    /// Own rebalances in a row at which the peer's record had not changed (leader only).
    pub unchanged: Option<u32>,
    /// `live`, `silent` or `reclaimed` (leader only; followers say `unknown`).
    pub state: &'static str,
    pub written_at_ms: u64,
    /// Own rebalances in a row at which the peer had begun a newer epoch but the last record of
    /// the epoch this Region accounts with had not reached it, so that epoch's room could be
    /// neither closed nor settled (leader only). Lasting, that room is stranded (alarm
    /// `waiting_for_record:<peer>`, CloudWatch `LongestWaitForRecordSeconds`).
    pub waiting_for_record: Option<u32>,
    /// Own rebalances in a row at which a raise of some limit waited for this peer's record to
    /// account with this Region's current epoch (leader only): the raise's room is unused,
    /// under the limit, meanwhile (alarm `raise_waiting:<peer>`, CloudWatch
    /// `LongestRaiseWaitSeconds`; docs/PROTOCOL.md, "A raise after an unpaid lowering").
    pub raise_waiting: Option<u32>,
    /// The peer's epoch this Region accounts with (the one whose last record it waits for,
    /// while it waits); `None` before the own record is known.
    pub accounts_with_epoch: Option<u64>,
    /// The digest of the limits the peer's latest record says it runs (hex; `None`: unknown,
    /// an older daemon).
    pub limits_digest: Option<String>,
    /// Phase ticks in a row at which that digest differed from this Region's; past the rollout
    /// window the `limits_mismatch:<peer>` alarm is raised (CloudWatch `LimitsMismatchPeers`).
    pub limits_mismatch: Option<u32>,
}

/// Amounts are requests per second.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LimitJson {
    pub id: String,
    pub kind: &'static str,
    pub shadow: bool,
    /// Calls this limit would have refused while in shadow mode, as this Region's gateways
    /// reported them (running since their start, summed; 0 for none).
    pub would_refuse: u64,
    /// The configured rate and version.
    pub rate: f64,
    pub version: u64,
    /// The version and rate this Region's record has adopted (0 until it has): a limit change
    /// is under way while they differ from the configured ones.
    pub adopted_version: u64,
    pub adopted_rate: f64,
    pub demand: f64,
    pub target: f64,
    pub share: f64,
    pub pool: f64,
    pub unmet: f64,
    pub debt: f64,
    /// Granted to each peer by name and not taken by it yet.
    pub grants_in_flight: BTreeMap<String, f64>,
    pub granted: BTreeMap<String, f64>,
    pub taken: BTreeMap<String, f64>,
    pub reclaimed: BTreeMap<String, f64>,
    /// This Region's share plus the last published shares of the peers it has not reclaimed
    /// (SPEC §8 alarm: above `rate` means something is wrong).
    pub seen_sum_of_shares: f64,
    /// What each peer counts for in `seen_sum_of_shares`, by name: the share its latest record
    /// published, 0 once this Region has reclaimed it, `None` (JSON `null`) while no record of
    /// it is known. With the own share they add up to the seen sum.
    pub peer_shares: BTreeMap<String, Option<f64>>,
    /// What holds the share where it is ([`shareplane_core::Why`]): `at_target`, `at_floor`,
    /// `step_cap`, `waiting_for_grants`, `fenced`, `in_debt`, `above_target`, `static_split`,
    /// `jump_to_target` or `not_adopted`; `why_detail` says it in words, naming the peers.
    pub why: &'static str,
    pub why_detail: String,
}

pub fn health_name(h: Health) -> &'static str {
    match h {
        Health::Healthy => "healthy",
        Health::Unhealthy => "unhealthy",
        Health::Unknown => "unknown",
    }
}

/// What a view is built from.
pub struct ViewInput<'a> {
    pub d: Arc<Deployment>,
    pub me: RegionId,
    pub role: &'static str,
    pub replica: &'a str,
    pub own: Option<Arc<RegionRecord>>,
    /// Latest record of each peer by Region index (`None` where unknown or for the own Region).
    pub peer_records: Vec<Option<Arc<RegionRecord>>>,
    /// The coordinator's peer views (leader only).
    pub peer_views: Option<Vec<PeerView>>,
    pub health: PerRegion<Health>,
    /// How long each Region's verdict has read unknown, by Region index (empty: not counted).
    pub health_unknown_ms: Vec<u64>,
    pub store_ok: bool,
    pub last_error: Option<String>,
    pub rules_version: u64,
    pub alarms: Vec<String>,
    /// The leader's count of rebalances in a row waiting for each peer's record, by Region index
    /// (empty for a follower).
    pub waiting_for_record: Vec<u32>,
    /// The leader's count of rebalances in a row at which a raise waited for each peer, by
    /// Region index (empty for a follower).
    pub raise_waiting: Vec<u32>,
    /// Phase ticks in a row at which each peer named other limits, by Region index (empty:
    /// not counted yet).
    pub limits_mismatch: Vec<u32>,
    /// What shadow limits would have refused, per limit id (the demand book's count).
    pub would_refuse: Arc<BTreeMap<String, u64>>,
}

impl StateView {
    /// The ids of the limits whose shares, as this Region sees them, add up to more than the
    /// limit's rate (the core's `sum_above_limit` alarm, `sum_above_limit:<id>`).
    pub fn limits_above_rate(&self) -> std::collections::BTreeSet<&str> {
        (self.alarms.iter())
            .filter_map(|a| a.strip_prefix("sum_above_limit:"))
            .collect()
    }

    /// The views of the first `first` limits and of every limit above its rate: the limits
    /// with series of their own in `/metrics` and CloudWatch, however many limits there are.
    pub fn reported_limits(&self, first: usize) -> Vec<LimitJson> {
        let above = self.limits_above_rate();
        self.limits
            .selected(|i, id| i < first || above.contains(id))
    }

    pub(crate) fn starting(d: &Arc<Deployment>, me: RegionId) -> StateView {
        build_view(ViewInput {
            d: d.clone(),
            me,
            role: "starting",
            replica: "",
            own: None,
            peer_records: Vec::new(),
            peer_views: None,
            health: PerRegion::default(),
            health_unknown_ms: Vec::new(),
            store_ok: true,
            last_error: None,
            rules_version: 0,
            alarms: Vec::new(),
            waiting_for_record: Vec::new(),
            raise_waiting: Vec::new(),
            limits_mismatch: Vec::new(),
            would_refuse: Default::default(),
        })
    }
}

pub fn build_view(v: ViewInput<'_>) -> StateView {
    let ViewInput {
        d,
        me,
        role,
        replica,
        own,
        peer_records,
        peer_views,
        health,
        health_unknown_ms,
        store_ok,
        last_error,
        rules_version,
        alarms,
        waiting_for_record,
        raise_waiting,
        limits_mismatch,
        would_refuse,
    } = v;
    let input = Arc::new(LimitsInput {
        d,
        me,
        own,
        peer_records,
        peer_views,
        would_refuse,
    });
    let (d, l) = (&*input.d, &*input);
    let peers = regions(d.n())
        .filter(|&r| r != me)
        .map(|r| peer_view(l, r, &waiting_for_record, &raise_waiting, &limits_mismatch))
        .collect();
    let own = l.own.as_deref();
    StateView {
        region: d.region_name(me).to_string(),
        role,
        replica: replica.to_string(),
        policy: d.policy.name(),
        period_ms: d.period_ms,
        store_ok,
        epoch: own.map_or(0, |o| o.epoch()),
        record_version: own.map_or(0, |o| o.version()),
        written_at_ms: own.map_or(0, |o| o.written_at_ms()),
        rules_version,
        limits_digest: format!("{:016x}", shareplane_core::limits_digest(&d.limits)),
        health: regions(d.n())
            .map(|r| (d.region_name(r).to_string(), health_name(health[r])))
            .collect(),
        health_unknown_seconds: regions(d.n())
            .map(|r| {
                let ms = health_unknown_ms.get(r.index()).copied().unwrap_or(0);
                (d.region_name(r).to_string(), ms as f64 / 1000.0)
            })
            .collect(),
        peers,
        would_refuse: input.would_refuse.clone(),
        limits: Limits {
            from: input.clone(),
            built: std::sync::OnceLock::new(),
        },
        last_error,
        alarms,
    }
}

/// The peers as this replica sees them, once for every limit's `why`.
type Seen = Vec<(RegionId, PeerState, Option<Arc<RegionRecord>>)>;

fn peers_seen(v: &LimitsInput) -> Seen {
    (v.peer_views.iter())
        .flatten()
        .map(|p| (p.region, p.state, peer_record(v, p.region)))
        .collect()
}

/// Every limit's [`LimitJson`].
fn build_limits(v: &LimitsInput) -> Vec<LimitJson> {
    let records = peers_seen(v);
    let seen: Vec<PeerSeen<'_>> = records
        .iter()
        .map(|(r, s, rec)| (*r, *s, rec.as_deref()))
        .collect();
    v.d.limits
        .iter()
        .enumerate()
        .map(|(li, spec)| limit_view(v, li, spec, &seen))
        .collect()
}

/// A value per peer, by the peer's name.
fn by_peer(v: &LimitsInput, f: impl Fn(RegionId) -> f64) -> BTreeMap<String, f64> {
    regions(v.d.n())
        .filter(|&r| r != v.me)
        .map(|r| (v.d.region_name(r).to_string(), f(r)))
        .collect()
}

fn peer_record(v: &LimitsInput, r: RegionId) -> Option<Arc<RegionRecord>> {
    v.peer_records.get(r.index()).cloned().flatten()
}

fn limit_view(
    v: &LimitsInput,
    li: usize,
    spec: &shareplane_core::LimitSpec,
    seen: &[PeerSeen<'_>],
) -> LimitJson {
    let own = v.own.as_deref();
    let e = own
        .and_then(|o| o.limits().get(li))
        .copied()
        .unwrap_or_default();
    let why = match own {
        Some(own) => shareplane_core::why(&v.d, li, own, seen),
        None => Why::NotAdopted,
    };
    // Granted to `r` and not yet taken by it, when both records refer to each other's epochs.
    let in_flight = |r: RegionId| {
        let taken = peer_record(v, r)
            .filter(|p| {
                own.is_some_and(|o| {
                    p.accounts_with(v.me, o.epoch()) && o.accounts_with(r, p.epoch())
                })
            })
            .and_then(|p| p.limits().get(li).map(|l| l.taken()[v.me]))
            .unwrap_or_default();
        e.granted()[r].excess_over(taken).as_rps()
    };
    LimitJson {
        id: spec.id.clone(),
        kind: match spec.kind {
            LimitKind::Capacity => "capacity",
            LimitKind::Security { .. } => "security",
        },
        shadow: spec.shadow,
        would_refuse: v.would_refuse.get(&spec.id).copied().unwrap_or(0),
        rate: spec.rate.as_rps(),
        version: spec.version,
        adopted_version: e.limit_version(),
        adopted_rate: e.rate().as_rps(),
        demand: e.demand().as_rps(),
        target: e.target().as_rps(),
        share: e.share().as_rps(),
        pool: e.pool().as_rps(),
        unmet: e.unmet().as_rps(),
        debt: e.debt().as_rps(),
        grants_in_flight: by_peer(v, in_flight),
        granted: by_peer(v, |r| e.granted()[r].as_rps()),
        taken: by_peer(v, |r| e.taken()[r].as_rps()),
        reclaimed: by_peer(v, |r| e.reclaimed()[r].as_rps()),
        seen_sum_of_shares: seen_sum(v, li, e.share()),
        peer_shares: peer_shares(v, li),
        why: why.name(),
        why_detail: why_detail(&v.d, &why, &e, spec),
    }
}

fn why_detail(
    d: &Deployment,
    why: &Why,
    e: &LimitRecord,
    spec: &shareplane_core::LimitSpec,
) -> String {
    let names = |rs: &[RegionId]| {
        rs.iter()
            .map(|r| d.region_name(*r))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (share, target) = (e.share().as_rps(), e.target().as_rps());
    match why {
        Why::NotAdopted => "not adopted yet: from the next rebalance".into(),
        Why::StaticSplit => format!("a security limit: a static split of {share}/s, never moved"),
        Why::JumpToTarget => format!("jump-to-target: the share is the target, {target}/s"),
        Why::Fenced => "fenced: the own health check reads unhealthy, so every capacity share is 0".into(),
        Why::InDebt => format!(
            "repaying {}/s of a lowered limit's debt, from the pool, the share and room received",
            e.debt().as_rps()
        ),
        Why::AtTarget { floor: true } => format!("at its target, the floor ({}/s)", spec.floor.as_rps()),
        Why::AtTarget { floor: false } => format!("at its target, {target}/s"),
        Why::AboveTarget => format!("{share}/s is above its target {target}/s: the next rebalance lowers it"),
        Why::StepCap => format!(
            "{share}/s is below its target {target}/s: rising by at most the step cap ({}/s) a period; the pool holds {}/s more",
            spec.step_cap.as_rps(),
            e.pool().as_rps()
        ),
        Why::WaitingForGrants { from, silent } => {
            let mut s = format!("{share}/s is below its target {target}/s with an empty pool: waiting for grants");
            if from.is_empty() {
                s.push_str(" (no peer holds room above its target yet)");
            } else {
                s.push_str(&format!(" from {} (room above their targets)", names(from)));
            }
            if !silent.is_empty() {
                s.push_str(&format!(
                    "; {} silent: their room waits for them or their reclaim",
                    names(silent)
                ));
            }
            s
        }
    }
}

fn peer_view(
    v: &LimitsInput,
    r: RegionId,
    waiting_for_record: &[u32],
    raise_waiting: &[u32],
    limits_mismatch: &[u32],
) -> PeerJson {
    let rec = peer_record(v, r);
    let pv = v
        .peer_views
        .as_ref()
        .and_then(|ps| ps.iter().find(|p| p.region == r));
    let from_rec = |f: fn(&RegionRecord) -> u64| rec.as_deref().map_or(0, f);
    PeerJson {
        region: v.d.region_name(r).to_string(),
        epoch: pv.map_or_else(|| from_rec(|x| x.epoch()), |p| p.epoch),
        version: pv.map_or_else(|| from_rec(|x| x.version()), |p| p.version),
        unchanged: pv.map(|p| p.unchanged),
        state: match pv.map(|p| p.state) {
            Some(PeerState::Live) => "live",
            Some(PeerState::Silent) => "silent",
            Some(PeerState::Reclaimed) => "reclaimed",
            None => "unknown",
        },
        written_at_ms: pv.map_or_else(|| from_rec(|x| x.written_at_ms()), |p| p.written_at_ms),
        waiting_for_record: waiting_for_record.get(r.index()).copied(),
        raise_waiting: raise_waiting.get(r.index()).copied(),
        accounts_with_epoch: v.own.as_deref().map(|o| o.peer_epochs()[r]),
        limits_digest: rec
            .as_deref()
            .and_then(|x| x.limits_digest())
            .map(|x| format!("{x:016x}")),
        limits_mismatch: limits_mismatch.get(r.index()).copied(),
    }
}

/// Peer `r`'s latest record and its state as this replica sees it (a peer it has no view of
/// counts as live); `None` while no record of it is known.
fn peer_seen(v: &LimitsInput, r: RegionId) -> Option<(PeerState, &RegionRecord)> {
    let rec = v.peer_records.get(r.index())?.as_deref()?;
    let state = v
        .peer_views
        .as_ref()
        .and_then(|ps| ps.iter().find(|p| p.region == r))
        .map_or(PeerState::Live, |p| p.state);
    Some((state, rec))
}

fn as_rps(milli: u128) -> f64 {
    milli as f64 / shareplane_core::MILLI_PER_RPS as f64
}

/// The own share plus the latest published shares of peers not known to be reclaimed, by the
/// core's rule ([`shareplane_core::seen_sum`]); a peer this replica has no view of counts.
fn seen_sum(v: &LimitsInput, li: usize, own: shareplane_core::Room) -> f64 {
    let peers = (regions(v.d.n()))
        .filter(|&r| r != v.me)
        .filter_map(|r| peer_seen(v, r));
    as_rps(shareplane_core::seen_sum(li, own, peers))
}

/// What each peer counts for in [`seen_sum`], by the same rule of the core, one peer at a time.
fn peer_shares(v: &LimitsInput, li: usize) -> BTreeMap<String, Option<f64>> {
    (regions(v.d.n()).filter(|&r| r != v.me))
        .map(|r| {
            let counted = peer_seen(v, r).map(|seen| {
                as_rps(shareplane_core::seen_sum(
                    li,
                    shareplane_core::Room::ZERO,
                    [seen],
                ))
            });
            (v.d.region_name(r).to_string(), counted)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_built_on_first_read_only_and_then_kept() {
        let d = Arc::new(crate::demo::deployment(5_000).unwrap_or_else(|e| panic!("{e}")));
        let me = RegionId::new(1).unwrap_or_else(|| panic!("region"));
        let own = Arc::new(RegionRecord::genesis(&d, me));
        let view = leader_view(d.clone(), me, Vec::new());
        assert!(
            view.limits.built.get().is_none(),
            "built before anyone read it"
        );
        assert_eq!(view.record_version, own.version());
        assert_eq!(view.limits.len(), d.limits.len());
        assert!(view.limits.built.get().is_some());
        assert_eq!(view.limits[0].share, own.limits()[0].share().as_rps());
        let json = serde_json::to_value(StateJson::all(&view)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(json["limits"][0]["id"], d.limits[0].id.as_str());
        assert_eq!(json["record_version"], own.version());
    }

    #[test]
    fn every_limit_is_written_as_json_without_keeping_the_views() {
        let d = Arc::new(crate::demo::deployment(5_000).unwrap_or_else(|e| panic!("{e}")));
        let me = RegionId::new(1).unwrap_or_else(|| panic!("region"));
        let view = leader_view(d.clone(), me, Vec::new());
        let streamed =
            serde_json::to_value(StateJson::all(&view)).unwrap_or_else(|e| panic!("{e}"));
        assert!(view.limits.built.get().is_none(), "kept after writing");
        assert_eq!(view.limits.len(), d.limits.len());
        let kept = serde_json::to_value(StateJson::all(&view)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(streamed, kept, "the same JSON whether built or not");
    }

    /// A leader's view of `limits` limits `p-0`…, with `p-<above>` alarmed above its rate.
    fn wide_view(limits: usize, above: usize) -> StateView {
        let mut text = String::from(
            "region = \"A\"\nstore = \"memory\"\napi_token = \"0123456789abcdef\"\n\
             [[regions]]\nname = \"A\"\n[[regions]]\nname = \"B\"\n",
        );
        for i in 0..limits {
            text.push_str(&format!(
                "[[limits]]\nid = \"p-{i}\"\nrate = {}\n",
                1000 + i
            ));
        }
        let cfg = crate::config::parse(&text, &BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"));
        leader_view(
            cfg.deployment,
            cfg.me,
            vec![format!("sum_above_limit:p-{above}")],
        )
    }

    /// The view of a leader of `d` in Region `me` that holds its genesis record, with `alarms`.
    fn leader_view(d: Arc<Deployment>, me: RegionId, alarms: Vec<String>) -> StateView {
        let own = Arc::new(RegionRecord::genesis(&d, me));
        build_view(ViewInput {
            peer_records: vec![None; d.n()],
            d,
            me,
            role: "leader",
            replica: "r",
            own: Some(own),
            peer_views: Some(Vec::new()),
            health: PerRegion::default(),
            health_unknown_ms: Vec::new(),
            store_ok: true,
            last_error: None,
            rules_version: 2,
            alarms,
            waiting_for_record: Vec::new(),
            raise_waiting: Vec::new(),
            limits_mismatch: Vec::new(),
            would_refuse: Default::default(),
        })
    }

    #[test]
    fn each_peer_counts_for_its_published_share_0_once_reclaimed_and_null_unknown() {
        let d = Arc::new(crate::demo::deployment(5_000).unwrap_or_else(|e| panic!("{e}")));
        let (a, b, c) = (rid(0), rid(1), rid(2));
        let rec = |r| Some(Arc::new(RegionRecord::genesis(&d, r)));
        let peer = |region, state| PeerView {
            region,
            epoch: 1,
            version: 0,
            unchanged: 0,
            state,
            written_at_ms: 0,
        };
        let mut view = leader_view(d.clone(), a, Vec::new());
        let mut from = (*view.limits.from).clone_input();
        from.peer_records = vec![None, rec(b), rec(c)];
        from.peer_views = Some(vec![
            peer(b, PeerState::Live),
            peer(c, PeerState::Reclaimed),
        ]);
        view.limits = Limits {
            from: Arc::new(from),
            built: std::sync::OnceLock::new(),
        };
        let l = &view.limits[0];
        let share_b = RegionRecord::genesis(&d, b).limits()[0].share().as_rps();
        assert!(share_b > 0.0);
        let want: BTreeMap<String, Option<f64>> = [
            ("B".to_string(), Some(share_b)),
            ("C".to_string(), Some(0.0)),
        ]
        .into();
        assert_eq!(l.peer_shares, want);
        let sum = l.share + share_b;
        assert!((l.seen_sum_of_shares - sum).abs() < 1e-6, "{l:?}");

        // Without a view of its peers (a follower) every peer with a record counts; one
        // without a record is null.
        let mut from = (*view.limits.from).clone_input();
        from.peer_records = vec![None, rec(b), None];
        from.peer_views = None;
        view.limits = Limits {
            from: Arc::new(from),
            built: std::sync::OnceLock::new(),
        };
        let l = &view.limits[0];
        let want: BTreeMap<String, Option<f64>> =
            [("B".to_string(), Some(share_b)), ("C".to_string(), None)].into();
        assert_eq!(l.peer_shares, want);
        let json = serde_json::to_value(&view.limits[0]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(json["peer_shares"]["C"], serde_json::Value::Null);
    }

    fn rid(i: usize) -> RegionId {
        RegionId::new(i).unwrap_or_else(|| panic!("region {i}"))
    }

    impl LimitsInput {
        fn clone_input(&self) -> LimitsInput {
            LimitsInput {
                d: self.d.clone(),
                me: self.me,
                own: self.own.clone(),
                peer_records: self.peer_records.clone(),
                peer_views: self.peer_views.clone(),
                would_refuse: self.would_refuse.clone(),
            }
        }
    }

    #[test]
    fn a_selection_of_limits_builds_those_only_and_matches_the_whole_view() {
        let view = wide_view(150, 140);
        let some = view.limits.selected(|i, id| i < 3 || id == "p-140");
        assert!(
            view.limits.built.get().is_none(),
            "selecting built every limit"
        );
        let ids: Vec<&str> = some.iter().map(|l| l.id.as_str()).collect();
        assert_eq!(ids, ["p-0", "p-1", "p-2", "p-140"]);
        #[cfg(feature = "aws")]
        {
            let points = crate::aws::points(&view, true, 0, 0);
            let shares = points.iter().filter(|p| p.name == "Share").count();
            assert_eq!(shares, crate::aws::CLOUDWATCH_PER_LIMIT + 1);
            let above: Vec<f64> = (points.iter())
                .filter(|p| p.name == "LimitsAboveRate")
                .map(|p| p.value)
                .collect();
            assert_eq!(above, [1.0]);
        }
        // Once built, a selection reads the same views.
        assert_eq!(view.limits[140].rate, some[3].rate);
        assert_eq!(view.limits.selected(|i, _| i == 140)[0].id, "p-140");
    }

    #[test]
    fn metrics_carry_series_for_the_first_limits_and_those_above_their_rate_and_count_all() {
        let view = wide_view(crate::metrics::PER_LIMIT_SERIES + 200, 1_100);
        let text = crate::metrics::Metrics::new().render(&view, &crate::metrics::Extra::default());
        let shares = text
            .lines()
            .filter(|l| l.starts_with("shareplane_share_rps{"))
            .count();
        assert_eq!(shares, crate::metrics::PER_LIMIT_SERIES + 1);
        assert!(text.contains("shareplane_share_rps{region=\"A\",limit=\"p-1100\"}"));
        assert!(!text.contains("limit=\"p-1101\""));
        assert!(text.contains("shareplane_limits{region=\"A\"} 1200"));
        assert!(text.contains("shareplane_limits_above_rate{region=\"A\"} 1"));
        assert!(
            view.limits.built.get().is_none(),
            "a scrape built every limit's view"
        );
    }
}
