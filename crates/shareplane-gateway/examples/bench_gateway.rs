//! Checks per second and latency through the gateway's gRPC service and its HTTP check on
//! loopback, side by side in one run with direct calls of the same store (`RedisBuckets::run`:
//! the script, in batches of the checks that arrive together, as the gateway sends it).
//!
//! ```sh
//! redis-server --port 6411 --save '' --daemonize yes
//! SHAREPLANE_BENCH_REDIS_URL=redis://127.0.0.1:6411/ \
//!   cargo run --release -p shareplane-gateway --example bench_gateway [SECONDS] [CONCURRENCY]
//! ```
//!
//! Clients and gateway share this process (and the machine's cores), so the figures are what
//! the whole loop costs; each mode runs for SECONDS (default 5) with CONCURRENCY calls in flight
//! (default 64; gRPC calls spread over 4 HTTP/2 connections). One limit with a rate high enough that every call is admitted, so every call
//! reaches Redis.

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use shareplane_gateway::config::{self, FileConfig, Flags};
use shareplane_limiter::store::{BucketCall, RedisBuckets};

const LIMIT: &str = "bench-k";
/// HTTP/2 connections the gRPC mode spreads its calls over.
const GRPC_CONNECTIONS: usize = 4;

#[path = "support/stand_in.rs"]
mod stand_in;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let secs: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let conc: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let redis = std::env::var("SHAREPLANE_BENCH_REDIS_URL")
        .or_else(|_| std::env::var("SHAREPLANE_TEST_REDIS_URL"))
        .map_err(|_| "set SHAREPLANE_BENCH_REDIS_URL=redis://127.0.0.1:PORT/")?;
    let rules_url = stand_in::rules_server(LIMIT).await?;
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let (grpc_addr, http_addr) = (grpc.local_addr()?, http.local_addr()?);
    let cfg = config::resolve(
        FileConfig {
            redis_timeout_ms: Some(1_000),
            ..FileConfig::default()
        },
        Flags {
            rules: Some(rules_url),
            redis: Some(redis.clone()),
            grpc_listen: Some(grpc_addr),
            http_listen: Some(http_addr),
            ..Flags::default()
        },
    )?;
    tokio::spawn(shareplane_gateway::serve(
        cfg,
        Some(grpc),
        Some(http),
        std::future::pending(),
    ));
    let ready = format!("http://{http_addr}/readyz");
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(conc)
        .build()?;
    for _ in 0..200 {
        if client
            .get(&ready)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    println!(
        "bench_gateway: {secs} s per mode, {conc} in flight, {} cores, load average before: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        stand_in::loadavg()
    );

    let store = Arc::new(RedisBuckets::new(&redis, Duration::from_secs(1))?);
    let direct = run_mode(secs, conc, move || {
        let store = store.clone();
        async move {
            let call = BucketCall {
                key: format!("rl:{{{LIMIT}}}:global"),
                rate: 1e9,
                burst: 2e9,
                cost: 1.0,
                enforce: true,
            };
            store
                .run(&[call])
                .await
                .map(|r| r.allowed)
                .map_err(Into::into)
        }
    })
    .await;

    // Several HTTP/2 connections, as an Envoy with several workers opens.
    let mut clients = Vec::new();
    for _ in 0..GRPC_CONNECTIONS {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{grpc_addr}"))?
            .tcp_nodelay(true)
            .connect()
            .await?;
        clients.push(RateLimitServiceClient::new(channel));
    }
    let clients = Arc::new(clients);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let grpc_r = run_mode(secs, conc, move || {
        let i = next.fetch_add(1, Ordering::Relaxed) % clients.len();
        let mut c = clients[i].clone();
        async move {
            let req = stand_in::request("bench", LIMIT);
            let r = c.should_rate_limit(req).await?.into_inner();
            Ok(r.overall_code == 1)
        }
    })
    .await;

    let check = format!("http://{http_addr}/v1/check?limit={LIMIT}");
    let http_r = run_mode(secs, conc, move || {
        let (c, url) = (client.clone(), check.clone());
        async move { Ok(c.get(url).send().await?.status().is_success()) }
    })
    .await;

    println!(
        "{:<16} {:>10} {:>9} {:>9} {:>9} {:>7}",
        "mode", "checks/s", "p50 ms", "p99 ms", "max ms", "errors"
    );
    for (name, r) in [
        ("direct store call", &direct),
        ("gRPC (tonic)", &grpc_r),
        ("HTTP check", &http_r),
    ] {
        println!(
            "{name:<16} {:>10.0} {:>9.3} {:>9.3} {:>9.3} {:>7}",
            r.rate, r.p50_ms, r.p99_ms, r.max_ms, r.errors
        );
    }
    println!(
        "ratios to direct store calls: gRPC {:.2}x the checks/s, p99 {:.2}x; HTTP {:.2}x the checks/s, p99 {:.2}x",
        grpc_r.rate / direct.rate,
        grpc_r.p99_ms / direct.p99_ms,
        http_r.rate / direct.rate,
        http_r.p99_ms / direct.p99_ms
    );
    println!("load average after: {}", stand_in::loadavg());
    Ok(())
}

struct ModeResult {
    rate: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    errors: u64,
}

/// Runs `call` from `conc` tasks for `secs` seconds (after a 0.5 s warm-up that is not counted).
async fn run_mode<F, Fut>(secs: u64, conc: usize, call: F) -> ModeResult
where
    F: Fn() -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Result<bool, BoxError>> + Send,
{
    let warm_end = Instant::now() + Duration::from_millis(500);
    while Instant::now() < warm_end {
        let _ = call().await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(conc);
    for _ in 0..conc {
        let (call, stop) = (call.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat_us: Vec<u32> = Vec::with_capacity(1 << 16);
            let mut errors = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                match call().await {
                    Ok(true) => {
                        lat_us.push(u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX))
                    }
                    _ => errors += 1,
                }
            }
            (lat_us, errors)
        }));
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        if let Ok((l, e)) = t.await {
            all.extend(l);
            errors += e;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort_unstable();
    let q = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .map_or(0.0, |us| f64::from(*us) / 1000.0)
    };
    ModeResult {
        rate: all.len() as f64 / elapsed,
        p50_ms: q(0.50),
        p99_ms: q(0.99),
        max_ms: all.last().map_or(0.0, |us| f64::from(*us) / 1000.0),
        errors,
    }
}
