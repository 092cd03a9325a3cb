//! `shareplane demo`: three Regions (A, B, C) in one process on a simulated global table, with
//! simulated health, synthetic demand, each Region's API under `/regions/{name}/` and a web
//! dashboard at `/` to watch shares move and to lose, cut and mark Regions.
//!
//! Setting: one limit `k-big` of 10,000/s (burst 2 s, floor 500, step cap 1,000), demands
//! A 7,200, B 3,600, C 1,200 (SPEC §9), policy two-signals. The period defaults to 1 s (production:
//! 5 s) with phases at 0, 1/3 and 2/3 of it, and records become visible to the other Regions a
//! fifth of a period after they are written (production: ~1 s of 5 s).

use crate::api::{self, ApiError};
use crate::clock::Clock;
use crate::daemon::{Daemon, DaemonOptions};
use crate::health::SimHealth;
use crate::state::Shared;
use crate::table::SimTable;
use crate::view::{health_name, StateView};
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use shareplane_core::{
    Deployment, Design, Fence, Health, LimitKind, LimitSpec, PerRegion, RegionId, Room,
    SilentPolicy,
};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tracing::info;

pub const DEFAULT_PERIOD_MS: u64 = 1_000;
/// A lost Region's health check turns unhealthy after this many periods (SPEC §9 G2: 30 s of
/// 5 s periods, shortened so the demo moves).
pub const UNHEALTHY_AFTER_PERIODS: u64 = 4;
const DASHBOARD: &str = include_str!("dashboard.html");
const NAMES: [&str; 3] = ["A", "B", "C"];
const DEMANDS_RPS: [f64; 3] = [7_200.0, 3_600.0, 1_200.0];
const MAX_DEMAND_RPS: f64 = 1_000_000.0;

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("period_ms must be 100 to 60000, got {0}")]
    Period(u64),
    #[error("bad demo deployment: {0}")]
    Deployment(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("HTTP server failed: {0}")]
    Serve(std::io::Error),
}

struct RegionCtl {
    shared: Arc<Shared>,
    paused: watch::Sender<bool>,
    demand_rps: f64,
    lost: bool,
    /// Bumped on every lose/restore, so a delayed "unhealthy" of an old loss does nothing.
    generation: u64,
}

/// The running demo.
pub struct Demo {
    table: SimTable,
    health: SimHealth,
    regions: Mutex<Vec<RegionCtl>>,
    period_ms: u64,
    visibility_ms: u64,
    api_token: String,
}

/// The demo's template: every API key gets 100 requests/s in total across the three Regions
/// (a burst of 2 s), each Region enforcing its static part (33.334 / 33.333 / 33.333).
pub fn per_api_key() -> crate::templates::TemplateSpec {
    crate::templates::TemplateSpec {
        id: "per_api_key".into(),
        entry: "api_key".into(),
        rate: Room::rps(100),
        burst_ms: 2_000,
        kind: shareplane_limiter::LimitKind::Capacity,
        shadow: false,
        overrides: vec![("partner-x".into(), Room::rps(1_000))],
        slots: 0,
        version: 1,
    }
}

/// The demo's coordinated template: every tenant gets 300 requests/s in total across the three
/// Regions, run as 4 coordination slots (`per_tenant#slot0`…`#slot3`, ordinary limits of the
/// deployment): a tenant belongs to one slot by its SHA-256 and is limited at that slot's share,
/// whose room moves by named grants to the Region where its tenants are busy.
pub fn per_tenant() -> crate::templates::TemplateSpec {
    crate::templates::TemplateSpec {
        id: "per_tenant".into(),
        entry: "tenant".into(),
        rate: Room::rps(300),
        burst_ms: 2_000,
        kind: shareplane_limiter::LimitKind::Capacity,
        shadow: false,
        overrides: vec![],
        slots: 4,
        version: 1,
    }
}

