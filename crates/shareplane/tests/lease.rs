//! The gateways' lease (SPEC §7, issue 12) on paused tokio time, over the simulated table: every
//! durable write renews it, failed writes let it run out, a daemon that was paused comes back in a
//! new epoch pushing zero first, a follower renews only while it sees the own record change, and
//! what the gateways may enforce never sums above the limit while a Region's daemon is frozen and
//! reclaimed.

use axum::body::{to_bytes, Body};
use axum::http::Request;
use shareplane::api;
use shareplane::clock::Clock;
use shareplane::daemon::{Daemon, DaemonOptions};
use shareplane::health::SimHealth;
use shareplane::state::Shared;
use shareplane::table::SimTable;
use shareplane_core::{lease_bound, Deployment, Health, PerRegion, RegionId, MAX_REGIONS};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tower::ServiceExt;

const PERIOD_MS: u64 = 5_000;
const PHASES_MS: [u64; 3] = [0, 1_700, 3_300];
const DEMANDS: [u64; 3] = [7_200, 3_600, 1_200];

fn rid(i: usize) -> RegionId {
    RegionId::new(i).unwrap_or_else(|| panic!("region index {i}"))
}

struct Replica {
    shared: Arc<Shared>,
    pause: watch::Sender<bool>,
    _stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

struct Cluster {
    d: Arc<Deployment>,
    clock: Clock,
    table: SimTable,
    health: SimHealth,
    full_ms: u64,
}

impl Cluster {
    fn new() -> Cluster {
        let d = Arc::new(shareplane::demo::deployment(PERIOD_MS).unwrap_or_else(|e| panic!("{e}")));
        let full_ms = lease_bound(&d).map_or(0, |b| b.lease_ms);
        let clock = Clock::starting_at(1_000_000);
        let regions = d.n();
        Cluster {
            d,
            clock,
            table: shareplane::table::on_clock(clock, regions, 1_000),
            health: SimHealth::new(PerRegion([Health::Healthy; MAX_REGIONS])),
            full_ms,
        }
    }

    fn start(&self, region: usize, replica: &str) -> Replica {
        let (stop, rx) = watch::channel(false);
        let (pause, paused) = watch::channel(false);
        let shared = Shared::new(
            self.d.clone(),
            rid(region),
            self.clock,
            Some("t".repeat(16)),
            rx,
        );
        let opts = DaemonOptions::new(replica, PHASES_MS[region], PERIOD_MS);
        let daemon = Daemon::new(
            shared.clone(),
            self.table.view(rid(region)),
            self.health.clone(),
            opts,
        )
        .with_pause(paused);
        let task = tokio::spawn(daemon.run());
        // Each Region's gateways receive its demand.
        let (s, clock) = (shared.clone(), self.clock);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                s.demand().add(clock.now_ms(), 0, DEMANDS[region] / 10);
            }
        });
        Replica {
            shared,
            pause,
            _stop: stop,
            task,
        }
    }

    fn start_all(&self) -> Vec<Replica> {
        (0..3).map(|r| self.start(r, &format!("r{r}"))).collect()
    }
}

async fn settle(secs: u64) {
    tokio::time::sleep(Duration::from_secs(secs)).await;
}

fn rate(s: &Shared) -> f64 {
    s.rules().rates.first().map_or(0.0, |x| x.as_rps())
}

/// What a Region's gateways may enforce now: the published share while the lease lasts.
fn enforced(s: &Shared) -> f64 {
    if s.lease_remaining_ms(s.clock.now_ms()) > 0 {
        rate(s)
    } else {
        0.0
    }
}

/// Remembers the highest sum of what the gateways may enforce, looked at on every publication
/// and every renewal (the only events at which it can rise; a lease running out lowers it).
fn watch_enforced(shareds: Vec<Arc<Shared>>) -> Arc<Mutex<f64>> {
    let max = Arc::new(Mutex::new(0.0f64));
    let m = max.clone();
    tokio::spawn(async move {
        let mut rules: Vec<_> = shareds.iter().map(|s| s.subscribe()).collect();
        let mut leases: Vec<_> = shareds.iter().map(|s| s.subscribe_lease()).collect();
        loop {
            let sum: f64 = shareds.iter().map(|s| enforced(s)).sum();
            {
                let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
                *g = g.max(sum);
            }
            let mut waits: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>> =
                Vec::new();
            for rx in rules.iter_mut() {
                waits.push(Box::pin(rx.changed()));
            }
            for rx in leases.iter_mut() {
                waits.push(Box::pin(rx.changed()));
            }
            let done = std::future::poll_fn(|cx| {
                for w in waits.iter_mut() {
                    if let std::task::Poll::Ready(r) = w.as_mut().poll(cx) {
                        return std::task::Poll::Ready(r);
                    }
                }
                std::task::Poll::Pending
            })
            .await;
            if done.is_err() {
                return;
            }
        }
    });
    max
}

