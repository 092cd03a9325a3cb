//! An exhaustive explorer of the core's real types over small configurations.
//!
//! Breadth-first over every interleaving, to a stated depth, of: rebalances, record deliveries
//! (each writer's versions in order, any delay, intermediate versions possibly skipped as a
//! replica that only holds the newest item would), lose, restore, cut of one Region, one-way cut
//! of one direction between two Regions, heal (which delivers each writer's newest record that a
//! cut held back, as a global table does), health flips and daemon restarts, and, with a schedule of limit versions, each Region adopting
//! the next version on its own. States are deduplicated by a hash of the protocol state.
//!
//! Every state is judged by the one judge (`shareplane_judge::judge`), and every recovery's end
//! by `shareplane_judge::judge_end`, with the allowances stated in `allowances` below. In every
//! state it checks: exact conservation (but for room that heirs which reclaimed from a
//! stale record count twice until they settle, residual D12; exact again after recovery);
//! unless a false-positive health verdict (a live Region reported unhealthy) has been in force, Σ live shares ≤ the largest rate adopted so far,
//! and so is the room the running Regions hold (share + pool − debt: what they may raise to
//! without a grant) beyond what heirs that reclaimed from a stale record hold twice (the audit's
//! `over_stale`, residual D12); no grant taken twice; and on every rebalance that a reclaim of a
//! `(Region, epoch)` happens once. From every state at the frontier it runs a recovery (heal,
//! restore, truthful health, the newest limit everywhere, full rounds) and checks that shares
//! reach their targets under it.
//!
//! A run may start from a scenario's prefix of actions, name a class of states it must reach (a
//! witness, such as the restore race of issue 11), and keep to true health verdicts.

#![allow(dead_code)]

use shareplane_core::*;
use shareplane_judge::{
    judge, judge_end, Allowances, Assumptions, End, EndAllowances, Excess, FalseVerdict, Instant,
    Limit, Liveness, Region, RunningReclaimed, Stranded, Violation,
};
use std::collections::hash_map::DefaultHasher;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

#[derive(Clone, Debug)]
pub struct Settings {
    pub n: usize,
    pub rate_rps: u64,
    pub floor_rps: u64,
    pub step_rps: u64,
    pub demands_rps: Vec<u64>,
    pub policy: SilentPolicy,
    pub silent_after: u32,
    pub depth: usize,
    pub max_faults: u8,
    pub max_states: usize,
    /// The rates of limit versions 2, 3, … that Regions adopt one by one (`Action::Adopt`);
    /// empty: the limit never changes.
    pub changes_rps: Vec<u64>,
    /// Actions applied before the exploration starts (its root is the state they lead to). Its
    /// faults are the scenario's: `max_faults` counts those the exploration adds.
    pub prefix: Vec<Action>,
    /// A class of states the run must reach (`Report::witness_states` counts them).
    pub witness: Option<Witness>,
    /// Explore only where every health verdict is true: a transition into a false verdict (a
    /// running Region read unhealthy) is checked but not explored further. For scenarios whose
    /// point is that every verdict is true; the other runs explore false verdicts.
    pub true_verdicts_only: bool,
    /// Which faults the exploration may add (swarm: a run that leaves some kinds out goes deeper
    /// with the others). Every kind by default.
    pub faults: fn(&Action) -> bool,
}

/// Every fault kind.
pub fn every_fault(_: &Action) -> bool {
    true
}

/// Whether a state (every Region's coordinator, which Regions are lost, which read unhealthy)
/// belongs to the class a run must reach.
pub type Witness = fn(&[Coordinator], &[bool], &[bool]) -> bool;

impl Settings {
    /// 4 Regions, L = 12, floor 1, step cap 3, silence after one unchanged rebalance.
    pub fn four(depth: usize, max_faults: u8) -> Settings {
        Settings {
            n: 4,
            demands_rps: vec![6, 3, 2, 1],
            ..Settings::small(depth, max_faults)
        }
    }

    /// 3 Regions, L = 12, floor 1, step cap 3, silence after one unchanged rebalance (so that
    /// silence is reachable within a small depth; the adversarial scheduler already delays
    /// records arbitrarily).
    pub fn small(depth: usize, max_faults: u8) -> Settings {
        Settings {
            n: 3,
            rate_rps: 12,
            floor_rps: 1,
            step_rps: 3,
            demands_rps: vec![6, 3, 3],
            policy: SilentPolicy::TwoSignals,
            silent_after: 1,
            depth,
            max_faults,
            max_states: 5_000_000,
            changes_rps: Vec::new(),
            prefix: Vec::new(),
            witness: None,
            true_verdicts_only: false,
            faults: every_fault,
        }
    }