/// The demo's templates: [`per_api_key`] (a static split) and [`per_tenant`] (slots).
pub fn templates() -> Vec<crate::templates::TemplateSpec> {
    vec![per_api_key(), per_tenant()]
}

/// The deployment `shareplane demo` runs: [`deployment`]'s `k-big` and the slot limits of
/// [`templates`].
pub fn deployment_with_templates(period_ms: u64) -> Result<Deployment, DemoError> {
    let slots = crate::templates::slot_limits(&templates(), NAMES.len());
    build(period_ms, slots)
}

/// The demo's one listed limit, `k-big`, without the templates' slot limits (the daemon tests
/// use it).
pub fn deployment(period_ms: u64) -> Result<Deployment, DemoError> {
    build(period_ms, Vec::new())
}

fn build(period_ms: u64, more: Vec<LimitSpec>) -> Result<Deployment, DemoError> {
    let mut d = Deployment {
        regions: NAMES.iter().map(|s| s.to_string()).collect(),
        limits: vec![LimitSpec {
            id: "k-big".into(),
            version: 1,
            rate: Room::rps(10_000),
            burst_ms: 2_000,
            floor: Room::rps(500),
            step_cap: Room::rps(1_000),
            kind: LimitKind::Capacity,
            shadow: false,
        }],
        design: Design::NamedGrants,
        policy: SilentPolicy::TwoSignals,
        fence: Fence::OwnUnhealthy,
        silent_after: 3,
        period_ms,
    };
    d.limits.extend(more);
    Deployment::try_new(d).map_err(|es| {
        DemoError::Deployment(
            es.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; "),
        )
    })
}

impl Demo {
    /// Starts the three Regions' daemons and the synthetic demand; they stop on `shutdown`.
    pub fn start(period_ms: u64, shutdown: watch::Receiver<bool>) -> Result<Arc<Demo>, DemoError> {
        if !(100..=60_000).contains(&period_ms) {
            return Err(DemoError::Period(period_ms));
        }
        let d = Arc::new(deployment_with_templates(period_ms)?);
        shareplane_core::lease_bound(&d).map_err(|e| DemoError::Deployment(e.to_string()))?;
        let clock = Clock::wall();
        let visibility_ms = period_ms / 5;
        let table = crate::table::on_clock(clock, d.n(), visibility_ms);
        let health = SimHealth::new(PerRegion([Health::Healthy; shareplane_core::MAX_REGIONS]));
        let api_token = demo_token();
        let mut regions = Vec::new();
        for (i, name) in NAMES.iter().enumerate() {
            let Some(me) = RegionId::new(i) else { continue };
            let shared = Shared::new(
                d.clone(),
                me,
                clock,
                Some(api_token.clone()),
                shutdown.clone(),
            );
            shared.set_templates(crate::templates::wire(&templates(), d.n(), me));
            let (paused, paused_rx) = watch::channel(false);
            let phase_ms = period_ms * i as u64 / 3;
            let opts = DaemonOptions::new(format!("demo-{name}"), phase_ms, period_ms);
            let daemon = Daemon::new(shared.clone(), table.view(me), health.clone(), opts)
                .with_pause(paused_rx);
            tokio::spawn(daemon.run());
            regions.push(RegionCtl {
                shared,
                paused,
                demand_rps: DEMANDS_RPS[i],
                lost: false,
                generation: 0,
            });
        }
        let demo = Arc::new(Demo {
            table,
            health,
            regions: Mutex::new(regions),
            period_ms,
            visibility_ms,
            api_token,
        });
        tokio::spawn(synthetic_demand(demo.clone(), shutdown));
        Ok(demo)
    }

