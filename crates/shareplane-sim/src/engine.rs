//! The simulation itself: one [`Coordinator`] per Region driven over virtual time.
//!
//! Each tick `t` (in this order): the events at `t` take effect (file order); the Regions whose
//! phase falls on `t` rebalance in file order (each first observes the records that became visible
//! in its replica, then rebalances with `explain`, commits, and writes its record, visible to the
//! others at `t + visibility`); then the fluid buckets run for `[t, t + tick)` with the shares in
//! force; then conservation is audited. Nothing here reads a clock or draws a random number.

use crate::scenario::{Action, Scenario};
use shareplane_core::{
    audit, Audit, Coordinator, Delta, Deployment, Health, Inputs, LimitOutcome, PeerState,
    PerRegion, RegionId, RegionRecord, Room, Truth,
};
use shareplane_table::Table;
use std::sync::Arc;

/// Why a run could not be carried out (an internal failure, exit 1).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("the core refused the deployment built from the scenario: {0}")]
    Deployment(String),
    #[error("the scenario is inconsistent: {0}")]
    Scenario(String),
}

/// The period of the health check's data a daemon reads (the Minimum of CloudWatch's
/// `HealthCheckStatus` over one-minute periods).
pub const HEALTH_PERIOD_MS: u64 = 60_000;

/// One Region's values in force during a tick. Rates in milli-requests per second, amounts of
/// requests in micro-requests.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RegionRow {
    /// The share the Region enforces (0 while lost).
    pub share: Room,
    pub pool: Room,
    pub target: Room,
    /// Requests received per second (0 while lost).
    pub received: Room,
    /// Requests admitted during the tick, in micro-requests.
    pub admitted_micro: u64,
    /// Tokens left at the end of the tick, in micro-requests.
    pub tokens_micro: u64,
    pub alive: bool,
    pub epoch: u64,
    /// The limit's rate at the version the Region's newest record holds (a lost Region's, or
    /// a dead daemon's, last record: its room, enforced or an estate, is of that version).
    pub rate: Room,
    /// The debt of a lowered limit that the Region's newest record still owes: room others hold
    /// above the newer rates until it is repaid.
    pub debt: Room,
}

/// Everything about one tick.
pub struct Row<'a> {
    pub tick: i64,
    /// Σ shares of the Regions that are not lost.
    pub sum_shares: Room,
    pub admitted_micro: u64,
    pub regions: &'a [RegionRow],
    /// Exact conservation held by the physical audit (`shareplane_core::audit`).
    pub conserved: bool,
    /// The physical audit in force (room above the limit shows in `audit.over`).
    pub audit: Audit,
    /// A Region that is alive is reported unhealthy, or some reader has yet to read such a
    /// verdict that flipped back.
    pub false_verdict: bool,
    /// Some Region is lost or cut off, or a verdict says unhealthy.
    pub faulted: bool,
}

/// One rebalance, as the Region computed it.
#[derive(Clone, Debug)]
pub struct RebalanceLog {
    pub tick: i64,
    pub region: usize,
    pub epoch: u64,
    pub version: u64,
    pub outcome: LimitOutcome,
    pub reclaimed_from: Vec<RegionId>,
    /// Peers this Region counts as silent (not reclaimed) after the rebalance.
    pub silent: Vec<RegionId>,
}

#[derive(Clone, Debug)]
pub struct EventLog {
    pub tick: i64,
    pub label: String,
}

#[derive(Clone, Copy, Debug)]
pub struct Final {
    pub share: Room,
    pub pool: Room,
    pub target: Room,
    pub alive: bool,
    pub epoch: u64,
}

