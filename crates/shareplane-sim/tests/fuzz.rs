//! The fault fuzzer: regression seeds, a CI-sized run, and checks that the checker can fail.

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use shareplane_core::Design;
use shareplane_sim::fuzz;
use shareplane_sim::scenario::{Action, Scenario};
use shareplane_sim::swarm::{self, Family};
use std::path::PathBuf;

/// Seeds (first column) of a list in simulations/.
fn seeds(file: &str) -> Vec<u64> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../simulations")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(|l| l.parse().unwrap_or_else(|e| panic!("{file}: {l:?}: {e}")))
        .collect()
}

#[test]
fn every_regression_seed_passes() {
    let list = seeds("fuzz-regressions.txt");
    assert!(!list.is_empty());
    for seed in list {
        if let Err(f) = fuzz::check(&fuzz::generate(seed)) {
            panic!("seed {seed} failed again: {f}\n  replay: shareplane sim fuzz --seeds 1 --start {seed}");
        }
    }
}

/// Swarm seeds that failed within the protocol's assumptions and pass since "Grants in flight"
/// (docs/PROTOCOL.md): 30550635, 30552851 and 30554555 (the running shares 0.4%, 0.4% and 1.6%
/// of L above L under the take-backs before), and 40044107 (2.4% of L for 2.6 s: an heir settled
/// one estate up from a newer record before the other, from which the room had moved, down);
/// and 40056179, 40056969 and 40093047, which ended with part of an estate held by nobody: the
/// stores collected an ended epoch's last record while a lost heir still marked it and had yet to
/// settle its part up (`closed_for_good` now waits until every heir marks a later epoch); and
/// 50029992 (3.5% of L above L for 2.6 s after a heal: a survivor closed an estate while the
/// peer cut off with it was one read short of silent, so the basis in doubt now counts any peer
/// whose record stopped changing); and 70099192 (room counted twice with R0's running epoch:
/// R0's daemon restarted within the resume window 0.2 s after R1, cut off from it for a minute,
/// closed its epoch on a true verdict; a restart now resumes only when every peer's record shows
/// it saw the durable record or the one before, and the simulator's gateways hold the resumed
/// record under its lease until the first write, as the daemon's do); and 71041621 and 71045361
/// (3.4% and 0.02% of L above L: heirs closed the estate of a Region lost inside a cut against
/// its record from before a lowered limit, which the Region had adopted out of their sight; an
/// heir now counts the lowering in a stale basis, `estate::stale_rebase`), and 71041588 (outside
/// the assumptions: the shares passed L by the debts that ended epochs left to heirs that had
/// settled stale closes down, which the bound outside them now counts as it counts the running
/// Regions' debts); and 30104602 and 72226030 (one milli-request above L: an heir that closed
/// two estates against records from before room moved between them held one unit more than their
/// last records left it, or one unit less once settled, carried as a debt; the even split was not
/// exact under such a move, and is since grants come in whole units, `estate::grant_unit`, and
/// the split rounds down whatever the sign: nothing of it is excused any more); and 78041417
/// (1,180/s counted twice in the records with every verdict true: two survivors, cut off one way
/// from an estate and from the Region that took its later grants, closed it against its record
/// from before the cut, while a held record of a third lost Region referred to that Region's
/// newer record; a basis is now in doubt while any held record refers to a lost Region's record
/// not held, `refers_past_lost`).
#[test]
fn swarm_regression_seeds_pass() {
    for seed in [
        30_104_602, 30_550_635, 30_552_851, 30_554_555, 40_044_107, 40_056_179, 40_056_969,
        40_093_047, 50_029_992, 70_099_192, 71_041_588, 71_041_621, 71_045_361, 72_226_030,
        78_041_417,
    ] {
        let sc = swarm::Family::Swarm.generate(seed);
        if let Err(f) = fuzz::check(&sc) {
            panic!("swarm seed {seed} failed again: {f}");
        }
    }
}