    /// Issue 31's class, 3 Regions as [`Settings::small`] but with demands 4, 1 and 7 (B's room
    /// moves to C): explored from the state where B's records stop reaching A (a one-way cut; A's
    /// still reach B, C sees everyone), B has granted its room to C and C has taken it, and A
    /// holds C's record of the take. The exploration adds losses, restores, health flips and
    /// heals (`max_faults` of them), every rebalance and delivery; only true verdicts. The run
    /// must reach [`heir_lost_witness`]: B and C lost and read unhealthy while A's newest record
    /// of B is older than B's last one and A holds a record of C that says so (a heir that closed
    /// B against what it holds would count B's grant to C twice).
    pub fn one_way_heir_lost(depth: usize, max_faults: u8) -> Settings {
        use Action::*;
        Settings {
            demands_rps: vec![4, 1, 7],
            prefix: vec![
                Rebalance(0),
                Rebalance(1),
                Rebalance(2),
                Deliver(0, 1),
                Deliver(0, 2),
                Deliver(1, 0),
                Deliver(1, 2),
                Deliver(2, 0),
                Deliver(2, 1),
                OneWayCut(1, 0),
                Rebalance(1),
                Deliver(1, 2),
                Rebalance(2),
                Deliver(2, 0),
                Deliver(2, 1),
                Rebalance(0),
                Deliver(0, 1),
                Deliver(0, 2),
            ],
            witness: Some(heir_lost_witness),
            true_verdicts_only: true,
            faults: |a| matches!(a, Action::Lose(_) | Action::Flip(_)),
            ..Settings::small(depth, max_faults)
        }
    }

    /// The restore race of issue 11 (docs/PROTOCOL.md, "Why fixed portions"), 3 Regions as
    /// [`Settings::small`], explored from the state where Region 1 (B) is lost, its health check
    /// reads unhealthy, and both Region 0 (A) and Region 2 (C) have closed its epoch. The race
    /// then needs three faults of the exploration's own (`max_faults` counts only those: B's
    /// check clearing while it is down, C lost, C's check unhealthy), B's restore (not a fault)
    /// and three rebalances: a depth of 7 with 3 faults, too big for CI (see
    /// [`Settings::restore_race_c_lost`]). Only true verdicts are explored; the run must reach
    /// [`restore_race_witness`]. A and C see each other fresh when they close B (a heir that is
    /// cut off from a peer whose check reads healthy waits).
    pub fn restore_race(depth: usize, max_faults: u8) -> Settings {
        use Action::*;
        Settings {
            prefix: vec![
                Lose(1),
                Flip(1),
                Rebalance(0),
                Rebalance(2),
                Deliver(2, 0),
                Deliver(0, 2),
                Rebalance(0),
                Deliver(0, 2),
                Rebalance(2),
                Deliver(2, 0),
            ],
            witness: Some(restore_race_witness),
            true_verdicts_only: true,
            ..Settings::small(depth, max_faults)
        }
    }

    /// The restore race from later on, so that the depth goes to the race itself: B is lost and
    /// closed by A and C as in [`Settings::restore_race`], then C is lost and its check reads
    /// unhealthy. The exploration's interleavings are B's check clearing and its restore, every
    /// rebalance (A's and B's closes of C among them), every delivery (B's new epoch reaching A
    /// before or after A closes C, C's last records reaching either heir late or never, versions
    /// skipped) and `max_faults` more faults. A closes C while it still counts B's old epoch
    /// reclaimed only while B reads unhealthy: a heir that counts silent a peer whose check
    /// reads healthy waits (`Coordinator`'s basis in doubt), so the race is A's close, B's check
    /// clearing, B's restore and B's close: 6 steps and 1 fault deep.
    pub fn restore_race_c_lost(depth: usize, max_faults: u8) -> Settings {
        use Action::*;
        let mut s = Settings::restore_race(depth, max_faults);
        s.prefix.extend([Lose(2), Flip(2)]);
        s
    }

