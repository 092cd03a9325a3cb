//! The daemon on paused tokio time with the simulated table over the in-memory store: SPEC §9 G1
//! convergence, a store outage, restarts and a leader failover with a deposed leader refused.

use shareplane::clock::Clock;
use shareplane::daemon::{Daemon, DaemonOptions};
use shareplane::health::SimHealth;
use shareplane::reload::{ConfigSource, ReloadHandle, ReloadOutcome, Reloader};
use shareplane::slow_store::SlowStore;
use shareplane::state::{LimitJson, Shared};
use shareplane::table::SimTable;
use shareplane_core::{
    audit, Coordinator, Deployment, Health, PerRegion, RegionId, RegionRecord, Room, Truth,
    MAX_REGIONS,
};
use shareplane_store::{
    Fetched, Lease, LimitsDoc, LimitsRead, RecordStore, StoreError, WriterToken,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

const PERIOD_MS: u64 = 5_000;
const PHASES_MS: [u64; 3] = [0, 1_700, 3_300];

fn rid(i: usize) -> RegionId {
    RegionId::new(i).unwrap_or_else(|| panic!("region index {i}"))
}

/// One replica under test, with its own shutdown switch.
struct Replica {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

struct Cluster {
    d: Arc<Deployment>,
    clock: Clock,
    table: SimTable,
    health: SimHealth,
    /// Synthetic demand per Region in requests/s, fed into the serving replica's demand book.
    demand: Arc<Mutex<[u64; 3]>>,
    replicas: Vec<Vec<Replica>>,
    /// Every store call of replicas started from now on waits this long first.
    store_delay: Duration,
    /// The running totals of each Region's gateway (a new feed goes on from them).
    totals: Arc<Mutex<[u64; 3]>>,
}

impl Cluster {
    fn new() -> Cluster {
        let d = Arc::new(shareplane::demo::deployment(PERIOD_MS).expect("the demo's deployment"));
        let clock = Clock::starting_at(1_000_000);
        let regions = d.n();
        Cluster {
            d,
            clock,
            table: shareplane::table::on_clock(clock, regions, 1_000),
            health: SimHealth::new(PerRegion([Health::Healthy; MAX_REGIONS])),
            demand: Arc::new(Mutex::new([7_200, 3_600, 1_200])),
            replicas: vec![Vec::new(), Vec::new(), Vec::new()],
            store_delay: Duration::ZERO,
            totals: Arc::new(Mutex::new([0; 3])),
        }
    }

    fn start(&mut self, region: usize, replica: &str, clock: Clock) -> Arc<Shared> {
        let store = SlowStore::new(self.table.view(rid(region)), self.store_delay);
        self.start_on(region, replica, clock, store)
    }

    fn start_on<S: RecordStore>(
        &mut self,
        region: usize,
        replica: &str,
        clock: Clock,
        store: S,
    ) -> Arc<Shared> {
        let (stop, rx) = watch::channel(false);
        let shared = Shared::new(self.d.clone(), rid(region), clock, Some("t".repeat(16)), rx);
        let opts = DaemonOptions::new(replica, PHASES_MS[region], PERIOD_MS);
        let daemon = Daemon::new(shared.clone(), store, self.health.clone(), opts);
        let task = tokio::spawn(daemon.run());
        self.replicas[region].push(Replica {
            shared: shared.clone(),
            stop,
            task,
        });
        shared
    }

    /// Region `region`'s serving replica dies at once (its task is aborted, as `kill -9`).
    fn kill(&mut self, region: usize) {
        self.replicas[region].remove(0).task.abort();
    }

    fn start_all(&mut self) {
        for r in 0..3 {
            self.start(r, &format!("r{r}"), self.clock);
        }
    }

    /// Every 100 ms, adds each Region's demand to the books of all its running replicas (as
    /// gateways would report to every replica behind the Region's load balancer).
    fn feed_demand(&self) -> JoinHandle<()> {
        let demand = self.demand.clone();
        let books: Vec<Vec<Arc<Shared>>> = self
            .replicas
            .iter()
            .map(|rs| rs.iter().map(|r| r.shared.clone()).collect())
            .collect();
        let clock = self.clock;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let d = *demand.lock().unwrap_or_else(|e| e.into_inner());
                for (i, rs) in books.iter().enumerate() {
                    for s in rs {
                        s.demand().add(clock.now_ms(), 0, d[i] / 10);
                    }
                }
            }
        })
    }

    /// Every 100 ms from `offset_ms` on, one gateway per Region reports its running total of
    /// received requests to every running replica of its Region (stamped on receipt, as the API
    /// does). Rebalances fall on multiples of 100 ms, so an offset puts reports inside them.
    fn feed_reports(&self, offset_ms: u64) -> JoinHandle<()> {
        let demand = self.demand.clone();
        let books: Vec<Vec<Arc<Shared>>> = self
            .replicas
            .iter()
            .map(|rs| rs.iter().map(|r| r.shared.clone()).collect())
            .collect();
        let clock = self.clock;
        let totals = self.totals.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(offset_ms)).await;
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let d = *demand.lock().unwrap_or_else(|e| e.into_inner());
                let mut totals = totals.lock().unwrap_or_else(|e| e.into_inner());
                for (i, rs) in books.iter().enumerate() {
                    totals[i] += d[i] / 10;
                    let report = [("k-big".to_string(), totals[i])].into();
                    for s in rs {
                        let mut book = s.demand();
                        let _ = book.report(clock.now_ms(), &format!("gw-{i}"), 1, &report);
                    }
                }
            }
        })
    }

    fn set_demand(&self, region: usize, rps: u64) {
        self.demand.lock().unwrap_or_else(|e| e.into_inner())[region] = rps;
    }

    /// The published share (req/s) of the first running replica of each Region.
    fn published(&self) -> Vec<f64> {
        self.replicas
            .iter()
            .map(|rs| {
                rs.last().map_or(0.0, |r| {
                    r.shared.rules().rates.first().map_or(0.0, |x| x.as_rps())
                })
            })
            .collect()
    }

    async fn records(&self) -> Vec<Arc<RegionRecord>> {
        let all = self.table.store().read_all().await.unwrap_or_default();
        all.into_iter()
            .filter_map(|f| match f {
                Fetched::Record(r) => Some(r),
                Fetched::Rejected { .. } => None,
            })
            .collect()
    }

    async fn assert_conserved(&self) {
        self.assert_conserved_with_lost(&[]).await;
    }

    /// As [`Cluster::assert_conserved`], with the Regions in `lost` down: their room is an
    /// estate, not live room.
    async fn assert_conserved_with_lost(&self, lost: &[usize]) {
        let recs = self.records().await;
        if std::env::var("DEBUG_RECS").is_ok() {
            for r in &recs {
                eprintln!(
                    "{:?} e{} v{} pe{:?} rc{:?} {:?}",
                    r.region(),
                    r.epoch(),
                    r.version(),
                    &r.peer_epochs().0[..3],
                    &r.reclaims().0[..3],
                    r.limits()[0]
                );
            }
            for rs in &self.replicas {
                for x in rs {
                    eprintln!(
                        "{}",
                        serde_json::to_string(&*x.shared.view()).unwrap_or_default()
                    );
                }
            }
        }
        // Every daemon runs here: each Region's records as the store keeps them (the last of each
        // ended epoch, then the current one), the current one being what its daemon holds.
        let mut by_region: Vec<Vec<Arc<RegionRecord>>> = vec![Vec::new(); self.d.n()];
        for r in recs {
            by_region[r.region().index()].push(r);
        }
        for rs in by_region.iter_mut() {
            rs.sort_by_key(|r| (r.epoch(), r.version()));
        }
        let truth: Vec<Truth<'_>> = by_region
            .iter()
            .enumerate()
            .map(|(i, rs)| Truth {
                written: rs,
                running: rs.last().map(|r| r.as_ref()).filter(|_| !lost.contains(&i)),
            })
            .collect();
        let c = audit(&self.d, 0, &truth);
        assert!(c.holds(), "conservation broken: {c:?}");
    }
}

