//! One replica of a Region's daemon: the rebalance loop and the writer lease (HA).
//!
//! # The loop
//!
//! On the daemon's own monotonic [`Clock`], at `phase_ms` past every multiple of the period, the
//! replica that holds the Region's writer lease (the leader):
//!
//! 1. reads every record from its local replica of the table and hands the peers' records to the
//!    [`Coordinator`] (rejected ones are counted and never adopted);
//! 2. rebalances with the Region's measured demand and the health verdicts;
//! 3. pushes a **lowered** rule set at once if some share went down (rule-set version `2v − 1`,
//!    see [`crate::rules`]), never a raised one;
//! 4. writes its record conditionally with the lease's [`WriterToken`];
//! 5. on success commits the decision and publishes its rule set (version `2v`). On a store
//!    failure it commits nothing, so the last shares stay, nothing is raised or granted, and the
//!    next rebalance starts again from the last committed record (no room lost). On a conflict
//!    (a newer record or a higher writer token in the store) it re-reads the own record, restarts
//!    the coordinator from it and checks the lease: a deposed leader steps down;
//! 6. renews the lease (time to live 1.5 periods).
//!
//! # The gateways' lease
//!
//! Every durable write renews the lease of the published rule set
//! ([`Shared::renew_lease`]): gateways may enforce it until the write's time plus the full lease
//! of [`shareplane_core::lease_bound`], which runs out before any peer can reclaim the Region. A
//! write that fails renews nothing, so the lease shrinks to zero and the gateways fence. A leader
//! whose process was frozen (SIGSTOP, a paused VM: its loop woke a period or more late) until its
//! last durable write was `(silent_after − 1) × period` old cannot prove that it still holds its
//! room: it may have answered no health check meanwhile. Before anything else it restarts from
//! the durable record as [`Coordinator::restart`] decides, which is a new epoch, and pushes zero
//! (capacity limits) to its gateways, as a restarted daemon does.
//!
//! A follower reads all records at its phase to serve `/v1/state` and the rule set of the own
//! Region's latest record, reads the own record every quarter period to renew the gateways'
//! lease (only when the record changed: a follower whose view is not fresh renews nothing), and
//! tries to take the writer lease every quarter period, so it takes over
//! within 1.75 periods of the leader's last renewal (a quarter period after a leader that stops
//! cleanly hands the lease back). A replica that takes the lease with a token
//! other than the one its coordinator wrote with resumes from the own durable record through
//! [`Coordinator::restart`] and rebalances at once.

use crate::clock::next_tick;
use crate::events::Kind;
use crate::health::HealthSource;
use crate::health_watch::UnknownWatch;
use crate::rules::{lowered, RuleSet};
use crate::state::Shared;
use crate::view::{build_view, ViewInput};
use shareplane_core::{
    peer_view, regions, Alarms, Coordinator, Decision, Deployment, Health, Inputs, PeerState,
    PeerView, PerRegion, RegionId, RegionRecord, Room, Rule, Silence,
};
use shareplane_store::{Fetched, Lease, RecordStore, StoreError, WriterToken};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tracing::{debug, error, info, warn};

/// How one replica runs.
#[derive(Clone, Debug)]
pub struct DaemonOptions {
    /// Names this replica in the lease (unique among the Region's replicas).
    pub replica: String,
    pub phase_ms: u64,
    /// Bound on every store call; a call that takes longer counts as failed
    /// (`store_timeout_ms`, see [`crate::config::timeouts`]).
    pub call_timeout_ms: u64,
    /// Bound on every health read; a read that takes longer reads every Region as unknown
    /// (`health_timeout_ms`).
    pub health_timeout_ms: u64,
    /// Phase ticks a peer's records may name other limits than this Region's before the
    /// `limits_mismatch:<peer>` alarm (a rollout reaches Regions at different times).
    pub rollout_periods: u32,
    /// How long a Region's health verdict may read unknown without a break (or the reads fail)
    /// before the `health_unknown:<region>` alarm ([`crate::health_watch`]).
    pub health_unknown_after_ms: u64,
}

impl DaemonOptions {
    pub fn new(replica: impl Into<String>, phase_ms: u64, period_ms: u64) -> DaemonOptions {
        DaemonOptions {
            replica: replica.into(),
            phase_ms,
            // The gateways' lease allows for a peer's read taking this long (see `lease_bound`).
            call_timeout_ms: shareplane_core::lease::call_bound_ms(period_ms),
            health_timeout_ms: shareplane_core::lease::call_bound_ms(period_ms),
            rollout_periods: crate::config::DEFAULT_ROLLOUT_PERIODS,
            health_unknown_after_ms: crate::health_watch::default_unknown_after_ms(period_ms),
        }
    }
}

