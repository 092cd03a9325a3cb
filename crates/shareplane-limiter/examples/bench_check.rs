//! Throughput and latency of `Limiter::check` through the Redis script. Prints figures, asserts
//! nothing.
//!
//! `cargo run --release -p shareplane-limiter --example bench_check -- redis://127.0.0.1:6379/ [N] [CONCURRENCY]`

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use std::sync::Arc;
use std::time::{Duration, Instant};

use shareplane_limiter::{LimitKind, LimitWire, Limiter, LimiterConfig, RuleSet, RulesWire};

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
    let limit = |i: usize| LimitWire {
        id: format!("{tag}-{i}"),
        rate: 1e9,
        burst: 2e9,
        shadow: false,
        kind: LimitKind::Capacity,
    };
    let wire = RulesWire {
        version: 1,
        region: "A".into(),
        limits: (0..3).map(limit).collect(),
        lease_ms: None,
        digest: None,
        base: None,
        templates: Vec::new(),
    };
    limiter.install(RuleSet::from_wire(wire, None, 1)?);
    let ids: Vec<String> = (0..3).map(|i| format!("{tag}-{i}")).collect();
    for k in [1, 3] {
        let names: Arc<Vec<String>> = Arc::new(ids[..k].to_vec());
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..concurrency {
            let (limiter, names) = (limiter.clone(), names.clone());
            let share = n / concurrency + usize::from(w < n % concurrency);
            tasks.spawn(async move {
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                let mut lat = Vec::with_capacity(share);
                for _ in 0..share {
                    let t = Instant::now();
                    let d = limiter.check(&refs, 1).await;
                    lat.push(t.elapsed());
                    if !matches!(d, Ok(ref d) if d.allowed) {
                        return Err(format!("check failed: {d:?}"));
                    }
                }
                Ok(lat)
            });
        }
        let mut lat = Vec::with_capacity(n);
        while let Some(r) = tasks.join_next().await {
            lat.extend(r??);
        }
        let secs = start.elapsed().as_secs_f64();
        lat.sort();
        let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
        println!(
            "limits/check={k} checks={} concurrency={concurrency} checks/s={:.0} p50={:?} p99={:?} max={:?}",
            lat.len(),
            lat.len() as f64 / secs,
            pct(0.5),
            pct(0.99),
            lat[lat.len() - 1]
        );
    }
    let s = limiter.stats();
    println!(
        "redis decisions {}, fallback {}, script loads {}",
        s.redis_decisions, s.fallback_decisions, s.script_loads
    );
    Ok(())
}
