//! The gateways of `shareplane local`: for each Region, a `redis-server` of its own (the Region's
//! Redis/Valkey) and a `shareplane gateway` in this process, asking that Region's daemon for its
//! rule set and reporting its demand, as a deployed gateway does. Started only when a
//! `redis-server` binary is given or found on the `PATH`; each `redis-server` binds 127.0.0.1,
//! keeps nothing on disk and is stopped with `local` (killed if `local`'s process is dropped).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tracing::warn;

/// How many times, 50 ms apart, a starting `redis-server` is asked for PING (10 s in all).
const REDIS_PINGS: u32 = 200;

/// Why a Region's Redis or gateway did not start.
#[derive(Debug, thiserror::Error)]
#[error("Region {region}'s gateway: {why}")]
pub struct StartError {
    pub region: String,
    pub why: String,
}

/// One Region's gateway as `local` runs it.
pub struct LocalGateway {
    pub region: String,
    /// The HTTP check (`/v1/check?limit=…`), `/metrics`, `/healthz`, `/readyz`.
    pub http: SocketAddr,
    /// Envoy's rate limit service.
    pub grpc: SocketAddr,
    /// The Region's `redis-server`.
    pub redis: SocketAddr,
    /// Killed on drop, and by [`LocalGateway::stop`].
    child: Child,
}

impl LocalGateway {
    /// Stops the Region's `redis-server` (the gateway itself stops with `local`'s shutdown).
    pub async fn stop(&mut self) {
        let _ = self.child.kill().await;
    }
}

/// The `redis-server` to run: `given`, else the first on the `PATH`; `None` if there is none.
pub fn find_redis_server(given: Option<PathBuf>) -> Option<PathBuf> {
    if let Some(p) = given {
        return Some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("redis-server"))
        .find(|p| p.is_file())
}

/// What one Region's gateway is started with.
pub struct GatewaySpec<'a> {
    pub region: &'a str,
    /// The Region daemon's API (the gateway's `--rules`).
    pub api: SocketAddr,
    /// The gateway's HTTP and gRPC ports (0: the system picks).
    pub http_port: u16,
    pub grpc_port: u16,
    pub demand_token: &'a str,
}

/// Starts the Region's `redis-server` and its gateway; the gateway runs until `shutdown`.
pub async fn start(
    redis_server: &Path,
    spec: GatewaySpec<'_>,
    shutdown: watch::Receiver<bool>,
) -> Result<LocalGateway, StartError> {
    let (redis, child) = start_redis(redis_server, spec.region).await?;
    let region = spec.region;
    let bind = |port: u16| async move {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| gateway_error(region, format!("cannot listen on {addr}: {e}")))
    };
    let http = bind(spec.http_port).await?;
    let grpc = bind(spec.grpc_port).await?;
    let (http_addr, grpc_addr) = (local_addr(region, &http)?, local_addr(region, &grpc)?);
    let flags = shareplane_gateway::Flags {
        rules: Some(format!("http://{}", spec.api)),
        redis: Some(format!("redis://{redis}/")),
        http_listen: Some(http_addr),
        grpc_listen: Some(grpc_addr),
        demand_token: Some(spec.demand_token.to_owned()),
        gateway_id: Some(format!("local-{}", spec.region.to_lowercase())),
        ..Default::default()
    };
    // Named as a deployed gateway's file names it, so that a rule set of another Region (a
    // wrong `--rules`) is refused rather than enforced.
    let file = shareplane_gateway::config::FileConfig {
        region: Some(spec.region.to_owned()),
        ..Default::default()
    };
    let cfg = shareplane_gateway::config::resolve(file, flags)
        .map_err(|e| gateway_error(spec.region, e.to_string()))?;
    let region = spec.region.to_owned();
    let mut stop = shutdown;
    tokio::spawn(async move {
        let stopped = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        if let Err(e) = shareplane_gateway::serve(cfg, Some(grpc), Some(http), stopped).await {
            warn!(region, error = %e, "a local gateway stopped with an error");
        }
    });
    Ok(LocalGateway {
        region: spec.region.to_owned(),
        http: http_addr,
        grpc: grpc_addr,
        redis,
        child,
    })
}

fn local_addr(region: &str, l: &tokio::net::TcpListener) -> Result<SocketAddr, StartError> {
    l.local_addr()
        .map_err(|e| gateway_error(region, format!("no listener address: {e}")))
}

fn gateway_error(region: &str, why: String) -> StartError {
    StartError {
        region: region.to_owned(),
        why,
    }
}

/// Starts a `redis-server` on a free port of 127.0.0.1 that keeps nothing on disk, and waits
/// until it answers PING.
async fn start_redis(bin: &Path, region: &str) -> Result<(SocketAddr, Child), StartError> {
    // A free port: the system's choice for a listener dropped at once (another process could
    // take it in between; the PING below would then fail, with that said).
    let probe = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| gateway_error(region, format!("no free port for redis-server: {e}")))?;
    let addr = probe;
    let mut child = Command::new(bin)
        .args(["--bind", "127.0.0.1", "--port", &addr.port().to_string()])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| gateway_error(region, format!("cannot run {}: {e}", bin.display())))?;
    for _ in 0..REDIS_PINGS {
        if ping(addr).await {
            return Ok((addr, child));
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(gateway_error(
                region,
                format!("{} on {addr} exited: {status}", bin.display()),
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill().await;
    Err(gateway_error(
        region,
        format!("{} on {addr} did not answer PING for 10 s", bin.display()),
    ))
}

async fn ping(addr: SocketAddr) -> bool {
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    if s.write_all(b"PING\r\n").await.is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    matches!(
        tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await,
        Ok(Ok(n)) if buf[..n].starts_with(b"+PONG")
    )
}
