//! `shareplane local`: the real Region daemons on one machine, before any deployment.
//!
//! Three Regions, A, B and C, each a whole `shareplane run` daemon ([`crate::RegionDaemon`]: its
//! own configuration file, API listener, reloader and rebalance loop), on a simulated global table
//! (records visible to the other Regions a fifth of a period after they are written, as
//! DynamoDB's replication takes about a second of five) and a health source the operator sets.
//! What differs from `shareplane run` is only what the binary would otherwise connect to: the
//! table and the health checks. The files are ordinary configurations (`shareplane validate`
//! accepts them; editing one reloads that Region), and each Region's API serves gateways as a
//! deployed daemon does (`shareplane gateway --rules http://127.0.0.1:PORT`).
//!
//! A control listener takes the operator's faults:
//! `POST /regions/{name}/stop` and `/start` (the daemon process goes and comes back: a restart
//! resumes its record, or starts a new epoch when it was away too long), `/cut` and `/heal` (its
//! records stop crossing, both ways), and `/health` with a body `healthy`, `unhealthy` or
//! `unknown` (what the Region's Route 53 check would report; `unknown` for longer than a minute
//! raises the `health_unknown` alarm, as a health source that never answers does).
//!
//! With a `redis-server` (given, or found on the `PATH`), each Region also gets its Redis and a
//! gateway (`crate::local_gateways`): the HTTP check and Envoy's rate limit service, limiting at
//! that Region's share under its lease, as `shareplane gateway` does in a deployment.

use crate::clock::Clock;
use crate::health::SimHealth;
use crate::local_gateways::{GatewaySpec, LocalGateway};
use crate::reload::ConfigSource;
use crate::table::SimTable;
use crate::RegionDaemon;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use shareplane_core::{Health, PerRegion, RegionId, MAX_REGIONS};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use tokio::sync::watch;
use tracing::{info, warn};

/// The Regions `local` runs.
pub const NAMES: [&str; 3] = ["A", "B", "C"];

/// How `shareplane local` runs.
#[derive(Clone, Debug)]
pub struct LocalOptions {
    /// Where the three configuration files are written (and read from: edit one to reload).
    pub dir: PathBuf,
    /// The control listener's port; Region `i`'s API listens on `port + 1 + i`. 0: the system
    /// picks every port.
    pub port: u16,
    pub period_ms: u64,
    /// The `redis-server` for each Region's gateway; `None`: no gateways.
    pub redis_server: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error(transparent)]
    Gateway(#[from] crate::local_gateways::StartError),
    #[error("period_ms must be 200 to 60000, got {0}")]
    Period(u64),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {errors}")]
    Config { path: PathBuf, errors: String },
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the control listener failed: {0}")]
    Serve(std::io::Error),
}

/// One Region: its configuration file, API address and the daemon running now, if any.
struct Region {
    id: RegionId,
    config: PathBuf,
    api: SocketAddr,
    running: Option<Running>,
}

