//! The explored world: every Region's coordinator, the records on the wire, cuts, losses,
//! health, and every action that moves it.

use crate::action::{rid, Action};
use crate::settings::Settings;
use shareplane_core::{
    Coordinator, Deployment, Design, Fence, Health, Inputs, LimitKind, LimitSpec, PerRegion,
    RegionId, RegionRecord, Room,
};
use shareplane_judge::{audit, Audit, Truth};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A Region's daemon, apart from a loss (the Region's gateways run in every state but a loss).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Daemon {
    Running,
    /// Dead while its gateways live on; the clock says what the time since its last write allows.
    Dead(Clock),
    /// Started again and not written since: its gateways hold the last written record while the
    /// lease lasts (a lease is renewed only by a write). The first write lands within the
    /// resume window if the restart came within it.
    Unwritten(Clock),
}

/// Where the time since a daemon's last write stands, as an untimed model states it.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Clock {
    /// Within the gateways' lease (and so within the resume window).
    Lease,
    /// The lease ran out; within the resume window.
    Window,
    /// Past the resume window: a restart starts a new epoch.
    Late,
}

#[derive(Clone)]
pub(crate) struct World {
    pub(crate) coords: Vec<Coordinator>,
    /// Records written and not yet visible, per `[from][to]`, oldest first.
    pub(crate) wire: Vec<Vec<Vec<Arc<RegionRecord>>>>,
    pub(crate) lost: Vec<bool>,
    pub(crate) cut: Vec<bool>,
    /// One-way cuts: `blocked[from][to]`, records written by `from` do not reach `to`.
    pub(crate) blocked: Vec<Vec<bool>>,
    pub(crate) unhealthy: Vec<bool>,
    pub(crate) daemon: Vec<Daemon>,
    /// Every record each Region wrote, in order: what the audit judges by, and what the store
    /// keeps of ended epochs (their last records).
    pub(crate) history: Vec<Vec<Arc<RegionRecord>>>,
    pub(crate) faults: u8,
    pub(crate) false_verdict: bool,
    /// The limit version each Region's daemon runs (1-based).
    pub(crate) config: Vec<usize>,
    pub(crate) trace: Vec<String>,
}

impl World {
    pub(crate) fn key(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.coords.hash(&mut h);
        self.wire.hash(&mut h);
        self.lost.hash(&mut h);
        self.cut.hash(&mut h);
        self.blocked.hash(&mut h);
        self.unhealthy.hash(&mut h);
        self.daemon.hash(&mut h);
        self.faults.hash(&mut h);
        self.false_verdict.hash(&mut h);
        self.config.hash(&mut h);
        // The history matters to the audit only through the records a mark can name: every
        // epoch's records, identified by their versions.
        for hist in &self.history {
            for r in hist {
                (r.epoch(), r.version()).hash(&mut h);
            }
        }
        h.finish()
    }

    /// The physical audit of the one limit.
    pub(crate) fn audit(&self, d: &Deployment) -> Audit {
        let truth: Vec<Truth<'_>> = self
            .coords
            .iter()
            .enumerate()
            .map(|(i, c)| Truth {
                written: &self.history[i],
                running: self.enforced(i, c),
            })
            .collect();
        audit(d, 0, &truth)
    }

    /// The record whose shares Region `i`'s gateways enforce (`c`: its coordinator): its
    /// daemon's committed one, or a dead or restarted daemon's last written one while the lease
    /// lasts; nothing while lost or fenced by the lease.
    pub(crate) fn enforced<'a>(&'a self, i: usize, c: &'a Coordinator) -> Option<&'a RegionRecord> {
        if self.lost[i] {
            return None;
        }
        match self.daemon[i] {
            Daemon::Running => Some(c.own()),
            Daemon::Dead(Clock::Lease) | Daemon::Unwritten(Clock::Lease) => {
                self.history[i].last().map(|r| &**r)
            }
            Daemon::Dead(_) | Daemon::Unwritten(_) => None,
        }
    }