async fn get_rules(s: &Arc<Shared>, uri: &str) -> (u16, axum::http::HeaderMap, serde_json::Value) {
    let req = Request::get(uri)
        .body(Body::empty())
        .unwrap_or_else(|e| panic!("{e}"));
    let resp = api::router(s.clone())
        .oneshot(req)
        .await
        .unwrap_or_else(|e| match e {});
    let (parts, body) = resp.into_parts();
    let bytes = to_bytes(body, 1 << 20).await.unwrap_or_default();
    let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    (parts.status.as_u16(), parts.headers, json)
}

fn header_u64(h: &axum::http::HeaderMap, name: &str) -> Option<u64> {
    h.get(name)?.to_str().ok()?.parse().ok()
}

#[tokio::test(start_paused = true)]
async fn every_write_renews_the_lease_and_failed_writes_let_it_run_out() {
    let c = Cluster::new();
    assert_eq!(c.full_ms, 7_300, "10 s less 2,700 ms of margin");
    let regions = c.start_all();
    settle(60).await;
    let now = c.clock.now_ms();
    for r in &regions {
        // Renewed at every write, once a period: never less than one period below the full lease
        // (plus the rebalance's own time).
        let left = r.shared.lease_remaining_ms(now);
        assert!(
            left <= c.full_ms && left + PERIOD_MS + 500 >= c.full_ms,
            "{left}"
        );
        assert!(r.shared.metrics.rules_lease_renewals.get() >= 10);
    }
    let (status, headers, body) = get_rules(&regions[0].shared, "/v1/rules").await;
    assert_eq!(status, 200);
    let lease_ms = body["lease_ms"].as_u64().unwrap_or(0);
    assert!(lease_ms > 0 && lease_ms < 3 * PERIOD_MS, "{body}");
    assert_eq!(header_u64(&headers, api::LEASE_MS_HEADER), Some(lease_ms));
    assert_eq!(header_u64(&headers, api::HELD_MS_HEADER), Some(0));
    assert_eq!(body["version"], regions[0].shared.rules().version);

    // The store fails: nothing is written, so nothing renews, and the lease runs out on time.
    c.table.store().set_down(true);
    let untils: Vec<u64> = regions.iter().map(|r| r.shared.lease().until_ms).collect();
    let last = untils.iter().copied().max().unwrap_or(0);
    tokio::time::sleep_until(c.clock.instant_at(last - 1)).await;
    for (r, until) in regions.iter().zip(&untils) {
        assert_eq!(r.shared.lease().until_ms, *until, "renewed without a write");
    }
    tokio::time::sleep_until(c.clock.instant_at(last)).await;
    for r in &regions {
        assert_eq!(r.shared.lease_remaining_ms(c.clock.now_ms()), 0);
        assert!(rate(&r.shared) > 0.0, "the rule set itself is unchanged");
    }
    let (_, headers, body) = get_rules(&regions[1].shared, "/v1/rules").await;
    assert_eq!(body["lease_ms"], 0);
    assert_eq!(header_u64(&headers, api::LEASE_MS_HEADER), Some(0));

    // Back after more than (silent_after − 1) periods without a write: the daemons ran all along
    // and so answered their health checks, so nobody could have reclaimed them; they resume their
    // epochs, and their next write renews the lease.
    settle(2 * PERIOD_MS / 1_000).await;
    c.table.store().set_down(false);
    settle(PERIOD_MS / 1_000 + 1).await;
    for r in &regions {
        assert_eq!(r.shared.view().epoch, 1);
        assert!(r.shared.lease_remaining_ms(c.clock.now_ms()) > 0);
    }
}

