//! Throughput and latency of `Limiter::check` through the Redis script. Prints figures, asserts
//! nothing.
//!
//! `cargo run --release -p shareplane-limiter --example bench_check -- redis://127.0.0.1:6379/ [N] [CONCURRENCY]`

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use std::sync::Arc;
use std::time::Duration;

#[path = "support/drive.rs"]
mod drive;

use shareplane_limiter::{Limiter, LimiterConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .ok_or("usage: bench_check REDIS_URL [N] [CONCURRENCY]")?;
    let n: usize = args.next().map_or(Ok(50_000), |s| s.parse())?;
    let concurrency: usize = args.next().map_or(Ok(64), |s| s.parse())?;
    let cfg = LimiterConfig {
        redis_timeout: Duration::from_secs(1),
        ..LimiterConfig::new(url)
    };
    let limiter = Arc::new(Limiter::new(cfg)?);
    let tag = format!("bench-{}", std::process::id());
    let ids: Vec<String> = (0..3).map(|i| format!("{tag}-{i}")).collect();
    drive::install_wide_open(&limiter, &ids)?;
    for k in [1, 3] {
        drive::drive(&limiter, &ids[..k], n, concurrency).await?;
    }
    let s = limiter.stats();
    println!(
        "redis decisions {}, fallback {}, script loads {}",
        s.redis_decisions, s.fallback_decisions, s.script_loads
    );
    Ok(())
}