    /// 2 Regions, L = 12 lowered to 4 and then raised to 16, demands 6 and 1; explored from the
    /// state where Region 1 has granted its room to Region 0 (so that a lowering leaves it in
    /// debt, the class of fuzz seed 345378).
    pub fn changes(depth: usize, max_faults: u8) -> Settings {
        use Action::*;
        Settings {
            n: 2,
            demands_rps: vec![6, 1],
            changes_rps: vec![4, 16],
            prefix: vec![
                Rebalance(0),
                Deliver(0, 1),
                Rebalance(1),
                Deliver(1, 0),
                Rebalance(0),
                Deliver(0, 1),
            ],
            ..Settings::small(depth, max_faults)
        }
    }

    /// 3 Regions, L = 12 lowered to 3 and then raised to 18, demands 6, 1 and 1; explored from
    /// the state where Regions 1 and 2 had granted room to Region 0, every Region has adopted
    /// the lowering (so that Regions 1 and 2 owe more than they hold, each with two heirs to
    /// take its part), and the raise is rolled out to Regions 0 and 2, not adopted yet. The
    /// exploration's depth goes to the faults and the raise; the 2-Region run explores the
    /// lowering's rollout too.
    pub fn changes_three(depth: usize, max_faults: u8) -> Settings {
        use Action::*;
        Settings {
            n: 3,
            demands_rps: vec![6, 1, 1],
            changes_rps: vec![3, 18],
            prefix: vec![
                Rebalance(0),
                Deliver(0, 1),
                Deliver(0, 2),
                Rebalance(1),
                Rebalance(2),
                Deliver(1, 0),
                Deliver(2, 0),
                Rebalance(0),
                Deliver(0, 1),
                Deliver(0, 2),
                Adopt(0),
                Adopt(1),
                Adopt(2),
                Rebalance(1),
                Rebalance(2),
                Deliver(1, 0),
                Deliver(2, 0),
                Deliver(1, 2),
                Deliver(2, 1),
                Rebalance(0),
                Deliver(0, 1),
                Deliver(0, 2),
                Adopt(0),
                Adopt(2),
            ],
            ..Settings::small(depth, max_faults)
        }
    }

    /// The rate of limit version `v` (1-based).
    fn rate_of(&self, v: usize) -> Room {
        match v {
            0 | 1 => Room::rps(self.rate_rps),
            _ => Room::rps(self.changes_rps[v - 2]),
        }
    }

    fn last_version(&self) -> usize {
        1 + self.changes_rps.len()
    }

    /// The largest rate of versions 1 to `v`.
    fn largest_to(&self, v: usize) -> Room {
        (1..=v).map(|k| self.rate_of(k)).max().unwrap_or(Room::ZERO)
    }

    /// The deployment at limit version `v`.
    fn at_version(&self, d: &Deployment, v: usize) -> Vec<LimitSpec> {
        let mut spec = d.limits[0].clone();
        spec.version = v as u64;
        spec.rate = self.rate_of(v);
        vec![spec]
    }
}

#[derive(Debug, Default)]
pub struct Report {
    pub states: usize,
    pub transitions: usize,
    pub depth_reached: usize,
    pub recoveries_checked: usize,
    pub false_verdict_states: usize,
    pub violations: Vec<String>,
    /// Recoveries that did not converge after a false-positive health verdict (the residual risk
    /// of docs/PROTOCOL.md: room can be stranded, never created).
    pub false_verdict_recovery_failures: usize,
    pub false_verdict_examples: Vec<String>,
    /// States without a false verdict where heirs that reclaimed from a stale record counted
    /// room twice (residual D12), and the most room so counted in one state.
    pub stale_states: usize,
    pub max_stale: Room,
    /// States of the settings' witness class judged without a false verdict in force (so with
    /// the audit enforced), how many of them conserve exactly (the others hold only room that
    /// stale heirs count twice), and the first one found, by the actions after the prefix.
    pub witness_states: usize,
    pub witness_exact: usize,
    pub witness_example: Option<String>,
    /// Transitions into a false verdict left unexplored (`Settings::true_verdicts_only`).
    pub false_verdicts_pruned: usize,
}

#[derive(Clone)]
struct World {
    coords: Vec<Coordinator>,
    /// Records written and not yet visible, per `[from][to]`, oldest first.
    wire: Vec<Vec<Vec<Arc<RegionRecord>>>>,
    lost: Vec<bool>,
    cut: Vec<bool>,
    /// One-way cuts: `blocked[from][to]`, records written by `from` do not reach `to`.
    blocked: Vec<Vec<bool>>,
    unhealthy: Vec<bool>,
    /// Every record each Region wrote, in order: what the audit judges by, and what the store
    /// keeps of ended epochs (their last records).
    history: Vec<Vec<Arc<RegionRecord>>>,
    faults: u8,
    false_verdict: bool,
    /// The limit version each Region's daemon runs (1-based).
    config: Vec<usize>,
    trace: Vec<String>,
}