    /// The bearer token of the Regions' demand endpoints (printed at start).
    pub fn api_token(&self) -> &str {
        &self.api_token
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<RegionCtl>> {
        self.regions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The dashboard's whole picture.
    pub fn snapshot(&self) -> serde_json::Value {
        let regions = self.lock();
        let (mut sum, mut sum_enforced) = (0.0, 0.0);
        let list: Vec<_> = regions
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let view: Arc<StateView> = r.shared.view();
                let rules = r.shared.rules();
                let published = rules.rates.first().map_or(0.0, |x| x.as_rps());
                let lease_ms = r.shared.lease_remaining_ms(r.shared.clock.now_ms());
                // A lost Region's gateways are down with it: they admit nothing. Gateways whose
                // lease ran out fence: they admit nothing of a capacity limit either.
                let enforced = if r.lost || lease_ms == 0 { 0.0 } else { published };
                if !r.lost {
                    sum += published;
                }
                sum_enforced += enforced;
                let cut = RegionId::new(i).is_some_and(|id| self.table.is_cut(id));
                serde_json::json!({
                    "name": NAMES[i],
                    "lost": r.lost,
                    "cut": cut,
                    "synthetic_demand_rps": r.demand_rps,
                    "published": { "version": rules.version, "rate": published, "lease_ms": lease_ms },
                    "enforced": enforced,
                    "state": crate::view::StateJson::all(&view),
                })
            })
            .collect();
        let h = self.health.get();
        let health: serde_json::Map<String, serde_json::Value> = NAMES
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                RegionId::new(i).map(|r| (n.to_string(), health_name(h[r]).into()))
            })
            .collect();
        serde_json::json!({
            "period_ms": self.period_ms,
            "visibility_ms": self.visibility_ms,
            "unhealthy_after_ms": self.period_ms * UNHEALTHY_AFTER_PERIODS,
            "limit": { "id": "k-big", "rate": 10_000.0 },
            "sum_published": sum,
            "sum_enforced": sum_enforced,
            "lease_ms": regions.first().map_or(0, |r| r.shared.lease_full_ms()),
            "health": health,
            "regions": list,
        })
    }

    fn region(&self, name: &str) -> Result<(usize, RegionId), ApiError> {
        NAMES
            .iter()
            .position(|n| *n == name)
            .and_then(|i| RegionId::new(i).map(|r| (i, r)))
            .ok_or_else(|| ApiError(StatusCode::NOT_FOUND, format!("no Region {name:?}")))
    }

    /// Freezes a Region as if it were down (no records, no demand) and turns its health check
    /// unhealthy after a few periods, unless it is restored first.
    fn lose(self: &Arc<Self>, ctl: &mut RegionCtl, i: usize, r: RegionId) {
        ctl.lost = true;
        ctl.generation += 1;
        let _ = ctl.paused.send(true);
        let (demo, generation) = (self.clone(), ctl.generation);
        let after = Duration::from_millis(self.period_ms * UNHEALTHY_AFTER_PERIODS);
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let still = demo
                .lock()
                .get(i)
                .is_some_and(|c| c.lost && c.generation == generation);
            if still {
                demo.health.set(r, Health::Unhealthy);
            }
        });
    }

    /// Applies one dashboard control.
    pub fn control(
        self: &Arc<Self>,
        name: &str,
        action: &str,
        body: &serde_json::Value,
    ) -> Result<(), ApiError> {
        let (i, r) = self.region(name)?;
        let mut regions = self.lock();
        let Some(ctl) = regions.get_mut(i) else {
            return Err(ApiError(
                StatusCode::NOT_FOUND,
                format!("no Region {name:?}"),
            ));
        };
        match action {
            "demand" => {
                let rps = body
                    .get("rps")
                    .and_then(|v| v.as_f64())
                    .filter(|v| v.is_finite() && *v >= 0.0 && *v <= MAX_DEMAND_RPS);
                let Some(rps) = rps else {
                    return Err(ApiError(
                        StatusCode::BAD_REQUEST,
                        format!("rps must be a number from 0 to {MAX_DEMAND_RPS}"),
                    ));
                };
                ctl.demand_rps = rps;
            }
            "lose" => self.lose(ctl, i, r),
            "restore" => {
                ctl.lost = false;
                ctl.generation += 1;
                let _ = ctl.paused.send(false);
                self.health.set(r, Health::Healthy);
            }
            "cut" => self.table.set_cut(r, true),
            "heal" => self.table.set_cut(r, false),
            "health" => {
                let h = match body.get("health").and_then(|v| v.as_str()) {
                    Some("healthy") => Health::Healthy,
                    Some("unhealthy") => Health::Unhealthy,
                    Some("unknown") => Health::Unknown,
                    _ => {
                        return Err(ApiError(
                            StatusCode::BAD_REQUEST,
                            "health must be healthy, unhealthy or unknown".into(),
                        ))
                    }
                };
                self.health.set(r, h);
            }
            other => {
                return Err(ApiError(
                    StatusCode::NOT_FOUND,
                    format!("no action {other:?}"),
                ))
            }
        }
        info!(region = name, action, "demo control");
        Ok(())
    }
}

