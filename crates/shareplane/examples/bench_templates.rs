//! Templates at scale (issue 33): what 1,000,000 distinct values of a template, seen across 3
//! Regions and 10,000 of them active in more than one, cost the daemons, the table, Redis and a
//! gateway's check, on real parts in one process.
//!
//! `cargo run -p shareplane --example bench_templates -- REDIS_URL [VALUES] [MULTI] [CHECKS] [IN_FLIGHT] [SLOTS]`
//! (defaults 1,000,000, 10,000, 20,000, 32 and 0), with `REDIS_URL` a redis-server of its own
//! (`redis://127.0.0.1:PORT`; Region r uses its database r; the figures are the whole server's,
//! and the run resets its command statistics):
//!
//! `redis-server --bind 127.0.0.1 --port PORT --save '' --daemonize yes`
//!
//! Three daemons (the real `Daemon` loop, 5-second period, on the simulated table) run a
//! template, `per_api_key` (100 requests/s per value across the Regions, burst 2 s), beside 100
//! listed limits. Each Region's gateway is the real `Limiter`, given the rule set its daemon
//! publishes. Value `i` is checked once in Region `i mod 3`, and the first MULTI values in all
//! three. Prints: the daemons' resident memory and A's rebalance time before and while the values
//! arrive, the DynamoDB write units of A's record (from the bytes the codec writes), Redis's
//! memory per idle value (`used_memory` before and after) and how long an idle value's bucket
//! lives, and a gateway's check cost (checks/s and redis-server's µs per script call) for a
//! listed limit and a template side by side, with their ratio.
//!
//! What it covers: the static split of templates (each Region enforces its part of each value's
//! rate; docs/PROTOCOL.md, "Templates"), or with SLOTS > 0 a template of that many coordination
//! slots: their K slot limits in every record and rebalance, and a value's check at its slot's
//! share. No demand is reported here, so the slots stay at the static split: how their room
//! moves is `crates/shareplane/tests/slots.rs`'s. A value active in several Regions costs one
//! bucket in each of their Redis servers and nothing per value in the daemons, exactly as a value
//! active in one. A debug build's times are a debug build's; memory barely depends on the profile.

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

#[path = "../benches/support/many_limits.rs"]
#[allow(dead_code)] // its `demand`: this bench's checks come from values, not from it
mod many_limits;

use many_limits::{config_text, ManyLimits};
use redis::aio::MultiplexedConnection;
use shareplane::clock::Clock;
use shareplane::config::Config;
use shareplane::daemon::{Daemon, DaemonOptions};
use shareplane::health::SimHealth;
use shareplane::state::Shared;
use shareplane::table::SimTable;
use shareplane_core::{Health, PerRegion, RegionId, MAX_REGIONS};
use shareplane_limiter::limiter::BucketRef;
use shareplane_limiter::{Limiter, LimiterConfig, RuleSet, RulesWire};
use shareplane_store::{Fetched, RecordStore};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

const PERIOD_MS: u64 = 5_000;
const REGIONS: usize = 3;
const LISTED: usize = 100;
const TEMPLATE: &str = "per_api_key";
/// Each value's rate across the Regions, and its burst.
const VALUE_RPS: f64 = 100.0;
const BURST_S: f64 = 2.0;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;
/// The limit (and value) of check `i`.
type Pick = Box<dyn Fn(usize) -> (String, Option<String>)>;

