//! What one check costs redis-server: drives a bucket script with `EVALSHA` at a given number of
//! calls in flight (the arguments `RedisBuckets::run` sends, every call admitted), and prints
//! redis-server's CPU time per check (`used_cpu_user + used_cpu_sys` from `INFO cpu`, before and
//! after), the script's own time (`usec_per_call` of `EVALSHA` in `INFO commandstats`) and the
//! commands the script ran per check. Prints figures, asserts nothing. Use a redis-server of its
//! own: the counters are the whole server's, and the run resets its command statistics.
//!
//! `cargo run -p shareplane-limiter --example bench_redis_cpu -- REDIS_URL [SCRIPT.lua] [CHECKS] [IN_FLIGHT]`
//!
//! Without SCRIPT.lua it runs this build's `bucket.lua`; give an older one (e.g. from
//! `git show REV:crates/shareplane-limiter/src/bucket.lua`) to compare.

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use std::time::Instant;

#[path = "support/redis_info.rs"]
mod redis_info;

use redis::aio::MultiplexedConnection;
use shareplane_limiter::store::{ttl_ms, SCRIPT};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: bench_redis_cpu REDIS_URL [SCRIPT.lua] [CHECKS] [IN_FLIGHT]";
    let url = args.next().ok_or(usage)?;
    let script = match args.next().filter(|s| s != "-") {
        Some(path) => std::fs::read_to_string(path)?,
        None => SCRIPT.to_owned(),
    };
    let checks: usize = args.next().map_or(Ok(50_000), |s| s.parse())?;
    let in_flight: usize = args.next().map_or(Ok(64), |s| s.parse())?;
    let mut conn = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(&script)
        .query_async(&mut conn)
        .await?;
    for limits in [1, 3] {
        let keys: Vec<String> = (0..limits)
            .map(|i| format!("rl:{{bench-cpu-{}-{i}}}:global", std::process::id()))
            .collect();
        run(&mut conn, &sha, &keys, checks, in_flight).await?;
    }
    Ok(())
}

/// One measured run of `checks` calls naming `keys`, `in_flight` at a time.
async fn run(
    conn: &mut MultiplexedConnection,
    sha: &str,
    keys: &[String],
    checks: usize,
    in_flight: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let (rate, burst) = (1e9, 2e9);
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(keys.len()).arg(keys);
    for _ in keys {
        cmd.arg(rate)
            .arg(burst)
            .arg(1.0)
            .arg(ttl_ms(rate, burst))
            .arg(1);
    }
    // Warm up (creates the buckets), then measure from clean statistics.
    let _: redis::Value = cmd.query_async(conn).await?;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await?;
    let cpu_before = redis_info::cpu_s(conn).await?;
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..in_flight {
        let (mut conn, cmd) = (conn.clone(), cmd.clone());
        let share = checks / in_flight + usize::from(w < checks % in_flight);
        tasks.spawn(async move {
            for _ in 0..share {
                let v: redis::Value = cmd.query_async(&mut conn).await?;
                if !matches!(&v, redis::Value::Array(a) if a.first() == Some(&redis::Value::Int(1)))
                {
                    return Err(format!("not admitted: {v:?}").into());
                }
            }
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r?.map_err(|e| e.to_string())?;
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu_us = (redis_info::cpu_s(conn).await? - cpu_before) * 1e6;
    let stats = redis_info::commandstats(conn).await?;
    let evalsha = stats.get("evalsha").copied().unwrap_or_default();
    let inner: Vec<String> = stats
        .iter()
        .filter(|(name, _)| {
            !["evalsha", "info"].contains(&name.as_str()) && !name.starts_with("config")
        })
        .map(|(name, (calls, _))| format!("{name} {:.2}", *calls as f64 / checks as f64))
        .collect();
    println!(
        "limits/check={} checks={checks} in_flight={in_flight} checks/s={:.0} \
         redis_cpu_us/check={:.2} evalsha_usec_per_call={:.2} commands/check: {}",
        keys.len(),
        checks as f64 / secs,
        cpu_us / checks as f64,
        evalsha.1,
        inner.join(", ")
    );
    Ok(())
}