struct Running {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// The three Regions, their table and health, shared by the control handlers.
pub struct Local {
    table: SimTable,
    health: SimHealth,
    regions: tokio::sync::Mutex<Vec<Region>>,
    /// The control listener's address.
    pub control: SocketAddr,
    /// The bearer tokens the files name (gateways' demand reports; the operator's endpoints).
    pub api_token: String,
    pub admin_token: String,
    /// Each Region's gateway and Redis (none without a `redis-server`).
    pub gateways: tokio::sync::Mutex<Vec<LocalGateway>>,
    /// Whether gateways were asked for (a `redis-server` was given or found).
    pub with_gateways: bool,
}

/// The configuration file of Region `i` (a `shareplane run` file on the memory store, which
/// `local` replaces by its shared table).
pub fn config_text(i: usize, api: SocketAddr, period_ms: u64, tokens: (&str, &str)) -> String {
    let regions: String = NAMES
        .iter()
        .map(|n| format!("[[regions]]\nname = \"{n}\"\n"))
        .collect();
    format!(
        "# shareplane local: Region {name}. Edit and save to reload (a rate at a higher version, an\n\
         # added limit); the daemon keeps running what it has if the file is refused.\n\
         region = \"{name}\"\nphase_ms = {phase}\nperiod_ms = {period_ms}\nstore = \"memory\"\n\
         policy = \"two-signals\"\nfence = \"own-unhealthy\"\nlisten = \"{api}\"\n\
         api_token = \"{api_token}\"\nadmin_token = \"{admin_token}\"\n\n{regions}\n\
         [[limits]]\nid = \"k-big\"\nrate = 10000\nburst_s = 2\nfloor = 500\nstep_cap = 1000\n\
         kind = \"capacity\"\nversion = 1\n",
        name = NAMES[i],
        phase = period_ms * i as u64 / NAMES.len() as u64,
        api_token = tokens.0,
        admin_token = tokens.1,
    )
}

impl Local {
    /// Writes the files and starts the three daemons and the control listener on `control`
    /// (bound already). They stop on `shutdown`.
    pub async fn start(
        opts: &LocalOptions,
        control: SocketAddr,
        shutdown: watch::Receiver<bool>,
    ) -> Result<Arc<Local>, LocalError> {
        if !(200..=60_000).contains(&opts.period_ms) {
            return Err(LocalError::Period(opts.period_ms));
        }
        std::fs::create_dir_all(&opts.dir).map_err(|source| LocalError::Write {
            path: opts.dir.clone(),
            source,
        })?;
        let token = |what: &str| {
            let nanos = crate::clock::wall_now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            format!("local-{what}-{nanos:x}{:x}", std::process::id())
        };
        let (api_token, admin_token) = (token("api"), token("admin"));
        let mut regions = Vec::new();
        for (i, name) in NAMES.iter().enumerate() {
            let Some(id) = RegionId::new(i) else { continue };
            let port = if opts.port == 0 {
                0
            } else {
                opts.port.saturating_add(1 + i as u16)
            };
            // Bind now so that the file names the real port (with --port 0 the system's choice).
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            let listener = bind(addr).await?;
            let api = listener.local_addr().unwrap_or(addr);
            drop(listener);
            let config = opts.dir.join(format!("{}.toml", name.to_lowercase()));
            let text = config_text(i, api, opts.period_ms, (&api_token, &admin_token));
            std::fs::write(&config, text).map_err(|source| LocalError::Write {
                path: config.clone(),
                source,
            })?;
            regions.push(Region {
                id,
                config,
                api,
                running: None,
            });
        }
        let local = Arc::new(Local {
            table: crate::table::on_clock(Clock::wall(), regions.len(), opts.period_ms / 5),
            health: SimHealth::new(PerRegion([Health::Healthy; MAX_REGIONS])),
            regions: tokio::sync::Mutex::new(regions),
            control,
            api_token,
            admin_token,
            gateways: tokio::sync::Mutex::new(Vec::new()),
            with_gateways: opts.redis_server.is_some(),
        });
        for name in NAMES {
            local.start_region(name).await?;
        }
        if let Some(bin) = &opts.redis_server {
            local.start_gateways(bin, opts.port, &shutdown).await?;
        }
        tokio::spawn(local.clone().stop_all_on(shutdown));
        Ok(local)
    }

    /// Once `shutdown` says so, stops the Regions' daemons and then their redis-servers.
    async fn stop_all_on(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let _ = shutdown.wait_for(|s| *s).await;
        for name in NAMES {
            let _ = self.stop_region(name).await;
        }
        for g in self.gateways.lock().await.iter_mut() {
            g.stop().await;
        }
    }

    /// Starts each Region's `redis-server` and gateway; with `port` 0 the system picks their
    /// ports, else the HTTP checks listen on `port + 11…` and gRPC on `port + 21…`.
    async fn start_gateways(
        &self,
        bin: &FsPath,
        port: u16,
        shutdown: &watch::Receiver<bool>,
    ) -> Result<(), LocalError> {
        let regions = self.regions().await;
        let mut gateways = self.gateways.lock().await;
        for (i, (name, api, _)) in regions.iter().enumerate() {
            // Past the last port the bind fails and says which address.
            let at = |base: u16| match port {
                0 => 0,
                _ => port.saturating_add(base + i as u16),
            };
            let spec = GatewaySpec {
                region: name,
                api: *api,
                http_port: at(11),
                grpc_port: at(21),
                demand_token: &self.api_token,
            };
            gateways.push(crate::local_gateways::start(bin, spec, shutdown.clone()).await?);
        }
        Ok(())
    }

    /// Each Region's name, API address and configuration file.
    pub async fn regions(&self) -> Vec<(String, SocketAddr, PathBuf)> {
        let regions = self.regions.lock().await;
        (regions.iter())
            .map(|r| (NAMES[r.id.index()].to_owned(), r.api, r.config.clone()))
            .collect()
    }

    /// Starts Region `name`'s daemon from its file (an error if it runs or the file is refused).
    pub async fn start_region(&self, name: &str) -> Result<(), LocalError> {
        let mut regions = self.regions.lock().await;
        let Some(r) = regions.iter_mut().find(|r| NAMES[r.id.index()] == name) else {
            return Ok(());
        };
        if r.running.as_ref().is_some_and(|x| !x.task.is_finished()) {
            return Ok(());
        }
        let source = ConfigSource {
            path: Some(r.config.clone()),
            env: BTreeMap::new(),
        };
        let cfg = source.load().map_err(|e| LocalError::Config {
            path: r.config.clone(),
            errors: e.to_string(),
        })?;
        let listener = bind(r.api).await?;
        let (stop, stopped) = watch::channel(false);
        let daemon = RegionDaemon::new(cfg, source, stopped);
        let (store, health) = (self.table.view(r.id), self.health.clone());
        let region = name.to_owned();
        let task = tokio::spawn(async move {
            if let Err(e) = daemon.serve(listener, store, health).await {
                warn!(region, error = %e, "a local Region's daemon stopped with an error");
            }
        });
        r.running = Some(Running { stop, task });
        info!(region = name, api = %r.api, "local Region started");
        Ok(())
    }

