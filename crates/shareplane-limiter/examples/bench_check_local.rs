//! Throughput and latency of `Limiter::check` without Redis: the limiter's own part of a check
//! (rules, demand, fence, the switch to the fallback, the fallback), which the Redis round trip
//! hides in `bench_check`. Redis is a port where nothing listens and every limit fails open, so
//! after the first call every check is decided in this process and admitted. Prints figures,
//! asserts nothing.
//!
//! `cargo run -p shareplane-limiter --example bench_check_local -- [N] [CONCURRENCY]`

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use std::sync::Arc;
use std::time::Duration;

#[path = "support/drive.rs"]
mod drive;

use shareplane_limiter::{FailurePolicy, Limiter, LimiterConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(Ok(200_000), |s| s.parse())?;
    let concurrency: usize = args.next().map_or(Ok(64), |s| s.parse())?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let ids: Vec<String> = (0..3).map(|i| format!("local-{i}")).collect();
    let mut cfg = LimiterConfig::new(format!("redis://127.0.0.1:{port}/"));
    // Redis is not probed again within the run.
    cfg.probe_after = Duration::from_secs(60);
    for id in &ids {
        cfg.failure.insert(id.clone(), FailurePolicy::FailOpen);
    }
    let limiter = Arc::new(Limiter::new(cfg)?);
    drive::install_wide_open(&limiter, &ids)?;
    // The first call finds Redis away: from then on the fallback decides.
    let _ = limiter.check(&[ids[0].as_str()], 1).await?;
    for k in [1, 3] {
        drive::drive(&limiter, &ids[..k], n, concurrency).await?;
    }
    let s = limiter.stats();
    println!(
        "redis decisions {}, fallback {}, redis failures {}",
        s.redis_decisions, s.fallback_decisions, s.redis_failures
    );
    Ok(())
}
