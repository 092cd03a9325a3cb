//! Property tests: random deployments (2-8 Regions, limits, floors, step caps), random demands,
//! rebalance orders and delivery delays. After every step the invariants of SPEC §4 hold exactly.

mod support;

use proptest::prelude::*;
use shareplane_core::*;
use std::collections::VecDeque;
use std::sync::Arc;

/// A small deterministic generator (xorshift64*), seeded by proptest.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Debug, Clone)]
struct Params {
    n: usize,
    rate_rps: u64,
    floor_pct: u64,
    step_pct: u64,
}

fn deployment(p: &Params) -> Arc<Deployment> {
    let names = ["A", "B", "C", "D", "E", "F", "G", "H"];
    let rate = Room::rps(p.rate_rps);
    Arc::new(
        Deployment::try_new(Deployment {
            regions: names[..p.n].iter().map(|s| s.to_string()).collect(),
            limits: vec![LimitSpec {
                id: "l".into(),
                version: 1,
                rate,
                burst_ms: 2_000,
                floor: rate.mul_div(p.floor_pct, 100 * p.n as u64),
                step_cap: rate.mul_div(p.step_pct, 100).max(Room::from_milli(1)),
                kind: LimitKind::Capacity,
                shadow: false,
            }],
            design: Design::NamedGrants,
            policy: SilentPolicy::TwoSignals,
            fence: Fence::OwnUnhealthy,
            silent_after: 3,
            period_ms: 5_000,
        })
        .expect("valid deployment"),
    )
}

/// Regions with queues of records in flight between every pair (in order per writer).
struct Net {
    d: Arc<Deployment>,
    coords: Vec<Coordinator>,
    wire: Vec<Vec<VecDeque<Arc<RegionRecord>>>>,
    demand: Vec<Room>,
    health: PerRegion<Health>,
}

impl Net {
    fn new(d: Arc<Deployment>, rng: &mut Rng) -> Net {
        let n = d.n();
        let coords = (0..n)
            .map(|i| Coordinator::genesis(d.clone(), support::rid(i)))
            .collect();
        let rate = d.limits[0].rate;
        let demand = (0..n).map(|_| rate.mul_div(rng.below(150), 100)).collect();
        let mut health = PerRegion::default();
        for r in regions(n) {
            health[r] = Health::Healthy;
        }
        Net {
            d,
            coords,
            wire: vec![vec![VecDeque::new(); n]; n],
            demand,
            health,
        }
    }

    fn rebalance(&mut self, i: usize) -> Decision {
        let me = support::rid(i);
        let before = self.coords[i].own().limits()[0];
        let seen: Vec<Room> = (0..self.d.n())
            .map(|j| {
                self.coords[i]
                    .latest(support::rid(j))
                    .and_then(|r| r.limits().first().map(|l| l.unmet()))
                    .unwrap_or_default()
            })
            .collect();
        let decision = self.coords[i].rebalance(&Inputs {
            now_ms: 0,
            demand: &self.demand[i..=i],
            health: &self.health,
            explain: true,
        });
        assert_eq!(
            decision.alarms.not_conserved,
            vec![],
            "{me}: a step changed the room it moves"
        );
        self.coords[i].commit(&decision);
        let after = self.coords[i].own().limits()[0];
        let step_cap = self.coords[i].deployment().limits[0].step_cap;
        assert!(
            after.share() <= before.share() + step_cap,
            "{me}: share rose by more than the step cap"
        );
        for (j, g) in decision.outcomes[0]
            .granted
            .0
            .iter()
            .enumerate()
            .take(self.d.n())
        {
            assert!(
                *g <= seen[j],
                "{me} granted {g} to #{j}, which published an unmet need of {}",
                seen[j]
            );
        }
        let rec = Arc::new(self.coords[i].own().clone());
        for to in 0..self.d.n() {
            if to != i {
                self.wire[i][to].push_back(rec.clone());
            }
        }
        decision
    }

    /// Delivers the oldest record in flight from `from` to `to`, if any.
    fn deliver(&mut self, from: usize, to: usize) {
        if let Some(rec) = self.wire[from][to].pop_front() {
            self.coords[to]
                .observe(rec)
                .expect("honest records validate");
        }
    }

