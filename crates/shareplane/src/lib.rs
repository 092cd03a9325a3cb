//! The per-Region daemon of shareplane, as a library so that tests drive it directly.
//!
//! - [`config`]: the TOML configuration and its checks (`shareplane validate`).
//! - [`daemon`]: one replica's rebalance loop and writer lease.
//! - [`reload`]: reloading the configuration on SIGHUP and when the file changes, and following
//!   the shared limits in the table.
//! - [`limits`]: `shareplane limits apply` and `show`, the one source of limits for every Region.
//! - [`api`]: the HTTP API (rules, demand, state, events, explain, health, metrics).
//! - [`events`]: operator events, logged and kept in a bounded ring.
//! - [`demo`]: three Regions in one process with a web dashboard (`shareplane demo`).
//! - [`table`]: the simulated global table (`shareplane_table`, the simulator's) on the daemon's
//!   clock, with visibility delay, cuts and heal (demo, `shareplane local` and tests).
//! - [`slow_store`]: the test-only store delay (`test_store_delay_ms`).
//! - [`state`]: what the loop and the API share; [`view`]: the `GET /v1/state` view it holds.
//! - `aws` (with the `aws` feature, on by default): the DynamoDB store, CloudWatch health and
//!   metrics of `shareplane-aws`; without it ([`WITH_AWS`] false) no AWS crate is compiled.
//!
//! `main.rs` only parses the command line and calls [`run`] or [`demo::run`]; [`run`] only wires
//! signals, a listener, a store and a health source to a [`RegionDaemon`], which tests run
//! in-process on their own.

pub mod api;
#[cfg(feature = "aws")]
pub mod aws;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod demand;
pub mod demo;
pub mod events;
pub mod health;
pub mod health_watch;
pub mod import;
pub mod limits;
pub mod local;
pub mod local_gateways;
pub mod metrics;
mod problem;
pub mod reload;
pub mod rules;
pub mod slow_store;
pub mod state;
pub mod table;
pub mod templates;
pub mod tokens;
pub mod view;

use crate::config::{Config, LimitsSource, StoreKind};
use crate::daemon::{Daemon, DaemonOptions};
use crate::health::{HealthSource, NoHealth};
use crate::slow_store::SlowStore;
use crate::state::Shared;
use shareplane_store::memory::MemoryStore;
use shareplane_store::{LimitsRead, RecordStore};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tracing::{info, warn};

/// Whether this binary was built with the `aws` feature (on by default): the DynamoDB store,
/// CloudWatch health and metrics, `shareplane limits apply|show`. Built with
/// `--no-default-features` (the README's demo) it compiles no AWS crate, and what needs one
/// refuses to start ([`require_aws`]).
pub const WITH_AWS: bool = cfg!(feature = "aws");

/// What `shareplane -V` prints after the name: the version, and whether AWS support is built in.
pub const VERSION: &str = if WITH_AWS {
    env!("CARGO_PKG_VERSION")
} else {
    concat!(
        env!("CARGO_PKG_VERSION"),
        " (built without AWS support: --no-default-features)"
    )
};

/// How long requests in flight may take to finish after a shutdown signal.
pub const DRAIN: Duration = Duration::from_secs(10);
/// How long the rebalance loop may take to finish its current rebalance after a shutdown signal.
pub const LOOP_STOP: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot set up the DynamoDB store: {0}")]
    Aws(shareplane_store::StoreError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("HTTP server failed: {0}")]
    Serve(std::io::Error),
    #[error("{0}")]
    NoApiToken(config::ConfigErrors),
    #[error("{0}")]
    NoAws(#[from] NoAws),
}

/// A configuration that needs AWS (`store = "dynamodb"`) in a binary built without it.
#[derive(Debug, thiserror::Error)]
#[error(
    "store = \"dynamodb\" needs AWS support (the DynamoDB global table, health read from \
     CloudWatch), and this shareplane was built without it (--no-default-features, as the \
     README's demo builds it); build it with the default features: cargo build -p shareplane"
)]
pub struct NoAws;

/// Refuses `store` unless this binary can reach it: `StoreKind::DynamoDb` needs a build
/// `with_aws` ([`WITH_AWS`]; a parameter so that tests check both builds). `run` and
/// `shareplane limits` call it before anything starts, so a light build fails at once and says
/// why, never later or silently.
pub fn require_aws(store: StoreKind, with_aws: bool) -> Result<(), NoAws> {
    match store {
        StoreKind::DynamoDb if !with_aws => Err(NoAws),
        _ => Ok(()),
    }
}

