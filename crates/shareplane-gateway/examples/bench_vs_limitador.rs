//! What a check costs Redis, side by side: `shareplane gateway` against Kuadrant's
//! `limitador-server` with its Redis storage, on one redis-server, in one run.
//!
//! ```sh
//! cargo build -p shareplane
//! cargo run -p shareplane-gateway --example bench_vs_limitador -- \
//!   /tmp/limitador/target/release/limitador-server [CHECKS] [IN_FLIGHT] [ROUNDS] [RATE]
//! ```
//!
//! It starts one `redis-server` (`REDIS_SERVER`, default `redis-server` on the PATH) on a free
//! port of 127.0.0.1, a stand-in daemon that serves one rule set, `shareplane gateway`
//! (`SHAREPLANE_BIN`, default the `shareplane` beside this example's directory, i.e. the build of
//! the same profile) and `limitador-server … redis URL`. Both hold one limit, `bench-k`, with a
//! rate so high that nothing is refused, named by the same request: domain `bench`, one
//! descriptor `shareplane_limit=bench-k` (limitador: a limit in namespace `bench` whose condition
//! is that entry), so each check is one counter or bucket. Each round drives CHECKS (default
//! 50,000) `ShouldRateLimit` calls, IN_FLIGHT (default 64) at a time over 4 HTTP/2 connections,
//! at each server in turn (the order alternates between rounds), after a warm-up, as fast as
//! answers come or, with RATE, paced to RATE checks a second (0: unpaced), and reads
//! redis-server's `INFO cpu` (`used_cpu_user + used_cpu_sys`) and `INFO commandstats` around the
//! run (`CONFIG RESETSTAT` first). It prints per run and as medians over ROUNDS (default 3):
//! redis-server's CPU µs per check, the commands Redis ran per check (scripts' inner commands
//! included), checks/s, p50/p99 latency, and the server process's own CPU µs per check (from
//! /proc, 100 ticks a second), with the ratio shareplane ÷ limitador. Prints figures, asserts
//! nothing; a run with refusals or errors says so.
//!
//! Redis's CPU per check is not the script's work alone: redis-server answers every command one
//! read of a socket brings, so checks that arrive together share its event loop and system calls.
//! A server that answers slowly (a debug build) makes Redis's figure look higher; RATE sends both
//! the same stream, which compares like with like while neither server is saturated. Checks/s,
//! latency and the server's own CPU depend on the build: compare them only between like builds.
//! See docs/gateways.md, "What a check costs Redis, beside limitador", for how limitador-server
//! was built (Redis storage only) and for the caveats.

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use redis::aio::MultiplexedConnection;

#[path = "../../shareplane-limiter/examples/support/redis_info.rs"]
mod redis_info;
use tonic::transport::Channel;