/// One replica's loop state.
pub struct Daemon<S, H> {
    shared: Arc<Shared>,
    /// The deployment this replica runs (its coordinator's); replaced only between rebalances,
    /// by [`Daemon::adopt_proposed`].
    d: Arc<Deployment>,
    /// [`shareplane_core::limits_digest`] of `d`'s limits, stamped into every own record.
    digest: u64,
    /// Phase ticks in a row at which each peer's latest record named other limits (a known
    /// digest other than `digest`), by Region index.
    mismatch: Vec<u32>,
    store: S,
    health: H,
    opts: DaemonOptions,
    role: Role,
    /// This replica's count of its phase ticks as a follower at which each peer's record had
    /// not changed, with the `(epoch, version)` seen at the previous one (for `/v1/state`, like
    /// the leader's).
    silence: Vec<Silence>,
    /// The process was frozen or starved (or paused) since the last durable write: it may not
    /// have answered its health check meanwhile.
    stalled: bool,
    last_health: PerRegion<Health>,
    /// The last committed decision fenced this Region (for the fence on / off events).
    fenced: bool,
    /// The last health read outlasted the call bound (logged once each way).
    health_timing_out: bool,
    /// How long each Region's verdict has read unknown, and its alarm.
    unknown: UnknownWatch,
    store_ok: bool,
    last_error: Option<String>,
    peer_records: Vec<Option<Arc<RegionRecord>>>,
    own_seen: Option<Arc<RegionRecord>>,
    alarms: Vec<String>,
    paused: watch::Receiver<bool>,
}

/// Whether this replica writes the Region's record.
enum Role {
    /// Reads every record at its phase, serves the rule set of the own Region's latest record
    /// and tries to take the writer lease every quarter period.
    Follower,
    Leader(Box<Leader>),
}

/// What only a replica that took the writer lease has.
struct Leader {
    coord: Coordinator,
    /// The token the coordinator's writes are made with.
    token: WriterToken,
    /// Lease end on this replica's clock: it writes only before it. A leader whose lease ran
    /// out keeps its coordinator; when it takes the lease back with the same token nobody wrote
    /// meanwhile and it goes on (another token, and it resumes from the durable record). 0 after
    /// a refused write until the lease is checked again.
    lease_until_ms: u64,
    /// The coordinator started a new epoch that is not written yet: it holds nothing to protect.
    unwritten_epoch: bool,
    /// The demand in the own record this replica last resumed from, by limit index: used
    /// instead of the demand book until the book has a whole window (SPEC §7).
    durable_demand: Option<Vec<Room>>,
    /// Own rebalances in a row that could not close each peer's ended epoch for want of its last
    /// record, by Region index.
    waiting_for_record: Vec<u32>,
    /// Own rebalances in a row at which a raise of some limit waited for each peer to account
    /// with this Region's current epoch, by Region index.
    raise_waiting: Vec<u32>,
    /// Own rebalances in a row at which each silent, unhealthy peer was not reclaimed for a
    /// basis in doubt (`Alarms::reclaim_waiting`), by Region index: the first is an event.
    reclaim_waiting: Vec<u32>,
}

/// A coordinator rebuilt from the own durable record ([`Daemon::resume_from_durable`]).
struct Resumed {
    coord: Coordinator,
    unwritten_epoch: bool,
    durable_demand: Option<Vec<Room>>,
}

impl Leader {
    fn new(r: Resumed, token: WriterToken, lease_until_ms: u64) -> Leader {
        let n = r.coord.deployment().n();
        Leader {
            coord: r.coord,
            token,
            lease_until_ms,
            unwritten_epoch: r.unwritten_epoch,
            durable_demand: r.durable_demand,
            waiting_for_record: vec![0; n],
            raise_waiting: vec![0; n],
            reclaim_waiting: vec![0; n],
        }
    }

    /// Goes on from a coordinator rebuilt from the durable record, with the same lease.
    fn resume(&mut self, r: Resumed) {
        self.coord = r.coord;
        self.unwritten_epoch = r.unwritten_epoch;
        self.durable_demand = r.durable_demand;
    }
}

impl<S: RecordStore, H: HealthSource> Daemon<S, H> {
    pub fn new(shared: Arc<Shared>, store: S, health: H, opts: DaemonOptions) -> Daemon<S, H> {
        let d = shared.d();
        let n = d.n();
        let unknown = UnknownWatch::new(n, opts.health_unknown_after_ms);
        Daemon {
            digest: shareplane_core::limits_digest(&d.limits),
            mismatch: vec![0; n],
            d,
            shared,
            store,
            health,
            opts,
            role: Role::Follower,
            silence: vec![Silence::default(); n],
            stalled: false,
            last_health: PerRegion::default(),
            health_timing_out: false,
            unknown,
            fenced: false,
            store_ok: true,
            last_error: None,
            peer_records: vec![None; n],
            own_seen: None,
            alarms: Vec::new(),
            paused: watch::channel(false).1,
        }
    }

    /// While `paused` reads true the replica does nothing at all, as if its process were frozen
    /// (the demo's "lose"). Its lease runs out; when it wakes it checks the lease again.
    pub fn with_pause(mut self, paused: watch::Receiver<bool>) -> Self {
        self.paused = paused;
        self
    }

    fn period_ms(&self) -> u64 {
        self.d.period_ms
    }

    fn ttl_ms(&self) -> u64 {
        self.period_ms() * 3 / 2
    }

    fn leader(&self) -> Option<&Leader> {
        match &self.role {
            Role::Leader(l) => Some(l),
            Role::Follower => None,
        }
    }

    fn is_leader(&self, now_ms: u64) -> bool {
        self.leader().is_some_and(|l| l.lease_until_ms > now_ms)
    }