fn config(slots: usize) -> Config {
    let mut t = config_text(&ManyLimits {
        region: "A",
        regions: REGIONS,
        period_ms: PERIOD_MS,
        limits: LISTED,
        flat_rps: Some(1_000_000),
        state_versions: false,
        lowered: None,
    });
    t.push_str(&format!(
        "[[templates]]\nid = \"{TEMPLATE}\"\nentry = \"api_key\"\nrate = {VALUE_RPS}\nburst_s = {BURST_S}\nkind = \"capacity\"\nslots = {slots}\n"
    ));
    shareplane::config::parse(&t, &BTreeMap::new())
        .unwrap_or_else(|e| panic!("the bench's configuration is invalid: {e}"))
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// One daemon per Region on `table`, each publishing its part of the template.
fn daemons(cfg: &Config, table: &SimTable, clock: Clock) -> Vec<Arc<Shared>> {
    let d = cfg.deployment.clone();
    let mut health = PerRegion([Health::Unknown; MAX_REGIONS]);
    for h in health.0.iter_mut().take(d.n()) {
        *h = Health::Healthy;
    }
    let health = SimHealth::new(health);
    let (stop, stop_rx) = watch::channel(false);
    std::mem::forget(stop); // the daemons stop with the process
    (0..d.n())
        .map(|r| {
            let me = RegionId::new(r).unwrap_or_else(|| panic!("region {r}"));
            let shared = Shared::new(d.clone(), me, clock, None, stop_rx.clone());
            shared.set_templates(shareplane::templates::wire(&cfg.templates, d.n(), me));
            let opts = DaemonOptions::new(format!("r{r}"), r as u64 * 1_000, PERIOD_MS);
            let daemon = Daemon::new(shared.clone(), table.view(me), health.clone(), opts);
            tokio::spawn(daemon.run());
            shared
        })
        .collect()
}

/// Region `r`'s gateway: a `Limiter` on database `r` of `url`, running the rule set its daemon
/// published (waits for the first).
async fn gateway(shared: &Shared, url: &str, r: usize) -> Result<Arc<Limiter>> {
    let mut rules = shared.subscribe();
    while rules.borrow().version == 0 {
        rules.changed().await?;
    }
    let body = shared.rules().body_with_lease(0);
    let wire: RulesWire = serde_json::from_slice(&body)?;
    let mut cfg = LimiterConfig::new(format!("{}/{r}", url.trim_end_matches('/')));
    cfg.redis_timeout = Duration::from_secs(2);
    let limiter = Arc::new(Limiter::new(cfg)?);
    limiter.install(RuleSet::from_wire(wire, None, 1)?);
    Ok(limiter)
}

/// A's rebalances over the last `periods` periods: how many and their mean in ms.
async fn rebalances(a: &Shared, periods: u64) -> (u64, f64) {
    let h = &a.metrics.rebalance_duration;
    let (c0, s0) = (h.count(), h.sum());
    tokio::time::sleep(Duration::from_millis(periods * PERIOD_MS)).await;
    let (c1, s1) = (h.count(), h.sum());
    let n = c1 - c0;
    (n, (s1 - s0).as_secs_f64() * 1e3 / n.max(1) as f64)
}

/// The write units of A's latest record by DynamoDB's rule for transactional writes (2 per
/// started KB of each item): the whole record, and the header alone (a period in which no
/// shard changed); and the items.
async fn write_units(cfg: &Config, table: &SimTable) -> Option<(u64, u64, usize)> {
    let a = RegionId::new(0)?;
    let Ok(Some(Fetched::Record(rec))) = table.store().read_one(a).await else {
        return None;
    };
    let d = &cfg.deployment;
    let enc = shareplane_aws::codec::encode(d, &rec);
    let units = |bytes: usize| 2 * bytes.div_ceil(1024).max(1) as u64;
    let shards: Vec<_> = (0..enc.shards.len())
        .filter_map(|i| enc.shard_item(i, 1))
        .collect();
    let header = enc.header_item(1, &vec![rec.version(); enc.shards.len()]);
    let header_units = units(shareplane_aws::codec::item_bytes(&header));
    let shard_units: u64 = shards
        .iter()
        .map(|s| units(shareplane_aws::codec::item_bytes(s)))
        .sum();
    Some((header_units + shard_units, header_units, shards.len() + 1))
}

/// `asks` (limit, value) on `limiter`, `in_flight` at a time; returns how many were admitted.
async fn drive(
    limiter: &Arc<Limiter>,
    asks: Vec<(String, Option<String>)>,
    in_flight: usize,
) -> usize {
    let asks = Arc::new(asks);
    let mut tasks = tokio::task::JoinSet::new();
    let step = in_flight.max(1);
    for w in 0..step {
        let (limiter, asks) = (limiter.clone(), asks.clone());
        tasks.spawn(async move {
            let mut admitted = 0;
            for (limit, value) in asks.iter().skip(w).step_by(step) {
                let b = match value {
                    Some(v) => BucketRef::value(limit, v),
                    None => BucketRef::limit(limit),
                };
                if limiter
                    .check_buckets(&[b], 1)
                    .await
                    .is_ok_and(|d| d.allowed)
                {
                    admitted += 1;
                }
            }
            admitted
        });
    }
    let mut admitted = 0;
    while let Some(n) = tasks.join_next().await {
        admitted += n.unwrap_or(0);
    }
    admitted
}

async fn info_field(
    conn: &mut MultiplexedConnection,
    section: &str,
    field: &str,
) -> Result<String> {
    let info: String = redis::cmd("INFO").arg(section).query_async(conn).await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .unwrap_or("?")
        .trim()
        .to_string())
}