/// What a run leaves behind besides the per-tick rows.
pub struct Outcome {
    pub rebalances: Vec<RebalanceLog>,
    pub events: Vec<EventLog>,
    pub finals: Vec<Final>,
    /// Peer records a coordinator refused (always a bug: every simulated record is honest).
    pub rejected_records: u64,
    /// Steps of the core that changed the room they only move (always a bug:
    /// `shareplane_core::Alarms::not_conserved`), each as "at T s Region R limit L: step".
    pub not_conserved: Vec<String>,
    pub conservation_violations: u64,
    /// The largest room above the limit the audit counted at any tick (taken twice).
    pub max_over: Delta,
    /// The audit at the end: room outside the running Regions' own hands is in
    /// `end.outside_live()`, the part nobody can take any more in `end.between_ended`.
    pub end: Audit,
}

struct Reg {
    id: RegionId,
    /// The deployment this Region's daemon runs: the limit at the version it has been given.
    d: Arc<Deployment>,
    coord: Option<Coordinator>,
    /// The coordinator's own record when the Region was lost (it may be of an unwritten epoch).
    lost_own: Option<RegionRecord>,
    /// The daemon died while the Region's gateways live on (`kill_daemon`): they enforce the
    /// last written record's shares until `gateways_until`, then fence.
    daemon_dead: bool,
    gateways_until: i64,
    /// The daemon started again and resumed its epoch, and has not written yet: its gateways hold
    /// the last written record's shares under that record's lease until `gateways_until`, as a
    /// daemon's gateways do (a lease is renewed only by a durable write), then fence. The first
    /// rebalance may start a new epoch instead (`Coordinator::restart`).
    resumed_unwritten: bool,
    /// When the last record was written (the lease of the rules pushed after it counts from it).
    last_write_tick: i64,
    last_written: Arc<RegionRecord>,
    /// Every record written, in (epoch, version) order.
    history: Vec<Arc<RegionRecord>>,
    demand: Room,
    window: Vec<u64>,
    window_pos: usize,
    window_sum: u128,
    tokens: u128,
    offset: i64,
    visibility: i64,
}

impl Reg {
    /// The daemon starts again at `tick` as the daemon does: from its durable record, the last one
    /// it wrote (a new epoch it began but never wrote is gone with the process; the model
    /// checker's restart reads its history alike), down since that write. Whether it resumed is
    /// whether it kept that record's epoch (`resumed_unwritten`).
    fn restart_from_last_write(&mut self, tick: i64, tick_ms: u64) {
        let down_ms = ((tick - self.last_write_tick).max(0) as u64) * tick_ms;
        let last = (*self.last_written).clone();
        let c = Coordinator::restart(self.d.clone(), self.id, Some(last), down_ms);
        self.resumed_unwritten = c.own().epoch() == self.last_written.epoch();
        self.coord = Some(c);
    }

    /// The daemon runs.
    fn alive(&self) -> bool {
        self.coord.is_some()
    }

    /// The Region is not lost: its gateways admit (or refuse, once fenced).
    fn gateways_up(&self) -> bool {
        self.coord.is_some() || self.daemon_dead
    }

    /// The record whose shares the gateways enforce at `tick`, if any: the daemon's committed
    /// record, or after the daemon died its last written one until the lease runs out.
    fn enforced(&self, tick: i64) -> Option<&RegionRecord> {
        match &self.coord {
            Some(_) if self.resumed_unwritten => {
                (tick < self.gateways_until).then_some(&*self.last_written)
            }
            Some(c) => Some(c.own()),
            None if self.daemon_dead && tick < self.gateways_until => Some(&self.last_written),
            None => None,
        }
    }
}

/// How many whole ticks the gateways of a dead daemon keep enforcing its last rules (the lease
/// of `shareplane_core::lease_bound`, as a run counts it), or `None` where the scenario's
/// deployment admits no lease.
pub fn lease_ticks(sc: &Scenario) -> Option<i64> {
    let d = deployment(sc).ok()?;
    let b = shareplane_core::lease_bound(&d).ok()?;
    Some((b.lease_ms / sc.tick_ms) as i64)
}