/// Watches every replica's published rule set and remembers the highest sum of published
/// shares (one replica per Region: the Region's gateways follow one rule set).
fn watch_sum(shareds: Vec<Arc<Shared>>) -> (Arc<Mutex<f64>>, JoinHandle<()>) {
    let max = Arc::new(Mutex::new(0.0f64));
    let m = max.clone();
    let task = tokio::spawn(async move {
        let mut rxs: Vec<_> = shareds.iter().map(|s| s.subscribe()).collect();
        loop {
            let sum: f64 = rxs
                .iter()
                .map(|rx| rx.borrow().rates.first().map_or(0.0, |x| x.as_rps()))
                .sum();
            {
                let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
                *g = g.max(sum);
            }
            let futs: Vec<_> = rxs.iter_mut().map(|rx| Box::pin(rx.changed())).collect();
            let (res, _, _) = futures_select_all(futs).await;
            if res.is_err() {
                return;
            }
        }
    });
    (max, task)
}

/// A minimal `select_all` over boxed futures (to avoid a dependency for one test helper).
async fn futures_select_all<F: std::future::Future + Unpin>(
    mut futs: Vec<F>,
) -> (F::Output, usize, Vec<F>) {
    std::future::poll_fn(move |cx| {
        for (i, f) in futs.iter_mut().enumerate() {
            if let std::task::Poll::Ready(v) = std::pin::Pin::new(f).poll(cx) {
                return std::task::Poll::Ready((v, i, Vec::new()));
            }
        }
        std::task::Poll::Pending
    })
    .await
}

fn close(actual: &[f64], expected: &[f64], tolerance: f64) -> bool {
    actual
        .iter()
        .zip(expected)
        .all(|(a, e)| (a - e).abs() <= tolerance)
}

async fn settle(secs: u64) {
    tokio::time::sleep(Duration::from_secs(secs)).await;
}