impl World {
    fn key(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.coords.hash(&mut h);
        self.wire.hash(&mut h);
        self.lost.hash(&mut h);
        self.cut.hash(&mut h);
        self.blocked.hash(&mut h);
        self.unhealthy.hash(&mut h);
        self.faults.hash(&mut h);
        self.false_verdict.hash(&mut h);
        self.config.hash(&mut h);
        // The history matters to the audit only through the records a mark can name: every
        // epoch's records, identified by their versions.
        for hist in &self.history {
            for r in hist {
                (r.epoch, r.version).hash(&mut h);
            }
        }
        h.finish()
    }

    /// The physical audit of the one limit.
    fn audit(&self, d: &Deployment) -> Audit {
        let truth: Vec<Truth<'_>> = self
            .coords
            .iter()
            .enumerate()
            .map(|(i, c)| Truth {
                written: &self.history[i],
                running: (!self.lost[i]).then(|| c.own()),
            })
            .collect();
        audit(d, 0, &truth)
    }

    /// The last record of every ended epoch of every Region, as the store keeps them.
    fn ended_records(&self) -> Vec<Arc<RegionRecord>> {
        let mut out = Vec::new();
        for hist in &self.history {
            for (k, r) in hist.iter().enumerate() {
                if hist.get(k + 1).is_some_and(|next| next.epoch > r.epoch) {
                    out.push(r.clone());
                }
            }
        }
        out
    }

    /// Whether records written by `a` reach `b`.
    fn linked(&self, a: usize, b: usize) -> bool {
        self.cut[a] == self.cut[b] && !self.blocked[a][b]
    }

    fn any_cut(&self) -> bool {
        self.cut.iter().any(|&c| c) || self.blocked.iter().flatten().any(|&b| b)
    }