    /// Whether the time since Region `i`'s last write is still within the resume window, up to
    /// its daemon's next write.
    fn clock_open(&self, i: usize) -> bool {
        matches!(
            self.daemon[i],
            Daemon::Dead(Clock::Lease | Clock::Window)
                | Daemon::Unwritten(Clock::Lease | Clock::Window)
        )
    }

    /// Whether Region `j` may rebalance now: no Region whose clock is open would be counted
    /// silent by it while it holds that Region's last written record or the one before (time
    /// has not passed for that: the lease, and the resume window, are shorter than
    /// `silent_after` periods after the write it saw).
    fn may_rebalance(&self, j: usize, silent_after: u32) -> bool {
        (0..self.coords.len())
            .filter(|&i| i != j && self.clock_open(i))
            .all(|i| {
                let Some(last) = self.history[i].last() else {
                    return true;
                };
                self.coords[j].peers().iter().all(|p| {
                    p.region != rid(i)
                        || p.epoch != last.epoch()
                        || p.version + 1 < last.version()
                        || p.unchanged + 1 < silent_after
                })
            })
    }

    /// The last record of every ended epoch of every Region, as the store keeps them.
    pub(crate) fn ended_records(&self) -> Vec<Arc<RegionRecord>> {
        let mut out = Vec::new();
        for hist in &self.history {
            for (k, r) in hist.iter().enumerate() {
                if hist.get(k + 1).is_some_and(|next| next.epoch() > r.epoch()) {
                    out.push(r.clone());
                }
            }
        }
        out
    }

    /// Whether records written by `a` reach `b`.
    pub(crate) fn linked(&self, a: usize, b: usize) -> bool {
        self.cut[a] == self.cut[b] && !self.blocked[a][b]
    }

    pub(crate) fn any_cut(&self) -> bool {
        self.cut.iter().any(|&c| c) || self.blocked.iter().flatten().any(|&b| b)
    }

    pub(crate) fn health(&self) -> PerRegion<Health> {
        let mut h = PerRegion::default();
        for (i, &u) in self.unhealthy.iter().enumerate() {
            if let Some(r) = RegionId::new(i) {
                h[r] = if u {
                    Health::Unhealthy
                } else {
                    Health::Healthy
                };
            }
        }
        h
    }

    pub(crate) fn note_verdicts(&mut self) {
        // A daemon that died, or started again and has not written since, is truly unhealthy.
        if (0..self.lost.len())
            .any(|i| self.unhealthy[i] && !self.lost[i] && self.daemon[i] == Daemon::Running)
        {
            self.false_verdict = true;
        }
    }
}

pub fn deployment(s: &Settings) -> Arc<Deployment> {
    let names = ["A", "B", "C", "D", "E", "F", "G", "H"];
    Arc::new(
        Deployment::try_new(Deployment {
            regions: names[..s.n].iter().map(|x| x.to_string()).collect(),
            limits: vec![LimitSpec {
                id: "l".into(),
                version: 1,
                rate: Room::rps(s.rate_rps),
                burst_ms: 2_000,
                floor: Room::rps(s.floor_rps),
                step_cap: Room::rps(s.step_rps),
                kind: LimitKind::Capacity,
                shadow: false,
            }],
            design: Design::NamedGrants,
            policy: s.policy,
            fence: Fence::OwnUnhealthy,
            silent_after: s.silent_after,
            period_ms: 5_000,
        })
        .expect("valid model deployment"),
    )
}

pub(crate) fn initial(d: &Arc<Deployment>, s: &Settings) -> World {
    let n = s.n;
    let recs: Vec<Arc<RegionRecord>> = (0..n)
        .map(|i| {
            // Written once, with the demand of the run's settings.
            let mut p = RegionRecord::genesis(d, rid(i)).into_parts();
            p.version = 1;
            p.limits[0].demand = Room::rps(s.demands_rps[i]);
            Arc::new(RegionRecord::from_parts(p))
        })
        .collect();
    let mut coords = Vec::new();
    for i in 0..n {
        let mut c = Coordinator::new(d.clone(), rid(i), (*recs[i]).clone());
        for (j, r) in recs.iter().enumerate() {
            if j != i {
                c.observe(r.clone()).expect("valid");
            }
        }
        coords.push(c);
    }
    World {
        coords,
        wire: vec![vec![Vec::new(); n]; n],
        lost: vec![false; n],
        cut: vec![false; n],
        blocked: vec![vec![false; n]; n],
        unhealthy: vec![false; n],
        daemon: vec![Daemon::Running; n],
        history: recs.iter().map(|r| vec![r.clone()]).collect(),
        faults: 0,
        false_verdict: false,
        config: vec![1; n],
        trace: Vec::new(),
    }
}

