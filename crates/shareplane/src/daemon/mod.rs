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
//!
//! # Files
//!
//! The loop and the leader's rebalance are here; `writer` holds the writer lease (taking,
//! renewing and releasing it, resuming from the own durable record, stepping down), `follower`
//! what a follower reads and serves and the view both roles publish, `report` the alarm names
//! and events read from the core's decisions.

mod follower;
mod report;
mod writer;

use crate::clock::next_tick;
use crate::events::Kind;
use crate::health::HealthSource;
use crate::health_watch::UnknownWatch;
use crate::rules::{lowered, RuleSet};
use crate::state::{Command, Shared};
use report::{alarm_names, count_in_a_row, decision_events, peer_events};
use shareplane_core::{
    Coordinator, Decision, Deployment, Health, Inputs, PeerView, PerRegion, RegionId, RegionRecord,
    Room, Rule, Silence,
};
use shareplane_store::{Fetched, RecordStore, StoreError, WriterToken};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
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
    /// by [`Daemon::adopt`].
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
    /// What the API and the reloader ask ([`crate::state::Command`]), read in the loop's
    /// `select!`; held in `pending` until the loop is not paused.
    commands: mpsc::Receiver<Command>,
    pending: Vec<Command>,
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
        let commands = shared.take_commands().unwrap_or_else(|| {
            error!(region = %shared.region, "another loop reads this Region's commands; this one gets none");
            mpsc::channel(1).1
        });
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
            commands,
            pending: Vec::new(),
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
                Some(command) = self.commands.recv() => {
                    self.pending.push(command);
                    if !*self.paused.borrow() {
                        self.run_commands();
                    }
                    continue;
                }
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
            self.run_commands();
            if phase_tick || !self.is_leader(now) {
                self.tick(now, phase_tick).await;
            }
        }
        let now = clock.now_ms();
        let released = self.is_leader(now) && self.release(now).await;
        info!(region = %self.shared.region, replica = %self.opts.replica, released_lease = released,
              "rebalance loop stopped");
    }

    /// Carries out what the API and the reloader asked, in order.
    fn run_commands(&mut self) {
        for command in std::mem::take(&mut self.pending) {
            match command {
                Command::Adopt(d) => self.adopt(d),
                Command::Abandon(peer, epoch) => self.abandon(peer, epoch),
            }
        }
    }

    /// Adopts a reloaded deployment, if the coordinator accepts its limits.
    fn adopt(&mut self, d: Arc<Deployment>) {
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

    /// Hands an operator's request to stop waiting for a peer epoch's last record to the
    /// coordinator, which decides; a refusal is an event.
    fn abandon(&mut self, peer: RegionId, epoch: u64) {
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
                format!(
                    "refused to stop waiting for the last record of {name}'s epoch {epoch}: {why}"
                ),
            );
        }
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
        let started = crate::clock::monotonic_now();
        let r =
            match tokio::time::timeout(Duration::from_millis(self.opts.call_timeout_ms), f).await {
                Ok(r) => r,
                Err(_) => Err(StoreError::Unavailable(format!(
                    "no answer within store_timeout_ms ({} ms)",
                    self.opts.call_timeout_ms
                ))),
            };
        (self.shared.metrics.store_call_duration).observe(op, crate::clock::since(started));
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
                Fetched::Record(r) if r.region() == me => {
                    // The last records of the own ended epochs come first: the leader keeps them
                    // to value the estates that inherited from them (`Coordinator::remember_own`).
                    if let Role::Leader(l) = &mut self.role {
                        if r.epoch() < l.coord.own().epoch() {
                            if let Err(e) = l.coord.remember_own(r.clone()) {
                                self.shared.metrics.records_rejected.inc(e.cause());
                                warn!(region = %self.shared.region, error = %e, "own ended record rejected");
                            }
                        }
                    }
                    self.own_seen = Some(r)
                }
                Fetched::Record(r) => {
                    let j = r.region().index();
                    if let Role::Leader(l) = &mut self.role {
                        if let Err(e) = l.coord.observe(r.clone()) {
                            self.shared.metrics.records_rejected.inc(e.cause());
                            let peer = self.d.region_name(r.region());
                            warn!(region = %self.shared.region, peer, error = %e, "peer record rejected");
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
                    // A peer the item does not name is left out of the line, not written empty.
                    let peer = region.as_deref().filter(|p| !p.is_empty());
                    warn!(region = %self.shared.region, peer, %reason, "item rejected");
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
                match own.and_then(|o| o.limits().get(i)) {
                    Some(l) => shareplane_core::published_demand(l.demand(), m, l.rate()),
                    None => m,
                }
            })
            .collect()
    }

    async fn rebalance(&mut self, now: u64) {
        let started = crate::clock::monotonic_now();
        self.rebalance_untimed(now).await;
        (self.shared.metrics.rebalance_duration).observe(crate::clock::since(started));
    }

    async fn rebalance_untimed(&mut self, now: u64) {
        if !self.resume_if_stalled(now).await {
            self.update_view();
            return;
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
        let Some((decision, peers_before)) = self.decide(now, &demand, &health) else {
            return;
        };
        let v = decision.record.version();
        let (d, region) = (self.d.clone(), self.shared.region.clone());
        if let Some(low) = lowered(&self.shared.rules(), &decision.rules) {
            self.shared.publish(RuleSet::build(
                &d,
                &self.shared.templates(),
                &region,
                Rule::early_set_version(v),
                &low,
            ));
        }
        let Role::Leader(leader) = &self.role else {
            return;
        };
        let token = leader.token;
        match self
            .call("put", self.store.put(&decision.record, token))
            .await
        {
            Ok(()) => self.on_written(&decision, &peers_before, now),
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

    /// A leader whose last write is too old to prove it still holds its room restarts from its
    /// durable record first ([`Daemon::last_write_too_old`]). False when that record could not
    /// be read: this rebalance does nothing.
    async fn resume_if_stalled(&mut self, now: u64) -> bool {
        let Some(age_ms) = self.last_write_too_old(now) else {
            return true;
        };
        let Some(resumed) = self.resume_from_durable(now).await else {
            return false;
        };
        let epoch = resumed.coord.own().epoch();
        if let Role::Leader(l) = &mut self.role {
            l.resume(resumed);
        }
        warn!(region = %self.shared.region, age_ms, epoch,
              "the last own write was too old to prove this Region still holds its room; restarted from the durable record");
        true
    }

    /// The leader's rebalance by the core, with what the daemon keeps of its alarms; `None` for
    /// a follower. Also returns the peers as the coordinator saw them before it.
    fn decide(
        &mut self,
        now: u64,
        demand: &[Room],
        health: &PerRegion<Health>,
    ) -> Option<(Decision, Vec<PeerView>)> {
        let Role::Leader(leader) = &mut self.role else {
            return None;
        };
        let peers_before = leader.coord.peers();
        let mut decision = leader.coord.rebalance(&Inputs {
            now_ms: now,
            demand,
            health,
            explain: false,
        });
        // What limits this Region runs, for the peers' mismatch check (no decision reads it).
        decision.record.stamp_limits_digest(self.digest);
        self.shared.metrics.rebalances.inc();
        self.alarms = alarm_names(&decision.alarms, &self.d);
        for (li, step) in &decision.alarms.not_conserved {
            let limit = self.d.limits.get(*li).map_or("?", |l| l.id.as_str());
            error!(region = %self.shared.region, limit, step,
                   "a step of the protocol core changed the room it only moves (a bug in shareplane: please report it with /v1/state and /v1/events); the decision is written as computed");
        }
        let a = &decision.alarms;
        count_in_a_row(&mut leader.waiting_for_record, &a.waiting_for_record);
        count_in_a_row(&mut leader.raise_waiting, &a.raise_waits_for);
        count_in_a_row(&mut leader.reclaim_waiting, &a.reclaim_waiting);
        if a.stale_view {
            self.shared.metrics.stale_rebalances.inc();
        }
        Some((decision, peers_before))
    }

    /// A decision was durably written: commit it, tell the operator what changed, publish its
    /// rule set and renew the gateways' lease on it.
    fn on_written(&mut self, decision: &Decision, peers_before: &[PeerView], now: u64) {
        let (d, region) = (self.d.clone(), self.shared.region.clone());
        let v = decision.record.version();
        if let Role::Leader(l) = &mut self.role {
            let decided = decision_events(&d, l.coord.own(), decision, self.fenced);
            l.coord.commit(decision);
            l.unwritten_epoch = false;
            // A peer's change of state first: it is why a reclaim happened.
            let mut events = peer_events(&d, peers_before, &l.coord.peers());
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
        // The record just written is the own record as the store now holds it: this replica
        // does not hold the one read before this rebalance (a whole record's entries, 30 MB at
        // 100,000 limits) for another period.
        self.own_seen = Some(Arc::new(decision.record.clone()));
        self.fenced = decision.alarms.fenced;
        self.stalled = false;
        self.shared.metrics.writes.inc();
        self.shared.publish(RuleSet::build(
            &d,
            &self.shared.templates(),
            &region,
            Rule::set_version(v),
            &decision.rules,
        ));
        self.shared
            .renew_lease(v, decision.record.written_at_ms(), now);
        self.store_works();
        debug!(region = %region, version = v, "record written");
    }
}