/// Keys in every database of the server (`INFO keyspace`: `dbN:keys=K,…`).
async fn keys(conn: &mut MultiplexedConnection) -> Result<u64> {
    let info: String = redis::cmd("INFO").arg("keyspace").query_async(conn).await?;
    Ok(info
        .lines()
        .filter_map(|l| {
            l.split_once(":keys=")?
                .1
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum())
}

/// Every value checked once in its Region (`i mod 3`), the first `multi` in all three: the Redis
/// memory they take and how long an idle one lives.
async fn values(
    gateways: &[Arc<Limiter>],
    conn: &mut MultiplexedConnection,
    n_values: usize,
    multi: usize,
    in_flight: usize,
) -> Result<()> {
    let before: f64 = info_field(conn, "memory", "used_memory:").await?.parse()?;
    let keys_before = keys(conn).await?;
    let run = std::process::id();
    let start = Instant::now();
    let mut buckets = 0;
    for (r, g) in gateways.iter().enumerate() {
        let asks: Vec<_> = (0..n_values)
            .filter(|i| i % REGIONS == r || *i < multi)
            .map(|i| (TEMPLATE.to_string(), Some(format!("key-{run}-{i}"))))
            .collect();
        buckets += asks.len();
        drive(g, asks, in_flight).await;
    }
    let secs = start.elapsed().as_secs_f64();
    let after: f64 = info_field(conn, "memory", "used_memory:").await?.parse()?;
    // Buckets made early in a long run may have expired by its end: divide by those alive.
    let alive = keys(conn).await?.saturating_sub(keys_before);
    let per = (after - before) / alive.max(1) as f64;
    let part = VALUE_RPS / REGIONS as f64;
    let ttl = shareplane_limiter::store::ttl_ms(part, part * BURST_S);
    println!(
        "{n_values} values ({multi} in all {REGIONS} Regions): {buckets} buckets made in {secs:.0} s, \
         {alive} alive at the end; Redis used_memory +{:.1} MiB, {per:.0} bytes a bucket (all \
         Regions' databases on one server); a Region's Redis holds one bucket per value active \
         there within the TTL: {:.0} MB over the Regions for all {buckets} within one TTL",
        (after - before) / 1048576.0,
        per * buckets as f64 / 1e6
    );
    println!(
        "an idle value's bucket lives {ttl} ms after its last check (twice a full refill of the \
         Region's part {part:.3}/s, at least 60 s), then Redis drops it: memory per idle value \
         is {per:.0} bytes a Region it was active in, for at most {} s after its last check",
        ttl / 1000
    );
    Ok(())
}

/// Checks per second and redis-server's µs per script call for `asks` on `gateway`.
async fn cost(
    gateway: &Arc<Limiter>,
    conn: &mut MultiplexedConnection,
    asks: Vec<(String, Option<String>)>,
    in_flight: usize,
) -> Result<(f64, f64, usize)> {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await?;
    let n = asks.len();
    let start = Instant::now();
    let admitted = drive(gateway, asks, in_flight).await;
    let per_s = n as f64 / start.elapsed().as_secs_f64();
    let stats = info_field(conn, "commandstats", "cmdstat_evalsha:").await?;
    let usec = stats
        .split(',')
        .find_map(|f| f.strip_prefix("usec_per_call="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    Ok((per_s, usec, admitted))
}

/// A gateway's check of a listed limit and of a template (one hot value; a new value each
/// check), side by side on Region A's gateway.
async fn check_cost(
    gateway: &Arc<Limiter>,
    conn: &mut MultiplexedConnection,
    checks: usize,
    in_flight: usize,
) -> Result<()> {
    let run = std::process::id();
    let kinds: [(&str, Pick); 3] = [
        (
            "listed limit",
            Box::new(|_| ("partner-0".to_string(), None)),
        ),
        (
            "template, one value",
            Box::new(|_| (TEMPLATE.to_string(), Some("hot".to_string()))),
        ),
        (
            "template, a new value each check",
            Box::new(move |i| (TEMPLATE.to_string(), Some(format!("new-{run}-{i}")))),
        ),
    ];
    let mut listed = None;
    for (name, pick) in &kinds {
        let (per_s, usec, admitted) =
            cost(gateway, conn, (0..checks).map(pick).collect(), in_flight).await?;
        let (base_s, base_us) = *listed.get_or_insert((per_s, usec));
        println!(
            "{name}: {per_s:.0} checks/s ({:.2}x the listed limit's), redis-server {usec:.2} µs \
             per script call ({:.2}x); {admitted} of {checks} admitted",
            per_s / base_s,
            usec / base_us
        );
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: bench_templates REDIS_URL [VALUES] [MULTI] [CHECKS] [IN_FLIGHT] [SLOTS]";
    let url = args.next().ok_or(usage)?;
    let mut num = |default: usize| args.next().and_then(|a| a.parse().ok()).unwrap_or(default);
    let (n_values, multi, checks, in_flight) = (num(1_000_000), num(10_000), num(20_000), num(32));
    let slots = num(0);
    let held = match slots {
        0 => "static split per value".to_string(),
        k => format!("{k} coordination slots (at their static split: no demand is reported)"),
    };
    println!(
        "template {TEMPLATE} ({VALUE_RPS}/s per value across {REGIONS} Regions, burst {BURST_S} s) \
         beside {LISTED} listed limits; {held}"
    );
    let rss_start = rss_mib();
    let cfg = config(slots);
    let clock = Clock::wall();
    let table = shareplane::table::on_clock(clock, cfg.deployment.regions.len(), 1_000);
    let shareds = daemons(&cfg, &table, clock);
    let mut gateways = Vec::new();
    for (r, s) in shareds.iter().enumerate() {
        gateways.push(gateway(s, &url, r).await?);
    }
    let mut conn = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let (n, ms) = rebalances(&shareds[0], 2).await;
    let rss_before = rss_mib();
    println!(
        "before any value: RSS {rss_before:.0} MiB for the process (3 daemons, 3 gateways; \
         {rss_start:.0} at start); A's rebalance {ms:.1} ms (mean of {n})"
    );
    let h = &shareds[0].metrics.rebalance_duration;
    let (c0, s0) = (h.count(), h.sum());
    values(&gateways, &mut conn, n_values, multi, in_flight).await?;
    let (n, ms) = (h.count() - c0, (h.sum() - s0).as_secs_f64() * 1e3);
    let ms = ms / n.max(1) as f64;
    println!(
        "after the values: RSS {:.0} MiB for the process; A's rebalance {ms:.1} ms (mean of {n} \
         while they arrived); the daemons hold nothing per value (no record entry, grant, demand \
         or write per value)",
        rss_mib()
    );
    match write_units(&cfg, &table).await {
        Some((full, quiet, items)) => println!(
            "A's record: {items} items, {} limit entries; {full} write units for the whole record, \
             {quiet} in a period in which no shard changed; values add none",
            cfg.deployment.limits.len()
        ),
        None => println!("A's record was not written"),
    }
    check_cost(&gateways[0], &mut conn, checks, in_flight).await?;
    std::process::exit(0);
}