#[tokio::test(start_paused = true)]
async fn three_daemons_converge_like_g1_and_never_exceed_the_limit() {
    let mut c = Cluster::new();
    c.start_all();
    let _feed = c.feed_demand();
    let shareds: Vec<_> = c.replicas.iter().map(|rs| rs[0].shared.clone()).collect();
    let (max_sum, _w) = watch_sum(shareds);
    settle(120).await;
    let steady = c.published();
    assert!(
        close(&steady, &[5_600.0, 3_050.0, 1_350.0], 1.0),
        "steady state {steady:?}"
    );
    c.assert_conserved().await;

    // G1: C's demand rises to 7,200; new targets 3,900 / 2,200 / 3,900.
    c.set_demand(2, 7_200);
    settle(60).await;
    let after = c.published();
    assert!(
        close(&after, &[3_900.0, 2_200.0, 3_900.0], 1.0),
        "after G1 {after:?}"
    );
    let max = *max_sum.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        max <= 10_000.0 + 1e-9,
        "sum of published shares reached {max}"
    );
    c.assert_conserved().await;
    for rs in &c.replicas {
        let v = rs[0].shared.view();
        assert_eq!(v.role, "leader");
        assert!(
            v.alarms.iter().all(|a| !a.starts_with("sum_above_limit")),
            "{:?}",
            v.alarms
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_outage_keeps_the_shares_fences_the_gateways_and_the_daemons_resume() {
    let mut c = Cluster::new();
    c.start_all();
    let _feed = c.feed_demand();
    settle(90).await;
    let before = c.published();
    let versions: Vec<u64> = c
        .replicas
        .iter()
        .map(|rs| rs[0].shared.rules().version)
        .collect();

    // The demand changes during the outage, but nothing can be decided without the store.
    c.table.store().set_down(true);
    c.set_demand(2, 7_200);
    for _ in 0..6 {
        settle(5).await;
        assert_eq!(c.published(), before, "shares moved during the outage");
    }
    for (i, rs) in c.replicas.iter().enumerate() {
        let s = &rs[0].shared;
        assert_eq!(
            s.rules().version,
            versions[i],
            "a rule set was published during the outage"
        );
        // Nothing was written for 30 s: the gateways' lease ran out, so they fence.
        assert_eq!(s.lease_remaining_ms(c.clock.now_ms()), 0);
        assert!(
            !s.view().store_ok,
            "the view does not say the store is failing"
        );
        let failed = s.metrics.reads_failed.get() + s.metrics.writes_failed.get("unavailable");
        assert!(failed > 0, "no failure counted in metrics");
    }

    c.table.store().set_down(false);
    settle(90).await;
    let after = c.published();
    assert!(
        close(&after, &[3_900.0, 2_200.0, 3_900.0], 1.0),
        "after the outage {after:?}"
    );
    c.assert_conserved().await;
    for rs in &c.replicas {
        assert!(rs[0].shared.view().store_ok);
        // The daemons ran (and answered their health checks) all along: nobody could have
        // reclaimed them, so they resume their epochs.
        assert_eq!(
            rs[0].shared.view().epoch,
            1,
            "an outage must not start a new epoch"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_quick_restart_resumes_the_own_record_and_a_long_one_starts_a_new_epoch() {
    let mut c = Cluster::new();
    c.start_all();
    let feed = c.feed_demand();
    settle(120).await;
    let before = c.published();
    let old = c.replicas[1].remove(0);
    let old_version = old.shared.rules().version;
    let _ = old.stop.send(true);
    let _ = old.task.await;

    // Back at once: it takes the lease when the old one runs out (within 1.75 periods of the
    // last renewal), resumes the same epoch with the same share and a higher rule-set version.
    let b = c.start(1, "r1-again", c.clock);
    feed.abort();
    let feed = c.feed_demand();
    settle(12).await;
    let v = b.view();
    assert_eq!((v.role, v.epoch), ("leader", 1), "{v:?}");
    assert!(b.rules().version > old_version);
    assert!(
        (c.published()[1] - before[1]).abs() < 1.0,
        "{:?} vs {before:?}",
        c.published()
    );
    c.assert_conserved().await;

    // Down for four periods: it may have been reclaimed, so it comes back in a new epoch with
    // nothing and rises again by grants; room is conserved throughout.
    stop_replica(&mut c, 1).await;
    settle(20).await;
    let b = c.start(1, "r1-third", c.clock);
    feed.abort();
    let _feed = c.feed_demand();
    settle(2).await;
    assert_eq!(b.view().epoch, 2, "{:?}", b.view());
    settle(120).await;
    let after = c.published();
    c.assert_conserved().await;
    assert!(
        close(&after, &[5_600.0, 3_050.0, 1_350.0], 1.0),
        "after the return {after:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_follower_takes_over_within_two_periods_of_the_leaders_death() {
    let mut c = Cluster::new();
    c.start_all();
    let follower = c.start(1, "r1-standby", c.clock);
    let _feed = c.feed_demand();
    settle(60).await;
    assert_eq!(follower.view().role, "follower");
    assert_eq!(follower.metrics.leader.get(), 0);
    // It follows the peers as the leader does: silence counters and peer states.
    let fv = follower.view();
    assert!(
        fv.peers
            .iter()
            .all(|p| p.unchanged == Some(0) && p.state == "live"),
        "{fv:?}"
    );
    assert_eq!(fv.epoch, c.replicas[1][0].shared.view().epoch);
    // A follower serves the rule set of the Region's latest record.
    let leader_rules = c.replicas[1][0].shared.rules();
    assert!(follower.rules().version + 2 >= leader_rules.version && follower.rules().version > 0);

    c.kill(1);
    let died_at = c.clock.now_ms();
    while follower.metrics.leader.get() == 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            c.clock.now_ms() - died_at <= 2 * PERIOD_MS,
            "no takeover within two periods"
        );
    }
    let took = c.clock.now_ms() - died_at;
    assert!(took <= 2 * PERIOD_MS, "took {took} ms");
    settle(30).await;
    assert_eq!(follower.view().role, "leader");
    assert_eq!(
        follower.view().epoch,
        1,
        "a takeover within two periods resumes the epoch"
    );
    c.set_demand(2, 7_200);
    settle(60).await;
    assert!(
        close(&c.published(), &[3_900.0, 2_200.0, 3_900.0], 1.0),
        "{:?}",
        c.published()
    );
    c.assert_conserved().await;
}

#[tokio::test(start_paused = true)]
async fn a_deposed_leader_is_refused_by_the_store_and_steps_down() {
    let mut c = Cluster::new();
    c.start(0, "r0", c.clock);
    c.start(2, "r2", c.clock);
    // B's first replica runs 30 s behind: it believes in its lease long after the store let it
    // go, so its next write carries a token lower than its successor's.
    let stale = c.start(1, "r1-slow", c.clock.skewed(-30_000));
    settle(1).await;
    let fresh = c.start(1, "r1-fresh", c.clock);
    let _feed = c.feed_demand();
    settle(30).await;
    assert_eq!(
        stale.metrics.writes_failed.get("conflict"),
        1,
        "the stale write was not refused"
    );
    assert_eq!(stale.metrics.stepped_down.get(), 1);
    assert_eq!(stale.metrics.leader.get(), 0);
    assert_eq!(stale.view().role, "follower");
    assert_eq!(fresh.metrics.leader.get(), 1);
    assert_eq!(fresh.view().role, "leader");
    let writes_when_deposed = stale.metrics.writes.get();
    if std::env::var("DEBUG_RECS").is_ok() {
        let a = &c.replicas[0][0].shared;
        eprintln!("{}", a.render_metrics());
    }
    settle(60).await;
    assert_eq!(
        stale.metrics.writes.get(),
        writes_when_deposed,
        "a deposed leader wrote again"
    );
    c.assert_conserved().await;
}

/// A store that refuses writes as a newer writer's would (`refuse_puts`) and fails reads of one
/// record (`reads_down`), so that a refused write cannot be followed by a re-read.
struct Refusing<S> {
    inner: S,
    refuse_puts: Arc<AtomicBool>,
    reads_down: Arc<AtomicBool>,
}

impl<S: RecordStore> RecordStore for Refusing<S> {
    async fn put(&self, record: &RegionRecord, token: WriterToken) -> Result<(), StoreError> {
        if self.refuse_puts.load(Ordering::SeqCst) {
            return Err(StoreError::Conflict("a newer writer (test)".into()));
        }
        self.inner.put(record, token).await
    }

    async fn read_all(&self) -> Result<Vec<Fetched>, StoreError> {
        self.inner.read_all().await
    }

    async fn read_one(&self, region: RegionId) -> Result<Option<Fetched>, StoreError> {
        if self.reads_down.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("read refused (test)".into()));
        }
        self.inner.read_one(region).await
    }

    async fn acquire_lease(
        &self,
        region: RegionId,
        holder: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<Lease, StoreError> {
        self.inner
            .acquire_lease(region, holder, now_ms, ttl_ms)
            .await
    }

    async fn read_limits(&self) -> Result<LimitsRead, StoreError> {
        self.inner.read_limits().await
    }

    async fn write_limits(&self, doc: &LimitsDoc) -> Result<(), StoreError> {
        self.inner.write_limits(doc).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_cannot_read_its_record_after_a_refused_write_steps_down_and_comes_back() {
    let mut c = Cluster::new();
    c.start(0, "r0", c.clock);
    c.start(2, "r2", c.clock);
    let (refuse_puts, reads_down) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let store = Refusing {
        inner: c.table.view(rid(1)),
        refuse_puts: refuse_puts.clone(),
        reads_down: reads_down.clone(),
    };
    let b = c.start_on(1, "r1", c.clock, store);
    let _feed = c.feed_demand();
    settle(30).await;
    assert_eq!(
        (b.metrics.leader.get(), b.metrics.lease_taken.get()),
        (1, 1)
    );
    let (epoch, writes) = (b.view().epoch, b.metrics.writes.get());

    // Its next write is refused, and the record it would resume from cannot be read: it stops
    // writing and leading rather than go on from a record it cannot see.
    refuse_puts.store(true, Ordering::SeqCst);
    reads_down.store(true, Ordering::SeqCst);
    settle(6).await;
    assert_eq!(b.metrics.writes_failed.get("conflict"), 1);
    assert_eq!(b.metrics.stepped_down.get(), 1);
    assert_eq!(b.metrics.leader.get(), 0);
    assert_eq!(b.view().role, "follower");
    refuse_puts.store(false, Ordering::SeqCst);
    settle(10).await;
    assert_eq!(
        b.metrics.writes.get(),
        writes,
        "wrote without its own record"
    );

    // Once the record reads again it takes the lease back and resumes from the record. It wrote
    // nothing for longer than the resume window, so peers may have counted it silent: it comes
    // back in a new epoch, as a restarted daemon does.
    assert!(16_000 > Coordinator::resume_window_ms(&c.d));
    reads_down.store(false, Ordering::SeqCst);
    settle(10).await;
    assert_eq!(
        (b.metrics.leader.get(), b.metrics.lease_taken.get()),
        (1, 2)
    );
    assert_eq!((b.view().role, b.view().epoch), ("leader", epoch + 1));
    assert!(b.metrics.writes.get() > writes);
    c.assert_conserved().await;
}

/// Starts the three Regions at the current demands, checks that they settle at `shares` within
/// three minutes, and returns the next whole minute on the shared clock once it is reached.
async fn steady(c: &mut Cluster, shares: [f64; 3]) -> (u64, JoinHandle<()>) {
    c.start_all();
    let feed = c.feed_demand();
    settle(180).await;
    assert!(close(&c.published(), &shares, 1.0), "{:?}", c.published());
    let t0 = shareplane::clock::next_tick(c.clock.now_ms(), 0, 60_000);
    until_ms(c, t0).await;
    (t0, feed)
}

/// Sleeps until the shared clock reads `ms` (paused time: exact).
async fn until_ms(c: &Cluster, ms: u64) {
    tokio::time::sleep_until(c.clock.instant_at(ms)).await;
}

fn peer_state(s: &Shared, peer: &str) -> &'static str {
    s.view()
        .peers
        .iter()
        .find(|p| p.region == peer)
        .map_or("none", |p| p.state)
}

#[tokio::test(start_paused = true)]
async fn g2_a_lost_region_is_reclaimed_on_two_signals_at_the_spec_times() {
    let mut c = Cluster::new();
    c.set_demand(2, 7_200);
    // t0 = "14:05:00": B is lost holding 2,200 (its last write was at :56.7).
    let (t0, _feed) = steady(&mut c, [3_900.0, 2_200.0, 3_900.0]).await;
    c.kill(1);
    let (a, cc) = (
        c.replicas[0][0].shared.clone(),
        c.replicas[2][0].shared.clone(),
    );
    let share = |s: &Shared| s.rules().rates.first().map_or(0.0, |r| r.as_rps());

    // Silent but healthy: nobody reclaims (B's room stays frozen), shares unchanged.
    until_ms(&c, t0 + 29_900).await;
    assert_eq!(peer_state(&a, "B"), "silent");
    assert_eq!(peer_state(&cc, "B"), "silent");
    assert!((share(&a) - 3_900.0).abs() < 1.0 && (share(&cc) - 3_900.0).abs() < 1.0);
    c.health.set(rid(1), Health::Unhealthy);

    // A reclaims at :30 and C at :33.3, 1,100 each, raising by the step cap.
    until_ms(&c, t0 + 30_010).await;
    assert_eq!(peer_state(&a, "B"), "reclaimed");
    assert!((share(&a) - 4_900.0).abs() < 1.0, "A at :30 {}", share(&a));
    assert_eq!(peer_state(&cc, "B"), "silent");
    until_ms(&c, t0 + 33_310).await;
    assert_eq!(peer_state(&cc, "B"), "reclaimed");
    assert!(
        (share(&cc) - 4_900.0).abs() < 1.0,
        "C at :33.3 {}",
        share(&cc)
    );
    // Both within 1% of 5,000 at :38.3, and k-big gets 10,000 from :39.
    until_ms(&c, t0 + 38_310).await;
    assert!((share(&a) - 5_000.0).abs() <= 50.0 && (share(&cc) - 5_000.0).abs() <= 50.0);
    until_ms(&c, t0 + 39_000).await;
    assert!(
        (share(&a) + share(&cc) - 10_000.0).abs() < 1.0,
        "{} + {}",
        share(&a),
        share(&cc)
    );
}

#[tokio::test(start_paused = true)]
async fn g1_named_grants_staggered_matches_the_spec_timeline() {
    let mut c = Cluster::new();
    let (t0, _feed) = steady(&mut c, [5_600.0, 3_050.0, 1_350.0]).await;
    c.set_demand(2, 7_200);
    // Every rebalance happens at a multiple of 100 ms; sample 50 ms after each.
    let mut samples = Vec::new();
    // What C's /v1/state says holds its share, at each sample.
    let mut c_why = Vec::new();
    let why_of_c = |c: &Cluster| {
        let v = c.replicas[2].last().map(|r| r.shared.view());
        v.and_then(|v| limit_json(&v, "k-big").map(|l| l.why))
            .unwrap_or("none")
    };
    for k in 0..250u64 {
        until_ms(&c, t0 + 50 + k * 100).await;
        samples.push((50 + k * 100, c.published()));
        c_why.push((50 + k * 100, why_of_c(&c)));
    }
    let why_at = |ms: u64| {
        c_why
            .iter()
            .find(|(t, _)| *t >= ms)
            .map_or("none", |(_, w)| *w)
    };
    let at = |ms: u64| {
        samples
            .iter()
            .find(|(t, _)| *t >= ms)
            .map(|(_, s)| s.clone())
            .unwrap_or_default()
    };
    let sum = |s: &[f64]| s.iter().sum::<f64>();
    let max = samples.iter().map(|(_, s)| sum(s)).fold(0.0, f64::max);
    let (low_t, low) = samples
        .iter()
        .map(|(t, s)| (*t, sum(s)))
        .fold((0, f64::MAX), |m, x| if x.1 < m.1 { x } else { m });
    assert!(max <= 10_000.0 + 1e-9, "sum reached {max}");
    eprintln!("G1 daemons: max sum {max}, A at :05 {:?}, B at :06.7 {:?}, lowest {low} at {low_t} ms, at :18.3 {:?}", at(5_000), at(6_700), at(18_300));
    // A lowers at :05 (to ≈ 4,335), B at :06.7 (≈ 2,417); the lowest sum ≈ 8,102 from :06.7 to :08.3.
    assert!(
        (at(5_000)[0] - 4_335.0).abs() < 40.0,
        "A at :05 {:?}",
        at(5_000)
    );
    assert!(
        (at(6_700)[1] - 2_417.0).abs() < 40.0,
        "B at :06.7 {:?}",
        at(6_700)
    );
    assert!(
        (low - 8_102.0).abs() < 80.0 && (6_700..8_300).contains(&low_t),
        "lowest {low} at {low_t}"
    );
    // C raises at seconds 9, 14 and 19 (its rebalances at :08.3, :13.3, :18.3) and the sum is back
    // at 10,000 from second 19.
    let c_at = |ms: u64| at(ms)[2];
    assert!(
        c_at(8_300) > c_at(8_200) && c_at(13_300) > c_at(13_200) && c_at(18_300) > c_at(18_200)
    );
    assert!(
        (sum(&at(18_300)) - 10_000.0).abs() < 1.0,
        "{:?}",
        at(18_300)
    );
    assert!(
        sum(&at(18_200)) < 10_000.0 - 1.0,
        "back at 10,000 before :18.3: {:?}",
        at(18_200)
    );
    // Why C's share is what it is, as /v1/state says: at its target before the jump in demand,
    // waiting for grants after its first rebalance at :03.3 (its pool is empty), rising by the
    // step cap once A's and B's grants are in (:08.3, :13.3), at its target from :18.3.
    assert_eq!(why_at(0), "at_target", "{c_why:?}");
    assert_eq!(why_at(3_400), "waiting_for_grants", "{c_why:?}");
    assert_eq!(why_at(8_400), "step_cap", "{c_why:?}");
    assert_eq!(why_at(24_000), "at_target", "{c_why:?}");
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_stops_cleanly_hands_the_lease_over_at_once() {
    let mut c = Cluster::new();
    c.start_all();
    let standby = c.start(1, "r1-standby", c.clock);
    let _feed = c.feed_demand();
    settle(30).await;
    assert_eq!(standby.view().role, "follower");
    let leader = c.replicas[1].remove(0);
    let _ = leader.stop.send(true);
    let _ = leader.task.await;
    let stopped_at = c.clock.now_ms();
    while standby.metrics.leader.get() == 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            c.clock.now_ms() - stopped_at <= PERIOD_MS / 4 + 100,
            "no quick takeover"
        );
    }
    assert_eq!(leader.shared.metrics.leader.get(), 0);
    settle(30).await;
    assert_eq!(standby.view().epoch, 1);
    c.assert_conserved().await;
}

/// The published share (req/s) of one replica, `None` before it published anything.
fn share_of(s: &Shared) -> Option<f64> {
    let r = s.rules();
    (r.version > 0).then(|| r.rates.first().map_or(0.0, |x| x.as_rps()))
}

#[tokio::test(start_paused = true)]
async fn a_restart_resumes_at_its_share_not_the_floor() {
    let mut c = Cluster::new();
    c.start_all();
    let mut feed = c.feed_reports(20);
    settle(120).await;
    let before = c.published();
    assert!(
        close(&before, &[5_600.0, 3_050.0, 1_350.0], 1.0),
        "{before:?}"
    );
    // A clean stop (the lease is handed back: the new process leads at once, its demand book
    // empty), then a kill -9 (the new process waits for the lease to run out).
    for (n, kill) in [false, true].into_iter().enumerate() {
        let old = c.replicas[1].remove(0);
        if kill {
            old.task.abort();
        } else {
            let _ = old.stop.send(true);
            let _ = old.task.await;
        }
        let b = c.start(1, &format!("r1-restart-{n}"), c.clock);
        feed.abort();
        feed = c.feed_reports(20);
        let (mut lowest, mut demand_low) = (f64::MAX, f64::MAX);
        for _ in 0..200 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if let Some(x) = share_of(&b) {
                lowest = lowest.min(x);
            }
            if b.view().role == "leader" {
                demand_low = demand_low.min(b.view().limits[0].demand);
            }
        }
        let v = b.view();
        assert_eq!((v.role, v.epoch), ("leader", 1), "kill {kill}: {v:?}");
        assert!(
            (lowest - before[1]).abs() < 1.0,
            "kill {kill}: B's share fell to {lowest} after the restart (was {})",
            before[1]
        );
        assert!(
            (demand_low - 3_600.0).abs() <= 36.0,
            "kill {kill}: B published a demand of {demand_low}"
        );
        assert!(close(&c.published(), &before, 1.0), "{:?}", c.published());
    }
    c.assert_conserved().await;
}

#[tokio::test(start_paused = true)]
async fn reports_during_slow_store_calls_never_spike_the_demand() {
    // Issue 13 case 1: reports every 100 ms, 40 ms per store call, reports landing inside the
    // rebalances' store calls.
    let mut c = Cluster::new();
    c.store_delay = Duration::from_millis(40);
    c.start_all();
    let _feed = c.feed_reports(20);
    let truth = [7_200.0, 3_600.0, 1_200.0];
    // The first window (5 s), and the daemons' first records.
    settle(12).await;
    let (mut worst, mut seen) = (0.0f64, std::collections::BTreeSet::new());
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        for (i, rs) in c.replicas.iter().enumerate() {
            let v = rs[0].shared.view();
            seen.insert((i, v.record_version));
            let d = v.limits[0].demand;
            worst = worst.max((d - truth[i]).abs() / truth[i]);
        }
    }
    assert!(seen.len() >= 3 * 11, "too few records: {}", seen.len());
    assert!(
        worst <= 0.01,
        "a published demand was {:.2}% off",
        worst * 100.0
    );
    assert!(
        close(&c.published(), &[5_600.0, 3_050.0, 1_350.0], 1.0),
        "{:?}",
        c.published()
    );
}

#[tokio::test(start_paused = true)]
async fn demand_noise_within_the_band_changes_no_share_and_no_rule_set() {
    let mut c = Cluster::new();
    c.start_all();
    let _feed = c.feed_reports(20);
    settle(120).await;
    let shares = c.published();
    let versions: Vec<u64> = c
        .replicas
        .iter()
        .map(|rs| rs[0].shared.rules().version)
        .collect();
    let base = [7_200u64, 3_600, 1_200];
    // ±0.4% every 1.3 s for 100 s: the measured demands wobble, the published ones stay.
    for k in 0..77u64 {
        for (i, b) in base.iter().enumerate() {
            let wobble = b * 4 / 1_000;
            let d = if (k + i as u64).is_multiple_of(2) {
                b + wobble
            } else {
                b - wobble
            };
            c.set_demand(i, d);
        }
        tokio::time::sleep(Duration::from_millis(1_300)).await;
    }
    let after: Vec<u64> = c
        .replicas
        .iter()
        .map(|rs| rs[0].shared.rules().version)
        .collect();
    assert_eq!(after, versions, "a rule set was published for noise");
    assert_eq!(c.published(), shares);
    // Beyond the band the demand moves the shares again, the lowered ones first.
    c.set_demand(2, 7_200);
    settle(60).await;
    assert!(
        close(&c.published(), &[3_900.0, 2_200.0, 3_900.0], 1.0),
        "{:?}",
        c.published()
    );
}

/// The configuration file of Region `region` of the test cluster, with `limits` (TOML tables).
fn config_text(region: usize, limits: &str) -> String {
    format!(
        "region = \"{}\"\nphase_ms = {}\nperiod_ms = {PERIOD_MS}\nstore = \"memory\"\n\
         api_token = \"{}\"\n[[regions]]\nname = \"A\"\n[[regions]]\nname = \"B\"\n\
         [[regions]]\nname = \"C\"\n{limits}",
        ["A", "B", "C"][region],
        PHASES_MS[region],
        "t".repeat(16)
    )
}

/// The cluster's one limit as the demo configures it.
const K_BIG: &str = "[[limits]]\nid = \"k-big\"\nrate = 10000\nfloor = 500\nstep_cap = 1000\n";

/// A directory of this test's own (removed at the start of the next run of the same test).
fn test_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("shareplane-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// Moves 1 ms past the reloaders' polls (they fall on whole periods of the shared clock), so a
/// file written now is reloaded by the handle that the test calls next, not by a poll that
/// happened to be due at the same instant.
async fn off_the_poll() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

fn write(path: &std::path::Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

impl Cluster {
    /// Starts a reloader for the first replica of `region`, reading `dir/<region>.toml`
    /// (written with `limits` first). Returns the file and the handle that triggers a reload.
    fn reloader(
        &self,
        region: usize,
        dir: &std::path::Path,
        limits: &str,
    ) -> (std::path::PathBuf, ReloadHandle) {
        let path = dir.join(format!("{region}.toml"));
        write(&path, &config_text(region, limits));
        let source = ConfigSource {
            path: Some(path.clone()),
            env: Default::default(),
        };
        let cfg = source.load().expect("the Region's configuration loads");
        assert_eq!(*cfg.deployment, *self.d, "the file describes the cluster");
        let shared = self.replicas[region][0].shared.clone();
        let (r, handle) = Reloader::new(source, cfg, shared);
        tokio::spawn(r.run());
        (path, handle)
    }
}

fn limit_json<'a>(v: &'a shareplane::state::StateView, id: &str) -> Option<&'a LimitJson> {
    v.limits.iter().find(|l| l.id == id)
}

#[tokio::test(start_paused = true)]
async fn a_reloaded_rate_at_a_higher_version_is_adopted_live_and_never_exceeds_the_larger_limit() {
    let mut c = Cluster::new();
    c.start_all();
    let _feed = c.feed_demand();
    let dir = test_dir("reload-rate");
    let reloaders: Vec<_> = (0..3).map(|r| c.reloader(r, &dir, K_BIG)).collect();
    settle(120).await;
    let shareds: Vec<_> = c.replicas.iter().map(|rs| rs[0].shared.clone()).collect();
    let (max_sum, _w) = watch_sum(shareds.clone());

    let v2 = K_BIG.replace("rate = 10000", "rate = 8000\nversion = 2");
    off_the_poll().await;
    // A is told by its handle (as SIGHUP does); B and C only find their files changed.
    for (r, (path, _)) in reloaders.iter().enumerate() {
        write(path, &config_text(r, &v2));
    }
    let outcome = reloaders[0].1.reload().await;
    assert!(
        matches!(&outcome, Some(ReloadOutcome::Applied(ch)) if ch.versioned.len() == 1),
        "{outcome:?}"
    );
    settle(2 * PERIOD_MS / 1000).await;
    for s in &shareds {
        let v = s.view();
        let l = limit_json(&v, "k-big");
        assert_eq!(
            l.map(|l| (l.rate, l.version, l.adopted_version, l.adopted_rate)),
            Some((8_000.0, 2, 2, 8_000.0)),
            "{}: not adopted within two periods",
            s.region
        );
        assert_eq!(s.config_status().generation, 2, "{}", s.region);
        assert_eq!(s.metrics.config_reloads.get("applied"), 1, "{}", s.region);
    }
    settle(120).await;
    let after = c.published();
    let sum: f64 = after.iter().sum();
    assert!(
        (7_990.0..=8_000.0 + 1e-9).contains(&sum),
        "shares after the downgrade {after:?}"
    );
    let max = *max_sum.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        max <= 10_000.0 + 1e-9,
        "the sum of published shares reached {max}"
    );
    c.d = shareds[0].d();
    c.assert_conserved().await;
}