#[path = "support/stand_in.rs"]
mod stand_in;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const LIMIT: &str = "bench-k";
const DOMAIN: &str = "bench";
/// HTTP/2 connections the calls are spread over (as an Envoy with several workers opens).
const CONNECTIONS: usize = 4;
/// Unmeasured checks before each measured run.
const WARM_UP: usize = 2_000;
/// `overall_code` OK in Envoy's RateLimitResponse.
const CODE_OK: i32 = 1;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: bench_vs_limitador LIMITADOR_SERVER [CHECKS] [IN_FLIGHT] [ROUNDS] [RATE]";
    let limitador_bin = PathBuf::from(args.next().ok_or(usage)?);
    let checks: usize = args.next().map_or(Ok(50_000), |s| s.parse())?;
    let in_flight: usize = args.next().map_or(Ok(64), |s| s.parse())?;
    let rounds: usize = args.next().map_or(Ok(3), |s| s.parse())?;
    let rate: Option<f64> = match args.next().map(|s| s.parse::<f64>()).transpose()? {
        Some(r) if r.is_finite() && r > 0.0 => Some(r),
        Some(0.0) | None => None,
        Some(r) => {
            return Err(format!("RATE {r}: want checks a second > 0, or 0 for unpaced").into())
        }
    };
    if checks == 0 || in_flight == 0 || rounds == 0 {
        return Err(format!("CHECKS, IN_FLIGHT and ROUNDS must be at least 1 ({usage})").into());
    }
    let redis_bin = std::env::var_os("REDIS_SERVER").map_or("redis-server".into(), PathBuf::from);
    let shareplane_bin = match std::env::var_os("SHAREPLANE_BIN") {
        Some(p) => PathBuf::from(p),
        None => default_shareplane()?,
    };
    for (what, p) in [
        ("limitador-server", &limitador_bin),
        ("shareplane", &shareplane_bin),
    ] {
        if !p.is_file() {
            return Err(format!("{what}: no file at {} ({usage})", p.display()).into());
        }
    }
    let dir = std::env::temp_dir().join(format!("bench_vs_limitador-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;

    let (_redis, redis_url) = start_redis(&redis_bin).await?;
    let rules_url = stand_in::rules_server(LIMIT).await?;
    let shareplane = start_shareplane(&shareplane_bin, &rules_url, &redis_url, &dir).await?;
    let limitador = start_limitador(&limitador_bin, &redis_url, &dir).await?;
    let mut conn = redis::Client::open(redis_url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let pace = rate.map_or("unpaced".into(), |r| format!("paced at {r} checks/s"));
    println!(
        "bench_vs_limitador: {checks} checks a run, at most {in_flight} in flight over \
         {CONNECTIONS} HTTP/2 connections, {pace}, {rounds} rounds, {} cores, load average \
         before: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        stand_in::loadavg()
    );
    println!("  shareplane: {}", shareplane_bin.display());
    println!("  limitador:  {}", limitador_bin.display());
    println!(
        "  redis:      {} ({redis_url})",
        redis_version(&mut conn).await?
    );

    let servers = [&shareplane, &limitador];
    let mut runs: [Vec<Measured>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for k in 0..2 {
            let i = if round % 2 == 0 { k } else { 1 - k };
            let m = measure(servers[i], &mut conn, checks, in_flight, rate).await?;
            println!("round {} {:<10} {}", round + 1, servers[i].name, m.line());
            runs[i].push(m);
        }
    }
    summary(&runs);
    println!("load average after: {}", stand_in::loadavg());
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The `shareplane` binary of this example's own profile (`target/<profile>/shareplane`).
fn default_shareplane() -> Result<PathBuf, BoxError> {
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("cannot place this example's directory")?;
    Ok(profile_dir.join("shareplane"))
}

/// A child process that is killed (by its own id) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One server under test.
struct Server {
    name: &'static str,
    grpc: SocketAddr,
    pid: u32,
    _proc: Proc,
}

fn spawn(cmd: &mut Command, log: Option<&Path>) -> Result<Proc, BoxError> {
    let out = match log {
        Some(p) => Stdio::from(std::fs::File::create(p)?),
        None => Stdio::null(),
    };
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(out)
        .spawn()
        .map_err(|e| format!("{:?}: {e}", cmd.get_program()))?;
    Ok(Proc(child))
}

fn free_port() -> Result<u16, BoxError> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

async fn start_redis(bin: &Path) -> Result<(Proc, String), BoxError> {
    let port = free_port()?;
    let proc = spawn(
        Command::new(bin)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"]),
        None,
    )?;
    let url = format!("redis://127.0.0.1:{port}/");
    let client = redis::Client::open(url.as_str())?;
    for _ in 0..200 {
        if let Ok(mut c) = client.get_multiplexed_async_connection().await {
            let pong: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut c).await;
            if pong.is_ok() {
                return Ok((proc, url));
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Err(format!("redis-server on port {port} did not answer").into())
}

/// `shareplane gateway` with a config file: one Redis call may take 1 s before the limit's
/// failure policy decides instead (the default 50 ms could let a slow debug build fall back to
/// its local share, which Redis would not see).
async fn start_shareplane(
    bin: &Path,
    rules_url: &str,
    redis_url: &str,
    dir: &Path,
) -> Result<Server, BoxError> {
    let (grpc, http) = (free_port()?, free_port()?);
    let cfg = dir.join("gateway.toml");
    std::fs::write(
        &cfg,
        format!(
            "rules = \"{rules_url}\"\nredis = \"{redis_url}\"\n\
             grpc_listen = \"127.0.0.1:{grpc}\"\nhttp_listen = \"127.0.0.1:{http}\"\n\
             redis_timeout_ms = 1000\n"
        ),
    )?;
    let mut cmd = Command::new(bin);
    cmd.arg("gateway").arg("--config").arg(&cfg);
    launch("shareplane", &mut cmd, grpc, dir).await
}

/// `limitador-server LIMITS_FILE redis URL`: one limit in namespace `bench` for the descriptor
/// entry `shareplane_limit=bench-k`, a billion a minute.
async fn start_limitador(bin: &Path, redis_url: &str, dir: &Path) -> Result<Server, BoxError> {
    let (grpc, http) = (free_port()?, free_port()?);
    let limits = dir.join("limits.yaml");
    std::fs::write(
        &limits,
        format!(
            "---\n- namespace: {DOMAIN}\n  max_value: 1000000000\n  seconds: 60\n  \
             conditions:\n    - \"descriptors[0]['shareplane_limit'] == '{LIMIT}'\"\n  \
             variables: []\n"
        ),
    )?;
    let mut cmd = Command::new(bin);
    cmd.args(["--rls-ip", "127.0.0.1", "--rls-port", &grpc.to_string()])
        .args(["--http-ip", "127.0.0.1", "--http-port", &http.to_string()])
        .arg(&limits)
        .args(["redis", redis_url]);
    launch("limitador", &mut cmd, grpc, dir).await
}

/// Starts `cmd` (its output in `DIR/NAME.log`) and waits until its gRPC port admits a check.
async fn launch(
    name: &'static str,
    cmd: &mut Command,
    grpc_port: u16,
    dir: &Path,
) -> Result<Server, BoxError> {
    let log = dir.join(format!("{name}.log"));
    let proc = spawn(cmd, Some(&log))?;
    let grpc = SocketAddr::from(([127, 0, 0, 1], grpc_port));
    wait_serving(name, grpc, &log).await?;
    Ok(Server {
        name,
        grpc,
        pid: proc.0.id(),
        _proc: proc,
    })
}

/// Waits (up to 30 s) until `grpc` admits a check; on failure, the server's log names why.
async fn wait_serving(name: &str, grpc: SocketAddr, log: &Path) -> Result<(), BoxError> {
    let mut last = String::from("never connected");
    for _ in 0..300 {
        match connect(grpc).await {
            Ok(mut c) => match c.should_rate_limit(stand_in::request(DOMAIN, LIMIT)).await {
                Ok(r) if r.get_ref().overall_code == CODE_OK => return Ok(()),
                Ok(r) => last = format!("answered {:?}", r.into_inner()),
                Err(e) => last = e.to_string(),
            },
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tail = std::fs::read_to_string(log).unwrap_or_default();
    Err(format!("{name} on {grpc} admitted no check in 30 s ({last}); its log:\n{tail}").into())
}

async fn connect(addr: SocketAddr) -> Result<RateLimitServiceClient<Channel>, BoxError> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .tcp_nodelay(true)
        .connect()
        .await?;
    Ok(RateLimitServiceClient::new(channel))
}

/// What the clients saw of one run.
struct Driven {
    secs: f64,
    lat_us: Vec<u32>,
    refused: u64,
    errors: u64,
}

/// `checks` calls to `addr`, at most `in_flight` at a time, spread over [`CONNECTIONS`]
/// connections; with `rate`, the i-th call is sent no earlier than i ÷ rate seconds after the
/// first (and later when `in_flight` are outstanding), without it as fast as answers come.
async fn drive(
    addr: SocketAddr,
    checks: usize,
    in_flight: usize,
    rate: Option<f64>,
) -> Result<Driven, BoxError> {
    let mut clients = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        clients.push(connect(addr).await?);
    }
    let slots = Arc::new(tokio::sync::Semaphore::new(in_flight));
    let started = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..checks {
        if let Some(r) = rate {
            tokio::time::sleep_until(started + Duration::from_secs_f64(i as f64 / r)).await;
        }
        let slot = slots.clone().acquire_owned().await?;
        let mut c = clients[i % CONNECTIONS].clone();
        tasks.spawn(async move {
            let t = Instant::now();
            let r = c.should_rate_limit(stand_in::request(DOMAIN, LIMIT)).await;
            drop(slot);
            let us = u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX);
            r.map(|r| (r.get_ref().overall_code == CODE_OK, us))
        });
    }
    let mut out = Driven {
        secs: 0.0,
        lat_us: Vec::with_capacity(checks),
        refused: 0,
        errors: 0,
    };
    while let Some(r) = tasks.join_next().await {
        match r? {
            Ok((true, us)) => out.lat_us.push(us),
            Ok((false, _)) => out.refused += 1,
            Err(_) => out.errors += 1,
        }
    }
    out.secs = started.elapsed().as_secs_f64();
    out.lat_us.sort_unstable();
    Ok(out)
}

/// The figures of one measured run.
struct Measured {
    checks: usize,
    rate: f64,
    p50_ms: f64,
    p99_ms: f64,
    redis_cpu_us: f64,
    server_cpu_us: f64,
    commands: BTreeMap<String, f64>,
    refused: u64,
    errors: u64,
}

impl Measured {
    fn line(&self) -> String {
        let cmds: Vec<String> = self
            .commands
            .iter()
            .map(|(name, n)| format!("{name} {n:.3}"))
            .collect();
        let mut s = format!(
            "redis_cpu_us/check={:.2} checks/s={:.0} p50_ms={:.2} p99_ms={:.2} \
             server_cpu_us/check={:.1} commands/check: {}",
            self.redis_cpu_us,
            self.rate,
            self.p50_ms,
            self.p99_ms,
            self.server_cpu_us,
            cmds.join(", ")
        );
        if self.refused + self.errors > 0 {
            s += &format!(
                " (NOT COMPARABLE: {} refused, {} errors of {})",
                self.refused, self.errors, self.checks
            );
        }
        s
    }
}

/// A warm-up, then one measured run against `server` with Redis's statistics reset before it.
async fn measure(
    server: &Server,
    conn: &mut MultiplexedConnection,
    checks: usize,
    in_flight: usize,
    rate: Option<f64>,
) -> Result<Measured, BoxError> {
    drive(server.grpc, WARM_UP, in_flight, rate).await?;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await?;
    let redis_before = redis_info::cpu_s(conn).await?;
    let server_before = proc_cpu_s(server.pid)?;
    let d = drive(server.grpc, checks, in_flight, rate).await?;
    let server_cpu = proc_cpu_s(server.pid)? - server_before;
    let redis_cpu = redis_info::cpu_s(conn).await? - redis_before;
    let per = |n: f64| n / checks as f64;
    let commands = redis_info::commandstats(conn)
        .await?
        .into_iter()
        .filter(|(name, _)| name != "info" && !name.starts_with("config"))
        .map(|(name, (calls, _))| (name, per(calls as f64)))
        .collect();
    let q = |p: f64| {
        d.lat_us
            .get(((d.lat_us.len() as f64 * p) as usize).min(d.lat_us.len().saturating_sub(1)))
            .map_or(0.0, |us| f64::from(*us) / 1000.0)
    };
    Ok(Measured {
        checks,
        rate: checks as f64 / d.secs,
        p50_ms: q(0.50),
        p99_ms: q(0.99),
        redis_cpu_us: per(redis_cpu * 1e6),
        server_cpu_us: per(server_cpu * 1e6),
        commands,
        refused: d.refused,
        errors: d.errors,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Medians over the rounds, and shareplane ÷ limitador.
fn summary(runs: &[Vec<Measured>; 2]) {
    type Field = fn(&Measured) -> f64;
    let fields: [(&str, Field); 5] = [
        ("redis-server CPU µs/check", |m| m.redis_cpu_us),
        ("checks/s", |m| m.rate),
        ("p50 ms", |m| m.p50_ms),
        ("p99 ms", |m| m.p99_ms),
        ("server process CPU µs/check", |m| m.server_cpu_us),
    ];
    println!(
        "medians over {} rounds: {:<28} {:>11} {:>11} {:>22}",
        runs[0].len(),
        "",
        "shareplane",
        "limitador",
        "shareplane/limitador"
    );
    for (name, f) in fields {
        let s = median(runs[0].iter().map(f).collect());
        let l = median(runs[1].iter().map(f).collect());
        println!("  {name:<46} {s:>11.2} {l:>11.2} {:>21.2}x", s / l);
    }
    for (i, name) in [(0, "shareplane"), (1, "limitador")] {
        let mut names: Vec<&String> = runs[i].iter().flat_map(|m| m.commands.keys()).collect();
        names.sort();
        names.dedup();
        let per: Vec<String> = names
            .iter()
            .map(|n| {
                let v = median(
                    runs[i]
                        .iter()
                        .map(|m| m.commands.get(*n).copied().unwrap_or(0.0))
                        .collect(),
                );
                format!("{n} {v:.3}")
            })
            .collect();
        println!("  {name} commands/check: {}", per.join(", "));
    }
}

async fn redis_version(conn: &mut MultiplexedConnection) -> redis::RedisResult<String> {
    let info: String = redis::cmd("INFO").arg("server").query_async(conn).await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .map_or_else(
            || "redis-server".into(),
            |v| format!("redis-server {}", v.trim()),
        ))
}

/// A process's CPU time so far (user + system, all its threads), in seconds: fields 14 and 15 of
/// /proc/PID/stat, at the usual 100 ticks a second.
fn proc_cpu_s(pid: u32) -> Result<f64, BoxError> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> Result<f64, BoxError> {
        Ok(fields
            .get(i)
            .ok_or("short /proc stat")?
            .parse::<u64>()
            .map_err(|e| format!("/proc/{pid}/stat: {e}"))? as f64)
    };
    // After the name, field 3 is index 0: utime (14) is index 11, stime (15) index 12.
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}