    /// Stops Region `name`'s daemon as a process that exits would (its lease hands over, its
    /// records stop); false if it was not running.
    pub async fn stop_region(&self, name: &str) -> bool {
        let running = {
            let mut regions = self.regions.lock().await;
            regions
                .iter_mut()
                .find(|r| NAMES[r.id.index()] == name)
                .and_then(|r| r.running.take())
        };
        let Some(running) = running else {
            return false;
        };
        let _ = running.stop.send(true);
        let _ = running.task.await;
        info!(region = name, "local Region stopped");
        true
    }

    fn region_id(name: &str) -> Option<RegionId> {
        NAMES
            .iter()
            .position(|n| *n == name)
            .and_then(RegionId::new)
    }
}

async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, LocalError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| LocalError::Listen { addr, source })
}

/// The control API (see the module doc).
pub fn router(local: Arc<Local>) -> Router {
    Router::new()
        .route("/regions/{name}/{action}", post(control))
        .with_state(local)
}

async fn control(
    State(local): State<Arc<Local>>,
    Path((name, action)): Path<(String, String)>,
    body: String,
) -> (StatusCode, String) {
    let Some(id) = Local::region_id(&name) else {
        return (
            StatusCode::NOT_FOUND,
            format!("no Region {name:?}: A, B or C\n"),
        );
    };
    match action.as_str() {
        "stop" => match local.stop_region(&name).await {
            true => (StatusCode::OK, format!("{name} stopped\n")),
            false => (StatusCode::CONFLICT, format!("{name} is not running\n")),
        },
        "start" => match local.start_region(&name).await {
            Ok(()) => (StatusCode::OK, format!("{name} running\n")),
            Err(e) => (StatusCode::CONFLICT, format!("{name} not started: {e}\n")),
        },
        "cut" | "heal" => {
            let cut = action == "cut";
            local.table.set_cut(id, cut);
            (StatusCode::OK, format!("{name} {action}\n"))
        }
        "health" => {
            let verdict = match body.trim() {
                "healthy" => Health::Healthy,
                "unhealthy" => Health::Unhealthy,
                "unknown" => Health::Unknown,
                other => {
                    return (
                        StatusCode::BAD_REQUEST,
                        format!("health must be healthy, unhealthy or unknown, not {other:?}\n"),
                    )
                }
            };
            local.health.set(id, verdict);
            (StatusCode::OK, format!("{name} reads {}\n", body.trim()))
        }
        _ => (
            StatusCode::NOT_FOUND,
            format!("no action {action:?}: stop, start, cut, heal or health\n"),
        ),
    }
}

/// What `shareplane local` prints once everything runs.
pub async fn banner(local: &Local, dir: &FsPath) -> String {
    let mut out = format!(
        "shareplane local: Regions A, B and C as real daemons on a simulated global table; \
         their configuration files are in {}\n",
        dir.display()
    );
    let regions = local.regions().await;
    for (name, api, config) in &regions {
        out.push_str(&format!(
            "  {name}: dashboard http://{api}/dashboard, state http://{api}/v1/state, rules for \
             gateways http://{api} (file {})\n",
            config.display()
        ));
    }
    let c = local.control;
    out.push_str(&format!(
        "API token (gateways' demand reports): {}\nadmin token: {}\n\
         faults: curl -X POST http://{c}/regions/B/stop   (and /start, /cut, /heal)\n\
         \x20       curl -X POST http://{c}/regions/B/health -d unhealthy   (healthy, unknown)\n",
        local.api_token, local.admin_token,
    ));
    let gateways = local.gateways.lock().await;
    for g in gateways.iter() {
        out.push_str(&format!(
            "  {} gateway: curl -i 'http://{}/v1/check?limit=k-big'   (Envoy's rate limit \
             service: {}; its redis-server: {})\n",
            g.region, g.http, g.grpc, g.redis
        ));
    }
    if !local.with_gateways {
        out.push_str(&format!(
            "no gateways started (--no-gateways, or no redis-server found: install one or pass \
             --redis-server PATH). One for A, with a redis-server on 6379: shareplane gateway \
             --rules http://{} --redis redis://127.0.0.1:6379/ --demand-token {}\n",
            regions.first().map_or(c, |r| r.1),
            local.api_token,
        ));
    }
    out.push_str("Ctrl-C stops everything.\n");
    out
}

/// `shareplane local`: runs until SIGINT or SIGTERM.
pub async fn run(opts: LocalOptions) -> Result<(), LocalError> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(crate::shutdown_on_signals(tx));
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, opts.port));
    let listener = bind(addr).await?;
    let control = listener.local_addr().unwrap_or(addr);
    let local = Local::start(&opts, control, rx.clone()).await?;
    println!("{}", banner(&local, &opts.dir).await);
    let mut stop = rx;
    axum::serve(listener, router(local))
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await
        .map_err(LocalError::Serve)
}
