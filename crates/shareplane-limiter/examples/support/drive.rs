//! What `bench_check` and `bench_check_local` share: their rule set, and the timing loop (`n`
//! checks of the same limits, spread over `concurrency` tasks, then one line of throughput and
//! latency).

use std::sync::Arc;
use std::time::{Duration, Instant};

use shareplane_limiter::{LimitKind, LimitWire, Limiter, RuleSet, RulesWire};

/// Installs version 1 of a rule set of capacity limits `ids` that refuse nothing (a billion a
/// second, burst two billion).
pub fn install_wide_open(
    limiter: &Limiter,
    ids: &[String],
) -> Result<(), Box<dyn std::error::Error>> {
    let limit = |id: &String| LimitWire {
        id: id.clone(),
        rate: 1e9,
        burst: 2e9,
        shadow: false,
        kind: LimitKind::Capacity,
    };
    let wire = RulesWire {
        version: 1,
        region: "A".into(),
        limits: ids.iter().map(limit).collect(),
        lease_ms: None,
        digest: None,
        base: None,
        templates: Vec::new(),
    };
    limiter.install(RuleSet::from_wire(wire, None, 1)?);
    Ok(())
}

/// Runs `n` checks of `names` (each admitted, or the run fails) on `concurrency` tasks and
/// prints `limits/check`, the count, checks/s, p50, p99 and the slowest.
pub async fn drive(
    limiter: &Arc<Limiter>,
    names: &[String],
    n: usize,
    concurrency: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let names: Arc<Vec<String>> = Arc::new(names.to_vec());
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..concurrency {
        let (limiter, names) = (limiter.clone(), names.clone());
        let share = n / concurrency + usize::from(w < n % concurrency);
        tasks.spawn(async move {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let mut lat = Vec::with_capacity(share);
            for i in 0..share {
                let t = Instant::now();
                let d = limiter.check(&refs, 1).await;
                lat.push(t.elapsed());
                if !matches!(d, Ok(ref d) if d.allowed) {
                    return Err(format!("check failed: {d:?}"));
                }
                if i % 64 == 63 {
                    // A check decided without IO never yields: let the other tasks in.
                    tokio::task::yield_now().await;
                }
            }
            Ok(lat)
        });
    }
    let mut lat: Vec<Duration> = Vec::with_capacity(n);
    while let Some(r) = tasks.join_next().await {
        lat.extend(r??);
    }
    let secs = start.elapsed().as_secs_f64();
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    println!(
        "limits/check={} checks={} concurrency={concurrency} checks/s={:.0} p50={:?} p99={:?} max={:?}",
        names.len(),
        lat.len(),
        lat.len() as f64 / secs,
        pct(0.5),
        pct(0.99),
        lat[lat.len() - 1]
    );
    Ok(())
}