    /// Runs until the shared shutdown signal. A rebalance in progress is finished (every call in
    /// it is bounded by `call_timeout_ms`) before the loop returns.
    pub async fn run(mut self) {
        let clock = self.shared.clock;
        let mut shutdown = self.shared.shutdown_signal();
        let period = self.period_ms();
        let quarter = (period / 4).max(1);
        let mut next_phase = next_tick(clock.now_ms(), self.opts.phase_ms, period);
        info!(region = %self.shared.region, replica = %self.opts.replica, period_ms = period,
              phase_ms = self.opts.phase_ms, "rebalance loop started");
        loop {
            let now = clock.now_ms();
            let wake = if self.is_leader(now) {
                next_phase
            } else {
                next_phase.min(next_tick(now, self.opts.phase_ms, quarter))
            };
            tokio::select! {
                _ = tokio::time::sleep_until(clock.instant_at(wake)) => {}
                _ = shutdown.wait_for(|s| *s) => break,
            }
            let woke = clock.now_ms();
            // Woken a period or more late: the process was frozen (SIGSTOP, a paused VM) or
            // starved, so it may not have answered its health check meanwhile.
            let late_ms = woke.saturating_sub(wake.max(now));
            if late_ms >= period {
                warn!(region = %self.shared.region, late_ms, "the rebalance loop woke late: the process was frozen or starved");
                self.stalled = true;
            }
            let now = woke;
            let phase_tick = now >= next_phase;
            if phase_tick {
                next_phase = next_tick(now, self.opts.phase_ms, period);
            }
            if *self.paused.borrow() {
                // As if the process were frozen.
                self.stalled = true;
                continue;
            }
            self.adopt_proposed();
            self.adopt_abandons();
            if phase_tick || !self.is_leader(now) {
                self.tick(now, phase_tick).await;
            }
        }
        let now = clock.now_ms();
        let released = self.is_leader(now) && self.release(now).await;
        info!(region = %self.shared.region, replica = %self.opts.replica, released_lease = released,
              "rebalance loop stopped");
    }

    /// Adopts a reloaded deployment ([`Shared::propose`]) between two rebalances: the
    /// coordinator, the store's codec, the demand book, the rule set and the API switch
    /// together. The coordinator's next rebalance adopts each limit at its new version in this
    /// Region's static part (the core's limit-change protocol) and an added limit in its static
    /// part. The reloader checked the deployment; should the coordinator still refuse it, the
    /// running one stays.
    fn adopt_proposed(&mut self) {
        let Some(d) = self.shared.take_proposed() else {
            return;
        };
        if let Role::Leader(l) = &mut self.role {
            if let Err(es) = l.coord.set_limits(d.limits.clone()) {
                let es: Vec<String> = es.iter().map(|e| e.to_string()).collect();
                warn!(region = %self.shared.region, errors = %es.join("; "),
                      "the coordinator refused the reloaded limits; the running ones stay");
                return;
            }
        }
        self.store.set_deployment(d.clone());
        self.shared.set_deployment(d.clone());
        info!(region = %self.shared.region, limits = d.limits.len(),
              digest = %format!("{:016x}", shareplane_core::limits_digest(&d.limits)),
              "adopted the reloaded limits");
        self.digest = shareplane_core::limits_digest(&d.limits);
        self.d = d;
    }

    /// Hands operators' requests to stop waiting for a peer epoch's last record
    /// ([`Shared::request_abandon`]) to the coordinator, which decides; a refusal is an event.
    fn adopt_abandons(&mut self) {
        for (peer, epoch) in self.shared.take_abandons() {
            let name = self.d.region_name(peer).to_string();
            let refused = match &mut self.role {
                Role::Leader(l) => l.coord.abandon(peer, epoch).err().map(|e| e.to_string()),
                Role::Follower => Some("this replica does not lead its Region".to_string()),
            };
            if let Some(why) = refused {
                self.shared.event(
                    Kind::AbandonRefused,
                    Some(&name),
                    None,
                    format!("refused to stop waiting for the last record of {name}'s epoch {epoch}: {why}"),
                );
            }
        }
    }

    /// Hands the lease back on a clean stop (renewed to expire now), so that a follower takes
    /// over within a quarter period instead of waiting for it to run out. Nothing is written.
    async fn release(&mut self, now: u64) -> bool {
        let me = self.shared.me;
        let released = self
            .call(
                "lease",
                self.store.acquire_lease(me, &self.opts.replica, now, 0),
            )
            .await;
        self.role = Role::Follower;
        self.shared.metrics.leader.set(0);
        released.is_ok()
    }

    async fn tick(&mut self, now: u64, phase_tick: bool) {
        let was_leader = self.is_leader(now);
        if self.ensure_leader(now).await {
            // A replica that just took the lease rebalances at once, so that its first write
            // comes soon after the previous leader's last one.
            if phase_tick || !was_leader {
                self.rebalance(now).await;
            }
        } else if phase_tick {
            self.follow(now).await;
        } else {
            self.refresh_own(now).await;
        }
    }

    /// Holds, renews or takes the lease. Returns whether this replica may write now.
    async fn ensure_leader(&mut self, now: u64) -> bool {
        if self.is_leader(now) {
            return true;
        }
        match self.acquire(now).await {
            Ok(l) => {
                match &mut self.role {
                    Role::Leader(leader) if leader.token == l.token => {
                        leader.lease_until_ms = l.expires_at_ms;
                    }
                    _ => {
                        let Some(resumed) = self.resume_from_durable(now).await else {
                            return false;
                        };
                        self.role =
                            Role::Leader(Box::new(Leader::new(resumed, l.token, l.expires_at_ms)));
                        self.shared.metrics.lease_taken.inc();
                        info!(region = %self.shared.region, replica = %self.opts.replica, token = l.token.0,
                              "took the writer lease");
                    }
                }
                self.shared.metrics.leader.set(1);
                true
            }
            Err(StoreError::Conflict(why)) => {
                debug!(region = %self.shared.region, %why, "lease held by another replica");
                self.step_down("lease held by another replica");
                false
            }
            Err(e) => {
                self.fail("lease", &e);
                false
            }
        }
    }

