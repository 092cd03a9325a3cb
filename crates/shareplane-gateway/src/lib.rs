//! `shareplane gateway`: any gateway can enforce shareplane's shares through it.
//!
//! - [`grpc`]: Envoy's rate limit service (`envoy.service.ratelimit.v3.RateLimitService`), which
//!   Envoy, Istio, Contour, Emissary, Envoy Gateway and Gloo call;
//! - [`http`]: an HTTP check for NGINX `auth_request` (403) and Traefik ForwardAuth (429), with
//!   `/metrics`, `/healthz` (liveness) and `/readyz` (readiness, see [`health`]);
//! - [`mapping`]: which limit a descriptor names; [`decide`]: one decision for either front end,
//!   answered in the types of [`outcome`];
//! - [`config`]: flags and the TOML file; [`metrics`]: the Prometheus text.
//!
//! Underneath is `shareplane-limiter`: one Redis round trip per check (every limit of a request
//! in one script call), the rule watcher with its lease, the demand reporter and the failure
//! policies.

pub mod config;
pub mod decide;
pub mod grpc;
pub mod health;
pub mod http;
pub mod mapping;
pub mod metrics;
pub mod outcome;
pub mod reload;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use shareplane_limiter::{DemandReporter, Limiter, RuleWatcher};
use tokio::net::TcpListener;

pub use config::{Flags, GatewayConfig};

/// How long the servers may drain at shutdown.
pub const DRAIN: Duration = Duration::from_secs(5);
/// The long-poll wait asked of the daemon.
pub const RULES_WAIT_MS: u64 = 25_000;

/// Why the gateway could not run.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("limiter: {0}")]
    Limiter(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("gRPC server: {0}")]
    Grpc(#[from] tonic::transport::Error),
    #[error("HTTP server: {0}")]
    Http(std::io::Error),
}

/// Binds the configured listeners, prints their addresses on stdout (one line, so a caller that
/// asked for port 0 learns the ports), and serves until `shutdown` completes.
pub async fn run(
    cfg: GatewayConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), GatewayError> {
    let (_keep, reloads) = tokio::sync::mpsc::channel(1);
    run_reloading(cfg, shutdown, reloads).await
}

/// [`run`], adopting each configuration `reloads` brings where a reload may ([`reload`]).
pub async fn run_reloading(
    cfg: GatewayConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
    reloads: tokio::sync::mpsc::Receiver<ReloadRequest>,
) -> Result<(), GatewayError> {
    let grpc = match cfg.grpc_listen {
        Some(a) => Some(bind(a).await?),
        None => None,
    };
    let http = match cfg.http_listen {
        Some(a) => Some(bind(a).await?),
        None => None,
    };
    let addr = |l: &Option<TcpListener>| {
        l.as_ref()
            .and_then(|l| l.local_addr().ok())
            .map_or("-".to_owned(), |a| a.to_string())
    };
    println!(
        "shareplane gateway listening: grpc {} http {}",
        addr(&grpc),
        addr(&http)
    );
    serve_reloading(cfg, grpc, http, shutdown, reloads).await
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, GatewayError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| GatewayError::Bind { addr, source })
}

/// A configuration to reload from (SIGHUP in `shareplane gateway`), or why it did not load.
pub type ReloadRequest = Result<GatewayConfig, Vec<String>>;

/// Serves on the given listeners until `shutdown` completes, with the rule watcher and (with a
/// token) the demand reporter running; each server drains for at most [`DRAIN`].
pub async fn serve(
    cfg: GatewayConfig,
    grpc: Option<TcpListener>,
    http: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), GatewayError> {
    let (_keep, reloads) = tokio::sync::mpsc::channel(1);
    serve_reloading(cfg, grpc, http, shutdown, reloads).await
}

/// Adopts each configuration `reloads` brings where a reload may (see [`reload`]).
async fn follow_reloads(
    mut running: GatewayConfig,
    decider: Arc<decide::Decider>,
    mut reloads: tokio::sync::mpsc::Receiver<ReloadRequest>,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return,
            next = reloads.recv() => {
                let Some(new) = next else { return };
                let outcome = reload::reload(&mut running, &decider.live, new);
                decider.metrics.config_reload(&outcome);
            }
        }
    }
}