    fn deliver_all(&mut self) {
        let n = self.d.n();
        for from in 0..n {
            for to in 0..n {
                while !self.wire[from][to].is_empty() {
                    self.deliver(from, to);
                }
            }
        }
    }

    fn check(&self) {
        let recs: Vec<&RegionRecord> = self.coords.iter().map(|c| c.own()).collect();
        // Every Region runs: the physical audit counts their own room and the grants between them.
        let truth: Vec<Truth<'_>> = recs
            .iter()
            .map(|r| Truth {
                written: &[],
                running: Some(r),
            })
            .collect();
        let c = audit(&self.d, 0, &truth);
        assert!(c.holds(), "conservation: {c:?}");
        let sum: Room = recs.iter().map(|r| r.limits()[0].share()).sum();
        assert!(
            sum <= self.d.limits[0].rate,
            "sum of shares {sum} above the limit"
        );
        // Nobody took more from a grantor than it granted (no grant is taken twice).
        for g in &recs {
            for t in &recs {
                if g.region() != t.region() {
                    assert!(
                        t.limits()[0].taken()[g.region()] <= g.limits()[0].granted()[t.region()]
                    );
                }
            }
        }
    }
}

fn params() -> impl Strategy<Value = (Params, u64)> {
    (
        2usize..=8,
        1u64..=100_000,
        0u64..=60,
        1u64..=40,
        any::<u64>(),
    )
        .prop_map(|(n, rate_rps, floor_pct, step_pct, seed)| {
            (
                Params {
                    n,
                    rate_rps,
                    floor_pct,
                    step_pct,
                },
                seed | 1,
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Random interleavings of rebalances, deliveries and demand changes keep every invariant,
    /// and with demands held constant every share reaches its target within
    /// `ceil(L / step_cap) + 4` full rounds.
    #[test]
    fn invariants_hold_in_every_interleaving((p, seed) in params()) {
        let mut rng = Rng(seed);
        let d = deployment(&p);
        let mut net = Net::new(d.clone(), &mut rng);
        let n = p.n;
        for _ in 0..(40 * n) {
            match rng.below(10) {
                0..=3 => { net.rebalance(rng.below(n as u64) as usize); }
                4..=8 => {
                    let (a, b) = (rng.below(n as u64) as usize, rng.below(n as u64) as usize);
                    if a != b { net.deliver(a, b); }
                }
                _ => {
                    let i = rng.below(n as u64) as usize;
                    net.demand[i] = d.limits[0].rate.mul_div(rng.below(150), 100);
                }
            }
            net.check();
        }
        // Liveness: constant demands, full rounds with every record delivered.
        let rate = d.limits[0].rate.milli();
        let bound = rate.div_ceil(d.limits[0].step_cap.milli()) + 4;
        let mut settled = None;
        for round in 0..bound {
            for i in 0..n {
                net.rebalance(i);
                net.deliver_all();
                net.check();
            }
            let at_target = net.coords.iter().all(|c| {
                let l = c.own().limits()[0];
                shareplane_core::settled_at(l.share(), l.target(), n)
            });
            if at_target { settled = Some(round); break; }
        }
        prop_assert!(settled.is_some(), "shares did not reach targets within {bound} rounds");
    }

    /// A limit change reaching the Regions at different times: the sum of shares never exceeds
    /// the larger of the old and the new rate, and conservation is exact under the new rate once
    /// every Region has adopted it and paid any debt.
    #[test]
    fn limit_change_never_exceeds_the_larger_limit((p, seed) in params(), new_pct in 10u64..=300) {
        let mut rng = Rng(seed);
        let d = deployment(&p);
        let mut net = Net::new(d.clone(), &mut rng);
        let n = p.n;
        for _ in 0..(10 * n) {
            net.rebalance(rng.below(n as u64) as usize);
            net.deliver_all();
        }
        let old = d.limits[0].rate;
        let new = Room::from_milli(old.mul_div(new_pct, 100).milli().max(1_000 * n as u64));
        let mut spec = d.limits[0].clone();
        spec.version = 2;
        spec.rate = new;
        spec.floor = new.mul_div(p.floor_pct, 100 * n as u64);
        spec.step_cap = new.mul_div(p.step_pct, 100).max(Room::from_milli(1));
        let larger = old.max(new);
        let mut adopted = vec![false; n];
        for _ in 0..(40 * n) {
            let i = rng.below(n as u64) as usize;
            if !adopted[i] && rng.below(3) == 0 {
                net.coords[i].set_limits(vec![spec.clone()]).expect("valid new limit");
                adopted[i] = true;
            }
            net.rebalance(i);
            if rng.below(2) == 0 { net.deliver_all(); }
            let sum: Room = net.coords.iter().map(|c| c.own().limits()[0].share()).sum();
            prop_assert!(sum <= larger, "sum {sum} above max({old}, {new})");
            let truth: Vec<Truth<'_>> = net
                .coords
                .iter()
                .map(|c| Truth { written: &[], running: Some(c.own()) })
                .collect();
            let c = audit(net.coords[i].deployment(), 0, &truth);
            prop_assert!(c.holds(), "{c:?}");
        }
        for (i, done) in adopted.iter_mut().enumerate() {
            if !*done { net.coords[i].set_limits(vec![spec.clone()]).expect("valid"); *done = true; }
        }
        for _ in 0..(new.milli().div_ceil(spec.step_cap.milli()) + 6) {
            for i in 0..n { net.rebalance(i); net.deliver_all(); }
        }
        let recs: Vec<&RegionRecord> = net.coords.iter().map(|c| c.own()).collect();
        let held: Delta = recs.iter().map(|r| r.limits()[0].held()).sum();
        let debts: Room = recs.iter().map(|r| r.limits()[0].debt()).sum();
        // Grants move whole units of `n − 1` milli-requests (SPEC D9a), so each pool may keep less
        // than a unit that nobody can grant: a debt may be left only where such fragments, and
        // nothing a grant could move, stand for it (the seed saved in the regressions file on
        // 2026-12-07 ends owing one unit of 4 milli-requests against pools of 1 and 3, on the
        // rules before the agreed basis as after it).
        let unit = (n as u64 - 1).max(1);
        let fragments: Room = recs.iter().map(|r| r.limits()[0].pool()).sum();
        if debts > Room::ZERO {
            prop_assert!(
                recs.iter().all(|r| r.limits()[0].pool().milli() < unit),
                "a grantable pool left a debt unpaid: {recs:?}"
            );
            prop_assert!(debts <= fragments, "debts {debts} beyond the pools' fragments {fragments}");
        }
        prop_assert_eq!(held, Delta::of(new), "room held after the change");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Only a lowered share reaches the gateways before the write: every rate is at most both
    /// the published and the decided one, a limit not lowered keeps its published rule, and
    /// nothing is pushed when nothing is lower.
    #[test]
    fn the_push_before_a_write_only_ever_lowers(
        rules in proptest::collection::vec((0u64..5_000, 0u64..5_000, 0u64..10_000, any::<bool>()), 0..6)
    ) {
        let rule = |rate: u64, burst: u64, shadow: bool| Rule { rate: Room::rps(rate), burst: Room::rps(burst), shadow };
        let published: Vec<Rule> = rules.iter().map(|(p, _, b, _)| rule(*p, *b, false)).collect();
        let decided: Vec<Rule> = rules.iter().map(|(_, d, b, s)| rule(*d, b / 2, *s)).collect();
        let early = Rule::before_write(&published, &decided);
        let any_lower = rules.iter().any(|(p, d, _, _)| d < p);
        prop_assert_eq!(early.is_some(), any_lower);
        if let Some(early) = early {
            for ((e, p), d) in early.iter().zip(&published).zip(&decided) {
                prop_assert_eq!(e.rate, p.rate.min(d.rate));
                prop_assert_eq!(e.shadow, d.shadow);
                if d.rate >= p.rate {
                    prop_assert_eq!(e.burst, p.burst, "a limit not lowered keeps its rule");
                } else {
                    prop_assert_eq!(*e, *d);
                }
            }
        }
        // Rule sets for different limits (a reload in between) push nothing early.
        let mut longer = published.clone();
        longer.push(rule(1, 2, false));
        prop_assert_eq!(Rule::before_write(&longer, &decided), None);
    }
}