/// The root of the exploration: the initial state after the settings' prefix.
pub(crate) fn root(d: &Arc<Deployment>, s: &Settings) -> World {
    let mut w = initial(d, s);
    for a in &s.prefix {
        apply(&mut w, s, *a);
    }
    w.faults = 0;
    w
}

pub(crate) fn actions(w: &World, s: &Settings) -> Vec<Action> {
    let n = s.n;
    let mut out = Vec::new();
    let fault_left = w.faults < s.max_faults;
    let allowed = |a: Action| (s.faults)(&a);
    for i in 0..n {
        let running = !w.lost[i] && w.daemon[i] == Daemon::Running;
        if !w.lost[i]
            && !matches!(w.daemon[i], Daemon::Dead(_))
            && w.may_rebalance(i, s.silent_after)
        {
            out.push(Action::Rebalance(i));
        }
        out.extend(daemon_steps(w, i));
        for j in 0..n {
            if !w.wire[i][j].is_empty() {
                out.push(Action::Deliver(i, j));
                if w.wire[i][j].len() > 1 {
                    out.push(Action::DeliverNewest(i, j));
                }
            }
        }
        if w.lost[i] {
            out.push(Action::Restore(i));
        }
        if fault_left {
            let mut faults = Vec::new();
            if !w.lost[i] {
                faults.push(Action::Lose(i));
            }
            if running {
                faults.push(Action::Restart(i));
                faults.push(Action::Die(i));
                if resumable(w, i) {
                    faults.push(Action::Resume(i));
                }
            }
            if !w.any_cut() {
                faults.push(Action::Cut(i));
                faults.extend((0..n).filter(|&j| j != i).map(|j| Action::OneWayCut(i, j)));
            }
            // No health check calls a dead daemon unhealthy while its gateways' lease lasts
            // (docs/PROTOCOL.md, risk 5).
            let leased = matches!(
                w.daemon[i],
                Daemon::Dead(Clock::Lease) | Daemon::Unwritten(Clock::Lease)
            );
            if w.unhealthy[i] || !leased {
                faults.push(Action::Flip(i));
            }
            out.extend(faults.into_iter().filter(|&a| allowed(a)));
        }
        if w.config[i] < s.last_version() {
            out.push(Action::Adopt(i));
        }
    }
    if w.any_cut() {
        out.push(Action::Heal);
    }
    out
}

/// A dead or restarted daemon's steps of time and its restart (not faults: the death was).
fn daemon_steps(w: &World, i: usize) -> Vec<Action> {
    match w.daemon[i] {
        Daemon::Dead(c) => {
            let mut v = vec![Action::RestartDaemon(i)];
            match c {
                Clock::Lease => v.push(Action::LeaseOut(i)),
                Clock::Window => v.push(Action::WindowEnds(i)),
                Clock::Late => {}
            }
            v
        }
        // The first write after a restart within the window lands within it.
        Daemon::Unwritten(Clock::Lease) => vec![Action::LeaseOut(i)],
        Daemon::Unwritten(_) | Daemon::Running => Vec::new(),
    }
}

/// Whether Region `i` may resume: its committed record was written, and every peer has seen that
/// record and counted no silence of it since.
pub(crate) fn resumable(w: &World, i: usize) -> bool {
    let Some(last) = w.history[i].last() else {
        return false;
    };
    if (last.epoch(), last.version()) != (w.coords[i].own().epoch(), w.coords[i].own().version()) {
        return false;
    }
    w.coords.iter().enumerate().all(|(j, c)| {
        j == i
            || c.peers()
                .iter()
                .any(|p| p.region == rid(i) && p.version == last.version() && p.unchanged == 0)
    })
}

