//! What redis-server says of its own cost, read by the benchmarks that measure it
//! (`bench_redis_cpu` here, `bench_vs_limitador` in the gateway crate, which includes this file).

use std::collections::BTreeMap;

use redis::aio::MultiplexedConnection;

/// redis-server's CPU time so far, user and system, in seconds.
pub async fn cpu_s(conn: &mut MultiplexedConnection) -> redis::RedisResult<f64> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await?;
    Ok(info
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            ["used_cpu_sys", "used_cpu_user"]
                .contains(&k)
                .then(|| v.trim().parse::<f64>().ok())?
        })
        .sum())
}

/// Per command since the last `CONFIG RESETSTAT` (commands run by scripts included): its calls
/// and `usec_per_call`.
pub async fn commandstats(
    conn: &mut MultiplexedConnection,
) -> redis::RedisResult<BTreeMap<String, (u64, f64)>> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let mut out = BTreeMap::new();
    for line in info.lines() {
        let Some((name, fields)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let field = |f: &str| {
            fields
                .split(',')
                .find_map(|kv| kv.strip_prefix(f)?.strip_prefix('='))
                .and_then(|v| v.parse::<f64>().ok())
        };
        out.insert(
            name.to_owned(),
            (
                field("calls").unwrap_or(0.0) as u64,
                field("usec_per_call").unwrap_or(0.0),
            ),
        );
    }
    Ok(out)
}