    /// Rebuilds the coordinator from the own record in the store (SPEC §6: a restart resumes
    /// from the own durable record, or starts a new epoch when it may have been reclaimed).
    async fn resume_from_durable(&mut self, now: u64) -> Option<Resumed> {
        let me = self.shared.me;
        let d = self.d.clone();
        match self.call("read_one", self.store.read_one(me)).await {
            Ok(fetched) => {
                let durable = match fetched {
                    Some(Fetched::Record(r)) => Some((*r).clone()),
                    Some(Fetched::Rejected { reason, .. }) => {
                        // Our own record is unreadable: resuming from nothing would duplicate
                        // room, so refuse to lead until an operator looks.
                        warn!(region = %self.shared.region, %reason, "own record in the store is unreadable; not writing");
                        self.shared.metrics.records_rejected.inc(reason.cause());
                        return None;
                    }
                    None => None,
                };
                let down_ms = durable
                    .as_ref()
                    .map_or(0, |r| now.saturating_sub(r.written_at_ms));
                let durable_demand = durable
                    .as_ref()
                    .map(|r| r.limits.iter().map(|l| l.demand).collect());
                let durable_epoch = durable.as_ref().map(|r| r.epoch);
                let c = Coordinator::restart(d.clone(), me, durable, down_ms);
                info!(region = %self.shared.region, epoch = c.own().epoch, version = c.own().version,
                      down_ms, "resumed from the own durable record");
                let unwritten_epoch = durable_epoch.is_some_and(|e| e != c.own().epoch);
                if unwritten_epoch {
                    // It may have been reclaimed: zero before anything else, at the version of
                    // the early push of its next write (see `crate::rules`).
                    let version = 2 * (c.own().version + 1) - 1;
                    let zero = RuleSet::build(
                        &d,
                        &self.shared.templates(),
                        &self.shared.region,
                        version,
                        &Rule::zeroed(&d, me),
                    );
                    if self.shared.publish(zero) {
                        info!(region = %self.shared.region, version, "new epoch: pushed zero to the gateways");
                    }
                    self.shared.event(
                        Kind::NewEpoch,
                        None,
                        None,
                        format!(
                            "resumed {down_ms} ms after the last own write, too late to be sure nobody reclaimed it: epoch {} at share 0 (zero pushed to the gateways); raises only by grants named to it",
                            c.own().epoch
                        ),
                    );
                }
                Some(Resumed {
                    coord: c,
                    unwritten_epoch,
                    durable_demand,
                })
            }
            Err(e) => {
                self.fail("read_own", &e);
                None
            }
        }
    }

    fn step_down(&mut self, why: &str) {
        if let Role::Leader(_) = self.role {
            warn!(region = %self.shared.region, replica = %self.opts.replica, why, "stepped down: no longer the writer");
            self.shared.metrics.stepped_down.inc();
        }
        self.role = Role::Follower;
        self.shared.metrics.leader.set(0);
    }

    /// Records a failed store call. It is logged as a warning when failures start (and at debug
    /// level while they go on); metrics count every one.
    fn fail(&mut self, op: &'static str, e: &StoreError) {
        if self.store_ok {
            warn!(region = %self.shared.region, op, error = %e,
                  "store call failed; keeping the last shares, raising and granting nothing");
        } else {
            debug!(region = %self.shared.region, op, error = %e, "store call failed again");
        }
        self.store_ok = false;
        self.last_error = Some(format!("{op}: {e}"));
    }

    fn store_works(&mut self) {
        if !self.store_ok {
            info!(region = %self.shared.region, "store calls succeed again; resuming");
        }
        self.store_ok = true;
        self.last_error = None;
    }

    /// A store call `op`, bounded by `call_timeout_ms` and timed
    /// (`shareplane_store_call_duration_seconds{op}`).
    async fn call<T>(
        &self,
        op: &'static str,
        f: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = tokio::time::Instant::now();
        let r =
            match tokio::time::timeout(Duration::from_millis(self.opts.call_timeout_ms), f).await {
                Ok(r) => r,
                Err(_) => Err(StoreError::Unavailable(format!(
                    "no answer within store_timeout_ms ({} ms)",
                    self.opts.call_timeout_ms
                ))),
            };
        (self.shared.metrics.store_call_duration).observe(op, started.elapsed());
        r
    }

    /// Reads every record; peers go to `peer_records` (and the coordinator when leading).
    async fn read_all(&mut self) -> bool {
        let fetched = self.call("read_all", self.store.read_all()).await;
        self.absorb(fetched)
    }

