//! What a template costs against a listed limit, through the gateway's own `Limiter` on a real
//! redis-server: checks per second and redis-server's time per script call (`usec_per_call` of
//! `EVALSHA`) for a listed limit, for one value of a template, and for a new value on every
//! check; then the Redis memory the per-value buckets of VALUES distinct values take
//! (`used_memory` before and after, ÷ VALUES) and their TTL. Prints figures, asserts nothing.
//! Use a redis-server of its own: the counters are the whole server's, and the run resets its
//! command statistics.
//!
//! `cargo run -p shareplane-limiter --example bench_templates -- REDIS_URL [CHECKS] [VALUES] [IN_FLIGHT]`

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use std::sync::Arc;
use std::time::Instant;

use redis::aio::MultiplexedConnection;
use shareplane_limiter::limiter::BucketRef;
use shareplane_limiter::{
    LimitKind, LimitWire, Limiter, LimiterConfig, RuleSet, RulesWire, TemplateWire,
};

/// The limit (and value) of check `i`.
type Pick<'a> = dyn Fn(usize) -> (String, Option<String>) + 'a;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: bench_templates REDIS_URL [CHECKS] [VALUES] [IN_FLIGHT]";
    let url = args.next().ok_or(usage)?;
    let checks: usize = args.next().map_or(Ok(20_000), |s| s.parse())?;
    let values: usize = args.next().map_or(Ok(100_000), |s| s.parse())?;
    let in_flight: usize = args.next().map_or(Ok(32), |s| s.parse())?;
    let run = std::process::id();
    let (listed, template) = (
        format!("bench-listed-{run}"),
        format!("bench-per-key-{run}"),
    );
    let mut cfg = LimiterConfig::new(url.clone());
    cfg.redis_timeout = std::time::Duration::from_secs(2);
    let limiter = Arc::new(Limiter::new(cfg)?);
    let wire = RulesWire {
        version: 1,
        region: "A".into(),
        limits: vec![LimitWire {
            id: listed.clone(),
            rate: 1e9,
            burst: 2e9,
            shadow: false,
            kind: LimitKind::Capacity,
        }],
        lease_ms: None,
        digest: None,
        base: None,
        templates: vec![TemplateWire {
            id: template.clone(),
            entry: "api_key".into(),
            // 100/s per key over 3 Regions, burst 2 s: this Region's part.
            rate: 33.334,
            burst: 66.668,
            shadow: false,
            kind: LimitKind::Capacity,
            overrides: Vec::new(),
        }],
    };
    limiter.install(RuleSet::from_wire(wire, None, 1)?);
    let mut conn = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    println!("{checks} checks each, {in_flight} in flight; debug or release as built");
    let kinds: [(&str, Box<Pick<'_>>); 3] = [
        ("listed limit", Box::new(|_| (listed.clone(), None))),
        (
            "template, one value",
            Box::new(|_| (template.clone(), Some("hot-key".to_string()))),
        ),
        (
            "template, a new value each check",
            Box::new(|i| (template.clone(), Some(format!("cold-{run}-{i}")))),
        ),
    ];
    for (name, pick) in &kinds {
        let asks: Vec<(String, Option<String>)> = (0..checks).map(pick).collect();
        measure(&limiter, &mut conn, name, asks, in_flight).await?;
    }
    memory(&limiter, &mut conn, &template, values, in_flight).await
}

/// `asks` checked `in_flight` at a time; prints checks/s and redis-server's time per call.
async fn measure(
    limiter: &Arc<Limiter>,
    conn: &mut MultiplexedConnection,
    name: &str,
    asks: Vec<(String, Option<String>)>,
    in_flight: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await?;
    let n = asks.len();
    let start = Instant::now();
    drive(limiter, asks, in_flight).await;
    let secs = start.elapsed().as_secs_f64();
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let usec = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("usec_per_call=")))
        .unwrap_or("?")
        .to_string();
    println!(
        "{name}: {:.0} checks/s through the Limiter; redis-server {usec} µs per script call",
        n as f64 / secs
    );
    Ok(())
}

async fn drive(limiter: &Arc<Limiter>, asks: Vec<(String, Option<String>)>, in_flight: usize) {
    let asks = Arc::new(asks);
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..in_flight.max(1) {
        let (limiter, asks) = (limiter.clone(), asks.clone());
        tasks.spawn(async move {
            for (limit, value) in asks.iter().skip(w).step_by(in_flight.max(1)) {
                let b = match value {
                    Some(v) => BucketRef::value(limit, v),
                    None => BucketRef::limit(limit),
                };
                let _ = limiter.check_buckets(&[b], 1).await;
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

/// Redis memory of `values` distinct values' buckets, and their TTL.
async fn memory(
    limiter: &Arc<Limiter>,
    conn: &mut MultiplexedConnection,
    template: &str,
    values: usize,
    in_flight: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let used = |c: &mut MultiplexedConnection| {
        let mut c = c.clone();
        async move {
            let info: String = redis::cmd("INFO").arg("memory").query_async(&mut c).await?;
            Ok::<f64, redis::RedisError>(
                info.lines()
                    .find_map(|l| l.strip_prefix("used_memory:")?.trim().parse().ok())
                    .unwrap_or(f64::NAN),
            )
        }
    };
    let before = used(conn).await?;
    let tag = std::process::id();
    let asks: Vec<_> = (0..values)
        .map(|i| (template.to_string(), Some(format!("idle-{tag}-{i}"))))
        .collect();
    let start = Instant::now();
    drive(limiter, asks, in_flight).await;
    let secs = start.elapsed().as_secs_f64();
    let after = used(conn).await?;
    let key = format!(
        "rl:{{{template}}}:{}",
        shareplane_limiter::templates::instance_id(template, &format!("idle-{tag}-0"))
    );
    let ttl: i64 = redis::cmd("PTTL").arg(&key).query_async(conn).await?;
    let one: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(&key)
        .query_async(conn)
        .await?;
    println!(
        "{values} distinct values in {secs:.1} s: Redis used_memory +{:.1} MiB, {:.0} bytes a value \
         ({one} bytes by MEMORY USAGE of one bucket, key of {} bytes); each expires {} ms after \
         its last check (the first value's PTTL {ttl} ms at the end), when it would be full again",
        (after - before) / 1048576.0,
        (after - before) / values as f64,
        key.len(),
        shareplane_limiter::store::ttl_ms(33.334, 66.668),
    );
    Ok(())
}
