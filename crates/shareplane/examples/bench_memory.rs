//! A daemon's resident memory at scale (issue 33): `cargo run -p shareplane --example
//! bench_memory -- [LIMITS] [REGIONS] [PERIODS] [PERIOD_MS]` (defaults 100,000, 3, 6 and
//! 20,000).
//!
//! Reads Region A's configuration file of LIMITS capacity limits as `shareplane run` does, then
//! runs one whole daemon per Region (the real `Daemon` loop) in this process on
//! the simulated global table (each daemon holding its own copy of each peer's record, as on
//! DynamoDB), with a gateway per Region that reports every limit's running total to its
//! daemon's book every second (in chunks, as gateways send them), so that shares move and grants
//! flow. Prints the process's resident memory (`VmRSS` of
//! `/proc/self/status`) at the start, after the configuration, after each period and at the end,
//! and the figure per daemon: everything the process grew by from its start (the configuration,
//! the table, every daemon) divided by the Regions. Then the size of one copy of a record's
//! per-limit entries, which a daemon holds several of (its own record, the peers' latest, and
//! while it rebalances the decision), and the memory a `GET /v1/state` of every limit adds until
//! the next view replaces it.
//!
//! Memory, unlike time, barely depends on the build profile: a debug build measures it (the
//! rebalance times it prints are a debug build's). The period is 20 s by default, not the 5 s of
//! a deployment, so that a debug build's rebalance of 100,000 limits (seconds on a busy machine)
//! stays well within its lease: a daemon that overruns its lease starts new epochs, and every
//! ended epoch's last record is kept (the epochs column shows that none ended). Asserts nothing.

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

#[path = "../benches/support/many_limits.rs"]
mod many_limits;

use axum::body::{to_bytes, Body};
use axum::http::Request;
use many_limits::{config_text, demand, ManyLimits};
use shareplane::clock::Clock;
use shareplane::daemon::{Daemon, DaemonOptions};
use shareplane::demand::MAX_TOTALS;
use shareplane::health::SimHealth;
use shareplane::reload::ConfigSource;
use shareplane::state::Shared;
use shareplane::table::{SimTable, TableView};
use shareplane_core::{Health, LimitRecord, PerRegion, RegionId, RegionRecord, MAX_REGIONS};
use shareplane_store::{
    Fetched, Lease, LimitsDoc, LimitsRead, RecordStore, StoreError, WriterToken,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tower::ServiceExt;

/// `VmRSS` and `VmHWM` (the peak) of this process, in MiB.
fn rss_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Region `me`'s replica of the table as a daemon on DynamoDB holds what it reads: a copy of
/// its own of each peer's record, made once while the record does not change, as the DynamoDB
/// store decodes it; the own record as written. (The simulated table alone hands every daemon
/// the same copy of a peer's record, which would count it once for all of them.)
struct OwnCopies {
    view: TableView,
    me: RegionId,
    held: Mutex<BTreeMap<RegionId, Arc<RegionRecord>>>,
}

impl OwnCopies {
    fn copy(&self, f: Fetched) -> Fetched {
        let Fetched::Record(r) = f else { return f };
        if r.region() == self.me {
            return Fetched::Record(r);
        }
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let same = |h: &&Arc<RegionRecord>| (h.epoch(), h.version()) == (r.epoch(), r.version());
        if let Some(h) = held.get(&r.region()).filter(same) {
            return Fetched::Record(h.clone());
        }
        // Its own entries, as a decode from DynamoDB gives them (not shared with the writer's).
        let copy = Arc::new(RegionRecord::from_parts(r.to_parts()));
        held.insert(r.region(), copy.clone());
        Fetched::Record(copy)
    }
}

impl RecordStore for OwnCopies {
    async fn put(&self, record: &RegionRecord, token: WriterToken) -> Result<(), StoreError> {
        self.view.put(record, token).await
    }

    async fn read_all(&self) -> Result<Vec<Fetched>, StoreError> {
        let all = self.view.read_all().await?;
        Ok(all.into_iter().map(|f| self.copy(f)).collect())
    }

    async fn read_one(&self, region: RegionId) -> Result<Option<Fetched>, StoreError> {
        Ok(self.view.read_one(region).await?.map(|f| self.copy(f)))
    }

    async fn acquire_lease(
        &self,
        region: RegionId,
        holder: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<Lease, StoreError> {
        self.view
            .acquire_lease(region, holder, now_ms, ttl_ms)
            .await
    }

    async fn read_limits(&self) -> Result<LimitsRead, StoreError> {
        self.view.read_limits().await
    }

    async fn write_limits(&self, doc: &LimitsDoc) -> Result<(), StoreError> {
        self.view.write_limits(doc).await
    }
}

/// One daemon per Region on `table`, and every Region's demand fed into its book every second.
fn start(cfg: &shareplane::config::Config, table: &SimTable, clock: Clock) -> Vec<Arc<Shared>> {
    let d = cfg.deployment.clone();
    let mut health = PerRegion([Health::Unknown; MAX_REGIONS]);
    for h in health.0.iter_mut().take(d.n()) {
        *h = Health::Healthy;
    }
    let health = SimHealth::new(health);
    // The daemons stop with the process.
    let (stop, stop_rx) = watch::channel(false);
    std::mem::forget(stop);
    let mut shareds = Vec::new();
    for r in 0..d.n() {
        let me = RegionId::new(r).unwrap_or_else(|| panic!("region {r}"));
        let shared = Shared::new(d.clone(), me, clock, None, stop_rx.clone());
        let opts = DaemonOptions::new(format!("r{r}"), r as u64 * 1_000, d.period_ms);
        let store = OwnCopies {
            view: table.view(me),
            me,
            held: Mutex::default(),
        };
        let daemon = Daemon::new(shared.clone(), store, health.clone(), opts);
        tokio::spawn(daemon.run());
        shareds.push(shared);
    }
    let feed = shareds.clone();
    let ids: Vec<String> = d.limits.iter().map(|l| l.id.clone()).collect();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        // Each Region's gateway's running totals, reported every second in chunks as
        // `shareplane-limiter`'s reporter sends them: the demand times the time that really
        // passed (a busy machine wakes this task late).
        let mut totals = vec![vec![0u64; ids.len()]; feed.len()];
        let mut last: Vec<Option<u64>> = vec![None; feed.len()];
        loop {
            tick.tick().await;
            for (r, s) in feed.iter().enumerate() {
                let now = s.clock.now_ms();
                let elapsed = now - last[r].unwrap_or(now.saturating_sub(1_000));
                last[r] = Some(now);
                for (li, t) in totals[r].iter_mut().enumerate() {
                    *t += demand(r, li) * elapsed / 1_000;
                }
                report(s, now, &ids, &totals[r]);
            }
        }
    });
    shareds
}