    fn health(&self) -> PerRegion<Health> {
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

    fn note_verdicts(&mut self) {
        if (0..self.lost.len()).any(|i| self.unhealthy[i] && !self.lost[i]) {
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

fn rid(i: usize) -> RegionId {
    RegionId::new(i).expect("region index")
}

fn initial(d: &Arc<Deployment>, s: &Settings) -> World {
    let n = s.n;
    let recs: Vec<Arc<RegionRecord>> = (0..n)
        .map(|i| {
            let mut r = RegionRecord::genesis(d, rid(i));
            r.version = 1;
            r.limits[0].demand = Room::rps(s.demands_rps[i]);
            Arc::new(r)
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
        history: recs.iter().map(|r| vec![r.clone()]).collect(),
        faults: 0,
        false_verdict: false,
        config: vec![1; n],
        trace: Vec::new(),
    }
}

/// The root of the exploration: the initial state after the settings' prefix.
fn root(d: &Arc<Deployment>, s: &Settings) -> World {
    let mut w = initial(d, s);
    for a in &s.prefix {
        apply(&mut w, s, *a);
    }
    w.faults = 0;
    w
}

/// Issue 31's class: B (Region 1) and C (Region 2) are lost and read unhealthy, A's newest
/// record of B is older than B's last one (a one-way cut hid it), and a record of C that A holds
/// says so: its writer had seen a newer record of B, or took more from B than A's record of B
/// granted it. A heir that closed B against the record it holds would hand itself a portion of
/// room that C's estate holds too.
pub fn heir_lost_witness(c: &[Coordinator], lost: &[bool], unhealthy: &[bool]) -> bool {
    let (rb, rc) = (rid(1), rid(2));
    if !(lost[1] && lost[2] && unhealthy[1] && unhealthy[2] && !lost[0]) {
        return false;
    }
    let (Some(b_at_a), Some(c_at_a)) = (c[0].latest(rb), c[0].latest(rc)) else {
        return false;
    };
    let b_last = c[1].own();
    b_at_a.epoch == b_last.epoch
        && b_at_a.version < b_last.version
        && (c_at_a.seen[rb] > (b_at_a.epoch, b_at_a.version)
            || c_at_a.limits[0].taken[rb] > b_at_a.limits[0].granted[rc])
}

/// The restore race of issue 11 (docs/PROTOCOL.md, "Why fixed portions"): Region 0 (A) has closed
/// an epoch of Region 2 (C) while the epoch of Region 1 (B) it sees is still one it reclaimed
/// (it has not seen B's new epoch: a divisor from its view would have been 1), and a newer epoch
/// of B has closed the same epoch of C (its view had A live: a divisor of 2). With divisors the
/// two would hold one and a half estates of C.
pub fn restore_race_witness(c: &[Coordinator], _lost: &[bool], _unhealthy: &[bool]) -> bool {
    let (a, b) = (c[0].own(), c[1].own());
    let (rb, rc) = (rid(1), rid(2));
    let Some(b_seen) = c[0].latest(rb) else {
        return false;
    };
    let b_old = b_seen.epoch;
    let a_counts_b_reclaimed =
        a.peer_epochs[rb] == b_old && a.reclaims[rb].is_some_and(|m| m.epoch == b_old);
    match (a.reclaims[rc], b.reclaims[rc]) {
        (Some(ac), Some(bc)) => {
            a_counts_b_reclaimed && b.epoch > b_old && bc.by > b_old && ac.epoch == bc.epoch
        }
        _ => false,
    }
}

#[derive(Clone, Copy, Debug)]
pub enum Action {
    Rebalance(usize),
    Deliver(usize, usize),
    DeliverNewest(usize, usize),
    Lose(usize),
    Restore(usize),
    Restart(usize),
    /// A daemon restart that resumes its epoch from its durable record: explored only while no
    /// peer can have counted the Region silent (every peer saw its last write change its record).
    Resume(usize),
    Cut(usize),
    /// Records written by the first Region stop reaching the second (the other way still works).
    OneWayCut(usize, usize),
    Heal,
    Flip(usize),
    /// Region `i`'s daemon runs the next limit version (a change rolled out Region by Region).
    Adopt(usize),
}

fn actions(w: &World, s: &Settings) -> Vec<Action> {
    let n = s.n;
    let mut out = Vec::new();
    let fault_left = w.faults < s.max_faults;
    let allowed = |a: Action| (s.faults)(&a);
    for i in 0..n {
        if !w.lost[i] {
            out.push(Action::Rebalance(i));
        }
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
                faults.push(Action::Restart(i));
                if resumable(w, i) {
                    faults.push(Action::Resume(i));
                }
            }
            if !w.any_cut() {
                faults.push(Action::Cut(i));
                faults.extend((0..n).filter(|&j| j != i).map(|j| Action::OneWayCut(i, j)));
            }
            faults.push(Action::Flip(i));
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

/// Whether Region `i` may resume: its committed record was written, and every peer has seen that
/// record and counted no silence of it since.
fn resumable(w: &World, i: usize) -> bool {
    let Some(last) = w.history[i].last() else {
        return false;
    };
    if (last.epoch, last.version) != (w.coords[i].own().epoch, w.coords[i].own().version) {
        return false;
    }
    w.coords.iter().enumerate().all(|(j, c)| {
        j == i
            || c.peers()
                .iter()
                .any(|p| p.region == rid(i) && p.version == last.version && p.unchanged == 0)
    })
}

/// What a restarted daemon reads from its Region's replica: every peer's newest record it had
/// seen, plus the retained last record of each peer's previous epoch.
fn replica_view(w: &World, i: usize) -> Vec<Arc<RegionRecord>> {
    let mut v = Vec::new();
    for j in 0..w.coords.len() {
        if j == i {
            continue;
        }
        if let Some(r) = w.coords[i].latest(rid(j)) {
            if r.version > 0 {
                v.push(r.clone());
            }
        }
    }
    for e in w.ended_records() {
        if e.region != rid(i) {
            v.push(e);
        }
    }
    v
}

fn restart(w: &mut World, i: usize, down_ms: u64) {
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
    w.coords[i] = c;
}

/// Applies `a`; returns a violation found in the transition itself.
fn apply(w: &mut World, s: &Settings, a: Action) -> Option<String> {
    w.trace.push(format!("{a:?}"));
    let n = w.coords.len();
    match a {
        Action::Rebalance(i) => {
            let health = w.health();
            let demand = [w.coords[i].own().limits[0].demand];
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
                if d.record.epoch == before.epoch
                    && before.reclaims[j].is_some()
                    && before.reclaims[j] == d.record.reclaims[j]
                {
                    return Some(format!("{i} reclaimed {j} twice under one mark"));
                }
            }
            w.coords[i].commit(&d);
            let rec = Arc::new(w.coords[i].own().clone());
            w.history[i].push(rec.clone());
            for j in 0..n {
                if j != i && w.linked(i, j) {
                    w.wire[i][j].push(rec.clone());
                }
            }
        }
        Action::Deliver(i, j) | Action::DeliverNewest(i, j) => {
            let rec = if matches!(a, Action::Deliver(..)) {
                w.wire[i][j].remove(0)
            } else {
                let last = w.wire[i][j].pop().expect("non-empty");
                w.wire[i][j].clear();
                last
            };
            if let Err(e) = w.coords[j].observe(rec) {
                return Some(format!("honest record rejected: {e}"));
            }
        }
        Action::Lose(i) => {
            w.lost[i] = true;
            w.faults += 1;
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
            for j in 0..n {
                if j != i {
                    w.wire[i][j].clear();
                    w.wire[j][i].clear();
                }
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
        Action::Adopt(i) => {
            w.config[i] += 1;
            let limits = s.at_version(w.coords[i].deployment(), w.config[i]);
            if let Err(e) = w.coords[i].set_limits(limits) {
                return Some(format!("limit version {} refused: {e:?}", w.config[i]));
            }
        }
    }
    w.note_verdicts();
    None
}

/// Every cut heals, and each writer's newest record that a cut held back from a reader arrives
/// (after anything already on the way), as a global table replicates the newest item when the
/// link returns; the versions in between are skipped.
fn heal(w: &mut World) {
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

/// What the judge allows in a state: the largest rate adopted so far, a false verdict's effects
/// measured once one has been in force (the model's flag stays set), no running epoch's room
/// excused, and (`faults_may_linger`, false after recovery) the room stale heirs count twice.
fn allowances(w: &World, s: &Settings, faults_may_linger: bool) -> Allowances {
    let largest = s.largest_to(w.config.iter().copied().max().unwrap_or(1));
    Allowances {
        limit: Limit::fixed(largest),
        false_verdict: FalseVerdict {
            excess: if w.false_verdict {
                Excess::Measured
            } else {
                Excess::None
            },
            audit_measured: w.false_verdict,
        },
        faults_may_linger,
        assumptions: Assumptions::Within,
        running_reclaimed: RunningReclaimed::Never,
        rounding: Room::ZERO,
    }
}

/// Judges a state with `c`, its audit (`World::audit`), by the one judge: exact conservation but
/// for room stale heirs count twice until they settle (residual D12; `faults_may_linger`), the
/// running Regions' shares within the limit, the room they hold within it beyond that stale room,
/// and no Region taking more of a pair's grants than the granter granted.
fn judged(w: &World, c: &Audit, s: &Settings, faults_may_linger: bool) -> Option<String> {
    let regions: Vec<Region> = (w.coords.iter().enumerate())
        .map(|(i, co)| Region {
            share: co.own().limits[0].share,
            running: !w.lost[i],
            rate: Room::ZERO,
            debt: co.own().limits[0].debt,
        })
        .collect();
    let held: i128 = (0..w.coords.len())
        .filter(|&i| !w.lost[i])
        .map(|i| w.coords[i].own().limits[0].held())
        .sum();
    let newest: Vec<&RegionRecord> = w.coords.iter().map(|co| co.own()).collect();
    let instant = Instant {
        regions: &regions,
        audit: Some(c),
        held: Some(held),
        newest: &newest,
    };
    judge(&instant, &allowances(w, s, faults_may_linger))
        .err()
        .map(|v| v.to_string())
}

/// Checks a state against `c`, its audit (`World::audit`).
fn check_state(w: &World, c: &Audit, s: &Settings) -> Option<String> {
    judged(w, c, s, true)
}

/// Heal everything, restore every lost Region, tell the truth about health, and run full rounds.
/// Returns the failure and whether it belongs to a documented residual class (a false health
/// verdict was in force, and the shares did not pass the limit).
fn check_recovery(w: &World, s: &Settings) -> Option<(String, bool)> {
    let w = recover(w, s);
    converged(&w, s, w.false_verdict)
}

fn recover(w: &World, s: &Settings) -> World {
    let mut w = w.clone();
    let n = s.n;
    heal(&mut w);
    for i in 0..n {
        if w.lost[i] {
            apply(&mut w, s, Action::Restore(i));
        }
        w.unhealthy[i] = false;
        while w.config[i] < s.last_version() {
            apply(&mut w, s, Action::Adopt(i));
        }
    }
    let largest = s.largest_to(s.last_version()).0;
    let rounds = (largest.div_ceil(Room::rps(s.step_rps).0) + 8) as usize;
    run_rounds(&mut w, s, rounds);
    w
}

fn run_rounds(w: &mut World, s: &Settings, rounds: usize) {
    let n = s.n;
    for _ in 0..rounds {
        for i in 0..n {
            apply(w, s, Action::Rebalance(i));
            for from in 0..n {
                for to in 0..n {
                    while !w.wire[from][to].is_empty() {
                        apply(w, s, Action::Deliver(from, to));
                    }
                }
            }
            for e in w.ended_records() {
                for to in 0..n {
                    if rid(to) != e.region {
                        let _ = w.coords[to].observe(e.clone());
                    }
                }
            }
        }
    }
}

/// The end of a recovery, by the one judge: the shares within the last limit (even in a residual
/// class), exact conservation where no false verdict was in force, and every share at its target
/// (room outside the running Regions' hands is named where they are not). Returns the failure and
/// whether it belongs to the residual class.
fn converged(w: &World, s: &Settings, residual: bool) -> Option<(String, bool)> {
    let a = w.audit(&deployment(s));
    if !residual {
        if let Some(v) = judged(w, &a, s, false) {
            return Some((format!("after recovery: {v}"), false));
        }
    }
    let sum: Room = w.coords.iter().map(|c| c.own().limits[0].share).sum();
    let settled = (w.coords.iter()).all(|c| c.own().limits[0].share == c.own().limits[0].target);
    let shares: Vec<String> = (w.coords.iter())
        .map(|c| {
            let l = c.own().limits[0];
            format!("{}/{} pool {}", l.share, l.target, l.pool)
        })
        .collect();
    let liveness = Liveness {
        what: "every share at its target after recovery".into(),
        settled_after_ms: settled.then_some(0),
        bound_ms: 0,
        seen: shares.join(", "),
    };
    let end = End {
        core_alarms: &[],
        records_refused: 0,
        final_shares: Some((sum, s.rate_of(s.last_version()))),
        audit: Some(&a),
        admissions: None,
        liveness: &liveness,
    };
    let stranded = EndAllowances {
        stranded: Stranded::WhereSettled,
    };
    let first = judge_end(&end, &stranded).violations.into_iter().next()?;
    let above = matches!(first, Violation::FinalSharesAboveLimit { .. });
    Some((format!("after recovery: {first}"), residual && !above))
}

/// Explores every interleaving to `s.depth`.
pub fn explore(s: &Settings) -> Report {
    let d = deployment(s);
    let mut report = Report::default();
    let mut seen: HashSet<u64> = HashSet::new();
    let start = root(&d, s);
    seen.insert(start.key());
    let mut frontier = vec![start];
    for depth in 0..=s.depth {
        report.depth_reached = depth;
        let mut next = Vec::new();
        for w in &frontier {
            report.states += 1;
            if w.false_verdict {
                report.false_verdict_states += 1;
            }
            let a = w.audit(&d);
            // Measured where the checks below apply: after a false verdict the stale figure also
            // counts takes from running epochs, which nothing there bounds.
            if a.over_stale > 0 && !w.false_verdict {
                report.stale_states += 1;
                report.max_stale = report.max_stale.max(Room(a.over_stale as u64));
            }
            if let Some(v) = check_state(w, &a, s) {
                report
                    .violations
                    .push(format!("{v}\n  trace: {}", w.trace.join(" ")));
                continue;
            }
            if !w.false_verdict
                && s.witness
                    .is_some_and(|f| f(&w.coords, &w.lost, &w.unhealthy))
            {
                report.witness_states += 1;
                report.witness_exact += usize::from(a.holds());
                if report.witness_example.is_none() {
                    report.witness_example = Some(w.trace[s.prefix.len()..].join(" "));
                }
            }
            if depth == s.depth {
                report.recoveries_checked += 1;
                if let Some((v, residual)) = check_recovery(w, s) {
                    if residual {
                        report.false_verdict_recovery_failures += 1;
                        if report.false_verdict_examples.len() < 5 {
                            report
                                .false_verdict_examples
                                .push(format!("{v}\n  trace: {}", w.trace.join(" ")));
                        }
                    } else {
                        report
                            .violations
                            .push(format!("{v}\n  trace: {}", w.trace.join(" ")));
                    }
                }
                continue;
            }
            for a in actions(w, s) {
                let mut nw = w.clone();
                report.transitions += 1;
                if let Some(v) = apply(&mut nw, s, a) {
                    report
                        .violations
                        .push(format!("{v}\n  trace: {}", nw.trace.join(" ")));
                    continue;
                }
                if s.true_verdicts_only && nw.false_verdict {
                    report.false_verdicts_pruned += 1;
                    continue;
                }
                if seen.insert(nw.key()) {
                    next.push(nw);
                }
            }
            if report.violations.len() > 20 || report.states > s.max_states {
                return report;
            }
        }
        frontier = next;
        if frontier.is_empty() {
            break;
        }
    }
    report
}

/// Every Region's own record at the root of the exploration (after the settings' prefix).
pub fn root_records(s: &Settings) -> Vec<RegionRecord> {
    let w = root(&deployment(s), s);
    w.coords.iter().map(|c| c.own().clone()).collect()
}

/// Applies `trace` from the start, then recovers (heal, restore, true health, full rounds): the
/// first violation on the way or after it, if any.
pub fn replay_and_recover(s: &Settings, trace: &[Action]) -> Option<String> {
    let d = deployment(s);
    let mut w = root(&d, s);
    for a in trace {
        if let Some(v) = apply(&mut w, s, *a) {
            return Some(format!("at {a:?}: {v}"));
        }
        if let Some(v) = check_state(&w, &w.audit(&d), s) {
            return Some(format!("after {a:?}: {v}"));
        }
    }
    check_recovery(&w, s).map(|(v, _)| v)
}

/// Where a replay leads.
#[derive(Debug)]
pub struct Outcome {
    /// Every Region's own record.
    pub own: Vec<RegionRecord>,
    /// Every record each Region wrote, in order.
    pub written: Vec<Vec<Arc<RegionRecord>>>,
    /// `(epoch, version)` of the latest record each Region has seen of each other Region
    /// (`None` for itself).
    pub seen: Vec<Vec<Option<(u64, u64)>>>,
    pub lost: Vec<bool>,
    pub unhealthy: Vec<bool>,
    pub audit: Audit,
    /// Whether the state is in the settings' witness class.
    pub witness: bool,
    /// The first violation on the way (a transition, or a state's check), if any.
    pub violation: Option<String>,
}

/// Applies `trace` from the root, checking every state on the way, and (`recover`) then heals,
/// restores, tells the truth about health and runs full rounds as a recovery does.
pub fn replay_to(s: &Settings, trace: &[Action], recover_after: bool) -> Outcome {
    let d = deployment(s);
    let mut w = root(&d, s);
    let mut violation = None;
    for a in trace {
        if let Some(v) = apply(&mut w, s, *a) {
            violation.get_or_insert(format!("at {a:?}: {v}"));
        }
        if let Some(v) = check_state(&w, &w.audit(&d), s) {
            violation.get_or_insert(format!("after {a:?}: {v}"));
        }
    }
    if recover_after {
        w = recover(&w, s);
    }
    let n = s.n;
    Outcome {
        own: w.coords.iter().map(|c| c.own().clone()).collect(),
        written: w.history.clone(),
        seen: (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| w.coords[i].latest(rid(j)).map(|r| (r.epoch, r.version)))
                    .collect()
            })
            .collect(),
        lost: w.lost.clone(),
        unhealthy: w.unhealthy.clone(),
        audit: w.audit(&d),
        witness: s
            .witness
            .is_some_and(|f| f(&w.coords, &w.lost, &w.unhealthy)),
        violation,
    }
}

/// Replays a trace and prints every Region's own record after each step (for debugging a
/// counterexample).
pub fn replay(s: &Settings, trace: &[Action], recover: bool) {
    let d = deployment(s);
    let mut w = root(&d, s);
    let show = |w: &World| {
        for c in &w.coords {
            let o = c.own();
            let l = o.limits[0];
            println!(
                "   {} e{} v{} share {} pool {} debt {} target {} unmet {} granted {:?} taken {:?} reclaimed {:?} marks {:?} peer epochs {:?} accounts {:?}",
                o.region, o.epoch, o.version, l.share, l.pool, l.debt, l.target, l.unmet,
                &l.granted.0[..s.n], &l.taken.0[..s.n], &l.reclaimed.0[..s.n], &o.reclaims.0[..s.n],
                &o.peer_epochs.0[..s.n], &o.account_epochs.0[..s.n]
            );
        }
    };
    for a in trace {
        println!("{a:?}");
        apply(&mut w, s, *a);
        show(&w);
    }
    if recover {
        println!("recovery: {:?}", check_recovery(&w, s));
    }
}