/// The Deployment the core sees for a scenario ([`Scenario::deployment`]).
pub fn deployment(sc: &Scenario) -> Result<Deployment, SimError> {
    sc.deployment().map_err(SimError::Deployment)
}

/// Runs a scenario, handing every tick's row to `sink`.
pub fn run(sc: &Scenario, sink: &mut dyn FnMut(&Row<'_>)) -> Result<Outcome, SimError> {
    let mut sim = Sim::new(sc)?;
    let mut rows = vec![RegionRow::default(); sc.regions.len()];
    for tick in sc.start_tick..sc.end_tick {
        sim.apply_events(tick)?;
        sim.rebalances(tick);
        let (sum, admitted) = sim.flow(tick, &mut rows);
        if sim.dirty {
            sim.last_audit = sim.audit(tick);
            sim.conserved = sim.last_audit.holds();
            sim.max_over = sim.max_over.max(sim.last_audit.over);
            sim.dirty = false;
        }
        if !sim.conserved {
            sim.violations += 1;
        }
        // The health check probes the daemon: "unhealthy" is false only while the daemon runs. A
        // verdict is read as it was at its worst since each reader's last read (the Minimum over
        // CloudWatch's period), so one that flipped back at once is still read, and still false,
        // until every reader has read past it.
        let read_unhealthy =
            |i: usize| sim.health.0[i] == Health::Unhealthy || sim.unhealthy_pending(i);
        let false_verdict = (0..rows.len()).any(|i| sim.regs[i].alive() && read_unhealthy(i));
        let faulted = sim.table.any_cut()
            || rows.iter().any(|r| !r.alive)
            || (0..rows.len()).any(read_unhealthy);
        sink(&Row {
            tick,
            sum_shares: sum,
            admitted_micro: admitted,
            regions: &rows,
            conserved: sim.conserved,
            audit: sim.last_audit,
            false_verdict,
            faulted,
        });
    }
    Ok(sim.finish())
}

struct Sim<'a> {
    sc: &'a Scenario,
    d: Arc<Deployment>,
    regs: Vec<Reg>,
    table: Table,
    health: PerRegion<Health>,
    /// Per reading Region, the Regions whose verdict read unhealthy at some tick since its last
    /// rebalance (a bit each). A daemon reads the Minimum of `HealthCheckStatus` over one-minute
    /// periods, so a verdict that was unhealthy between two of its reads still reads unhealthy at
    /// the next one; no verdict can flip and flip back unseen between two rebalances. A daemon
    /// that starts afresh keeps only those of the last [`HEALTH_PERIOD_MS`].
    unhealthy_since_read: Vec<u64>,
    /// Per Region, the last tick at which its verdict read unhealthy (`i64::MAX` while it does,
    /// `i64::MIN` if it never did): a daemon that starts afresh reads only the recent periods.
    unhealthy_until: Vec<i64>,
    last_audit: Audit,
    max_over: Delta,
    /// The gateways' lease in ticks (`shareplane_core::lease_bound`), or why there is none.
    lease_ticks: Option<i64>,
    lease_problem: String,
    next_event: usize,
    /// The limit's newest rate and version among the changes applied so far.
    limit_rate: Room,
    limit_version: u64,
    dirty: bool,
    conserved: bool,
    violations: u64,
    rejected: u64,
    not_conserved: Vec<String>,
    rebalances: Vec<RebalanceLog>,
    events: Vec<EventLog>,
}