/// [`serve`], adopting each configuration `reloads` brings where a reload may ([`reload`]).
pub async fn serve_reloading(
    cfg: GatewayConfig,
    grpc: Option<TcpListener>,
    http: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    reloads: tokio::sync::mpsc::Receiver<ReloadRequest>,
) -> Result<(), GatewayError> {
    let limiter = Arc::new(
        Limiter::new(cfg.limiter.clone()).map_err(|e| GatewayError::Limiter(e.to_string()))?,
    );
    limiter.warm_up();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let mut tasks = tokio::task::JoinSet::new();
    let health = spawn_background(&cfg, &limiter, &mut tasks, &stopped)?;
    let decider = Arc::new(decide::Decider {
        limiter,
        live: reload::LiveCell::new(reload::Live::of(&cfg)),
        metrics: metrics::Metrics::default(),
    });
    tasks.spawn(follow_reloads(
        cfg.clone(),
        decider.clone(),
        reloads,
        stopped(),
    ));
    let grpc_server =
        grpc.map(|l| spawn_grpc(l, decider.clone(), cfg.ratelimit_headers, stopped()));
    let http_server = http.map(|l| {
        let app = http::router(decider.clone(), health, cfg.ratelimit_headers);
        spawn_http(l, app, stopped())
    });
    tracing::info!(rules = %cfg.rules_url, redis = %redact(&cfg.limiter.redis_url), "gateway serving");
    shutdown.await;
    tracing::info!("shutting down: draining for at most {DRAIN:?}");
    let _ = stop_tx.send(true);
    drain(grpc_server, http_server, tasks).await
}

/// The rule watcher (and the rules deadline of readiness) and, with a demand token, the demand
/// reporter, on `tasks` until `stopped` completes. Returns the health that follows the watcher.
fn spawn_background<F>(
    cfg: &GatewayConfig,
    limiter: &Arc<Limiter>,
    tasks: &mut tokio::task::JoinSet<()>,
    stopped: &impl Fn() -> F,
) -> Result<Arc<health::Health>, GatewayError>
where
    F: Future<Output = ()> + Send + 'static,
{
    let client =
        shareplane_limiter::http::client().map_err(|e| GatewayError::Limiter(e.to_string()))?;
    let watcher = RuleWatcher::new(client.clone(), &cfg.rules_url, RULES_WAIT_MS);
    let health = Arc::new(health::Health::new(watcher.clone(), cfg.rules_timeout));
    let guard = health.watcher_guard();
    let watching = watcher.run(limiter.clone(), stopped());
    tasks.spawn(async move {
        watching.await;
        drop(guard);
    });
    let deadline = health.clone().rules_deadline(limiter.clone());
    let stop = stopped();
    tasks.spawn(async move {
        tokio::select! {
            () = deadline => {}
            () = stop => {}
        }
    });
    match &cfg.demand_token {
        Some(token) => {
            let incarnation = shareplane_limiter::demand::Incarnation::now();
            let reporter =
                DemandReporter::new(client, &cfg.rules_url, token, &cfg.gateway_id, incarnation)
                    .map_err(|e| GatewayError::Limiter(e.to_string()))?;
            tasks.spawn(reporter.run(limiter.clone(), cfg.demand_every, stopped()));
        }
        None => tracing::warn!("no demand token: this gateway reports no demand to its daemon"),
    }
    Ok(health)
}

/// Envoy's rate limit service on `l` until `stop`.
fn spawn_grpc(
    l: TcpListener,
    decider: Arc<decide::Decider>,
    ratelimit_headers: bool,
    stop: impl Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<Result<(), tonic::transport::Error>> {
    let svc = grpc::RlsService::new(decider, ratelimit_headers);
    tokio::spawn(async move {
        let incoming = tonic::transport::server::TcpIncoming::from(l).with_nodelay(Some(true));
        let r = tonic::transport::Server::builder()
            .concurrency_limit_per_connection(1_024)
            .timeout(Duration::from_secs(5))
            .add_service(svc.into_server())
            .serve_with_incoming_shutdown(incoming, stop)
            .await;
        if let Err(e) = &r {
            tracing::error!(error = %shareplane_limiter::http::with_causes(e), "gRPC server stopped");
        }
        r
    })
}

/// The HTTP check, `/metrics` and the health endpoints on `l` until `stop`.
fn spawn_http(
    l: TcpListener,
    app: axum::Router,
    stop: impl Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    tokio::spawn(async move {
        let r = axum::serve(l, app).with_graceful_shutdown(stop).await;
        if let Err(e) = &r {
            tracing::error!(error = %shareplane_limiter::http::with_causes(e), "HTTP server stopped");
        }
        r
    })
}

/// Waits at most [`DRAIN`] for the servers and the background tasks to finish.
async fn drain(
    grpc_server: Option<tokio::task::JoinHandle<Result<(), tonic::transport::Error>>>,
    http_server: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    mut tasks: tokio::task::JoinSet<()>,
) -> Result<(), GatewayError> {
    let drained = tokio::time::timeout(DRAIN, async {
        let mut result = Ok(());
        if let Some(h) = grpc_server {
            if let Ok(Err(e)) = h.await {
                result = Err(GatewayError::Grpc(e));
            }
        }
        if let Some(h) = http_server {
            if let Ok(Err(e)) = h.await {
                result = Err(GatewayError::Http(e));
            }
        }
        while tasks.join_next().await.is_some() {}
        result
    })
    .await;
    match drained {
        Ok(r) => r,
        Err(_) => {
            tracing::warn!("drain bound reached; closing what is left");
            Ok(())
        }
    }
}

/// A Redis URL without its password, for logs.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://…@{}", &url[..s], &url[at + 1..]),
        _ => url.to_owned(),
    }
}
