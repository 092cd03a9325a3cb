//! What one check costs redis-server: drives checks at a given number in flight, every one
//! admitted, and prints redis-server's CPU time per check (`used_cpu_user + used_cpu_sys` from
//! `INFO cpu`, before and after), the script's own time per call and per check
//! (`usec_per_call` of `EVALSHA` in `INFO commandstats`), the script calls per check and the
//! commands the script ran per check. Prints figures, asserts nothing. Use a redis-server of its
//! own: the counters are the whole server's, and the run resets its command statistics.
//!
//! `cargo run -p shareplane-limiter --example bench_redis_cpu -- REDIS_URL [OLD.lua] [CHECKS] [IN_FLIGHT]`
//!
//! It runs this build's path, `RedisBuckets::run` (checks that arrive while a call is in flight
//! share the next call: `shareplane_limiter::store::batch`). Given OLD.lua, a script of the layout
//! before batching (one check per call: five arguments per key), e.g. from
//! `git show 9fa2497:crates/shareplane-limiter/src/bucket.lua`, it runs that one too, one
//! `EVALSHA` per check as the gateway sent it then, right after, in the same process, and prints
//! the ratios.

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use std::time::Instant;

#[path = "support/redis_info.rs"]
mod redis_info;

use redis::aio::MultiplexedConnection;
use shareplane_limiter::store::{ttl_ms, BucketCall, RedisBuckets};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What one run measured.
struct Figures {
    checks_per_s: f64,
    cpu_us_per_check: f64,
    script_us_per_call: f64,
    calls_per_check: f64,
    inner: String,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: bench_redis_cpu REDIS_URL [OLD.lua] [CHECKS] [IN_FLIGHT]";
    let url = args.next().ok_or(usage)?;
    let old = match args.next().filter(|s| s != "-") {
        Some(path) => Some(std::fs::read_to_string(path)?),
        None => None,
    };
    let checks: usize = args.next().map_or(Ok(50_000), |s| s.parse())?;
    let in_flight: usize = args.next().map_or(Ok(64), |s| s.parse())?;
    let mut conn = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let old_sha: Option<String> = match &old {
        Some(script) => Some(
            redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(script)
                .query_async(&mut conn)
                .await?,
        ),
        None => None,
    };
    for limits in [1, 3] {
        let keys: Vec<String> = (0..limits)
            .map(|i| format!("rl:{{bench-cpu-{}-{i}}}:global", std::process::id()))
            .collect();
        let new = batched(&mut conn, &url, &keys, checks, in_flight).await?;
        print("batched (this build)", limits, checks, in_flight, &new);
        if let Some(sha) = &old_sha {
            let old = one_per_call(&mut conn, sha, &keys, checks, in_flight).await?;
            print(
                "one call per check (OLD.lua)",
                limits,
                checks,
                in_flight,
                &old,
            );
            println!(
                "  ratio batched / one per call: redis CPU per check {:.2}x, checks/s {:.2}x",
                new.cpu_us_per_check / old.cpu_us_per_check,
                new.checks_per_s / old.checks_per_s
            );
        }
    }
    Ok(())
}

fn print(what: &str, limits: usize, checks: usize, in_flight: usize, f: &Figures) {
    println!(
        "{what}: limits/check={limits} checks={checks} in_flight={in_flight} checks/s={:.0} \
         redis_cpu_us/check={:.2} evalsha_usec_per_call={:.2} ({:.2} a check) \
         calls/check={:.3} commands/check: {}",
        f.checks_per_s,
        f.cpu_us_per_check,
        f.script_us_per_call,
        f.script_us_per_call * f.calls_per_check,
        f.calls_per_check,
        f.inner
    );
}

const RATE: f64 = 1e9;
const BURST: f64 = 2e9;

/// `checks` checks naming `keys` through `RedisBuckets::run`, `in_flight` at a time.
async fn batched(
    conn: &mut MultiplexedConnection,
    url: &str,
    keys: &[String],
    checks: usize,
    in_flight: usize,
) -> Result<Figures, BoxError> {
    let store = RedisBuckets::new(url, std::time::Duration::from_secs(5))?;
    let calls: Vec<BucketCall> = (keys.iter())
        .map(|k| BucketCall {
            key: k.clone(),
            rate: RATE,
            burst: BURST,
            cost: 1.0,
            enforce: true,
        })
        .collect();
    // Warm up (connects, loads the script, creates the buckets).
    store.run(&calls).await?;
    let check = move || {
        let (store, calls) = (store.clone(), calls.clone());
        async move {
            let r = store.run(&calls).await?;
            if !r.allowed {
                return Err::<(), BoxError>(format!("not admitted: {r:?}").into());
            }
            Ok(())
        }
    };
    measure(conn, checks, in_flight, check).await
}

/// `checks` calls of the old one-check script naming `keys`, `in_flight` at a time.
async fn one_per_call(
    conn: &mut MultiplexedConnection,
    sha: &str,
    keys: &[String],
    checks: usize,
    in_flight: usize,
) -> Result<Figures, BoxError> {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(keys.len()).arg(keys);
    for _ in keys {
        cmd.arg(RATE)
            .arg(BURST)
            .arg(1.0)
            .arg(ttl_ms(RATE, BURST))
            .arg(1);
    }
    let _: redis::Value = cmd.query_async(conn).await?;
    let template = conn.clone();
    let check = move || {
        let (mut conn, cmd) = (template.clone(), cmd.clone());
        async move {
            let v: redis::Value = cmd.query_async(&mut conn).await?;
            if !matches!(&v, redis::Value::Array(a) if a.first() == Some(&redis::Value::Int(1))) {
                return Err::<(), BoxError>(format!("not admitted: {v:?}").into());
            }
            Ok(())
        }
    };
    measure(conn, checks, in_flight, check).await
}

/// Runs `checks` of `check`, `in_flight` at a time, from clean statistics.
async fn measure<F, Fut>(
    conn: &mut MultiplexedConnection,
    checks: usize,
    in_flight: usize,
    check: F,
) -> Result<Figures, BoxError>
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), BoxError>> + Send,
{
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await?;
    let cpu_before = redis_info::cpu_s(conn).await?;
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..in_flight {
        let check = check.clone();
        let share = checks / in_flight + usize::from(w < checks % in_flight);
        tasks.spawn(async move {
            for _ in 0..share {
                check().await?;
            }
            Ok::<(), BoxError>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
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
        .map(|(name, (calls, _))| format!("{name} {:.3}", *calls as f64 / checks as f64))
        .collect();
    Ok(Figures {
        checks_per_s: checks as f64 / secs,
        cpu_us_per_check: cpu_us / checks as f64,
        script_us_per_call: evalsha.1,
        calls_per_check: evalsha.0 as f64 / checks as f64,
        inner: inner.join(", "),
    })
}
