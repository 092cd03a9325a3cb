//! One daemon at scale (issue 15): `cargo bench -p shareplane --bench scale`.
//!
//! Five Regions' daemons (the real `Daemon` loop, 5-second period, phases 1 s apart) run in this
//! process on the simulated global table (the in-memory store, 1 s visibility), each with
//! 100,000 capacity limits and the demand of its gateways fed into its book every second. A
//! gateway of Region A long-polls A's `GET /v1/rules` exactly as `shareplane-limiter`'s watcher
//! does (`?after=V&wait_ms=30000&lease_seq=S`), through the daemon's own router.
//!
//! First, a gateway's report of every limit's total (in chunks, as gateways send them) into a
//! demand book, beside the id lookup by scan that the book did before it kept an index. Then
//! prints, per period of Region A: its rebalance time (read, rebalance, write, publish, view),
//! how many rule sets it published and the bytes its gateway fetched; then resident memory, the
//! size of a full rule set, of `/v1/state` and of `/metrics`; then the time to adopt a change of
//! one limit among all of them (building and checking the new limits, and until A's record has
//! adopted it). Asserts nothing: the figures are for people to read. Real time, so it takes
//! about `PERIODS × 5 s` plus the reload.
//!
//! With `SHAREPLANE_BENCH_DYNAMODB=http://127.0.0.1:PORT` (a moto server, as `tests/run-all.sh`
//! starts one) it then runs 3 Regions × 10,000 limits on the DynamoDB store of `shareplane-aws`
//! against it, and prints, per period, A's rebalance time and the write capacity units the three
//! Regions' writes consumed (`DynamoStore::write_units`: DynamoDB's rule for transactional writes,
//! in the writing Region; a global table's replication costs as much again in every other one).
//!
//! Against moto it also measures the shared limits (`shareplane limits apply`): a document of
//! `SHAREPLANE_BENCH_APPLY_LIMITS` (100,000) limits applied whole to a new table, then a change
//! of one limit applied; the time of each (read the current version, check the file whole and
//! against it, write), its size and write units, and how long a daemon's first read takes.
//!
//! Environment: `SHAREPLANE_BENCH_LIMITS` (default 100000), `SHAREPLANE_BENCH_REGIONS` (5),
//! `SHAREPLANE_BENCH_PERIODS` (12), `SHAREPLANE_BENCH_DYNAMODB` (unset: memory only).

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

#[path = "support/many_limits.rs"]
mod many_limits;

use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use many_limits::{demand, ManyLimits};
use shareplane::clock::Clock;
use shareplane::config;
use shareplane::daemon::{Daemon, DaemonOptions};
use shareplane::health::SimHealth;
use shareplane::reload::{ConfigSource, Reloader};
use shareplane::state::Shared;
use shareplane_aws::client::{dynamodb, sdk_config};
use shareplane_aws::{CallLimits, DynamoStore, Endpoint};
use shareplane_core::{Deployment, Health, PerRegion, RegionId, MAX_REGIONS};
use shareplane_store::RecordStore;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tower::ServiceExt;

const PERIOD_MS: u64 = 5_000;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Region `region`'s file of `limits` limits, each stating its version; with `lowered`, that
/// limit's rate lowered by 20% at version 2.
fn config_text(
    regions: usize,
    region: &'static str,
    limits: usize,
    lowered: Option<usize>,
) -> String {
    many_limits::config_text(&ManyLimits {
        region,
        regions,
        period_ms: PERIOD_MS,
        limits,
        flat_rps: None,
        state_versions: true,
        lowered,
    })
}