/// What a restarted daemon reads from its Region's replica: every peer's newest record it had
/// seen, plus the retained last record of each peer's previous epoch.
pub(crate) fn replica_view(w: &World, i: usize) -> Vec<Arc<RegionRecord>> {
    let mut v = Vec::new();
    for j in 0..w.coords.len() {
        if j == i {
            continue;
        }
        if let Some(r) = w.coords[i].latest(rid(j)) {
            if r.version() > 0 {
                v.push(r.clone());
            }
        }
    }
    for e in w.ended_records() {
        if e.region() != rid(i) {
            v.push(e);
        }
    }
    v
}

pub(crate) fn restart(w: &mut World, i: usize, down_ms: u64) {
    let view = replica_view(w, i);
    // A daemon starts again from its durable record: the last one it wrote, not what it held in
    // memory (a new epoch it began but never wrote is gone with the process).
    let old = match w.history[i].last() {
        Some(r) => (**r).clone(),
        None => w.coords[i].own().clone(),
    };
    let d = w.coords[i].deployment().clone();
    let mut c = Coordinator::restart(d, rid(i), Some(old.clone()), down_ms);
    for r in view {
        // A record of a Region seen before may be older than what the view holds; that is fine.
        let _ = c.observe(r);
    }
    // Its own ended epochs' last records come back from the store too (`read_all`).
    for e in w
        .ended_records()
        .into_iter()
        .filter(|e| e.region() == rid(i))
    {
        if e.epoch() < c.own().epoch() {
            let _ = c.remember_own(e);
        }
    }
    w.coords[i] = c;
}

/// Applies `a`; returns a violation found in the transition itself.
pub(crate) fn apply(w: &mut World, s: &Settings, a: Action) -> Option<String> {
    w.trace.push(format!("{a:?}"));
    let found = match a {
        Action::Rebalance(i) => rebalance(w, i),
        Action::Deliver(i, j) | Action::DeliverNewest(i, j) => {
            deliver(w, i, j, matches!(a, Action::DeliverNewest(..)))
        }
        Action::Adopt(i) => {
            w.config[i] += 1;
            let limits = s.at_version(w.coords[i].deployment(), w.config[i]);
            (w.coords[i].set_limits(limits).err())
                .map(|e| format!("limit version {} refused: {e:?}", w.config[i]))
        }
        _ => {
            fault(w, a);
            None
        }
    };
    if found.is_some() {
        return found;
    }
    w.note_verdicts();
    None
}

/// Region `i` rebalances, commits and writes its record (on the wire to every Region linked).
fn rebalance(w: &mut World, i: usize) -> Option<String> {
    let n = w.coords.len();
    let health = w.health();
    let demand = [w.coords[i].own().limits()[0].demand()];
    let before = w.coords[i].own().clone();
    let d = w.coords[i].rebalance(&Inputs {
        now_ms: 0,
        demand: &demand,
        health: &health,
        explain: false,
    });
    if let Some((li, step)) = d.alarms.not_conserved.first() {
        return Some(format!(
            "{i}'s step {step} of limit {li} changed the room it moves"
        ));
    }
    for &j in &d.alarms.reclaimed {
        if d.record.epoch() == before.epoch()
            && before.reclaims()[j].is_some()
            && before.reclaims()[j] == d.record.reclaims()[j]
        {
            return Some(format!("{i} reclaimed {j} twice under one mark"));
        }
    }
    w.coords[i].commit(&d);
    w.daemon[i] = Daemon::Running;
    let rec = Arc::new(w.coords[i].own().clone());
    w.history[i].push(rec.clone());
    for j in 0..n {
        if j != i && w.linked(i, j) {
            w.wire[i][j].push(rec.clone());
        }
    }
    None
}

/// The oldest record on the wire from `i` to `j` arrives (`newest`: the newest, the others
/// skipped).
fn deliver(w: &mut World, i: usize, j: usize, newest: bool) -> Option<String> {
    let rec = if newest {
        let last = w.wire[i][j].pop().expect("non-empty");
        w.wire[i][j].clear();
        last
    } else {
        w.wire[i][j].remove(0)
    };
    (w.coords[j].observe(rec).err()).map(|e| format!("honest record rejected: {e}"))
}

