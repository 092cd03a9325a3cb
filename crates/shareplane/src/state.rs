//! What one Region's daemon shares between its rebalance loop and its API: the published rule
//! set and its lease (watch channels, for long-polls), the demand book, the latest state view,
//! readiness and metrics.

use crate::clock::Clock;
use crate::demand::{DemandBook, TrackedLimit};
use crate::metrics::Metrics;
use crate::rules::RuleSet;
pub use crate::view::{build_view, health_name, LimitJson, PeerJson, StateView, ViewInput};
use shareplane_core::{Deployment, RegionId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use tokio::sync::{mpsc, watch};

/// What the API and the reloader ask of a Region's loop.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Adopt a reloaded deployment (its coordinator decides whether it may).
    Adopt(Arc<Deployment>),
    /// Stop waiting for the last record of this peer's epoch, if the coordinator agrees.
    Abandon(RegionId, u64),
}

/// Commands that may wait for the loop; beyond this the API answers 503 and a reload is
/// refused, never queued without bound.
pub const MAX_QUEUED_COMMANDS: usize = 64;

/// State shared by a Region's loop and API handlers.
pub struct Shared {
    pub region: String,
    pub me: RegionId,
    /// The deployment the daemon runs; replaced only by the daemon's loop, between rebalances,
    /// when it adopts a reloaded configuration ([`Shared::set_deployment`]).
    d: RwLock<Arc<Deployment>>,
    /// What the API and the reloader ask of the loop, which reads them in its one `select!`
    /// ([`Shared::propose`], [`Shared::request_abandon`]).
    commands: mpsc::Sender<Command>,
    /// The receiving end, until the Region's daemon takes it ([`Shared::take_commands`]).
    commands_rx: Mutex<Option<mpsc::Receiver<Command>>>,
    /// This Region's part of every template, published with every rule set
    /// ([`crate::templates`]).
    templates: RwLock<Arc<Vec<shareplane_limiter::TemplateWire>>>,
    /// What the last reloads of the configuration did (`GET /v1/state`, `config`).
    config: RwLock<ConfigStatus>,
    pub clock: Clock,
    /// Bearer token of `POST /v1/demand` (every gateway holds it); `None` refuses it.
    pub api_token: Option<String>,
    /// Bearer token of the operator endpoints (`POST /v1/peers/{region}/abandon`); `None`
    /// refuses them (see [`crate::tokens`]).
    pub admin_token: Option<String>,
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
    /// A Region's state without an admin token (its operator endpoints answer 403).
    pub fn new(
        d: Arc<Deployment>,
        me: RegionId,
        clock: Clock,
        api_token: Option<String>,
        shutdown: watch::Receiver<bool>,
    ) -> Arc<Shared> {
        Self::new_with_admin(d, me, clock, api_token, None, shutdown)
    }

    /// A Region's state whose operator endpoints take `admin_token`.
    pub fn new_with_admin(
        d: Arc<Deployment>,
        me: RegionId,
        clock: Clock,
        api_token: Option<String>,
        admin_token: Option<String>,
        shutdown: watch::Receiver<bool>,
    ) -> Arc<Shared> {
        let region = d.region_name(me).to_string();
        let view = StateView::starting(&d, me);
        let lease_full_ms = shareplane_core::lease_bound(&d).map_or(0, |b| b.lease_ms);
        let (commands, commands_rx) = mpsc::channel(MAX_QUEUED_COMMANDS);
        Arc::new(Shared {
            region,
            me,
            clock,
            api_token,
            admin_token,
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
            commands,
            commands_rx: Mutex::new(Some(commands_rx)),
            templates: RwLock::new(Arc::new(Vec::new())),
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

    /// This Region's part of every template, as its rule sets carry them.
    pub fn templates(&self) -> Arc<Vec<shareplane_limiter::TemplateWire>> {
        self.templates
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Publishes `templates` (this Region's parts) with the next rule set.
    pub fn set_templates(&self, templates: Vec<shareplane_limiter::TemplateWire>) {
        *self.templates.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(templates);
    }

    /// Hands a reloaded deployment to the loop, which adopts it between rebalances, in the
    /// order proposed. False (nothing queued) when [`MAX_QUEUED_COMMANDS`] wait already: the
    /// loop is not reading them.
    pub fn propose(&self, d: Arc<Deployment>) -> bool {
        self.commands.try_send(Command::Adopt(d)).is_ok()
    }

    /// Asks the loop to stop waiting for the last record of `peer`'s epoch `epoch`
    /// (`POST /v1/peers/{region}/abandon`); the coordinator decides at the next rebalance.
    /// False (nothing queued) when the queue is full.
    pub fn request_abandon(&self, peer: RegionId, epoch: u64) -> bool {
        self.commands
            .try_send(Command::Abandon(peer, epoch))
            .is_ok()
    }

    /// The loop's end of the commands: the first caller (the Region's daemon) gets it.
    pub fn take_commands(&self) -> Option<mpsc::Receiver<Command>> {
        self.commands_rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// The commands queued and not taken by a loop (a Region with no daemon: tests).
    pub fn queued_commands(&self) -> Vec<Command> {
        let mut rx = self.commands_rx.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        while let Some(c) = rx.as_mut().and_then(|rx| rx.try_recv().ok()) {
            out.push(c);
        }
        out
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
        let version = rules.version;
        let sent = self.rules.send_if_modified(|cur| {
            let changed =
                cur.version == 0 || cur.rules != rules.rules || cur.templates != rules.templates;
            if rules.version > cur.version && changed {
                // What changed since each of the latest sets, for gateways that ask for deltas.
                *cur = Arc::new(rules.after(cur));
                true
            } else {
                false
            }
        });
        if sent {
            self.metrics.rules_published.inc();
            self.metrics.rules_version.set(version);
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
    /// `file` or `table`: where the limits come from.
    pub limits_source: &'static str,
    /// With `table`: the version of the shared limits document the running limits come from.
    pub limits_version: Option<u64>,
}

/// How long gateways may enforce what a replica publishes (SPEC §7), on the Region's clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleLease {
    /// Gateways may enforce the published rule set until this time (0: never renewed).
    pub until_ms: u64,
    /// The own record version the lease stands on; rises with every renewal.
    pub record_version: u64,
}