/// One gateway's report of every limit's running total into `s`'s book, in chunks of
/// [`MAX_TOTALS`].
fn report(s: &Shared, now: u64, ids: &[String], totals: &[u64]) {
    let chunks = ids.chunks(MAX_TOTALS).zip(totals.chunks(MAX_TOTALS));
    for (ids, totals) in chunks {
        let chunk: BTreeMap<String, u64> =
            ids.iter().cloned().zip(totals.iter().copied()).collect();
        if let Err(e) = s.demand().report(now, "gw-bench", 1, &chunk) {
            println!("a report was refused: {e}");
        }
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let n_limits = args.next().flatten().unwrap_or(100_000);
    let n = args.next().flatten().unwrap_or(3).clamp(2, 8);
    let periods = args.next().flatten().unwrap_or(6).max(2);
    let period_ms = args.next().flatten().unwrap_or(20_000).max(1_000) as u64;
    let (rss_start, _) = rss_mib();
    println!(
        "{n_limits} limits x {n} Regions, {periods} periods of {period_ms} ms; RSS at start \
         {rss_start:.0} MiB"
    );
    let dir = std::env::temp_dir().join(format!("shareplane-bench-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let path = dir.join("a.toml");
    let text = config_text(&ManyLimits {
        region: "A",
        regions: n,
        period_ms,
        limits: n_limits,
        flat_rps: None,
        state_versions: false,
        lowered: None,
    });
    std::fs::write(&path, &text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let source = ConfigSource {
        path: Some(path),
        env: BTreeMap::new(),
    };
    let t = Instant::now();
    let cfg = source
        .load()
        .unwrap_or_else(|e| panic!("the bench's configuration is invalid: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    let (rss, hwm) = rss_mib();
    println!(
        "configuration: {} bytes read and checked in {:.0} ms; RSS {rss:.0} MiB (peak {hwm:.0})",
        text.len(),
        t.elapsed().as_secs_f64() * 1e3
    );
    drop(text);
    let clock = Clock::wall();
    let table = shareplane::table::on_clock(clock, cfg.deployment.regions.len(), 1_000);
    let shareds = start(&cfg, &table, clock);
    let a = shareds[0].clone();
    println!(
        "period  A's rebalances  A's mean rebalance (ms)  RSS (MiB)  epochs (A B C…)  A's role"
    );
    for p in 1..=periods {
        let h = &a.metrics.rebalance_duration;
        let (c0, s0) = (h.count(), h.sum());
        tokio::time::sleep(Duration::from_millis(period_ms)).await;
        let (c1, s1) = (h.count(), h.sum());
        let ms = (s1 - s0).as_secs_f64() * 1e3 / (c1 - c0).max(1) as f64;
        let epochs: Vec<String> = shareds.iter().map(|s| s.view().epoch.to_string()).collect();
        println!(
            "{p:>6}  {:>14}  {ms:>23.0}  {:>9.0}  {:>15}  {}",
            c1 - c0,
            rss_mib().0,
            epochs.join(" "),
            a.view().role
        );
    }
    let (rss_end, hwm) = rss_mib();
    println!(
        "RSS at the end: {rss_end:.0} MiB for the process (peak {hwm:.0}); per daemon {:.0} MiB \
         ((end - start) / {n}: the configuration read once, the simulated table's records and \
         every daemon's state)",
        (rss_end - rss_start) / n as f64
    );
    let entries = std::mem::size_of::<LimitRecord>() * n_limits;
    println!(
        "one copy of a record's per-limit entries: {:.1} MiB ({} bytes a limit); a daemon holds \
         one of its own (shared by its coordinator, its state view and what it wrote), one per \
         peer, and while it rebalances the decision's",
        entries as f64 / (1 << 20) as f64,
        std::mem::size_of::<LimitRecord>()
    );
    state_cost(&a).await;
    std::process::exit(0);
}

/// What one `GET /v1/state` of every limit adds: the per-limit part of the view is built on the
/// first read and kept until the next rebalance replaces the view.
async fn state_cost(a: &Arc<Shared>) {
    let before = rss_mib().0;
    let router = shareplane::api::router(a.clone());
    let Ok(req) = Request::get("/v1/state").body(Body::empty()) else {
        return;
    };
    let Ok(resp) = router.oneshot(req).await;
    let status = resp.status();
    let len = to_bytes(resp.into_body(), usize::MAX)
        .await
        .map_or(0, |b| b.len());
    println!(
        "GET /v1/state of every limit: {status}, {len} bytes; RSS {before:.0} -> {:.0} MiB while \
         the view that built it lives",
        rss_mib().0
    );
}