#[tokio::test(start_paused = true)]
async fn a_frozen_daemon_is_reclaimed_only_after_its_gateways_fenced_and_returns_at_zero() {
    let c = Cluster::new();
    let regions = c.start_all();
    settle(90).await;
    let shareds: Vec<_> = regions.iter().map(|r| r.shared.clone()).collect();
    let max = watch_enforced(shareds);
    let before: Vec<f64> = regions.iter().map(|r| rate(&r.shared)).collect();
    assert!(before.iter().all(|r| *r > 0.0), "{before:?}");

    // B's process is frozen (SIGSTOP) and its health check turns unhealthy at once: the worst
    // case, no detection time to spare. Its gateways live on with their lease.
    let b = &regions[1].shared;
    let _ = regions[1].pause.send(true);
    c.health.set(rid(1), Health::Unhealthy);
    let fenced_at = b.lease().until_ms;
    // Until A or C raises from B's room, and after.
    let mut raised_at = None;
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let up = [0, 2]
            .iter()
            .any(|&i| rate(&regions[i].shared) > before[i] + 0.5);
        if up && raised_at.is_none() {
            raised_at = Some(c.clock.now_ms());
            assert_eq!(
                b.lease_remaining_ms(c.clock.now_ms()),
                0,
                "a peer raised from B's room while B's gateways could still enforce it"
            );
        }
    }
    let raised_at = raised_at.unwrap_or_else(|| panic!("A and C never reclaimed B"));
    assert!(
        fenced_at < raised_at,
        "fenced at {fenced_at}, raised at {raised_at}"
    );
    assert_eq!(enforced(b), 0.0);

    // SIGCONT: B cannot prove it still holds its room; it pushes zero before anything else, and
    // comes back in a new epoch, rising only by grants.
    let mut w = b.subscribe();
    w.borrow_and_update();
    let old_version = b.rules().version;
    c.health.set(rid(1), Health::Healthy);
    let _ = regions[1].pause.send(false);
    let changed = tokio::time::timeout(Duration::from_secs(10), w.changed()).await;
    assert!(matches!(changed, Ok(Ok(()))));
    let first = w.borrow_and_update().clone();
    assert!(first.version > old_version);
    assert_eq!(first.rates.first().map(|x| x.as_rps()), Some(0.0));
    settle(120).await;
    assert_eq!(b.view().epoch, 2);
    assert!(rate(b) > 0.0, "B never rose again");
    let max = *max.lock().unwrap_or_else(|e| e.into_inner());
    assert!(max <= 10_000.0 + 1e-9, "enforced shares summed to {max}");
    assert!(max >= 9_000.0, "{max}");
}

#[tokio::test(start_paused = true)]
async fn a_follower_renews_the_lease_only_while_it_sees_the_own_record_change() {
    let c = Cluster::new();
    let mut regions = c.start_all();
    let follower = c.start(1, "r1-standby");
    settle(60).await;
    let leader = regions.remove(1);
    let (fl, ll) = (follower.shared.lease(), leader.shared.lease());
    assert_eq!(follower.shared.view().role, "follower");
    // Within a quarter period of the leader's write (it reads the own record that often).
    assert!(
        fl.record_version + 1 >= ll.record_version && fl.record_version > 0,
        "{fl:?} {ll:?}"
    );
    assert!(follower.shared.lease_remaining_ms(c.clock.now_ms()) > 0);
    let (_, _, body) = get_rules(&follower.shared, "/v1/rules").await;
    assert!(body["lease_ms"].as_u64().unwrap_or(0) > 0, "{body}");

    // The leader dies without handing the writer lease over: the follower sees the own record
    // stop changing and renews nothing until it writes itself.
    leader.task.abort();
    let stale = follower.shared.lease();
    while follower.shared.metrics.leader.get() == 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = follower.shared.lease();
        assert!(
            now == stale || follower.shared.metrics.leader.get() == 1,
            "renewed while stale: {now:?}"
        );
    }
    settle(10).await;
    let fresh = follower.shared.lease();
    assert!(fresh.record_version > stale.record_version);
    assert!(follower.shared.lease_remaining_ms(c.clock.now_ms()) > 0);
    assert_eq!(
        follower.shared.view().epoch,
        1,
        "a takeover within two periods resumes"
    );
}

#[tokio::test(start_paused = true)]
async fn a_daemon_paused_past_the_resume_window_cannot_re_enforce_its_old_share() {
    let c = Cluster::new();
    let regions = c.start_all();
    settle(90).await;
    let b = &regions[1].shared;
    let share = rate(b);
    assert!(share > 0.0);

    // Paused between two of its rebalances (B's phase is :01.7, :06.7, ...; now is :00): it
    // missed no write, the lease outlasts the pause and nobody could have reclaimed B, so it
    // resumes its epoch and its share.
    let _ = regions[1].pause.send(true);
    settle(1).await;
    assert!(b.lease_remaining_ms(c.clock.now_ms()) > 0);
    let _ = regions[1].pause.send(false);
    settle(2 * PERIOD_MS / 1_000).await;
    assert_eq!((b.view().epoch, rate(b)), (1, share));
    assert!(b.lease_remaining_ms(c.clock.now_ms()) > 0);

    // Paused for three periods, its health check healthy all along: no peer reclaimed it, but it
    // cannot tell, so it comes back in a new epoch and pushes zero before anything else.
    let _ = regions[1].pause.send(true);
    settle(3 * PERIOD_MS / 1_000).await;
    assert_eq!(enforced(b), 0.0, "the lease outlived the pause");
    let mut w = b.subscribe();
    w.borrow_and_update();
    let _ = regions[1].pause.send(false);
    let changed = tokio::time::timeout(Duration::from_secs(10), w.changed()).await;
    assert!(matches!(changed, Ok(Ok(()))));
    assert_eq!(w.borrow().rates.first().map(|x| x.as_rps()), Some(0.0));
    settle(1).await;
    assert_eq!(b.view().epoch, 2);
}