impl Reg {
    /// Region `id` at the scenario's start: its settled record written, its demand window full
    /// of its first demand, its bucket full where demand is below the share (empty where it is at
    /// or above).
    fn settled(
        sc: &Scenario,
        d: &Arc<Deployment>,
        id: RegionId,
        spec: &crate::scenario::RegionSpec,
        rec: &Arc<RegionRecord>,
    ) -> Reg {
        let share = rec.limits().first().map_or(Room::ZERO, |l| l.share());
        let tokens = if spec.demand < share {
            share.milli() as u128 * sc.burst_ms as u128
        } else {
            0
        };
        Reg {
            id,
            d: d.clone(),
            coord: Some(Coordinator::new(d.clone(), id, (**rec).clone())),
            lost_own: None,
            daemon_dead: false,
            gateways_until: i64::MIN,
            resumed_unwritten: false,
            last_write_tick: sc.start_tick,
            last_written: rec.clone(),
            history: vec![rec.clone()],
            demand: spec.demand,
            window: vec![spec.demand.milli(); sc.window_ticks as usize],
            window_pos: 0,
            window_sum: spec.demand.milli() as u128 * sc.window_ticks as u128,
            tokens,
            offset: spec.offset_tick,
            visibility: spec.visibility_ticks as i64,
        }
    }
}

