//! What a run explores (its configuration, prefix, witness class and fault kinds) and what it
//! reports.

use crate::action::{rid, Action};
use shareplane_core::{Coordinator, Deployment, LimitSpec, RegionRecord, Room, SilentPolicy};

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

/// Every Region of three rebalances once and every record reaches every peer: the opening of the
/// runs that start from a settled deployment (and of the traces the core's tests replay).
pub fn every_region_heard() -> Vec<Action> {
    use Action::*;
    vec![
        Rebalance(0),
        Rebalance(1),
        Rebalance(2),
        Deliver(0, 1),
        Deliver(0, 2),
        Deliver(1, 0),
        Deliver(1, 2),
        Deliver(2, 0),
        Deliver(2, 1),
    ]
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
            prefix: [
                every_region_heard(),
                vec![
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
            ]
            .concat(),
            witness: Some(heir_lost_witness),
            true_verdicts_only: true,
            faults: |a| matches!(a, Action::Lose(_) | Action::Flip(_)),
            ..Settings::small(depth, max_faults)
        }
    }

    /// The survivor's take-back of issue 31 (docs/PROTOCOL.md, "Grants in flight";
    /// `simulations/scenarios/survivor-takeback.toml`), 3 Regions as [`Settings::small`] with A
    /// (Region 0) idle and B (Region 1) busy, from the state where a one-way cut keeps B's and
    /// C's records from A, A has granted its room to B and B has taken it: A holds only B's
    /// record from before the take. The exploration adds losses and health flips (`max_faults`
    /// of them), every rebalance and delivery; only true verdicts. The run must reach
    /// [`survivor_takeback_witness`]: A has closed B against that record while B's last one shows
    /// the take (under the rules before, A took its grant back as untaken and held it twice).
    pub fn survivor_takeback(depth: usize, max_faults: u8) -> Settings {
        use Action::*;
        Settings {
            demands_rps: vec![1, 9, 2],
            prefix: [
                every_region_heard(),
                vec![
                    OneWayCut(1, 0),
                    OneWayCut(2, 0),
                    Rebalance(0),
                    Deliver(0, 1),
                    Deliver(0, 2),
                    Rebalance(1),
                    Deliver(1, 2),
                ],
            ]
            .concat(),
            witness: Some(survivor_takeback_witness),
            true_verdicts_only: true,
            faults: |a| matches!(a, Action::Lose(_) | Action::Flip(_)),
            ..Settings::small(depth, max_faults)
        }
    }

    /// An heir lost while it holds a stale close (docs/PROTOCOL.md, "Reclaim against an agreed
    /// basis"; `simulations/scenarios/lost-heir-stale-close.toml`), 3 Regions as
    /// [`Settings::small`] with demands 1, 4 and 7: a one-way cut keeps A's (Region 0) records
    /// from B and C; A grants its pool to C in a record nobody sees, is lost and reads unhealthy,
    /// and B and C close it against its record from before the grant. The exploration adds B's
    /// loss and health flips and heals (`max_faults` of them), every rebalance and delivery; only
    /// true verdicts. The run must reach [`stale_close_witness`]: B lost and unhealthy, its
    /// record marking A's epoch against a record older than A's last, while C holds a newer one
    /// (under the rules before, C stopped waiting for the lost B and took A's grant from it).
    pub fn lost_heir_stale_close(depth: usize, max_faults: u8) -> Settings {
        Settings {
            witness: Some(stale_close_witness),
            // B's loss and flip and the heal: C stays up. With C's loss too, the exploration
            // reaches states where all three are lost and the records count room twice that an
            // ended heir is owed (docs/PROTOCOL.md, risk 4: what remains).
            faults: |a| matches!(a, Action::Lose(1) | Action::Flip(1) | Action::Heal),
            ..Settings::stale_close_prefix(depth, max_faults)
        }
    }

    /// The same opening as [`Settings::lost_heir_stale_close`], but it is C that the exploration
    /// may lose (its loss and flips, and heals): the run must reach [`settled_then_lost_witness`],
    /// C lost and unhealthy after it settled its part of A's estate against A's newer record,
    /// while B holds only C's record from before. Under the rules before, C settled down by A's
    /// grant to it that its freeze kept it from taking, and B, closing C against the older record,
    /// counted that room in C's estate while it was owed to C alone.
    pub fn settled_then_lost(depth: usize, max_faults: u8) -> Settings {
        Settings {
            witness: Some(settled_then_lost_witness),
            faults: |a| matches!(a, Action::Lose(2) | Action::Flip(2) | Action::Heal),
            ..Settings::stale_close_prefix(depth, max_faults)
        }
    }

    /// The same opening with every Region losable (losses, flips, heals and restores of any):
    /// the heirs' and the owner's next epochs come back while an ended heir's stale close is in
    /// its estate (CI at depth 7; `shareplane-model 7 3 stale-close-all`). Before inheritances
    /// were settled in the ended epoch's estate, it reached states in which all three Regions
    /// were lost and the records counted room an ended heir was owed twice.
    pub fn stale_close_all(depth: usize, max_faults: u8) -> Settings {
        Settings {
            witness: Some(stale_close_witness),
            faults: |a| matches!(a, Action::Lose(_) | Action::Flip(_) | Action::Heal),
            ..Settings::stale_close_prefix(depth, max_faults)
        }
    }

    /// The opening of [`Settings::lost_heir_stale_close`] and [`Settings::settled_then_lost`].
    fn stale_close_prefix(depth: usize, max_faults: u8) -> Settings {
        use Action::*;
        let heirs = [Rebalance(1), Deliver(1, 2), Rebalance(2), Deliver(2, 1)];
        Settings {
            demands_rps: vec![1, 4, 7],
            prefix: [
                every_region_heard(),
                vec![
                    OneWayCut(0, 1),
                    OneWayCut(0, 2),
                    Rebalance(2),
                    Deliver(2, 0),
                    Rebalance(0),
                    Lose(0),
                    Flip(0),
                ],
                heirs.repeat(4),
            ]
            .concat(),
            true_verdicts_only: true,
            ..Settings::small(depth, max_faults)
        }
    }

    /// Two estates seen out of order (fresh swarm seed 40044107; docs/PROTOCOL.md, "Why no heir
    /// takes more than it is owed"), 3 Regions as [`Settings::small`] with demands 4, 1 and 7:
    /// a one-way cut keeps B's and C's records from A; B grants its room to C and C takes it;
    /// both are lost and read unhealthy, and A closes both against its records from before the
    /// cut (a consistent cut: the grant is in neither). The exploration adds heals and health
    /// flips (`max_faults` of them), every rebalance and delivery, versions skipped or not; only
    /// true verdicts. The run must reach [`out_of_order_witness`]: A holds C's newer record,
    /// which shows the take, while its mark on B is older than the record C took from. Settling
    /// C up first would hand A its portion of the grant while its part of B still holds it too.
    pub fn estates_out_of_order(depth: usize, max_faults: u8) -> Settings {
        use Action::*;
        Settings {
            demands_rps: vec![4, 1, 7],
            prefix: [
                every_region_heard(),
                vec![
                    OneWayCut(1, 0),
                    OneWayCut(2, 0),
                    Rebalance(1),
                    Deliver(1, 2),
                    Rebalance(2),
                    Deliver(2, 1),
                    Lose(1),
                    Lose(2),
                    Flip(1),
                    Flip(2),
                    Rebalance(0),
                    Rebalance(0),
                    Rebalance(0),
                ],
            ]
            .concat(),
            witness: Some(out_of_order_witness),
            true_verdicts_only: true,
            faults: |a| matches!(a, Action::Heal | Action::Flip(_)),
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
                // A closes once it holds C's record of the same freeze.
                Rebalance(0),
                Deliver(0, 2),
            ],
            witness: Some(restore_race_witness),
            true_verdicts_only: true,
            ..Settings::small(depth, max_faults)
        }
    }

    /// Swarm seed 70099192's class (docs/PROTOCOL.md, "Return"): 2 Regions as
    /// [`Settings::small`] but silent after two unchanged reads (with one, the resume window is
    /// empty and every restart starts a new epoch), explored from the state where a cut keeps
    /// each Region's records from the other, A (Region 0) has written twice since B last saw it,
    /// and A's daemon has died while its gateways live on. The exploration adds health flips
    /// (`max_faults` of them: the true verdict once the lease has run out, and back), the
    /// lease's and the window's ends, the daemon's restart, every rebalance, delivery and the
    /// heal; only true verdicts. The run must reach [`resume_in_doubt_witness`]: A's daemon
    /// restarted within the resume window and resumed an epoch that B, which counts its silence
    /// from the older record it saw, has closed. Its first rebalance must start a new epoch.
    pub fn restart_after_true_verdict(depth: usize, max_faults: u8) -> Settings {
        use Action::*;
        Settings {
            n: 2,
            demands_rps: vec![6, 6],
            silent_after: 2,
            prefix: vec![
                Rebalance(0),
                Rebalance(1),
                Deliver(0, 1),
                Deliver(1, 0),
                Rebalance(1),
                Cut(1),
                Rebalance(0),
                Rebalance(0),
                Die(0),
            ],
            witness: Some(resume_in_doubt_witness),
            true_verdicts_only: true,
            faults: |a| matches!(a, Action::Flip(_)),
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

    /// [`Settings::changes`] with losses and health flips only, true verdicts only, and the
    /// witness [`stale_basis_witness`]: an heir that has adopted a lowering holds a close of a
    /// lost Region's epoch against a record from before the Region adopted it too, out of the
    /// heir's sight (fuzz seeds 71041621 and 71045361; docs/PROTOCOL.md, "Limit changes against
    /// a stale basis").
    pub fn changes_stale_basis(depth: usize, max_faults: u8) -> Settings {
        Settings {
            witness: Some(stale_basis_witness),
            true_verdicts_only: true,
            faults: |a| matches!(a, Action::Lose(_) | Action::Flip(_)),
            ..Settings::changes(depth, max_faults)
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
    pub(crate) fn rate_of(&self, v: usize) -> Room {
        match v {
            0 | 1 => Room::rps(self.rate_rps),
            _ => Room::rps(self.changes_rps[v - 2]),
        }
    }

    pub(crate) fn last_version(&self) -> usize {
        1 + self.changes_rps.len()
    }

    /// The largest rate of versions 1 to `v`.
    pub(crate) fn largest_to(&self, v: usize) -> Room {
        (1..=v).map(|k| self.rate_of(k)).max().unwrap_or(Room::ZERO)
    }

    /// The deployment at limit version `v`.
    pub(crate) fn at_version(&self, d: &Deployment, v: usize) -> Vec<LimitSpec> {
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
    b_at_a.epoch() == b_last.epoch()
        && b_at_a.version() < b_last.version()
        && (c_at_a.seen()[rb] > (b_at_a.epoch(), b_at_a.version())
            || c_at_a.limits()[0].taken()[rb] > b_at_a.limits()[0].granted()[rc])
}

/// The class of an heir lost while it holds a stale close: Region 1 (B) is lost and reads
/// unhealthy, its record marks the epoch of Region 0 (A) closed against a record older than A's
/// last, and Region 2 (C), running, holds a record of A newer than that mark.
pub fn stale_close_witness(c: &[Coordinator], lost: &[bool], unhealthy: &[bool]) -> bool {
    let ra = rid(0);
    let a_last = c[0].own();
    let Some(mark) = c[1].own().reclaims()[ra] else {
        return false;
    };
    let stale = mark.epoch() == a_last.epoch() && mark.version() < a_last.version();
    lost[1]
        && unhealthy[1]
        && !lost[2]
        && stale
        && c[2]
            .latest(ra)
            .is_some_and(|r| r.epoch() == mark.epoch() && r.version() > mark.version())
}

/// Region 2 (C) is lost and reads unhealthy, its last record marks the epoch of Region 0 (A)
/// at a newer record than the record of C that Region 1 (B), running, holds.
pub fn settled_then_lost_witness(c: &[Coordinator], lost: &[bool], unhealthy: &[bool]) -> bool {
    let (ra, rc) = (rid(0), rid(2));
    let Some(mark) = c[2].own().reclaims()[ra] else {
        return false;
    };
    let older_at_b = c[1]
        .latest(rc)
        .and_then(|r| r.reclaims()[ra])
        .is_some_and(|m| m.epoch() == mark.epoch() && m.version() < mark.version());
    lost[2] && unhealthy[2] && !lost[1] && older_at_b
}

/// Issue 31's survivor class: Region 0 (A) has closed the epoch of Region 1 (B) against a record
/// older than B's newest, and B's newest shows that B took more of A's grants than that record
/// did (a take out of A's sight).
pub fn survivor_takeback_witness(c: &[Coordinator], lost: &[bool], _unhealthy: &[bool]) -> bool {
    let (ra, rb) = (rid(0), rid(1));
    let Some(b_at_a) = c[0].latest(rb) else {
        return false;
    };
    let b_last = c[1].own();
    let closed_stale = c[0].own().reclaims()[rb]
        .is_some_and(|m| m.epoch() == b_last.epoch() && m.version() < b_last.version());
    lost[1]
        && !lost[0]
        && closed_stale
        && b_last.limits()[0].taken()[ra] > b_at_a.limits()[0].taken()[ra]
}

/// Two estates seen out of order: B (Region 1) and C (Region 2) are lost, A (Region 0) marks both,
/// and the newest record of C that A holds says its writer had seen a newer record of B than the
/// one A's mark on B names (room moved from B's estate into C's out of A's sight).
pub fn out_of_order_witness(c: &[Coordinator], lost: &[bool], _unhealthy: &[bool]) -> bool {
    let (rb, rc) = (rid(1), rid(2));
    let a = c[0].own();
    let (Some(mb), Some(mc), Some(c_at_a)) = (a.reclaims()[rb], a.reclaims()[rc], c[0].latest(rc))
    else {
        return false;
    };
    lost[1]
        && lost[2]
        && !lost[0]
        && mc.epoch() == c_at_a.epoch()
        && c_at_a.seen()[rb] > (mb.epoch(), mb.version())
}

/// Fuzz seeds 71041621 and 71045361's class: a running Region has closed a lost Region's current
/// epoch against a record older than the lost Region's last, whose limit version is newer than the
/// basis's, and the heir runs that same version (it counts a lowering its basis predates,
/// `estate::stale_rebase`). An heir that has gone on to a later raise is not of the class: the
/// owner's last record counts its static part at the lowered rate, which the audit expects until
/// the owner's next epoch adopts the raise, while the room exists at the raised rate in force.
pub fn stale_basis_witness(c: &[Coordinator], lost: &[bool], _unhealthy: &[bool]) -> bool {
    let version = |r: &RegionRecord| r.limits().first().map_or(0, |l| l.limit_version());
    (0..c.len()).any(|i| {
        !lost[i]
            && (0..c.len()).any(|j| {
                let (heir, owner) = (c[i].own(), c[j].own());
                j != i
                    && lost[j]
                    && heir.reclaims()[rid(j)].is_some_and(|m| {
                        m.epoch() == owner.epoch()
                            && m.version() < owner.version()
                            && c[i].latest(rid(j)).is_some_and(|b| {
                                version(b) < version(owner) && version(heir) == version(owner)
                            })
                    })
            })
    })
}

/// Swarm seed 70099192's class: a daemon restarted within the resume window holds its epoch
/// unconfirmed (`Coordinator::resume_unconfirmed`) while a peer's record marks that epoch closed.
pub fn resume_in_doubt_witness(c: &[Coordinator], lost: &[bool], _unhealthy: &[bool]) -> bool {
    (0..c.len()).any(|i| {
        !lost[i]
            && c[i].resume_unconfirmed()
            && (0..c.len()).any(|j| {
                j != i
                    && c[j].own().reclaims()[rid(i)]
                        .is_some_and(|m| m.epoch() == c[i].own().epoch())
            })
    })
}

/// The restore race of issue 11 (docs/PROTOCOL.md, "Why fixed portions"): Region 0 (A) and a
/// newer epoch of Region 1 (B), restored after A reclaimed its old one, have both closed the same
/// epoch of Region 2 (C). In the issue A closed C while it still counted B's old epoch reclaimed
/// (a divisor of 1 by its view) and B's new epoch closed C too (a divisor of 2): one and a half
/// estates of C. With an agreed basis B's new epoch closes C only once A has published a freeze of
/// C that names B's new epoch, so A sees B's new epoch first; the state reached is both closes,
/// whose fixed portions must add up to C's estate.
pub fn restore_race_witness(c: &[Coordinator], _lost: &[bool], _unhealthy: &[bool]) -> bool {
    let (a, b) = (c[0].own(), c[1].own());
    let rc = rid(2);
    match (a.reclaims()[rc], b.reclaims()[rc]) {
        (Some(ac), Some(bc)) => bc.by() > 1 && ac.epoch() == bc.epoch(),
        _ => false,
    }
}