/// Fresh seeds that failed on 2026-12-07's third-round rules and pass since an inheritance
/// belongs to the epoch that closed it (docs/PROTOCOL.md, "Inheritances belong to the epoch that
/// closed them"; risk 4, the fourth round): 14 stale-close seeds (up to 16.6% of L twice in the
/// records; 74852979 2,695/s above L in the shares: the lost heir's next epoch settled its earlier
/// epoch's stale close of the owner's estate down as a debt while that epoch's heirs held the
/// room) and swarm seed 74852830 (3.9% of L twice in the records).
#[test]
fn an_ended_heirs_stale_inheritance_regression_seeds_pass() {
    let stale_close = [
        74_800_303, 74_809_641, 74_814_017, 74_816_823, 74_818_801, 74_819_428, 74_852_979,
        74_864_336, 74_870_178, 74_872_875, 74_882_580, 74_884_021, 74_888_208, 74_889_571,
    ];
    let seeds = (stale_close.iter().map(|&s| (Family::StaleClose, s)))
        .chain(std::iter::once((Family::Swarm, 74_852_830)));
    for (family, seed) in seeds {
        if let Err(f) = fuzz::check(&family.generate(seed)) {
            panic!("{family:?} seed {seed} failed again: {f}");
        }
    }
}

/// Fresh stale-close seeds of 2026-12-07 that put the running Regions' shares above L with every
/// verdict true, on the fourth round's rules (docs/PROTOCOL.md, "A deficit is carried where the
/// room went" and "A debt is paid before anything is raised"; risk 4, the fifth round). The
/// records added up; the excess was debts. 77013647, 77024643, 77158575 and 77162188: an heir
/// that held nothing (the owner's next epoch, back last) was left its portion of an ended heir's
/// estate in deficit, while the room that deficit stood for was in the hands of the Region that
/// heir had granted it to. 77059042, 77116423 and 77171744: an heir settled down as a debt (it had
/// granted the room on), its record lifted a co-heir's freeze, and that co-heir took the
/// owner's grants into its pool and raised its share from them.
#[test]
fn a_debt_nobody_can_pay_regression_seeds_pass() {
    for seed in [
        77_013_647, 77_024_643, 77_059_042, 77_116_423, 77_158_575, 77_162_188, 77_171_744,
    ] {
        if let Err(f) = fuzz::check(&Family::StaleClose.generate(seed)) {
            panic!("stale-close seed {seed} failed again: {f}");
        }
    }
}

/// Fresh swarm seeds of 2026-12-07 that ended with room held by nobody after a false verdict,
/// on the fourth round's rules, and pass since a Region keeps every record that a record it acts
/// on refers to (`Coordinator::referenced`): in 77053068 an heir valued an ended estate, two
/// inheritances deep, without the last record of one of its own earlier epochs, which said how
/// much of that inherited estate's grants the epoch took (dropped once every heir had closed the
/// epoch); it settled down by what it no longer knew and moved its mark on. 26.724/s to
/// 582.375/s left with nobody for good.
///
/// 77015495, 77033701, 77038286 and 77079816 (and 77006211 again) pass since an estate that
/// inherited counts as one that may still grow while an estate it inherited may
/// (`Coordinator::estate_may_grow`): in 77079816 an heir switched past an ended estate whose
/// inheritance still had grants in flight to a running epoch; that epoch ended without taking
/// them, the estate grew, and 70.721/s was left with nobody.
#[test]
fn an_estate_valued_with_what_it_refers_to_strands_nothing_regression_seeds_pass() {
    for seed in [
        77_006_211, 77_015_495, 77_018_512, 77_031_647, 77_033_701, 77_038_286, 77_053_068,
        77_079_816,
    ] {
        if let Err(f) = fuzz::check(&Family::Swarm.generate(seed)) {
            panic!("swarm seed {seed} failed again: {f}");
        }
    }
}

/// How many seeds the CI-sized run checks: `SHAREPLANE_FUZZ_SEEDS`, or 400 for a plain
/// `cargo test` (tests/run-all.sh runs it with 20,000 on a release build), from
/// `SHAREPLANE_FUZZ_START` (default 1).
fn ci_seeds() -> (u64, u64) {
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    (
        var("SHAREPLANE_FUZZ_START", 1),
        var("SHAREPLANE_FUZZ_SEEDS", 400),
    )
}

/// A CI-sized run. Every seed must pass: a finding fails CI (there is no list of seeds allowed
/// to fail). The residual risks the checker measures instead of failing (false verdicts while
/// they last, heirs that reclaimed from a stale record) have stated bounds it enforces.
#[test]
fn ci_sized_fuzz_run() {
    let (start, seeds) = ci_seeds();
    let began = std::time::Instant::now();
    let (totals, failures) = swarm::run_seeds(start, seeds, swarm::default_jobs());
    let wall_s = began.elapsed().as_secs_f64();
    let failed: Vec<String> = failures
        .iter()
        .map(|(seed, f)| {
            format!("seed {seed}: {f} (replay: shareplane sim fuzz --seeds 1 --start {seed})")
        })
        .collect();
    println!("{}", totals.report(seeds, failed.len() as u64));
    println!(
        "{}",
        swarm::throughput(seeds, wall_s, swarm::default_jobs())
    );
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert!(
        totals.with_false_verdict > 0,
        "the generator draws false verdicts"
    );
}