impl<'a> Sim<'a> {
    fn new(sc: &'a Scenario) -> Result<Sim<'a>, SimError> {
        sc.validate()
            .map_err(|e| SimError::Scenario(e.to_string()))?;
        let d = Arc::new(deployment(sc)?);
        let limit_version = d.limits[0].version;
        let lease = shareplane_core::lease_bound(&d);
        let n = sc.regions.len();
        let demands: Vec<Room> = sc.regions.iter().map(|r| r.demand).collect();
        let mut table = Table::new(
            sc.regions
                .iter()
                .map(|r| r.visibility_ticks as i64)
                .collect(),
        );
        let mut records = Vec::with_capacity(n);
        for i in 0..n {
            let id =
                RegionId::new(i).ok_or_else(|| SimError::Scenario("too many Regions".into()))?;
            // The scenario starts settled: every Region at its target, as the core has it.
            let rec = Arc::new(RegionRecord::settled(&d, id, &demands));
            table.write(i, rec.clone(), sc.start_tick);
            records.push((id, rec));
        }
        let regs = (records.iter().enumerate())
            .map(|(i, (id, rec))| Reg::settled(sc, &d, *id, &sc.regions[i], rec))
            .collect();
        let mut health = PerRegion::<Health>::default();
        for h in health.0.iter_mut().take(n) {
            *h = Health::Healthy;
        }
        let mut sim = Sim {
            sc,
            d,
            regs,
            table,
            health,
            unhealthy_since_read: vec![0; n],
            unhealthy_until: vec![i64::MIN; n],
            last_audit: Audit::default(),
            max_over: Delta::ZERO,
            lease_ticks: lease
                .as_ref()
                .ok()
                .map(|b| (b.lease_ms / sc.tick_ms) as i64),
            lease_problem: lease.err().map(|e| e.to_string()).unwrap_or_default(),
            next_event: 0,
            limit_rate: sc.limit,
            limit_version,
            dirty: true,
            conserved: true,
            violations: 0,
            rejected: 0,
            not_conserved: Vec::new(),
            rebalances: Vec::new(),
            events: Vec::new(),
        };
        // The initial records are visible to all: hand them over now.
        for r in 0..n {
            sim.observe_visible(r, sc.start_tick);
        }
        Ok(sim)
    }

    fn observe_visible(&mut self, r: usize, tick: i64) {
        let n = self.regs.len();
        for w in (0..n).filter(|&w| w != r) {
            let Some(seen) = self.table.newly_visible(w, r, tick) else {
                continue;
            };
            let Some(c) = self.regs[r].coord.as_mut() else {
                continue;
            };
            for rec in seen
                .previous
                .into_iter()
                .chain(std::iter::once(seen.latest))
            {
                if c.observe(rec).is_err() {
                    self.rejected += 1;
                }
            }
        }
    }

    fn name(&self, r: usize) -> &str {
        &self.sc.regions[r].name
    }

    fn apply_events(&mut self, tick: i64) -> Result<(), SimError> {
        while let Some(e) = self.sc.events.get(self.next_event) {
            if e.at_tick > tick {
                break;
            }
            self.next_event += 1;
            let label = self.apply(&e.action, tick)?;
            if tick >= 0 {
                self.events.push(EventLog { tick, label });
            }
        }
        Ok(())
    }

    fn apply(&mut self, action: &Action, tick: i64) -> Result<String, SimError> {
        Ok(match action {
            Action::Demand(rates) => {
                let mut parts = Vec::new();
                for &(r, rate) in rates {
                    self.regs[r].demand = rate;
                    parts.push(format!("{} {}", self.name(r), rate.as_rps().round()));
                }
                format!("demand {}", parts.join(", "))
            }
            Action::Lose(r) => self.lose(*r)?,
            Action::Restore(r) => self.restore(*r, tick)?,
            Action::KillDaemon(r) => self.kill_daemon(*r)?,
            Action::RestartDaemon(r) => self.restart_daemon(*r, tick)?,
            Action::Restart(r) => {
                if self.regs[*r].coord.is_none() {
                    return Err(self.out_of_order("restart", *r));
                }
                let reg = &mut self.regs[*r];
                reg.restart_from_last_write(tick, self.sc.tick_ms);
                reg.gateways_until =
                    (reg.last_write_tick).saturating_add(self.lease_ticks.unwrap_or(i64::MAX));
                self.recall_own_ended(*r);
                self.dirty = true;
                format!("{} restarted", self.name(*r))
            }
            Action::Limit(rate, mask) => self.change_limit(*rate, *mask)?,
            Action::Cut(_) | Action::OneWayCut(..) | Action::Heal => self.apply_cut(action, tick),
            Action::Unknown(r) => {
                self.verdict_cleared(*r, tick);
                self.health.0[*r] = Health::Unknown;
                format!("{} health unknown", self.name(*r))
            }
            Action::Unhealthy(r) => {
                self.health.0[*r] = Health::Unhealthy;
                self.unhealthy_until[*r] = i64::MAX;
                for seen in self.unhealthy_since_read.iter_mut() {
                    *seen |= 1 << *r;
                }
                format!("{} unhealthy", self.name(*r))
            }
            Action::Healthy(r) => {
                self.verdict_cleared(*r, tick);
                self.health.0[*r] = Health::Healthy;
                format!("{} healthy", self.name(*r))
            }
        })
    }

    /// A lifecycle event that does not fit the Region's state (a restore of a Region that is not
    /// lost, …): the scenario's error.
    fn out_of_order(&self, what: &str, r: usize) -> SimError {
        SimError::Scenario(format!("{what} {} out of order", self.name(r)))
    }

    fn lose(&mut self, r: usize) -> Result<String, SimError> {
        let reg = &mut self.regs[r];
        let own = match reg.coord.take() {
            Some(c) => c.own().clone(),
            None if reg.daemon_dead => (*reg.last_written).clone(),
            None => return Err(self.out_of_order("lose", r)),
        };
        let reg = &mut self.regs[r];
        reg.daemon_dead = false;
        reg.resumed_unwritten = false;
        reg.lost_own = Some(own);
        reg.tokens = 0;
        self.dirty = true;
        Ok(format!("{} lost", self.name(r)))
    }

    fn restore(&mut self, r: usize, tick: i64) -> Result<String, SimError> {
        if self.regs[r].lost_own.take().is_none() {
            return Err(self.out_of_order("restore", r));
        }
        let reg = &mut self.regs[r];
        let last = (*reg.last_written).clone();
        reg.coord = Some(Coordinator::restart(
            reg.d.clone(),
            reg.id,
            Some(last),
            u64::MAX,
        ));
        reg.tokens = 0;
        self.recall_own_ended(r);
        self.fresh_reader(r, tick);
        self.dirty = true;
        Ok(format!("{} restored", self.name(r)))
    }

    /// A daemon that starts again reads everything anew, its own ended epochs' last records
    /// included (as a store's `read_all` returns them; `Coordinator::remember_own`).
    fn recall_own_ended(&mut self, r: usize) {
        self.table.forget_observed(r);
        let (Some(own), Some(c)) = (self.table.own(r), self.regs[r].coord.as_mut()) else {
            return;
        };
        for rec in own.previous {
            if c.remember_own(rec).is_err() {
                self.rejected += 1;
            }
        }
    }

    fn kill_daemon(&mut self, r: usize) -> Result<String, SimError> {
        let lease = self.lease_ticks.ok_or_else(|| {
            SimError::Scenario(format!(
                "kill_daemon needs gateways that can hold a lease: {}",
                self.lease_problem
            ))
        })?;
        if self.regs[r].coord.take().is_none() {
            return Err(self.out_of_order("kill_daemon", r));
        }
        let reg = &mut self.regs[r];
        reg.daemon_dead = true;
        reg.resumed_unwritten = false;
        reg.gateways_until = reg.last_write_tick + lease;
        self.dirty = true;
        Ok(format!("{} daemon killed", self.name(r)))
    }

    fn restart_daemon(&mut self, r: usize, tick: i64) -> Result<String, SimError> {
        if !self.regs[r].daemon_dead {
            return Err(self.out_of_order("restart_daemon", r));
        }
        let reg = &mut self.regs[r];
        reg.restart_from_last_write(tick, self.sc.tick_ms);
        reg.daemon_dead = false;
        self.recall_own_ended(r);
        self.fresh_reader(r, tick);
        self.dirty = true;
        Ok(format!("{} daemon restarted", self.name(r)))
    }

    /// The limit's rate becomes `rate` in the Regions of `mask` (a new version if it changed).
    fn change_limit(&mut self, rate: Room, mask: u8) -> Result<String, SimError> {
        if rate != self.limit_rate {
            self.limit_rate = rate;
            self.limit_version += 1;
        }
        let mut next = (*self.d).clone();
        next.limits[0].rate = rate;
        next.limits[0].version = self.limit_version;
        let next = Arc::new(
            Deployment::try_new(next)
                .map_err(|e| SimError::Scenario(format!("limit change: {e:?}")))?,
        );
        let mut names = Vec::new();
        for r in (0..self.regs.len()).filter(|r| mask >> r & 1 == 1) {
            let reg = &mut self.regs[r];
            if let Some(c) = reg.coord.as_mut() {
                c.set_limits(next.limits.clone())
                    .map_err(|e| SimError::Scenario(format!("limit change: {e:?}")))?;
            }
            reg.d = next.clone();
            names.push(self.sc.regions[r].name.as_str());
        }
        self.dirty = true;
        Ok(format!(
            "limit {} (version {}) in {}",
            rate.as_rps().round(),
            self.limit_version,
            names.join(", ")
        ))
    }

    /// A cut, a one-way cut or the heal of every cut.
    fn apply_cut(&mut self, action: &Action, tick: i64) -> String {
        let names = |mask: u8| {
            (0..self.regs.len())
                .filter(|r| mask >> r & 1 == 1)
                .map(|r| self.name(r).to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        match action {
            Action::Cut(mask) => {
                let label = format!("cut {}", names(*mask));
                self.table.cut(*mask, tick);
                label
            }
            Action::OneWayCut(from, to) => {
                let label = format!("cut {} -> {}", names(*from), names(*to));
                self.table.cut_one_way(*from, *to, tick);
                label
            }
            _ => {
                self.table.heal(tick);
                "heal".into()
            }
        }
    }

    fn rebalances(&mut self, tick: i64) {
        let period = self.sc.period_ticks as i64;
        for r in 0..self.regs.len() {
            if !self.regs[r].alive() || (tick - self.regs[r].offset).rem_euclid(period) != 0 {
                continue;
            }
            self.observe_visible(r, tick);
            let mut health = self.health;
            let seen = std::mem::take(&mut self.unhealthy_since_read[r]);
            for (k, h) in health.0.iter_mut().enumerate().take(self.regs.len()) {
                if seen >> k & 1 == 1 {
                    *h = Health::Unhealthy;
                }
            }
            let reg = &mut self.regs[r];
            let demand = Room::from_milli((reg.window_sum / self.sc.window_ticks as u128) as u64);
            let Some(coord) = reg.coord.as_mut() else {
                continue;
            };
            let now_ms = ((tick - self.sc.start_tick) as u64).saturating_mul(self.sc.tick_ms);
            let inputs = Inputs {
                now_ms,
                demand: &[demand],
                health: &health,
                explain: true,
            };
            let decision = coord.rebalance(&inputs);
            for (li, step) in &decision.alarms.not_conserved {
                let at = self.sc.seconds(tick);
                let name = &self.sc.regions[r].name;
                self.not_conserved
                    .push(format!("at {at} s Region {name} limit {li}: {step}"));
            }
            coord.commit(&decision);
            let outcome = decision.outcomes.first().copied().unwrap_or_default();
            let reclaimed_from = decision.alarms.reclaimed.clone();
            let silent = if tick >= 0 {
                coord
                    .peers()
                    .iter()
                    .filter(|p| p.state == PeerState::Silent)
                    .map(|p| p.region)
                    .collect()
            } else {
                Vec::new()
            };
            let rec = Arc::new(decision.record);
            reg.history.push(rec.clone());
            reg.last_written = rec.clone();
            reg.last_write_tick = tick;
            reg.resumed_unwritten = false;
            self.table.write(r, rec.clone(), tick + reg.visibility);
            self.dirty = true;
            if tick >= 0 {
                self.rebalances.push(RebalanceLog {
                    tick,
                    region: r,
                    epoch: rec.epoch(),
                    version: rec.version(),
                    outcome,
                    reclaimed_from,
                    silent,
                });
            }
        }
    }

    /// Region `r`'s verdict stops reading unhealthy at `tick` (if it did).
    fn verdict_cleared(&mut self, r: usize, tick: i64) {
        if self.unhealthy_until[r] == i64::MAX {
            self.unhealthy_until[r] = tick;
        }
    }

    /// Region `r`'s daemon starts afresh at `tick` (restored, or restarted after it died): its
    /// first read covers the health check's recent period, [`HEALTH_PERIOD_MS`], not the whole
    /// time it was down, so it keeps only the verdicts that read unhealthy within that period.
    fn fresh_reader(&mut self, r: usize, tick: i64) {
        let since = tick - (HEALTH_PERIOD_MS / self.sc.tick_ms) as i64;
        let recent = (self.unhealthy_until.iter().enumerate())
            .filter(|&(_, &until)| until >= since)
            .fold(0u64, |m, (k, _)| m | 1 << k);
        self.unhealthy_since_read[r] &= recent;
    }

    /// Whether some reader has yet to read the unhealthy verdict Region `i` had since its last read.
    fn unhealthy_pending(&self, i: usize) -> bool {
        (self.unhealthy_since_read.iter().enumerate())
            .any(|(r, seen)| r != i && self.regs[r].alive() && seen >> i & 1 == 1)
    }

    /// Runs every bucket for one tick; returns Σ shares of the Regions not lost and Σ admitted.
    fn flow(&mut self, tick: i64, rows: &mut [RegionRow]) -> (Room, u64) {
        let dirty = &mut self.dirty;
        let tick_ms = self.sc.tick_ms as u128;
        let burst_ms = self.sc.burst_ms as u128;
        let mut sum = Room::ZERO;
        let mut admitted_total: u64 = 0;
        for (reg, row) in self.regs.iter_mut().zip(rows.iter_mut()) {
            let alive = reg.gateways_up();
            let rec: &RegionRecord = match &reg.coord {
                Some(c) => c.own(),
                None => &reg.last_written,
            };
            let l = rec.limits().first().copied().unwrap_or_default();
            let share = match reg.enforced(tick) {
                Some(e) => e.limits().first().map_or(Room::ZERO, |l| l.share()),
                None => Room::ZERO,
            };
            if reg.daemon_dead && tick == reg.gateways_until {
                // The lease ran out: the gateways fence and the room is the estate's alone.
                *dirty = true;
            }
            let received = if alive { reg.demand } else { Room::ZERO };
            let cap = share.milli() as u128 * burst_ms;
            let tokens = reg.tokens.min(cap);
            let available = tokens + share.milli() as u128 * tick_ms;
            let admitted = (received.milli() as u128 * tick_ms).min(available);
            reg.tokens = cap.min(available - admitted);
            let old = reg.window[reg.window_pos];
            reg.window[reg.window_pos] = received.milli();
            reg.window_pos = (reg.window_pos + 1) % reg.window.len();
            reg.window_sum = reg.window_sum + received.milli() as u128 - old as u128;
            sum += share;
            let admitted = u64::try_from(admitted).unwrap_or(u64::MAX);
            admitted_total = admitted_total.saturating_add(admitted);
            *row = RegionRow {
                share,
                pool: l.pool(),
                target: l.target(),
                received,
                admitted_micro: admitted,
                tokens_micro: u64::try_from(reg.tokens).unwrap_or(u64::MAX),
                alive,
                epoch: rec.epoch(),
                rate: l.rate(),
                debt: l.debt(),
            };
        }
        (sum, admitted_total)
    }

    /// The physical audit of the one limit over everything written and the running Regions.
    /// Physical truth: a Region holds room while its gateways enforce it (its daemon runs, or
    /// died and the lease of its last rules has not run out).
    fn audit(&self, tick: i64) -> Audit {
        let truth: Vec<Truth<'_>> = self
            .regs
            .iter()
            .map(|reg| Truth {
                written: &reg.history,
                running: reg.enforced(tick),
            })
            .collect();
        audit(&self.d, 0, &truth)
    }

    fn finish(self) -> Outcome {
        let end = self.audit(self.sc.end_tick);
        let finals = self
            .regs
            .iter()
            .map(|reg| {
                let rec: &RegionRecord = match &reg.coord {
                    Some(c) => c.own(),
                    None => &reg.last_written,
                };
                let l = rec.limits().first().copied().unwrap_or_default();
                Final {
                    share: l.share(),
                    pool: l.pool(),
                    target: l.target(),
                    alive: reg.gateways_up(),
                    epoch: rec.epoch(),
                }
            })
            .collect();
        Outcome {
            rebalances: self.rebalances,
            events: self.events,
            finals,
            rejected_records: self.rejected,
            not_conserved: self.not_conserved,
            conservation_violations: self.violations,
            max_over: self.max_over,
            end,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::runnable::RECORD_BYTES;
    use shareplane_core::{LimitRecord, RegionRecord};

    /// The scenario check's estimate per record (`runnable::RECORD_BYTES`) covers what the simulator keeps for it: the record and its
    /// one limit (behind an `Arc`), a table entry and a rebalance log line, and change points.
    #[test]
    fn the_record_estimate_covers_what_a_record_costs() {
        let record = std::mem::size_of::<RegionRecord>() + std::mem::size_of::<LimitRecord>();
        let entry = 4 * std::mem::size_of::<usize>() + 16 + std::mem::size_of::<Vec<u8>>();
        let log = std::mem::size_of::<RebalanceLog>();
        let changes = 4 * 16 * (shareplane_core::MAX_REGIONS + 1);
        let cost = (2 * record + entry + log + changes) as u64;
        assert!(cost <= RECORD_BYTES, "{cost} bytes a record");
    }
}