/// Adds each live Region's synthetic demand to its demand book every 100 ms.
async fn synthetic_demand(demo: Arc<Demo>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut carry = [0.0f64; 3];
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|v| *v) => return,
        }
        let regions = demo.lock();
        for (i, r) in regions.iter().enumerate() {
            if r.lost {
                continue;
            }
            let Some(c) = carry.get_mut(i) else { continue };
            *c += r.demand_rps / 10.0;
            let whole = c.floor();
            *c -= whole;
            let now = r.shared.clock.now_ms();
            r.shared.demand().add(now, 0, whole as u64);
        }
    }
}

/// The dashboard and the controls, with each Region's API under `/regions/{name}`.
pub fn router(demo: Arc<Demo>) -> Router {
    let mut app = Router::new()
        .route("/", get(dashboard))
        .route("/dashboard/chart.js", get(api::chart_script))
        .route("/demo/state", get(snapshot))
        .route("/demo/regions/{name}/{action}", post(control))
        .with_state(demo.clone());
    for ctl in demo.lock().iter() {
        let name = ctl.shared.region.clone();
        app = app.nest(&format!("/regions/{name}"), api::router(ctl.shared.clone()));
    }
    app.fallback(api::not_found)
}

async fn dashboard() -> Response {
    ([(header::CACHE_CONTROL, "no-cache")], Html(DASHBOARD)).into_response()
}

async fn snapshot(State(demo): State<Arc<Demo>>) -> Json<serde_json::Value> {
    Json(demo.snapshot())
}

async fn control(
    State(demo): State<Arc<Demo>>,
    Path((name, action)): Path<(String, String)>,
    body: Option<Json<serde_json::Value>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let body = body.map(|Json(v)| v).unwrap_or(serde_json::Value::Null);
    demo.control(&name, &action, &body)?;
    Ok(Json(serde_json::json!({ "ok": true })))
}

/// A token for the demo's demand endpoints, different on every start.
fn demo_token() -> String {
    let nanos = crate::clock::wall_now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("demo-{:x}{:x}", nanos, std::process::id())
}

/// `shareplane demo`: serves until SIGINT or SIGTERM.
pub async fn run(listen: SocketAddr, period_ms: u64) -> Result<(), DemoError> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(crate::shutdown_on_signals(tx));
    let demo = Demo::start(period_ms, rx.clone())?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| DemoError::Listen {
            addr: listen,
            source,
        })?;
    let addr = listener.local_addr().unwrap_or(listen);
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "the demo's controls need no token: anyone who reaches this address can use them");
    }
    println!("shareplane demo: three Regions (A, B, C) sharing k-big = 10,000 requests/s");
    println!("dashboard: http://{addr}/");
    println!(
        "Region APIs: http://{addr}/regions/A/v1/rules (also B, C); demand token: {}",
        demo.api_token
    );
    println!("press Ctrl-C to stop");
    api::serve(listener, router(demo), rx, Duration::from_secs(5))
        .await
        .map_err(DemoError::Serve)
}