/// A fault, a restore or a heal.
fn fault(w: &mut World, a: Action) {
    let n = w.coords.len();
    match a {
        Action::Lose(i) => {
            w.lost[i] = true;
            w.daemon[i] = Daemon::Running;
            w.faults += 1;
        }
        Action::Die(_) | Action::LeaseOut(_) | Action::WindowEnds(_) | Action::RestartDaemon(_) => {
            daemon_step(w, a)
        }
        Action::Restore(i) => {
            w.lost[i] = false;
            restart(w, i, u64::MAX);
        }
        Action::Restart(i) => {
            w.faults += 1;
            restart(w, i, u64::MAX);
        }
        Action::Resume(i) => {
            w.faults += 1;
            let view = replica_view(w, i);
            let d = w.coords[i].deployment().clone();
            let mut c = Coordinator::new(d, rid(i), w.coords[i].own().clone());
            for r in view {
                let _ = c.observe(r);
            }
            w.coords[i] = c;
        }
        Action::Cut(i) => {
            w.faults += 1;
            w.cut[i] = true;
            for j in (0..n).filter(|&j| j != i) {
                w.wire[i][j].clear();
                w.wire[j][i].clear();
            }
        }
        Action::OneWayCut(from, to) => {
            w.faults += 1;
            w.blocked[from][to] = true;
            w.wire[from][to].clear();
        }
        Action::Heal => heal(w),
        Action::Flip(i) => {
            w.faults += 1;
            w.unhealthy[i] = !w.unhealthy[i];
        }
        Action::Rebalance(_)
        | Action::Deliver(..)
        | Action::DeliverNewest(..)
        | Action::Adopt(_) => {}
    }
}

/// A daemon's death, its lease's and its resume window's ends, and its restart.
fn daemon_step(w: &mut World, a: Action) {
    match a {
        Action::Die(i) => {
            // Its gateways hold the lease of its last write only if that write is its committed
            // record; a daemon that started a new epoch and never wrote it had pushed zero rules
            // and restarted long after its last write (a restore, a late restart).
            let own = w.coords[i].own();
            let written = (w.history[i].last())
                .is_some_and(|r| (r.epoch(), r.version()) == (own.epoch(), own.version()));
            w.daemon[i] = Daemon::Dead(if written { Clock::Lease } else { Clock::Late });
            w.faults += 1;
        }
        Action::LeaseOut(i) => {
            w.daemon[i] = match w.daemon[i] {
                Daemon::Unwritten(_) => Daemon::Unwritten(Clock::Window),
                _ => Daemon::Dead(Clock::Window),
            };
        }
        Action::WindowEnds(i) => w.daemon[i] = Daemon::Dead(Clock::Late),
        Action::RestartDaemon(i) => {
            let clock = match w.daemon[i] {
                Daemon::Dead(c) | Daemon::Unwritten(c) => c,
                Daemon::Running => Clock::Late,
            };
            // Within the window the core resumes the epoch unconfirmed; after it, a new epoch.
            let down_ms = if clock == Clock::Late { u64::MAX } else { 0 };
            restart(w, i, down_ms);
            w.daemon[i] = Daemon::Unwritten(clock);
        }
        _ => {}
    }
}

/// Every cut heals, and each writer's newest record that a cut held back from a reader arrives
/// (after anything already on the way), as a global table replicates the newest item when the
/// link returns; the versions in between are skipped.
pub(crate) fn heal(w: &mut World) {
    let n = w.coords.len();
    let held_back: Vec<(usize, usize)> = (0..n)
        .flat_map(|i| (0..n).map(move |j| (i, j)))
        .filter(|&(i, j)| i != j && !w.linked(i, j))
        .collect();
    w.cut.iter_mut().for_each(|c| *c = false);
    w.blocked.iter_mut().flatten().for_each(|b| *b = false);
    for (i, j) in held_back {
        if let Some(newest) = w.history[i].last() {
            if w.wire[i][j].last() != Some(newest) {
                w.wire[i][j].push(newest.clone());
            }
        }
    }
}