fn deployment(regions: usize, limits: usize) -> Arc<Deployment> {
    let text = config_text(regions, "A", limits, None);
    let cfg = config::parse(&text, &BTreeMap::new())
        .unwrap_or_else(|e| panic!("the bench's configuration is invalid: {e}"));
    cfg.deployment
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Bytes of an HTTP/1.1 answer on the wire: status line, headers (with the `date` and
/// `content-length` hyper adds) and body.
fn wire_bytes(resp: &axum::http::Response<Body>, body: usize) -> usize {
    let headers: usize = resp
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum();
    let added = "date: Thu, 03 Dec 2026 10:00:00 GMT\r\n".len()
        + format!("content-length: {body}\r\n").len();
    "HTTP/1.1 200 OK\r\n".len() + headers + added + 2 + body
}

/// A gateway's rule watcher against `router`, asking for deltas as `shareplane-limiter`'s does
/// and applying them the same way ([`shareplane_limiter::RuleSet::apply_delta`]). Counts the
/// bytes of every answer and, over the answers after the first that carried rules, the limits
/// they carried, the deltas among them and the deltas that could not be applied.
async fn gateway(router: axum::Router, c: Arc<GatewayCounts>) {
    let mut seq = None::<u64>;
    let mut running: Option<shareplane_limiter::RuleSet> = None;
    loop {
        let uri = match (&running, seq) {
            (None, _) => "/v1/rules".to_string(),
            (Some(r), s) => format!(
                "/v1/rules?after={}&wait_ms=30000{}&delta={}",
                r.version(),
                s.map_or(String::new(), |s| format!("&lease_seq={s}")),
                shareplane_limiter::digest_hex(r.digest())
            ),
        };
        let req = Request::get(uri).body(Body::empty());
        let Ok(req) = req else { return };
        let Ok(resp) = router.clone().oneshot(req).await;
        seq = resp
            .headers()
            .get(shareplane::api::LEASE_SEQ_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .or(seq);
        let status = resp.status();
        let (parts, body) = resp.into_parts();
        let body = to_bytes(body, usize::MAX).await.unwrap_or_default();
        let resp = axum::http::Response::from_parts(parts, Body::empty());
        c.fetched
            .fetch_add(wire_bytes(&resp, body.len()) as u64, Ordering::Relaxed);
        c.answers.fetch_add(1, Ordering::Relaxed);
        match status {
            StatusCode::OK => {
                let Ok(w) = serde_json::from_slice::<shareplane_limiter::RulesWire>(&body) else {
                    running = None;
                    continue;
                };
                if running.is_some() {
                    c.carried
                        .fetch_add(w.limits.len() as u64, Ordering::Relaxed);
                    c.sets.fetch_add(1, Ordering::Relaxed);
                }
                let next = match (&running, w.base) {
                    (Some(r), Some(_)) => {
                        c.deltas.fetch_add(1, Ordering::Relaxed);
                        r.apply_delta(w, 1)
                    }
                    _ => shareplane_limiter::RuleSet::from_wire(w, None, 1),
                };
                running = match next {
                    Ok(set) => Some(set),
                    Err(_) => {
                        c.refused.fetch_add(1, Ordering::Relaxed);
                        None
                    }
                };
            }
            StatusCode::NOT_MODIFIED => {}
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

#[derive(Default)]
struct GatewayCounts {
    fetched: AtomicU64,
    answers: AtomicU64,
    carried: AtomicU64,
    sets: AtomicU64,
    deltas: AtomicU64,
    refused: AtomicU64,
}

/// Starts one daemon per Region of `d` on the stores `store(r)` and feeds each Region's demand
/// into its book every second. Returns every Region's shared state.
fn start<S: RecordStore>(
    d: &Arc<Deployment>,
    clock: Clock,
    stop: &watch::Receiver<bool>,
    mut store: impl FnMut(RegionId) -> S,
) -> Vec<Arc<Shared>> {
    let n = d.n();
    let mut health = PerRegion([Health::Unknown; MAX_REGIONS]);
    for h in health.0.iter_mut().take(n) {
        *h = Health::Healthy;
    }
    let health = SimHealth::new(health);
    let mut shareds = Vec::new();
    for r in 0..n {
        let me = RegionId::new(r).unwrap_or_else(|| panic!("region {r}"));
        let shared = Shared::new(d.clone(), me, clock, None, stop.clone());
        let opts = DaemonOptions::new(format!("r{r}"), r as u64 * 1_000, PERIOD_MS);
        let daemon = Daemon::new(shared.clone(), store(me), health.clone(), opts);
        tokio::spawn(daemon.run());
        shareds.push(shared);
    }
    let feed = shareds.clone();
    let n_limits = d.limits.len();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        // What each Region's gateways received since the last feed: the demand times the time
        // that really passed (a busy machine wakes this task late), so the measured demand is
        // the demand and nothing moves shares but the protocol.
        let mut last: Vec<Option<u64>> = vec![None; feed.len()];
        loop {
            tick.tick().await;
            for (r, s) in feed.iter().enumerate() {
                let now = s.clock.now_ms();
                let elapsed = now - last[r].unwrap_or(now.saturating_sub(1_000));
                last[r] = Some(now);
                let mut book = s.demand();
                for li in 0..n_limits {
                    book.add(now, li, demand(r, li) * elapsed / 1_000);
                }
            }
        }
    });
    shareds
}

/// Region A's rebalance times (ms, one mean per period in which it rebalanced) over `periods`
/// periods, printing a line per period with `extra()`'s growth (another counter) beside them.
async fn watch_periods(
    a: &Shared,
    periods: usize,
    fetched: &AtomicU64,
    extra_name: &str,
    extra: impl Fn() -> u64,
) -> (Vec<f64>, Vec<u64>) {
    println!(
        "period  rebalances  A's rebalance (ms)  rule sets published  gateway fetched (bytes)  {extra_name}"
    );
    let h = &a.metrics.rebalance_duration;
    let (mut times_ms, mut quiet_bytes) = (Vec::new(), Vec::new());
    for p in 1..=periods {
        let (c0, s0) = (h.count(), h.sum());
        let b0 = fetched.load(Ordering::Relaxed);
        let pub0 = a.metrics.rules_published.get();
        let x0 = extra();
        tokio::time::sleep(Duration::from_millis(PERIOD_MS)).await;
        let (c1, s1) = (h.count(), h.sum());
        let bytes = fetched.load(Ordering::Relaxed) - b0;
        let published = a.metrics.rules_published.get() - pub0;
        let ms = if c1 > c0 {
            (s1 - s0).as_secs_f64() * 1e3 / (c1 - c0) as f64
        } else {
            f64::NAN
        };
        if c1 > c0 {
            times_ms.push(ms);
        }
        if published == 0 {
            quiet_bytes.push(bytes);
        }
        println!(
            "{p:>6}  {:>10}  {ms:>18.1}  {published:>19}  {bytes:>23}  {}",
            c1 - c0,
            extra() - x0
        );
    }
    times_ms.sort_by(f64::total_cmp);
    (times_ms, quiet_bytes)
}

/// 3 Regions × 10,000 limits (`SHAREPLANE_BENCH_DYNAMODB_LIMITS`) on the DynamoDB store
/// against `url`.
async fn dynamodb_phase(url: &str, periods: usize) {
    let n_limits = env("SHAREPLANE_BENCH_DYNAMODB_LIMITS", 10_000);
    println!("\n== DynamoDB (moto at {url}): {n_limits} limits x 3 Regions, {periods} periods");
    let d = deployment(3, n_limits);
    let endpoint = Endpoint::Local {
        url: url.to_string(),
        region: "us-east-1".into(),
    };
    let sdk = sdk_config(&endpoint, CallLimits::default()).await;
    let client = dynamodb(&sdk);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.as_nanos());
    let table = format!("shareplane-bench-{nanos}");
    if let Err(e) = shareplane_aws::create_table(&client, &table).await {
        println!("cannot create the table: {e}");
        return;
    }
    let stores: Vec<Arc<DynamoStore>> = (0..3)
        .map(|r| {
            let me = RegionId::new(r).unwrap_or_else(|| panic!("region {r}"));
            Arc::new(DynamoStore::new(
                client.clone(),
                table.clone(),
                d.clone(),
                me,
            ))
        })
        .collect();
    let (_stop, stop_rx) = watch::channel(false);
    // The daemons own a handle each; the bench keeps its own to read the write units.
    let shareds = start(&d, Clock::wall(), &stop_rx, |me| stores[me.index()].clone());
    let fetched = AtomicU64::new(0);
    let units = || stores.iter().map(|s| s.write_units()).sum::<u64>();
    let (times, _) = watch_periods(&shareds[0], periods, &fetched, "WCU (3 Regions)", units).await;
    let median = times.get(times.len() / 2).copied().unwrap_or(f64::NAN);
    let all = units();
    println!(
        "A's rebalance: median {median:.1} ms, longest {:.1} ms; {all} WCU in {periods} periods ({:.0} per period for 3 Regions, in the writing Regions)",
        shareds[0].metrics.rebalance_duration.max().as_secs_f64() * 1e3,
        all as f64 / periods as f64
    );
}

/// `[[limits]]` of `config_text`, alone: a limits file for `shareplane limits apply`.
fn limits_text(limits: usize, changed: Option<usize>) -> String {
    let all = config_text(2, "A", limits, changed);
    let start = all.find("[[limits]]").unwrap_or(all.len());
    all[start..].to_string()
}

/// `shareplane limits apply` of a whole document to a new table on moto, then of a change of one
/// limit; and a daemon's first read of it.
async fn limits_apply_phase(url: &str) {
    use shareplane::limits::{apply, ApplyOptions};
    use shareplane_store::LimitsRead;
    let n_limits = env("SHAREPLANE_BENCH_APPLY_LIMITS", 100_000);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.as_nanos());
    let table = format!("shareplane-bench-limits-{nanos}");
    let text = format!(
        "region = \"A\"\nstore = \"dynamodb\"\ntable = \"{table}\"\naws_endpoint = \"{url}\"\n\
         aws_region = \"us-east-1\"\nlimits_source = \"table\"\napi_token = \"bench-token-0123456789\"\n\
         [[regions]]\nname = \"A\"\nhealth_check_id = \"a\"\n[[regions]]\nname = \"B\"\nhealth_check_id = \"b\"\n"
    );
    let cfg = config::parse(&text, &BTreeMap::new())
        .unwrap_or_else(|e| panic!("the bench's configuration is invalid: {e}"));
    println!("\n== Shared limits (moto at {url}): `limits apply` of {n_limits} limits, then of one changed");
    let store = match shareplane::aws::table(&cfg).await {
        Ok((_, s)) => s,
        Err(e) => {
            println!("cannot reach the table: {e}");
            return;
        }
    };
    for (what, doc) in [
        ("the whole document", limits_text(n_limits, None)),
        ("one limit changed", limits_text(n_limits, Some(0))),
    ] {
        let bytes = doc.len();
        let units = store.write_units();
        let t = Instant::now();
        let result = apply(
            &store,
            &cfg,
            doc,
            "bench".into(),
            0,
            ApplyOptions::default(),
        )
        .await;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        match result {
            Ok((plan, written)) => println!(
                "{what}: {bytes} bytes, version {written:?} in {ms:.0} ms, {} write units ({} added, {} new versions)",
                store.write_units() - units,
                plan.changes.added.len(),
                plan.changes.versioned.len()
            ),
            Err(e) => println!("{what}: refused after {ms:.0} ms: {e}"),
        }
    }
    // A daemon's first read: a store that has read nothing yet (its head, then every part).
    let (_, fresh) = match shareplane::aws::table(&cfg).await {
        Ok(s) => s,
        Err(e) => return println!("cannot reach the table: {e}"),
    };
    let t = Instant::now();
    let read = fresh.read_limits().await;
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let again = fresh.read_limits().await;
    let again_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let parsed = match &read {
        Ok(LimitsRead::Complete(doc)) => config::parse_limits(&doc.text, &cfg.deployment.regions)
            .map(|l| l.limits.len())
            .map_err(|e| e.to_string()),
        other => Err(format!("{other:?}")),
    };
    println!(
        "a daemon's first read: {first_ms:.0} ms, its check of the text {:.0} ms ({parsed:?} limits); a read of the unchanged head: {again_ms:.1} ms ({})",
        t.elapsed().as_secs_f64() * 1e3,
        if matches!(again, Ok(LimitsRead::Complete(_))) { "complete" } else { "not complete" }
    );
}

/// A gateway's report of every limit's total, in chunks of `MAX_TOTALS` as `shareplane-limiter`
/// sends them, into a fresh demand book: the whole report's time; beside it, in the same run, the
/// id lookup the book did before it kept an index (a scan of the limits for each total), alone.
fn reports(d: &Deployment) {
    use shareplane::demand::{DemandBook, TrackedLimit, MAX_TOTALS};
    let limits = TrackedLimit::of(d);
    let mut book = DemandBook::new(limits.clone(), 0);
    let ids: Vec<&str> = limits.iter().map(|l| l.id.as_str()).collect();
    let chunks: Vec<BTreeMap<String, u64>> = ids
        .chunks(MAX_TOTALS)
        .map(|c| c.iter().map(|id| (id.to_string(), 1_000)).collect())
        .collect();
    let t = Instant::now();
    for (k, chunk) in chunks.iter().enumerate() {
        let out = book
            .report(1_000, "gw-bench", 1, chunk)
            .unwrap_or_else(|e| panic!("chunk {k}: {e}"));
        assert!(out.unknown.is_empty(), "chunk {k}: unknown ids");
    }
    let indexed = t.elapsed();
    // The scan, timed over as many chunks as take about a second, then scaled to the report.
    let t = Instant::now();
    let mut scanned_chunks = 0;
    let mut found = 0usize;
    while scanned_chunks < chunks.len() && t.elapsed() < Duration::from_secs(1) {
        for id in chunks[scanned_chunks].keys() {
            found += limits.iter().position(|l| l.id == *id).map_or(0, |_| 1);
        }
        scanned_chunks += 1;
    }
    let scan_per_chunk = t.elapsed().as_secs_f64() / scanned_chunks.max(1) as f64;
    let scan_all = scan_per_chunk * chunks.len() as f64;
    println!(
        "a gateway's report of {} totals in {} chunks of at most {MAX_TOTALS}: {:.1} ms in all ({:.3} ms a chunk); the id lookup by scan alone, as before the index: {:.0} ms a report ({:.1} ms a chunk, over {scanned_chunks} chunks, {found} found), {:.0}x",
        ids.len(),
        chunks.len(),
        indexed.as_secs_f64() * 1e3,
        indexed.as_secs_f64() * 1e3 / chunks.len().max(1) as f64,
        scan_all * 1e3,
        scan_per_chunk * 1e3,
        scan_all / indexed.as_secs_f64().max(1e-9)
    );
}

#[tokio::main]
async fn main() {
    let n_limits = env("SHAREPLANE_BENCH_LIMITS", 100_000);
    let n = env("SHAREPLANE_BENCH_REGIONS", 5).clamp(2, 8);
    let periods = env("SHAREPLANE_BENCH_PERIODS", 12).max(3);
    println!(
        "{n_limits} limits x {n} Regions, {periods} periods of {} s; {} cores",
        PERIOD_MS / 1000,
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    let rss_start = rss_mib();
    // Region A's file, read and checked as `shareplane run` does at start.
    let dir = std::env::temp_dir().join(format!("shareplane-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let path = dir.join("a.toml");
    let text = config_text(n, "A", n_limits, None);
    std::fs::write(&path, &text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let source = ConfigSource {
        path: Some(path.clone()),
        env: BTreeMap::new(),
    };
    let t = Instant::now();
    let cfg = source
        .load()
        .unwrap_or_else(|e| panic!("the bench's configuration is invalid: {e}"));
    println!(
        "configuration file: {} bytes, read and checked in {:.0} ms; RSS {rss_start:.0} -> {:.0} MiB",
        text.len(),
        t.elapsed().as_secs_f64() * 1e3,
        rss_mib()
    );
    let d = cfg.deployment.clone();
    reports(&d);
    let rss_before = rss_mib();

    let clock = Clock::wall();
    let table = shareplane::table::on_clock(clock, d.n(), 1_000);
    let (_stop, stop_rx) = watch::channel(false);
    let shareds = start(&d, clock, &stop_rx, |me| table.view(me));
    let a = shareds[0].clone();
    let router = shareplane::api::router(a.clone());
    let counts = Arc::new(GatewayCounts::default());
    tokio::spawn(gateway(router.clone(), counts.clone()));
    let seen = counts.clone();
    let (times_ms, steady_bytes) =
        watch_periods(&a, periods, &counts.fetched, "gateway answers", move || {
            seen.answers.load(Ordering::Relaxed)
        })
        .await;
    let h = &a.metrics.rebalance_duration;
    let rss_end = rss_mib();
    let median = times_ms
        .get(times_ms.len() / 2)
        .copied()
        .unwrap_or(f64::NAN);
    println!(
        "A's rebalance: median {median:.1} ms, longest {:.1} ms, over {} rebalances",
        h.max().as_secs_f64() * 1e3,
        h.count()
    );
    match steady_bytes.iter().max() {
        Some(b) => println!(
            "a gateway fetched at most {b} bytes in a period in which no rule set was published ({} such periods)",
            steady_bytes.len()
        ),
        None => println!("every period published a rule set (shares never settled)"),
    }
    println!(
        "RSS: {rss_end:.0} MiB for the process; {:.0} MiB per daemon ((end - before the daemons) / {n}; the table's records are shared)",
        (rss_end - rss_before) / n as f64
    );
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let n_sets = load(&counts.sets);
    if n_sets > 0 {
        println!(
            "answers with rules after the first: {n_sets}, {} of them deltas ({} refused), carrying {:.0} of {n_limits} limits on average",
            load(&counts.deltas),
            load(&counts.refused),
            load(&counts.carried) as f64 / n_sets as f64
        );
    }
    let rules = a.rules();
    let body = rules.body_with_lease(0);
    println!(
        "full rule set: {} bytes ({:.1} per limit)",
        body.len(),
        body.len() as f64 / n_limits as f64
    );
    for path in ["/v1/state", "/metrics"] {
        let req = Request::get(path).body(Body::empty());
        if let Ok(req) = req {
            let Ok(resp) = router.clone().oneshot(req).await;
            let status = resp.status();
            let len = to_bytes(resp.into_body(), usize::MAX)
                .await
                .map_or(0, |b| b.len());
            println!("GET {path}: {status}, {len} bytes");
        }
    }

    // A change of one limit (rate -20%, version 2) among all of them: Region A's file is
    // rewritten and reloaded as SIGHUP does (read, check whole, plan against the running one,
    // hand to the loop); the other Regions' files say the same.
    let (mut reloader, _handle) = Reloader::new(source, cfg, a.clone());
    std::fs::write(&path, config_text(n, "A", n_limits, Some(0)))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let t = Instant::now();
    let outcome = reloader.reload("bench");
    let reload_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let changed = a.d();
    for s in &shareds[1..] {
        s.propose(changed.clone());
    }
    let adopted = loop {
        let v = a.view();
        let done = v
            .limits
            .first()
            .is_some_and(|l| l.id == "partner-0" && l.adopted_version == 2);
        if done {
            break Some(t.elapsed());
        }
        if t.elapsed() > Duration::from_millis(4 * PERIOD_MS) {
            break None;
        }
        drop(v);
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    println!(
        "one limit changed among {n_limits}: A's reload ({}) took {reload_ms:.0} ms; A's record adopted it {} after the reload (the loop adopts between rebalances, so this includes the wait for A's next one)",
        outcome.name(),
        adopted.map_or("not within 4 periods".to_string(), |d| format!("{:.0} ms", d.as_secs_f64() * 1e3))
    );
    let _ = std::fs::remove_dir_all(&dir);
    if let Ok(url) = std::env::var("SHAREPLANE_BENCH_DYNAMODB") {
        limits_apply_phase(&url).await;
        dynamodb_phase(&url, periods).await;
    }
    std::process::exit(0);
}