/// The CI-sized run of the swarm, cascade and stale-close families (tests/run-all.sh's filter
/// `ci_sized_fuzz_run` selects this test too): `SHAREPLANE_FUZZ_SWARM_SEEDS` swarm seeds
/// (default a quarter of `SHAREPLANE_FUZZ_SEEDS`), `SHAREPLANE_FUZZ_CASCADE_SEEDS` cascade seeds
/// and `SHAREPLANE_FUZZ_STALE_CLOSE_SEEDS` stale-close seeds (default a tenth each), from
/// `SHAREPLANE_FUZZ_START`. Judged by the same checks as the
/// classic seeds; every seed must pass. Prints each family's figures, its throughput, and for
/// each failure how far the running Regions' shares went above L.
#[test]
fn ci_sized_fuzz_run_swarm_and_cascade() {
    let (start, seeds) = ci_seeds();
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let jobs = swarm::default_jobs();
    let mut failed = Vec::new();
    for (family, count) in [
        (Family::Swarm, var("SHAREPLANE_FUZZ_SWARM_SEEDS", seeds / 4)),
        (
            Family::Cascade,
            var("SHAREPLANE_FUZZ_CASCADE_SEEDS", seeds / 10),
        ),
        (
            Family::StaleClose,
            var("SHAREPLANE_FUZZ_STALE_CLOSE_SEEDS", seeds / 10),
        ),
    ] {
        if count == 0 {
            continue;
        }
        let began = std::time::Instant::now();
        let (totals, failures) = swarm::run(family, start, count, jobs);
        let wall_s = began.elapsed().as_secs_f64();
        println!(
            "family {}: {}\n{}",
            family.name(),
            totals.report(count, failures.len() as u64),
            swarm::throughput(count, wall_s, jobs)
        );
        for (seed, f) in failures {
            let peak = swarm::excess(&family.generate(seed)).map_or_else(|e| e, |x| x.to_string());
            failed.push(format!(
                "{} seed {seed}: {f}\n  {peak}\n  replay: {}",
                family.name(),
                family.replay(seed)
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "{} seeds failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

#[test]
fn the_checker_catches_an_overshooting_design() {
    // Jump-to-target overshoots while views disagree: the same checks must reject it. Without
    // "unhealthy" verdicts nothing is measured instead of checked, so every tick is judged.
    let mut caught = 0;
    for seed in 1..=20u64 {
        let mut sc = fuzz::generate(seed);
        sc.design = Design::JumpToTarget;
        sc.events
            .retain(|e| !matches!(e.action, Action::Unhealthy(_)));
        if fuzz::check(&sc).is_err() {
            caught += 1;
        }
    }
    println!("jump-to-target caught in {caught} of 20 seeds");
    assert!(
        caught > 10,
        "only {caught} of 20 jump-to-target runs failed the checks"
    );
}

#[test]
fn seeds_are_deterministic_and_replay_through_a_scenario_file() {
    for seed in [1u64, 2, 77, 1234] {
        let sc = fuzz::generate(seed);
        assert_eq!(sc, fuzz::generate(seed));
        let mut parsed =
            Scenario::parse(&fuzz::to_toml(&sc)).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        for e in parsed.events.iter_mut() {
            e.line = 0;
        }
        parsed.plot_from_tick = sc.plot_from_tick;
        parsed.plot_to_tick = sc.plot_to_tick;
        assert_eq!(
            parsed, sc,
            "seed {seed}: the printed scenario is the generated one"
        );
    }
}

#[test]
fn swarm_and_cascade_seeds_are_deterministic_and_replay_through_a_scenario_file() {
    for family in [Family::Swarm, Family::Cascade, Family::StaleClose] {
        for seed in 1..=60u64 {
            let sc = family.generate(seed);
            assert_eq!(sc, family.generate(seed));
            // Parsing checks every rule a file must keep, the order of losses, restores and
            // daemon deaths among them.
            let mut parsed = Scenario::parse(&fuzz::to_toml(&sc))
                .unwrap_or_else(|e| panic!("{} seed {seed}: {e}", family.name()));
            for e in parsed.events.iter_mut() {
                e.line = 0;
            }
            parsed.plot_from_tick = sc.plot_from_tick;
            parsed.plot_to_tick = sc.plot_to_tick;
            assert_eq!(parsed, sc, "{} seed {seed}", family.name());
        }
    }
}

/// Whether every "unhealthy" verdict in `sc` is true when it is given: its Region is lost, or
/// its daemon has been dead for at least the lease.
fn verdicts_are_true(sc: &Scenario) -> bool {
    let lease = shareplane_sim::engine::lease_ticks(sc).unwrap_or(i64::MAX);
    let n = sc.regions.len();
    let (mut lost, mut died) = (vec![false; n], vec![None; n]);
    sc.events.iter().all(|e| match e.action {
        Action::Lose(r) => {
            lost[r] = true;
            died[r] = None;
            true
        }
        Action::Restore(r) => {
            lost[r] = false;
            true
        }
        Action::KillDaemon(r) => {
            died[r] = Some(e.at_tick);
            true
        }
        Action::RestartDaemon(r) => {
            died[r] = None;
            true
        }
        Action::Unhealthy(r) => lost[r] || died[r].is_some_and(|d| e.at_tick - d >= lease),
        _ => true,
    })
}

/// Each swarm seed enables its own subset of fault kinds, and the schedules lean towards
/// cascades: a one-way cut with two losses within 5 s, a restore while a cut holds.
#[test]
fn swarm_seeds_enable_subsets_of_kinds_and_draw_cascades() {
    let mut masks = std::collections::BTreeSet::new();
    let (mut two_losses_under_one_way, mut restored_under_cut) = (0, 0);
    for seed in 1..=300u64 {
        let kinds = swarm::kinds(seed);
        masks.insert(kinds);
        let sc = swarm::generate(seed);
        let (mut cut, mut one_way, mut losses) = (false, false, Vec::new());
        let faults_end = sc.events.iter().map(|e| e.at_tick).max().unwrap_or(0);
        let mut restore_under_cut = false;
        for e in &sc.events {
            match e.action {
                Action::OneWayCut(..) => (cut, one_way) = (true, true),
                Action::Cut(_) => cut = true,
                Action::Heal => cut = false,
                Action::Lose(_) => losses.push(e.at_tick),
                Action::Restore(_) if cut && e.at_tick < faults_end => restore_under_cut = true,
                _ => {}
            }
        }
        let close = losses.windows(2).any(|w| w[1] - w[0] <= 50);
        two_losses_under_one_way += u32::from(one_way && close);
        restored_under_cut += u32::from(restore_under_cut);
        let names = swarm::kind_names(kinds);
        if !names.contains(&"false unhealthy verdicts") {
            assert!(
                verdicts_are_true(&sc),
                "swarm seed {seed} ({names:?}): a false verdict"
            );
        }
    }
    println!("300 swarm seeds: {} subsets of kinds, a one-way cut and two losses within 5 s in {two_losses_under_one_way}, a restore under a cut in {restored_under_cut}", masks.len());
    assert!(masks.len() > 100, "only {} subsets of kinds", masks.len());
    assert!(two_losses_under_one_way > 15, "{two_losses_under_one_way}");
    assert!(restored_under_cut > 15, "{restored_under_cut}");
}

/// The cascade family draws issue 31's shape: a one-way cut, demand moved, two Regions lost
/// within 5 s with true verdicts, one restored while the cut holds (in most seeds), the heal,
/// the other restored.
#[test]
fn cascade_seeds_have_the_issue_shape() {
    let mut restored_under_cut = 0;
    for seed in 1..=200u64 {
        let sc = swarm::Family::Cascade.generate(seed);
        let at = |f: &dyn Fn(&Action) -> bool| -> Vec<i64> {
            sc.events
                .iter()
                .filter(|e| f(&e.action))
                .map(|e| e.at_tick)
                .collect()
        };
        let cuts = at(&|a| matches!(a, Action::OneWayCut(..)));
        let heals = at(&|a| matches!(a, Action::Heal));
        let losses = at(&|a| matches!(a, Action::Lose(_)));
        let restores = at(&|a| matches!(a, Action::Restore(_)));
        let verdicts = at(&|a| matches!(a, Action::Unhealthy(_)));
        assert_eq!((cuts.len(), heals.len()), (1, 1), "seed {seed}");
        assert_eq!(
            (losses.len(), restores.len(), verdicts.len()),
            (2, 2, 2),
            "seed {seed}"
        );
        assert!(
            losses[1] - losses[0] <= 50,
            "seed {seed}: losses within 5 s"
        );
        assert!(cuts[0] < losses[0], "seed {seed}");
        assert!(verdicts_are_true(&sc), "seed {seed}: a false verdict");
        restored_under_cut += u32::from(restores[0] < heals[0]);
    }
    assert!(
        restored_under_cut > 150,
        "{restored_under_cut} of 200 restored under the cut"
    );
}

/// The stale-close family draws its shape: a one-way cut from O around a demand shift (and in a
/// third of the seeds one from H to G), O lost and then H, each with a true verdict, the heal,
/// both restored; in most seeds H is lost only once the heirs may have closed O.
#[test]
fn stale_close_seeds_have_their_shape() {
    let (mut late, mut hidden_heir) = (0, 0);
    for seed in 1..=200u64 {
        let sc = swarm::Family::StaleClose.generate(seed);
        let at = |f: &dyn Fn(&Action) -> bool| -> Vec<(i64, Action)> {
            sc.events
                .iter()
                .filter(|e| f(&e.action))
                .map(|e| (e.at_tick, e.action.clone()))
                .collect()
        };
        let cuts = at(&|a| matches!(a, Action::OneWayCut(..)));
        let heals = at(&|a| matches!(a, Action::Heal));
        let losses = at(&|a| matches!(a, Action::Lose(_)));
        let restores = at(&|a| matches!(a, Action::Restore(_)));
        assert!(
            matches!(cuts.len(), 1 | 2) && heals.len() == 1,
            "seed {seed}"
        );
        assert_eq!((losses.len(), restores.len()), (2, 2), "seed {seed}");
        hidden_heir += u32::from(cuts.len() == 2);
        let (Action::OneWayCut(from, to), Action::Lose(o), Action::Lose(h)) =
            (&cuts[0].1, &losses[0].1, &losses[1].1)
        else {
            panic!("seed {seed}: {:?}", sc.events);
        };
        assert_eq!(*from, 1 << o, "seed {seed}: the cut is from the first lost");
        assert!(
            to & (1 << h) != 0,
            "seed {seed}: and hides it from the second"
        );
        assert!(
            losses[0].0 < losses[1].0 && losses[1].0 < heals[0].0,
            "seed {seed}"
        );
        assert!(verdicts_are_true(&sc), "seed {seed}: a false verdict");
        let close = cuts[0].0 + sc.period_ticks as i64 * i64::from(sc.silent_after);
        late += u32::from(losses[1].0 > close);
    }
    assert!(
        late > 120,
        "{late} of 200 lose H after the heirs may have closed O"
    );
    assert!(
        hidden_heir > 40,
        "{hidden_heir} of 200 hide H's records from G too"
    );
}

#[test]
fn the_figures_do_not_depend_on_the_number_of_threads() {
    let (one, f1) = swarm::run_seeds(1, 40, 1);
    let (three, f3) = swarm::run_seeds(1, 40, 3);
    assert_eq!(f1, f3);
    assert_eq!(
        one.report(40, f1.len() as u64),
        three.report(40, f3.len() as u64)
    );
    assert_eq!(one.passed + f1.len() as u64, 40);
}

/// Fuzz seed 1544524: an heir cut off for two minutes reclaimed a live Region on a 1.1 s false
/// verdict, against a record from before the cut, and the shares stayed 6.8% of L above L for
/// 9.7 s after the fence's window. That heir counted silent a third Region whose check read
/// healthy: it now waits (the estate may have moved room to that Region), so it closes no running
/// epoch and holds nothing twice. The audit's split of a take from a running epoch, for the case
/// that no local rule prevents, is tested in crates/shareplane-core/tests/policies.rs
/// (`a_heir_with_a_slow_view_of_a_fresh_peer_takes_stale_room_and_the_audit_splits_it`).
#[test]
fn a_heir_cut_off_from_a_healthy_region_closes_no_running_epoch() {
    let sc = fuzz::generate(1544524);
    let (mut running, mut stale, mut false_ticks) = (0u32, 0u32, 0u32);
    shareplane_sim::engine::run(&sc, &mut |row| {
        running += u32::from(row.audit.running_reclaimed != 0);
        stale += u32::from(row.audit.over_stale.is_positive());
        false_ticks += u32::from(row.false_verdict);
    })
    .expect("the scenario runs");
    assert!(false_ticks > 0, "the seed still draws its false verdict");
    assert_eq!(running, 0, "ticks at which a running epoch was closed");
    assert_eq!(
        stale, 0,
        "ticks at which room taken from a stale record was held"
    );
    fuzz::check(&sc).expect("the seed passes");
}