/// `shareplane run`: one replica of one Region's daemon, until SIGINT or SIGTERM. It reloads
/// its configuration from `source` on SIGHUP and when the file changes ([`reload`]). This is
/// the wiring alone: the signals, the listener, the store and the health source named by `cfg`;
/// everything else is [`RegionDaemon`], which a test runs in-process on its own.
pub async fn run(cfg: Config, source: reload::ConfigSource) -> Result<(), RunError> {
    // Fail closed: a daemon that cannot authenticate gateways' demand reports does not start.
    config::require_api_token(&cfg).map_err(RunError::NoApiToken)?;
    require_aws(cfg.store, WITH_AWS)?;
    let (tx, rx) = watch::channel(false);
    tokio::spawn(shutdown_on_signals(tx));
    if !cfg.test_store_delay.is_zero() {
        warn!(
            delay_ms = cfg.test_store_delay.as_millis() as u64,
            "test_store_delay_ms is set: every store call waits this long first (tests only)"
        );
    }
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|source| RunError::Listen {
            addr: cfg.listen,
            source,
        })?;
    match cfg.store {
        StoreKind::Memory => {
            warn!("store = \"memory\": records live in this process only; no other Region or replica sees them");
            let store = SlowStore::new(MemoryStore::new(), cfg.test_store_delay);
            let region = RegionDaemon::new(cfg, source, rx);
            tokio::spawn(reload::reload_on_sighup(region.reloads()));
            region.serve(listener, store, NoHealth).await
        }
        #[cfg(not(feature = "aws"))]
        StoreKind::DynamoDb => Err(RunError::NoAws(NoAws)),
        #[cfg(feature = "aws")]
        StoreKind::DynamoDb => {
            let aws = aws::connect(&cfg).await.map_err(RunError::Aws)?;
            let store = SlowStore::new(aws.store, cfg.test_store_delay);
            let mut rx = rx;
            let Some(cfg) = with_table_limits(cfg, &store, &mut rx).await else {
                return Ok(());
            };
            let region = RegionDaemon::new(cfg, source, rx);
            tokio::spawn(reload::reload_on_sighup(region.reloads()));
            tokio::spawn(aws::publish_metrics(aws.publisher, region.shared().clone()));
            region.serve(listener, store, aws.health).await
        }
    }
}

/// With `limits_source = "table"`: waits until the table holds a shared limits document that
/// `cfg` accepts, hands its limits to `store` ([`RecordStore::set_deployment`]) and returns `cfg`
/// running them, so that a restarted daemon resumes its record with the limits it holds. With
/// `"file"`: `cfg` as it is. `None` if `shutdown` comes first.
///
/// Until then nothing runs: no record is written and no API answers, so the Region's health
/// check fails and its gateways' lease runs out, exactly as for a daemon that is down. Each
/// different reason to wait is logged once (nothing in the table yet, a version still
/// replicating, one this configuration refuses, the store failing).
pub async fn with_table_limits<S: RecordStore>(
    cfg: Config,
    store: &S,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Config> {
    if cfg.limits_source == LimitsSource::File {
        return Some(cfg);
    }
    let period = Duration::from_millis(cfg.period_ms);
    let mut last_problem = String::new();
    // A version refused once is refused again (nothing it is checked against changes here).
    let mut refused = None;
    loop {
        let problem = match store.read_limits().await {
            Ok(LimitsRead::Complete(doc)) if refused == Some(doc.version) => last_problem.clone(),
            Ok(LimitsRead::Complete(doc)) => {
                match config::parse_limits(&doc.text, &cfg.deployment.regions)
                    .and_then(|limits| config::with_limits(&cfg, limits, doc.version))
                {
                    Ok(running) => {
                        store.set_deployment(running.deployment.clone());
                        info!(
                            version = doc.version,
                            limits = running.deployment.limits.len(),
                            applied_by = %doc.applied_by,
                            "running the shared limits from the table"
                        );
                        return Some(running);
                    }
                    Err(e) => {
                        refused = Some(doc.version);
                        format!(
                            "shared limits version {} cannot run here, waiting for a newer one: {e}",
                            doc.version
                        )
                    }
                }
            }
            Ok(LimitsRead::Absent) => format!(
                "table {:?} holds no shared limits yet; write them with `shareplane limits apply \
                 --config FILE LIMITS.toml`",
                cfg.table
            ),
            Ok(LimitsRead::Incomplete { version }) => {
                format!("shared limits version {version} has not fully arrived at this replica yet")
            }
            Err(e) => format!("cannot read the shared limits: {e}"),
        };
        if problem != last_problem {
            warn!("{problem}; retrying every period");
            last_problem = problem;
        }
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = shutdown.wait_for(|s| *s) => return None,
        }
    }
}

/// One replica of one Region's daemon, on whatever it is handed: the listener, the store, the
/// health source and the shutdown signal come from outside ([`run`] for the binary, a test for
/// itself), as do reload triggers ([`RegionDaemon::reloads`]; the reloader also follows changes
/// of the file).
pub struct RegionDaemon {
    cfg: Config,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
    reloads: reload::ReloadHandle,
}