#[tokio::test(start_paused = true)]
async fn a_bad_file_keeps_the_running_configuration_and_reports_every_problem() {
    let mut c = Cluster::new();
    c.start_all();
    let _feed = c.feed_demand();
    let dir = test_dir("reload-bad");
    let (path, handle) = c.reloader(0, &dir, K_BIG);
    settle(60).await;
    let before = c.published();
    off_the_poll().await;
    // Two problems: a policy that does not exist, and a listen address that is none.
    let bad = config_text(0, K_BIG).replace(
        "store = \"memory\"",
        "store = \"memory\"\npolicy = \"hope\"\nlisten = \"nowhere\"",
    );
    write(&path, &bad);
    let outcome = handle.reload().await;
    let errors = match outcome {
        Some(ReloadOutcome::Refused(es)) => es,
        other => panic!("not refused: {other:?}"),
    };
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].starts_with("policy: \"hope\""), "{errors:?}");
    assert!(errors[1].starts_with("listen: \"nowhere\""), "{errors:?}");
    let s = c.replicas[0][0].shared.clone();
    let status = s.config_status();
    assert_eq!(
        (
            status.generation,
            status.last_reload,
            status.last_reload_error.clone()
        ),
        (1, Some("refused"), errors)
    );
    assert_eq!(s.metrics.config_reloads.get("refused"), 1);
    assert!(s
        .render_metrics()
        .contains("shareplane_config_reloads_total{region=\"A\",result=\"refused\"} 1"));
    // The poll saw the same bad file and did not count it again; the old limit runs on.
    settle(30).await;
    assert_eq!(s.metrics.config_reloads.get("refused"), 1);
    assert_eq!(
        limit_json(&s.view(), "k-big").map(|l| l.rate),
        Some(10_000.0)
    );
    assert_eq!(c.published(), before);

    // A rate change without a higher version is refused too, with its own message.
    write(
        &path,
        &config_text(0, &K_BIG.replace("rate = 10000", "rate = 8000")),
    );
    let outcome = handle.reload().await;
    assert!(
        matches!(&outcome, Some(ReloadOutcome::Refused(es)) if es.len() == 1
            && es[0].contains("the rate changed from 10000 to 8000 without a higher version")),
        "{outcome:?}"
    );
    // A good file clears the error.
    write(&path, &config_text(0, K_BIG));
    assert_eq!(handle.reload().await, Some(ReloadOutcome::Unchanged));
    assert!(s.config_status().last_reload_error.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_limit_added_in_every_region_is_adopted_live_within_its_rate() {
    let mut c = Cluster::new();
    c.start_all();
    let _feed = c.feed_demand();
    let dir = test_dir("reload-add");
    let reloaders: Vec<_> = (0..3).map(|r| c.reloader(r, &dir, K_BIG)).collect();
    settle(60).await;
    // The new limit comes first in the file: it still goes after k-big.
    let added = format!("[[limits]]\nid = \"k-new\"\nrate = 300\n{K_BIG}");
    off_the_poll().await;
    for (r, (path, handle)) in reloaders.iter().enumerate() {
        write(path, &config_text(r, &added));
        let outcome = handle.reload().await;
        assert!(
            matches!(&outcome, Some(ReloadOutcome::Applied(ch)) if ch.added == ["k-new"]),
            "{outcome:?}"
        );
    }
    settle(2 * PERIOD_MS / 1000).await;
    let mut sum = 0.0;
    for rs in &c.replicas {
        let s = &rs[0].shared;
        let rules = s.rules();
        assert_eq!(
            rules.rates.len(),
            2,
            "{}: the rule set lacks the new limit",
            s.region
        );
        sum += rules.rates[1].as_rps();
        let v = s.view();
        assert_eq!(limit_json(&v, "k-new").map(|l| l.adopted_version), Some(1));
        assert_eq!(v.limits[0].id, "k-big");
    }
    assert!(
        sum <= 300.0 + 1e-9 && sum > 0.0,
        "k-new shares sum to {sum}"
    );
    settle(60).await;
    assert!(
        close(&c.published(), &[5_600.0, 3_050.0, 1_350.0], 1.0),
        "{:?}",
        c.published()
    );
}

fn mismatch_alarms(s: &Shared) -> Vec<String> {
    s.view()
        .alarms
        .iter()
        .filter(|a| a.starts_with("limits_mismatch:"))
        .cloned()
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_limit_added_in_one_region_only_raises_the_mismatch_alarm_in_both_after_the_rollout_window(
) {
    let mut c = Cluster::new();
    c.start_all();
    let _feed = c.feed_demand();
    let dir = test_dir("mismatch");
    let reloaders: Vec<_> = (0..3).map(|r| c.reloader(r, &dir, K_BIG)).collect();
    settle(60).await;
    let shareds: Vec<_> = c.replicas.iter().map(|rs| rs[0].shared.clone()).collect();
    let digests: Vec<String> = shareds
        .iter()
        .map(|s| s.view().limits_digest.clone())
        .collect();
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
    for s in &shareds {
        assert!(mismatch_alarms(s).is_empty(), "{}", s.region);
    }

    off_the_poll().await;
    let extra = format!("{K_BIG}[[limits]]\nid = \"k-extra\"\nrate = 600\n");
    write(&reloaders[0].0, &config_text(0, &extra));
    assert!(matches!(
        reloaders[0].1.reload().await,
        Some(ReloadOutcome::Applied(_))
    ));
    // Within the rollout window (10 periods) it is a rollout under way, not an alarm.
    settle(5 * PERIOD_MS / 1000).await;
    let a = shareds[0].view();
    assert_ne!(a.limits_digest, digests[0], "A's digest did not change");
    let b_of_a = a.peers.iter().find(|p| p.region == "B");
    assert_eq!(
        b_of_a.and_then(|p| p.limits_digest.clone()),
        Some(digests[0].clone())
    );
    assert!(b_of_a.and_then(|p| p.limits_mismatch) >= Some(4));
    for s in &shareds {
        assert!(
            mismatch_alarms(s).is_empty(),
            "{}: {:?}",
            s.region,
            s.view().alarms
        );
    }
    settle(7 * PERIOD_MS / 1000).await;
    assert_eq!(
        mismatch_alarms(&shareds[0]),
        vec![
            "limits_mismatch:B".to_string(),
            "limits_mismatch:C".to_string()
        ]
    );
    for s in &shareds[1..] {
        assert_eq!(
            mismatch_alarms(s),
            vec!["limits_mismatch:A".to_string()],
            "{}",
            s.region
        );
        let line = format!(
            "shareplane_alarm{{region=\"{}\",alarm=\"limits_mismatch:A\"}} 1",
            s.region
        );
        assert!(s.render_metrics().contains(&line), "{line}");
    }
    #[cfg(feature = "aws")]
    assert_eq!(
        mismatch_point(&shareds[1]),
        Some(1.0),
        "B's CloudWatch point"
    );
    // The others adopt the limit too: the digests agree again and every alarm clears.
    off_the_poll().await;
    for (r, (path, handle)) in reloaders.iter().enumerate().skip(1) {
        write(path, &config_text(r, &extra));
        assert!(matches!(
            handle.reload().await,
            Some(ReloadOutcome::Applied(_))
        ));
    }
    settle(2 * PERIOD_MS / 1000).await;
    for s in &shareds {
        assert!(
            mismatch_alarms(s).is_empty(),
            "{}: {:?}",
            s.region,
            s.view().alarms
        );
    }
    #[cfg(feature = "aws")]
    assert_eq!(
        mismatch_point(&shareds[1]),
        Some(0.0),
        "a 0 clears the CloudWatch alarm"
    );
}

/// `s`'s `LimitsMismatchPeers` point for CloudWatch (the `aws` feature's points).
#[cfg(feature = "aws")]
fn mismatch_point(s: &Shared) -> Option<f64> {
    let pts = shareplane::aws::points(&s.view(), true, 0, 0);
    pts.iter()
        .find(|p| p.name == "LimitsMismatchPeers")
        .map(|p| p.value)
}

/// The kinds of `s`'s events about `peer` (or about no peer, with `None`), oldest first.
fn event_kinds(s: &Shared, peer: Option<&str>) -> Vec<&'static str> {
    s.events
        .since(0)
        .0
        .iter()
        .filter(|e| e.peer.as_deref() == peer)
        .map(|e| e.kind.name())
        .collect()
}

/// Three daemons fed demand, settled for a minute; with A's and C's shared state.
async fn settled_three() -> (Cluster, JoinHandle<()>, Arc<Shared>, Arc<Shared>) {
    let mut c = Cluster::new();
    c.start_all();
    let feed = c.feed_demand();
    settle(60).await;
    let (a, cc) = (
        c.replicas[0][0].shared.clone(),
        c.replicas[2][0].shared.clone(),
    );
    (c, feed, a, cc)
}

#[tokio::test(start_paused = true)]
async fn a_loss_a_reclaim_a_return_and_a_fence_are_one_event_each() {
    let (mut c, _feed, a, cc) = settled_three().await;
    // Live from the first record seen: no change, no event.
    assert!(event_kinds(&a, Some("B")).is_empty());
    // B is lost and its health check turns unhealthy at once: silent, then reclaimed, once each.
    // The survivor that counts B silent first waits (once) for the other's freeze of B to reach
    // it: the verdict came before the freezes could cross, as a real check's does not.
    c.kill(1);
    c.health.set(rid(1), Health::Unhealthy);
    settle(30).await;
    let mut waited = 0;
    for s in [&a, &cc] {
        let kinds = event_kinds(s, Some("B"));
        waited += kinds.iter().filter(|&&k| k == "reclaim_waiting").count();
        let kinds: Vec<_> = kinds
            .into_iter()
            .filter(|&k| k != "reclaim_waiting")
            .collect();
        assert_eq!(kinds, vec!["peer_silent", "reclaim"], "{}", s.region);
    }
    assert!(waited <= 1, "{waited} waits");
    let reclaim = a
        .events
        .since(0)
        .0
        .into_iter()
        .find(|e| e.kind.name() == "reclaim");
    assert!(
        reclaim
            .as_ref()
            .is_some_and(|e| e.detail.starts_with("closed the estate of B's epoch 1")),
        "{reclaim:?}"
    );
    // B returns (restarted long after): a new epoch in B, live again in A.
    c.health.set(rid(1), Health::Healthy);
    let b2 = c.start(1, "r1b", c.clock);
    settle(30).await;
    assert!(
        event_kinds(&b2, None).contains(&"new_epoch"),
        "{:?}",
        event_kinds(&b2, None)
    );
    assert_eq!(
        event_kinds(&a, Some("B")).last(),
        Some(&"peer_live"),
        "{:?}",
        event_kinds(&a, Some("B"))
    );
    // A's own check reads unhealthy, then healthy again: fence on, then a new epoch (a peer
    // behind a cut may have reclaimed A on the same verdict) and fence off.
    c.health.set(rid(0), Health::Unhealthy);
    settle(10).await;
    c.health.set(rid(0), Health::Healthy);
    settle(10).await;
    let own: Vec<_> = event_kinds(&a, None);
    assert_eq!(own, vec!["fence_on", "new_epoch", "fence_off"], "{own:?}");
    // Every event has both timestamps, in order.
    let all = a.events.since(0).0;
    assert!(all
        .windows(2)
        .all(|w| w[0].seq < w[1].seq && w[0].at_ms <= w[1].at_ms));
    assert!(all
        .iter()
        .all(|e| e.at == shareplane::events::rfc3339(e.at_ms)));
}

#[tokio::test(start_paused = true)]
async fn a_reload_and_the_adoption_of_a_limit_are_events() {
    let mut c = Cluster::new();
    c.start_all();
    let _feed = c.feed_demand();
    let dir = test_dir("reload-events");
    let (path, handle) = c.reloader(0, &dir, K_BIG);
    settle(30).await;
    off_the_poll().await;
    write(
        &path,
        &config_text(0, &K_BIG.replace("rate = 10000", "rate = 8000")),
    );
    assert!(matches!(
        handle.reload().await,
        Some(ReloadOutcome::Refused(_))
    ));
    write(
        &path,
        &config_text(
            0,
            &K_BIG.replace("rate = 10000", "rate = 12000\nversion = 2"),
        ),
    );
    assert!(matches!(
        handle.reload().await,
        Some(ReloadOutcome::Applied(_))
    ));
    settle(10).await;
    let s = &c.replicas[0][0].shared;
    let events = s.events.since(0).0;
    let kinds: Vec<_> = events
        .iter()
        .filter(|e| e.peer.is_none())
        .map(|e| (e.kind.name(), e.limit.clone()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("config_refused", None),
            ("config_reloaded", None),
            ("limit_adopted", Some("k-big".to_string()))
        ]
    );
    let adopted = events.iter().find(|e| e.kind.name() == "limit_adopted");
    assert!(
        adopted.is_some_and(|e| e.detail.starts_with("adopted version 2 (rate 12000)")),
        "{adopted:?}"
    );
}

/// Stops Region `r`'s serving replica and waits for its task to end.
async fn stop_replica(c: &mut Cluster, r: usize) {
    let old = c.replicas[r].remove(0);
    let _ = old.stop.send(true);
    let _ = old.task.await;
}

fn alarms_of(s: &Shared) -> Vec<String> {
    s.view().alarms.clone()
}

#[tokio::test(start_paused = true)]
async fn an_operator_gives_up_on_lost_records_one_epoch_at_a_time_and_nothing_is_created() {
    let mut c = Cluster::new();
    c.start_all();
    let feed = c.feed_demand();
    settle(60).await;
    let a = c.replicas[0][0].shared.clone();
    // A is cut off while B restarts late twice (epochs 2 and 3); the table then loses the last
    // records of B's epochs 1 and 2 for good, so A, healed, can close neither.
    c.table.set_cut(rid(0), true);
    for k in 0..2 {
        stop_replica(&mut c, 1).await;
        settle(20).await;
        c.start(1, &format!("r1-{k}"), c.clock);
        settle(10).await;
    }
    feed.abort();
    let _feed = c.feed_demand();
    assert_eq!(c.replicas[1][0].shared.view().epoch, 3);
    assert!(c.table.lose_kept(rid(1), 1) && c.table.lose_kept(rid(1), 2));
    c.table.set_cut(rid(0), false);
    settle(20).await;
    let b_view = |a: &Shared| {
        let v = a.view();
        let p = v.peers.iter().find(|p| p.region == "B").cloned();
        p.unwrap_or_else(|| panic!("no peer B in {v:?}"))
    };
    assert!(
        alarms_of(&a).contains(&"waiting_for_record:B".to_string()),
        "{:?}",
        a.view()
    );
    assert_eq!(b_view(&a).accounts_with_epoch, Some(1));
    // A request for another epoch reaches the coordinator, which refuses it: an event.
    a.request_abandon(rid(1), 2);
    settle(6).await;
    assert_eq!(event_kinds(&a, Some("B")).last(), Some(&"abandon_refused"));
    let mut max_sum: f64 = 0.0;
    for epoch in [1, 2] {
        assert_eq!(b_view(&a).accounts_with_epoch, Some(epoch));
        a.request_abandon(rid(1), epoch);
        for _ in 0..6 {
            settle(1).await;
            max_sum = max_sum.max(c.published().iter().sum());
        }
        assert_eq!(event_kinds(&a, Some("B")).last(), Some(&"estate_abandoned"));
    }
    for _ in 0..60 {
        settle(1).await;
        max_sum = max_sum.max(c.published().iter().sum());
    }
    assert_eq!(b_view(&a).accounts_with_epoch, Some(3));
    assert!(
        !alarms_of(&a)
            .iter()
            .any(|x| x.starts_with("waiting_for_record")),
        "{:?}",
        a.view()
    );
    let abandoned = event_kinds(&a, Some("B"))
        .into_iter()
        .filter(|k| *k == "estate_abandoned")
        .count();
    assert_eq!(abandoned, 2);
    assert!(
        max_sum <= 10_000.0 + 1e-6,
        "the shares never add up to more than L: {max_sum}"
    );
    // B rises again by A's grants too: A accounts with its current epoch.
    assert!(c.published()[1] > 0.0, "{:?}", c.published());
}

/// A Region that comes back in a new epoch holds a raise back until every peer accounts with
/// that epoch (docs/PROTOCOL.md, "A raise after an unpaid lowering"). While a peer is down that
/// can last, with the raise's room unused: the leader says so (`raise_waiting:<peer>`, the
/// peer's `raise_waiting` count) and adopts the raise once the peer is back.
#[tokio::test(start_paused = true)]
async fn a_raise_held_back_for_a_peer_that_is_down_is_an_alarm_until_the_peer_returns() {
    let mut c = Cluster::new();
    c.start_all();
    let _feed = c.feed_demand();
    settle(60).await;
    // B is lost and reclaimed by A and C; then C is lost too (healthy: nobody reclaims it).
    stop_replica(&mut c, 1).await;
    c.health.set(rid(1), Health::Unhealthy);
    settle(40).await;
    let a = c.replicas[0][0].shared.clone();
    assert_eq!(peer_state(&a, "B"), "reclaimed");
    assert_eq!(peer_state(&c.replicas[2][0].shared, "B"), "reclaimed");
    stop_replica(&mut c, 2).await;
    // B comes back with the limit raised to 12,000 (version 2).
    let mut raised = (*c.d).clone();
    let k = raised.limits.iter_mut().find(|l| l.id == "k-big");
    let k = k.expect("no k-big in the demo");
    (k.rate, k.version) = (Room::rps(12_000), 2);
    c.d = Arc::new(raised);
    c.health.set(rid(1), Health::Healthy);
    let b = c.start(1, "r1-back", c.clock);
    let (max_sum, _w) = watch_sum(vec![a.clone(), b.clone()]);
    settle(30).await;
    let v = b.view();
    assert_eq!(v.epoch, 2, "B came back in a new epoch");
    let adopted = |s: &Shared| limit_json(&s.view(), "k-big").map(|l| l.adopted_version);
    assert_eq!(adopted(&b), Some(1), "the raise waits for C");
    assert!(
        alarms_of(&b).contains(&"raise_waiting:C".to_string()),
        "{v:?}"
    );
    assert!(
        !alarms_of(&b).iter().any(|x| x == "raise_waiting:A"),
        "{v:?}"
    );
    let waited = |s: &Shared, peer: &str| {
        let v = s.view();
        v.peers
            .iter()
            .find(|p| p.region == peer)
            .and_then(|p| p.raise_waiting)
    };
    assert!(waited(&b, "C").is_some_and(|n| n >= 4), "{v:?}");
    assert_eq!(waited(&b, "A"), Some(0));

    // C is back: it closes B's old epoch, accounts with the new one, and B adopts the raise.
    c.start(2, "r2-back", c.clock);
    settle(30).await;
    assert_eq!(adopted(&b), Some(2), "{:?}", b.view());
    assert!(
        !alarms_of(&b).iter().any(|x| x.starts_with("raise_waiting")),
        "{:?}",
        b.view()
    );
    assert_eq!(waited(&b, "C"), Some(0));
    let max = *max_sum.lock().unwrap_or_else(|e| e.into_inner());
    assert!(max <= 12_000.0 + 1e-6, "A's and B's shares reached {max}");
}

/// What a shadow limit would have refused, as gateways report it, shows in the Region's state
/// and metrics (summed over gateways, kept across a gateway's restart).
#[tokio::test(start_paused = true)]
async fn would_refuse_counts_reach_the_state_and_the_metrics() {
    let mut c = Cluster::new();
    c.start_all();
    settle(20).await;
    let a = c.replicas[0][0].shared.clone();
    let now = c.clock.now_ms();
    let report = |gw: &str, inc: u64, n: u64| {
        let totals = std::collections::BTreeMap::from([("k-big".to_string(), 0)]);
        let w = std::collections::BTreeMap::from([("k-big".to_string(), n)]);
        a.demand()
            .report_with(now, gw, inc, &totals, &w)
            .map(|_| ())
            .unwrap();
    };
    report("gw-1", 1, 40);
    report("gw-2", 1, 2);
    report("gw-1", 2, 1);
    settle(6).await;
    let v = a.view();
    assert_eq!(limit_json(&v, "k-big").map(|l| l.would_refuse), Some(43));
    let text = a.render_metrics();
    assert!(
        text.contains(
            "shareplane_limit_shadow_would_refuse_total{region=\"A\",limit=\"k-big\"} 43"
        ),
        "{text}"
    );
}

/// A Region is lost while another is cut off from both (alive, healthy): each survivor counts
/// the cut-off Region silent with a healthy check, so neither reclaims the lost one (the estate
/// may have moved room to the Region it cannot see); each says so once (alarm and event) and
/// reclaims when the cut heals (docs/PROTOCOL.md, "Reclaim against a causally closed basis").
#[tokio::test(start_paused = true)]
async fn a_survivor_cut_off_from_a_healthy_region_waits_to_reclaim_and_says_so() {
    let (mut c, _feed, a, cc) = settled_three().await;
    c.table.set_cut(rid(2), true);
    settle(2).await;
    c.kill(1);
    c.health.set(rid(1), Health::Unhealthy);
    settle(40).await;
    for s in [&a, &cc] {
        assert!(
            alarms_of(s).contains(&"reclaim_waiting:B".to_string()),
            "{}: {:?}",
            s.region,
            alarms_of(s)
        );
        let b_events = event_kinds(s, Some("B"));
        assert_eq!(
            b_events,
            vec!["peer_silent", "reclaim_waiting"],
            "{}",
            s.region
        );
        assert_eq!(peer_state(s, "B"), "silent", "{}", s.region);
    }
    c.table.set_cut(rid(2), false);
    settle(30).await;
    for s in [&a, &cc] {
        assert!(
            event_kinds(s, Some("B")).contains(&"reclaim"),
            "{}: {:?}",
            s.region,
            event_kinds(s, Some("B"))
        );
        assert!(!alarms_of(s)
            .iter()
            .any(|x| x.starts_with("reclaim_waiting")));
    }
    c.assert_conserved_with_lost(&[1]).await;
}