    /// Takes in what a read of every record returned (see [`Daemon::read_all`]).
    fn absorb(&mut self, fetched: Result<Vec<Fetched>, StoreError>) -> bool {
        let fetched = match fetched {
            Ok(f) => f,
            Err(e) => {
                self.shared.metrics.reads_failed.inc();
                self.fail("read_all", &e);
                return false;
            }
        };
        self.shared.mark_ready();
        let me = self.shared.me;
        for f in fetched {
            match f {
                Fetched::Record(r) if r.region == me => self.own_seen = Some(r),
                Fetched::Record(r) => {
                    let j = r.region.index();
                    if let Role::Leader(l) = &mut self.role {
                        if let Err(e) = l.coord.observe(r.clone()) {
                            self.shared.metrics.records_rejected.inc(e.cause());
                            warn!(region = %self.shared.region, peer = j, error = %e, "peer record rejected");
                            continue;
                        }
                    } else if let Err(e) = r.validate(&self.d, me) {
                        self.shared.metrics.records_rejected.inc(e.cause());
                        continue;
                    }
                    if let Some(slot) = self.peer_records.get_mut(j) {
                        *slot = Some(r);
                    }
                }
                Fetched::Rejected { region, reason } => {
                    self.shared.metrics.records_rejected.inc(reason.cause());
                    warn!(region = %self.shared.region, peer = ?region, %reason, "item rejected");
                }
            }
        }
        true
    }

    async fn read_health(&mut self) -> PerRegion<Health> {
        let t = Duration::from_millis(self.opts.health_timeout_ms);
        let h = tokio::time::timeout(t, self.health.read()).await;
        self.take_health(h)
    }

    /// Health that cannot be read in time is Unknown, never Unhealthy: counted, and logged once
    /// each way.
    fn take_health(
        &mut self,
        read: Result<PerRegion<Health>, tokio::time::error::Elapsed>,
    ) -> PerRegion<Health> {
        let h = match read {
            Ok(h) => {
                if self.health_timing_out {
                    self.health_timing_out = false;
                    info!(region = %self.shared.region, "health reads answer in time again");
                }
                h
            }
            Err(_) => {
                self.shared.metrics.health_reads_timed_out.inc();
                if !self.health_timing_out {
                    self.health_timing_out = true;
                    warn!(region = %self.shared.region, bound_ms = self.opts.health_timeout_ms,
                          "a health read outlasted health_timeout_ms: every Region reads as unknown (never unhealthy) until one answers in time");
                }
                PerRegion::default()
            }
        };
        self.last_health = h;
        self.watch_unknown(&h);
        h
    }

    /// Counts how long each verdict has read unknown; the alarm raised or cleared is an event
    /// of this replica (the verdicts handed to the core are unchanged: unknown never reclaims).
    fn watch_unknown(&mut self, h: &PerRegion<Health>) {
        for change in self.unknown.observe(self.shared.clock.now_ms(), h) {
            let (kind, peer, detail) = change.event(&self.d);
            self.shared.event(kind, Some(&peer), None, detail);
        }
    }

    /// The demand to rebalance with, measured as late as possible: the book's rates at this
    /// instant (the book stamps reports on receipt, so no report that arrived during the store
    /// calls can fall outside the window), or, while the book has not seen a whole window yet,
    /// the demand in the own durable record this replica resumed from. Then the deadband
    /// ([`shareplane_core::published_demand`]) against the demand of the last committed record,
    /// so that noise does not change targets, shares and the rule set every period.
    fn demand(&self) -> Vec<Room> {
        let mut book = self.shared.demand();
        let now = self.shared.clock.now_ms();
        let measured = book.rates(now);
        let mature = book.is_mature(now);
        drop(book);
        self.shared
            .metrics
            .demand_window_full
            .set(u64::from(mature));
        let leader = self.leader();
        let last = leader
            .and_then(|l| l.durable_demand.as_deref())
            .filter(|_| !mature);
        let own = leader.map(|l| l.coord.own());
        measured
            .iter()
            .enumerate()
            .map(|(i, &m)| {
                let m = last.and_then(|l| l.get(i).copied()).unwrap_or(m);
                match own.and_then(|o| o.limits.get(i)) {
                    Some(l) => shareplane_core::published_demand(l.demand, m, l.rate),
                    None => m,
                }
            })
            .collect()
    }

    /// Whether this Region cannot prove that it still holds its room: its last committed write is
    /// as old as [`Coordinator::restart`]'s resume window, so peers may have counted it silent,
    /// and its process stalled meanwhile, so its health check may have failed too. (A daemon that
    /// ran all along answered its health check, so its peers had no unhealthy verdict to reclaim
    /// on, however long its writes failed: it only let its gateways' lease run out.)
    fn last_write_too_old(&self, now: u64) -> Option<u64> {
        let leader = self.leader()?;
        let own = leader.coord.own();
        if leader.unwritten_epoch || !self.stalled {
            return None;
        }
        let d = &self.d;
        let window = u64::from(d.silent_after.saturating_sub(1)).saturating_mul(d.period_ms);
        let age = now.saturating_sub(own.written_at_ms);
        (own.version > 0 && age >= window).then_some(age)
    }

    async fn rebalance(&mut self, now: u64) {
        let started = tokio::time::Instant::now();
        self.rebalance_untimed(now).await;
        (self.shared.metrics.rebalance_duration).observe(started.elapsed());
    }