impl RegionDaemon {
    /// The Region's shared state and its reloader (started here: call within a Tokio runtime).
    /// `shutdown` turning true stops [`RegionDaemon::serve`].
    pub fn new(
        cfg: Config,
        source: reload::ConfigSource,
        shutdown: watch::Receiver<bool>,
    ) -> RegionDaemon {
        let shared = Shared::new_with_admin(
            cfg.deployment.clone(),
            cfg.me,
            clock::Clock::wall(),
            cfg.api_token.clone(),
            cfg.admin_token.clone(),
            shutdown.clone(),
        );
        if cfg.admin_token.is_none() {
            tracing::info!(
                "notice: no admin token ({} or admin_token): the operator endpoints \
                 (POST /v1/peers/{{region}}/abandon) answer 403 until one is configured",
                config::ENV_ADMIN_TOKEN
            );
        }
        shared.set_templates(templates::wire(&cfg.templates, cfg.deployment.n(), cfg.me));
        let (reloader, reloads) = reload::Reloader::new(source, cfg.clone(), shared.clone());
        tokio::spawn(reloader.run());
        RegionDaemon {
            cfg,
            shared,
            shutdown,
            reloads,
        }
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Asks for a reload (what SIGHUP does in [`run`]).
    pub fn reloads(&self) -> reload::ReloadHandle {
        self.reloads.clone()
    }

    /// Runs the rebalance loop on `store` and `health` and serves the API on `listener` until
    /// the shutdown signal; then drains requests in flight ([`DRAIN`]) and waits for the loop
    /// ([`LOOP_STOP`]).
    pub async fn serve<S: RecordStore, H: HealthSource>(
        self,
        listener: tokio::net::TcpListener,
        store: S,
        health: H,
    ) -> Result<(), RunError> {
        let cfg = &self.cfg;
        let mut opts = DaemonOptions::new(cfg.replica_id.clone(), cfg.phase_ms, cfg.period_ms);
        opts.rollout_periods = cfg.limits_rollout_periods;
        opts.call_timeout_ms = cfg.timeouts.store_ms;
        opts.health_timeout_ms = cfg.timeouts.health_ms;
        let store = Arc::new(store);
        if cfg.limits_source == LimitsSource::Table {
            tokio::spawn(reload::follow_table_limits(
                store.clone(),
                self.reloads.clone(),
                cfg.limits_version.unwrap_or(0),
                Duration::from_millis(cfg.period_ms),
            ));
        }
        let loop_task = tokio::spawn(Daemon::new(self.shared.clone(), store, health, opts).run());
        // The bound address (with `listen = "127.0.0.1:0"` the port the system chose).
        let bound = listener.local_addr().unwrap_or(cfg.listen);
        info!(region = %cfg.region, listen = %bound, "serving the API");
        let served = api::serve(listener, api::router(self.shared), self.shutdown, DRAIN).await;
        stop_loop(loop_task).await;
        served.map_err(RunError::Serve)
    }
}

/// Waits (bounded) for a rebalance loop to finish after the shutdown signal.
pub async fn stop_loop(task: tokio::task::JoinHandle<()>) {
    let abort = task.abort_handle();
    match tokio::time::timeout(LOOP_STOP, task).await {
        Ok(_) => info!("rebalance loop finished cleanly"),
        Err(_) => {
            abort.abort();
            warn!("rebalance loop did not finish in time; abandoned it (nothing uncommitted is published)");
        }
    }
}

/// Sets `tx` to true on the first SIGINT or SIGTERM.
///
/// The handlers are registered when this is called, not when the future is first polled, so a
/// signal that arrives while the caller is still starting (before the spawned task first runs)
/// is a shutdown too, not the default action of ending the process undrained. Call it inside
/// the runtime. A handler that cannot be registered is logged and that signal keeps its
/// default action.
pub fn shutdown_on_signals(
    tx: watch::Sender<bool>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{signal, Signal, SignalKind};
    let register = |kind: SignalKind, name: &'static str| {
        signal(kind)
            .map_err(|e| warn!(error = %e, "cannot handle {name}: it ends the process undrained"))
            .ok()
    };
    let mut int = register(SignalKind::interrupt(), "SIGINT");
    let mut term = register(SignalKind::terminate(), "SIGTERM");
    async fn recv(s: &mut Option<Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    }
    async move {
        tokio::select! {
            () = recv(&mut int) => info!("SIGINT received; shutting down"),
            () = recv(&mut term) => info!("SIGTERM received; shutting down"),
        }
        let _ = tx.send(true);
    }
}

/// How log lines are written, and the `--log-format` option of every long-running subcommand
/// (shared with `shareplane-loadgen`).
pub use shareplane_limiter::logging::{LogArgs, LogFormat};

/// Logs to stderr in `format`; `RUST_LOG` overrides the default `info` level.
pub fn init_logging_as(format: LogFormat) {
    shareplane_limiter::logging::init(format, "info");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamodb_needs_a_build_with_aws_and_memory_runs_in_either() {
        assert!(require_aws(StoreKind::DynamoDb, true).is_ok());
        assert!(require_aws(StoreKind::Memory, true).is_ok());
        assert!(require_aws(StoreKind::Memory, false).is_ok());
        let why = require_aws(StoreKind::DynamoDb, false)
            .map_err(|e| e.to_string())
            .err()
            .unwrap_or_default();
        // It names what needs AWS, why this binary lacks it, and how to build it in.
        for part in [
            "store = \"dynamodb\"",
            "--no-default-features",
            "cargo build -p shareplane",
        ] {
            assert!(why.contains(part), "{part:?} in {why:?}");
        }
    }
}
