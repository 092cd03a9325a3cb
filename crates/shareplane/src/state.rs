//! What one Region's daemon shares between its rebalance loop and its API: the published rule
//! set and its lease (watch channels, for long-polls), the demand book, the latest state view,
//! readiness and metrics.

use crate::clock::Clock;
use crate::demand::{DemandBook, TrackedLimit};
use crate::metrics::Metrics;
use crate::rules::RuleSet;
use shareplane_core::{
    regions, Deployment, Health, LimitKind, PeerState, PeerView, PerRegion, RegionId, RegionRecord,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use tokio::sync::watch;

/// State shared by a Region's loop and API handlers.
pub struct Shared {
    pub region: String,
    pub me: RegionId,
    /// The deployment the daemon runs; replaced only by the daemon's loop, between rebalances,
    /// when it adopts a reloaded configuration ([`Shared::set_deployment`]).
    d: RwLock<Arc<Deployment>>,
    /// A reloaded deployment waiting for the loop to adopt it ([`Shared::propose`]).
    proposed: Mutex<Option<Arc<Deployment>>>,
    /// Operators' requests to stop waiting for a peer epoch's last record, for the loop
    /// ([`Shared::request_abandon`]).
    abandons: Mutex<Vec<(RegionId, u64)>>,
    /// What the last reloads of the configuration did (`GET /v1/state`, `config`).
    config: RwLock<ConfigStatus>,
    pub clock: Clock,
    /// Bearer token for write endpoints; `None` refuses every write.
    pub api_token: Option<String>,
    pub metrics: Metrics,
    /// Operator events (`GET /v1/events`), each also logged as one line.
    pub events: crate::events::EventLog,
    rules: watch::Sender<Arc<RuleSet>>,
    /// The full lease of a rule set ([`shareplane_core::lease_bound`]); 0 if the deployment
    /// allows none, so that gateways fence (`validate` refuses such a deployment).
    lease_full_ms: u64,
    lease: watch::Sender<RuleLease>,
    demand: Mutex<DemandBook>,
    view: RwLock<Arc<StateView>>,
    ready: AtomicBool,
    shutdown: watch::Receiver<bool>,
}

impl Shared {
    pub fn new(
        d: Arc<Deployment>,
        me: RegionId,
        clock: Clock,
        api_token: Option<String>,
        shutdown: watch::Receiver<bool>,
    ) -> Arc<Shared> {
        let region = d.region_name(me).to_string();
        let view = StateView::starting(&d, me);
        let lease_full_ms = shareplane_core::lease_bound(&d).map_or(0, |b| b.lease_ms);
        Arc::new(Shared {
            region,
            me,
            clock,
            api_token,
            metrics: Metrics::new(),
            events: crate::events::EventLog::default(),
            rules: watch::channel(Arc::new(RuleSet::none())).0,
            lease_full_ms,
            lease: watch::channel(RuleLease::default()).0,
            demand: Mutex::new(DemandBook::new(TrackedLimit::of(&d), clock.now_ms())),
            view: RwLock::new(Arc::new(view)),
            ready: AtomicBool::new(false),
            shutdown,
            d: RwLock::new(d),
            proposed: Mutex::new(None),
            abandons: Mutex::new(Vec::new()),
            config: RwLock::new(ConfigStatus::default()),
        })
    }

    /// Records and logs an operator event of this Region, stamped with the Region's clock.
    pub fn event(
        &self,
        kind: crate::events::Kind,
        peer: Option<&str>,
        limit: Option<&str>,
        detail: String,
    ) {
        let now = self.clock.now_ms();
        self.events
            .emit(now, &self.region, kind, peer, limit, detail);
    }

    /// The deployment the daemon runs now.
    pub fn d(&self) -> Arc<Deployment> {
        self.d.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Adopts `d` (the loop calls it between rebalances, once its coordinator runs `d`): the
    /// API, the view and the demand book follow it. The demand book keeps every limit's
    /// timeline; `d` lists the old limits first, in their order (see [`crate::config::plan_reload`]).
    pub fn set_deployment(&self, d: Arc<Deployment>) {
        self.demand().set_limits(TrackedLimit::of(&d));
        *self.d.write().unwrap_or_else(|e| e.into_inner()) = d;
    }

    /// Hands a reloaded deployment to the loop, which adopts it at its next tick (replacing any
    /// proposal it has not adopted yet).
    pub fn propose(&self, d: Arc<Deployment>) {
        *self.proposed.lock().unwrap_or_else(|e| e.into_inner()) = Some(d);
    }

    /// Asks the loop to stop waiting for the last record of `peer`'s epoch `epoch`
    /// (`POST /v1/peers/{region}/abandon`); the coordinator decides at the next rebalance.
    pub fn request_abandon(&self, peer: RegionId, epoch: u64) {
        let mut q = self.abandons.lock().unwrap_or_else(|e| e.into_inner());
        if !q.contains(&(peer, epoch)) {
            q.push((peer, epoch));
        }
    }

    /// The requests made since the last call.
    pub fn take_abandons(&self) -> Vec<(RegionId, u64)> {
        std::mem::take(&mut *self.abandons.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The deployment proposed since the last call, if any.
    pub fn take_proposed(&self) -> Option<Arc<Deployment>> {
        self.proposed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    pub fn config_status(&self) -> ConfigStatus {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn update_config_status(&self, f: impl FnOnce(&mut ConfigStatus)) {
        f(&mut self.config.write().unwrap_or_else(|e| e.into_inner()));
    }

    /// Publishes `rules` if its version is above the current one and its rules differ from the
    /// current ones. Returns whether it did.
    pub fn publish(&self, rules: RuleSet) -> bool {
        let rules = Arc::new(rules);
        let sent = self.rules.send_if_modified(|cur| {
            let changed = cur.version == 0 || cur.rules != rules.rules;
            if rules.version > cur.version && changed {
                *cur = rules.clone();
                true
            } else {
                false
            }
        });
        if sent {
            self.metrics.rules_published.inc();
            self.metrics.rules_version.set(rules.version);
        }
        sent
    }

    pub fn rules(&self) -> Arc<RuleSet> {
        self.rules.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<Arc<RuleSet>> {
        self.rules.subscribe()
    }

    /// Renews the lease of what is published now on the own record `version`, durably written
    /// at `written_at_ms` on this Region's clock (never later than `now_ms`): gateways may enforce
    /// it until `written_at_ms` plus the full lease. Only a record newer than the one the lease
    /// stands on renews it. The caller publishes that record's rules first, so that a lease never
    /// stands on a record whose rules are not the ones served. Returns whether it renewed.
    pub fn renew_lease(&self, version: u64, written_at_ms: u64, now_ms: u64) -> bool {
        let until_ms = written_at_ms.min(now_ms).saturating_add(self.lease_full_ms);
        let renewed = self.lease.send_if_modified(|cur| {
            if version > cur.record_version {
                *cur = RuleLease {
                    until_ms,
                    record_version: version,
                };
                true
            } else {
                false
            }
        });
        if renewed {
            self.metrics.rules_lease_renewals.inc();
        }
        renewed
    }

    /// The lease of what is published now.
    pub fn lease(&self) -> RuleLease {
        *self.lease.borrow()
    }

    /// How long from `now_ms` gateways may still enforce what is published (0 once it ran out).
    pub fn lease_remaining_ms(&self, now_ms: u64) -> u64 {
        self.lease().until_ms.saturating_sub(now_ms)
    }

    pub fn lease_full_ms(&self) -> u64 {
        self.lease_full_ms
    }

    /// Wakes on every renewal (long-polls answer it with a 304 that carries the new lease).
    pub fn subscribe_lease(&self) -> watch::Receiver<RuleLease> {
        self.lease.subscribe()
    }

    /// The Prometheus exposition of this replica.
    pub fn render_metrics(&self) -> String {
        let view = self.view();
        let extra = crate::metrics::Extra {
            ready: self.is_ready(),
            store_ok: view.store_ok,
            watchers: self.watchers(),
            rules_lease_remaining_ms: self.lease_remaining_ms(self.clock.now_ms()),
            config_generation: self.config_status().generation,
        };
        self.metrics.render(&view, &extra)
    }

    /// Requests currently watching the rule set (long-polls in flight).
    pub fn watchers(&self) -> usize {
        self.rules.receiver_count()
    }

    pub fn demand(&self) -> MutexGuard<'_, DemandBook> {
        // The book stays consistent even if a holder panicked: every update is a few field writes.
        self.demand.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn view(&self) -> Arc<StateView> {
        self.view.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_view(&self, v: StateView) {
        *self.view.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(v);
    }

    /// One-way latch: set after the first successful read of all records.
    pub fn mark_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.clone()
    }
}

/// What the configuration reloads did, for `GET /v1/state` (`config`).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ConfigStatus {
    /// 1 for the configuration the daemon started with, one more for every reload that changed
    /// the limits.
    pub generation: u64,
    /// The file reloads read (`None`: the configuration came from `SHAREPLANE_CONFIG_TOML`).
    pub path: Option<String>,
    /// `applied`, `unchanged` or `refused`; `None` before the first reload.
    pub last_reload: Option<&'static str>,
    /// Wall-clock time of the last reload attempt (ms since the Unix epoch).
    pub last_reload_at_ms: Option<u64>,
    /// Every problem of the last refused reload, one per entry, each naming its field; cleared by
    /// a reload that is applied or finds nothing to change.
    pub last_reload_error: Vec<String>,
}

/// How long gateways may enforce what a replica publishes (SPEC §7), on the Region's clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleLease {
    /// Gateways may enforce the published rule set until this time (0: never renewed).
    pub until_ms: u64,
    /// The own record version the lease stands on; rises with every renewal.
    pub record_version: u64,
}

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
    pub peers: Vec<PeerJson>,
    pub limits: Vec<LimitJson>,
    pub alarms: Vec<String>,
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
    pub d: &'a Deployment,
    pub me: RegionId,
    pub role: &'static str,
    pub replica: &'a str,
    pub own: Option<&'a RegionRecord>,
    /// Latest record of each peer by Region index (`None` where unknown or for the own Region).
    pub peer_records: Vec<Option<Arc<RegionRecord>>>,
    /// The coordinator's peer views (leader only).
    pub peer_views: Option<Vec<PeerView>>,
    pub health: PerRegion<Health>,
    pub store_ok: bool,
    pub last_error: Option<String>,
    pub rules_version: u64,
    pub alarms: Vec<String>,
    /// The leader's count of rebalances in a row waiting for each peer's record, by Region index
    /// (empty for a follower).
    pub waiting_for_record: Vec<u32>,
    /// Phase ticks in a row at which each peer named other limits, by Region index (empty:
    /// not counted yet).
    pub limits_mismatch: Vec<u32>,
}

impl StateView {
    fn starting(d: &Deployment, me: RegionId) -> StateView {
        build_view(ViewInput {
            d,
            me,
            role: "starting",
            replica: "",
            own: None,
            peer_records: Vec::new(),
            peer_views: None,
            health: PerRegion::default(),
            store_ok: true,
            last_error: None,
            rules_version: 0,
            alarms: Vec::new(),
            waiting_for_record: Vec::new(),
            limits_mismatch: Vec::new(),
        })
    }
}

pub fn build_view(v: ViewInput<'_>) -> StateView {
    let d = v.d;
    let limits = d
        .limits
        .iter()
        .enumerate()
        .map(|(li, spec)| limit_view(&v, li, spec))
        .collect();
    let peers = regions(d.n())
        .filter(|&r| r != v.me)
        .map(|r| peer_view(&v, r))
        .collect();
    StateView {
        region: d.region_name(v.me).to_string(),
        role: v.role,
        replica: v.replica.to_string(),
        policy: d.policy.name(),
        period_ms: d.period_ms,
        store_ok: v.store_ok,
        epoch: v.own.map_or(0, |o| o.epoch),
        record_version: v.own.map_or(0, |o| o.version),
        written_at_ms: v.own.map_or(0, |o| o.written_at_ms),
        rules_version: v.rules_version,
        limits_digest: format!("{:016x}", shareplane_core::limits_digest(&d.limits)),
        health: regions(d.n())
            .map(|r| (d.region_name(r).to_string(), health_name(v.health[r])))
            .collect(),
        peers,
        limits,
        last_error: v.last_error,
        alarms: v.alarms,
    }
}

/// A value per peer, by the peer's name.
fn by_peer(v: &ViewInput<'_>, f: impl Fn(RegionId) -> f64) -> BTreeMap<String, f64> {
    regions(v.d.n())
        .filter(|&r| r != v.me)
        .map(|r| (v.d.region_name(r).to_string(), f(r)))
        .collect()
}

fn peer_record(v: &ViewInput<'_>, r: RegionId) -> Option<Arc<RegionRecord>> {
    v.peer_records.get(r.index()).cloned().flatten()
}

fn limit_view(v: &ViewInput<'_>, li: usize, spec: &shareplane_core::LimitSpec) -> LimitJson {
    let e = v
        .own
        .and_then(|o| o.limits.get(li))
        .copied()
        .unwrap_or_default();
    // Granted to `r` and not yet taken by it, when both records refer to each other's epochs.
    let in_flight = |r: RegionId| {
        let taken = peer_record(v, r)
            .filter(|p| {
                v.own
                    .is_some_and(|o| p.accounts_with(v.me, o.epoch) && o.accounts_with(r, p.epoch))
            })
            .and_then(|p| p.limits.get(li).map(|l| l.taken[v.me]))
            .unwrap_or_default();
        e.granted[r].saturating_sub(taken).as_rps()
    };
    LimitJson {
        id: spec.id.clone(),
        kind: match spec.kind {
            LimitKind::Capacity => "capacity",
            LimitKind::Security { .. } => "security",
        },
        shadow: spec.shadow,
        rate: spec.rate.as_rps(),
        version: spec.version,
        adopted_version: e.limit_version,
        adopted_rate: e.rate.as_rps(),
        demand: e.demand.as_rps(),
        target: e.target.as_rps(),
        share: e.share.as_rps(),
        pool: e.pool.as_rps(),
        unmet: e.unmet.as_rps(),
        debt: e.debt.as_rps(),
        grants_in_flight: by_peer(v, in_flight),
        granted: by_peer(v, |r| e.granted[r].as_rps()),
        taken: by_peer(v, |r| e.taken[r].as_rps()),
        reclaimed: by_peer(v, |r| e.reclaimed[r].as_rps()),
        seen_sum_of_shares: seen_sum(v, li, e.share),
    }
}

fn peer_view(v: &ViewInput<'_>, r: RegionId) -> PeerJson {
    let rec = peer_record(v, r);
    let pv = v
        .peer_views
        .as_ref()
        .and_then(|ps| ps.iter().find(|p| p.region == r));
    let from_rec = |f: fn(&RegionRecord) -> u64| rec.as_deref().map_or(0, f);
    PeerJson {
        region: v.d.region_name(r).to_string(),
        epoch: pv.map_or_else(|| from_rec(|x| x.epoch), |p| p.epoch),
        version: pv.map_or_else(|| from_rec(|x| x.version), |p| p.version),
        unchanged: pv.map(|p| p.unchanged),
        state: match pv.map(|p| p.state) {
            Some(PeerState::Live) => "live",
            Some(PeerState::Silent) => "silent",
            Some(PeerState::Reclaimed) => "reclaimed",
            None => "unknown",
        },
        written_at_ms: pv.map_or_else(|| from_rec(|x| x.written_at_ms), |p| p.written_at_ms),
        waiting_for_record: v.waiting_for_record.get(r.index()).copied(),
        accounts_with_epoch: v.own.map(|o| o.peer_epochs[r]),
        limits_digest: rec
            .as_deref()
            .and_then(|x| x.limits_digest)
            .map(|x| format!("{x:016x}")),
        limits_mismatch: v.limits_mismatch.get(r.index()).copied(),
    }
}

/// The own share plus the latest published shares of peers not known to be reclaimed.
fn seen_sum(v: &ViewInput<'_>, li: usize, own: shareplane_core::Room) -> f64 {
    let mut sum = own.as_rps();
    for r in regions(v.d.n()).filter(|&r| r != v.me) {
        let reclaimed = v
            .peer_views
            .as_ref()
            .and_then(|ps| ps.iter().find(|p| p.region == r))
            .is_some_and(|p| p.state == PeerState::Reclaimed);
        if reclaimed {
            continue;
        }
        let rec = v.peer_records.get(r.index()).cloned().flatten();
        sum += rec
            .and_then(|p| p.limits.get(li).map(|l| l.share.as_rps()))
            .unwrap_or(0.0);
    }
    sum
}