    async fn rebalance_untimed(&mut self, now: u64) {
        if let Some(age_ms) = self.last_write_too_old(now) {
            let Some(resumed) = self.resume_from_durable(now).await else {
                self.update_view();
                return;
            };
            let epoch = resumed.coord.own().epoch;
            if let Role::Leader(l) = &mut self.role {
                l.resume(resumed);
            }
            warn!(region = %self.shared.region, age_ms, epoch,
                  "the last own write was too old to prove this Region still holds its room; restarted from the durable record");
        }
        // The records and the verdicts are read at once: the sooner the write, the more of the
        // gateways' lease is left when the next renewal comes.
        let t = Duration::from_millis(self.opts.health_timeout_ms);
        let (fetched, health) = tokio::join!(
            self.call("read_all", self.store.read_all()),
            tokio::time::timeout(t, self.health.read())
        );
        let health = self.take_health(health);
        if !self.absorb(fetched) {
            self.shared
                .metrics
                .rebalances_skipped
                .inc("store_unavailable");
            self.update_view();
            return;
        }
        self.count_mismatch();
        let demand = self.demand();
        let Role::Leader(leader) = &mut self.role else {
            return;
        };
        let peers_before = leader.coord.peers();
        let mut decision = leader.coord.rebalance(&Inputs {
            now_ms: now,
            demand: &demand,
            health: &health,
            explain: false,
        });
        // What limits this Region runs, for the peers' mismatch check (no decision reads it).
        decision.record.limits_digest = Some(self.digest);
        self.shared.metrics.rebalances.inc();
        self.alarms = alarm_names(&decision.alarms, &self.d);
        for (li, step) in &decision.alarms.not_conserved {
            let limit = self.d.limits.get(*li).map_or("?", |l| l.id.as_str());
            error!(region = %self.shared.region, limit, step,
                   "a step of the protocol core changed the room it only moves (a bug in shareplane: please report it with /v1/state and /v1/events); the decision is written as computed");
        }
        count_in_a_row(
            &mut leader.waiting_for_record,
            &decision.alarms.waiting_for_record,
        );
        count_in_a_row(&mut leader.raise_waiting, &decision.alarms.raise_waits_for);
        count_in_a_row(
            &mut leader.reclaim_waiting,
            &decision.alarms.reclaim_waiting,
        );
        if decision.alarms.stale_view {
            self.shared.metrics.stale_rebalances.inc();
        }
        let v = decision.record.version;
        let (d, region) = (self.d.clone(), self.shared.region.clone());
        let templates = self.shared.templates();
        if let Some(low) = lowered(&self.shared.rules(), &decision.rules) {
            let early = (2 * v).saturating_sub(1);
            self.shared
                .publish(RuleSet::build(&d, &templates, &region, early, &low));
        }
        let token = leader.token;
        match self
            .call("put", self.store.put(&decision.record, token))
            .await
        {
            Ok(()) => {
                if let Role::Leader(l) = &mut self.role {
                    let decided = decision_events(&d, l.coord.own(), &decision, self.fenced);
                    l.coord.commit(&decision);
                    l.unwritten_epoch = false;
                    // A peer's change of state first: it is why a reclaim happened.
                    let mut events = peer_events(&d, &peers_before, &l.coord.peers());
                    events.extend(decided);
                    for &r in &decision.alarms.reclaim_waiting {
                        if l.reclaim_waiting[r.index()] == 1 {
                            events.push((Kind::ReclaimWaiting, Some(d.region_name(r).to_string()), None,
                                "silent and unhealthy, not reclaimed yet: this Region is cut off from another Region whose health check does not read unhealthy, or a peer it sees knows a newer record of it; its room is held by nobody until that clears".to_string()));
                        }
                    }
                    for (kind, peer, limit, detail) in events {
                        self.shared
                            .event(kind, peer.as_deref(), limit.as_deref(), detail);
                    }
                }
                self.fenced = decision.alarms.fenced;
                self.stalled = false;
                self.shared.metrics.writes.inc();
                self.shared.publish(RuleSet::build(
                    &d,
                    &templates,
                    &region,
                    2 * v,
                    &decision.rules,
                ));
                self.shared
                    .renew_lease(v, decision.record.written_at_ms, now);
                self.store_works();
                debug!(region = %region, version = v, "record written");
            }
            Err(StoreError::Conflict(why)) => {
                self.shared.metrics.writes_failed.inc("conflict");
                warn!(region = %region, version = v, %why, "record write refused; re-reading the own record");
                self.last_error = Some(format!("put: conflict: {why}"));
                self.on_conflict(now).await;
            }
            Err(e) => {
                self.shared.metrics.writes_failed.inc(if e.is_retryable() {
                    "unavailable"
                } else {
                    "fatal"
                });
                self.fail("put", &e);
            }
        }
        if let Role::Leader(_) = self.role {
            self.renew(now, false).await;
        }
        self.update_view();
    }

    async fn on_conflict(&mut self, now: u64) {
        let Some(resumed) = self.resume_from_durable(now).await else {
            self.step_down("the own record could not be read again after a refused write");
            return;
        };
        if let Role::Leader(l) = &mut self.role {
            l.resume(resumed);
            l.lease_until_ms = 0;
        }
        // The coordinator now stands on the durable record, so a token that changed hands to
        // this replica may be adopted.
        self.renew(now, true).await;
    }

    async fn acquire(&self, now: u64) -> Result<Lease, StoreError> {
        let me = self.shared.me;
        self.call(
            "lease",
            self.store
                .acquire_lease(me, &self.opts.replica, now, self.ttl_ms()),
        )
        .await
    }

    async fn renew(&mut self, now: u64, adopt_new_token: bool) {
        match self.acquire(now).await {
            Ok(l) => match &mut self.role {
                Role::Leader(leader) if adopt_new_token || leader.token == l.token => {
                    leader.token = l.token;
                    leader.lease_until_ms = l.expires_at_ms;
                }
                Role::Leader(_) => self.step_down("the lease changed hands"),
                // Renewed only as a leader.
                Role::Follower => {}
            },
            Err(StoreError::Conflict(_)) => self.step_down("a newer writer holds the lease"),
            // Keep the lease we believe in until it runs out on our clock; the store's token
            // check refuses our writes if someone else took it meanwhile.
            Err(e) => self.fail("lease", &e),
        }
    }

    async fn follow(&mut self, now: u64) {
        self.read_health().await;
        if self.read_all().await {
            self.store_works();
            self.count_silence();
            self.count_mismatch();
            if let Some(own) = self.own_seen.clone() {
                self.serve_own(&own, now);
            }
        }
        self.update_view();
    }

    /// A follower publishes the rules of the own Region's latest record and renews the
    /// gateways' lease on it: only a record newer than the last one renews, so a follower whose
    /// view is stale (the leader stopped writing, or reads fail) lets the lease run out.
    fn serve_own(&self, own: &RegionRecord, now: u64) {
        let d = self.d.clone();
        let version = 2 * own.version;
        let rules = Rule::of_record(&d, own);
        let templates = self.shared.templates();
        self.shared.publish(RuleSet::build(
            &d,
            &templates,
            &self.shared.region,
            version,
            &rules,
        ));
        // What is published may be newer (this replica led until just now): the lease then stays
        // on the record those rules came from.
        if self.shared.rules().version <= version {
            self.shared.renew_lease(own.version, own.written_at_ms, now);
        }
    }

    /// A follower's quarter-period look at the own record, to renew the lease soon after the
    /// leader's write (one item read).
    async fn refresh_own(&mut self, now: u64) {
        let me = self.shared.me;
        let Ok(Some(Fetched::Record(r))) = self.call("read_one", self.store.read_one(me)).await
        else {
            return;
        };
        let newer = self.own_seen.as_ref().is_none_or(|o| r.version > o.version);
        if newer {
            self.own_seen = Some(r.clone());
            self.serve_own(&r, now);
        }
    }

    /// Counts, at each phase tick, how long each peer's latest record has named other limits
    /// than this Region runs. A record without a digest (an older daemon) tells nothing and
    /// counts as agreeing.
    fn count_mismatch(&mut self) {
        for (rec, n) in self.peer_records.iter().zip(self.mismatch.iter_mut()) {
            let differs = rec
                .as_ref()
                .and_then(|r| r.limits_digest)
                .is_some_and(|d| d != self.digest);
            *n = if differs { n.saturating_add(1) } else { 0 };
        }
    }

    /// `limits_mismatch:<peer>` for every peer past the rollout window.
    fn mismatch_alarms(&self) -> Vec<String> {
        let window = self.opts.rollout_periods;
        regions(self.d.n())
            .filter(|r| self.mismatch.get(r.index()).is_some_and(|&n| n > window))
            .map(|r| format!("limits_mismatch:{}", self.d.region_name(r)))
            .collect()
    }

    /// Counts, at a follower's phase tick, how long each peer's record has not changed.
    fn count_silence(&mut self) {
        for (rec, slot) in self.peer_records.iter().zip(self.silence.iter_mut()) {
            slot.read(rec.as_ref().map(|r| (r.epoch, r.version)));
        }
    }

    /// The peers as a follower sees them, by the coordinator's rule ([`peer_view`]): silence
    /// from its own count, reclaimed when the leader's record marks the peer's current epoch.
    fn follower_peers(&self, own: Option<&RegionRecord>) -> Vec<PeerView> {
        let me = self.shared.me;
        regions(self.d.n())
            .filter(|&r| r != me)
            .filter_map(|r| {
                let rec = self.peer_records.get(r.index())?.as_ref()?;
                let silence = self.silence.get(r.index()).copied().unwrap_or_default();
                Some(peer_view(&self.d, own, rec, true, silence.unchanged()))
            })
            .collect()
    }

    fn update_view(&mut self) {
        let d = self.d.clone();
        let unknown_alarms = self.unknown.alarms(&d);
        let me = self.shared.me;
        let (role, own, peer_records, peer_views, waits) = match &self.role {
            Role::Leader(l) if l.lease_until_ms > 0 => {
                let c = &l.coord;
                let recs = regions(d.n()).map(|r| c.latest(r).cloned()).collect();
                let waits = (l.waiting_for_record.clone(), l.raise_waiting.clone());
                (
                    "leader",
                    Some(Arc::new(c.own().clone())),
                    recs,
                    Some(c.peers()),
                    waits,
                )
            }
            _ => {
                let own = self.own_seen.clone();
                let peers = self.follower_peers(own.as_deref());
                let recs = self.peer_records.clone();
                ("follower", own, recs, Some(peers), Default::default())
            }
        };
        let view = build_view(ViewInput {
            d,
            me,
            role,
            replica: &self.opts.replica,
            own,
            peer_records,
            peer_views,
            health: self.last_health,
            store_ok: self.store_ok,
            last_error: self.last_error.clone(),
            rules_version: self.shared.rules().version,
            alarms: [self.alarms.clone(), self.mismatch_alarms(), unknown_alarms].concat(),
            health_unknown_ms: self.unknown.unknown_ms(self.shared.clock.now_ms()),
            waiting_for_record: waits.0,
            raise_waiting: waits.1,
            would_refuse: Arc::new(self.shared.demand().would_refuse()),
            limits_mismatch: self.mismatch.clone(),
        });
        self.shared.set_view(view);
    }
}

/// Counts, by Region index, the rebalances in a row that named each Region in `named`.
fn count_in_a_row(counts: &mut [u32], named: &[RegionId]) {
    for (i, c) in counts.iter_mut().enumerate() {
        let now = named.iter().any(|r| r.index() == i);
        *c = if now { c.saturating_add(1) } else { 0 };
    }
}

fn alarm_names(a: &Alarms, d: &Deployment) -> Vec<String> {
    let mut out = Vec::new();
    for &li in &a.sum_above_limit {
        let id = d.limits.get(li).map_or("?", |l| l.id.as_str());
        out.push(format!("sum_above_limit:{id}"));
    }
    if a.stale_view {
        out.push("stale_view".into());
    }
    if a.new_epoch {
        out.push("new_epoch".into());
    }
    if a.fenced {
        out.push("fenced".into());
    }
    for r in &a.reclaimed {
        out.push(format!("reclaimed:{}", d.region_name(*r)));
    }
    for r in &a.waiting_for_record {
        out.push(format!("waiting_for_record:{}", d.region_name(*r)));
    }
    for r in &a.reclaim_waiting {
        out.push(format!("reclaim_waiting:{}", d.region_name(*r)));
    }
    for r in &a.raise_waits_for {
        out.push(format!("raise_waiting:{}", d.region_name(*r)));
    }
    for (li, step) in &a.not_conserved {
        let id = d.limits.get(*li).map_or("?", |l| l.id.as_str());
        out.push(format!("room_not_conserved:{id}:{step}"));
    }
    out
}

/// One operator event: kind, peer, limit, detail.
type Ev = (Kind, Option<String>, Option<String>, String);

/// The events of a decision that was durably written, read from what the core returned: its
/// alarms (closes, settlements, a new epoch, fencing) and the limit versions of its record
/// against `old`, the record it follows.
fn decision_events(
    d: &Deployment,
    old: &RegionRecord,
    decision: &Decision,
    was_fenced: bool,
) -> Vec<Ev> {
    let (a, rec) = (&decision.alarms, &decision.record);
    let mut out: Vec<Ev> = Vec::new();
    if a.new_epoch {
        out.push((Kind::NewEpoch, None, None, format!(
            "started epoch {} at share 0 (epoch {} may have been reclaimed); raises only by grants named to it",
            rec.epoch, old.epoch)));
    }
    if a.fenced != was_fenced {
        let (kind, what) = if a.fenced {
            (Kind::FenceOn, "the own health check reads unhealthy: every capacity share lowered to zero, nothing raised, granted or reclaimed")
        } else {
            (
                Kind::FenceOff,
                "the own health check no longer reads unhealthy: shares may rise again",
            )
        };
        out.push((kind, None, None, what.to_string()));
    }
    for (list, kind, what) in [
        (&a.reclaimed, Kind::Reclaim, "closed the estate of"),
        (&a.settled, Kind::Settlement, "settled again the estate of"),
    ] {
        for &r in list {
            let mark = rec.reclaims[r];
            let detail = match mark {
                Some(m) => format!(
                    "{what} {}'s epoch {} against its record version {}",
                    d.region_name(r),
                    m.epoch,
                    m.version
                ),
                None => format!("{what} {}", d.region_name(r)),
            };
            out.push((kind, Some(d.region_name(r).to_string()), None, detail));
        }
    }
    for &r in &a.abandoned {
        let name = d.region_name(r);
        out.push((Kind::EstateAbandoned, Some(name.to_string()), None, format!(
            "stopped waiting for the last record of {name}'s epoch {}, as an operator asked: what \
             this Region would have settled of that epoch (its portion, grants in flight either way) \
             stays with nobody, under the limit; it now accounts with epoch {}",
            old.peer_epochs[r], rec.peer_epochs[r])));
    }
    for (li, (spec, new)) in d.limits.iter().zip(&rec.limits).enumerate() {
        let was = old.limits.get(li).copied().unwrap_or_default();
        if new.limit_version != was.limit_version {
            out.push((Kind::LimitAdopted, None, Some(spec.id.clone()), format!(
                "adopted version {} (rate {}) after version {} (rate {}), in this Region's static part",
                new.limit_version, new.rate, was.limit_version, was.rate)));
        }
    }
    out
}

/// Peers whose state the core reports differently after a committed rebalance: silent, or
/// live again. (That a peer's estate was closed is a [`Kind::Reclaim`] of the decision.)
fn peer_events(d: &Deployment, before: &[PeerView], after: &[PeerView]) -> Vec<Ev> {
    let mut out = Vec::new();
    for p in after {
        let was = before
            .iter()
            .find(|b| b.region == p.region)
            .map(|b| b.state);
        let name = d.region_name(p.region).to_string();
        match (was, p.state) {
            // A peer reclaimed straight from live was counted silent by the same rebalance.
            (Some(PeerState::Live), PeerState::Silent | PeerState::Reclaimed) => out.push((
                Kind::PeerSilent,
                Some(name.clone()),
                None,
                format!(
                    "{name}'s record (epoch {}, version {}) has not changed for {} own rebalances",
                    p.epoch, p.version, p.unchanged
                ),
            )),
            (Some(PeerState::Silent | PeerState::Reclaimed), PeerState::Live) => out.push((
                Kind::PeerLive,
                Some(name.clone()),
                None,
                format!(
                    "{name} writes again (epoch {}, version {})",
                    p.epoch, p.version
                ),
            )),
            _ => {}
        }
    }
    out
}
